//! Running a worker: the receive loop, shutdown, and the spawned handle.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt as _;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::ident::QueueName;
use crate::message::QueueMessage;
use crate::receive::{Delivery, Receiver, ReceiverStatsHandle};
use crate::telemetry;
use crate::util::lock;

use super::attempt::{process, release_unstarted};
use super::batch_attempt::process_batch;
use super::builder::WorkerBuilder;
use super::builder::{Config, validate_for};
use super::ordered::{Running, RunningGuard};
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
        // The worker's tables and the queue are checked in one read of the information schema.
        // Fail fast on a queue that is missing or does not fit `M`, or on a handle whose
        // dialect is not the database's; a check that cannot run (a transient error) is left
        // to the receiver, which retries.
        let queue_checked = tables::check_start::<M>(&shared.db, shared.queue.dialect()).await?;
        let mut receive = config
            .receive
            .clone()
            .with_max_in_flight(config.concurrency * config.per_handler() + config.prefetch());
        // Batch handlers: one `RECEIVE` batch per worker batch, unless set (a call then leases
        // about what the next batch takes, not every free slot at once).
        if config.batch && receive.batch_size().is_none() {
            receive = receive.with_batch_size(u32::try_from(config.batch_size).unwrap_or(u32::MAX));
        }
        let mut receiver = Receiver::<M>::builder(&shared.database)
            .with_receive_settings(receive)
            .with_transaction_settings(config.transaction.clone())
            .queue_checked(queue_checked)
            .build()?;
        *lock(&shared.receiver) = Some(receiver.stats_handle());
        let slots = Arc::new(Semaphore::new(config.concurrency));
        let store = Arc::new(SpannerStore::spawn(
            &shared.db,
            &shared.queue,
            &config.transaction,
        ));
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
        let low_water = count_ahead_low_water(config.concurrency);
        let mut waiting: VecDeque<(Delivery<M>, Option<Prefetched>)> = VecDeque::new();
        // Ordered queues: the ordering keys with a message running here. A message whose key
        // has one waits here, and the lowest sequence of a key goes first.
        let running = Running::default();
        loop {
            while let Some(joined) = tasks.try_join_next() {
                report_join(joined);
            }
            let next = if M::ORDERED {
                running.pick(waiting.iter().map(|(delivery, _)| delivery.key()))
            } else {
                (!waiting.is_empty()).then_some(0)
            };
            // Batch handlers: a batch starts once it is full or its first message has waited
            // the linger; until then the worker waits for more messages, or the linger.
            let (batch_now, linger_until) = match (batching, next) {
                (true, Some(_)) => {
                    let oldest = waiting.iter().map(|(d, _)| d.received_at()).min();
                    match batch_start(
                        waiting.len(),
                        oldest,
                        config.batch_size,
                        config.batch_linger,
                    ) {
                        BatchStart::Now => (true, None),
                        BatchStart::At(at) => (false, Some(at)),
                    }
                }
                _ => (false, None),
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
                    let (members, guards) = take_batch(
                        &mut waiting,
                        config.batch_size,
                        M::ORDERED.then_some(&running),
                    );
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
                    let Some((delivery, count)) = next.and_then(|i| waiting.remove(i)) else {
                        continue;
                    };
                    if read_ahead {
                        count_ahead(&mut waiting, &*store, low_water);
                    }
                    let guard = M::ORDERED.then(|| running.enter(delivery.key()));
                    let work = process(
                        Arc::clone(shared),
                        Arc::clone(&store),
                        delivery,
                        count,
                        slot,
                        abort.clone(),
                    );
                    tasks.spawn(async move {
                        let _running = guard;
                        work.await;
                    });
                }
                // Ordered queues: a finished message may let a waiting one of its key start.
                Some(joined) = tasks.join_next(), if M::ORDERED && !tasks.is_empty() => {
                    report_join(joined);
                }
                item = receiver.next() => match item {
                    None => break,
                    Some(Err(error)) => {
                        tracing::warn!(
                            queue = %M::QUEUE,
                            error = %telemetry::ErrorChain(&error),
                            "receive error; the receiver retries"
                        );
                    }
                    Some(Ok(delivery)) => {
                        waiting.push_back((delivery, None));
                        if read_ahead {
                            count_ahead(&mut waiting, &*store, low_water);
                        }
                    }
                },
            }
        }

        // Shutdown: stop receiving; release what was received but not started.
        tracing::info!(queue = %M::QUEUE, running = tasks.len(), "worker shutting down");
        receiver.close();
        for (delivery, _) in waiting {
            let (shared, store) = (Arc::clone(shared), Arc::clone(&store));
            tasks.spawn(async move {
                release_unstarted(&shared, &*store, delivery).await;
            });
        }
        while let Some(item) = receiver.next().await {
            if let Ok(delivery) = item {
                let (shared, store) = (Arc::clone(shared), Arc::clone(&store));
                tasks.spawn(async move {
                    release_unstarted(&shared, &*store, delivery).await;
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
/// (a message delivered again while its first delivery waits stays for a later batch). Ordered
/// queues (`running`): one message per ordering key, the lowest sequence of each key whose
/// ordering key has no message running, each key marked as running until its guard drops.
fn take_batch<M: QueueMessage>(
    waiting: &mut VecDeque<(Delivery<M>, Option<Prefetched>)>,
    size: usize,
    running: Option<&Running>,
) -> (Vec<(Delivery<M>, Option<Prefetched>)>, Vec<RunningGuard>) {
    let mut batch = Vec::with_capacity(size.min(waiting.len()));
    let mut guards = Vec::new();
    match running {
        Some(running) => {
            while batch.len() < size {
                let Some(at) = running.pick(waiting.iter().map(|(d, _)| d.key())) else {
                    break;
                };
                let Some(entry) = waiting.remove(at) else {
                    break;
                };
                guards.push(running.enter(entry.0.key()));
                batch.push(entry);
            }
        }
        None => {
            let mut keys = std::collections::HashSet::new();
            let mut kept = VecDeque::new();
            while batch.len() < size {
                let Some(entry) = waiting.pop_front() else {
                    break;
                };
                if keys.insert(entry.0.key().clone()) {
                    batch.push(entry);
                } else {
                    kept.push_back(entry);
                }
            }
            while let Some(entry) = kept.pop_back() {
                waiting.push_front(entry);
            }
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

    use super::{BatchStart, batch_start, count_ahead_low_water};

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
