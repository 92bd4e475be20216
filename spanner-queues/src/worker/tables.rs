//! The worker's own tables: attempt counts and dead letters.

use std::fmt;
use std::time::{Duration, SystemTime};

use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient};
use google_cloud_spanner::key::{Key, KeyRange, KeySet};
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::transaction::ReadWriteTransaction;
use google_cloud_spanner::value::Value;

use crate::codec::{Payload, PayloadKind};
use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::queue::{DeliverAt, Queue};
use crate::transaction::TransactionSettings;

/// The table counting attempts per message.
pub const ATTEMPTS_TABLE: &str = "SpannerQueuesAttempts";
/// The dead-letter table.
pub const DEAD_LETTER_TABLE: &str = "SpannerQueuesDeadLetters";
/// Longest error text stored (in bytes); longer texts are cut at a character boundary.
pub const MAX_ERROR_TEXT: usize = 4096;

/// The DDL of the worker's tables (`CREATE TABLE IF NOT EXISTS`), to apply once per database,
/// for instance with [`admin::apply_ddl`](crate::admin::apply_ddl) or [`ensure_tables`].
///
/// - `SpannerQueuesAttempts (QueueName, MessageKey, AttemptId)`: one row per attempt, written
///   when the attempt starts (so that crashes and lost leases count too) with a blind write that
///   cannot conflict with other transactions; a failed attempt records its error in its row.
///   A message's rows are deleted in the transaction that acks or dead-letters it. Rows left
///   behind (a message acked by another program) expire after 30 days.
/// - `SpannerQueuesDeadLetters (QueueName, MessageKey)`: messages that failed too often or could
///   not be decoded, with the raw payload (`Payload` bytes and `PayloadKind`), the attempt count
///   and the error text. Rows expire after 30 days (change the row deletion policy with
///   `ALTER TABLE … REPLACE ROW DELETION POLICY`).
///
/// `MessageKey` is the key in a stable text form (`["INT64:42","STRING:abc"]`); `KeyText` is
/// the human-readable form.
///
/// ```
/// let ddl = spanner_queues::worker::schema_statements();
/// assert!(ddl[0].starts_with("CREATE TABLE IF NOT EXISTS SpannerQueuesAttempts"));
/// assert!(ddl[1].contains("ROW DELETION POLICY"));
/// ```
pub fn schema_statements() -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {ATTEMPTS_TABLE} (\
             QueueName STRING(128) NOT NULL, \
             MessageKey STRING(MAX) NOT NULL, \
             AttemptId STRING(36) NOT NULL, \
             StartedAt TIMESTAMP NOT NULL, \
             ErrorText STRING(MAX)\
             ) PRIMARY KEY (QueueName, MessageKey, AttemptId), \
             ROW DELETION POLICY (OLDER_THAN(StartedAt, INTERVAL 30 DAY))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {DEAD_LETTER_TABLE} (\
             QueueName STRING(128) NOT NULL, \
             MessageKey STRING(MAX) NOT NULL, \
             KeyText STRING(MAX) NOT NULL, \
             Payload BYTES(MAX) NOT NULL, \
             PayloadKind STRING(16) NOT NULL, \
             Attempts INT64 NOT NULL, \
             ErrorText STRING(MAX) NOT NULL, \
             DeadLetteredAt TIMESTAMP NOT NULL\
             ) PRIMARY KEY (QueueName, MessageKey), \
             ROW DELETION POLICY (OLDER_THAN(DeadLetteredAt, INTERVAL 30 DAY))"
        ),
    ]
}

/// Creates the worker's tables if they do not exist, and waits for the schema change.
///
/// # Errors
/// Spanner's error if the DDL is refused.
pub async fn ensure_tables(admin: &DatabaseAdmin, database: &str) -> Result<()> {
    crate::ddl::apply_ddl(admin, database, schema_statements()).await
}

