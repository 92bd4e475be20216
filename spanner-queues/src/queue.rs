//! Sending, cancelling and acking **inside the caller's read-write transaction**.
//!
//! A [`Queue<M>`] is a cheap, cloneable handle on the queue of message type `M`. Its methods take
//! the official client's
//! [`ReadWriteTransaction`] (the one the
//! `TransactionRunner` hands to your closure) and add statements to it: nothing is visible to
//! consumers until that transaction commits, and nothing is sent if it rolls back.
//!
//! | Method | Statement | Fails with |
//! |---|---|---|
//! | [`send`](Queue::send), [`send_at`](Queue::send_at), [`send_after`](Queue::send_after), [`send_many`](Queue::send_many) | `INSERT INTO Q (keys…, Payload, DeliverTime) VALUES …` | [`Error::AlreadyQueued`] when the key is still queued |
//! | [`cancel`](Queue::cancel) | `DELETE FROM Q WHERE key…` | — (returns whether a message was removed) |
//! | [`ack`](Queue::ack) | `DELETE FROM Q WHERE key… ASSERT_ROWS_MODIFIED 1` | [`Error::AlreadyAcked`] when the message is gone |
//!
//! The statements are DML because the official Rust client has no `Send`/`Ack` mutation builders
//! yet; Spanner documents DML as equivalent for queues.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use google_cloud_spanner::error::BatchUpdateError;
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::transaction::ReadWriteTransaction;

use tracing::Instrument as _;

use crate::bounds;
use crate::database::{AsDatabase, Database};
use crate::error::{Code, Error, Result};
use crate::ident::QueueName;
use crate::key::{MessageKey, TypedKey};
use crate::message::{DEFAULT_MAX_PAYLOAD_BYTES, QueueMessage, RECOMMENDED_MAX_PAYLOAD_BYTES};
use crate::ordering::Sequence;
use crate::outcome::{OperationKind, record};
use crate::schema::{Dialect, SystemColumn};
use crate::transaction::{self, TransactionSettings};

/// The largest value [`Queue::with_max_payload_bytes`] accepts: Spanner's 10 MiB limit on one
/// cell, which a queue's payload column is.
pub const MAX_PAYLOAD_BYTES_LIMIT: usize = 10 * 1024 * 1024;

/// When a sent message becomes deliverable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DeliverAt {
    /// At commit: `DeliverTime = CURRENT_TIMESTAMP()`.
    #[default]
    Now,
    /// At an absolute time (a time in the past means now).
    Time(SystemTime),
    /// This long after the statement runs, by Spanner's clock (no client clock skew).
    After(Duration),
}

/// Settings shared by every handle cloned from one [`Queue`].
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// A typed handle on the queue of message type `M`.
///
/// ```no_run
/// # use spanner_queues::{Queue, QueueMessage};
/// # #[derive(QueueMessage)]
/// # #[queue(name = "OrderEmails")]
/// # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
/// use google_cloud_spanner::client::DatabaseClient;
/// use google_cloud_spanner::statement::Statement;
///
/// async fn place_order(db: &DatabaseClient, order_id: i64) -> spanner_queues::Result<()> {
///     let emails = Queue::<OrderEmail>::new(db);
///     db.read_write_transaction()
///         .build()
///         .run(async |tx| {
///             tx.execute_update(
///                 Statement::builder("INSERT INTO Orders (OrderId) VALUES (@id)")
///                     .add_param("id", order_id)
///                     .build(),
///             )
///             .await?;
///             // Committed with the order, or not at all.
///             emails
///                 .send(&tx, &OrderEmail { order_id, subject: "Thanks!".into() })
///                 .await?;
///             Ok(())
///         })
///         .await?;
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct Queue<M> {
    config: Arc<QueueConfig>,
    _message: PhantomData<fn() -> M>,
}

impl<M> Clone for Queue<M> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
            _message: PhantomData,
        }
    }
}

impl<M: QueueMessage> Queue<M> {
    /// A handle on the queue in `db`, with default settings: payloads up to
    /// [`DEFAULT_MAX_PAYLOAD_BYTES`], a warning above [`RECOMMENDED_MAX_PAYLOAD_BYTES`].
    /// Its statements are written in the database's dialect (a bare `DatabaseClient` is taken
    /// to be GoogleSQL: see [`Database`]); [`Database::queue`] is the same.
    ///
    /// The [`Receiver`](crate::Receiver), [`Worker`](crate::Worker) and [`Producer`] write in
    /// their own database's dialect whatever handle they are given.
    pub fn new(db: &(impl AsDatabase + ?Sized)) -> Self {
        Self::in_dialect(db.database_dialect())
    }

