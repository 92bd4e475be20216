use spanner_queues::QueueMessage;

#[derive(QueueMessage, serde::Serialize)]
#[queue(name = "Profiles")]
#[serde(rename_all = "camelCase")]
struct Profile {
    #[queue(key)]
    user_id: i64,
    #[serde(rename = "mail", alias = "email")]
    email_address: String,
    #[serde(default)]
    visits: u32,
}

fn main() {}
