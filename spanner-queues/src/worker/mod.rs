//! The worker runtime: receive, run a handler, ack — with bounded concurrency, retries with
//! backoff, a dead-letter table and graceful shutdown.
//!
//! A [`Worker<M>`](crate::worker::Worker) pulls deliveries from a [`Receiver<M>`](crate::receive::Receiver) and runs a
//! handler for each, at most [`concurrency`](crate::worker::WorkerBuilder::with_concurrency) at a time. Two
//! handler styles:
//!
//! - **Transactional** ([`WorkerBuilder::transactional`](crate::worker::WorkerBuilder::transactional)): the handler gets the read-write
//!   transaction, the message and a [`HandlerContext`](crate::worker::HandlerContext). The worker runs it with
//!   [`transaction::builder`](crate::transaction::builder) and acks the message in the same
//!   transaction, so the handler's database writes are applied exactly once: a second delivery
//!   of a message whose transaction committed finds it gone, and its ack assertion rolls that
//!   second transaction back (this also covers a commit whose outcome was unknown).
//! - **External** ([`WorkerBuilder::external`](crate::worker::WorkerBuilder::external)): for side effects outside Spanner (an e-mail, a
//!   payment API). The handler gets the message and a context whose
//!   [`idempotency_key`](crate::worker::HandlerContext::idempotency_key) is stable across deliveries; the worker
//!   acks after the handler succeeds. Delivery is at least once: pass the key to the external
//!   system so that a repeated call has no second effect.
//!
//! # Attempts, retries and dead letters
//!
//! Each attempt is counted in the table [`ATTEMPTS_TABLE`](crate::worker::ATTEMPTS_TABLE) (create it with
//! [`schema_statements`](crate::worker::schema_statements)) when it **starts**, so crashes and lost leases count too; payloads
//! are never rewritten. An attempt fails when the handler returns an error, panics, exceeds
//! the [handler timeout](crate::worker::WorkerBuilder::with_handler_timeout), or loses its lease:
//!
//! | Failure | What the worker does |
//! |---|---|
//! | error, panic, timeout | releases the message (ack + re-send of the same payload with `DeliverTime = now + delay`, one transaction), the delay from the [`RedeliveryPolicy`](crate::worker::RedeliveryPolicy); after [`max_attempts`](crate::worker::WorkerBuilder::with_max_attempts) moves it to the dead-letter table instead |
//! | [`HandlerError::retry_after`](crate::worker::HandlerError::retry_after) | releases it with that delay (still counts as an attempt) |
//! | [`HandlerError::dead_letter`](crate::worker::HandlerError::dead_letter) | moves it to the dead-letter table at once |
//! | lease lost | stops the handler and does nothing else: Spanner delivers the message again |
//! | payload does not decode | moves it to the dead-letter table at once |
//!
//! A move to [`DEAD_LETTER_TABLE`](crate::worker::DEAD_LETTER_TABLE) is atomic (the ack and the dead-letter row commit together)
//! and keeps the raw payload, the attempt count and the error text; [`DeadLetters`](crate::worker::DeadLetters) lists and
//! replays them. A panic never stops the worker.
//!
//! # Shutdown
//!
//! [`Worker::run`](crate::worker::Worker::run) returns after its `shutdown` future completes: it stops receiving, lets
//! running handlers finish within the [grace period](crate::worker::WorkerBuilder::with_shutdown_grace), then
//! stops the rest and releases their messages — and any received but not started — with
//! `DeliverTime = now`, so they are delivered again promptly (an attempt interrupted by
//! shutdown does not count). A message is never lost: every path either acks it in the
//! transaction that applied its effects, releases it (an ack and a re-send in one transaction),
//! dead-letters it (an ack and an insert in one transaction), or leaves it in the queue for
//! Spanner to deliver again when its lease lapses.
//!
//! ```no_run
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "OrderEmails")]
//! # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
//! use google_cloud_spanner::statement::Statement;
//! use spanner_queues::Worker;
//!
//! async fn work(
//!     db: google_cloud_spanner::client::DatabaseClient,
//!     shutdown: impl Future<Output = ()> + Send,
//! ) -> spanner_queues::Result<()> {
//!     let worker = Worker::<OrderEmail>::builder(db)
//!         .with_concurrency(8)
//!         .with_max_attempts(5)
//!         .transactional(|tx, email, _ctx| async move {
//!             tx.execute_update(
//!                 Statement::builder("UPDATE Orders SET Emailed = TRUE WHERE OrderId = @id")
//!                     .add_param("id", email.order_id)
//!                     .build(),
//!             )
//!             .await?;
//!             Ok(())
//!         });
//!     worker.run(shutdown).await
//! }
//! ```

mod policy;
mod tables;

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use backon::BackoffBuilder as _;
use futures::{FutureExt as _, StreamExt as _};
use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::ReadWriteTransaction;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::queue::Queue;
use crate::receive::lease::LeaseHandle;
use crate::receive::{
    Delivery, ReceiveSettings, Receiver, ReceiverStats, ReceiverStatsHandle, lock,
};
use crate::telemetry;
use crate::transaction::TransactionSettings;

pub use policy::RedeliveryPolicy;
pub use tables::{
    ATTEMPTS_TABLE, DEAD_LETTER_TABLE, DeadLetter, DeadLetters, MAX_ERROR_TEXT, ensure_tables,
    schema_statements,
};

/// The boxed error a [`HandlerError`] carries.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

type HandlerFuture =
    Pin<Box<dyn Future<Output = std::result::Result<(), HandlerError>> + Send + 'static>>;
type TransactionalFn<M> =
    dyn Fn(ReadWriteTransaction, Arc<M>, HandlerContext) -> HandlerFuture + Send + Sync;
type ExternalFn<M> = dyn Fn(Arc<M>, HandlerContext) -> HandlerFuture + Send + Sync;

