use spanner_queues::QueueMessage;

// The sequence is the SDK's: no field of the type holds it.
#[derive(QueueMessage)]
#[queue(name = "Turns", ordered)]
struct Turn {
    #[queue(key)]
    conversation: i64,
    #[queue(key, sequence)]
    seq: i64,
    text: String,
}

// A sequence column name without `ordered`.
#[derive(QueueMessage)]
#[queue(name = "Plain", sequence_column = "Seq")]
struct Plain {
    #[queue(key)]
    id: i64,
}

// A key field already named like the sequence column the SDK adds.
#[derive(QueueMessage)]
#[queue(name = "Clash", ordered)]
struct Clash {
    #[queue(key)]
    conversation: i64,
    #[queue(key)]
    sequence: i64,
}

fn main() {}
