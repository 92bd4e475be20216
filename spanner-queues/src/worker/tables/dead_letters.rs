//! The dead-letter table: moving a message there, and [`DeadLetters`] to list, replay and
//! delete what is in it.

use std::fmt;
use std::time::SystemTime;

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::transaction::ReadWriteTransaction;

use crate::codec::{Payload, PayloadKind};
use crate::database::Database;
use crate::dialect::Dialect;
use crate::dynamic::RawMessage;
use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::query::query_rows;
use crate::queue::{Params, Queue};
use crate::transaction::TransactionSettings;

use super::attempts::count_attempts;
use super::layout::{
    DEAD_LETTER_TABLE, all_attempts, column, key_digest, row_key, table_names, truncate,
};

/// A message on its way to the dead-letter table.
pub(crate) struct Letter<'a> {
    pub(crate) key: &'a MessageKey,
    pub(crate) payload: &'a Payload,
    /// `None` counts the attempt rows (a message dead-lettered before any attempt, such as an
    /// undecodable one, counts the attempt it was received for).
    pub(crate) attempts: Option<u32>,
    pub(crate) error: &'a str,
    /// Delete the message's attempt rows in the same transaction (not when they are what
    /// failed).
    pub(crate) forget_attempts: bool,
}

/// Acks a message and records it in the dead-letter table, in one transaction.
pub(crate) async fn dead_letter<M: QueueMessage>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    queue: &Queue<M>,
    letter: Letter<'_>,
) -> Result<()> {
    let owned = OwnedLetter::of(&letter);
    let queue = queue.clone();
    crate::transaction::builder(db)
        .with_settings(settings.clone())
        .run(move |tx: ReadWriteTransaction| {
            let (queue, letter) = (queue.clone(), owned.clone());
            async move { dead_letter_in(&tx, &queue, &letter).await }
        })
        .await
}

/// A [`Letter`] that owns its parts (for transactions, which may run more than once).
#[derive(Debug, Clone)]
pub(crate) struct OwnedLetter {
    pub(crate) key: MessageKey,
    pub(crate) payload: Payload,
    pub(crate) attempts: Option<u32>,
    /// Already truncated to [`MAX_ERROR_TEXT`](super::MAX_ERROR_TEXT).
    pub(crate) error: String,
    pub(crate) forget_attempts: bool,
}

impl OwnedLetter {
    pub(crate) fn of(letter: &Letter<'_>) -> Self {
        Self {
            key: letter.key.clone(),
            payload: letter.payload.clone(),
            attempts: letter.attempts,
            error: truncate(letter.error),
            forget_attempts: letter.forget_attempts,
        }
    }
}

/// Inside `tx`: acks the message and records it in the dead-letter table.
pub(crate) async fn dead_letter_in<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    queue: &Queue<M>,
    letter: &OwnedLetter,
) -> Result<()> {
    let dialect = queue.dialect();
    let name = M::QUEUE;
    let key = &letter.key;
    queue.ack_key(tx, key.clone()).await?;
    let attempts = match letter.attempts {
        Some(n) => i64::from(n),
        None => count_attempts(tx, dialect, &name, key)
            .await?
            .saturating_add(1),
    };
    let (attempts_table, dead_table) = table_names(dialect);
    if letter.forget_attempts {
        tx.buffer([Mutation::delete(attempts_table, all_attempts(&name, key))])?;
    }
    let c = |name| column(dialect, name);
    tx.buffer([Mutation::new_insert_or_update_builder(dead_table)
        .set(c("QueueName"))
        .to(name.as_str().to_owned())
        .set(c("KeyDigest"))
        .to(key_digest(key))
        .set(c("MessageKey"))
        .to(key.to_wire())
        .set(c("KeyText"))
        .to(key.to_string())
        .set(c("Payload"))
        .to(letter.payload.as_bytes().to_vec())
        .set(c("PayloadKind"))
        .to(letter.payload.kind().to_string())
        .set(c("Attempts"))
        .to(attempts)
        .set(c("ErrorText"))
        .to(letter.error.clone())
        .set(c("DeadLetteredAt"))
        .to(SystemTime::now())
        .build()])?;
    Ok(())
}

/// A message in the dead-letter table.
#[derive(Clone)]
pub struct DeadLetter {
    queue: QueueName,
    key: MessageKey,
    payload: Payload,
    attempts: u32,
    error: String,
    dead_lettered_at: SystemTime,
}