enum Handler<M> {
    Transactional(Arc<TransactionalFn<M>>),
    External(Arc<ExternalFn<M>>),
}

/// What the worker should do after a handler error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandlerErrorKind {
    /// Retry after the [`RedeliveryPolicy`]'s delay (dead-letter after the last attempt).
    Retry,
    /// Retry after this delay (dead-letter after the last attempt).
    RetryAfter(Duration),
    /// Do not retry: move the message to the dead-letter table now.
    DeadLetter,
}

/// The error a handler returns.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into it, so `?` works on the
/// official client's errors, this crate's errors and your own. Those are retried according to
/// the worker's [`RedeliveryPolicy`]; use [`retry_after`](Self::retry_after) or
/// [`dead_letter`](Self::dead_letter) to decide otherwise. Inside a transactional handler, an
/// error from Spanner that aborts the transaction (`ABORTED`) makes the transaction runner run
/// the handler again, as it would for any closure.
pub struct HandlerError {
    kind: HandlerErrorKind,
    error: BoxError,
}

impl HandlerError {
    /// A failure to retry after the policy's delay.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self {
            kind: HandlerErrorKind::Retry,
            error: error.into(),
        }
    }

    /// A failure described by `text`, retried after the policy's delay.
    pub fn msg(text: impl fmt::Display) -> Self {
        Self::new(text.to_string())
    }

    /// A failure to retry after `delay` instead of the policy's delay.
    pub fn retry_after(delay: Duration, error: impl Into<BoxError>) -> Self {
        Self {
            kind: HandlerErrorKind::RetryAfter(delay),
            error: error.into(),
        }
    }

    /// A permanent failure: the message goes to the dead-letter table without further attempts.
    pub fn dead_letter(error: impl Into<BoxError>) -> Self {
        Self {
            kind: HandlerErrorKind::DeadLetter,
            error: error.into(),
        }
    }

    /// What the worker does with it.
    pub fn kind(&self) -> HandlerErrorKind {
        self.kind
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    /// Takes the underlying error.
    pub fn into_error(self) -> BoxError {
        self.error
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        Self::new(error)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&telemetry::ErrorChain(&*self.error), f)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("kind", &self.kind)
            .field("error", &self.error)
            .finish()
    }
}

/// The idempotency key of a message: stable across deliveries, retries and processes, derived
/// from the queue name and the message key only (`<queue>:<32 hex digits>`).
///
/// A new message sent later with the same key gets the same idempotency key: use unique keys
/// (a UUID) for messages that are not repeats of each other.
///
/// ```
/// use spanner_queues::{KeyValue, MessageKey, QueueName};
/// use spanner_queues::worker::idempotency_key;
///
/// let queue = QueueName::from_static("Payments");
/// let key = MessageKey::new(vec![KeyValue::Int64(42)]);
/// let id = idempotency_key(&queue, &key);
/// assert!(id.starts_with("Payments:") && id.len() == "Payments:".len() + 32);
/// assert_eq!(id, idempotency_key(&queue, &key));
/// ```
pub fn idempotency_key(queue: &QueueName, key: &MessageKey) -> String {
    let hash = telemetry::fnv1a128(&[queue.as_str().as_bytes(), key.to_wire().as_bytes()]);
    format!("{queue}:{hash:032x}")
}

/// What a handler knows about the message it is working on.
#[derive(Clone)]
pub struct HandlerContext(Arc<ContextInner>);

struct ContextInner {
    queue: QueueName,
    key: MessageKey,
    attempt: u32,
    max_attempts: u32,
    previous_error: Option<String>,
    deliver_time: Option<SystemTime>,
    lease: LeaseHandle,
}

impl HandlerContext {
    /// The queue.
    pub fn queue(&self) -> &QueueName {
        &self.0.queue
    }

    /// The message key.
    pub fn key(&self) -> &MessageKey {
        &self.0.key
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        self.0.attempt
    }

    /// The worker's `max_attempts`.
    pub fn max_attempts(&self) -> u32 {
        self.0.max_attempts
    }

    /// Whether a failure now sends the message to the dead-letter table.
    pub fn is_last_attempt(&self) -> bool {
        self.0.attempt >= self.0.max_attempts
    }

    /// The error recorded by the previous failed attempt, if any.
    pub fn previous_error(&self) -> Option<&str> {
        self.0.previous_error.as_deref()
    }

    /// The message's `DeliverTime`, if known.
    pub fn deliver_time(&self) -> Option<SystemTime> {
        self.0.deliver_time
    }

    /// A stable idempotency key for side effects outside Spanner; see [`idempotency_key`].
    pub fn idempotency_key(&self) -> String {
        idempotency_key(&self.0.queue, &self.0.key)
    }

    /// When the lease expires (renewed in the background).
    pub fn lease_expiry(&self) -> SystemTime {
        self.0.lease.expiry()
    }

    /// Whether the lease is lost; the worker stops the handler when it is.
    pub fn is_lease_lost(&self) -> bool {
        self.0.lease.is_lost()
    }

    /// Resolves when the lease is lost.
    pub async fn lease_lost(&self) {
        self.0.lease.wait_lost().await;
    }
}

impl fmt::Debug for HandlerContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerContext")
            .field("queue", &self.0.queue)
            .field("key", &self.0.key)
            .field("attempt", &self.0.attempt)
            .field("max_attempts", &self.0.max_attempts)
            .finish_non_exhaustive()
    }
}

