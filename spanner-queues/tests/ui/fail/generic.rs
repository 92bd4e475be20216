use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "Wrapped")]
struct Wrapped<T> {
    #[queue(key)]
    id: i64,
    inner: T,
}

fn main() {}
