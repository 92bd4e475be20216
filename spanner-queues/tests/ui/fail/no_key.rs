use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    order_id: i64,
    subject: String,
}

fn main() {}
