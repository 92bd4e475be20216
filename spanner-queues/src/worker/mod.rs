//! The worker runtime: receive, run a handler, ack — with bounded concurrency, retries with
//! backoff, a dead-letter table and graceful shutdown.
//!
//! A [`Worker<M>`](crate::worker::Worker) pulls deliveries from a [`Receiver<M>`](crate::receive::Receiver) and runs a
//! handler for each, at most [`concurrency`](crate::worker::WorkerBuilder::with_concurrency) at a time. Two
//! handler styles:
//!
//! - **Transactional** ([`WorkerBuilder::transactional`](crate::worker::WorkerBuilder::transactional)): the handler gets the read-write
//!   [`Transaction`](crate::Transaction), the message and a [`HandlerContext`]. The worker runs
//!   it in a read-write transaction and acks the message in the same
//!   transaction, so the handler's database writes are applied exactly once: a second delivery
//!   of a message whose transaction committed finds it gone, and its ack assertion rolls that
//!   second transaction back (this also covers a commit whose outcome was unknown).
//! - **External** ([`WorkerBuilder::external`](crate::worker::WorkerBuilder::external)): for side effects outside Spanner (an e-mail, a
//!   payment API). The handler gets the message and a context whose
//!   [`idempotency_key`](crate::worker::HandlerContext::idempotency_key) is stable across deliveries; the worker
//!   acks after the handler succeeds. Delivery is at least once: pass the key to the external
//!   system so that a repeated call has no second effect.
//!
//! # Batch handlers
//!
//! For many small messages, whose cost is mostly the commit, a batch handler handles up to
//! [`batch_size`](crate::worker::WorkerBuilder::with_batch_size) messages together
//! ([`Batch`]), and returns which of them failed ([`BatchOutcome`]):
//!
//! - **Transactional** ([`WorkerBuilder::transactional_batch`](crate::worker::WorkerBuilder::transactional_batch)):
//!   one read-write transaction and **one commit** for the batch: the handler's writes, the
//!   acks of the messages that succeeded (one keyed read and one delete for all of them), and
//!   the release or dead letter of each message that failed. Exactly once, as for single
//!   messages: the acks are in the commit, so a batch delivered again after an unknown commit
//!   outcome finds its acked messages gone and rolls back.
//! - **External** ([`WorkerBuilder::external_batch`](crate::worker::WorkerBuilder::external_batch)):
//!   the handler works outside Spanner (a bulk API call); its attempts are recorded when the
//!   batch starts, and its acks, releases and dead letters then commit in one transaction. At
//!   least once: pass each message's idempotency key along.
//!
//! A batch forms from the messages that are due: it starts when it is full, or when its first
//! message has waited the [linger](crate::worker::WorkerBuilder::with_batch_linger) (10 ms by
//! default), never later. Every message's lease is renewed while its batch runs.
//!
//! A message the handler fails (in its outcome) counts an attempt, alone, and is released or
//! dead-lettered as a single message would be. A batch that fails **as a whole** (the handler
//! returns `Err`, panics or times out, or the commit fails) is split in two, and each half runs
//! again, until the failing messages are alone: the others commit, and only a failing message
//! counts an attempt (and is dead-lettered after its last). A message that another consumer acked
//! meanwhile leaves the batch, which runs again without it. For an ordered message type, a batch
//! takes only messages that may run now: a key's lowest waiting message once nothing earlier of
//! its key is left and, in a transactional batch, the key's next sequences right after it, in
//! order (an external batch takes one per key). When one of them fails, none after it commits
//! in that attempt: the batch runs again without them, and they wait for it. Per-key order
//! holds as for single messages.
//!
//! `docs/batches.md` says when to choose a batch handler, what a batch costs on Cloud Spanner
//! and how to choose its size.
//!
//! # Attempts, retries and dead letters
//!
//! Attempts are counted in the table [`tables::attempts`](crate::tables::attempts) (create it
//! with [`SchemaSetup::with_worker_tables`](crate::SchemaSetup::with_worker_tables)); payloads
//! are never rewritten.
//!
//! - An **external** attempt is recorded when it **starts**, before the handler runs, so that
//!   a crash or a lost lease counts too (the side effect may have happened). The starts of the
//!   attempts that begin together share one commit, and the acks of external handlers that
//!   finish together share one transaction.
//! - A **transactional** attempt costs no write of its own: its count is read before the
//!   handler runs, a success deletes the message's attempt rows in the transaction that applies
//!   the effects and the ack (one commit per message), and a failure is recorded in the
//!   transaction that releases the message. An aborted transaction runs the handler again
//!   within the same attempt. An attempt whose process dies mid-transaction applied nothing
//!   and is not counted: the message is delivered again after its lease.
//!
//! An attempt fails when the handler returns an error, panics, exceeds
//! the [handler timeout](crate::worker::WorkerBuilder::with_handler_timeout), or loses its lease:
//!
//! | Failure | What the worker does |
//! |---|---|
//! | error, panic, timeout | releases the message (ack + re-send of the same payload with `DeliverTime = now + delay`, one transaction), the delay from the [`RedeliveryPolicy`]; after [`max_attempts`](crate::worker::WorkerBuilder::with_max_attempts) moves it to the dead-letter table instead |
//! | [`HandlerError::retry_after`](crate::worker::HandlerError::retry_after) | releases it with that delay (still counts as an attempt) |
//! | [`HandlerError::dead_letter`](crate::worker::HandlerError::dead_letter) | moves it to the dead-letter table at once |
//! | lease lost (external handler) | stops the handler and does nothing else: Spanner delivers the message again |
//! | lease lost (transactional handler) | lets it finish: its ack is in its transaction, which fails with `AlreadyAcked` if another consumer acked first |
//! | payload or key does not decode | moves it to the dead-letter table at once (counted in [`UNDECODABLE`](crate::telemetry::UNDECODABLE)) |
//! | counting the attempt fails for a permanent reason | moves it to the dead-letter table at once, with that reason (never an endless redelivery loop) |
//!
//! A move to the dead-letter table ([`tables::dead_letters`](crate::tables::dead_letters)) is
//! atomic (the ack and the dead-letter row commit together) and keeps the raw payload, the
//! attempt count and the error text; [`Database::dead_letters`](crate::Database::dead_letters)
//! lists, replays and purges them. A panic never stops the worker.
//!
//! If the move itself fails for a permanent reason (the dead-letter table refuses the row, or
//! it was dropped), the message is **parked**, not dropped: released with the redelivery
//! policy's [`max_delay`](crate::worker::RedeliveryPolicy::max_delay), with an ERROR line and
//! [`DEAD_LETTER_FAILED`](crate::telemetry::DEAD_LETTER_FAILED); each time it comes back the
//! worker tries the dead-letter table again (without running the handler once it had all its
//! attempts). Keys in log lines are shortened; payloads are never logged.
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
//!     db: &spanner_queues::Database,
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
//!         })
//!         .build()?;
//!     worker.run(shutdown).await
//! }
//! ```