impl DeadLetter {
    /// The queue the message came from.
    pub fn queue(&self) -> &QueueName {
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

/// The dead-letter table of the worker: list, count, replay and purge dead letters by queue
/// name. Made by [`Database::dead_letters`].
///
/// ```no_run
/// use spanner_queues::Database;
/// use spanner_queues::ident::QueueName;
///
/// async fn retry_all(db: &Database) -> spanner_queues::Result<()> {
///     let dead = db.dead_letters();
///     let queue = QueueName::new("OrderEmails")?;
///     for letter in dead.list(&queue, 100).await? {
///         eprintln!("{} failed {} times: {}", letter.key(), letter.attempts(), letter.error());
///         dead.replay(&queue, letter.key()).await?;
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct DeadLetters {
    db: Database,
}

/// Which dead letters of a queue [`DeadLetters::purge`] deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Purge {
    /// Every dead letter of the queue.
    All,
    /// The dead letters of these keys (and their attempt rows).
    Keys(Vec<MessageKey>),
}

impl Database {
    /// The worker's dead-letter table in this database (create it with
    /// [`SchemaSetup::with_worker_tables`](crate::SchemaSetup::with_worker_tables)).
    pub fn dead_letters(&self) -> DeadLetters {
        DeadLetters { db: self.clone() }
    }
}

impl DeadLetters {
    /// The queues that have dead letters, by name.
    ///
    /// # Errors
    /// Spanner errors.
    pub async fn queues(&self) -> Result<Vec<QueueName>> {
        Ok(self
            .counts()
            .await?
            .into_iter()
            .map(|(queue, _)| queue)
            .collect())
    }

    /// How many dead letters each queue has, for the queues that have any, by name.
    ///
    /// # Errors
    /// Spanner errors; [`Error::InvalidSchema`] for a queue name this crate cannot read back.
    pub async fn counts(&self) -> Result<Vec<(QueueName, u64)>> {
        let dialect = self.db.dialect();
        let name = column(dialect, "QueueName");
        let statement = Statement::builder(format!(
            "SELECT {name}, COUNT(*) FROM {} GROUP BY {name} ORDER BY {name}",
            table_names(dialect).1
        ))
        .build();
        query_rows(self.db.client(), statement, |row| {
            let queue = QueueName::new(row.get::<String>(0)?).map_err(|e| {
                Error::invalid_schema(
                    Some(DEAD_LETTER_TABLE),
                    format!("unreadable QueueName: {e}"),
                )
            })?;
            Ok((queue, u64::try_from(row.get::<i64>(1)?).unwrap_or(0)))
        })
        .await
    }

    /// How many dead letters `queue` has.
    ///
    /// # Errors
    /// Spanner errors.
    pub async fn count(&self, queue: &QueueName) -> Result<u64> {
        let dialect = self.db.dialect();
        let mut params = Params::new(dialect);
        let (queue_param, queue_at) = params.next("queue");
        let statement = Statement::builder(format!(
            "SELECT COUNT(*) FROM {} WHERE {} = {queue_at}",
            table_names(dialect).1,
            column(dialect, "QueueName"),
        ))
        .add_param(queue_param, queue.as_str().to_owned())
        .build();
        let counts = query_rows(self.db.client(), statement, |row| Ok(row.get::<i64>(0)?)).await?;
        Ok(counts.first().map_or(0, |&n| u64::try_from(n).unwrap_or(0)))
    }

    /// Up to `limit` dead letters of `queue`, oldest first.
    ///
    /// # Errors
    /// Spanner errors; [`Error::InvalidSchema`] for a row this crate cannot read back.
    pub async fn list(&self, queue: &QueueName, limit: usize) -> Result<Vec<DeadLetter>> {
        let dialect = self.db.dialect();
        let c = |name| column(dialect, name);
        let mut params = Params::new(dialect);
        let (queue_param, queue_at) = params.next("queue");
        let (limit_param, limit_at) = params.next("limit");
        let statement = Statement::builder(format!(
            "SELECT {} FROM {} WHERE {} = {queue_at} ORDER BY {}, {} LIMIT {limit_at}",
            letter_columns(dialect),
            table_names(dialect).1,
            c("QueueName"),
            c("DeadLetteredAt"),
            c("KeyDigest"),
        ))
        .add_param(queue_param, queue.as_str().to_owned())
        .add_param(limit_param, i64::try_from(limit).unwrap_or(i64::MAX))
        .build();
        query_rows(self.db.client(), statement, |row| {
            read_dead_letter(queue, row)
        })
        .await
    }

    /// The dead letter of `key` in `queue`, if any.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn get(&self, queue: &QueueName, key: &MessageKey) -> Result<Option<DeadLetter>> {
        let statement = select_one(self.db.dialect(), queue, key);
        let letters = query_rows(self.db.client(), statement, |row| {
            read_dead_letter(queue, row)
        })
        .await?;
        Ok(letters.into_iter().next())
    }

