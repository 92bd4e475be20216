use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "Prices")]
struct Price {
    #[queue(key)]
    amount: f64,
    #[queue(key)]
    count: u32,
}

fn main() {}