/// Checks that the worker's tables exist.
///
/// # Errors
/// [`Error::InvalidSchema`] naming the fix when Spanner says a table is missing; other Spanner
/// errors are logged and ignored (the worker retries its own transactions anyway).
pub(crate) async fn check_tables(db: &DatabaseClient) -> Result<()> {
    let statement = Statement::builder(format!(
        "SELECT (SELECT COUNT(*) FROM {ATTEMPTS_TABLE} WHERE FALSE), \
         (SELECT COUNT(*) FROM {DEAD_LETTER_TABLE} WHERE FALSE)"
    ))
    .build();
    let result = async {
        let mut rows = db.single_use().build().execute_query(statement).await?;
        while let Some(row) = rows.next().await {
            row?;
        }
        Ok::<(), google_cloud_spanner::Error>(())
    }
    .await;
    match result.map_err(Error::from) {
        Ok(()) => Ok(()),
        Err(error)
            if matches!(
                error.code(),
                Some(crate::error::Code::InvalidArgument | crate::error::Code::NotFound)
            ) =>
        {
            Err(Error::invalid_schema(
                None,
                format!(
                    "the worker tables {ATTEMPTS_TABLE} and {DEAD_LETTER_TABLE} are missing or \
                     differ: apply spanner_queues::worker::schema_statements() ({})",
                    crate::telemetry::ErrorChain(&error)
                ),
            ))
        }
        Err(error) => {
            tracing::warn!(error = %crate::telemetry::ErrorChain(&error), "could not check the worker tables");
            Ok(())
        }
    }
}

fn row_key(queue: &QueueName, key: &MessageKey) -> KeySet {
    KeySet::from(message_key(queue, key))
}

fn message_key(queue: &QueueName, key: &MessageKey) -> Key {
    Key::new(vec![
        Value::from(queue.as_str().to_owned()),
        Value::from(key.to_wire()),
    ])
}

/// Every attempt row of a message (a key prefix).
fn all_attempts(queue: &QueueName, key: &MessageKey) -> KeySet {
    KeySet::from(KeyRange::closed_closed(
        message_key(queue, key),
        message_key(queue, key),
    ))
}

