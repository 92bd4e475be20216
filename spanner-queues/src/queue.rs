//! Sending and cancelling: in the caller's transaction ([`Transaction`]) or in a transaction of
//! their own ([`Database`]), with the same names and meaning.
//!
//! | Method | Statement | Fails with |
//! |---|---|---|
//! | `send`, `send_with`, `send_many`, `send_many_with` | `INSERT INTO Q (keys…, Payload, DeliverTime) VALUES …` | [`Error::AlreadyQueued`] when the key is still queued |
//! | `cancel` | `DELETE FROM Q WHERE key…` | — (returns whether a message was removed) |
//!
//! On a [`Transaction`] nothing is visible to consumers until that transaction commits, and
//! nothing is sent if it rolls back. On a [`Database`] each call commits on its own, with the
//! database's [`transaction_settings`](Database::transaction_settings).
//!
//! The statements are DML because the official Rust client has no `Send`/`Ack` mutation builders
//! yet; Spanner documents DML as equivalent for queues.

use std::marker::PhantomData;
use std::time::{Duration, SystemTime};

use google_cloud_spanner::error::BatchUpdateError;
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::transaction::ReadWriteTransaction;

use tracing::Instrument as _;

use crate::bounds;
use crate::codec::Payload;
use crate::database::{Database, MAX_PAYLOAD_BYTES_LIMIT};
use crate::error::{Code, Error, Result};
use crate::ident::{QueueName, push_identifier};
use crate::key::{KeyColumn, MessageKey, TypedKey};
use crate::message::{DEFAULT_MAX_PAYLOAD_BYTES, QueueMessage, RECOMMENDED_MAX_PAYLOAD_BYTES};
use crate::ordering::Sequence;
use crate::outcome::{OperationKind, record};
use crate::schema::{Dialect, SystemColumn};
use crate::transaction::Transaction;

/// When a sent message becomes deliverable (the inside of [`SendOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum DeliverAt {
    /// At commit: `DeliverTime = CURRENT_TIMESTAMP()`.
    #[default]
    Now,
    /// At an absolute time (a time in the past means now).
    Time(SystemTime),
    /// This long after the statement runs, by Spanner's clock (no client clock skew).
    After(Duration),
}

/// The settings of a [`Queue`] handle (a few words, copied with it: making a handle per send
/// allocates nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QueueConfig {
    dialect: Dialect,
    max_payload_bytes: usize,
    warn_payload_bytes: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            dialect: Dialect::GoogleSql,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            warn_payload_bytes: RECOMMENDED_MAX_PAYLOAD_BYTES,
        }
    }
}

/// The statements of the queue of message type `M`, in a dialect, with payload limits.
#[derive(Debug)]
pub(crate) struct Queue<M> {
    config: QueueConfig,
    _message: PhantomData<fn() -> M>,
}

impl<M> Clone for Queue<M> {
    fn clone(&self) -> Self {
        Self {
            config: self.config,
            _message: PhantomData,
        }
    }
}

impl<M: QueueMessage> Queue<M> {
    /// The queue of `M` in `db`: its dialect and payload limits.
    pub(crate) fn of(db: &Database) -> Self {
        Self {
            config: QueueConfig {
                dialect: db.dialect(),
                max_payload_bytes: db.max_payload_bytes(),
                warn_payload_bytes: db.warn_payload_bytes(),
            },
            _message: PhantomData,
        }
    }

    /// A handle whose statements are written in `dialect` (the database's).
    #[cfg(test)]
    pub(crate) fn in_dialect(dialect: Dialect) -> Self {
        Self {
            config: QueueConfig {
                dialect,
                ..QueueConfig::default()
            },
            _message: PhantomData,
        }
    }