mod attempt;
mod batch;
mod batch_attempt;
mod batch_handler;
mod builder;
mod handler;
mod ordered;
mod policy;
mod run;
mod store;
pub(crate) mod tables;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::ReadWriteTransaction;

use crate::message::QueueMessage;
use crate::queue::Queue;
use crate::receive::{ReceiverStats, ReceiverStatsHandle};

pub use batch_handler::{Batch, BatchOutcome};
use builder::Config;
pub use builder::{NoHandler, WithHandler, WorkerBuilder};
pub use handler::{HandlerContext, HandlerError, HandlerErrorKind, idempotency_key};
pub use ordered::{DeadLetterOrdering, OrderingPolicy};
pub use policy::RedeliveryPolicy;
pub use run::WorkerHandle;
pub use tables::{DeadLetter, DeadLetters, MAX_ERROR_TEXT, Purge};

type HandlerFuture =
    Pin<Box<dyn Future<Output = std::result::Result<(), HandlerError>> + Send + 'static>>;
type TransactionalFn<M> =
    dyn Fn(ReadWriteTransaction, Arc<M>, HandlerContext) -> HandlerFuture + Send + Sync;
type ExternalFn<M> = dyn Fn(Arc<M>, HandlerContext) -> HandlerFuture + Send + Sync;
type BatchFuture =
    Pin<Box<dyn Future<Output = std::result::Result<BatchOutcome, HandlerError>> + Send + 'static>>;
