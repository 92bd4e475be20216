mod sq {
    pub use spanner_queues::*;
}

#[derive(sq::QueueMessage)]
#[queue(name = "Reexported", crate = "crate::sq")]
struct Reexported {
    #[queue(key)]
    id: i64,
}

fn main() {
    assert_eq!(<Reexported as sq::QueueMessage>::QUEUE, "Reexported");
}