pub(crate) fn truncate(text: &str) -> String {
    if text.len() <= MAX_ERROR_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Counts the attempt rows of a message inside `tx`.
async fn count_attempts(
    tx: &ReadWriteTransaction,
    queue: &QueueName,
    key: &MessageKey,
) -> google_cloud_spanner::Result<i64> {
    let statement = Statement::builder(format!(
        "SELECT COUNT(*) FROM {ATTEMPTS_TABLE} WHERE QueueName = @queue AND MessageKey = @key"
    ))
    .add_param("queue", queue.as_str().to_owned())
    .add_param("key", key.to_wire())
    .build();
    let mut rows = tx.execute_query(statement).await?;
    match rows.next().await {
        Some(row) => row?.get::<i64>(0),
        None => Ok(0),
    }
}

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

/// Counts the start of an attempt: a blind write of its row (one commit that cannot conflict
/// with other transactions), then a strong read of the message's attempt rows.
pub(crate) async fn start_attempt(
    db: &DatabaseClient,
    queue: &QueueName,
    key: &MessageKey,
) -> Result<Attempt> {
    let id = uuid::Uuid::new_v4().to_string();
    let started_at = SystemTime::now();
    // At least once is enough: the write is idempotent (same row, same values).
    db.write_only_transaction()
        .build()
        .write_at_least_once([Mutation::new_insert_or_update_builder(ATTEMPTS_TABLE)
            .set("QueueName")
            .to(queue.as_str().to_owned())
            .set("MessageKey")
            .to(key.to_wire())
            .set("AttemptId")
            .to(id.clone())
            .set("StartedAt")
            .to(started_at)
            .build()])
        .await
        .map_err(Error::from)?;
    let statement = Statement::builder(format!(
        "SELECT AttemptId, StartedAt, ErrorText FROM {ATTEMPTS_TABLE} \
         WHERE QueueName = @queue AND MessageKey = @key"
    ))
    .add_param("queue", queue.as_str().to_owned())
    .add_param("key", key.to_wire())
    .build();
    let mut rows = db
        .single_use()
        .build()
        .execute_query(statement)
        .await
        .map_err(Error::from)?;
    let mut number = 0_u32;
    let mut previous: Option<(SystemTime, String)> = None;
    while let Some(row) = rows.next().await {
        let row = row.map_err(Error::from)?;
        number = number.saturating_add(1);
        let other: String = row.get(0).map_err(Error::from)?;
        let at: SystemTime = row.get(1).map_err(Error::from)?;
        let error: Option<String> = row.get(2).map_err(Error::from)?;
        if other != id
            && let Some(error) = error
            && previous.as_ref().is_none_or(|(t, _)| at > *t)
        {
            previous = Some((at, error));
        }
    }
    Ok(Attempt {
        number: number.max(1),
        id,
        started_at,
        previous_error: previous.map(|(_, e)| e),
    })
}

/// Buffers the deletion of every attempt row of a message (it was acked or dead-lettered).
pub(crate) fn forget_attempts(
    tx: &ReadWriteTransaction,
    queue: &QueueName,
    key: &MessageKey,
) -> google_cloud_spanner::Result<()> {
    tx.buffer([Mutation::delete(ATTEMPTS_TABLE, all_attempts(queue, key))])
}

/// Buffers the error of a failed attempt into its row.
pub(crate) fn record_failure(
    tx: &ReadWriteTransaction,
    queue: &QueueName,
    key: &MessageKey,
    attempt: &Attempt,
    error: &str,
) -> google_cloud_spanner::Result<()> {
    tx.buffer([Mutation::new_insert_or_update_builder(ATTEMPTS_TABLE)
        .set("QueueName")
        .to(queue.as_str().to_owned())
        .set("MessageKey")
        .to(key.to_wire())
        .set("AttemptId")
        .to(attempt.id.clone())
        .set("StartedAt")
        .to(attempt.started_at)
        .set("ErrorText")
        .to(truncate(error))
        .build()])
}

/// Buffers the deletion of one attempt's row (an attempt interrupted by shutdown).
pub(crate) fn drop_attempt(
    tx: &ReadWriteTransaction,
    queue: &QueueName,
    key: &MessageKey,
    attempt: &Attempt,
) -> google_cloud_spanner::Result<()> {
    let mut parts = vec![
        Value::from(queue.as_str().to_owned()),
        Value::from(key.to_wire()),
    ];
    parts.push(Value::from(attempt.id.clone()));
    tx.buffer([Mutation::delete(
        ATTEMPTS_TABLE,
        KeySet::from(Key::new(parts)),
    )])
}

/// Acks a message and records it in the dead-letter table, in one transaction.
///
/// `attempts`: `None` counts the attempt rows (a message dead-lettered before any attempt, such
/// as an undecodable one, counts the attempt it was received for).
pub(crate) async fn dead_letter<M: QueueMessage>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    queue: &Queue<M>,
    key: &MessageKey,
    payload: &Payload,
    attempts: Option<u32>,
    error: &str,
) -> Result<()> {
    let (queue, key, payload, error) =
        (queue.clone(), key.clone(), payload.clone(), truncate(error));
    crate::transaction::builder(db)
        .with_settings(settings.clone())
        .run(move |tx: ReadWriteTransaction| {
            let (queue, key, payload, error) =
                (queue.clone(), key.clone(), payload.clone(), error.clone());
            async move {
                let name = M::QUEUE;
                queue.ack_key(&tx, key.clone()).await?;
                let attempts = match attempts {
                    Some(n) => i64::from(n),
                    None => count_attempts(&tx, &name, &key).await?.saturating_add(1),
                };
                tx.buffer([
                    Mutation::new_insert_or_update_builder(DEAD_LETTER_TABLE)
                        .set("QueueName")
                        .to(name.as_str().to_owned())
                        .set("MessageKey")
                        .to(key.to_wire())
                        .set("KeyText")
                        .to(key.to_string())
                        .set("Payload")
                        .to(payload.as_bytes().to_vec())
                        .set("PayloadKind")
                        .to(payload.kind().to_string())
                        .set("Attempts")
                        .to(attempts)
                        .set("ErrorText")
                        .to(error)
                        .set("DeadLetteredAt")
                        .to(SystemTime::now())
                        .build(),
                    Mutation::delete(ATTEMPTS_TABLE, all_attempts(&name, &key)),
                ])?;
                Ok(())
            }
        })
        .await
}

/// A message in the dead-letter table.
#[derive(Clone)]
pub struct DeadLetter {
    queue: String,
    key: MessageKey,
    payload: Payload,
    attempts: u32,
    error: String,
    dead_lettered_at: SystemTime,
}

impl DeadLetter {
    /// The queue the message came from.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The message key.
    pub fn key(&self) -> &MessageKey {
        &self.key
    }

    /// The payload exactly as it was in the queue.
    pub fn payload(&self) -> &Payload {
        &self.payload
    }

    /// Attempts made (including the one that dead-lettered it).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The last error (handler error, panic message, timeout, or decode error).
    pub fn error(&self) -> &str {
        &self.error
    }

