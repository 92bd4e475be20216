use spanner_queues::QueueMessage;

#[derive(QueueMessage)]
#[queue(name = "Mails")]
#[serde(tag = "type")]
struct Mail {
    #[queue(key)]
    #[serde(rename = "ID")]
    id: i64,
    #[serde(skip)]
    cache: String,
}

fn main() {}