    /// This handle's settings, writing in `dialect` (the database's).
    pub(crate) fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.config.dialect = dialect;
        self
    }

    /// Refuses payloads larger than `bytes` with [`Error::PayloadTooLarge`] (nothing written).
    ///
    /// `bytes` must lie between 1 and [`MAX_PAYLOAD_BYTES_LIMIT`] (Spanner's 10 MiB cell limit);
    /// sends through a handle with another value fail with [`Error::InvalidSetting`] before
    /// anything is written (see [`validate`](Self::validate)).
    #[cfg(test)]
    pub(crate) fn with_max_payload_bytes(mut self, bytes: usize) -> Self {
        self.config.max_payload_bytes = bytes;
        self
    }

    /// The dialect the statements are written in (the database's).
    pub(crate) fn dialect(&self) -> Dialect {
        self.config.dialect
    }

    /// Sends several messages in one round trip with one [`DeliverAt`] for all; returns their
    /// keys (with the sequences assigned to an ordered queue's messages).
    pub(crate) async fn send_many_with<'a, I>(
        &self,
        tx: &ReadWriteTransaction,
        messages: I,
        deliver: DeliverAt,
    ) -> Result<Vec<MessageKey>>
    where
        I: IntoIterator<Item = &'a M>,
    {
        let (mut keys, payloads): (Vec<MessageKey>, Vec<Payload>) = messages
            .into_iter()
            .map(|message| self.encode(message).map(|row| (row.key, row.payload)))
            .collect::<Result<_>>()?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        if M::ORDERED {
            // An ordered queue: the send assigns each message its ordering key's next sequence.
            crate::ordering::assign::<M>(tx, self.config.dialect, &mut keys).await?;
        }
        let target = self.target();
        // One statement per message, all in one round trip: when a key is still queued, Batch
        // DML reports which statement failed, so the error names the exact key. The payloads
        // move into the statements (no copy); the keys stay for the result.
        let statements: Vec<Statement> = keys
            .iter()
            .zip(payloads)
            .map(|(key, payload)| target.insert_statement(key, payload, deliver))
            .collect();
        let span = tracing::debug_span!(
            "spanner_queues.send",
            queue = %M::QUEUE,
            messages = keys.len(),
            key = %keys[0].short(),
        );
        let result = async {
            match <[Statement; 1]>::try_from(statements) {
                Ok([statement]) => tx
                    .execute_update(statement)
                    .await
                    .map(|_| ())
                    .map_err(|e| (e, 0)),
                Err(statements) => tx
                    .execute_batch_update(statements)
                    .await
                    .map(|_| ())
                    .map_err(|e| {
                        // The failing statement is the first one without an update count.
                        let failed =
                            BatchUpdateError::extract(&e).map_or(0, |b| b.update_counts.len());
                        (e, failed)
                    }),
            }
        }
        .instrument(span)
        .await;
        match result {
            Ok(()) => {
                metrics::counter!(crate::telemetry::SENT, "queue" => queue_label(&M::QUEUE))
                    .increment(keys.len() as u64);
                record(OperationKind::Send, &M::QUEUE, keys.iter().cloned());
                Ok(keys)
            }
            Err((error, failed)) => Err(target.send_error(error, &keys, failed)),
        }
    }

    /// The statements' target: the queue of `M` in this handle's dialect.
    pub(crate) fn target(&self) -> Target<'static> {
        Target {
            queue: M::QUEUE,
            columns: M::KEY_COLUMNS,
            dialect: self.config.dialect,
        }
    }

    /// Cancels a message that has not been acked yet; returns whether one was removed. An
    /// ordered type's key is an ordering key, which names no one message: [`Error::InvalidKey`]
    /// (see [`cancel_sequenced`](Self::cancel_sequenced)).
    pub(crate) async fn cancel(&self, tx: &ReadWriteTransaction, key: &M::Key) -> Result<bool> {
        if M::ORDERED {
            return Err(Error::InvalidKey {
                queue: M::QUEUE,
                source: crate::key::KeyError::Arity {
                    expected: M::KEY_COLUMNS.len(),
                    found: M::KEY_COLUMNS.len() - 1,
                },
            });
        }
        self.target().cancel(tx, key.to_message_key()).await
    }

    /// Cancels the message of an ordered type's ordering key `key` with `sequence`; returns
    /// whether it was removed. [`Error::InvalidKey`] when `M` is not ordered.
    pub(crate) async fn cancel_sequenced(
        &self,
        tx: &ReadWriteTransaction,
        key: &M::Key,
        sequence: Sequence,
    ) -> Result<bool> {
        if !M::ORDERED {
            return Err(Error::InvalidKey {
                queue: M::QUEUE,
                source: crate::key::KeyError::Arity {
                    expected: M::KEY_COLUMNS.len(),
                    found: M::KEY_COLUMNS.len() + 1,
                },
            });
        }
        self.target()
            .cancel(tx, crate::ordering::full_key::<M>(key, sequence))
            .await
    }

    /// Releases messages inside `tx`: each is deleted (without asserting that it is there)
    /// and, if it was, sent again from its key and payload, due at its time. Two round trips
    /// whatever the number (Batch DML). Returns how many were released.
    pub(crate) async fn release_many(
        &self,
        tx: &ReadWriteTransaction,
        messages: Vec<(MessageKey, crate::codec::Payload, DeliverAt)>,
    ) -> Result<usize> {
        self.target().release_many(tx, messages).await
    }

    /// Sends a message from its key and an already encoded payload, as read from the queue (a
    /// release, a dead-letter replay): the payload goes back byte for byte.
    pub(crate) async fn send_raw(
        &self,
        tx: &ReadWriteTransaction,
        key: MessageKey,
        payload: Payload,
        deliver: DeliverAt,
    ) -> Result<()> {
        self.target().send_raw(tx, key, payload, deliver).await
    }

    /// Acks (deletes) the message of `key`, asserting that it is still there; see
    /// [`Target::ack_key`].
    pub(crate) async fn ack_key(&self, tx: &ReadWriteTransaction, key: MessageKey) -> Result<()> {
        self.target().ack_key(tx, key).await
    }

    /// Checks the handle's settings: the payload limit lies between 1 and
    /// [`MAX_PAYLOAD_BYTES_LIMIT`]. Every send runs this check first.
    pub(crate) fn validate(&self) -> Result<()> {
        bounds::in_range(
            "max_payload_bytes",
            self.config.max_payload_bytes,
            1..=MAX_PAYLOAD_BYTES_LIMIT,
        )
    }

    fn encode(&self, message: &M) -> Result<EncodedRow> {
        self.validate()?;
        let key = message.message_key();
        let payload = message.encode()?;
        let size = payload.len();
        if size > self.config.max_payload_bytes {
            return Err(Error::PayloadTooLarge {
                queue: M::QUEUE.clone(),
                key,
                size,
                limit: self.config.max_payload_bytes,
            });
        }
        if size > self.config.warn_payload_bytes {
            tracing::warn!(
                queue = %M::QUEUE,
                key = %key.short(),
                size,
                recommended = self.config.warn_payload_bytes,
                "payload larger than recommended; keep queue payloads small and store large data in a table"
            );
        }
        Ok(EncodedRow { key, payload })
    }
}

/// Where the statements of one queue go: its name, key columns and dialect. Typed queues
/// ([`Queue`]) and queues known by name only ([`DynQueue`](crate::DynQueue)) share it.
#[derive(Debug, Clone)]
pub(crate) struct Target<'a> {
    pub(crate) queue: QueueName,
    pub(crate) columns: &'a [KeyColumn],
    pub(crate) dialect: Dialect,
}

