// Hand-written constants are checked too: an invalid name is a compile error.
use spanner_queues::ident::{ColumnName, QueueName};

const QUEUE: QueueName = QueueName::from_static("order-emails");
const COLUMN: ColumnName = ColumnName::from_static("DeliverTime");

fn main() {
    let _ = (QUEUE, COLUMN);
}
