//! Receiving messages under a lease, with automatic lease renewal.
//!
//! A [`Receiver<M>`](crate::receive::Receiver) is a [`Stream`] of [`Delivery<M>`](crate::receive::Delivery)s. Behind it:
//!
//! - **Start-up check.** Before the first call the receiver checks the queue against `M`
//!   (as [`SchemaSetup::check`](crate::SchemaSetup::check) does): a missing or drifted queue
//!   is yielded as [`Error::QueueNotFound`] /
//!   [`Error::SchemaDrift`] and the stream ends.
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
//!   delivery, whose [`message`](crate::receive::Delivery::message) is the [`Error::Decode`].
//! - **Renewal.** One background task per receiver renews every held lease each
//!   [`renew_interval`](crate::receive::ReceiveSettings::renew_interval) in batched
//!   `RENEWLEASE_<Q>(lease_tokens => @tokens)` calls — one call per round up to
//!   [`renew_chunk_size`](crate::receive::ReceiveSettings::renew_chunk_size) leases, so the number of calls does
//!   not grow with the number of deliveries — and carries the rotated tokens forward. A lease
//!   with no row in the reply, a `NULL` new token, or an expiry passing without a successful
//!   renewal is **lost**: [`Delivery::lease_lost`](crate::receive::Delivery::lease_lost) resolves and [`Delivery::is_lease_lost`](crate::receive::Delivery::is_lease_lost)
//!   turns true. Renewal stops after [`max_lease_duration`](crate::receive::ReceiveSettings::max_lease_duration)
//!   and when the delivery is dropped.
//! - **Backpressure and read-ahead.** At most [`max_in_flight`](crate::receive::ReceiveSettings::max_in_flight)
//!   deliveries are alive at once, and the receiver never leases much more than it can hold.
//!   A call starts only when a slot is free and asks for batches of at most as many rows as
//!   there are free slots (`max_batch_size`, capped by
//!   [`batch_size`](crate::receive::ReceiveSettings::batch_size)). Spanner leases rows as it
//!   streams them, possibly ahead of the reader, so the receiver reads every row as it arrives
//!   and holds it (its lease renewed) until a slot frees up; once a call holds a full batch it
//!   cannot hand out, it reads what the transport already carries and ends, and the next call
//!   starts when the held rows are handed out. No leased row waits unread for its lease to
//!   lapse.
//!
//! Dropping or [closing](crate::receive::Receiver::close) the receiver stops its receive calls.
//! Rows it read but did not hand out are **released** at once (acked and sent again for
//! immediate delivery, counted in [`ReceiverStats::released_unread`](crate::receive::ReceiverStats::released_unread)),
//! so that a restarted consumer gets them without waiting out a lease. Deliveries already
//! handed out keep their leases renewed until they are dropped. After
//! [`Receiver::close`](crate::receive::Receiver::close) the stream still yields the deliveries
//! already queued for it, then ends once the releases are done.
//!
//! ```no_run
//! use futures::StreamExt as _;
//! use spanner_queues::receive::{ReceiveSettings, Receiver};
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "OrderEmails")]
//! # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
//!
//! async fn consume(db: &spanner_queues::Database) -> spanner_queues::Result<()> {
//!     let mut receiver = Receiver::<OrderEmail>::builder(db)
//!         .with_receive_settings(ReceiveSettings::default().with_max_in_flight(8))
//!         .build()?;
//!     while let Some(delivery) = receiver.next().await {
//!         let delivery = delivery?;
//!         match delivery.message() {
//!             Ok(email) => println!("order {}: {}", email.order_id, email.subject),
//!             Err(poison) => eprintln!("cannot decode {}: {poison}", delivery.key()),
//!         }
//!         db.ack(&delivery).await?; // in a transaction of its own
//!     }
//!     Ok(())
//! }
//! ```

mod delivery;
pub(crate) mod lease;
pub(crate) mod settings;

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
use crate::database::Database;
use crate::error::{Classification, Error, Result};
use crate::key::{KeyValue, MessageKey};
use crate::message::QueueMessage;
use crate::queue::Queue;
use crate::schema::{Dialect, SystemColumn};
use crate::telemetry;
use crate::transaction::TransactionSettings;