impl Target<'_> {
    /// Releases messages inside `tx`; see [`Queue::release_many`].
    pub(crate) async fn release_many(
        &self,
        tx: &ReadWriteTransaction,
        messages: Vec<(MessageKey, crate::codec::Payload, DeliverAt)>,
    ) -> Result<usize> {
        if messages.is_empty() {
            return Ok(0);
        }
        let deletes = messages
            .iter()
            .map(|(key, _, _)| self.delete_statement(key, false))
            .collect::<Result<Vec<_>>>()?;
        let counts = tx
            .execute_batch_update(deletes)
            .await
            .map_err(|e| missing_queue(&self.queue, Error::from(e)))?;
        let mut sends = Vec::new();
        let mut sent = Vec::new();
        for ((key, payload, deliver), count) in messages.into_iter().zip(counts) {
            if count > 0 {
                sends.push(self.insert_statement(&key, payload, deliver));
                sent.push(key);
            }
        }
        if sends.is_empty() {
            return Ok(0);
        }
        tx.execute_batch_update(sends).await?;
        record(OperationKind::Ack, &self.queue, sent.iter().cloned());
        record(OperationKind::Send, &self.queue, sent.iter().cloned());
        Ok(sent.len())
    }

    /// Cancels a message that has not been acked yet (typically a scheduled one). Returns
    /// whether a message was removed; cancelling a message that is gone is not an error.
    pub(crate) async fn cancel(&self, tx: &ReadWriteTransaction, key: MessageKey) -> Result<bool> {
        let span =
            tracing::debug_span!("spanner_queues.cancel", queue = %self.queue, key = %key.short());
        let removed = tx
            .execute_update(self.delete_statement(&key, false)?)
            .instrument(span)
            .await
            .map_err(|error| missing_queue(&self.queue, Error::from(error)))?;
        record(OperationKind::Cancel, &self.queue, [key]);
        Ok(removed > 0)
    }

    /// Sends a message from its key and an already encoded payload, as read from the queue (a
    /// release, a dead-letter replay): the payload goes back byte for byte, without size checks,
    /// so that payloads written by other clients survive.
    pub(crate) async fn send_raw(
        &self,
        tx: &ReadWriteTransaction,
        key: MessageKey,
        payload: Payload,
        deliver: DeliverAt,
    ) -> Result<()> {
        if key.len() != self.columns.len() {
            return Err(Error::InvalidKey {
                queue: self.queue.clone(),
                source: crate::key::KeyError::Arity {
                    expected: self.columns.len(),
                    found: key.len(),
                },
            });
        }
        let span = tracing::debug_span!("spanner_queues.send", queue = %self.queue, messages = 1, key = %key.short());
        match tx
            .execute_update(self.insert_statement(&key, payload, deliver))
            .instrument(span)
            .await
        {
            Ok(_) => {
                metrics::counter!(crate::telemetry::SENT, "queue" => queue_label(&self.queue))
                    .increment(1);
                record(OperationKind::Send, &self.queue, [key]);
                Ok(())
            }
            Err(error) => Err(self.send_error(error, std::slice::from_ref(&key), 0)),
        }
    }

    /// Acks (deletes) the message of `key`, asserting that it is still there.
    ///
    /// Ack in the same transaction as the writes that processing the message produced: then
    /// those writes commit exactly once, however often the message was delivered.
    ///
    /// # Errors
    /// [`Error::AlreadyAcked`] when the message is gone (acked by another worker, or by an earlier
    /// attempt whose commit outcome looked unknown). **Propagate it** (`?`) so that the runner
    /// rolls the transaction back. As a safety fuse, the transaction is also made uncommittable:
    /// catching the error and returning `Ok` from the closure still fails the commit, so the
    /// other writes of the transaction can never be applied next to a failed ack.
    pub(crate) async fn ack_key(&self, tx: &ReadWriteTransaction, key: MessageKey) -> Result<()> {
        let span =
            tracing::debug_span!("spanner_queues.ack", queue = %self.queue, key = %key.short());
        match tx
            .execute_update(self.delete_statement(&key, true)?)
            .instrument(span)
            .await
        {
            Ok(_) => {
                metrics::counter!(crate::telemetry::ACKED, "queue" => queue_label(&self.queue))
                    .increment(1);
                record(OperationKind::Ack, &self.queue, [key]);
                Ok(())
            }
            Err(error) => {
                let error = Error::from(error);
                // Only `ASSERT_ROWS_MODIFIED` (`OUT_OF_RANGE`) means the row is gone. A DML
                // statement's `NOT_FOUND` is about the table or the transaction ("Transaction
                // not found": expired, or displaced on the emulator), not the message.
                if error.code() == Some(Code::OutOfRange) && matches!(error, Error::Spanner(_)) {
                    self.blow_fuse(tx, &key);
                    Err(Error::AlreadyAcked {
                        queue: self.queue.clone(),
                        key,
                    })
                } else {
                    Err(missing_queue(&self.queue, error))
                }
            }
        }
    }

    /// Buffers a mutation that cannot commit: an update of the (missing) message row, which
    /// Spanner refuses (`NOT_FOUND` for a missing row; queues do not support updates at all).
    fn blow_fuse(&self, tx: &ReadWriteTransaction, key: &MessageKey) {
        let mut builder = Mutation::new_update_builder(self.queue.as_str());
        for (column, value) in self.columns.iter().zip(key.parts()) {
            builder = builder.set(column.name().as_str()).to(value.to_value());
        }
        if tx.buffer([builder.build()]).is_err() {
            tracing::warn!(queue = %self.queue, key = %key.short(), "could not buffer the ack fuse");
        }
    }

    fn column(&self, column: SystemColumn) -> &'static str {
        column.name(self.dialect)
    }

    /// The `INSERT` of one message: `INSERT INTO Q (keys…, Payload, DeliverTime) VALUES (…)`.
    ///
    /// Sent for every message, so it is written in one pass into one buffer, and the payload
    /// is moved into its parameter, not copied.
    fn insert_statement(
        &self,
        key: &MessageKey,
        payload: Payload,
        deliver: DeliverAt,
    ) -> Statement {
        let dialect = self.dialect;
        let mut params = Params::new(dialect);
        let mut bound = Vec::with_capacity(self.columns.len() + 2);
        // The delivery time's parameter (if any) is taken first: PostgreSQL numbers it `$1`.
        let deliver_sql: std::borrow::Cow<'static, str> = match (deliver, dialect) {
            (DeliverAt::Now, Dialect::GoogleSql) => "CURRENT_TIMESTAMP()".into(),
            (DeliverAt::Now, Dialect::PostgreSql) => "CURRENT_TIMESTAMP".into(),
            (DeliverAt::Time(at), _) => {
                let (name, placeholder) = params.next("deliver_at");
                bound.push((
                    name,
                    timestamp_value(at),
                    google_cloud_spanner::types::timestamp(),
                ));
                placeholder.into()
            }
            (DeliverAt::After(delay), Dialect::GoogleSql) => {
                let (name, placeholder) = params.next("deliver_after_us");
                let micros = i64::try_from(delay.as_micros()).unwrap_or(i64::MAX);
                bound.push((
                    name,
                    google_cloud_spanner::value::Value::from(micros),
                    google_cloud_spanner::types::int64(),
                ));
                format!("TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL {placeholder} MICROSECOND)")
                    .into()
            }
            (DeliverAt::After(delay), Dialect::PostgreSql) => {
                // The commit's clock, as in GoogleSQL; the interval is text
                // (`spanner.timestamptz_add(timestamptz, text)`).
                let (name, placeholder) = params.next("deliver_after");
                let micros = delay.as_micros();
                bound.push((
                    name,
                    google_cloud_spanner::value::Value::from(format!("{micros} microseconds")),
                    google_cloud_spanner::types::string(),
                ));
                format!("spanner.timestamptz_add(CURRENT_TIMESTAMP, {placeholder})").into()
            }
        };
        let mut sql = String::with_capacity(96 + 32 * self.columns.len());
        sql.push_str("INSERT INTO ");
        push_identifier(&mut sql, self.queue.as_str(), dialect);
        sql.push_str(" (");
        for column in self.columns {
            push_identifier(&mut sql, column.name().as_str(), dialect);
            sql.push_str(", ");
        }
        sql.push_str(self.column(SystemColumn::Payload));
        sql.push_str(", ");
        sql.push_str(self.column(SystemColumn::DeliverTime));
        sql.push_str(") VALUES (");
        for (k, (column, value)) in self.columns.iter().zip(key.parts()).enumerate() {
            let name = params.push(&mut sql, key_param_name(k));
            sql.push_str(", ");
            bound.push((name, value.to_value(), column.key_type().param_type()));
        }
        let name = params.push(&mut sql, "p0".into());
        sql.push_str(", ");
        sql.push_str(&deliver_sql);
        sql.push(')');
        // PostgreSQL's jsonb is JSON annotated as such on the wire.
        let ty = match (&payload, dialect) {
            (Payload::Json(_), Dialect::PostgreSql) => google_cloud_spanner::types::pg_jsonb(),
            _ => payload.param_type(),
        };
        bound.push((name, payload.into_value(), ty));
        let mut builder = Statement::builder(sql);
        for (name, value, ty) in bound {
            builder = builder.add_typed_param(name, value, ty);
        }
        builder.build()
    }

    fn delete_statement(&self, key: &MessageKey, assert_one: bool) -> Result<Statement> {
        if key.len() != self.columns.len() {
            return Err(Error::InvalidKey {
                queue: self.queue.clone(),
                source: crate::key::KeyError::Arity {
                    expected: self.columns.len(),
                    found: key.len(),
                },
            });
        }
        let dialect = self.dialect;
        let mut params = Params::new(dialect);
        let mut condition = Vec::with_capacity(key.len());
        let mut bound = Vec::with_capacity(key.len());
        // Each value binds as its own kind: the same as the column's for a key of `M`, and the
        // column's actual type for a key read back from a drifted column (a poison message
        // being dead-lettered).
        for (i, (column, value)) in self.columns.iter().zip(key.parts()).enumerate() {
            let (name, placeholder) = params.next(&format!("k{i}"));
            condition.push(format!("{} = {placeholder}", column.name().to_sql(dialect)));
            bound.push((name, value));
        }
        let mut sql = format!(
            "DELETE FROM {} WHERE {}",
            self.queue.to_sql(dialect),
            condition.join(" AND ")
        );
        if assert_one {
            // Documented for both dialects [C].
            sql.push_str(" ASSERT_ROWS_MODIFIED 1");
        }
        let mut builder = Statement::builder(sql);
        for (name, value) in bound {
            builder =
                builder.add_typed_param(name, value.to_value(), value.key_type().param_type());
        }
        Ok(builder.build())
    }

    /// Maps a failed send: `ALREADY_EXISTS` names the key of the failing statement.
    fn send_error(
        &self,
        error: google_cloud_spanner::Error,
        keys: &[MessageKey],
        failed: usize,
    ) -> Error {
        let code = BatchUpdateError::extract(&error)
            .and_then(|b| b.status.status().map(|s| s.code))
            .or_else(|| error.status().map(|s| s.code));
        if code != Some(Code::AlreadyExists) {
            return missing_queue(&self.queue, Error::from(error));
        }
        let key = keys.get(failed).unwrap_or(&keys[0]).clone();
        Error::AlreadyQueued {
            queue: self.queue.clone(),
            key,
        }
    }
}