/// Counters of a worker, as returned by [`Worker::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Attempts started (handler runs).
    pub started: u64,
    /// Messages acked after their handler succeeded.
    pub acked: u64,
    /// Failed attempts released for a later retry.
    pub retried: u64,
    /// Messages moved to the dead-letter table.
    pub dead_lettered: u64,
    /// Handler errors.
    pub handler_errors: u64,
    /// Handler panics.
    pub panics: u64,
    /// Handler timeouts.
    pub timeouts: u64,
    /// Attempts stopped because the lease was lost.
    pub lease_lost: u64,
    /// Attempts that found the message already acked (by another consumer).
    pub already_acked: u64,
    /// Attempts whose commit outcome was unknown (left for Spanner to deliver again).
    pub outcome_unknown: u64,
    /// Messages released at shutdown (running or not started).
    pub released_on_shutdown: u64,
    /// Handlers running now.
    pub running: usize,
    /// The most handlers running at once so far.
    pub max_running: usize,
    /// The receiver's counters (of the current or last run).
    pub receiver: ReceiverStats,
}

#[derive(Debug, Default)]
struct Counters {
    started: AtomicU64,
    acked: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    handler_errors: AtomicU64,
    panics: AtomicU64,
    timeouts: AtomicU64,
    lease_lost: AtomicU64,
    already_acked: AtomicU64,
    outcome_unknown: AtomicU64,
    released_on_shutdown: AtomicU64,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[derive(Debug, Clone)]
struct Config {
    concurrency: usize,
    /// `None`: as many as the concurrency.
    prefetch: Option<usize>,
    max_attempts: u32,
    handler_timeout: Duration,
    shutdown_grace: Duration,
    redelivery: RedeliveryPolicy,
    transaction: TransactionSettings,
    receive: ReceiveSettings,
}

/// Builds a [`Worker`].
#[must_use]
pub struct WorkerBuilder<M: QueueMessage> {
    db: DatabaseClient,
    queue: Queue<M>,
    config: Config,
}

impl<M: QueueMessage> WorkerBuilder<M> {
    /// Handlers running at once, at most (default 8).
    pub fn with_concurrency(mut self, handlers: usize) -> Self {
        self.config.concurrency = handlers;
        self
    }

    /// Deliveries received ahead of a free handler, at most (default: the concurrency). They
    /// are leased and renewed while they wait.
    pub fn with_prefetch(mut self, deliveries: usize) -> Self {
        self.config.prefetch = Some(deliveries);
        self
    }

    /// Attempts per message before it goes to the dead-letter table (default 10).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = attempts;
        self
    }

    /// Longest run of one handler attempt, its transaction included (default 5 minutes).
    pub fn with_handler_timeout(mut self, timeout: Duration) -> Self {
        self.config.handler_timeout = timeout;
        self
    }

