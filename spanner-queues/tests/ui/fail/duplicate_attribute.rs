use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "OrderEmails")]
#[queue(name = "Emails")]
struct OrderEmail {
    #[queue(key, key)]
    order_id: i64,
    #[queue(key, column = "A", column = "B")]
    id: String,
}

fn main() {}
