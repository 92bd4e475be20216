//! Receiving messages under a lease, with automatic lease renewal.
//!
//! A [`Receiver<M>`](crate::receive::Receiver) is a [`Stream`](futures::Stream) of [`Delivery<M>`](crate::receive::Delivery)s. Behind it:
//!
//! - **Receive calls.** `SELECT * FROM RECEIVE_<Q>(max_duration => @d[, max_batch_size => @n])`
//!   runs as the official client's strong single-use read-only streaming query
//!   ([`parallel_calls`](crate::receive::ReceiveSettings::parallel_calls) of them at once). A call that ends
//!   after `max_duration` is re-issued at once; a call that fails is re-issued after an
//!   exponential backoff with jitter. Permanent failures (a missing queue, a permission error)
//!   are also yielded as `Err` items, so that the consumer sees them; the receiver keeps
//!   retrying until it is dropped.
//! - **Decoding.** Columns are read by name from the result metadata: the key columns of `M`,
//!   `Payload`, `DeliverTime`, `SpannerLeaseExpirationTimestamp` and `SpannerLeaseToken` (STRING
//!   or BYTES, kept opaque). A row whose lease has less than
//!   [`min_lease_remaining`](crate::receive::ReceiveSettings::min_lease_remaining) left is skipped and counted
//!   ([`ReceiverStats::expired_on_receipt`](crate::receive::ReceiverStats::expired_on_receipt)). A payload that does not decode still yields a
//!   delivery, whose [`message`](crate::receive::Delivery::message) is the [`Error::Decode`](crate::Error::Decode).
//! - **Renewal.** One background task per receiver renews every held lease each
//!   [`renew_interval`](crate::receive::ReceiveSettings::renew_interval) in batched
//!   `RENEWLEASE_<Q>(lease_tokens => @tokens)` calls — one call per round up to
//!   [`renew_chunk_size`](crate::receive::ReceiveSettings::renew_chunk_size) leases, so the number of calls does
//!   not grow with the number of deliveries — and carries the rotated tokens forward. A lease
//!   with no row in the reply, a `NULL` new token, or an expiry passing without a successful
//!   renewal is **lost**: [`Delivery::lease_lost`](crate::receive::Delivery::lease_lost) resolves and [`Delivery::is_lease_lost`](crate::receive::Delivery::is_lease_lost)
//!   turns true. Renewal stops after [`max_lease_duration`](crate::receive::ReceiveSettings::max_lease_duration)
//!   and when the delivery is dropped.
//! - **Backpressure.** At most [`max_in_flight`](crate::receive::ReceiveSettings::max_in_flight) deliveries are
//!   alive at once. Each call reads at most one row ahead of a free slot (that row's lease is
//!   renewed while it waits); when every slot is taken the receiver stops reading, so the call
//!   stays open but is not read, and no new call starts until a slot frees up. Spanner may
//!   stream rows (and lease them) ahead of the reader, up to the transport's flow-control
//!   window; such rows are renewed only once read. If one waits longer than its lease it is
//!   skipped when read ([`ReceiverStats::expired_on_receipt`](crate::receive::ReceiverStats::expired_on_receipt)) and Spanner delivers it again
//!   after the lease expires: nothing is lost, but it is delayed. Keep `max_in_flight` near
//!   what the consumer can handle within one lease period.
//!
//! Dropping the receiver stops its receive calls; deliveries already handed out keep their
//! leases renewed until they are dropped. [`Receiver::close`](crate::receive::Receiver::close) stops receiving but still yields
//! the deliveries already read, then ends the stream.
//!
//! ```no_run
//! use futures::StreamExt as _;
//! use spanner_queues::receive::Receiver;
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "OrderEmails")]
//! # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
//!
//! async fn consume(db: google_cloud_spanner::client::DatabaseClient) -> spanner_queues::Result<()> {
//!     let mut receiver = Receiver::<OrderEmail>::builder(db).with_max_in_flight(8).build()?;
//!     while let Some(delivery) = receiver.next().await {
//!         let delivery = delivery?;
//!         match delivery.message() {
//!             Ok(email) => println!("order {}: {}", email.order_id, email.subject),
//!             Err(poison) => eprintln!("cannot decode {}: {poison}", delivery.key()),
//!         }
//!         delivery.ack_now().await?;
//!     }
//!     Ok(())
//! }
//! ```