    /// Sends the dead letter of `key` back to `queue` (same payload, byte for byte, deliverable
    /// now) and deletes it from the dead-letter table, in one transaction. Its attempt count
    /// starts again from zero. Returns `false` if there was no such dead letter.
    ///
    /// The queue's columns are read first ([`Database::queue_by_name`]), so no message type is
    /// needed.
    ///
    /// # Errors
    /// [`Error::NotAQueue`] when `queue` is gone; [`Error::AlreadyQueued`] if a message with
    /// that key is in the queue again; Spanner errors; [`Error::OutcomeUnknown`] (then check
    /// with [`get`](Self::get)).
    pub async fn replay(&self, queue: &QueueName, key: &MessageKey) -> Result<bool> {
        let target = self.db.queue_by_name(queue.as_str()).await?;
        let dialect = self.db.dialect();
        let target = &target;
        self.db
            .transaction()
            .run(move |tx| async move {
                // The dead letter is under the name the worker used (`queue`); the database may
                // spell the queue in another case (GoogleSQL names are case-insensitive).
                let name = queue;
                let mut rows = tx.execute_query(select_one(dialect, name, key)).await?;
                let letter = match rows.next().await {
                    Some(row) => read_dead_letter(name, &row?)?,
                    None => return Ok(false),
                };
                let message = RawMessage::with_key(key.clone(), letter.payload);
                tx.send_raw(target, &message).await?;
                let (attempts_table, dead_table) = table_names(dialect);
                tx.buffer([
                    Mutation::delete(dead_table, row_key(name, key)),
                    Mutation::delete(attempts_table, all_attempts(name, key)),
                ])?;
                Ok(true)
            })
            .await
    }

    /// Deletes dead letters of `queue` for good, in one transaction; returns how many.
    ///
    /// # Errors
    /// Spanner errors (a purge of very many letters can exceed Spanner's mutation limit per
    /// transaction: purge by keys, in batches); [`Error::OutcomeUnknown`].
    pub async fn purge(&self, queue: &QueueName, which: Purge) -> Result<u64> {
        let dialect = self.db.dialect();
        let which = &which;
        self.db
            .transaction()
            .run(move |tx| async move {
                match which {
                    Purge::All => {
                        let mut params = Params::new(dialect);
                        let (queue_param, queue_at) = params.next("queue");
                        let statement = Statement::builder(format!(
                            "DELETE FROM {} WHERE {} = {queue_at}",
                            table_names(dialect).1,
                            column(dialect, "QueueName"),
                        ))
                        .add_param(queue_param, queue.as_str().to_owned())
                        .build();
                        Ok(u64::try_from(tx.execute_update(statement).await?).unwrap_or(0))
                    }
                    Purge::Keys(keys) => {
                        let mut deleted = 0;
                        for key in keys {
                            let removed = tx
                                .execute_update(delete_one(dialect, queue, key, ""))
                                .await?;
                            if removed > 0 {
                                deleted += 1;
                                tx.buffer([Mutation::delete(
                                    table_names(dialect).0,
                                    all_attempts(queue, key),
                                )])?;
                            }
                        }
                        Ok(deleted)
                    }
                }
            })
            .await
    }
}

/// `DELETE` of one dead letter; `assert` is appended (`" ASSERT_ROWS_MODIFIED 1"` or `""`).
fn delete_one(dialect: Dialect, queue: &QueueName, key: &MessageKey, assert: &str) -> Statement {
    let (condition, builder) = one_letter(dialect, queue, key);
    builder(format!(
        "DELETE FROM {} WHERE {condition}{assert}",
        table_names(dialect).1
    ))
}

fn select_one(dialect: Dialect, queue: &QueueName, key: &MessageKey) -> Statement {
    let (condition, builder) = one_letter(dialect, queue, key);
    builder(format!(
        "SELECT {} FROM {} WHERE {condition}",
        letter_columns(dialect),
        table_names(dialect).1
    ))
}

/// The columns [`read_dead_letter`] reads, in its order.
fn letter_columns(dialect: Dialect) -> String {
    [
        "MessageKey",
        "Payload",
        "PayloadKind",
        "Attempts",
        "ErrorText",
        "DeadLetteredAt",
    ]
    .map(|name| column(dialect, name))
    .join(", ")
}

/// The condition selecting one dead letter, and what binds its parameters to a statement.
fn one_letter(
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
) -> (String, impl FnOnce(String) -> Statement) {
    let mut params = Params::new(dialect);
    let (queue_param, queue_at) = params.next("queue");
    let (key_param, key_at) = params.next("key");
    let condition = format!(
        "{} = {queue_at} AND {} = {key_at}",
        column(dialect, "QueueName"),
        column(dialect, "KeyDigest")
    );
    let (queue, digest) = (queue.as_str().to_owned(), key_digest(key));
    (condition, move |sql: String| {
        Statement::builder(sql)
            .add_param(queue_param, queue)
            .add_typed_param(key_param, digest, google_cloud_spanner::types::bytes())
            .build()
    })
}

fn read_dead_letter(
    queue: &QueueName,
    row: &google_cloud_spanner::result::Row,
) -> Result<DeadLetter> {
    let bad = |what: &str| Error::invalid_schema(Some(DEAD_LETTER_TABLE), what.to_owned());
    let wire: String = row.get(0)?;
    let key = MessageKey::from_wire(&wire).ok_or_else(|| bad("unreadable MessageKey"))?;
    let bytes: Vec<u8> = row.get(1)?;
    let kind: String = row.get(2)?;
    let payload = payload_from(&kind, bytes).ok_or_else(|| bad("unreadable payload"))?;
    let attempts: i64 = row.get(3)?;
    let error: String = row.get(4)?;
    let dead_lettered_at: SystemTime = row.get(5)?;
    Ok(DeadLetter {
        queue: queue.clone(),
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
}
