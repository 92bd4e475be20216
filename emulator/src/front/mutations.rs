//! Rewriting `Mutation.Send` / `Mutation.Ack` into mutations the official emulator knows.
//!
//! - `Send{queue, key, deliver_time, payload}` → `Insert` into the queue's table with the key
//!   columns, `Payload` and `DeliverTime` (absent or past → now). A key that is still queued
//!   makes the insert fail with `ALREADY_EXISTS`, as in Spanner.
//! - `Ack{queue, key}` → `Update` of the key columns only (which fails with `NOT_FOUND` when the
//!   row is gone, making the whole commit fail) followed by `Delete`. With `ignore_not_found`,
//!   only the `Delete`.
//! - Direct mutations on a queue table: `Insert` is a send, `Delete` a cancel/ack; `Update`,
//!   `InsertOrUpdate` and `Replace` are refused (queues do not support updates).

use std::time::SystemTime;

use tonic::Status;

use super::proto::spanner::mutation::{Ack, Delete, Operation, Send, Write};
use super::proto::spanner::{KeySet, Mutation};
use super::proto::{ListValue, string_value, system_time, timestamp_string};
use crate::ddl::{Catalog, QueueDef};

/// What a rewritten batch of mutations did to queues.
#[derive(Debug, Default)]
pub(crate) struct Rewritten {
    /// The mutations to send to the backend.
    pub(crate) mutations: Vec<Mutation>,
    /// Queues that received an `Ack` that must find its message.
    pub(crate) strict_acks: Vec<String>,
    /// Number of queue operations (for logging).
    pub(crate) queue_ops: usize,
}

/// Rewrites `mutations` for the backend.
pub(crate) fn rewrite(
    catalog: &Catalog,
    mutations: Vec<Mutation>,
    now: SystemTime,
) -> Result<Rewritten, Status> {
    let mut out = Rewritten {
        mutations: Vec::with_capacity(mutations.len()),
        ..Rewritten::default()
    };
    // Keys acked earlier in this commit (and not sent again since): a second strict Ack of one
    // of them must fail with NOT_FOUND, which the backend cannot say (it reports its guard
    // update after the delete as INVALID_ARGUMENT "deleted and then updated").
    let mut acked: Vec<(String, Vec<u8>)> = Vec::new();
    for mutation in mutations {
        match mutation.operation {
            Some(Operation::Send(send)) => {
                let queue = queue_for_send(catalog, &send.queue)?;
                let marker = key_marker(&queue.name, send.key.as_ref());
                acked.retain(|m| *m != marker);
                out.mutations.push(send_to_insert(queue, send, now)?);
                out.queue_ops += 1;
            }
            Some(Operation::Ack(ack)) => {
                let queue = known_queue(catalog, &ack.queue)?;
                let strict = !ack.ignore_not_found;
                let marker = key_marker(&queue.name, ack.key.as_ref());
                if strict && acked.contains(&marker) {
                    return Err(Status::not_found("Message not found"));
                }
                acked.push(marker);
                let (update, delete) = ack_to_writes(queue, ack)?;
                if strict {
                    out.mutations.push(update);
                    out.strict_acks.push(queue.name.clone());
                }
                out.mutations.push(delete);
                out.queue_ops += 1;
            }
            Some(Operation::Insert(write)) if catalog.is_queue(&write.table) => {
                queue_for_send(catalog, &write.table)?;
                // Its rows may re-send acked keys: leave those to the backend.
                let queue = write.table.to_ascii_lowercase();
                acked.retain(|(q, _)| *q != queue);
                out.queue_ops += 1;
                out.mutations.push(Mutation {
                    operation: Some(Operation::Insert(write)),
                });
            }
            Some(
                Operation::Update(Write { table, .. })
                | Operation::InsertOrUpdate(Write { table, .. })
                | Operation::Replace(Write { table, .. }),
            ) if catalog.is_queue(&table) => {
                return Err(Status::invalid_argument(format!(
                    "Queue {table} does not support updates: to change a message, ack it and \
                     send it again in the same transaction"
                )));
            }
            operation => out.mutations.push(Mutation { operation }),
        }
    }
    Ok(out)
}

/// Identifies one key of one queue within a commit (the queue name folded to lower case).
fn key_marker(queue: &str, key: Option<&ListValue>) -> (String, Vec<u8>) {
    use prost::Message as _;
    (
        queue.to_ascii_lowercase(),
        key.map(|k| k.encode_to_vec()).unwrap_or_default(),
    )
}

