//! A passing case of `#[derive(QueueMessage)]`, run as a program of its own (a test target
//! with `harness = false`): it must compile, and its `main` must not panic.

use spanner_queues::QueueMessage;

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
    #[queue(key, column = "EmailId", desc)]
    id: uuid::Uuid,
    subject: String,
    body: Option<String>,
}

fn main() {
    let key: (i64, uuid::Uuid) = OrderEmail {
        order_id: 1,
        id: uuid::Uuid::nil(),
        subject: String::new(),
        body: None,
    }
    .key();
    assert_eq!(key.0, 1);
}