mod delivery;
pub(crate) mod lease;
mod settings;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use backon::BackoffBuilder as _;
use futures::Stream;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::result::ResultSet;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::value::{FromValue, Type, Value};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::codec::Payload;
use crate::error::{Classification, Error, Result};
use crate::key::{KeyValue, MessageKey};
use crate::message::QueueMessage;
use crate::queue::Queue;
use crate::schema::{Dialect, SystemColumn};
use crate::telemetry;
use crate::transaction::TransactionSettings;

pub use delivery::Delivery;
pub(crate) use lease::lock;
use lease::{Counters, LeaseToken, Leases, RenewControl};
pub use settings::ReceiveSettings;

/// State shared by a receiver, its tasks and its deliveries.
#[derive(Debug)]
pub(crate) struct Shared<M> {
    pub(crate) db: DatabaseClient,
    pub(crate) queue: Queue<M>,
    pub(crate) transaction: TransactionSettings,
    pub(crate) leases: Arc<Leases>,
}

/// Counters of one receiver, as returned by [`Receiver::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ReceiverStats {
    /// Deliveries handed out.
    pub received: u64,
    /// Rows skipped because their lease had (nearly) expired when read.
    pub expired_on_receipt: u64,
    /// `RECEIVE` calls started.
    pub receive_calls: u64,
    /// `RECEIVE` calls that failed.
    pub receive_errors: u64,
    /// Renewal rounds that renewed at least one lease.
    pub renew_rounds: u64,
    /// `RENEWLEASE` calls made.
    pub renew_requests: u64,
    /// `RENEWLEASE` calls that failed.
    pub renew_errors: u64,
    /// Leases renewed.
    pub renewed: u64,
    /// Leases lost.
    pub lease_lost: u64,
    /// Deliveries alive now.
    pub in_flight: usize,
    /// The most deliveries alive at once so far.
    pub max_in_flight: usize,
}

impl ReceiverStats {
    fn from_counters(c: &Counters) -> Self {
        Self {
            received: c.received.load(Ordering::Relaxed),
            expired_on_receipt: c.expired_on_receipt.load(Ordering::Relaxed),
            receive_calls: c.receive_calls.load(Ordering::Relaxed),
            receive_errors: c.receive_errors.load(Ordering::Relaxed),
            renew_rounds: c.renew_rounds.load(Ordering::Relaxed),
            renew_requests: c.renew_requests.load(Ordering::Relaxed),
            renew_errors: c.renew_errors.load(Ordering::Relaxed),
            renewed: c.renewed.load(Ordering::Relaxed),
            lease_lost: c.lease_lost.load(Ordering::Relaxed),
            in_flight: c.in_flight.load(Ordering::SeqCst),
            max_in_flight: c.max_in_flight.load(Ordering::SeqCst),
        }
    }
}

/// A live view of a receiver's counters that outlives the receiver.
#[derive(Debug, Clone)]
pub struct ReceiverStatsHandle(Arc<Counters>);

impl ReceiverStatsHandle {
    /// The counters now.
    pub fn get(&self) -> ReceiverStats {
        ReceiverStats::from_counters(&self.0)
    }
}

/// Builds a [`Receiver`]; see [`ReceiveSettings`] for every option.
#[derive(Debug)]
#[must_use]
pub struct ReceiverBuilder<M: QueueMessage> {
    db: DatabaseClient,
    queue: Queue<M>,
    settings: ReceiveSettings,
    transaction: TransactionSettings,
}

