use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "Ids")]
struct Id(i64, String);

fn main() {}
