//! A passing case of `#[derive(QueueMessage)]`, run as a program of its own (a test target
//! with `harness = false`): it must compile, and its `main` must not panic.
#![allow(unreachable_pub)] // `sq` stands for a crate that re-exports the SDK

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