    /// How long running handlers may continue after shutdown starts (default 30 s).
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.shutdown_grace = grace;
        self
    }

    /// Delays between attempts.
    pub fn with_redelivery_policy(mut self, policy: RedeliveryPolicy) -> Self {
        self.config.redelivery = policy;
        self
    }

    /// Settings of every transaction the worker runs (handler transactions, acks, releases,
    /// attempt counts, dead letters).
    pub fn with_transaction_settings(mut self, settings: TransactionSettings) -> Self {
        self.config.transaction = settings;
        self
    }

    /// Receive settings. Their `max_in_flight` is replaced by concurrency + prefetch.
    pub fn with_receive_settings(mut self, settings: ReceiveSettings) -> Self {
        self.config.receive = settings;
        self
    }

    /// The queue handle (dialect, payload limits).
    pub fn with_queue(mut self, queue: Queue<M>) -> Self {
        self.queue = queue;
        self
    }

    /// A worker whose handler runs inside the read-write transaction that acks the message.
    ///
    /// The handler may run more than once per attempt (the transaction runner re-runs it when
    /// Spanner aborts the transaction): keep it free of side effects outside Spanner.
    pub fn transactional<F, Fut>(self, handler: F) -> Worker<M>
    where
        F: Fn(ReadWriteTransaction, Arc<M>, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
    {
        let handler: Arc<TransactionalFn<M>> =
            Arc::new(move |tx, message, ctx| Box::pin(handler(tx, message, ctx)));
        self.finish(Handler::Transactional(handler))
    }

    /// A worker whose handler works outside Spanner; the worker acks after it succeeds.
    pub fn external<F, Fut>(self, handler: F) -> Worker<M>
    where
        F: Fn(Arc<M>, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
    {
        let handler: Arc<ExternalFn<M>> =
            Arc::new(move |message, ctx| Box::pin(handler(message, ctx)));
        self.finish(Handler::External(handler))
    }

    fn finish(self, handler: Handler<M>) -> Worker<M> {
        Worker {
            shared: Arc::new(Shared {
                db: self.db,
                queue: self.queue,
                config: self.config,
                handler,
                counters: Counters::default(),
                receiver: Mutex::new(None),
            }),
        }
    }
}

impl<M: QueueMessage> fmt::Debug for WorkerBuilder<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("queue", &M::QUEUE)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

struct Shared<M> {
    db: DatabaseClient,
    queue: Queue<M>,
    config: Config,
    handler: Handler<M>,
    counters: Counters,
    receiver: Mutex<Option<ReceiverStatsHandle>>,
}

/// Runs a handler for every message of the queue of `M`; see the [module docs](self).
pub struct Worker<M: QueueMessage> {
    shared: Arc<Shared<M>>,
}

impl<M: QueueMessage> Worker<M> {
    /// A builder with default settings.
    pub fn builder(db: DatabaseClient) -> WorkerBuilder<M> {
        WorkerBuilder {
            db,
            queue: Queue::new(),
            config: Config {
                concurrency: 8,
                prefetch: None,
                max_attempts: 10,
                handler_timeout: Duration::from_secs(300),
                shutdown_grace: Duration::from_secs(30),
                redelivery: RedeliveryPolicy::default(),
                transaction: TransactionSettings::default(),
                receive: ReceiveSettings::default(),
            },
        }
    }

    /// The counters now.
    pub fn stats(&self) -> WorkerStats {
        stats_of(&self.shared)
    }

    /// Starts the worker on a task of its own and returns its handle: read its
    /// [`stats`](WorkerHandle::stats), and stop it with [`shutdown`](WorkerHandle::shutdown).
    ///
    /// ```no_run
    /// # use spanner_queues::QueueMessage;
    /// # #[derive(QueueMessage)]
    /// # #[queue(name = "OrderEmails")]
    /// # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
    /// use spanner_queues::{HandlerError, Worker};
    ///
    /// async fn serve(db: google_cloud_spanner::client::DatabaseClient) -> spanner_queues::Result<()> {
    ///     let worker = Worker::<OrderEmail>::builder(db)
    ///         .external(|email, _ctx| async move {
    ///             let _ = email.subject.len(); // … send the e-mail …
    ///             Ok::<(), HandlerError>(())
    ///         })
    ///         .spawn();
    ///     // … serve requests until it is time to stop …
    ///     println!("acked so far: {}", worker.stats().acked);
    ///     let stats = worker.shutdown().await?;
    ///     println!("acked in total: {}", stats.acked);
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn spawn(self) -> WorkerHandle {
        let stop = CancellationToken::new();
        let stopped = stop.clone().cancelled_owned();
        let shared = Arc::clone(&self.shared);
        let task = tokio::spawn(async move { self.run(stopped).await });
        WorkerHandle {
            queue: M::QUEUE,
            stats: Arc::new(move || stats_of(&shared)),
            stop,
            task,
        }
    }
}

/// A worker started by [`Worker::spawn`].
///
/// Dropping the handle starts a graceful shutdown without waiting for it; call
/// [`shutdown`](Self::shutdown) to wait.
pub struct WorkerHandle {
    queue: QueueName,
    stats: Arc<dyn Fn() -> WorkerStats + Send + Sync>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl WorkerHandle {
    /// The worker's counters now.
    pub fn stats(&self) -> WorkerStats {
        (self.stats)()
    }

    /// Whether the worker has stopped (after a shutdown, or because it could not start).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Shuts the worker down gracefully (see the [module docs](self#shutdown)), waits until
    /// it has stopped, and returns its final counters.
    ///
    /// # Errors
    /// What [`Worker::run`] returned: an error if the worker could not start.
    ///
    /// # Cancellation
    /// Dropping this future does not stop the shutdown: the worker finishes it on its own task.
    pub async fn shutdown(mut self) -> Result<WorkerStats> {
        self.stop.cancel();
        match (&mut self.task).await {
            Ok(result) => result.map(|()| self.stats()),
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            // The runtime is shutting down and dropped the worker's task.
            Err(_) => Ok(self.stats()),
        }
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl fmt::Debug for WorkerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerHandle")
            .field("queue", &self.queue)
            .field("stats", &self.stats())
            .field("finished", &self.is_finished())
            .finish()
    }
}

fn stats_of<M: QueueMessage>(shared: &Shared<M>) -> WorkerStats {
    let c = &shared.counters;
    WorkerStats {
        started: c.started.load(Ordering::Relaxed),
        acked: c.acked.load(Ordering::Relaxed),
        retried: c.retried.load(Ordering::Relaxed),
        dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
        handler_errors: c.handler_errors.load(Ordering::Relaxed),
        panics: c.panics.load(Ordering::Relaxed),
        timeouts: c.timeouts.load(Ordering::Relaxed),
        lease_lost: c.lease_lost.load(Ordering::Relaxed),
        already_acked: c.already_acked.load(Ordering::Relaxed),
        outcome_unknown: c.outcome_unknown.load(Ordering::Relaxed),
        released_on_shutdown: c.released_on_shutdown.load(Ordering::Relaxed),
        running: c.running.load(Ordering::SeqCst),
        max_running: c.max_running.load(Ordering::SeqCst),
        receiver: lock(&shared.receiver)
            .as_ref()
            .map(ReceiverStatsHandle::get)
            .unwrap_or_default(),
    }
}

impl<M: QueueMessage> Worker<M> {
    /// Receives and handles messages until `shutdown` completes, then shuts down gracefully
    /// (see the [module docs](self#shutdown)) and returns.
    ///
    /// Receive errors are logged and retried with backoff; they do not end the run.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for settings out of range, [`Error::InvalidSchema`] when the
    /// worker's tables ([`schema_statements`]) are missing. Nothing was received.
    pub async fn run<S>(&self, shutdown: S) -> Result<()>
    where
        S: Future<Output = ()> + Send,
    {
        let shared = &self.shared;
        let config = &shared.config;
        validate(config)?;
        tables::check_tables(&shared.db).await?;
        let receive = config
            .receive
            .clone()
            .with_max_in_flight(config.concurrency + config.prefetch.unwrap_or(config.concurrency));
        let mut receiver = Receiver::<M>::builder(shared.db.clone())
            .with_settings(receive)
            .with_queue(shared.queue.clone())
            .with_transaction_settings(config.transaction.clone())
            .build()?;
        *lock(&shared.receiver) = Some(receiver.stats_handle());
        let slots = Arc::new(Semaphore::new(config.concurrency));
        let abort = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tokio::pin!(shutdown);
        tracing::info!(queue = %M::QUEUE, concurrency = config.concurrency, "worker started");
        loop {
            while let Some(joined) = tasks.try_join_next() {
                report_join(joined);
            }
            let slot = tokio::select! {
                biased;
                () = &mut shutdown => break,
                slot = Arc::clone(&slots).acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => break,
                },
            };
            let item = tokio::select! {
                biased;
                () = &mut shutdown => break,
                item = receiver.next() => item,
            };
            match item {
                None => break,
                Some(Err(error)) => {
                    tracing::warn!(
                        queue = %M::QUEUE,
                        error = %telemetry::ErrorChain(&error),
                        "receive error; the receiver retries"
                    );
                }
                Some(Ok(delivery)) => {
                    tasks.spawn(process(Arc::clone(shared), delivery, slot, abort.clone()));
                }
            }
        }

        // Shutdown: stop receiving; release what was received but not started.
        tracing::info!(queue = %M::QUEUE, running = tasks.len(), "worker shutting down");
        receiver.close();
        while let Some(item) = receiver.next().await {
            if let Ok(delivery) = item {
                let shared = Arc::clone(shared);
                tasks.spawn(async move {
                    release_unstarted(&shared, delivery).await;
                });
            }
        }
        let drained = tokio::time::timeout(config.shutdown_grace, async {
            while let Some(joined) = tasks.join_next().await {
                report_join(joined);
            }
        })
        .await;
        if drained.is_err() {
            tracing::info!(
                queue = %M::QUEUE,
                stopping = tasks.len(),
                "grace period over; stopping handlers and releasing their messages"
            );
            abort.cancel();
            let budget = config.transaction.total_timeout + tables::SHUTDOWN_RELEASE_BUDGET;
            let finished = tokio::time::timeout(budget, async {
                while let Some(joined) = tasks.join_next().await {
                    report_join(joined);
                }
            })
            .await;
            if finished.is_err() {
                tracing::warn!(
                    queue = %M::QUEUE,
                    left = tasks.len(),
                    "releases did not finish; those messages are delivered again when their leases lapse"
                );
            }
        }
        tracing::info!(queue = %M::QUEUE, "worker stopped");
        Ok(())
    }
}

impl<M: QueueMessage> fmt::Debug for Worker<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("queue", &M::QUEUE)
            .field("config", &self.shared.config)
            .field("stats", &self.stats())
            .finish()
    }
}

