use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "Blobs", payload = "bytes")]
struct Blob {
    #[queue(key)]
    id: String,
    data: Vec<u8>,
    checksum: Vec<u8>,
}

#[derive(QueueMessage)]
#[queue(name = "Notes", payload = "string")]
struct Note {
    #[queue(key)]
    id: String,
    text: Vec<u8>,
}

fn main() {}