/// [`Error::QueueNotFound`] when Spanner refused a statement because the queue's table does
/// not exist, else `error` unchanged. Not documented: Spanner says so only in the status message
/// ("Table not found: Q", `INVALID_ARGUMENT` for DML; the emulator says the same); matching it is
/// the one way to tell a missing queue from other argument errors. Change it here if the
/// platform adds a structured reason.
fn missing_queue(queue: &QueueName, error: Error) -> Error {
    let is_missing = match &error {
        Error::Spanner(spanner) => {
            matches!(spanner.code(), Some(Code::InvalidArgument | Code::NotFound))
                && spanner.status_message().is_some_and(|message| {
                    let message = message.to_ascii_lowercase();
                    message.contains("table not found")
                        && message.contains(&queue.as_str().to_ascii_lowercase())
                })
        }
        _ => false,
    };
    if is_missing {
        Error::QueueNotFound {
            queue: queue.clone(),
        }
    } else {
        error
    }
}

/// A message ready to insert.
struct EncodedRow {
    key: MessageKey,
    payload: Payload,
}

/// Query parameter names in a dialect: `@name` in GoogleSQL; `$1`, `$2`, … (sent as `p1`,
/// `p2`, …) in PostgreSQL, numbered in the order they are taken.
#[derive(Debug)]
pub(crate) struct Params {
    dialect: Dialect,
    taken: usize,
}