    /// A handle whose statements are written in `dialect` (the database's).
    pub(crate) fn in_dialect(dialect: Dialect) -> Self {
        Self {
            config: Arc::new(QueueConfig {
                dialect,
                ..QueueConfig::default()
            }),
            _message: PhantomData,
        }
    }

    /// This handle's settings, writing in `dialect` (the database's).
    pub(crate) fn with_dialect(mut self, dialect: Dialect) -> Self {
        if self.config.dialect != dialect {
            Arc::make_mut(&mut self.config).dialect = dialect;
        }
        self
    }

    /// Refuses payloads larger than `bytes` with [`Error::PayloadTooLarge`] (nothing written).
    ///
    /// `bytes` must lie between 1 and [`MAX_PAYLOAD_BYTES_LIMIT`] (Spanner's 10 MiB cell limit);
    /// sends through a handle with another value fail with [`Error::InvalidSetting`] before
    /// anything is written (see [`validate`](Self::validate)).
    pub fn with_max_payload_bytes(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.config).max_payload_bytes = bytes;
        self
    }

    /// Logs a warning for payloads larger than `bytes` (Spanner recommends under 4 KB).
    pub fn with_warn_payload_bytes(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.config).warn_payload_bytes = bytes;
        self
    }

    /// The queue's name.
    pub fn name(&self) -> QueueName {
        M::QUEUE
    }

    /// The dialect the statements are written in (the database's).
    pub fn dialect(&self) -> Dialect {
        self.config.dialect
    }

    /// Sends `message`, deliverable as soon as the transaction commits.
    ///
    /// # Errors
    /// [`Error::AlreadyQueued`] if a message with the same key is still queued;
    /// [`Error::PayloadTooLarge`] / [`Error::Encode`] before anything is sent; Spanner errors
    /// (aborts are retried by the runner when you propagate them with `?`).
    pub async fn send(&self, tx: &ReadWriteTransaction, message: &M) -> Result<()> {
        self.send_with(tx, message, DeliverAt::Now).await
    }

    /// Sends `message`, deliverable from `at` (a time in the past means now).
    pub async fn send_at(
        &self,
        tx: &ReadWriteTransaction,
        message: &M,
        at: SystemTime,
    ) -> Result<()> {
        self.send_with(tx, message, DeliverAt::Time(at)).await
    }

    /// Sends `message`, deliverable `delay` after the statement runs (by Spanner's clock).
    pub async fn send_after(
        &self,
        tx: &ReadWriteTransaction,
        message: &M,
        delay: Duration,
    ) -> Result<()> {
        self.send_with(tx, message, DeliverAt::After(delay)).await
    }

    /// Sends `message` with an explicit [`DeliverAt`].
    pub async fn send_with(
        &self,
        tx: &ReadWriteTransaction,
        message: &M,
        deliver: DeliverAt,
    ) -> Result<()> {
        self.send_many_with(tx, std::iter::once(message), deliver)
            .await
            .map(|_| ())
    }

    /// Sends several messages in one round trip, all deliverable at commit. Returns how many
    /// were sent.
    ///
    /// # Errors
    /// As [`send`](Queue::send); if any key is still queued, nothing of the batch is kept once
    /// the transaction rolls back.
    pub async fn send_many<'a, I>(&self, tx: &ReadWriteTransaction, messages: I) -> Result<usize>
    where
        I: IntoIterator<Item = &'a M>,
    {
        self.send_many_with(tx, messages, DeliverAt::Now).await
    }

    /// Sends several messages in one round trip with one [`DeliverAt`] for all.
    pub async fn send_many_with<'a, I>(
        &self,
        tx: &ReadWriteTransaction,
        messages: I,
        deliver: DeliverAt,
    ) -> Result<usize>
    where
        I: IntoIterator<Item = &'a M>,
    {
        self.send_keys(tx, messages, deliver)
            .await
            .map(|keys| keys.len())
    }

    /// Sends `message` as [`send_with`](Queue::send_with) does, and returns the
    /// [`Sequence`] the send assigned it when `M` is ordered ([`QueueMessage::ORDERED`];
    /// `None` otherwise): with it, [`cancel_sequence`](Queue::cancel_sequence) cancels this
    /// message.
    ///
    /// # Errors
    /// As [`send`](Queue::send).
    pub async fn send_sequenced(
        &self,
        tx: &ReadWriteTransaction,
        message: &M,
        deliver: DeliverAt,
    ) -> Result<Option<Sequence>> {
        let keys = self
            .send_keys(tx, std::iter::once(message), deliver)
            .await?;
        Ok(keys.first().and_then(Sequence::of::<M>))
    }

    /// Sends `messages` and returns their keys as written: for an ordered type, each ordering
    /// key with the sequence the send assigned it.
    pub(crate) async fn send_keys<'a, I>(
        &self,
        tx: &ReadWriteTransaction,
        messages: I,
        deliver: DeliverAt,
    ) -> Result<Vec<MessageKey>>
    where
        I: IntoIterator<Item = &'a M>,
    {
        let mut rows = messages
            .into_iter()
            .map(|message| self.encode(message))
            .collect::<Result<Vec<_>>>()?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        if M::ORDERED {
            // An ordered queue: the send assigns each message its ordering key's next sequence.
            let mut keys: Vec<MessageKey> = rows.iter().map(|row| row.key.clone()).collect();
            crate::ordering::assign::<M>(tx, self.config.dialect, &mut keys).await?;
            for (row, key) in rows.iter_mut().zip(keys) {
                row.key = key;
            }
        }
        // One statement per message, all in one round trip: when a key is still queued, Batch
        // DML reports which statement failed, so the error names the exact key.
        let statements: Vec<Statement> = rows
            .iter()
            .map(|row| self.insert_statement(std::slice::from_ref(row), deliver))
            .collect();
        let span = tracing::debug_span!(
            "spanner_queues.send",
            queue = %M::QUEUE,
            messages = rows.len(),
            key = %rows[0].key.short(),
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
                metrics::counter!(crate::telemetry::SENT, "queue" => M::QUEUE.as_str().to_owned())
                    .increment(rows.len() as u64);
                let keys: Vec<MessageKey> = rows.into_iter().map(|r| r.key).collect();
                record(OperationKind::Send, &M::QUEUE, keys.iter().cloned());
                Ok(keys)
            }
            Err((error, failed)) => Err(self.send_error(error, &rows, failed)),
        }
    }

    /// Cancels a message that has not been acked yet (typically a scheduled one). Returns
    /// whether a message was removed; cancelling a message that is gone is not an error.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for an ordered type, whose messages are an ordering key plus a
    /// sequence: use [`cancel_sequence`](Queue::cancel_sequence).
    pub async fn cancel(&self, tx: &ReadWriteTransaction, key: &M::Key) -> Result<bool> {
        self.cancel_key(tx, key.to_message_key()).await
    }

    /// Cancels the message of ordering key `key` with `sequence` (an ordered type; the
    /// sequence comes from [`send_sequenced`](Queue::send_sequenced),
    /// [`Delivery::sequence`](crate::Delivery::sequence) or a value the application stored).
    /// Returns whether it was removed. The later messages of its ordering key stop waiting for
    /// it, as for a handled one.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] when `M` is not ordered.
    pub async fn cancel_sequence(
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
        self.cancel_key(tx, crate::ordering::full_key::<M>(key, sequence))
            .await
    }

    async fn cancel_key(&self, tx: &ReadWriteTransaction, key: MessageKey) -> Result<bool> {
        let span =
            tracing::debug_span!("spanner_queues.cancel", queue = %M::QUEUE, key = %key.short());
        let removed = tx
            .execute_update(self.delete_statement(&key, false)?)
            .instrument(span)
            .await?;
        record(OperationKind::Cancel, &M::QUEUE, [key]);
        Ok(removed > 0)
    }

    /// Acks (deletes) a message, asserting that it is still there.
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
    pub async fn ack(&self, tx: &ReadWriteTransaction, key: &M::Key) -> Result<()> {
        self.ack_key(tx, key.to_message_key()).await
    }

    /// Sends a message from its key and an already encoded payload, as read from the queue (a
    /// release, a dead-letter replay): the payload goes back byte for byte, without size checks,
    /// so that payloads written by other clients survive.
    pub(crate) async fn send_raw(
        &self,
        tx: &ReadWriteTransaction,
        key: MessageKey,
        payload: crate::codec::Payload,
        deliver: DeliverAt,
    ) -> Result<()> {
        if key.len() != M::KEY_COLUMNS.len() {
            return Err(Error::InvalidKey {
                queue: M::QUEUE,
                source: crate::key::KeyError::Arity {
                    expected: M::KEY_COLUMNS.len(),
                    found: key.len(),
                },
            });
        }
        let rows = [EncodedRow { key, payload }];
        let span = tracing::debug_span!("spanner_queues.send", queue = %M::QUEUE, messages = 1, key = %rows[0].key.short());
        match tx
            .execute_update(self.insert_statement(&rows, deliver))
            .instrument(span)
            .await
        {
            Ok(_) => {
                metrics::counter!(crate::telemetry::SENT, "queue" => M::QUEUE.as_str().to_owned())
                    .increment(1);
                let [row] = rows;
                record(OperationKind::Send, &M::QUEUE, [row.key]);
                Ok(())
            }
            Err(error) => Err(self.send_error(error, &rows, 0)),
        }
    }

    /// Releases messages inside `tx`: each is deleted (without asserting that it is there)
    /// and, if it was, sent again from its key and payload, due at its time. Two round trips
    /// whatever the number (Batch DML). Returns how many were released.
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
            .map_err(|e| missing_queue::<M>(Error::from(e)))?;
        let mut sends = Vec::new();
        let mut sent = Vec::new();
        for ((key, payload, deliver), count) in messages.into_iter().zip(counts) {
            if count > 0 {
                let row = EncodedRow { key, payload };
                sends.push(self.insert_statement(std::slice::from_ref(&row), deliver));
                sent.push(row.key);
            }
        }
        if sends.is_empty() {
            return Ok(0);
        }
        tx.execute_batch_update(sends).await?;
        record(OperationKind::Ack, &M::QUEUE, sent.iter().cloned());
        record(OperationKind::Send, &M::QUEUE, sent.iter().cloned());
        Ok(sent.len())
    }

    pub(crate) async fn ack_key(&self, tx: &ReadWriteTransaction, key: MessageKey) -> Result<()> {
        let span =
            tracing::debug_span!("spanner_queues.ack", queue = %M::QUEUE, key = %key.short());
        match tx
            .execute_update(self.delete_statement(&key, true)?)
            .instrument(span)
            .await
        {
            Ok(_) => {
                metrics::counter!(crate::telemetry::ACKED, "queue" => M::QUEUE.as_str().to_owned())
                    .increment(1);
                record(OperationKind::Ack, &M::QUEUE, [key]);
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
                        queue: M::QUEUE.clone(),
                        key,
                    })
                } else {
                    Err(missing_queue::<M>(error))
                }
            }
        }
    }

    /// Buffers a mutation that cannot commit: an update of the (missing) message row, which
    /// Spanner refuses (`NOT_FOUND` for a missing row; queues do not support updates at all).
    fn blow_fuse(&self, tx: &ReadWriteTransaction, key: &MessageKey) {
        let mut builder = Mutation::new_update_builder(M::QUEUE.as_str());
        for (column, value) in M::KEY_COLUMNS.iter().zip(key.parts()) {
            builder = builder.set(column.name().as_str()).to(value.to_value());
        }
        if tx.buffer([builder.build()]).is_err() {
            tracing::warn!(queue = %M::QUEUE, key = %key.short(), "could not buffer the ack fuse");
        }
    }

    /// Checks the handle's settings: the payload limit lies between 1 and
    /// [`MAX_PAYLOAD_BYTES_LIMIT`]. Every send runs this check first.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming `max_payload_bytes`, its range and the value.
    pub fn validate(&self) -> Result<()> {
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

    fn column(&self, column: SystemColumn) -> &'static str {
        column.name(self.config.dialect)
    }

    fn insert_statement(&self, rows: &[EncodedRow], deliver: DeliverAt) -> Statement {
        let dialect = self.config.dialect;
        let mut columns: Vec<String> = M::KEY_COLUMNS
            .iter()
            .map(|c| c.name().to_sql(dialect))
            .collect();
        columns.push(self.column(SystemColumn::Payload).to_owned());
        columns.push(self.column(SystemColumn::DeliverTime).to_owned());
        let mut params = Params::new(dialect);
        let mut builder_params = Vec::new();
        // The delivery time is the same for every row: one parameter.
        let deliver_sql = match (deliver, dialect) {
            (DeliverAt::Now, Dialect::GoogleSql) => "CURRENT_TIMESTAMP()".to_owned(),
            (DeliverAt::Now, Dialect::PostgreSql) => "CURRENT_TIMESTAMP".to_owned(),
            (DeliverAt::Time(at), _) => {
                let (name, placeholder) = params.next("deliver_at");
                builder_params.push((
                    name,
                    timestamp_value(at),
                    google_cloud_spanner::types::timestamp(),
                ));
                placeholder
            }
            (DeliverAt::After(delay), Dialect::GoogleSql) => {
                let (name, placeholder) = params.next("deliver_after_us");
                let micros = i64::try_from(delay.as_micros()).unwrap_or(i64::MAX);
                builder_params.push((
                    name,
                    google_cloud_spanner::value::Value::from(micros),
                    google_cloud_spanner::types::int64(),
                ));
                format!("TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL {placeholder} MICROSECOND)")
            }
            (DeliverAt::After(delay), Dialect::PostgreSql) => {
                // The commit's clock, as in GoogleSQL; the interval is text
                // (`spanner.timestamptz_add(timestamptz, text)`).
                let (name, placeholder) = params.next("deliver_after");
                let micros = delay.as_micros();
                builder_params.push((
                    name,
                    google_cloud_spanner::value::Value::from(format!("{micros} microseconds")),
                    google_cloud_spanner::types::string(),
                ));
                format!("spanner.timestamptz_add(CURRENT_TIMESTAMP, {placeholder})")
            }
        };
        let mut values = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let mut tuple = Vec::with_capacity(M::KEY_COLUMNS.len() + 2);
            for (k, (column, value)) in M::KEY_COLUMNS.iter().zip(row.key.parts()).enumerate() {
                let (name, placeholder) = params.next(&format!("k{i}_{k}"));
                builder_params.push((name, value.to_value(), column.key_type().param_type()));
                tuple.push(placeholder);
            }
            let (name, placeholder) = params.next(&format!("p{i}"));
            // PostgreSQL's jsonb is JSON annotated as such on the wire.
            let ty = match (&row.payload, dialect) {
                (crate::codec::Payload::Json(_), Dialect::PostgreSql) => {
                    google_cloud_spanner::types::pg_jsonb()
                }
                _ => row.payload.param_type(),
            };
            builder_params.push((name, row.payload.to_value(), ty));
            tuple.push(placeholder);
            tuple.push(deliver_sql.clone());
            values.push(format!("({})", tuple.join(", ")));
        }
        let sql = format!(
            "INSERT INTO {} ({}) VALUES {}",
            M::QUEUE.to_sql(dialect),
            columns.join(", "),
            values.join(", ")
        );
        let mut builder = Statement::builder(sql);
        for (name, value, ty) in builder_params {
            builder = builder.add_typed_param(name, value, ty);
        }
        builder.build()
    }

    fn delete_statement(&self, key: &MessageKey, assert_one: bool) -> Result<Statement> {
        if key.len() != M::KEY_COLUMNS.len() {
            return Err(Error::InvalidKey {
                queue: M::QUEUE.clone(),
                source: crate::key::KeyError::Arity {
                    expected: M::KEY_COLUMNS.len(),
                    found: key.len(),
                },
            });
        }
        let dialect = self.config.dialect;
        let mut params = Params::new(dialect);
        let mut condition = Vec::with_capacity(key.len());
        let mut bound = Vec::with_capacity(key.len());
        // Each value binds as its own kind: the same as the column's for a key of `M`, and the
        // column's actual type for a key read back from a drifted column (a poison message
        // being dead-lettered).
        for (i, (column, value)) in M::KEY_COLUMNS.iter().zip(key.parts()).enumerate() {
            let (name, placeholder) = params.next(&format!("k{i}"));
            condition.push(format!("{} = {placeholder}", column.name().to_sql(dialect)));
            bound.push((name, value));
        }
        let mut sql = format!(
            "DELETE FROM {} WHERE {}",
            M::QUEUE.to_sql(dialect),
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
        rows: &[EncodedRow],
        failed: usize,
    ) -> Error {
        let code = BatchUpdateError::extract(&error)
            .and_then(|b| b.status.status().map(|s| s.code))
            .or_else(|| error.status().map(|s| s.code));
        if code != Some(Code::AlreadyExists) {
            return missing_queue::<M>(Error::from(error));
        }
        let key = rows.get(failed).unwrap_or(&rows[0]).key.clone();
        Error::AlreadyQueued {
            queue: M::QUEUE,
            key,
        }
    }
}

