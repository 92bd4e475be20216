//! The attempts table: counting an attempt when it starts, recording its failure, and forgetting
//! a message's attempts once it is acked or dead-lettered.

use std::time::SystemTime;

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::key::{Key, KeyRange, KeySet};
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::read::ReadRequest;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::transaction::ReadWriteTransaction;
use google_cloud_spanner::value::Value;

use crate::dialect::Dialect;
use crate::error::Result;
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::queue::Params;

use super::layout::{all_attempts, column, key_digest, table_names, truncate};

/// Counts the attempt rows of a message inside `tx`.
pub(super) async fn count_attempts(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
) -> google_cloud_spanner::Result<i64> {
    let mut params = Params::new(dialect);
    let (queue_param, queue_at) = params.next("queue");
    let (key_param, key_at) = params.next("key");
    let statement = Statement::builder(format!(
        "SELECT COUNT(*) FROM {} WHERE {} = {queue_at} AND {} = {key_at}",
        table_names(dialect).0,
        column(dialect, "QueueName"),
        column(dialect, "KeyDigest"),
    ))
    .add_param(queue_param, queue.as_str().to_owned())
    .add_typed_param(
        key_param,
        key_digest(key),
        google_cloud_spanner::types::bytes(),
    )
    .build();
    let mut rows = tx.execute_query(statement).await?;
    match rows.next().await {
        Some(row) => row?.get::<i64>(0),
        None => Ok(0),
    }
}

/// Where the count of an attempt arrives, once its round of starts has run.
pub(crate) type Prefetched = tokio::sync::oneshot::Receiver<Result<Attempt>>;

/// An attempt that has been counted.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    /// 1-based: the number of attempt rows of the message, this one included.
    pub(crate) number: u32,
    pub(crate) id: String,
    pub(crate) started_at: SystemTime,
    /// The error of the most recent earlier attempt that recorded one.
    pub(crate) previous_error: Option<String>,
}

/// An attempt row as read back: its id, start time and error.
pub(crate) type AttemptRow = (String, SystemTime, Option<String>);

/// One message whose attempt is starting, in a batch of [`start_attempts`].
#[derive(Debug, Clone)]
pub(crate) struct StartRequest {
    pub(crate) key: MessageKey,
    /// Write the attempt's row now (an external handler: a crash or lost lease must count),
    /// or only read the count (a transactional handler: the attempt is recorded with its
    /// failure, and its success deletes the rows with the ack).
    pub(crate) write: bool,
}

/// Starts the attempts of a batch of messages: one blind write of the rows to write (one
/// commit that cannot conflict with other transactions, however many messages), then one
/// strong read of every message's attempt rows. Returns one [`Attempt`] per request, in order.
pub(crate) async fn start_attempts(
    db: &DatabaseClient,
    dialect: Dialect,
    queue: &QueueName,
    requests: &[StartRequest],
) -> Result<Vec<Attempt>> {
    let started_at = SystemTime::now();
    let ids: Vec<String> = requests
        .iter()
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let digests: Vec<Vec<u8>> = requests.iter().map(|r| key_digest(&r.key)).collect();
    let rows: Vec<Mutation> = requests
        .iter()
        .zip(&ids)
        .zip(&digests)
        .filter(|((request, _), _)| request.write)
        .map(|((request, id), digest)| {
            let c = |name| column(dialect, name);
            Mutation::new_insert_or_update_builder(table_names(dialect).0)
                .set(c("QueueName"))
                .to(queue.as_str().to_owned())
                .set(c("KeyDigest"))
                .to(digest.clone())
                .set(c("AttemptId"))
                .to(id.clone())
                .set(c("MessageKey"))
                .to(request.key.to_wire())
                .set(c("StartedAt"))
                .to(started_at)
                .build()
        })
        .collect();
    if !rows.is_empty() {
        // At least once is enough: the write is idempotent (same rows, same values).
        db.write_only_transaction()
            .build()
            .write_at_least_once(rows)
            .await?;
    }
    let found = read_rows(dialect, queue, &digests, |read| async move {
        let mut rows = db.single_use().build().execute_read(read).await?;
        let mut all = Vec::new();
        while let Some(row) = rows.next().await {
            all.push(row?);
        }
        Ok(all)
    })
    .await?;
    let none = Vec::new();
    Ok(requests
        .iter()
        .zip(ids)
        .zip(&digests)
        .map(|((_, id), digest)| {
            let rows = found.get(digest).unwrap_or(&none);
            attempt_from(rows, id, started_at)
        })
        .collect())
}

/// Reads, inside `tx`, the attempt rows of each of `keys` (one keyed read), and returns the
/// attempt each is starting now: one more than its rows, with the most recent error (as
/// [`start_attempts`] without writing a row: a transactional batch's attempts).
pub(crate) async fn attempts_in(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    queue: &QueueName,
    keys: &[MessageKey],
) -> Result<Vec<Attempt>> {
    let started_at = SystemTime::now();
    let digests: Vec<Vec<u8>> = keys.iter().map(key_digest).collect();
    let mut found = read_rows(dialect, queue, &digests, |read| async move {
        let mut rows = tx.execute_read(read).await?;
        let mut all = Vec::new();
        while let Some(row) = rows.next().await {
            all.push(row?);
        }
        Ok(all)
    })
    .await?;
    let none = Vec::new();
    Ok(digests
        .iter()
        .map(|digest| {
            let rows = found.remove(digest).unwrap_or_else(|| none.clone());
            attempt_from(&rows, uuid::Uuid::new_v4().to_string(), started_at)
        })
        .collect())
}