impl Params {
    pub(crate) fn new(dialect: Dialect) -> Self {
        Self { dialect, taken: 0 }
    }

    /// The next parameter: its name in the request and its placeholder in the SQL.
    pub(crate) fn next(&mut self, name: &str) -> (String, String) {
        let mut placeholder = String::new();
        let name = self.push(&mut placeholder, name.to_owned().into());
        (name, placeholder)
    }

    /// The next parameter, its placeholder written at the end of `sql`: returns its name in the
    /// request (`name` itself in GoogleSQL, no copy).
    pub(crate) fn push(
        &mut self,
        sql: &mut String,
        name: std::borrow::Cow<'static, str>,
    ) -> String {
        use std::fmt::Write as _;
        self.taken += 1;
        match self.dialect {
            Dialect::GoogleSql => {
                sql.push('@');
                sql.push_str(&name);
                name.into_owned()
            }
            Dialect::PostgreSql => {
                let _ = write!(sql, "${}", self.taken);
                format!("p{}", self.taken)
            }
        }
    }
}

/// The name of the parameter of key part `k` in an `INSERT` (`k0_0`, `k0_1`, …: the first row's
/// key parts), without formatting for the usual few key columns.
fn key_param_name(k: usize) -> std::borrow::Cow<'static, str> {
    const NAMES: [&str; 8] = [
        "k0_0", "k0_1", "k0_2", "k0_3", "k0_4", "k0_5", "k0_6", "k0_7",
    ];
    match NAMES.get(k) {
        Some(name) => (*name).into(),
        None => format!("k0_{k}").into(),
    }
}

/// The `queue` label of a metric: the queue's name, borrowed (not copied) when it is a
/// `'static` name, as the names of message types are.
fn queue_label(queue: &QueueName) -> metrics::SharedString {
    queue.to_cow().into()
}

/// A TIMESTAMP parameter value (RFC 3339, UTC).
pub(crate) fn timestamp_value(at: SystemTime) -> google_cloud_spanner::value::Value {
    google_cloud_spanner::value::Value::from(at)
}

/// Options of a send: when the message becomes deliverable.
///
/// ```
/// use std::time::Duration;
/// use spanner_queues::SendOptions;
///
/// let later = SendOptions::new().deliver_after(Duration::from_secs(30));
/// # let _ = later;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[must_use]
pub struct SendOptions {
    deliver: DeliverAt,
}

impl SendOptions {
    /// Deliverable as soon as the transaction commits (the default).
    pub fn new() -> Self {
        Self::default()
    }

    /// Deliverable from `at` (a time in the past means at commit).
    pub fn deliver_at(mut self, at: SystemTime) -> Self {
        self.deliver = DeliverAt::Time(at);
        self
    }

    /// Deliverable `delay` after the statement runs, by Spanner's clock (no client clock
    /// skew). A zero delay means at commit.
    pub fn deliver_after(mut self, delay: Duration) -> Self {
        self.deliver = if delay.is_zero() {
            DeliverAt::Now
        } else {
            DeliverAt::After(delay)
        };
        self
    }

    /// The delivery time as the statements write it.
    pub(crate) fn deliver(self) -> DeliverAt {
        self.deliver
    }

    /// When the message becomes deliverable, if not at commit: an absolute time, or the
    /// client's estimate of a [`deliver_after`](Self::deliver_after) (now + delay).
    fn scheduled(self) -> Option<SystemTime> {
        match self.deliver {
            DeliverAt::Now => None,
            DeliverAt::Time(at) => Some(at),
            DeliverAt::After(delay) => SystemTime::now().checked_add(delay),
        }
    }
}

/// A message that was sent (in a transaction that may not have committed yet): its key, the
/// [`Sequence`] an ordered queue's send assigned it, and when it becomes deliverable if it was
/// scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent<M> {
    key: MessageKey,
    sequence: Option<Sequence>,
    deliver_at: Option<SystemTime>,
    _message: PhantomData<fn() -> M>,
}

impl<M: QueueMessage> Sent<M> {
    fn new(key: MessageKey, deliver_at: Option<SystemTime>) -> Self {
        Self {
            sequence: Sequence::of::<M>(&key),
            key,
            deliver_at,
            _message: PhantomData,
        }
    }
}

