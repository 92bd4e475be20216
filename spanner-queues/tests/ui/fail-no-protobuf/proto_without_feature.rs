use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "Stamps", payload = "proto")]
struct Stamp {
    #[queue(key)]
    id: i64,
    at: String,
}

fn main() {}