/// The attempt rows of the messages whose key digests are `digests`, by digest: one keyed
/// read (each message's rows are a key prefix), made by `read`.
async fn read_rows<F, Fut>(
    dialect: Dialect,
    queue: &QueueName,
    digests: &[Vec<u8>],
    read: F,
) -> Result<std::collections::HashMap<Vec<u8>, Vec<AttemptRow>>>
where
    F: FnOnce(ReadRequest) -> Fut,
    Fut: std::future::Future<
            Output = google_cloud_spanner::Result<Vec<google_cloud_spanner::result::Row>>,
        >,
{
    let mut unique = digests.to_vec();
    unique.sort();
    unique.dedup();
    // A keyed read, not a query: the same rows, without a statement to compile, and the same
    // in both dialects.
    let keys = unique
        .into_iter()
        .fold(KeySet::builder(), |keys, digest| {
            let prefix = Key::new(vec![
                Value::from(queue.as_str().to_owned()),
                Value::from(digest),
            ]);
            keys.add_range(KeyRange::closed_closed(prefix.clone(), prefix))
        })
        .build();
    let c = |name| column(dialect, name).into_owned();
    let request = ReadRequest::builder(
        table_names(dialect).0,
        vec![
            c("KeyDigest"),
            c("AttemptId"),
            c("StartedAt"),
            c("ErrorText"),
        ],
    )
    .with_keys(keys)
    .build();
    let mut found: std::collections::HashMap<Vec<u8>, Vec<AttemptRow>> =
        std::collections::HashMap::new();
    for row in read(request).await? {
        let digest: Vec<u8> = row.get(0)?;
        found
            .entry(digest)
            .or_default()
            .push((row.get(1)?, row.get(2)?, row.get(3)?));
    }
    Ok(found)
}

/// The attempt `id` of a message whose attempt rows are `rows` (its own among them if it was
/// written): one more than the others.
pub(crate) fn attempt_from(rows: &[AttemptRow], id: String, started_at: SystemTime) -> Attempt {
    let others = rows.iter().filter(|(other, _, _)| *other != id);
    let earlier = u32::try_from(others.clone().count()).unwrap_or(u32::MAX);
    let previous = others
        .filter_map(|(_, at, error)| error.as_ref().map(|e| (*at, e)))
        .max_by_key(|(at, _)| *at)
        .map(|(_, error)| error.clone());
    Attempt {
        number: earlier.saturating_add(1),
        id,
        started_at,
        previous_error: previous,
    }
}

fn attempt_row(
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
    attempt: &Attempt,
    error: Option<&str>,
) -> Mutation {
    let c = |name| column(dialect, name);
    let builder = Mutation::new_insert_or_update_builder(table_names(dialect).0)
        .set(c("QueueName"))
        .to(queue.as_str().to_owned())
        .set(c("KeyDigest"))
        .to(key_digest(key))
        .set(c("AttemptId"))
        .to(attempt.id.clone())
        .set(c("MessageKey"))
        .to(key.to_wire())
        .set(c("StartedAt"))
        .to(attempt.started_at);
    match error {
        Some(error) => builder.set(c("ErrorText")).to(truncate(error)).build(),
        None => builder.build(),
    }
}

/// What the transaction that ends an attempt does to the message's attempt rows. The worker
/// decides it from how the attempt ended; a store carries it out in that transaction.
#[derive(Debug, Clone)]
pub(crate) enum AttemptRows {
    /// Leave them as they are (nothing to record, or the rows are what failed).
    Keep,
    /// A failed attempt: its row (written now if it was not when the attempt started) gets
    /// the error.
    RecordFailure { attempt: Attempt, error: String },
    /// An attempt that does not count (shutdown interrupted it): delete its row.
    Drop(Attempt),
    /// The message was acked or dead-lettered: delete every row of it.
    Forget,
}

/// Buffers what `rows` says into `tx`, for the message `key`.
pub(crate) fn buffer_rows(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
    rows: &AttemptRows,
) -> google_cloud_spanner::Result<()> {
    let table = table_names(dialect).0;
    match rows {
        AttemptRows::Keep => Ok(()),
        AttemptRows::RecordFailure { attempt, error } => {
            tx.buffer([attempt_row(dialect, queue, key, attempt, Some(error))])
        }
        AttemptRows::Drop(attempt) => {
            let row = Key::new(vec![
                Value::from(queue.as_str().to_owned()),
                Value::from(key_digest(key)),
                Value::from(attempt.id.clone()),
            ]);
            tx.buffer([Mutation::delete(table, KeySet::from(row))])
        }
        AttemptRows::Forget => tx.buffer([Mutation::delete(table, all_attempts(queue, key))]),
    }
}