impl<M> Sent<M> {
    /// The [`Sequence`] the send assigned the message in its ordering key, for an ordered type
    /// ([`QueueMessage::ORDERED`]); `None` otherwise. With the message's key it names this one
    /// message: [`Delivery::sequence`](crate::Delivery::sequence) and
    /// [`HandlerContext::sequence`](crate::HandlerContext::sequence) give it back to the
    /// consumer, and [`Transaction::cancel_sequenced`] cancels it.
    pub fn sequence(&self) -> Option<Sequence> {
        self.sequence
    }

    /// The message's primary key as written (for an ordered queue, with the sequence the send
    /// assigned as its last part).
    pub fn key(&self) -> &MessageKey {
        &self.key
    }

    /// When the message becomes deliverable, if it was scheduled: the time given to
    /// [`SendOptions::deliver_at`], or this machine's estimate of
    /// [`SendOptions::deliver_after`] (Spanner's clock decides). `None`: at commit.
    pub fn deliver_at(&self) -> Option<SystemTime> {
        self.deliver_at
    }
}

/// Sends in the caller's transaction: nothing is visible to consumers until it commits.
impl Transaction {
    /// Sends `message`, deliverable as soon as the transaction commits.
    ///
    /// ```no_run
    /// # use spanner_queues::QueueMessage;
    /// # #[derive(QueueMessage)]
    /// # #[queue(name = "OrderEmails")]
    /// # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
    /// use google_cloud_spanner::statement::Statement;
    /// use spanner_queues::Database;
    ///
    /// async fn place_order(db: &Database, email: &OrderEmail) -> spanner_queues::Result<()> {
    ///     db.transaction()
    ///         .run(move |tx| async move {
    ///             tx.execute_update(
    ///                 Statement::builder("INSERT INTO Orders (OrderId) VALUES (@id)")
    ///                     .add_param("id", email.order_id)
    ///                     .build(),
    ///             )
    ///             .await?;
    ///             tx.send(email).await?; // committed with the order, or not at all
    ///             Ok(())
    ///         })
    ///         .await
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::AlreadyQueued`] if a message with the same key is still queued;
    /// [`Error::PayloadTooLarge`] / [`Error::Encode`] before anything is sent;
    /// [`Error::QueueNotFound`]; Spanner errors (aborts are retried by the runner when you
    /// propagate them with `?`).
    pub async fn send<M: QueueMessage>(&self, message: &M) -> Result<Sent<M>> {
        self.send_with(message, SendOptions::new()).await
    }

    /// Sends `message` with `options` (a delivery time).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub async fn send_with<M: QueueMessage>(
        &self,
        message: &M,
        options: SendOptions,
    ) -> Result<Sent<M>> {
        let mut sent = self
            .send_many_with(std::iter::once(message), options)
            .await?;
        Ok(sent.remove(0))
    }

    /// Sends several messages in one round trip, all deliverable at commit.
    ///
    /// # Errors
    /// As [`send`](Self::send); if any key is still queued, the error names it, and nothing of
    /// the batch is kept once the transaction rolls back.
    pub async fn send_many<'m, M: QueueMessage>(
        &self,
        messages: impl IntoIterator<Item = &'m M>,
    ) -> Result<Vec<Sent<M>>> {
        self.send_many_with(messages, SendOptions::new()).await
    }

    /// Sends several messages in one round trip with one set of `options` for all.
    ///
    /// # Errors
    /// As [`send_many`](Self::send_many).
    pub async fn send_many_with<'m, M: QueueMessage>(
        &self,
        messages: impl IntoIterator<Item = &'m M>,
        options: SendOptions,
    ) -> Result<Vec<Sent<M>>> {
        let keys = Queue::<M>::of(self.database())
            .send_many_with(self.read_write(), messages, options.deliver)
            .await?;
        let at = options.scheduled();
        Ok(keys.into_iter().map(|key| Sent::new(key, at)).collect())
    }

    /// Cancels the message of `key` if it is still queued (typically a scheduled one). Returns
    /// whether a message was removed; cancelling a message that is gone is not an error.
    ///
    /// An ordered type's key names an ordering key, not one message: cancel one of its messages
    /// with [`cancel_sequenced`](Self::cancel_sequenced).
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for an ordered type ([`QueueMessage::ORDERED`]);
    /// [`Error::QueueNotFound`]; Spanner errors.
    pub async fn cancel<M: QueueMessage>(&self, key: &M::Key) -> Result<bool> {
        Queue::<M>::of(self.database())
            .cancel(self.read_write(), key)
            .await
    }

    /// Cancels the message of an ordered type's ordering key `key` with `sequence`, if it is
    /// still queued: the way to cancel one message of an ordered queue
    /// ([`QueueMessage::ORDERED`]; [`cancel`](Self::cancel) is for the others). The sequence is
    /// [`Sent::sequence`] of its send, [`Delivery::sequence`](crate::Delivery::sequence), or a
    /// value the application stored. Returns whether it was removed; the later messages of its
    /// ordering key stop waiting for it, as for a handled one.
    ///
    /// ```no_run
    /// # use spanner_queues::QueueMessage;
    /// # #[derive(QueueMessage)]
    /// # #[queue(name = "ConversationTurns", ordered)]
    /// # struct Turn { #[queue(key)] conversation_id: String, text: String }
    /// # async fn demo(db: spanner_queues::Database, turn: Turn) -> spanner_queues::Result<()> {
    /// let sent = db.send(&turn).await?;
    /// let sequence = sent.sequence().expect("an ordered type");
    /// // … later, the turn is no longer wanted:
    /// db.cancel_sequenced::<Turn>(&turn.conversation_id, sequence).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidKey`] when `M` is not ordered; [`Error::QueueNotFound`]; Spanner errors.
    pub async fn cancel_sequenced<M: QueueMessage>(
        &self,
        key: &M::Key,
        sequence: Sequence,
    ) -> Result<bool> {
        Queue::<M>::of(self.database())
            .cancel_sequenced(self.read_write(), key, sequence)
            .await
    }
}