/// [`Error::QueueNotFound`] when Spanner refused a statement because the queue's table does
/// not exist, else `error` unchanged. Not documented: Spanner says so only in the status message
/// ("Table not found: Q", `INVALID_ARGUMENT` for DML; the emulator says the same); matching it is
/// the one way to tell a missing queue from other argument errors. Change it here if the
/// platform adds a structured reason.
fn missing_queue<M: QueueMessage>(error: Error) -> Error {
    let is_missing = match &error {
        Error::Spanner(spanner) => {
            matches!(spanner.code(), Some(Code::InvalidArgument | Code::NotFound))
                && spanner.status_message().is_some_and(|message| {
                    let message = message.to_ascii_lowercase();
                    message.contains("table not found")
                        && message.contains(&M::QUEUE.as_str().to_ascii_lowercase())
                })
        }
        _ => false,
    };
    if is_missing {
        Error::QueueNotFound { queue: M::QUEUE }
    } else {
        error
    }
}

/// A message ready to insert.
struct EncodedRow {
    key: MessageKey,
    payload: crate::codec::Payload,
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
        self.taken += 1;
        match self.dialect {
            Dialect::GoogleSql => (name.to_owned(), format!("@{name}")),
            Dialect::PostgreSql => (format!("p{}", self.taken), format!("${}", self.taken)),
        }
    }
}

