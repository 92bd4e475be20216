use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
}

fn main() {}