type TransactionalBatchFn<M> = dyn Fn(ReadWriteTransaction, Batch<M>) -> BatchFuture + Send + Sync;
type ExternalBatchFn<M> = dyn Fn(Batch<M>) -> BatchFuture + Send + Sync;

enum Handler<M> {
    Transactional(Arc<TransactionalFn<M>>),
    External(Arc<ExternalFn<M>>),
    TransactionalBatch(Arc<TransactionalBatchFn<M>>),
    ExternalBatch(Arc<ExternalBatchFn<M>>),
}

impl<M> Handler<M> {
    /// Whether it takes batches of messages.
    fn is_batch(&self) -> bool {
        matches!(self, Self::TransactionalBatch(_) | Self::ExternalBatch(_))
    }

    /// Whether it works outside Spanner (its attempts are recorded when they start).
    fn is_external(&self) -> bool {
        matches!(self, Self::External(_) | Self::ExternalBatch(_))
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
    /// Messages that could not be moved to the dead-letter table for a permanent reason and
    /// were parked instead (released with the redelivery policy's longest delay).
    pub parked: u64,
    /// Ordered queues: messages released to wait for an earlier message of their ordering key
    /// (an ack and a re-send in a read-write transaction; their handler did not run; not
    /// counted in `started`). Messages that wait in memory are not released: see `holding`.
    pub waited: u64,
    /// Ordered queues: received messages held in memory now, leased, waiting for an earlier
    /// message of their ordering key or for a handler slot.
    pub holding: usize,
    /// Ordered queues: read-only looks at the earlier messages of waiting ordering keys (one
    /// read-only transaction each, for every key due).
    pub order_looks: u64,
    /// Batch handlers: batches handed to the handler (a part of a failing batch run again
    /// after a split counts once more).
    pub batches: u64,
    /// Batch handlers: failing batches split in two to isolate the messages that fail.
    pub batch_splits: u64,
    /// Handlers running now (batches, for a batch handler).
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
    parked: AtomicU64,
    waited: AtomicU64,
    holding: AtomicUsize,
    order_looks: AtomicU64,
    batches: AtomicU64,
    batch_splits: AtomicU64,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

// Defined here, beside the state it shares, so that the builder (which makes one) and the run
// loop (its methods) need not import each other.
/// Runs a handler for every message of the queue of `M`; see the [module docs](crate::worker).
pub struct Worker<M: QueueMessage> {
    shared: Arc<Shared<M>>,
}

struct Shared<M> {
    /// The database the worker was built on.
    database: crate::database::Database,
    db: DatabaseClient,
    queue: Queue<M>,
    config: Config,
    handler: Handler<M>,
    counters: Counters,
    receiver: Mutex<Option<ReceiverStatsHandle>>,
}

/// Compile-time checks: everything a user may spawn is `Send`.
#[cfg(test)]
#[allow(dead_code)]
mod spawnable {
    use std::time::Duration;

    use super::*;
    use crate::database::Database;
    use crate::ident::QueueName;
    use crate::key::MessageKey;
    use crate::message::QueueMessage;
    use crate::receive::Delivery;

    fn worker_run<M: QueueMessage>(worker: Worker<M>) {
        tokio::spawn(async move { worker.run(async {}).await });
    }

    fn worker_handle<M: QueueMessage>(worker: Worker<M>) {
        tokio::spawn(async move { worker.spawn().shutdown().await });
    }

    fn delivery_methods<M: QueueMessage>(db: Database, a: Delivery<M>, b: Delivery<M>) {
        let db2 = db.clone();
        tokio::spawn(async move { db.ack(&a).await });
        tokio::spawn(async move { db2.release(&b, Duration::from_secs(1)).await });
    }

    fn sends<M: QueueMessage + Clone>(db: Database, message: M) {
        tokio::spawn(async move { db.send(&message).await });
    }

    fn transactions<M: QueueMessage + Clone>(db: Database, message: M, delivery: Delivery<M>) {
        tokio::spawn(async move {
            let (message, delivery) = (&message, &delivery);
            db.transaction()
                .run(move |tx| async move {
                    tx.send(message).await?;
                    tx.ack(delivery).await
                })
                .await
        });
    }

    fn dead_letters(dead: DeadLetters, queue: QueueName, key: MessageKey) {
        tokio::spawn(async move { dead.replay(&queue, &key).await });
    }
}
