use spanner_queues::QueueMessage;

struct Attachment {
    name: String,
}

#[derive(QueueMessage)]
#[queue(name = "Mails")]
struct Mail {
    #[queue(key)]
    id: i64,
    attachment: Attachment,
}

fn main() {}
