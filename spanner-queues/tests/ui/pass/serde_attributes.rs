//! A passing case of `#[derive(QueueMessage)]`, run as a program of its own (a test target
//! with `harness = false`): it must compile, and its `main` must not panic.
#![allow(dead_code)] // the type only has to compile

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
