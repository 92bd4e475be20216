use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "OrderEmails", priority = 3)]
struct OrderEmail {
    #[queue(key, primary)]
    order_id: i64,
    #[queue(column = "Subject")]
    subject: String,
}

fn main() {}