/// A TIMESTAMP parameter value (RFC 3339, UTC).
pub(crate) fn timestamp_value(at: SystemTime) -> google_cloud_spanner::value::Value {
    google_cloud_spanner::value::Value::from(at)
}

impl Database {
    /// A handle on the queue of `M` in this database: its statements are written in the
    /// database's dialect.
    pub fn queue<M: QueueMessage>(&self) -> Queue<M> {
        Queue::in_dialect(self.dialect())
    }
}

/// Sends messages for producers that have no transaction of their own: each call commits.
///
/// ```no_run
/// # use spanner_queues::{Producer, QueueMessage};
/// # #[derive(QueueMessage)]
/// # #[queue(name = "Emails")]
/// # struct Email { #[queue(key)] id: uuid::Uuid, to: String }
/// # async fn demo(db: google_cloud_spanner::client::DatabaseClient) -> spanner_queues::Result<()> {
/// let producer = Producer::new(db);
/// producer.send(&Email { id: uuid::Uuid::new_v4(), to: "ada@example.com".into() }).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Producer {
    db: Database,
    settings: TransactionSettings,
}

impl Producer {
    /// A producer on `db` with default [`TransactionSettings`]; it writes in the database's
    /// dialect (a bare `DatabaseClient` is taken to be GoogleSQL: see [`Database`]).
    pub fn new(db: impl Into<Database>) -> Self {
        Self {
            db: db.into(),
            settings: TransactionSettings::default(),
        }
    }