fn validate(config: &Config) -> Result<()> {
    let invalid = |setting: &'static str, reason: &str| {
        Err(Error::InvalidSetting {
            setting,
            reason: reason.to_owned(),
        })
    };
    if config.concurrency == 0 {
        return invalid("concurrency", "must be at least 1");
    }
    if config.max_attempts == 0 {
        return invalid("max_attempts", "must be at least 1");
    }
    if config.handler_timeout.is_zero() {
        return invalid("handler_timeout", "must be positive");
    }
    Ok(())
}

fn report_join(joined: std::result::Result<(), tokio::task::JoinError>) {
    if let Err(error) = joined
        && error.is_panic()
    {
        // Handler panics are caught inside the task; this is a bug in the worker itself.
        tracing::error!(error = %error, "worker task panicked");
    }
}

fn count_outcome<M: QueueMessage>(outcome: &'static str) {
    metrics::counter!(
        telemetry::PROCESSED,
        "queue" => M::QUEUE.as_str().to_owned(),
        "outcome" => outcome
    )
    .increment(1);
}

/// Why an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Error,
    Panic,
    Timeout,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Panic => "panic",
            Self::Timeout => "timeout",
        }
    }
}

struct Failure {
    reason: Reason,
    kind: HandlerErrorKind,
    text: String,
}

impl Failure {
    fn handler(error: HandlerError) -> Self {
        Self {
            reason: Reason::Error,
            kind: error.kind,
            text: error.to_string(),
        }
    }

    fn error(error: &Error) -> Self {
        Self {
            reason: Reason::Error,
            kind: HandlerErrorKind::Retry,
            text: telemetry::ErrorChain(error).to_string(),
        }
    }

    fn panic(payload: &(dyn std::any::Any + Send)) -> Self {
        let text = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_owned()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "a non-string panic payload".to_owned()
        };
        Self {
            reason: Reason::Panic,
            kind: HandlerErrorKind::Retry,
            text: format!("handler panicked: {text}"),
        }
    }

    fn timeout(after: Duration) -> Self {
        Self {
            reason: Reason::Timeout,
            kind: HandlerErrorKind::Retry,
            text: format!("handler timed out after {after:?}"),
        }
    }
}

/// How one attempt ended.
enum Step {
    /// Transactional: committed with the ack.
    Acked,
    /// External: the handler succeeded; the ack is still to do.
    Succeeded,
    /// The message was gone when acked.
    AlreadyAcked,
    /// The commit's outcome is unknown.
    Unknown,
    Failed(Failure),
    LeaseLost,
    Shutdown,
}

/// One message, from the attempt count to ack, release or dead letter.
async fn process<M: QueueMessage>(
    shared: Arc<Shared<M>>,
    delivery: Delivery<M>,
    _slot: OwnedSemaphorePermit,
    abort: CancellationToken,
) {
    let counters = &shared.counters;
    let running = counters.running.fetch_add(1, Ordering::SeqCst) + 1;
    counters.max_running.fetch_max(running, Ordering::SeqCst);
    let span = tracing::info_span!(
        "spanner_queues.process",
        queue = %M::QUEUE,
        key = %delivery.key(),
        attempt = tracing::field::Empty,
        lease = delivery.lease_label(),
    );
    Box::pin(attempt_message(&shared, delivery, &abort))
        .instrument(span)
        .await;
    counters.running.fetch_sub(1, Ordering::SeqCst);
}

