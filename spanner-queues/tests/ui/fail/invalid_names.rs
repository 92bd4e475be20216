use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "order-emails")]
struct OrderEmail {
    #[queue(key)]
    payload: i64,
    #[queue(key, column = "1st")]
    first: String,
    #[queue(key, column = "order_id")]
    order_id: i64,
}

fn main() {}