pub use delivery::Delivery;
pub(crate) use delivery::release_in;
use lease::{Counters, LeaseToken, Leases, RenewControl};
pub(crate) use settings::MAX_IN_FLIGHT;
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
    /// Rows read (and leased) but never handed out because the receiver stopped first: each
    /// was released for immediate redelivery (acked and sent again).
    pub released_unread: u64,
    /// Rows read and leased (their leases renewed) that wait for a free slot now.
    pub read_ahead: usize,
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
    /// Leases lost while their deliveries were alive: expired, or not renewed (a delivery
    /// dropped, e.g. acked, while a renewal of its lease ran does not count).
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
            released_unread: c.released_unread.load(Ordering::Relaxed),
            read_ahead: c.read_ahead.load(Ordering::SeqCst),
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

/// A live view of a receiver's counters that outlives the receiver (for the worker's stats).
#[derive(Debug, Clone)]
pub(crate) struct ReceiverStatsHandle(Arc<Counters>);

impl ReceiverStatsHandle {
    /// The counters now.
    pub(crate) fn get(&self) -> ReceiverStats {
        ReceiverStats::from_counters(&self.0)
    }
}

/// Builds a [`Receiver`]; see [`ReceiveSettings`] for every option.
#[derive(Debug)]
#[must_use]
pub struct ReceiverBuilder<M: QueueMessage> {
    db: DatabaseClient,
    dialect: Dialect,
    queue: Queue<M>,
    settings: ReceiveSettings,
    transaction: TransactionSettings,
    /// Whether the queue was checked against `M` already (by a worker, just before).
    queue_checked: bool,
}

impl<M: QueueMessage> ReceiverBuilder<M> {
    /// The queue was just checked against `M` by the caller (a worker): receive without
    /// checking it again.
    pub(crate) fn queue_checked(mut self, checked: bool) -> Self {
        self.queue_checked = checked;
        self
    }