    /// Uses `settings` for every commit.
    pub fn with_settings(mut self, settings: TransactionSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Sends one message in its own transaction.
    ///
    /// # Errors
    /// [`Error::OutcomeUnknown`] when the commit's outcome is unknown (never retried);
    /// [`Error::AlreadyQueued`] when the key is still queued; encoding and size errors before
    /// any RPC.
    ///
    /// # Cancellation
    /// Dropping the future before it completes leaves the outcome unknown to you if the commit
    /// was already sent: the message may have been sent. Use a guarded transaction
    /// ([`transaction::builder`]`(db).guarded()`) with [`Queue::send`] when you need to find
    /// out afterwards.
    pub async fn send<M: QueueMessage>(&self, message: &M) -> Result<()> {
        self.send_with(&self.db.queue::<M>(), message, DeliverAt::Now)
            .await
    }

    /// Sends one message through `queue` (its settings apply, in the producer's database's
    /// dialect) at `deliver`.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    ///
    /// # Cancellation
    /// As [`send`](Self::send).
    pub async fn send_with<M: QueueMessage>(
        &self,
        queue: &Queue<M>,
        message: &M,
        deliver: DeliverAt,
    ) -> Result<()> {
        let queue = &queue.clone().with_dialect(self.db.dialect());
        transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx| async move { queue.send_with(&tx, message, deliver).await })
            .await
    }