    /// When it was dead-lettered (this worker's clock).
    pub fn dead_lettered_at(&self) -> SystemTime {
        self.dead_lettered_at
    }

    /// Decodes the payload as `M`.
    ///
    /// # Errors
    /// [`Error::Decode`] if it does not match `M` (it may be why it was dead-lettered).
    pub fn decode<M: QueueMessage>(&self) -> Result<M> {
        M::decode_parts(self.key.clone(), self.payload.clone())
    }
}

impl fmt::Debug for DeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetter")
            .field("queue", &self.queue)
            .field("key", &self.key)
            .field("payload", &self.payload)
            .field("attempts", &self.attempts)
            .field("error", &self.error)
            .finish()
    }
}

/// Inspects, replays and discards dead letters.
///
/// ```no_run
/// # use spanner_queues::QueueMessage;
/// # #[derive(QueueMessage)]
/// # #[queue(name = "OrderEmails")]
/// # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
/// use spanner_queues::worker::DeadLetters;
///
/// async fn retry_all(db: google_cloud_spanner::client::DatabaseClient) -> spanner_queues::Result<()> {
///     let dead = DeadLetters::new(db);
///     for letter in dead.list::<OrderEmail>(100).await? {
///         eprintln!("{} failed {} times: {}", letter.key(), letter.attempts(), letter.error());
///         dead.replay::<OrderEmail>(letter.key()).await?;
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct DeadLetters {
    db: DatabaseClient,
    settings: TransactionSettings,
}

impl DeadLetters {
    /// Dead letters of the database behind `db`.
    pub fn new(db: DatabaseClient) -> Self {
        Self {
            db,
            settings: TransactionSettings::default(),
        }
    }

    /// Settings of the replay and delete transactions.
    pub fn with_transaction_settings(mut self, settings: TransactionSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Up to `limit` dead letters of the queue of `M`, oldest first.
    ///
    /// # Errors
    /// Spanner errors; [`Error::InvalidSchema`] for a row this crate cannot read back.
    pub async fn list<M: QueueMessage>(&self, limit: usize) -> Result<Vec<DeadLetter>> {
        self.list_by_name(&M::QUEUE, limit).await
    }

    /// Up to `limit` dead letters of `queue`, oldest first: [`list`](Self::list) for a queue
    /// known by name only (an operations tool, a queue of another service).
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn list_by_name(&self, queue: &QueueName, limit: usize) -> Result<Vec<DeadLetter>> {
        let statement = Statement::builder(format!(
            "SELECT MessageKey, Payload, PayloadKind, Attempts, ErrorText, DeadLetteredAt \
             FROM {DEAD_LETTER_TABLE} WHERE QueueName = @queue \
             ORDER BY DeadLetteredAt, MessageKey LIMIT @limit"
        ))
        .add_param("queue", queue.as_str().to_owned())
        .add_param("limit", i64::try_from(limit).unwrap_or(i64::MAX))
        .build();
        let mut rows = self
            .db
            .single_use()
            .build()
            .execute_query(statement)
            .await
            .map_err(Error::from)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().await {
            let row = row.map_err(Error::from)?;
            out.push(read_dead_letter(queue, &row)?);
        }
        Ok(out)
    }

    /// The dead letter of `key` in `queue`, if any.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn get(&self, queue: &QueueName, key: &MessageKey) -> Result<Option<DeadLetter>> {
        let statement = select_one(queue, key);
        let mut rows = self
            .db
            .single_use()
            .build()
            .execute_query(statement)
            .await
            .map_err(Error::from)?;
        match rows.next().await {
            Some(row) => Ok(Some(read_dead_letter(queue, &row.map_err(Error::from)?)?)),
            None => Ok(None),
        }
    }