    /// Receive settings: every knob of the receive calls and of lease renewal (default
    /// [`ReceiveSettings::default`]).
    pub fn with_receive_settings(mut self, settings: ReceiveSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Settings of the transactions the receiver runs itself (releasing rows it read but did
    /// not hand out); by default the database's.
    pub(crate) fn with_transaction_settings(mut self, settings: TransactionSettings) -> Self {
        self.transaction = settings;
        self
    }

    /// Checks the settings, then starts the receive calls and the renewal task on the current
    /// Tokio runtime.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for settings out of range; [`Error::Precondition`] when called
    /// outside a Tokio runtime.
    pub fn build(self) -> Result<Receiver<M>> {
        self.settings.validate()?;
        self.transaction.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::Precondition {
            reason: "a Receiver must be built inside a Tokio runtime".into(),
        })?;
        let control = Arc::new(RenewControl::default());
        let leases = Arc::new(Leases {
            db: self.db.clone(),
            queue: M::QUEUE,
            dialect: self.dialect,
            settings: self.settings.clone(),
            counters: Arc::new(Counters::default()),
            held: std::sync::Mutex::default(),
            next_id: AtomicU64::new(1),
            control: Arc::clone(&control),
        });
        let shared = Arc::new(Shared {
            db: self.db,
            queue: self.queue.with_dialect(self.dialect),
            transaction: self.transaction,
            leases,
        });
        let slots = Arc::new(Semaphore::new(self.settings.max_in_flight()));
        let stop = CancellationToken::new();
        let (tx, rx) =
            mpsc::channel(self.settings.max_in_flight() + self.settings.parallel_calls());
        runtime.spawn(lease::renew_loop(
            Arc::downgrade(&shared.leases),
            control,
            self.settings.renew_interval(),
        ));
        runtime.spawn(start(
            shared.clone(),
            slots,
            tx,
            stop.clone(),
            self.settings.parallel_calls(),
            self.queue_checked,
        ));
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
    /// A builder for a receiver of the queue of `M` in `db`, with default
    /// [`ReceiveSettings`]; finish it with [`build`](ReceiverBuilder::build).
    pub fn builder(db: &Database) -> ReceiverBuilder<M> {
        ReceiverBuilder {
            db: db.client().clone(),
            dialect: db.dialect(),
            queue: Queue::of(db),
            settings: ReceiveSettings::default(),
            transaction: db.transaction_settings().clone(),
            queue_checked: false,
        }
    }

    /// The counters now.
    pub fn stats(&self) -> ReceiverStats {
        ReceiverStats::from_counters(&self.counters)
    }

    /// A view of the counters that stays valid after the receiver is dropped.
    pub(crate) fn stats_handle(&self) -> ReceiverStatsHandle {
        ReceiverStatsHandle(Arc::clone(&self.counters))
    }

    /// Stops receiving: no new rows are read and no new calls start. Deliveries already queued
    /// for the stream are still yielded. Rows read but not handed out are released for
    /// immediate redelivery; the stream ends when that is done.
    pub fn close(&mut self) {
        self.stop.cancel();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.stop.is_cancelled()
    }
}

/// # Cancellation
///
/// `next()` is cancel-safe: a delivery is either returned or stays queued for the next call.
/// Dropping the receiver stops it as [`close`](Receiver::close) does, without waiting: rows
/// read but not handed out are released in the background, and deliveries already handed out
/// keep their leases (renewed) until they are dropped.
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

/// Checks the queue against `M`, then starts the receive calls. A missing or drifted queue
/// ends the stream with [`Error::QueueNotFound`] / [`Error::SchemaDrift`] before anything is
/// received; a check that cannot run (a transient error) is logged and the calls start anyway.
async fn start<M: QueueMessage>(
    shared: Arc<Shared<M>>,
    slots: Arc<Semaphore>,
    out: mpsc::Sender<Result<Delivery<M>>>,
    stop: CancellationToken,
    parallel_calls: usize,
    queue_checked: bool,
) {
    let queue = M::QUEUE;
    let checked = if queue_checked {
        Ok(())
    } else {
        tokio::select! {
            () = stop.cancelled() => return,
            checked = crate::ddl::check_columns(
                &shared.db,
                shared.queue.dialect(),
                &queue,
                crate::ddl::differences::<M>,
            ) => checked,
        }
    };
    match checked {
        Ok(()) => {}
        Err(
            error @ (Error::QueueNotFound { .. }
            | Error::SchemaDrift { .. }
            | Error::Precondition { .. }),
        ) => {
            tracing::error!(
                queue = %M::QUEUE,
                error = %telemetry::ErrorChain(&error),
                "the queue cannot be received from; the receiver stops"
            );
            shared
                .leases
                .counters
                .receive_errors
                .fetch_add(1, Ordering::Relaxed);
            let _ = out.send(Err(error)).await;
            return; // dropping `out` ends the stream
        }
        Err(error) => tracing::warn!(
            queue = %M::QUEUE,
            error = %telemetry::ErrorChain(&error),
            "could not check the queue's schema; receiving anyway"
        ),
    }
    for call in 0..parallel_calls {
        tokio::spawn(receive_task(
            Arc::clone(&shared),
            Arc::clone(&slots),
            out.clone(),
            stop.clone(),
            call,
        ));
    }
}

/// How a receive call ended.
enum CallEnd {
    /// The receiver was closed or dropped.
    Stopped,
    /// The call ended: after `max_duration`, or early because it read as many rows ahead of
    /// free slots as it may hold.
    Completed { rows: u64 },
}

/// A row read and leased but not handed out yet. Its lease is renewed while it waits.
struct Held {
    key: MessageKey,
    payload: Payload,
    deliver_time: Option<SystemTime>,
    lease: Arc<lease::Lease>,
}

/// One receive loop: calls `RECEIVE` again and again until stopped. Rows it read but could not
/// hand out yet wait in `held` (leases renewed); when the receiver stops they are released.
async fn receive_task<M: QueueMessage>(
    shared: Arc<Shared<M>>,
    slots: Arc<Semaphore>,
    out: mpsc::Sender<Result<Delivery<M>>>,
    stop: CancellationToken,
    call_index: usize,
) {
    let mut held = std::collections::VecDeque::new();
    receive_loop(&shared, &slots, &out, &stop, call_index, &mut held).await;
    release_held(&shared, held).await;
}

async fn receive_loop<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    slots: &Arc<Semaphore>,
    out: &mpsc::Sender<Result<Delivery<M>>>,
    stop: &CancellationToken,
    call_index: usize,
    held: &mut std::collections::VecDeque<Held>,
) {
    let settings = &shared.leases.settings;
    let new_backoff = || {
        backon::ExponentialBuilder::default()
            .with_jitter()
            .with_min_delay(settings.min_restart_backoff())
            .with_max_delay(settings.max_restart_backoff())
            .without_max_times()
            .build()
    };
    let mut backoff = new_backoff();
    let mut calls = 0_u64;
    loop {
        // Hand out what an earlier call read ahead before leasing more.
        while !held.is_empty() {
            let permit = tokio::select! {
                biased;
                () = stop.cancelled() => return,
                permit = Arc::clone(slots).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            if !hand_out(shared, held, permit, out).await {
                return;
            }
        }
        // Not restarted while full: wait until a slot is free.
        tokio::select! {
            () = stop.cancelled() => return,
            slot = Arc::clone(slots).acquire_owned() => match slot {
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
        let delay = match receive_call(shared, slots, out, stop, held)
            .instrument(span)
            .await
        {
            Ok(CallEnd::Stopped) => return,
            Ok(CallEnd::Completed { rows }) => {
                if rows == 0 && started.elapsed() < settings.max_duration() / 2 {
                    // Ended early without rows: do not spin.
                    backoff.next().unwrap_or(settings.max_restart_backoff())
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
                let delay = backoff.next().unwrap_or(settings.max_restart_backoff());
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

/// Hands the first held row out under `permit`. Returns `false` when the receiver is gone.
async fn hand_out<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    held: &mut std::collections::VecDeque<Held>,
    permit: tokio::sync::OwnedSemaphorePermit,
    out: &mpsc::Sender<Result<Delivery<M>>>,
) -> bool {
    let Some(row) = held.pop_front() else {
        return true;
    };
    shared
        .leases
        .counters
        .read_ahead
        .fetch_sub(1, Ordering::SeqCst);
    if row.lease.is_lost() {
        shared.leases.unregister(row.lease.id);
        let remaining = row
            .lease
            .expiry()
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        skipped_expired::<M>(&shared.leases.counters, &row.key, remaining);
        return true;
    }
    tracing::debug!(queue = %M::QUEUE, key = %row.key.short(), lease = row.lease.label(), "received");
    let delivery = Delivery::new(
        Arc::clone(shared),
        row.key,
        row.payload,
        row.deliver_time,
        row.lease,
        permit,
    );
    out.send(Ok(delivery)).await.is_ok()
}

/// Turns a `RECEIVE` row into a held row (lease registered, so renewed from now on), or `None`
/// when its lease has (nearly) run out.
fn hold<M: QueueMessage>(
    shared: &Shared<M>,
    columns: &Columns,
    row: &google_cloud_spanner::result::Row,
) -> Result<Option<Held>> {
    let raw = columns.read::<M>(row.raw_values())?;
    let counters = &shared.leases.counters;
    let remaining = raw
        .expiry
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    if remaining < shared.leases.settings.min_lease_remaining() {
        skipped_expired::<M>(counters, &raw.key, remaining);
        return Ok(None);
    }
    let lease = shared.leases.register(raw.token, raw.expiry);
    counters.read_ahead.fetch_add(1, Ordering::SeqCst);
    Ok(Some(Held {
        key: raw.key,
        payload: raw.payload,
        deliver_time: raw.deliver_time,
        lease,
    }))
}

/// One `RECEIVE` call, asking for at most as many rows as there are free slots. Rows are read
/// as they arrive (Spanner leased them when it sent them) and held, leases renewed, until a
/// slot frees up. Once it holds a full batch that it cannot hand out, the call ends: what the
/// transport already carries is read and held too, so that no leased row is left unread.
async fn receive_call<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    slots: &Arc<Semaphore>,
    out: &mpsc::Sender<Result<Delivery<M>>>,
    stop: &CancellationToken,
    held: &mut std::collections::VecDeque<Held>,
) -> Result<CallEnd> {
    use futures::StreamExt as _;

    let settings = &shared.leases.settings;
    let counters = &shared.leases.counters;
    let free = slots.available_permits().max(1);
    let batch = settings
        .batch_size()
        .map_or(free, |size| (size as usize).min(free))
        .max(1);
    counters.receive_calls.fetch_add(1, Ordering::Relaxed);
    let statement = receive_statement::<M>(settings, shared.queue.dialect(), batch);
    let transaction = shared.db.single_use().build();
    let rows: ResultSet = tokio::select! {
        () = stop.cancelled() => return Ok(CallEnd::Stopped),
        result = transaction.execute_query(statement) => {
            result?
        }
    };
    let columns = Columns::resolve::<M>(
        rows.metadata().column_names(),
        rows.metadata().column_types(),
        shared.queue.dialect(),
    )?;
    // A stream keeps a half-read row across `select!` branches (`next()` is cancel-safe).
    let mut rows = Box::pin(futures::stream::unfold(rows, |mut rows| async move {
        rows.next().await.map(|row| (row, rows))
    }));
    let mut read = 0_u64;
    loop {
        if held.len() >= batch {
            read += drain(shared, &columns, rows.as_mut(), held, batch).await;
            return Ok(CallEnd::Completed { rows: read });
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => {
                drain(shared, &columns, rows.as_mut(), held, batch).await;
                return Ok(CallEnd::Stopped);
            }
            permit = Arc::clone(slots).acquire_owned(), if !held.is_empty() => {
                let Ok(permit) = permit else { return Ok(CallEnd::Stopped) };
                if !hand_out(shared, held, permit, out).await {
                    return Ok(CallEnd::Stopped); // the receiver is gone
                }
            }
            next = rows.next() => match next {
                None => return Ok(CallEnd::Completed { rows: read }),
                Some(Err(error)) => return Err(Error::from(error)),
                Some(Ok(row)) => {
                    read += 1;
                    match hold::<M>(shared, &columns, &row) {
                        Ok(Some(row)) => held.push_back(row),
                        Ok(None) => {}
                        Err(error) => {
                            // Unusable row (schema drift): report it; its lease lapses.
                            tokio::select! {
                                () = stop.cancelled() => return Ok(CallEnd::Stopped),
                                sent = out.send(Err(error)) => if sent.is_err() { return Ok(CallEnd::Stopped) },
                            }
                        }
                    }
                }
            },
        }
    }
}

/// How long a call that is being ended waits for a row Spanner already sent.
// A guess tuned on the emulator (rows already sent arrive within a few milliseconds there);
// longer is safer under load but delays handing out held rows when a call ends full.
const DRAIN_GRACE: Duration = Duration::from_millis(100);

/// Reads and holds what the transport already carries before a call is dropped: rows arriving
/// within [`DRAIN_GRACE`] of each other, at most four batches and at least 16 rows (every row
/// read lets Spanner lease another, so the drain must stop somewhere: with more messages
/// deliverable than that, rows sent after the drain stopped wait out their lease). Returns how
/// many rows it read.
async fn drain<M: QueueMessage, S>(
    shared: &Shared<M>,
    columns: &Columns,
    mut rows: Pin<&mut S>,
    held: &mut std::collections::VecDeque<Held>,
    batch: usize,
) -> u64
where
    S: Stream<Item = google_cloud_spanner::Result<google_cloud_spanner::result::Row>> + ?Sized,
{
    use futures::StreamExt as _;
    let limit = (batch * 4).max(16) as u64;
    let mut drained = 0_u64;
    while drained < limit {
        let Ok(Some(Ok(row))) = tokio::time::timeout(DRAIN_GRACE, rows.as_mut().next()).await
        else {
            break;
        };
        drained += 1;
        match hold::<M>(shared, columns, &row) {
            Ok(Some(row)) => held.push_back(row),
            Ok(None) => {}
            Err(error) => tracing::warn!(
                queue = %M::QUEUE,
                error = %telemetry::ErrorChain(&error),
                "unusable RECEIVE row while ending a call; its lease lapses"
            ),
        }
    }
    drained
}

/// Gives back rows read but never handed out: each is acked and sent again for immediate
/// delivery, so that no consumer waits for its lease to lapse. Spanner documents no call that ends
/// a lease early (`RENEWLEASE` always extends by about 10 s), so the release is an ack plus a
/// re-send of the same key and payload, as [`Database::release`] does; change it here if
/// the platform gains one.
async fn release_held<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    held: std::collections::VecDeque<Held>,
) {
    let counters = &shared.leases.counters;
    for row in held {
        counters.read_ahead.fetch_sub(1, Ordering::SeqCst);
        shared.leases.unregister(row.lease.id);
        if row.lease.is_lost() {
            continue; // expired: Spanner delivers it again anyway
        }
        let queue = shared.queue.clone();
        let key = row.key.clone();
        let payload = row.payload;
        let released = crate::transaction::builder(&shared.db)
            .with_settings(shared.transaction.clone())
            .run(move |tx| {
                let queue = queue.clone();
                let key = key.clone();
                let payload = payload.clone();
                async move { delivery::release_in(&queue, &tx, key, payload, Duration::ZERO).await }
            })
            .await;
        match released {
            Ok(()) => {
                counters.released_unread.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(queue = %M::QUEUE, key = %row.key.short(), "released a leased row never handed out");
            }
            Err(error) => tracing::warn!(
                queue = %M::QUEUE,
                key = %row.key.short(),
                error = %telemetry::ErrorChain(&error),
                "could not release a leased row never handed out; it is delivered again when its lease lapses"
            ),
        }
    }
}

fn skipped_expired<M: QueueMessage>(counters: &Counters, key: &MessageKey, remaining: Duration) {
    counters.expired_on_receipt.fetch_add(1, Ordering::Relaxed);
    metrics::counter!(telemetry::EXPIRED_ON_RECEIPT, "queue" => M::QUEUE.as_str().to_owned())
        .increment(1);
    tracing::debug!(queue = %M::QUEUE, key = %key.short(), ?remaining, "lease expired on receipt; skipped");
}

/// The `RECEIVE` call, asking for batches of at most `batch` rows (the free slots).
fn receive_statement<M: QueueMessage>(
    settings: &ReceiveSettings,
    dialect: Dialect,
    batch: usize,
) -> Statement {
    let mut params = crate::queue::Params::new(dialect);
    let (duration_name, duration) = params.next("max_duration");
    let (batch_name, batch_size) = params.next("max_batch_size");
    let sql = match dialect {
        Dialect::GoogleSql => format!(
            "SELECT * FROM {}(max_duration => {duration}, max_batch_size => {batch_size})",
            M::QUEUE.receive_function(dialect)
        ),
        // The documented PostgreSQL argument list names all three [C].
        Dialect::PostgreSql => format!(
            "SELECT * FROM {}(max_batch_size => {batch_size}, priority => NULL, max_duration => \
             {duration})",
            M::QUEUE.receive_function(dialect)
        ),
    };
    Statement::builder(sql)
        .add_param(
            duration_name,
            settings::format_max_duration(settings.max_duration()),
        )
        .add_param(batch_name, i64::try_from(batch).unwrap_or(i64::MAX))
        // Deliberate: a deadline past max_duration (the client sets none on streams unless the
        // application configured a client-wide one, which could cut calls short), and no
        // client-side resumption: a broken call is re-issued by `receive_task`, with backoff.
        .with_attempt_timeout(settings.max_duration() + settings.call_deadline_margin())
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
            let part = KeyValue::from_value(*key_type, value, ty).or_else(|e| {
                // A value that does not fit the message type's key (a drifted column, or a row
                // written by another program) is read as the column's own type, so that the
                // row still has a key: its delivery then fails to decode (a poison message
                // that can be acked and moved aside) instead of being unusable.
                crate::key::KeyType::of_column(ty)
                    .and_then(|actual| KeyValue::from_value(actual, value, ty).ok())
                    .ok_or_else(|| {
                        bad(format!(
                            "key column {position}: {}",
                            e.at_position(position)
                        ))
                    })
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
        fn encode_payload(&self) -> std::result::Result<Payload, crate::codec::CodecError> {
            Ok(crate::codec::encode_string(&self.body))
        }
        fn decode(
            id: i64,
            payload: Payload,
        ) -> std::result::Result<Self, crate::codec::CodecError> {
            Ok(Task {
                id,
                body: crate::codec::decode_string(payload)?,
            })
        }
    }

    #[test]
    fn receive_sql_names_every_argument_as_a_parameter() {
        let settings = ReceiveSettings::default();
        let statement = receive_statement::<Task>(&settings, Dialect::GoogleSql, 20);
        assert_eq!(
            statement.sql(),
            "SELECT * FROM RECEIVE_Tasks(max_duration => @max_duration, max_batch_size => @max_batch_size)"
        );
        let statement = receive_statement::<Task>(&settings, Dialect::PostgreSql, 20);
        assert_eq!(
            statement.sql(),
            "SELECT * FROM spanner.receive_tasks(max_batch_size => $2, priority => NULL, \
             max_duration => $1)"
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