/// Sends in a transaction of their own: each call commits (all or none of its messages), with
/// the database's [`transaction_settings`](Database::transaction_settings).
///
/// # Cancellation
/// Dropping one of these futures before it completes leaves the outcome unknown to you if the
/// commit was already sent. Send in a [`guarded`](crate::transaction::TransactionBuilder::guarded)
/// transaction when you need to find out afterwards.
impl Database {
    /// Sends `message` in its own transaction, deliverable as soon as it commits.
    ///
    /// ```no_run
    /// # use spanner_queues::QueueMessage;
    /// # #[derive(QueueMessage)]
    /// # #[queue(name = "Emails")]
    /// # struct Email { #[queue(key)] id: uuid::Uuid, to: String }
    /// # async fn demo(db: spanner_queues::Database) -> spanner_queues::Result<()> {
    /// db.send(&Email { id: uuid::Uuid::new_v4(), to: "ada@example.com".into() }).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Transaction::send`]; [`Error::OutcomeUnknown`] when the commit's outcome is
    /// unknown (never retried).
    pub async fn send<M: QueueMessage>(&self, message: &M) -> Result<Sent<M>> {
        self.send_with(message, SendOptions::new()).await
    }

    /// Sends `message` with `options` in its own transaction.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub async fn send_with<M: QueueMessage>(
        &self,
        message: &M,
        options: SendOptions,
    ) -> Result<Sent<M>> {
        self.transaction()
            .run(move |tx| async move { tx.send_with(message, options).await })
            .await
    }

    /// Sends several messages in one transaction of their own (all or none).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub async fn send_many<'m, M: QueueMessage>(
        &self,
        messages: impl IntoIterator<Item = &'m M>,
    ) -> Result<Vec<Sent<M>>> {
        self.send_many_with(messages, SendOptions::new()).await
    }

    /// Sends several messages with one set of `options` in one transaction of their own.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub async fn send_many_with<'m, M: QueueMessage>(
        &self,
        messages: impl IntoIterator<Item = &'m M>,
        options: SendOptions,
    ) -> Result<Vec<Sent<M>>> {
        let messages: Vec<&M> = messages.into_iter().collect();
        let messages = &messages;
        self.transaction()
            .run(
                move |tx| async move { tx.send_many_with(messages.iter().copied(), options).await },
            )
            .await
    }

    /// Cancels the message of `key` in its own transaction; returns whether one was removed.
    ///
    /// # Errors
    /// As [`Transaction::cancel`]; [`Error::OutcomeUnknown`] when the commit's outcome is
    /// unknown.
    pub async fn cancel<M: QueueMessage>(&self, key: &M::Key) -> Result<bool> {
        self.transaction()
            .run(move |tx| async move { tx.cancel::<M>(key).await })
            .await
    }

    /// Cancels the message of an ordered type's ordering key `key` with `sequence` in its own
    /// transaction; returns whether it was removed.
    ///
    /// # Errors
    /// As [`Transaction::cancel_sequenced`]; [`Error::OutcomeUnknown`] when the commit's
    /// outcome is unknown.
    pub async fn cancel_sequenced<M: QueueMessage>(
        &self,
        key: &M::Key,
        sequence: Sequence,
    ) -> Result<bool> {
        self.transaction()
            .run(move |tx| async move { tx.cancel_sequenced::<M>(key, sequence).await })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{KeyColumn, KeyType};
    use crate::{
        codec::{Payload, PayloadSpec},
        ident::ColumnName,
    };

    struct Task {
        user: i64,
        id: String,
        body: String,
    }

    impl QueueMessage for Task {
        type Key = (i64, String);
        const QUEUE: QueueName = QueueName::from_static("UserTasks");
        const KEY_COLUMNS: &'static [KeyColumn] = &[
            KeyColumn::new(ColumnName::from_static("UserId"), KeyType::Int64),
            KeyColumn::new(ColumnName::from_static("MessageId"), KeyType::String),
        ];
        const PAYLOAD: PayloadSpec = PayloadSpec::string();
        fn key(&self) -> Self::Key {
            (self.user, self.id.clone())
        }
        fn encode_payload(&self) -> std::result::Result<Payload, crate::codec::CodecError> {
            Ok(crate::codec::encode_string(&self.body))
        }
        fn decode(
            key: Self::Key,
            payload: Payload,
        ) -> std::result::Result<Self, crate::codec::CodecError> {
            Ok(Task {
                user: key.0,
                id: key.1,
                body: crate::codec::decode_string(payload)?,
            })
        }
    }

    fn task(n: i64) -> Task {
        Task {
            user: n,
            id: format!("m{n}"),
            body: "x".repeat(10),
        }
    }

    /// The insert of the first message of `queue`'s test tasks, delivered at `deliver`.
    fn insert_sql(queue: &Queue<Task>, deliver: DeliverAt) -> String {
        let row = queue.encode(&task(1)).unwrap();
        queue
            .target()
            .insert_statement(&row.key, row.payload, deliver)
            .sql()
            .to_owned()
    }

    #[test]
    fn insert_statement_lists_keys_payload_and_deliver_time() {
        let queue = Queue::<Task>::in_dialect(Dialect::GoogleSql);
        assert_eq!(
            insert_sql(&queue, DeliverAt::Now),
            "INSERT INTO UserTasks (UserId, MessageId, Payload, DeliverTime) VALUES \
             (@k0_0, @k0_1, @p0, CURRENT_TIMESTAMP())"
        );
        let later = insert_sql(&queue, DeliverAt::After(Duration::from_secs(2)));
        assert!(
            later.ends_with(
                "TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL @deliver_after_us MICROSECOND))"
            ),
            "{later}"
        );
        let at = insert_sql(&queue, DeliverAt::Time(SystemTime::UNIX_EPOCH));
        assert!(at.ends_with("@p0, @deliver_at)"), "{at}");
    }

    #[test]
    fn insert_statement_binds_each_key_part_and_the_payload() {
        let queue = Queue::<Task>::in_dialect(Dialect::GoogleSql);
        let row = queue.encode(&task(3)).unwrap();
        let statement = queue
            .target()
            .insert_statement(&row.key, row.payload, DeliverAt::Now);
        let debug = format!("{statement:?}");
        for name in ["\"k0_0\"", "\"k0_1\"", "\"p0\""] {
            assert!(debug.contains(name), "{name} in {debug}");
        }
        assert!(debug.contains("m3"), "{debug}");
        assert!(debug.contains(&"x".repeat(10)), "{debug}");
    }

    #[test]
    fn reserved_names_are_quoted_in_the_insert() {
        const COLUMNS: &[KeyColumn] = &[KeyColumn::new(
            ColumnName::from_static("Order"),
            KeyType::Int64,
        )];
        for (dialect, expected) in [
            (
                Dialect::GoogleSql,
                "INSERT INTO `Select` (`Order`, Payload, DeliverTime) VALUES \
                 (@k0_0, @p0, CURRENT_TIMESTAMP())",
            ),
            (
                Dialect::PostgreSql,
                "INSERT INTO \"select\" (\"order\", payload, deliver_time) VALUES \
                 ($1, $2, CURRENT_TIMESTAMP)",
            ),
        ] {
            let target = Target {
                queue: QueueName::from_static("Select"),
                columns: COLUMNS,
                dialect,
            };
            let key = 7_i64.to_message_key();
            let statement =
                target.insert_statement(&key, Payload::String("x".into()), DeliverAt::Now);
            assert_eq!(statement.sql(), expected);
        }
    }

    #[test]
    fn ack_and_cancel_statements() {
        let queue = Queue::<Task>::in_dialect(Dialect::GoogleSql);
        let key = (7, "m7".to_owned()).to_message_key();
        assert_eq!(
            queue.target().delete_statement(&key, true).unwrap().sql(),
            "DELETE FROM UserTasks WHERE UserId = @k0 AND MessageId = @k1 ASSERT_ROWS_MODIFIED 1"
        );
        assert_eq!(
            queue.target().delete_statement(&key, false).unwrap().sql(),
            "DELETE FROM UserTasks WHERE UserId = @k0 AND MessageId = @k1"
        );
    }

    #[test]
    fn postgresql_statements_use_postgresql_syntax_and_positional_parameters() {
        let queue = Queue::<Task>::in_dialect(Dialect::PostgreSql);
        assert_eq!(
            insert_sql(&queue, DeliverAt::Now),
            "INSERT INTO usertasks (userid, messageid, payload, deliver_time) VALUES \
             ($1, $2, $3, CURRENT_TIMESTAMP)"
        );
        assert_eq!(
            insert_sql(&queue, DeliverAt::After(Duration::from_secs(2))),
            "INSERT INTO usertasks (userid, messageid, payload, deliver_time) VALUES \
             ($2, $3, $4, spanner.timestamptz_add(CURRENT_TIMESTAMP, $1))"
        );
        assert_eq!(
            insert_sql(&queue, DeliverAt::Time(SystemTime::UNIX_EPOCH)),
            "INSERT INTO usertasks (userid, messageid, payload, deliver_time) VALUES \
             ($2, $3, $4, $1)"
        );
        let key = (7, "m7".to_owned()).to_message_key();
        assert_eq!(
            queue.target().delete_statement(&key, true).unwrap().sql(),
            "DELETE FROM usertasks WHERE userid = $1 AND messageid = $2 ASSERT_ROWS_MODIFIED 1"
        );
        assert_eq!(
            queue.target().delete_statement(&key, false).unwrap().sql(),
            "DELETE FROM usertasks WHERE userid = $1 AND messageid = $2"
        );
    }

    #[test]
    fn oversize_payload_is_refused_before_any_rpc() {
        let queue = Queue::<Task>::in_dialect(Dialect::GoogleSql).with_max_payload_bytes(5);
        match queue.encode(&task(1)) {
            Err(Error::PayloadTooLarge { size, limit, .. }) => assert_eq!((size, limit), (10, 5)),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("a 10-byte payload passed a 5-byte limit"),
        }
    }

    #[test]
    fn the_payload_limit_is_range_checked_before_any_rpc() {
        for bytes in [0, MAX_PAYLOAD_BYTES_LIMIT + 1, usize::MAX] {
            let queue = Queue::<Task>::in_dialect(Dialect::GoogleSql).with_max_payload_bytes(bytes);
            match queue.encode(&task(1)) {
                Err(Error::InvalidSetting { setting, .. }) => {
                    assert_eq!(setting, "max_payload_bytes");
                }
                Err(other) => panic!("{bytes}: unexpected error {other}"),
                Ok(_) => panic!("{bytes}: a send went ahead with an invalid limit"),
            }
        }
        for bytes in [10, MAX_PAYLOAD_BYTES_LIMIT] {
            let queue = Queue::<Task>::in_dialect(Dialect::GoogleSql).with_max_payload_bytes(bytes);
            assert!(queue.validate().is_ok(), "{bytes}");
            assert!(queue.encode(&task(1)).is_ok(), "{bytes}");
        }
    }
}
