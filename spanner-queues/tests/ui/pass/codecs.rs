//! A passing case of `#[derive(QueueMessage)]`, run as a program of its own (a test target
//! with `harness = false`): it must compile, and its `main` must not panic.

use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "Blobs", payload = "bytes")]
struct Blob {
    #[queue(key)]
    id: String,
    data: Vec<u8>,
}

#[derive(QueueMessage)]
#[queue(name = "Notes", payload = "string")]
struct Note {
    #[queue(key)]
    at: time::OffsetDateTime,
    text: String,
}

#[derive(QueueMessage)]
#[queue(name = "TextJson", payload = "json", payload_type = "STRING")]
struct TextJson {
    #[queue(key)]
    day: time::Date,
    #[queue(key)]
    amount: google_cloud_spanner::Decimal,
    #[queue(key)]
    flag: bool,
}

fn main() {
    let _ = (Blob::schema(), Note::schema(), TextJson::schema());
}