/// Rewrites the `mutation_key` of a `BeginTransaction` (it only selects what to lock first).
pub(crate) fn rewrite_mutation_key(
    catalog: &Catalog,
    mutation: Mutation,
    now: SystemTime,
) -> Result<Mutation, Status> {
    match mutation.operation {
        Some(Operation::Send(send)) => {
            let queue = known_queue(catalog, &send.queue)?;
            send_to_insert(queue, send, now)
        }
        Some(Operation::Ack(ack)) => {
            let queue = known_queue(catalog, &ack.queue)?;
            Ok(ack_to_writes(queue, ack)?.1)
        }
        operation => Ok(Mutation { operation }),
    }
}

fn known_queue<'a>(catalog: &'a Catalog, name: &str) -> Result<&'a QueueDef, Status> {
    if name.is_empty() {
        return Err(Status::invalid_argument("The queue name must be set"));
    }
    catalog
        .queue(name)
        .ok_or_else(|| Status::not_found(format!("Queue not found: {name}")))
}

fn queue_for_send<'a>(catalog: &'a Catalog, name: &str) -> Result<&'a QueueDef, Status> {
    let queue = known_queue(catalog, name)?;
    if queue.options.send_disabled() {
        // [I] The code Cloud Spanner uses for a disabled queue is not documented.
        return Err(Status::failed_precondition(format!(
            "Queue {} does not accept messages: its disable_send option is true",
            queue.name
        )));
    }
    Ok(queue)
}

fn checked_key(queue: &QueueDef, key: Option<ListValue>, op: &str) -> Result<ListValue, Status> {
    let key = key.ok_or_else(|| {
        Status::invalid_argument(format!("{op} to queue {} has no key", queue.name))
    })?;
    if key.values.len() != queue.key_columns.len() {
        return Err(Status::invalid_argument(format!(
            "{op} to queue {} has a key of {} values; the queue's primary key has {} columns ({})",
            queue.name,
            key.values.len(),
            queue.key_columns.len(),
            key_names(queue).join(", ")
        )));
    }
    Ok(key)
}

fn key_names(queue: &QueueDef) -> Vec<String> {
    queue
        .key_columns
        .iter()
        .map(|k| k.column.name.clone())
        .collect()
}

fn send_to_insert(queue: &QueueDef, send: Send, now: SystemTime) -> Result<Mutation, Status> {
    let mut key = checked_key(queue, send.key, "Send")?;
    let payload = send
        .payload
        .ok_or_else(|| Status::invalid_argument("Payload must be set for Send mutation"))?;
    // Absent → now; in the past → "a value closer to the current time" (we use now).
    let deliver_at = send
        .deliver_time
        .as_ref()
        .map(system_time)
        .filter(|t| *t > now)
        .unwrap_or(now);
    let mut columns = key_names(queue);
    columns.push(queue.payload.column.name.clone());
    columns.push(queue.deliver_time_column().to_owned());
    key.values.push(payload);
    key.values.push(string_value(timestamp_string(deliver_at)));
    Ok(Mutation {
        operation: Some(Operation::Insert(Write {
            table: queue.name.clone(),
            columns,
            values: vec![key],
        })),
    })
}

fn ack_to_writes(queue: &QueueDef, ack: Ack) -> Result<(Mutation, Mutation), Status> {
    let key = checked_key(queue, ack.key, "Ack")?;
    let update = Mutation {
        operation: Some(Operation::Update(Write {
            table: queue.name.clone(),
            columns: key_names(queue),
            values: vec![key.clone()],
        })),
    };
    let delete = Mutation {
        operation: Some(Operation::Delete(Delete {
            table: queue.name.clone(),
            key_set: Some(KeySet {
                keys: vec![key],
                ranges: Vec::new(),
                all: false,
            }),
        })),
    };
    Ok((update, delete))
}

/// Turns the backend's "row not found" for an ack's guard update into Spanner's message.
pub(crate) fn ack_not_found(status: Status, strict_acks: &[String]) -> Status {
    if status.code() != tonic::Code::NotFound || strict_acks.is_empty() {
        return status;
    }
    let message = status.message();
    let about_a_queue = strict_acks
        .iter()
        .any(|q| message.contains(&format!("Table {q}:")) || message.contains(q.as_str()));
    if about_a_queue && message.contains("not found") {
        // The backend's details embed its own message; they would contradict ours.
        Status::not_found("Message not found")
    } else {
        status
    }
}
