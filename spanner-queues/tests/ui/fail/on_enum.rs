use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "Events")]
enum Event {
    Created { id: i64 },
    Deleted { id: i64 },
}

fn main() {}