    /// Sends the dead letter of `key` back to the queue of `M` (same payload, deliverable now)
    /// and deletes it from the dead-letter table, in one transaction. Its attempt count starts
    /// again from zero. Returns `false` if there was no such dead letter.
    ///
    /// # Errors
    /// [`Error::AlreadyQueued`] if a message with that key is in the queue again; Spanner
    /// errors; [`Error::OutcomeUnknown`] (then check with [`get`](Self::get)).
    pub async fn replay<M: QueueMessage>(&self, key: &MessageKey) -> Result<bool> {
        let key = key.clone();
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let key = key.clone();
                async move {
                    let name = M::QUEUE;
                    let mut rows = tx.execute_query(select_one(&name, &key)).await?;
                    let letter = match rows.next().await {
                        Some(row) => read_dead_letter(&name, &row?)?,
                        None => return Ok(false),
                    };
                    Queue::<M>::new()
                        .send_raw(&tx, key.clone(), letter.payload, DeliverAt::Now)
                        .await?;
                    tx.buffer([
                        Mutation::delete(DEAD_LETTER_TABLE, row_key(&name, &key)),
                        Mutation::delete(ATTEMPTS_TABLE, all_attempts(&name, &key)),
                    ])?;
                    Ok(true)
                }
            })
            .await
    }

    /// Deletes the dead letter of `key` in `queue` for good. Returns whether there was one.
    ///
    /// # Errors
    /// Spanner errors.
    pub async fn delete(&self, queue: &QueueName, key: &MessageKey) -> Result<bool> {
        let statement = Statement::builder(format!(
            "DELETE FROM {DEAD_LETTER_TABLE} WHERE QueueName = @queue AND MessageKey = @key"
        ))
        .add_param("queue", queue.as_str().to_owned())
        .add_param("key", key.to_wire())
        .build();
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let statement = statement.clone();
                async move { Ok(tx.execute_update(statement).await? > 0) }
            })
            .await
    }
}

fn select_one(queue: &QueueName, key: &MessageKey) -> Statement {
    Statement::builder(format!(
        "SELECT MessageKey, Payload, PayloadKind, Attempts, ErrorText, DeadLetteredAt \
         FROM {DEAD_LETTER_TABLE} WHERE QueueName = @queue AND MessageKey = @key"
    ))
    .add_param("queue", queue.as_str().to_owned())
    .add_param("key", key.to_wire())
    .build()
}

fn read_dead_letter(
    queue: &QueueName,
    row: &google_cloud_spanner::result::Row,
) -> Result<DeadLetter> {
    let bad = |what: &str| Error::invalid_schema(Some(DEAD_LETTER_TABLE), what.to_owned());
    let wire: String = row.get(0).map_err(Error::from)?;
    let key = MessageKey::from_wire(&wire).ok_or_else(|| bad("unreadable MessageKey"))?;
    let bytes: Vec<u8> = row.get(1).map_err(Error::from)?;
    let kind: String = row.get(2).map_err(Error::from)?;
    let payload = payload_from(&kind, bytes).ok_or_else(|| bad("unreadable payload"))?;
    let attempts: i64 = row.get(3).map_err(Error::from)?;
    let error: String = row.get(4).map_err(Error::from)?;
    let dead_lettered_at: SystemTime = row.get(5).map_err(Error::from)?;
    Ok(DeadLetter {
        queue: queue.as_str().to_owned(),
        key,
        payload,
        attempts: u32::try_from(attempts).unwrap_or(0),
        error,
        dead_lettered_at,
    })
}

/// Rebuilds a payload stored as bytes plus its kind.
fn payload_from(kind: &str, bytes: Vec<u8>) -> Option<Payload> {
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).ok();
    match kind {
        k if k == PayloadKind::Bytes.to_string() => Some(Payload::Bytes(bytes)),
        k if k == PayloadKind::String.to_string() => text(bytes).map(Payload::String),
        k if k == PayloadKind::Json.to_string() => text(bytes).map(Payload::Json),
        _ => None,
    }
}

/// How long to wait at most for worker-table transactions at shutdown.
pub(crate) const SHUTDOWN_RELEASE_BUDGET: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_survive_the_dead_letter_round_trip() {
        for payload in [
            Payload::Bytes(vec![0, 159, 146, 150]),
            Payload::String("héllo".into()),
            Payload::Json(r#"{"a":1}"#.into()),
        ] {
            let kind = payload.kind().to_string();
            let back = payload_from(&kind, payload.as_bytes().to_vec());
            assert_eq!(back, Some(payload));
        }
        assert_eq!(payload_from("STRING", vec![0xff]), None);
        assert_eq!(payload_from("XML", vec![]), None);
    }

    #[test]
    fn long_errors_are_cut_at_a_character_boundary() {
        let text = "é".repeat(MAX_ERROR_TEXT);
        let cut = truncate(&text);
        assert!(cut.len() <= MAX_ERROR_TEXT && cut.len() >= MAX_ERROR_TEXT - 1);
        assert!(text.starts_with(&cut));
        assert_eq!(truncate("short"), "short");
    }
}
