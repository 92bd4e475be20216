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
use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::query::query_rows;
use crate::queue::Params;
use crate::queue::{DeliverAt, Queue};
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
    let Letter {
        key,
        payload,
        attempts,
        error,
        forget_attempts,
    } = letter;
    let dialect = queue.dialect();
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
                    None => count_attempts(&tx, dialect, &name, &key)
                        .await?
                        .saturating_add(1),
                };
                let (attempts_table, dead_table) = table_names(dialect);
                if forget_attempts {
                    tx.buffer([Mutation::delete(attempts_table, all_attempts(&name, &key))])?;
                }
                let c = |name| column(dialect, name);
                tx.buffer([Mutation::new_insert_or_update_builder(dead_table)
                    .set(c("QueueName"))
                    .to(name.as_str().to_owned())
                    .set(c("KeyDigest"))
                    .to(key_digest(&key))
                    .set(c("MessageKey"))
                    .to(key.to_wire())
                    .set(c("KeyText"))
                    .to(key.to_string())
                    .set(c("Payload"))
                    .to(payload.as_bytes().to_vec())
                    .set(c("PayloadKind"))
                    .to(payload.kind().to_string())
                    .set(c("Attempts"))
                    .to(attempts)
                    .set(c("ErrorText"))
                    .to(error)
                    .set(c("DeadLetteredAt"))
                    .to(SystemTime::now())
                    .build()])?;
                Ok(())
            }
        })
        .await
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
    db: Database,
    settings: TransactionSettings,
}

impl DeadLetters {
    /// Dead letters of the database behind `db`, in its dialect (a bare `DatabaseClient` is
    /// taken to be GoogleSQL: see [`Database`]).
    pub fn new(db: impl Into<Database>) -> Self {
        Self {
            db: db.into(),
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
        query_rows(&self.db, statement, |row| read_dead_letter(queue, row)).await
    }

    /// The dead letter of `key` in `queue`, if any.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn get(&self, queue: &QueueName, key: &MessageKey) -> Result<Option<DeadLetter>> {
        let letters = query_rows(&self.db, select_one(self.db.dialect(), queue, key), |row| {
            read_dead_letter(queue, row)
        })
        .await?;
        Ok(letters.into_iter().next())
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
        let dialect = self.db.dialect();
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let key = key.clone();
                async move {
                    let name = M::QUEUE;
                    let mut rows = tx.execute_query(select_one(dialect, &name, &key)).await?;
                    let letter = match rows.next().await {
                        Some(row) => read_dead_letter(&name, &row?)?,
                        None => return Ok(false),
                    };
                    Queue::<M>::in_dialect(dialect)
                        .send_raw(&tx, key.clone(), letter.payload, DeliverAt::Now)
                        .await?;
                    let (attempts_table, dead_table) = table_names(dialect);
                    tx.buffer([
                        Mutation::delete(dead_table, row_key(&name, &key)),
                        Mutation::delete(attempts_table, all_attempts(&name, &key)),
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
        let statement = delete_one(self.db.dialect(), queue, key, "");
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let statement = statement.clone();
                async move { Ok(tx.execute_update(statement).await? > 0) }
            })
            .await
    }

    /// Deletes the dead letter of `key` in `queue`, and any attempt rows of that key, inside
    /// the caller's read-write transaction: for a replay done by other means (a tool that sends
    /// the payload back by queue name), so that the send and the deletion commit together.
    ///
    /// # Errors
    /// Spanner's `OUT_OF_RANGE` (`ASSERT_ROWS_MODIFIED`) when there is no such dead letter: let
    /// it roll the transaction back. Other Spanner errors.
    pub async fn delete_in(
        &self,
        tx: &ReadWriteTransaction,
        queue: &QueueName,
        key: &MessageKey,
    ) -> Result<()> {
        let dialect = self.db.dialect();
        tx.execute_update(delete_one(dialect, queue, key, " ASSERT_ROWS_MODIFIED 1"))
            .await?;
        tx.buffer([Mutation::delete(
            table_names(dialect).0,
            all_attempts(queue, key),
        )])?;
        Ok(())
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