impl<M: QueueMessage> ReceiverBuilder<M> {
    /// Replaces all settings.
    pub fn with_settings(mut self, settings: ReceiveSettings) -> Self {
        self.settings = settings;
        self
    }

    /// `max_batch_size` of each `RECEIVE` call.
    pub fn with_batch_size(mut self, batch_size: u32) -> Self {
        self.settings = self.settings.with_batch_size(batch_size);
        self
    }

    /// How many `RECEIVE` calls run at once.
    pub fn with_parallel_calls(mut self, calls: usize) -> Self {
        self.settings = self.settings.with_parallel_calls(calls);
        self
    }

    /// Deliveries alive at once, at most.
    pub fn with_max_in_flight(mut self, deliveries: usize) -> Self {
        self.settings = self.settings.with_max_in_flight(deliveries);
        self
    }

    /// `max_duration` of each `RECEIVE` call.
    pub fn with_max_duration(mut self, duration: Duration) -> Self {
        self.settings = self.settings.with_max_duration(duration);
        self
    }

    /// Time between lease renewal rounds.
    pub fn with_renew_interval(mut self, interval: Duration) -> Self {
        self.settings = self.settings.with_renew_interval(interval);
        self
    }

    /// Total lease time of one delivery.
    pub fn with_max_lease_duration(mut self, duration: Duration) -> Self {
        self.settings = self.settings.with_max_lease_duration(duration);
        self
    }

    /// The queue handle (its dialect and settings) used for acks and releases.
    pub fn with_queue(mut self, queue: Queue<M>) -> Self {
        self.queue = queue;
        self
    }

    /// Settings of the transactions of [`Delivery::ack_now`] and [`Delivery::release_now`].
    pub fn with_transaction_settings(mut self, settings: TransactionSettings) -> Self {
        self.transaction = settings;
        self
    }

    /// Starts the receive calls and the renewal task on the current Tokio runtime.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for settings out of range; [`Error::Precondition`] when called
    /// outside a Tokio
    /// runtime; [`Error::Unsupported`] for a PostgreSQL-dialect queue (not supported yet).
    pub fn build(self) -> Result<Receiver<M>> {
        self.settings.validate()?;
        if self.queue.dialect() != Dialect::GoogleSql {
            return Err(Error::Unsupported {
                feature: "receiving from PostgreSQL-dialect queues".into(),
            });
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::Precondition {
            reason: "a Receiver must be built inside a Tokio runtime".into(),
        })?;
        let control = Arc::new(RenewControl::default());
        let leases = Arc::new(Leases {
            db: self.db.clone(),
            queue: M::QUEUE,
            dialect: self.queue.dialect(),
            settings: self.settings.clone(),
            counters: Arc::new(Counters::default()),
            held: std::sync::Mutex::default(),
            next_id: AtomicU64::new(1),
            control: Arc::clone(&control),
        });
        let shared = Arc::new(Shared {
            db: self.db,
            queue: self.queue,
            transaction: self.transaction,
            leases,
        });
        let slots = Arc::new(Semaphore::new(self.settings.max_in_flight));
        let stop = CancellationToken::new();
        let (tx, rx) = mpsc::channel(self.settings.max_in_flight + self.settings.parallel_calls);
        runtime.spawn(lease::renew_loop(
            Arc::downgrade(&shared.leases),
            control,
            self.settings.renew_interval,
        ));
        for call in 0..self.settings.parallel_calls {
            runtime.spawn(receive_task(
                Arc::clone(&shared),
                Arc::clone(&slots),
                tx.clone(),
                stop.clone(),
                call,
            ));
        }
        Ok(Receiver {
            counters: Arc::clone(&shared.leases.counters),
            rx,
            stop,
        })
    }
}