    /// Sends several messages in one transaction (all or none).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    ///
    /// # Cancellation
    /// As [`send`](Self::send): all or none of the messages may have been sent.
    pub async fn send_many<M: QueueMessage>(&self, messages: &[M]) -> Result<usize> {
        let queue = &self.db.queue::<M>();
        transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx| async move { queue.send_many(&tx, messages).await })
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

    #[test]
    fn insert_statement_lists_keys_payload_and_deliver_time() {
        let queue = Queue::<Task>::in_dialect(Dialect::GoogleSql);
        let rows = vec![
            queue.encode(&task(1)).unwrap(),
            queue.encode(&task(2)).unwrap(),
        ];
        let statement = queue.insert_statement(&rows, DeliverAt::Now);
        assert_eq!(
            statement.sql(),
            "INSERT INTO UserTasks (UserId, MessageId, Payload, DeliverTime) VALUES \
             (@k0_0, @k0_1, @p0, CURRENT_TIMESTAMP()), (@k1_0, @k1_1, @p1, CURRENT_TIMESTAMP())"
        );
        let later = queue.insert_statement(&rows[..1], DeliverAt::After(Duration::from_secs(2)));
        assert!(
            later.sql().ends_with(
                "TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL @deliver_after_us MICROSECOND))"
            ),
            "{}",
            later.sql()
        );
        let at = queue.insert_statement(&rows[..1], DeliverAt::Time(SystemTime::UNIX_EPOCH));
        assert!(at.sql().ends_with("@p0, @deliver_at)"), "{}", at.sql());
    }

