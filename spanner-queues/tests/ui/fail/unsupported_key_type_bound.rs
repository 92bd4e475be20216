use spanner_queues::QueueMessage;

#[derive(Clone, Debug)]
struct CustomerId(i64);

#[derive(QueueMessage)]
#[queue(name = "Customers")]
struct Customer {
    #[queue(key)]
    id: CustomerId,
}

fn main() {}