async fn attempt_message<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    delivery: Delivery<M>,
    abort: &CancellationToken,
) {
    let config = &shared.config;
    let Some(message) = delivery.shared_message() else {
        let text = match delivery.message() {
            Err(error) => telemetry::ErrorChain(error).to_string(),
            Ok(_) => "undecodable payload".to_owned(),
        };
        tracing::warn!(error = %text, "payload does not decode; dead-lettering");
        Box::pin(dead_letter(shared, delivery, None, &text)).await;
        return;
    };
    let lease = delivery.lease_handle();
    let counted = match Box::pin(start(shared, &delivery, &lease, abort)).await {
        Start::Counted(counted) => counted,
        Start::Shutdown => {
            Box::pin(release_unstarted(shared, delivery)).await;
            return;
        }
        Start::GaveUp => return,
    };
    let attempt = counted.number;
    let previous_error = counted.previous_error.clone();
    tracing::Span::current().record("attempt", attempt);
    if attempt > config.max_attempts {
        let text = format!(
            "gave up after {} attempts; last error: {}",
            attempt - 1,
            previous_error
                .as_deref()
                .unwrap_or("none recorded (crash or lost lease)")
        );
        Box::pin(dead_letter(shared, delivery, Some(attempt - 1), &text)).await;
        return;
    }
    bump(&shared.counters.started);
    let ctx = HandlerContext(Arc::new(ContextInner {
        queue: M::QUEUE,
        key: delivery.key().clone(),
        attempt,
        max_attempts: config.max_attempts,
        previous_error: previous_error.clone(),
        deliver_time: delivery.deliver_time(),
        lease: lease.clone(),
    }));

    let started = Instant::now();
    let work =
        AssertUnwindSafe(Box::pin(run_handler(shared, &delivery, message, ctx))).catch_unwind();
    let step = tokio::select! {
        biased;
        result = work => match result {
            Ok(step) => step,
            Err(panic) => Step::Failed(Failure::panic(&*panic)),
        },
        () = lease.wait_lost() => Step::LeaseLost,
        () = abort.cancelled() => Step::Shutdown,
        () = tokio::time::sleep(config.handler_timeout) => {
            Step::Failed(Failure::timeout(config.handler_timeout))
        }
    };
    metrics::histogram!(telemetry::HANDLER_SECONDS, "queue" => M::QUEUE.as_str().to_owned())
        .record(started.elapsed().as_secs_f64());

    let step = match step {
        Step::Succeeded => Box::pin(ack_after_success(shared, &delivery)).await,
        other => other,
    };
    let counters = &shared.counters;
    match step {
        Step::Acked | Step::Succeeded => {
            bump(&counters.acked);
            count_outcome::<M>("acked");
        }
        Step::AlreadyAcked => {
            bump(&counters.already_acked);
            count_outcome::<M>("already_acked");
            tracing::info!("message already acked by another consumer");
        }
        Step::Unknown => {
            bump(&counters.outcome_unknown);
            count_outcome::<M>("outcome_unknown");
            tracing::warn!(
                "commit outcome unknown; if it was not applied, the message is delivered again"
            );
        }
        Step::LeaseLost => {
            bump(&counters.lease_lost);
            count_outcome::<M>("lease_lost");
            metrics::counter!(
                telemetry::HANDLER_FAILURES,
                "queue" => M::QUEUE.as_str().to_owned(),
                "reason" => "lease_lost"
            )
            .increment(1);
            tracing::warn!("lease lost; handler stopped, the message will be delivered again");
        }
        Step::Shutdown => {
            Box::pin(release_interrupted(shared, delivery, &counted)).await;
        }
        Step::Failed(failure) => Box::pin(fail(shared, delivery, &counted, failure)).await,
    }
}

enum Start {
    Counted(tables::Attempt),
    /// Shutdown began before the attempt was counted.
    Shutdown,
    /// Counting failed, or the lease was lost: the lease lapses and Spanner delivers it again.
    GaveUp,
}

/// Counts the attempt, retrying briefly if that fails.
async fn start<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    delivery: &Delivery<M>,
    lease: &LeaseHandle,
    abort: &CancellationToken,
) -> Start {
    let mut backoff = backon::ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_max_times(5)
        .build();
    let queue = M::QUEUE;
    loop {
        let result = tokio::select! {
            biased;
            () = abort.cancelled() => return Start::Shutdown,
            () = lease.wait_lost() => return Start::GaveUp,
            result = tables::start_attempt(
                &shared.db,
                &queue,
                delivery.key(),
            ) => result,
        };
        match result {
            Ok(started) => return Start::Counted(started),
            Err(error) => match backoff.next() {
                Some(delay) => {
                    tracing::debug!(error = %telemetry::ErrorChain(&error), "counting the attempt failed; retrying");
                    tokio::time::sleep(delay).await;
                }
                None => {
                    tracing::warn!(
                        error = %telemetry::ErrorChain(&error),
                        "cannot count the attempt; leaving the message to be delivered again"
                    );
                    return Start::GaveUp;
                }
            },
        }
    }
}

/// Runs the handler (with its transaction and the ack, for the transactional style).
async fn run_handler<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    delivery: &Delivery<M>,
    message: Arc<M>,
    ctx: HandlerContext,
) -> Step {
    let external = match &shared.handler {
        Handler::External(handler) => Some(handler(message.clone(), ctx.clone())),
        Handler::Transactional(_) => None,
    };
    if let Some(work) = external {
        return match work.await {
            Ok(()) => Step::Succeeded,
            Err(error) => Step::Failed(Failure::handler(error)),
        };
    }
    let key = delivery.key().clone();
    let (body_shared, body_key) = (Arc::clone(shared), key.clone());
    let result = crate::transaction::builder(&shared.db)
        .with_settings(shared.config.transaction.clone())
        .run(move |tx: ReadWriteTransaction| {
            transactional_attempt(
                tx,
                Arc::clone(&body_shared),
                body_key.clone(),
                Arc::clone(&message),
                ctx.clone(),
            )
        })
        .await;
    match result {
        Ok(()) => Step::Acked,
        Err(error) => match error.downcast_application::<HandlerFailed>() {
            Ok(HandlerFailed(handler_error)) => Step::Failed(Failure::handler(handler_error)),
            Err(error) => classify_commit_error(error, &key),
        },
    }
}