    #[test]
    fn ack_and_cancel_statements() {
        let queue = Queue::<Task>::in_dialect(Dialect::GoogleSql);
        let key = (7, "m7".to_owned()).to_message_key();
        assert_eq!(
            queue.delete_statement(&key, true).unwrap().sql(),
            "DELETE FROM UserTasks WHERE UserId = @k0 AND MessageId = @k1 ASSERT_ROWS_MODIFIED 1"
        );
        assert_eq!(
            queue.delete_statement(&key, false).unwrap().sql(),
            "DELETE FROM UserTasks WHERE UserId = @k0 AND MessageId = @k1"
        );
    }

    #[test]
    fn postgresql_statements_use_postgresql_syntax_and_positional_parameters() {
        let queue = Queue::<Task>::in_dialect(Dialect::PostgreSql);
        let rows = vec![
            queue.encode(&task(1)).unwrap(),
            queue.encode(&task(2)).unwrap(),
        ];
        assert_eq!(
            queue.insert_statement(&rows, DeliverAt::Now).sql(),
            "INSERT INTO usertasks (userid, messageid, payload, deliver_time) VALUES \
             ($1, $2, $3, CURRENT_TIMESTAMP), ($4, $5, $6, CURRENT_TIMESTAMP)"
        );
        assert_eq!(
            queue
                .insert_statement(&rows[..1], DeliverAt::After(Duration::from_secs(2)))
                .sql(),
            "INSERT INTO usertasks (userid, messageid, payload, deliver_time) VALUES \
             ($2, $3, $4, spanner.timestamptz_add(CURRENT_TIMESTAMP, $1))"
        );
        assert_eq!(
            queue
                .insert_statement(&rows[..1], DeliverAt::Time(SystemTime::UNIX_EPOCH))
                .sql(),
            "INSERT INTO usertasks (userid, messageid, payload, deliver_time) VALUES \
             ($2, $3, $4, $1)"
        );
        let key = (7, "m7".to_owned()).to_message_key();
        assert_eq!(
            queue.delete_statement(&key, true).unwrap().sql(),
            "DELETE FROM usertasks WHERE userid = $1 AND messageid = $2 ASSERT_ROWS_MODIFIED 1"
        );
        assert_eq!(
            queue.delete_statement(&key, false).unwrap().sql(),
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