/// A stream of [`Delivery`]s from the queue of `M`; see the [module docs](self).
#[must_use = "a receiver does nothing unless polled"]
pub struct Receiver<M: QueueMessage> {
    counters: Arc<Counters>,
    rx: mpsc::Receiver<Result<Delivery<M>>>,
    stop: CancellationToken,
}

impl<M: QueueMessage> Receiver<M> {
    /// A builder with default [`ReceiveSettings`].
    pub fn builder(db: DatabaseClient) -> ReceiverBuilder<M> {
        ReceiverBuilder {
            db,
            queue: Queue::new(),
            settings: ReceiveSettings::default(),
            transaction: TransactionSettings::default(),
        }
    }

    /// The counters now.
    pub fn stats(&self) -> ReceiverStats {
        ReceiverStats::from_counters(&self.counters)
    }

    /// A view of the counters that stays valid after the receiver is dropped.
    pub fn stats_handle(&self) -> ReceiverStatsHandle {
        ReceiverStatsHandle(Arc::clone(&self.counters))
    }

    /// Stops receiving: no new rows are read and no new calls start. Deliveries already read
    /// are still yielded; then the stream ends. Rows Spanner leased but that were not read yet
    /// are delivered again after their lease expires.
    pub fn close(&mut self) {
        self.stop.cancel();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.stop.is_cancelled()
    }
}

impl<M: QueueMessage> Stream for Receiver<M> {
    type Item = Result<Delivery<M>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl<M: QueueMessage> Drop for Receiver<M> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl<M: QueueMessage> std::fmt::Debug for Receiver<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("queue", &M::QUEUE)
            .field("closed", &self.stop.is_cancelled())
            .field("stats", &self.stats())
            .finish()
    }
}

/// How a receive call ended.
enum CallEnd {
    /// The receiver was closed or dropped.
    Stopped,
    /// The call ended normally (after `max_duration`).
    Completed { rows: u64 },
}