/// One run of a transactional handler, with the ack, inside `tx`.
async fn transactional_attempt<M: QueueMessage>(
    tx: ReadWriteTransaction,
    shared: Arc<Shared<M>>,
    key: MessageKey,
    message: Arc<M>,
    ctx: HandlerContext,
) -> Result<()> {
    let work = match &shared.handler {
        Handler::Transactional(handler) => handler(tx.clone(), message, ctx),
        Handler::External(_) => return Ok(()),
    };
    if let Err(error) = work.await {
        return Err(to_runner_error(error));
    }
    shared.queue.ack_key(&tx, key.clone()).await?;
    tables::forget_attempts(&tx, &M::QUEUE, &key)?;
    Ok(())
}

/// Hands a handler error to the transaction runner: Spanner's own errors go back as they are
/// (so aborts re-run the handler), and so do this crate's errors; anything else travels as an
/// application error, which the runner returns after rolling back.
fn to_runner_error(error: HandlerError) -> Error {
    if error.kind == HandlerErrorKind::Retry {
        match error.error.downcast::<google_cloud_spanner::Error>() {
            Ok(spanner) => return Error::from(*spanner),
            Err(other) => match other.downcast::<Error>() {
                Ok(ours) => return *ours,
                Err(other) => return Error::application(HandlerFailed(HandlerError::new(other))),
            },
        }
    }
    Error::application(HandlerFailed(error))
}

/// A handler's error on its way through the transaction runner (as [`Error::Application`]).
#[derive(Debug)]
struct HandlerFailed(HandlerError);

impl fmt::Display for HandlerFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for HandlerFailed {}

fn classify_commit_error(error: Error, key: &MessageKey) -> Step {
    match &error {
        Error::AlreadyAcked { key: acked, .. } if acked == key => Step::AlreadyAcked,
        Error::OutcomeUnknown(_) => Step::Unknown,
        _ => Step::Failed(Failure::error(&error)),
    }
}

/// External style: acks after the handler succeeded, retrying a failed ack a few times.
async fn ack_after_success<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    delivery: &Delivery<M>,
) -> Step {
    let key = delivery.key();
    let mut last = None;
    for attempt in 0..3_u32 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        }
        let (queue, owned_key) = (shared.queue.clone(), key.clone());
        let result = crate::transaction::builder(&shared.db)
            .with_settings(shared.config.transaction.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, key) = (queue.clone(), owned_key.clone());
                async move {
                    queue.ack_key(&tx, key.clone()).await?;
                    tables::forget_attempts(&tx, &M::QUEUE, &key)?;
                    Ok(())
                }
            })
            .await;
        match result {
            Ok(()) => return Step::Acked,
            Err(error) => match classify_commit_error(error, key) {
                Step::Failed(failure) => last = Some(failure.text),
                settled => return settled,
            },
        }
    }
    tracing::warn!(
        error = last.as_deref().unwrap_or(""),
        "could not ack after the handler succeeded; the message will be delivered again"
    );
    Step::Unknown
}

/// A failed attempt: release for a retry, or dead-letter after the last attempt.
async fn fail<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    delivery: Delivery<M>,
    started: &tables::Attempt,
    failure: Failure,
) {
    let attempt = started.number;
    let counters = &shared.counters;
    match failure.reason {
        Reason::Error => bump(&counters.handler_errors),
        Reason::Panic => bump(&counters.panics),
        Reason::Timeout => bump(&counters.timeouts),
    }
    metrics::counter!(
        telemetry::HANDLER_FAILURES,
        "queue" => M::QUEUE.as_str().to_owned(),
        "reason" => failure.reason.as_str()
    )
    .increment(1);
    let last = attempt >= shared.config.max_attempts;
    if failure.kind == HandlerErrorKind::DeadLetter || last {
        tracing::warn!(error = %failure.text, reason = failure.reason.as_str(), "attempt failed; dead-lettering");
        dead_letter(shared, delivery, Some(attempt), &failure.text).await;
        return;
    }
    let delay = match failure.kind {
        HandlerErrorKind::RetryAfter(delay) => delay,
        _ => shared.config.redelivery.delay(attempt),
    };
    tracing::info!(error = %failure.text, reason = failure.reason.as_str(), retry_in = ?delay, "attempt failed; releasing for a retry");
    let text = failure.text;
    let result = release_recording(shared, &delivery, delay, started, Some(text)).await;
    settle_release(shared, result, "retried", &counters.retried);
}

fn settle_release<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    result: Result<()>,
    outcome: &'static str,
    counter: &AtomicU64,
) {
    match result {
        Ok(()) => {
            bump(counter);
            count_outcome::<M>(outcome);
            if outcome == "retried" {
                metrics::counter!(telemetry::RETRIED, "queue" => M::QUEUE.as_str().to_owned())
                    .increment(1);
            }
        }
        Err(Error::AlreadyAcked { .. }) => {
            bump(&shared.counters.already_acked);
            count_outcome::<M>("already_acked");
        }
        Err(error) => tracing::warn!(
            error = %telemetry::ErrorChain(&error),
            "release failed; the message is delivered again when its lease lapses"
        ),
    }
}

/// Releases a delivery and, in the same transaction, records the attempt's error in its row
/// (`Some`) or deletes its row (`None`: an interrupted attempt does not count).
async fn release_recording<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    delivery: &Delivery<M>,
    delay: Duration,
    attempt: &tables::Attempt,
    error: Option<String>,
) -> Result<()> {
    let mut release = delivery.releaser(delay);
    let (key, attempt) = (delivery.key().clone(), attempt.clone());
    crate::transaction::builder(&shared.db)
        .with_settings(shared.config.transaction.clone())
        .run(move |tx: ReadWriteTransaction| {
            let released = release(tx.clone());
            let (key, attempt, error) = (key.clone(), attempt.clone(), error.clone());
            async move {
                released.await?;
                match error {
                    Some(error) => tables::record_failure(&tx, &M::QUEUE, &key, &attempt, &error)?,
                    None => tables::drop_attempt(&tx, &M::QUEUE, &key, &attempt)?,
                }
                Ok(())
            }
        })
        .await
}

