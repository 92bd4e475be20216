//! Running a worker: the receive loop, shutdown, and the spawned handle.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures::{FutureExt as _, StreamExt as _};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::queue::DeliverAt;
use crate::receive::{Delivery, Receiver, ReceiverStatsHandle};
use crate::telemetry;
use crate::util::lock;

use super::attempt::{process, release_unstarted};
use super::batch_attempt::{BatchMember, process_batch};
use super::builder::WorkerBuilder;
use super::builder::{Config, validate_for};
use super::ordered::{
    Clearance, Entry, Floors, Holding, Look, Pick, Release, Running, RunningGuard, look_back,
};
use super::store::{Prefetched, SpannerStore, Store};
use super::{Handler, Shared, Worker, WorkerStats, tables};

impl<M: QueueMessage> Worker<M> {
    /// A builder for a worker of the queue of `M` in `db`, with default settings (its
    /// transactions use the database's
    /// [`transaction_settings`](crate::Database::transaction_settings)).
    pub fn builder(db: &crate::database::Database) -> WorkerBuilder<M> {
        WorkerBuilder {
            db: db.clone(),
            config: Config {
                transaction: db.transaction_settings().clone(),
                ..Config::default()
            },
            handler: super::builder::NoHandler,
            _message: std::marker::PhantomData,
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
    /// async fn serve(db: &spanner_queues::Database) -> spanner_queues::Result<()> {
    ///     let worker = Worker::<OrderEmail>::builder(db)
    ///         .external(|email, _ctx| async move {
    ///             let _ = email.subject.len(); // … send the e-mail …
    ///             Ok::<(), HandlerError>(())
    ///         })
    ///         .build()?
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

    /// Shuts the worker down gracefully (see the [module docs](crate::worker#shutdown)), waits until
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
        parked: c.parked.load(Ordering::Relaxed),
        waited: c.waited.load(Ordering::Relaxed),
        holding: c.holding.load(Ordering::Relaxed),
        order_looks: c.order_looks.load(Ordering::Relaxed),
        batches: c.batches.load(Ordering::Relaxed),
        batch_splits: c.batch_splits.load(Ordering::Relaxed),
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
    /// (see the [module docs](crate::worker#shutdown)) and returns.
    ///
    /// Receive errors are logged and retried with backoff; they do not end the run.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) for settings out of range,
    /// [`Error::InvalidSchema`](crate::Error::InvalidSchema) when the worker's tables
    /// ([`SchemaSetup::with_worker_tables`](crate::SchemaSetup::with_worker_tables)) are missing,
    /// [`Error::QueueNotFound`](crate::Error::QueueNotFound) /
    /// [`Error::SchemaDrift`](crate::Error::SchemaDrift) when the queue is missing or does not
    /// fit `M`. Nothing was received.
    ///
    /// # Cancellation
    /// Complete `shutdown` to stop a worker: dropping the future of `run` instead skips the
    /// graceful shutdown. Running handlers are dropped at their next `await`, nothing is
    /// released, and commits already sent may still apply. No message is lost: Spanner
    /// delivers every message that was not acked again when its lease lapses (renewal stops
    /// with the worker).
    pub async fn run<S>(&self, shutdown: S) -> Result<()>
    where
        S: Future<Output = ()> + Send,
    {
        let shared = &self.shared;
        let config = &shared.config;
        validate_for::<M>(config)?;
        // The worker's tables and the queue are checked in one read of the information schema,
        // beside the first `RECEIVE`: it is a strong query, which can wait its turn on a busy
        // database, and the first batch need not wait for it as well. No handler starts before
        // it passes. Fail fast on a queue that is missing or does not fit `M`, or on a handle
        // whose dialect is not the database's, releasing what was received by then. A check
        // that cannot run (a transient error) is tried once more before the handlers start;
        // if that fails too, the worker goes on (a missing queue then shows as the receiver's
        // errors).
        let check = tables::check_start::<M>(&shared.db, shared.queue.dialect());
        // Ordered queues: the messages that wait for an earlier one of their key stay leased
        // here too (at most `max_held` of them), beside the handlers' and the prefetch's slots.
        let held = if M::ORDERED {
            config.ordering.max_held()
        } else {
            0
        };
        let slots_in_flight = config.concurrency * config.per_handler() + config.prefetch() + held;
        let mut receiver = Receiver::<M>::builder(&shared.database)
            .with_receive_settings(receive_settings(config, slots_in_flight))
            .with_transaction_settings(config.transaction.clone())
            .queue_checked(true)
            .build()?;
        *lock(&shared.receiver) = Some(receiver.stats_handle());
        let slots = Arc::new(Semaphore::new(config.concurrency));
        let floors = Arc::new(Floors::default());
        let store = Arc::new(SpannerStore::spawn(
            &shared.db,
            &shared.queue,
            &config.transaction,
            Arc::clone(&floors),
        ));
        let checked = match check.await {
            Ok(true) => Ok(true),
            Ok(false) => tables::check_start::<M>(&shared.db, shared.queue.dialect()).await,
            Err(error) => Err(error),
        };
        if let Err(error) = checked {
            for chunk in close_and_collect(&mut receiver, Vec::new()).await {
                release_unstarted(shared, &*store, chunk).await;
            }
            return Err(error);
        }
        let abort = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tokio::pin!(shutdown);
        tracing::info!(queue = %M::QUEUE, concurrency = config.concurrency, "worker started");
        // Deliveries waiting for a handler slot. The attempt counts of transactional
        // attempts are read ahead, in rounds (see `count_ahead`), so that a handler slot that
        // frees up starts the next handler at once instead of waiting for that read. The
        // receiver bounds how many deliveries are alive, so this queue is bounded too.
        // External attempts are started (their rows written) only once a slot is free: a row
        // written for a handler that never ran would count as an attempt.
        // (A transactional batch reads its attempts in its own transaction.)
        let read_ahead = matches!(shared.handler, Handler::Transactional(_));
        let batching = shared.handler.is_batch();
        // Ordered queues: a transactional batch may take a key's next messages right after its
        // lowest (they commit together, in order); an external batch takes one per key.
        let following = matches!(shared.handler, Handler::TransactionalBatch(_));
        // Ordered queues: as many messages as the handlers take at once (see the looks below).
        let enough = config.concurrency * config.per_handler();
        let low_water = count_ahead_low_water(config.concurrency);
        let mut waiting: VecDeque<(Delivery<M>, Option<Prefetched>)> = VecDeque::new();
        // Ordered queues: the messages received and not started, by ordering key (see
        // `Holding`), the ordering keys with a message running here, and the read-only look
        // at the earlier messages of the keys whose messages wait, when one is on its way.
        let running = Running::default();
        let mut holding: Holding<Delivery<M>> = Holding::new(
            config.ordering.clone(),
            floors,
            running.clone(),
            slots_in_flight,
        );
        let mut look: Option<LookFuture> = None;
        let mut last_look: Option<Instant> = None;
        let mut last_prune: Option<Instant> = None;
        loop {
            while let Some(joined) = tasks.try_join_next() {
                report_join(joined);
            }
            let mut look_at = None;
            if M::ORDERED {
                let releases = holding.overflow(Instant::now());
                if !releases.is_empty() {
                    tracing::info!(
                        queue = %M::QUEUE,
                        released = releases.len(),
                        "stuck: every slot holds a message that waits; releasing those furthest behind"
                    );
                    spawn_release_waiting(&mut tasks, shared, &store, releases);
                }
                let now = Instant::now();
                if last_prune.is_none_or(|at| now >= at + config.ordering.recheck_delay()) {
                    last_prune = Some(now);
                    holding.drop_lost();
                }
                // One look at a time, one per recheck delay at most, and none while the worker
                // has as many messages that may run as handlers: a look could only find work
                // that would wait for a handler (a finished one brings the loop back here).
                let earliest = last_look.map_or(now, |at| at + config.ordering.recheck_delay());
                let runnable = if batching {
                    holding.batchable(following).0
                } else {
                    holding.runnable()
                };
                if look.is_some() || runnable >= enough {
                } else if now < earliest {
                    look_at = holding.next_look_at(now).map(|at| at.max(earliest));
                } else {
                    let due = holding.due_looks(now);
                    if due.is_empty() {
                        look_at = holding.next_look_at(now);
                    } else {
                        last_look = Some(now);
                        look = Some(start_look::<M>(shared, due));
                    }
                }
                if read_ahead {
                    count_ahead_held(&mut holding, &*store, low_water);
                }
                look_at = [look_at, holding.stuck_at()].into_iter().flatten().min();
            }
            let next = if M::ORDERED {
                holding.next().map(Next::Held)
            } else {
                (!waiting.is_empty()).then_some(Next::Waiting)
            };
            // Batch handlers: a batch starts once it is full or its first message has waited
            // the linger; until then the worker waits for more messages, or the linger.
            let (batch_now, linger_until) = if batching && next.is_some() {
                let (count, oldest) = if M::ORDERED {
                    holding.batchable(following)
                } else {
                    (
                        waiting.len(),
                        waiting.iter().map(|(d, _)| d.received_at()).min(),
                    )
                };
                // Unordered batches: while another batch of this worker runs, one that is not
                // full waits up to `BUSY_LINGERS` lingers for more (the next `RECEIVE` rows
                // usually arrive as the running batch commits), instead of committing a few
                // messages for the price of a full batch. A batch ending wakes the loop.
                let busy = !M::ORDERED && slots.available_permits() < config.concurrency;
                let linger = if busy {
                    config.batch_linger.saturating_mul(BUSY_LINGERS)
                } else {
                    config.batch_linger
                };
                match batch_start(count, oldest, config.batch_size, linger) {
                    BatchStart::Now => (true, None),
                    BatchStart::At(at) => (false, Some(at)),
                }
            } else {
                (false, None)
            };
            let lingering = linger_until.is_some();
            let linger_until = tokio::time::Instant::from_std(
                linger_until.unwrap_or_else(|| std::time::Instant::now() + LINGER_IDLE),
            );
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                slot = Arc::clone(&slots).acquire_owned(), if batch_now => {
                    let Ok(slot) = slot else { break };
                    let (members, guards) = if M::ORDERED {
                        take_held_batch(&mut holding, config.batch_size, following, &running)
                    } else {
                        (take_batch(&mut waiting, config.batch_size), Vec::new())
                    };
                    if members.is_empty() {
                        continue;
                    }
                    if read_ahead {
                        count_ahead(&mut waiting, &*store, low_water);
                    }
                    let work = process_batch(
                        Arc::clone(shared),
                        Arc::clone(&store),
                        members,
                        slot,
                        abort.clone(),
                    );
                    tasks.spawn(async move {
                        let _running = guards;
                        work.await;
                    });
                }
                () = tokio::time::sleep_until(linger_until), if lingering => {}
                slot = Arc::clone(&slots).acquire_owned(), if next.is_some() && !batching => {
                    let Ok(slot) = slot else { break };
                    let (delivery, count, clearance) = match &next {
                        Some(Next::Held(pick)) => match holding.take(pick) {
                            Some((entry, clearance)) => (entry.delivery, entry.count, clearance),
                            None => continue,
                        },
                        _ => match waiting.pop_front() {
                            Some((delivery, count)) => (delivery, count, Clearance::Clear),
                            None => continue,
                        },
                    };
                    if read_ahead && !M::ORDERED {
                        count_ahead(&mut waiting, &*store, low_water);
                    }
                    let guard = M::ORDERED.then(|| running.enter(delivery.key()));
                    let work = process(
                        Arc::clone(shared),
                        Arc::clone(&store),
                        delivery,
                        count,
                        clearance,
                        slot,
                        abort.clone(),
                    );
                    tasks.spawn(async move {
                        let _running = guard;
                        work.await;
                    });
                }
                // Ordered queues: a look came back.
                looked = async { look.as_mut().expect("guarded").await }, if look.is_some() => {
                    look = None;
                    shared.counters.order_looks.fetch_add(1, Ordering::Relaxed);
                    tracing::trace!(
                        queue = %M::QUEUE,
                        keys = looked.len(),
                        unanswered = looked.iter().filter(|(_, _, look)| look.is_none()).count(),
                        clear = looked
                            .iter()
                            .filter(|(_, _, look)| look.is_some_and(|l| l.queue.lowest.is_none() && l.dead.is_none()))
                            .count(),
                        holding = holding.len(),
                        "looked at waiting ordering keys"
                    );
                    let releases = holding.looked(looked, Instant::now());
                    if !releases.is_empty() {
                        spawn_release_waiting(&mut tasks, shared, &store, releases);
                    }
                }
                // Ordered queues: a key is due to be looked at again, or the worker to release
                // messages if it is still stuck.
                () = sleep_until(look_at), if look_at.is_some() => {}
                // Ordered queues: a finished message may let a waiting one of its key start.
                // Batch handlers: a batch ended; a lingering one may start now.
                Some(joined) = tasks.join_next(), if (M::ORDERED || batching) && !tasks.is_empty() => {
                    report_join(joined);
                }
                item = receiver.next() => match item {
                    None => break,
                    Some(Err(error)) => warn_receive_error::<M>(&error),
                    Some(Ok(delivery)) => {
                        if M::ORDERED {
                            holding.push(delivery);
                        } else {
                            waiting.push_back((delivery, None));
                            if read_ahead {
                                count_ahead(&mut waiting, &*store, low_water);
                            }
                            if batching {
                                // With it, whatever else the receiver already has (a `RECEIVE`
                                // batch arrives at once): one turn of the loop for a batch, not
                                // one per message. Unordered batches only: the full benchmark
                                // measured the shallow ordering ratios lower with this on for
                                // every worker (0.69 / 0.74 against 0.98 / 0.97), unexplained.
                                while waiting.len() < slots_in_flight {
                                    match receiver.next().now_or_never() {
                                        Some(Some(Ok(more))) => waiting.push_back((more, None)),
                                        Some(Some(Err(error))) => {
                                            warn_receive_error::<M>(&error);
                                        }
                                        // Not ready, or the end (the next turn sees it).
                                        Some(None) | None => break,
                                    }
                                }
                            }
                        }
                    }
                },
            }
            shared
                .counters
                .holding
                .store(holding.len(), Ordering::Relaxed);
        }

        // Shutdown: stop receiving; release what was received but not started.
        tracing::info!(queue = %M::QUEUE, running = tasks.len(), "worker shutting down");
        let mut unstarted: Vec<Delivery<M>> = waiting.into_iter().map(|(d, _)| d).collect();
        unstarted.extend(holding.drain());
        shared.counters.holding.store(0, Ordering::Relaxed);
        for chunk in close_and_collect(&mut receiver, unstarted).await {
            let (shared, store) = (Arc::clone(shared), Arc::clone(&store));
            tasks.spawn(async move {
                release_unstarted(&shared, &*store, chunk).await;
            });
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
            let budget = config.transaction.total_timeout() + tables::SHUTDOWN_RELEASE_BUDGET;
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

/// What the worker starts next: a held message of an ordered queue, or the first waiting
/// delivery.
enum Next {
    Held(Pick),
    Waiting,
}

/// Ordered queues: a read-only look on its way, answering each key with its sequence and what
/// was found (`None`: the look failed; the keys are looked at again after the recheck delay).
type LookFuture = Pin<Box<dyn Future<Output = Vec<(MessageKey, i64, Option<Look>)>> + Send>>;

/// Releases in one transaction at most (the waits of an ordered queue, and shutdown's).
const RELEASE_CHUNK: usize = 50;
/// Shutdown (or a failed start-up check) releases the deliveries it never started in
/// transactions of this many at most.
const SHUTDOWN_RELEASE_CHUNK: usize = RELEASE_CHUNK;

/// The worker's receiver settings: the configured ones, holding `slots_in_flight` deliveries.
///
/// Batch handlers, unless set: a `RECEIVE` batch holds a batch for every handler
/// (`concurrency` of them), not every free slot at once. With one batch per `RECEIVE` batch,
/// the next batch was received only once the previous one had committed; with one per
/// handler it is here when a batch commits. Measured on the embedded emulator (which sends
/// more rows once at most half of a call's batch is unsettled): 0.93-0.94 of the hand-written
/// consumer's rate against 0.77-0.92 with one, when the batch comparison ran alone. It needs
/// the busy linger of the run loop (`BUSY_LINGERS`): without it, after the other consume
/// comparisons, PostgreSQL batches came out at 75 messages on average. How Cloud Spanner paces
/// a call's batches is not documented.
fn receive_settings(config: &Config, slots_in_flight: usize) -> crate::ReceiveSettings {
    let receive = config.receive.clone().with_max_in_flight(slots_in_flight);
    if config.batch && receive.batch_size().is_none() {
        let rows = config.batch_size.saturating_mul(config.concurrency);
        let rows = u32::try_from(rows)
            .unwrap_or(u32::MAX)
            .min(*crate::receive::settings::BATCH_SIZE.end());
        receive.with_batch_size(rows)
    } else {
        receive
    }
}

/// Closes `receiver` and collects what it still yields after `unstarted`: every delivery the
/// worker holds and will not start, in chunks of at most [`SHUTDOWN_RELEASE_CHUNK`], each for
/// one release transaction.
async fn close_and_collect<M: QueueMessage>(
    receiver: &mut Receiver<M>,
    mut unstarted: Vec<Delivery<M>>,
) -> Vec<Vec<Delivery<M>>> {
    receiver.close();
    while let Some(item) = receiver.next().await {
        if let Ok(delivery) = item {
            unstarted.push(delivery);
        }
    }
    in_chunks(unstarted, SHUTDOWN_RELEASE_CHUNK)
}

/// `items` in order, in chunks of at most `size` (one release transaction each).
fn in_chunks<T>(items: Vec<T>, size: usize) -> Vec<Vec<T>> {
    let mut chunks = Vec::with_capacity(items.len().div_ceil(size));
    let mut rest = items.into_iter().peekable();
    while rest.peek().is_some() {
        chunks.push(rest.by_ref().take(size).collect());
    }
    chunks
}

/// Logs an error the receiver handed out (it keeps receiving).
fn warn_receive_error<M: QueueMessage>(error: &crate::Error) {
    tracing::warn!(
        queue = %M::QUEUE,
        error = %telemetry::ErrorChain(error),
        "receive error; the receiver retries"
    );
}

/// Starts a look at the earlier messages of `due` (ordering keys with their lowest waiting
/// sequence) in a read-only transaction.
fn start_look<M: QueueMessage>(shared: &Shared<M>, due: Vec<(MessageKey, i64)>) -> LookFuture {
    let (db, dialect) = (shared.db.clone(), shared.queue.dialect());
    let patience = look_patience(shared.config.ordering.recheck_delay());
    Box::pin(async move {
        let found = match tokio::time::timeout(patience, look_back::<M>(&db, dialect, &due)).await {
            Ok(found) => found,
            Err(_) => Err(crate::error::Error::Precondition {
                reason: format!("the look took longer than {patience:?}"),
            }),
        };
        match found {
            Ok(looks) => due
                .into_iter()
                .zip(looks)
                .map(|((key, sequence), look)| (key, sequence, look))
                .collect(),
            Err(error) => {
                tracing::warn!(
                    queue = %M::QUEUE,
                    keys = due.len(),
                    error = %telemetry::ErrorChain(&error),
                    "could not look at the earlier messages of waiting ordering keys; looking again"
                );
                due.into_iter()
                    .map(|(key, sequence)| (key, sequence, None))
                    .collect()
            }
        }
    })
}

/// How long a look may take before the worker gives up on it and looks again with a fresh
/// timestamp: ten recheck delays, from 2 s to 1 minute.
fn look_patience(recheck_delay: std::time::Duration) -> std::time::Duration {
    (recheck_delay * 10).clamp(
        std::time::Duration::from_secs(2),
        std::time::Duration::from_secs(60),
    )
}

/// Resolves at `at`; never when `at` is `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// Ordered queues: releases messages that must wait elsewhere (see `Holding`), in transactions
/// of up to [`RELEASE_CHUNK`] messages, on the worker's tasks. Each delivery (its lease) lives
/// until its release is done.
fn spawn_release_waiting<M: QueueMessage>(
    tasks: &mut JoinSet<()>,
    shared: &Arc<Shared<M>>,
    store: &Arc<SpannerStore<M>>,
    releases: Vec<(Delivery<M>, DeliverAt)>,
) {
    for chunk in in_chunks(releases, RELEASE_CHUNK) {
        let (shared, store) = (Arc::clone(shared), Arc::clone(store));
        tasks.spawn(async move {
            let wanted = chunk
                .iter()
                .map(|(delivery, at)| Release {
                    key: delivery.key().clone(),
                    payload: delivery.payload().clone(),
                    at: *at,
                })
                .collect();
            match store.release_waiting(wanted).await {
                Ok(released) => {
                    let counters = &shared.counters;
                    counters
                        .waited
                        .fetch_add(released as u64, Ordering::Relaxed);
                    metrics::counter!(
                        telemetry::PROCESSED,
                        "queue" => M::QUEUE.as_str().to_owned(),
                        "outcome" => "waited"
                    )
                    .increment(released as u64);
                    tracing::debug!(
                        queue = %M::QUEUE,
                        released,
                        "released messages to wait for earlier ones of their ordering keys"
                    );
                }
                Err(error) => tracing::warn!(
                    queue = %M::QUEUE,
                    messages = chunk.len(),
                    error = %telemetry::ErrorChain(&error),
                    "could not release waiting messages; they are delivered again when their leases lapse"
                ),
            }
            drop(chunk);
        });
    }
}

/// [`count_ahead`] for an ordered queue: the counts of the held messages that may run now or
/// right after the one before them (see [`Holding::soon_mut`]).
fn count_ahead_held<M: QueueMessage, S: Store<M>>(
    holding: &mut Holding<Delivery<M>>,
    store: &S,
    low_water: usize,
) {
    let soon: Vec<&mut Entry<Delivery<M>>> = holding.soon_mut().collect();
    if soon.iter().filter(|e| e.count.is_some()).count() >= low_water {
        return;
    }
    for entry in soon {
        if entry.count.is_none() && entry.delivery.message().is_ok() {
            entry.count = store.request_start(entry.delivery.key(), false);
        }
    }
}

/// How many waiting deliveries keep their attempt counts read (or being read) ahead of the
/// handlers: half the concurrency, at least one.
fn count_ahead_low_water(concurrency: usize) -> usize {
    concurrency.div_ceil(2).max(1)
}

/// Reads the attempt counts of waiting deliveries ahead of their handlers, in rounds: once
/// fewer than `low_water` waiting deliveries have a count read or on its way, the counts of
/// every other waiting delivery are asked for together, and the store reads them in one read.
/// So with a backlog one read counts a whole round of deliveries (about the prefetch), while
/// the handlers still find their counts ready; on an idle queue a delivery's count is read
/// as soon as it arrives. Undecodable deliveries are never counted (they are dead-lettered).
fn count_ahead<M: QueueMessage, S: Store<M>>(
    waiting: &mut VecDeque<(Delivery<M>, Option<Prefetched>)>,
    store: &S,
    low_water: usize,
) {
    let ahead = waiting.iter().filter(|(_, count)| count.is_some()).count();
    if ahead >= low_water {
        return;
    }
    for (delivery, count) in waiting.iter_mut() {
        if count.is_none() && delivery.message().is_ok() {
            *count = store.request_start(delivery.key(), false);
        }
    }
}

/// When a batch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchStart {
    Now,
    /// Unless more messages arrive first.
    At(std::time::Instant),
}

/// Unordered batches: how many lingers a batch that is not full waits while another batch of
/// the worker runs.
const BUSY_LINGERS: u32 = 10;

/// How long the run loop sleeps when no batch lingers (any wake-up rechecks).
const LINGER_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

/// When a batch of the `waiting` messages (the oldest received at `oldest`) starts: now if it is
/// full or the oldest has waited `linger`, else when it will have.
fn batch_start(
    waiting: usize,
    oldest: Option<std::time::Instant>,
    size: usize,
    linger: std::time::Duration,
) -> BatchStart {
    match oldest {
        Some(oldest) if waiting < size => {
            let at = oldest + linger;
            if at <= std::time::Instant::now() {
                BatchStart::Now
            } else {
                BatchStart::At(at)
            }
        }
        _ => BatchStart::Now,
    }
}

/// Takes the next batch out of `waiting`: up to `size` deliveries in arrival order, one per key
/// (a message delivered again while its first delivery waits stays for a later batch).
fn take_batch<M: QueueMessage>(
    waiting: &mut VecDeque<(Delivery<M>, Option<Prefetched>)>,
    size: usize,
) -> Vec<BatchMember<M>> {
    let mut batch = Vec::with_capacity(size.min(waiting.len()));
    let mut keys = std::collections::HashSet::new();
    let mut kept = VecDeque::new();
    while batch.len() < size {
        let Some((delivery, count)) = waiting.pop_front() else {
            break;
        };
        if keys.insert(delivery.key().clone()) {
            batch.push(BatchMember {
                delivery,
                count,
                clearance: Clearance::Clear,
                after: None,
            });
        } else {
            kept.push_back((delivery, count));
        }
    }
    while let Some(entry) = kept.pop_back() {
        waiting.push_front(entry);
    }
    batch
}

/// Ordered queues: takes the next batch out of `holding`, up to `size` messages: the messages
/// that may run now (see [`Holding::next`]), each key's lowest first, each key marked as
/// running until its guard drops; with `following`, each followed by the messages of its key
/// right after it in sequence (`after` names the one before it in the batch: it runs only if
/// that one is acked with it). Never a message past a waiting earlier one of its key.
fn take_held_batch<M: QueueMessage>(
    holding: &mut Holding<Delivery<M>>,
    size: usize,
    following: bool,
    running: &Running,
) -> (Vec<BatchMember<M>>, Vec<RunningGuard>) {
    let mut batch: Vec<BatchMember<M>> = Vec::new();
    let mut guards = Vec::new();
    while batch.len() < size {
        let Some(pick) = holding.next() else {
            break;
        };
        let Some((entry, clearance)) = holding.take(&pick) else {
            break;
        };
        guards.push(running.enter(entry.delivery.key()));
        let chain = match &pick {
            Pick::Key(ordering_key, _) if following => crate::ordering::split(entry.delivery.key())
                .map(|(_, sequence)| (ordering_key.clone(), sequence)),
            _ => None,
        };
        batch.push(BatchMember {
            delivery: entry.delivery,
            count: entry.count,
            clearance,
            after: None,
        });
        let Some((ordering_key, mut sequence)) = chain else {
            continue;
        };
        while batch.len() < size {
            let Some(next) = holding.take_following(&ordering_key, sequence) else {
                break;
            };
            sequence += 1;
            let after = Some(batch.len() - 1);
            batch.push(BatchMember {
                delivery: next.delivery,
                count: next.count,
                clearance: Clearance::Clear,
                after,
            });
        }
    }
    (batch, guards)
}

fn report_join(joined: std::result::Result<(), tokio::task::JoinError>) {
    if let Err(error) = joined
        && error.is_panic()
    {
        // Handler panics are caught inside the task; this is a bug in the worker itself.
        tracing::error!(error = %error, "worker task panicked");
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{
        BatchStart, Config, batch_start, count_ahead_low_water, in_chunks, receive_settings,
    };
    use crate::ReceiveSettings;

    #[test]
    fn releases_go_in_chunks_in_order() {
        let chunks = in_chunks((0..101).collect::<Vec<u32>>(), 50);
        let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![50, 50, 1]);
        assert_eq!(chunks.concat(), (0..101).collect::<Vec<u32>>());
        assert!(in_chunks(Vec::<u32>::new(), 50).is_empty());
    }

    #[test]
    fn a_batch_workers_receive_calls_ask_for_its_batches_unless_set() {
        let batch = |concurrency: usize, batch_size: usize, receive: ReceiveSettings| Config {
            batch: true,
            concurrency,
            batch_size,
            receive,
            ..Config::default()
        };
        let asked = |config: &Config| receive_settings(config, 1_000).batch_size();
        assert_eq!(asked(&batch(2, 100, ReceiveSettings::default())), Some(200));
        assert_eq!(asked(&batch(1, 7, ReceiveSettings::default())), Some(7));
        // Never past what a call may ask for.
        assert_eq!(
            asked(&batch(100, 5_000, ReceiveSettings::default())),
            Some(100_000)
        );
        // Set by the user: kept.
        assert_eq!(
            asked(&batch(
                2,
                100,
                ReceiveSettings::default().with_batch_size(30)
            )),
            Some(30)
        );
        // Single-message handlers leave it to Spanner (a call asks for its free slots).
        let single = Config {
            concurrency: 4,
            ..Config::default()
        };
        assert_eq!(asked(&single), None);
        assert_eq!(receive_settings(&single, 1_000).max_in_flight(), 1_000);
    }

    #[test]
    fn a_batch_starts_full_or_after_its_linger() {
        let linger = Duration::from_secs(60);
        let now = Instant::now();
        // Full: at once, however young.
        assert_eq!(batch_start(10, Some(now), 10, linger), BatchStart::Now);
        assert_eq!(batch_start(12, Some(now), 10, linger), BatchStart::Now);
        // Not full: when the oldest has waited the linger.
        assert_eq!(
            batch_start(3, Some(now), 10, linger),
            BatchStart::At(now + linger)
        );
        let old = now
            .checked_sub(Duration::from_secs(61))
            .expect("a minute ago");
        assert_eq!(batch_start(3, Some(old), 10, linger), BatchStart::Now);
        // No linger: what is there starts.
        assert_eq!(
            batch_start(1, Some(now), 10, Duration::ZERO),
            BatchStart::Now
        );
    }

    #[test]
    fn half_the_handlers_keep_their_counts_read_ahead_and_always_one() {
        assert_eq!(count_ahead_low_water(1), 1);
        assert_eq!(count_ahead_low_water(2), 1);
        assert_eq!(count_ahead_low_water(3), 2);
        assert_eq!(count_ahead_low_water(8), 4);
    }
}