/// One receive loop: calls `RECEIVE` again and again until stopped.
async fn receive_task<M: QueueMessage>(
    shared: Arc<Shared<M>>,
    slots: Arc<Semaphore>,
    out: mpsc::Sender<Result<Delivery<M>>>,
    stop: CancellationToken,
    call_index: usize,
) {
    let settings = &shared.leases.settings;
    let new_backoff = || {
        backon::ExponentialBuilder::default()
            .with_jitter()
            .with_min_delay(settings.min_restart_backoff)
            .with_max_delay(settings.max_restart_backoff)
            .without_max_times()
            .build()
    };
    let mut backoff = new_backoff();
    let mut calls = 0_u64;
    loop {
        // Not restarted while full: wait until a slot is free.
        tokio::select! {
            () = stop.cancelled() => return,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => drop(slot),
                Err(_) => return,
            },
        }
        calls += 1;
        let started = Instant::now();
        let span = tracing::debug_span!(
            "spanner_queues.receive",
            queue = %M::QUEUE,
            call = format_args!("{call_index}.{calls}")
        );
        let delay = match receive_call(&shared, &slots, &out, &stop)
            .instrument(span)
            .await
        {
            Ok(CallEnd::Stopped) => return,
            Ok(CallEnd::Completed { rows }) => {
                if rows == 0 && started.elapsed() < settings.max_duration / 2 {
                    // Ended early without rows: do not spin.
                    backoff.next().unwrap_or(settings.max_restart_backoff)
                } else {
                    backoff = new_backoff();
                    continue;
                }
            }
            Err(error) => {
                shared
                    .leases
                    .counters
                    .receive_errors
                    .fetch_add(1, Ordering::Relaxed);
                let delay = backoff.next().unwrap_or(settings.max_restart_backoff);
                tracing::warn!(
                    queue = %M::QUEUE,
                    error = %telemetry::ErrorChain(&error),
                    retry_in = ?delay,
                    "receive call failed"
                );
                if error.classification() == Classification::Permanent {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        sent = out.send(Err(error)) => if sent.is_err() { return },
                    }
                }
                delay
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// One `RECEIVE` call. `first` is a slot already held for the first row.
async fn receive_call<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    slots: &Arc<Semaphore>,
    out: &mpsc::Sender<Result<Delivery<M>>>,
    stop: &CancellationToken,
) -> Result<CallEnd> {
    let settings = &shared.leases.settings;
    let counters = &shared.leases.counters;
    counters.receive_calls.fetch_add(1, Ordering::Relaxed);
    let statement = receive_statement::<M>(settings, shared.queue.dialect());
    let transaction = shared.db.single_use().build();
    let mut rows: ResultSet = tokio::select! {
        () = stop.cancelled() => return Ok(CallEnd::Stopped),
        result = transaction.execute_query(statement) => {
            result.map_err(Error::from)?
        }
    };
    let columns = Columns::resolve::<M>(
        rows.metadata().column_names(),
        rows.metadata().column_types(),
        shared.queue.dialect(),
    )?;
    let mut delivered = 0_u64;
    loop {
        // Read one row, then wait for a slot: a call never holds a slot while the queue is
        // idle (which would starve the other calls), and reads at most one row ahead.
        let next = tokio::select! {
            () = stop.cancelled() => return Ok(CallEnd::Stopped),
            next = rows.next() => next,
        };
        let row = match next {
            None => return Ok(CallEnd::Completed { rows: delivered }),
            Some(Err(error)) => return Err(Error::from(error)),
            Some(Ok(row)) => row,
        };
        let raw = match columns.read::<M>(row.raw_values()) {
            Ok(raw) => raw,
            Err(error) => {
                // Unusable row (schema drift): report it; its lease lapses.
                tokio::select! {
                    () = stop.cancelled() => return Ok(CallEnd::Stopped),
                    sent = out.send(Err(error)) => if sent.is_err() { return Ok(CallEnd::Stopped) },
                }
                continue;
            }
        };
        let remaining = raw
            .expiry
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        if remaining < settings.min_lease_remaining {
            skipped_expired::<M>(counters, &raw.key, remaining);
            continue;
        }
        // Renewed from now on, also while it waits for a slot.
        let lease = shared.leases.register(raw.token, raw.expiry);
        let permit = tokio::select! {
            biased;
            () = stop.cancelled() => None,
            permit = Arc::clone(slots).acquire_owned() => permit.ok(),
        };
        let Some(permit) = permit else {
            shared.leases.unregister(lease.id);
            return Ok(CallEnd::Stopped);
        };
        if lease.is_lost() {
            shared.leases.unregister(lease.id);
            let remaining = lease
                .expiry()
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            skipped_expired::<M>(counters, &raw.key, remaining);
            continue;
        }
        tracing::debug!(queue = %M::QUEUE, key = %raw.key, lease = lease.label(), "received");
        let delivery = Delivery::new(
            Arc::clone(shared),
            raw.key,
            raw.payload,
            raw.deliver_time,
            lease,
            permit,
        );
        delivered += 1;
        if out.send(Ok(delivery)).await.is_err() {
            return Ok(CallEnd::Stopped); // the receiver is gone
        }
    }
}

fn skipped_expired<M: QueueMessage>(counters: &Counters, key: &MessageKey, remaining: Duration) {
    counters.expired_on_receipt.fetch_add(1, Ordering::Relaxed);
    metrics::counter!(telemetry::EXPIRED_ON_RECEIPT, "queue" => M::QUEUE.as_str().to_owned())
        .increment(1);
    tracing::debug!(queue = %M::QUEUE, key = %key, ?remaining, "lease expired on receipt; skipped");
}

fn receive_statement<M: QueueMessage>(settings: &ReceiveSettings, dialect: Dialect) -> Statement {
    let mut sql = format!(
        "SELECT * FROM {}(max_duration => @max_duration",
        M::QUEUE.receive_function(dialect)
    );
    if settings.batch_size.is_some() {
        sql.push_str(", max_batch_size => @max_batch_size");
    }
    sql.push(')');
    let mut builder = Statement::builder(sql).add_param(
        "max_duration",
        settings::format_max_duration(settings.max_duration),
    );
    if let Some(size) = settings.batch_size {
        builder = builder.add_param("max_batch_size", i64::from(size));
    }
    builder
        // Deliberate: a deadline past max_duration (the client sets none on streams unless the
        // application configured a client-wide one, which could cut calls short), and no
        // client-side resumption: a broken call is re-issued by `receive_task`, with backoff.
        .with_attempt_timeout(settings.max_duration + settings.call_deadline_margin)
        .with_retry_policy(NeverRetry)
        .build()
}

/// A row of `RECEIVE` output, read by column name.
struct RawRow {
    key: MessageKey,
    payload: Payload,
    deliver_time: Option<SystemTime>,
    expiry: SystemTime,
    token: LeaseToken,
}

/// Where each needed column is in the `RECEIVE` output.
struct Columns {
    keys: Vec<(usize, crate::key::KeyType)>,
    payload: usize,
    deliver_time: Option<usize>,
    expiry: usize,
    token: usize,
    types: Vec<Type>,
}

impl Columns {
    fn resolve<M: QueueMessage>(
        names: &[String],
        types: &[Type],
        dialect: Dialect,
    ) -> Result<Self> {
        let find = |name: &str| names.iter().position(|n| n.eq_ignore_ascii_case(name));
        let missing = |name: &str| {
            Error::invalid_schema(
                Some(M::QUEUE.as_str()),
                format!(
                    "{} returned no column {name}",
                    M::QUEUE.receive_function(dialect)
                ),
            )
        };
        let require = |column: SystemColumn| {
            let name = column.name(dialect);
            find(name).ok_or_else(|| missing(name))
        };
        let keys = M::KEY_COLUMNS
            .iter()
            .map(|column| {
                let name = column.name().as_str();
                find(name)
                    .map(|i| (i, column.key_type()))
                    .ok_or_else(|| missing(name))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            keys,
            payload: require(SystemColumn::Payload)?,
            deliver_time: find(SystemColumn::DeliverTime.name(dialect)),
            expiry: require(SystemColumn::LeaseExpirationTimestamp)?,
            token: require(SystemColumn::LeaseToken)?,
            types: types.to_vec(),
        })
    }

    fn read<M: QueueMessage>(&self, values: &[Value]) -> Result<RawRow> {
        let bad = |what: String| Error::invalid_schema(Some(M::QUEUE.as_str()), what);
        let at = |i: usize| {
            values
                .get(i)
                .zip(self.types.get(i))
                .ok_or_else(|| bad("RECEIVE row shorter than its metadata".into()))
        };
        let mut parts = Vec::with_capacity(self.keys.len());
        for (position, (index, key_type)) in self.keys.iter().enumerate() {
            let (value, ty) = at(*index)?;
            let part = KeyValue::from_value(*key_type, value, ty).map_err(|e| {
                bad(format!(
                    "key column {position}: {}",
                    e.at_position(position)
                ))
            })?;
            parts.push(part);
        }
        let key = MessageKey::new(parts);
        let (value, ty) = at(self.payload)?;
        let payload = Payload::from_value(value.clone(), ty)
            .map_err(|e| bad(format!("payload of message {key}: {e}")))?;
        let deliver_time = match self.deliver_time {
            Some(i) => {
                let (value, ty) = at(i)?;
                Option::<SystemTime>::from_value(value, ty).ok().flatten()
            }
            None => None,
        };
        let (value, ty) = at(self.expiry)?;
        let expiry = SystemTime::from_value(value, ty)
            .map_err(|e| bad(format!("lease expiration of message {key}: {e}")))?;
        let (value, ty) = at(self.token)?;
        let token = LeaseToken::from_value(value, ty)
            .map_err(|e| bad(format!("lease token of message {key}: {e}")))?
            .ok_or_else(|| bad(format!("NULL lease token for message {key}")))?;
        Ok(RawRow {
            key,
            payload,
            deliver_time,
            expiry,
            token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::PayloadSpec;
    use crate::ident::{ColumnName, QueueName};
    use crate::key::{KeyColumn, KeyType};
    use google_cloud_spanner::types;

    struct Task {
        id: i64,
        body: String,
    }

    impl QueueMessage for Task {
        type Key = i64;
        const QUEUE: QueueName = QueueName::from_static("Tasks");
        const KEY_COLUMNS: &'static [KeyColumn] = &[KeyColumn::new(
            ColumnName::from_static("TaskId"),
            KeyType::Int64,
        )];
        const PAYLOAD: PayloadSpec = PayloadSpec::string();
        fn key(&self) -> i64 {
            self.id
        }
        fn encode_payload(&self) -> std::result::Result<Payload, crate::CodecError> {
            Ok(crate::codec::encode_string(&self.body))
        }
        fn decode(id: i64, payload: Payload) -> std::result::Result<Self, crate::CodecError> {
            Ok(Task {
                id,
                body: crate::codec::decode_string(payload)?,
            })
        }
    }

    #[test]
    fn receive_sql_names_every_argument_as_a_parameter() {
        let settings = ReceiveSettings::default();
        let statement = receive_statement::<Task>(&settings, Dialect::GoogleSql);
        assert_eq!(
            statement.sql(),
            "SELECT * FROM RECEIVE_Tasks(max_duration => @max_duration)"
        );
        let statement =
            receive_statement::<Task>(&settings.with_batch_size(20), Dialect::GoogleSql);
        assert_eq!(
            statement.sql(),
            "SELECT * FROM RECEIVE_Tasks(max_duration => @max_duration, max_batch_size => @max_batch_size)"
        );
    }

    fn output() -> (Vec<String>, Vec<Type>) {
        // Column order deliberately differs from the documented one: reads go by name.
        let names = [
            "SpannerLeaseToken",
            "Payload",
            "taskid",
            "SpannerLeaseExpirationTimestamp",
            "DeliverTime",
            "SpannerLastBatchMessage",
        ];
        let types = vec![
            types::string(),
            types::string(),
            types::int64(),
            types::timestamp(),
            types::timestamp(),
            types::bool(),
        ];
        (names.iter().map(|s| (*s).to_owned()).collect(), types)
    }

    #[test]
    fn rows_are_read_by_column_name() {
        let (names, types) = output();
        let columns = Columns::resolve::<Task>(&names, &types, Dialect::GoogleSql).expect("cols");
        let row = vec![
            Value::from("tok"),
            Value::from("hello"),
            Value::from(7_i64),
            Value::from("2030-01-02T03:04:05.5Z"),
            Value::from("2030-01-02T03:04:00Z"),
            Value::from(true),
        ];
        let raw = columns.read::<Task>(&row).expect("row");
        assert_eq!(raw.key, MessageKey::new(vec![KeyValue::Int64(7)]));
        assert_eq!(raw.payload, Payload::String("hello".into()));
        assert_eq!(raw.token, LeaseToken::String("tok".into()));
        assert!(raw.deliver_time.is_some_and(|d| d < raw.expiry));

        let mut null_token = row.clone();
        null_token[0] = Value::null();
        let error = columns.read::<Task>(&null_token).err().expect("null token");
        assert!(
            error.to_string().contains("invalid queue schema"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_column_is_a_schema_error() {
        let (mut names, types) = output();
        names[0] = "SomethingElse".into();
        let error = Columns::resolve::<Task>(&names, &types, Dialect::GoogleSql)
            .err()
            .expect("missing token column");
        assert!(
            format!("{error:?}").contains("SpannerLeaseToken"),
            "{error:?}"
        );
    }
}