/// Shutdown stopped a running attempt: release now, and do not count the attempt.
async fn release_interrupted<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    delivery: Delivery<M>,
    attempt: &tables::Attempt,
) {
    let result = release_recording(shared, &delivery, Duration::ZERO, attempt, None).await;
    settle_release(
        shared,
        result,
        "released",
        &shared.counters.released_on_shutdown,
    );
}

/// Shutdown found a delivery that never started: release it now.
async fn release_unstarted<M: QueueMessage>(shared: &Arc<Shared<M>>, delivery: Delivery<M>) {
    let result = delivery.release_now(Duration::ZERO).await;
    settle_release(
        shared,
        result,
        "released",
        &shared.counters.released_on_shutdown,
    );
}

async fn dead_letter<M: QueueMessage>(
    shared: &Arc<Shared<M>>,
    delivery: Delivery<M>,
    attempts: Option<u32>,
    error: &str,
) {
    let result = tables::dead_letter(
        &shared.db,
        &shared.config.transaction,
        &shared.queue,
        delivery.key(),
        delivery.payload(),
        attempts,
        error,
    )
    .await;
    if result.is_ok() {
        metrics::counter!(telemetry::DEAD_LETTERED, "queue" => M::QUEUE.as_str().to_owned())
            .increment(1);
    }
    settle_release(
        shared,
        result,
        "dead_lettered",
        &shared.counters.dead_lettered,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("business rule")]
    struct Business;

    #[test]
    fn handler_errors_keep_their_kind_and_source() {
        let error: HandlerError = Business.into();
        assert_eq!(error.kind(), HandlerErrorKind::Retry);
        assert_eq!(error.to_string(), "business rule");
        let later = HandlerError::retry_after(Duration::from_secs(5), Business);
        assert_eq!(
            later.kind(),
            HandlerErrorKind::RetryAfter(Duration::from_secs(5))
        );
        let dead = HandlerError::dead_letter("bad input");
        assert_eq!(dead.kind(), HandlerErrorKind::DeadLetter);
        assert_eq!(HandlerError::msg(42).to_string(), "42");
    }

    #[test]
    fn spanner_errors_go_back_to_the_runner_and_others_travel_as_application_errors() {
        let aborted = || {
            google_cloud_spanner::Error::service(
                google_cloud_gax::error::rpc::Status::default()
                    .set_code(google_cloud_gax::error::rpc::Code::Aborted)
                    .set_message("retry"),
            )
        };
        let back = to_runner_error(HandlerError::from(aborted()));
        assert!(
            matches!(&back, Error::Spanner(s) if s.is_aborted()),
            "{back:?}"
        );

        let back = to_runner_error(HandlerError::from(Business));
        let Ok(HandlerFailed(handler_error)) = back.downcast_application::<HandlerFailed>() else {
            panic!("a business error travels as an application error");
        };
        assert_eq!(handler_error.kind(), HandlerErrorKind::Retry);
        assert_eq!(handler_error.to_string(), "business rule");

        // A dead-letter request is kept as it is, even when it wraps a Spanner error.
        let back = to_runner_error(HandlerError::dead_letter(aborted()));
        let Ok(HandlerFailed(handler_error)) = back.downcast_application::<HandlerFailed>() else {
            panic!("a dead-letter request travels as an application error");
        };
        assert_eq!(handler_error.kind(), HandlerErrorKind::DeadLetter);
    }

    #[test]
    fn panics_and_timeouts_describe_themselves() {
        let failure = Failure::panic(&"boom");
        assert_eq!(failure.reason, Reason::Panic);
        assert_eq!(failure.text, "handler panicked: boom");
        let failure = Failure::panic(&String::from("owned"));
        assert_eq!(failure.text, "handler panicked: owned");
        let failure = Failure::timeout(Duration::from_secs(2));
        assert_eq!(failure.reason, Reason::Timeout);
        assert!(failure.text.contains("2s"), "{}", failure.text);
    }

    #[test]
    fn idempotency_keys_are_pinned() {
        // Pinned: a change would make external systems see retries as new requests.
        let queue = QueueName::from_static("Payments");
        let key = MessageKey::new(vec![crate::KeyValue::String("order-1".into())]);
        let id = idempotency_key(&queue, &key);
        assert_eq!(id, "Payments:635b37154ead78f2439990d8ddadf493");
        assert_ne!(
            id,
            idempotency_key(&QueueName::from_static("Refunds"), &key)
        );
        assert_eq!(id.len(), "Payments:".len() + 32);
    }
}

/// Compile-time checks: everything a user may spawn is `Send`.
#[cfg(test)]
#[allow(dead_code)]
mod spawnable {
    use super::*;

    fn worker_run<M: QueueMessage>(worker: Worker<M>) {
        tokio::spawn(async move { worker.run(async {}).await });
    }

    fn worker_handle<M: QueueMessage>(worker: Worker<M>) {
        tokio::spawn(async move { worker.spawn().shutdown().await });
    }

    fn delivery_methods<M: QueueMessage>(a: Delivery<M>, b: Delivery<M>) {
        tokio::spawn(async move { a.ack_now().await });
        tokio::spawn(async move { b.release_now(Duration::from_secs(1)).await });
    }

    fn dead_letters<M: QueueMessage>(dead: DeadLetters, key: MessageKey) {
        tokio::spawn(async move { dead.replay::<M>(&key).await });
    }
}
