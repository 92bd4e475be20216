//! Building a worker: its settings and their validation.

use std::fmt;
use std::future::Future;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::bounds;
use crate::database::Database;
use crate::error::{Error, Result};
use crate::message::QueueMessage;
use crate::queue::Queue;
use crate::receive::ReceiveSettings;
use crate::transaction::{Transaction, TransactionSettings};

use super::batch_handler::{Batch, BatchOutcome};
use super::handler::{HandlerContext, HandlerError};
use super::ordered::OrderingPolicy;
use super::policy::RedeliveryPolicy;
use super::{
    Counters, ExternalBatchFn, ExternalFn, Handler, Shared, TransactionalBatchFn, TransactionalFn,
    Worker,
};

#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) concurrency: usize,
    /// `None`: the default, [`Config::prefetch`].
    pub(super) prefetch: Option<usize>,
    pub(super) max_attempts: u32,
    pub(super) handler_timeout: Duration,
    pub(super) shutdown_grace: Duration,
    pub(super) redelivery: RedeliveryPolicy,
    pub(super) transaction: TransactionSettings,
    pub(super) receive: ReceiveSettings,
    pub(super) ordering: OrderingPolicy,
    /// Whether `with_ordering` was called (refused for a message type that is not ordered).
    pub(super) ordering_set: bool,
    /// Whether `with_concurrency` was called (a batch handler's default is lower).
    pub(super) concurrency_set: bool,
    /// Batch handlers: the most messages per batch.
    pub(super) batch_size: usize,
    /// Batch handlers: how long a batch that is not full may wait for more messages.
    pub(super) batch_linger: Duration,
    /// The batch setting set last (`with_batch_size`, `with_batch_linger`), refused without a
    /// batch handler.
    pub(super) batch_set: Option<&'static str>,
    /// Whether the handler takes batches.
    pub(super) batch: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            concurrency: 8,
            prefetch: None,
            max_attempts: 10,
            handler_timeout: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(30),
            redelivery: RedeliveryPolicy::default(),
            transaction: TransactionSettings::default(),
            receive: ReceiveSettings::default(),
            ordering: OrderingPolicy::default(),
            ordering_set: false,
            concurrency_set: false,
            batch_size: DEFAULT_BATCH_SIZE,
            batch_linger: DEFAULT_BATCH_LINGER,
            batch_set: None,
            batch: false,
        }
    }
}

/// Messages per batch by default.
pub(super) const DEFAULT_BATCH_SIZE: usize = 100;
/// How long a batch that is not full waits for more messages by default.
pub(super) const DEFAULT_BATCH_LINGER: Duration = Duration::from_millis(10);
/// Batches running at once by default: one whose handler runs while another commits.
const DEFAULT_BATCH_CONCURRENCY: usize = 2;

/// The least default prefetch: even a worker of one handler reads a few deliveries ahead, so
/// that one read of attempt counts serves a round of them (see `run::count_ahead`).
const MIN_DEFAULT_PREFETCH: usize = 8;

impl Config {
    /// Deliveries received ahead of a free handler: as set, or by default the concurrency
    /// (a batch, for a batch handler), at least [`MIN_DEFAULT_PREFETCH`].
    pub(super) fn prefetch(&self) -> usize {
        let default = if self.batch {
            self.batch_size
        } else {
            self.concurrency
        };
        self.prefetch.unwrap_or(default.max(MIN_DEFAULT_PREFETCH))
    }

    /// Messages one running handler holds: a batch, or one.
    pub(super) fn per_handler(&self) -> usize {
        if self.batch { self.batch_size } else { 1 }
    }
}

/// Builds a [`Worker`]: made by [`Worker::builder`]; set its options, give it its handler
/// ([`transactional`](Self::transactional) or [`external`](Self::external)), then
/// [`build`](WorkerBuilder::build) it, which checks every setting.
///
/// `H` says whether the handler is set yet ([`NoHandler`], then [`WithHandler`]): `build`
/// exists only once it is.
#[must_use]
pub struct WorkerBuilder<M: QueueMessage, H = NoHandler> {
    pub(super) db: Database,
    pub(super) config: Config,
    pub(super) handler: H,
    pub(super) _message: std::marker::PhantomData<fn() -> M>,
}

/// A [`WorkerBuilder`] whose handler is not set yet.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHandler;

/// A [`WorkerBuilder`] whose handler is set: it can [`build`](WorkerBuilder::build).
pub struct WithHandler<M>(Handler<M>);

impl<M> fmt::Debug for WithHandler<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Handler::Transactional(_) => "WithHandler(transactional)",
            Handler::External(_) => "WithHandler(external)",
            Handler::TransactionalBatch(_) => "WithHandler(transactional_batch)",
            Handler::ExternalBatch(_) => "WithHandler(external_batch)",
        })
    }
}

impl<M: QueueMessage> WorkerBuilder<M, NoHandler> {
    /// The handler runs inside the read-write transaction that acks the message, and gets
    /// that [`Transaction`], the message and its [`HandlerContext`].
    ///
    /// The handler may run more than once per attempt (the transaction runner re-runs it when
    /// Spanner aborts the transaction): keep it free of side effects outside Spanner.
    pub fn transactional<F, Fut>(self, handler: F) -> WorkerBuilder<M, WithHandler<M>>
    where
        F: Fn(Transaction, Arc<M>, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
    {
        let db = self.db.clone();
        let handler: Arc<TransactionalFn<M>> = Arc::new(move |tx, message, ctx| {
            Box::pin(handler(Transaction::new(tx, db.clone()), message, ctx))
        });
        self.with_handler(Handler::Transactional(handler))
    }

    /// The handler works outside Spanner (an e-mail, a payment API) and gets the message and
    /// its [`HandlerContext`]; the worker acks after it succeeds.
    pub fn external<F, Fut>(self, handler: F) -> WorkerBuilder<M, WithHandler<M>>
    where
        F: Fn(Arc<M>, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
    {
        let handler: Arc<ExternalFn<M>> =
            Arc::new(move |message, ctx| Box::pin(handler(message, ctx)));
        self.with_handler(Handler::External(handler))
    }

    /// A batch handler that runs inside one read-write transaction for a whole batch of
    /// messages: it gets that [`Transaction`] and the [`Batch`], writes the effects of every
    /// message, and returns which messages failed ([`BatchOutcome`]); the worker acks the
    /// others, and releases or dead-letters the failed ones, in the same transaction, so one
    /// commit serves the batch. See [batch handlers](crate::worker#batch-handlers).
    ///
    /// A batch holds up to [`batch_size`](Self::with_batch_size) messages that were due
    /// together (it waits at most [`batch_linger`](Self::with_batch_linger) for more). If the
    /// handler returns `Err`, panics or times out, or the commit fails, the batch is split in
    /// two and each half runs again, until the messages that fail are alone: only those count
    /// an attempt. As for [`transactional`](Self::transactional), the handler may run more than
    /// once (aborted transactions, split batches): keep it free of side effects outside
    /// Spanner.
    ///
    /// For an ordered message type ([`crate::ordering`]) a batch may hold consecutive sequences
    /// of one ordering key, in order, each right after the one before it: they read each
    /// other's writes in the transaction (DML is read back; buffered mutations are not). When
    /// one of them fails, the transaction rolls back and the batch runs again without the
    /// messages of its key after it, which wait for it (not attempts).
    ///
    /// ```no_run
    /// # use spanner_queues::QueueMessage;
    /// # #[derive(QueueMessage)]
    /// # #[queue(name = "Notifications")]
    /// # struct Notification { #[queue(key)] id: uuid::Uuid, user_id: i64 }
    /// use google_cloud_spanner::statement::Statement;
    /// use spanner_queues::Worker;
    /// use spanner_queues::worker::BatchOutcome;
    ///
    /// # fn build(db: &spanner_queues::Database) -> spanner_queues::Result<()> {
    /// let worker = Worker::<Notification>::builder(db)
    ///     .with_batch_size(200)
    ///     .transactional_batch(|tx, batch| async move {
    ///         let users: Vec<i64> = batch.messages().map(|n| n.user_id).collect();
    ///         tx.execute_update(
    ///             Statement::builder(
    ///                 "UPDATE Users SET Unread = Unread + 1 WHERE UserId IN UNNEST(@users)",
    ///             )
    ///             .add_param("users", users)
    ///             .build(),
    ///         )
    ///         .await?;
    ///         Ok(BatchOutcome::new())
    ///     })
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn transactional_batch<F, Fut>(self, handler: F) -> WorkerBuilder<M, WithHandler<M>>
    where
        F: Fn(Transaction, Batch<M>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<BatchOutcome, HandlerError>> + Send + 'static,
    {
        let db = self.db.clone();
        let handler: Arc<TransactionalBatchFn<M>> =
            Arc::new(move |tx, batch| Box::pin(handler(Transaction::new(tx, db.clone()), batch)));
        self.with_handler(Handler::TransactionalBatch(handler))
    }

    /// A batch handler that works outside Spanner (a bulk API call, a fan-out of
    /// notifications): it gets a [`Batch`] and returns which messages failed
    /// ([`BatchOutcome`]); the worker then acks the others, and releases or dead-letters the
    /// failed ones, in one transaction. Delivery is at least once, as for
    /// [`external`](Self::external): a split batch (see
    /// [`transactional_batch`](Self::transactional_batch)) runs its messages again, so pass
    /// each message's [`idempotency_key`](HandlerContext::idempotency_key) along.
    pub fn external_batch<F, Fut>(self, handler: F) -> WorkerBuilder<M, WithHandler<M>>
    where
        F: Fn(Batch<M>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<BatchOutcome, HandlerError>> + Send + 'static,
    {
        let handler: Arc<ExternalBatchFn<M>> = Arc::new(move |batch| Box::pin(handler(batch)));
        self.with_handler(Handler::ExternalBatch(handler))
    }

    fn with_handler(mut self, handler: Handler<M>) -> WorkerBuilder<M, WithHandler<M>> {
        if handler.is_batch() {
            self.config.batch = true;
            if !self.config.concurrency_set {
                self.config.concurrency = DEFAULT_BATCH_CONCURRENCY;
            }
        }
        WorkerBuilder {
            db: self.db,
            config: self.config,
            handler: WithHandler(handler),
            _message: std::marker::PhantomData,
        }
    }
}

impl<M: QueueMessage> WorkerBuilder<M, WithHandler<M>> {
    /// Checks every setting against its range (given on each setter), the nested settings
    /// included, and makes the worker. Start it with [`Worker::run`] or [`Worker::spawn`].
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming the first setting out of range (a nested one as
    /// `redelivery_policy`, `transaction_settings` or `receive_settings`, with the inner
    /// setting in the reason).
    pub fn build(self) -> Result<Worker<M>> {
        validate_for::<M>(&self.config)?;
        Ok(Worker {
            shared: Arc::new(Shared {
                queue: Queue::of(&self.db),
                db: self.db.client().clone(),
                database: self.db,
                config: self.config,
                handler: self.handler.0,
                counters: Counters::default(),
                receiver: Mutex::new(None),
            }),
        })
    }
}

impl<M: QueueMessage, H> WorkerBuilder<M, H> {
    /// Handlers running at once, at most (default 8; from 1 to 100 000, together with the
    /// prefetch). For a batch handler, batches running at once (default 2).
    pub fn with_concurrency(mut self, handlers: usize) -> Self {
        self.config.concurrency = handlers;
        self.config.concurrency_set = true;
        self
    }

    /// Deliveries received ahead of a free handler, at most (default: the concurrency, at
    /// least 8; for a batch handler, one batch; concurrency × batch size + prefetch at most
    /// 100 000). They are leased and renewed while they wait.
    pub fn with_prefetch(mut self, deliveries: usize) -> Self {
        self.config.prefetch = Some(deliveries);
        self
    }

    /// Attempts per message before it goes to the dead-letter table (default 10; from 1 to
    /// 1000).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = attempts;
        self
    }

    /// Longest run of one handler attempt, its transaction included (default 5 minutes; from
    /// 1 ms to 24 hours).
    pub fn with_handler_timeout(mut self, timeout: Duration) -> Self {
        self.config.handler_timeout = timeout;
        self
    }

    /// How long running handlers may continue after shutdown starts (default 30 s; from 0 to
    /// 1 hour).
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
    /// attempt counts, dead letters); by default the database's.
    pub fn with_transaction_settings(mut self, settings: TransactionSettings) -> Self {
        self.config.transaction = settings;
        self
    }

    /// Receive settings. Leave their [`max_in_flight`](ReceiveSettings::with_max_in_flight)
    /// unset: the worker sets it to concurrency + prefetch, and refuses settings that set it.
    pub fn with_receive_settings(mut self, settings: ReceiveSettings) -> Self {
        self.config.receive = settings;
        self
    }

    /// How per-key order is kept, for an ordered message type ([`QueueMessage::ORDERED`]):
    /// whether dead letters block their ordering key, and how long a message waits behind an
    /// earlier one (default [`OrderingPolicy::default`]). A message type that is not ordered
    /// refuses it ([`Error::InvalidSetting`] from `build`).
    pub fn with_ordering(mut self, policy: OrderingPolicy) -> Self {
        self.config.ordering = policy;
        self.config.ordering_set = true;
        self
    }

    /// Batch handlers: the most messages in one batch (default 100; from 1 to 5 000).
    ///
    /// A transactional batch commits once for all of them, with the handler's writes, the
    /// acks and the attempt bookkeeping: Spanner allows 80 000 mutations per commit, and the
    /// worker's own writes take about 2 per acked message and up to 10 per failed one (see
    /// [batch handlers](crate::worker#batch-handlers) for choosing the size). A batch whose
    /// commit fails because it is too large is split in two like any failing batch. The
    /// worker's `RECEIVE` calls ask for batches of this size times the
    /// [concurrency](Self::with_concurrency) (a batch for every handler), unless its
    /// [receive settings](Self::with_receive_settings) set one. Refused (by `build`) for a
    /// worker whose handler does not take batches.
    pub fn with_batch_size(mut self, messages: usize) -> Self {
        self.config.batch_size = messages;
        self.config.batch_set = Some("batch_size");
        self
    }

    /// Batch handlers: how long a batch that is not full waits for more messages before it
    /// starts (default 10 ms; from 0 to 1 s). A batch starts at once when it is full, or when
    /// the worker holds as many messages as it may; with 0 it takes what is due and starts.
    /// While another batch of the worker runs, a batch of a queue without ordering keys that is
    /// not full waits up to ten times the linger, or until that batch ends: the next messages
    /// usually arrive as it commits, and a few messages would pay a full batch's commit.
    /// Refused (by `build`) for a worker whose handler does not take batches.
    pub fn with_batch_linger(mut self, linger: Duration) -> Self {
        self.config.batch_linger = linger;
        self.config.batch_set = Some("batch_linger");
        self
    }

    /// Batch handlers: the most messages in one batch.
    pub fn batch_size(&self) -> usize {
        self.config.batch_size
    }

    /// Batch handlers: how long a batch that is not full waits for more messages.
    pub fn batch_linger(&self) -> Duration {
        self.config.batch_linger
    }

    /// Handlers running at once, at most.
    pub fn concurrency(&self) -> usize {
        self.config.concurrency
    }

    /// Deliveries received ahead of a free handler, at most.
    pub fn prefetch(&self) -> usize {
        self.config.prefetch()
    }

    /// Attempts per message before it goes to the dead-letter table.
    pub fn max_attempts(&self) -> u32 {
        self.config.max_attempts
    }

    /// Longest run of one handler attempt.
    pub fn handler_timeout(&self) -> Duration {
        self.config.handler_timeout
    }

    /// How long running handlers may continue after shutdown starts.
    pub fn shutdown_grace(&self) -> Duration {
        self.config.shutdown_grace
    }

    /// Delays between attempts.
    pub fn redelivery_policy(&self) -> &RedeliveryPolicy {
        &self.config.redelivery
    }

    /// Settings of every transaction the worker runs.
    pub fn transaction_settings(&self) -> &TransactionSettings {
        &self.config.transaction
    }

    /// Receive settings.
    pub fn receive_settings(&self) -> &ReceiveSettings {
        &self.config.receive
    }

    /// How per-key order is kept (ordered message types).
    pub fn ordering(&self) -> &OrderingPolicy {
        &self.config.ordering
    }
}

impl<M: QueueMessage, H: fmt::Debug> fmt::Debug for WorkerBuilder<M, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("queue", &M::QUEUE)
            .field("config", &self.config)
            .field("handler", &self.handler)
            .finish_non_exhaustive()
    }
}

/// Handlers running at once (the receive slots are concurrency + prefetch).
const CONCURRENCY: RangeInclusive<usize> = 1..=100_000;
const MAX_ATTEMPTS: RangeInclusive<u32> = 1..=1_000;
const HANDLER_TIMEOUT: RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::DAY;
const SHUTDOWN_GRACE: RangeInclusive<Duration> = Duration::ZERO..=bounds::HOUR;
/// A batch commits once: its acks and attempt rows (about 2 mutations per acked message, up to
/// 10 per failed one) must leave room for the handler's writes within Spanner's 80 000
/// mutations per commit.
pub(super) const BATCH_SIZE: RangeInclusive<usize> = 1..=5_000;
/// Short: a lingering batch holds leases that are renewed meanwhile.
const BATCH_LINGER: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(1);

/// Checks the worker's settings; see [`WorkerBuilder::validate`].
pub(super) fn validate(config: &Config) -> Result<()> {
    bounds::in_range("concurrency", config.concurrency, CONCURRENCY)?;
    if let (Some(setting), false) = (config.batch_set, config.batch) {
        return Err(bounds::invalid(
            setting,
            "applies to batch handlers only (`transactional_batch`, `external_batch`)",
        ));
    }
    bounds::in_range("batch_size", config.batch_size, BATCH_SIZE)?;
    bounds::in_range("batch_linger", config.batch_linger, BATCH_LINGER)?;
    let slots = *crate::receive::MAX_IN_FLIGHT.end();
    let prefetch = config.prefetch();
    let held = config.concurrency.saturating_mul(config.per_handler());
    if held > slots || prefetch > slots - held {
        let what = if config.batch {
            "concurrency x batch size + prefetch"
        } else {
            "concurrency + prefetch"
        };
        return Err(bounds::invalid(
            if held > slots {
                "concurrency"
            } else {
                "prefetch"
            },
            format!("{what} must be at most {slots}, got {held} + {prefetch}"),
        ));
    }
    bounds::in_range("max_attempts", config.max_attempts, MAX_ATTEMPTS)?;
    bounds::in_range("handler_timeout", config.handler_timeout, HANDLER_TIMEOUT)?;
    bounds::in_range("shutdown_grace", config.shutdown_grace, SHUTDOWN_GRACE)?;
    nested("redelivery_policy", config.redelivery.validate())?;
    nested("transaction_settings", config.transaction.validate())?;
    nested("receive_settings", config.receive.validate())?;
    nested("ordering", config.ordering.validate())?;
    if config.receive.max_in_flight_is_set() {
        return Err(bounds::invalid(
            "receive_settings",
            "`max_in_flight` is set by the worker to concurrency (x batch size) + prefetch: \
             leave it unset, and use `with_concurrency` / `with_prefetch`",
        ));
    }
    Ok(())
}

/// Checks the worker's settings for message type `M`: [`validate`], the ordering settings
/// against `M`, and an ordered `M`'s key layout.
pub(super) fn validate_for<M: QueueMessage>(config: &Config) -> Result<()> {
    validate(config)?;
    if config.ordering_set && !M::ORDERED {
        return Err(bounds::invalid(
            "ordering",
            format!(
                "queue `{}` is not ordered: mark its message type `#[queue(ordered)]`",
                M::QUEUE
            ),
        ));
    }
    let slots = *crate::receive::MAX_IN_FLIGHT.end();
    let held = config.ordering.max_held();
    let handlers = config.concurrency * config.per_handler();
    if M::ORDERED && handlers + config.prefetch() + held > slots {
        let what = if config.batch {
            "concurrency x batch size"
        } else {
            "concurrency"
        };
        return Err(bounds::invalid(
            "ordering",
            format!(
                "{what} + prefetch + max_held must be at most {slots}, got {handlers} + {} + {held}",
                config.prefetch()
            ),
        ));
    }
    crate::ordering::check_layout::<M>()
}

/// An error of nested settings, renamed after the worker's setter that took them.
fn nested(setting: &'static str, checked: Result<()>) -> Result<()> {
    checked.map_err(|error| match error {
        Error::InvalidSetting {
            setting: inner,
            reason,
        } => bounds::invalid(setting, format!("`{inner}` {reason}")),
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The setting `validate` names for `config`, with its reason, or `None` when it is valid.
    fn rejected(config: &Config) -> Option<(&'static str, String)> {
        match validate(config) {
            Ok(()) => None,
            Err(Error::InvalidSetting { setting, reason }) => Some((setting, reason)),
            Err(other) => panic!("not an InvalidSetting: {other:?}"),
        }
    }

    fn name(config: &Config) -> Option<&'static str> {
        rejected(config).map(|(setting, _)| setting)
    }

    #[test]
    fn the_default_prefetch_is_the_concurrency_and_at_least_eight() {
        let prefetch = |concurrency, set: Option<usize>| {
            Config {
                concurrency,
                prefetch: set,
                ..Config::default()
            }
            .prefetch()
        };
        assert_eq!(prefetch(1, None), 8);
        assert_eq!(prefetch(4, None), 8);
        assert_eq!(prefetch(8, None), 8);
        assert_eq!(prefetch(20, None), 20);
        // A prefetch that is set is kept, however small.
        assert_eq!(prefetch(1, Some(0)), 0);
        assert_eq!(prefetch(4, Some(2)), 2);
    }

    #[test]
    fn worker_settings_bound_every_value_at_both_ends() {
        let with = |change: &dyn Fn(&mut Config)| {
            let mut config = Config::default();
            change(&mut config);
            config
        };
        assert_eq!(name(&Config::default()), None);
        let cases: Vec<(Config, Option<&str>)> = vec![
            (with(&|c| c.concurrency = 0), Some("concurrency")),
            (with(&|c| c.concurrency = 1), None),
            (
                with(&|c| {
                    c.concurrency = 100_000;
                    c.prefetch = Some(0);
                }),
                None,
            ),
            // `Semaphore::new` panics above `Semaphore::MAX_PERMITS`.
            (with(&|c| c.concurrency = usize::MAX), Some("concurrency")),
            // The default prefetch (the concurrency) would overflow the receive slots.
            (with(&|c| c.concurrency = 100_000), Some("prefetch")),
            (
                with(&|c| {
                    c.concurrency = 50_000;
                    c.prefetch = Some(50_000);
                }),
                None,
            ),
            (
                with(&|c| {
                    c.concurrency = 50_000;
                    c.prefetch = Some(50_001);
                }),
                Some("prefetch"),
            ),
            // `concurrency + prefetch` would overflow.
            (with(&|c| c.prefetch = Some(usize::MAX)), Some("prefetch")),
            (with(&|c| c.max_attempts = 0), Some("max_attempts")),
            (with(&|c| c.max_attempts = 1_000), None),
            (with(&|c| c.max_attempts = 1_001), Some("max_attempts")),
            (
                with(&|c| c.handler_timeout = Duration::ZERO),
                Some("handler_timeout"),
            ),
            (with(&|c| c.handler_timeout = bounds::DAY), None),
            (
                with(&|c| c.handler_timeout = Duration::MAX),
                Some("handler_timeout"),
            ),
            (with(&|c| c.shutdown_grace = Duration::ZERO), None),
            (with(&|c| c.shutdown_grace = bounds::HOUR), None),
            (
                with(&|c| c.shutdown_grace = Duration::MAX),
                Some("shutdown_grace"),
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(name(&config), expected, "{config:?}");
        }
    }

    #[test]
    fn batch_settings_are_bounded_and_refused_without_a_batch_handler() {
        let batch = |change: &dyn Fn(&mut Config)| {
            let mut config = Config {
                batch: true,
                concurrency: DEFAULT_BATCH_CONCURRENCY,
                ..Config::default()
            };
            change(&mut config);
            config
        };
        assert_eq!(name(&batch(&|_| {})), None);
        // One batch is read ahead by default.
        assert_eq!(batch(&|_| {}).prefetch(), DEFAULT_BATCH_SIZE);
        assert_eq!(
            batch(&|c| c.batch_size = 3).prefetch(),
            MIN_DEFAULT_PREFETCH
        );
        let cases: Vec<(Config, Option<&str>)> = vec![
            (batch(&|c| c.batch_size = 0), Some("batch_size")),
            (batch(&|c| c.batch_size = 1), None),
            (batch(&|c| c.batch_size = 5_000), None),
            (batch(&|c| c.batch_size = 5_001), Some("batch_size")),
            (batch(&|c| c.batch_linger = Duration::ZERO), None),
            (batch(&|c| c.batch_linger = Duration::from_secs(1)), None),
            (
                batch(&|c| c.batch_linger = Duration::from_millis(1_001)),
                Some("batch_linger"),
            ),
            // The receiver holds concurrency x batch size + prefetch leases.
            (
                batch(&|c| {
                    c.concurrency = 20;
                    c.batch_size = 5_000;
                    c.prefetch = Some(0);
                }),
                None,
            ),
            (
                batch(&|c| {
                    c.concurrency = 21;
                    c.batch_size = 5_000;
                }),
                Some("concurrency"),
            ),
            (
                batch(&|c| {
                    c.concurrency = 19;
                    c.batch_size = 5_000;
                    c.prefetch = Some(5_001);
                }),
                Some("prefetch"),
            ),
            // Batch settings mean nothing to a handler of single messages.
            (
                Config {
                    batch_set: Some("batch_size"),
                    ..Config::default()
                },
                Some("batch_size"),
            ),
            (
                Config {
                    batch_set: Some("batch_linger"),
                    ..Config::default()
                },
                Some("batch_linger"),
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(name(&config), expected, "{config:?}");
        }
    }

    #[test]
    fn nested_settings_are_checked_and_named_after_the_worker_setter() {
        let cases = [
            (
                Config {
                    redelivery: RedeliveryPolicy::default().with_jitter(2.0),
                    ..Config::default()
                },
                "redelivery_policy",
                "`jitter`",
            ),
            (
                Config {
                    // The official retry policy reads 0 as "no limit".
                    transaction: TransactionSettings::default().with_max_attempts(0),
                    ..Config::default()
                },
                "transaction_settings",
                "`max_attempts`",
            ),
            (
                Config {
                    transaction: TransactionSettings::default().with_total_timeout(Duration::MAX),
                    ..Config::default()
                },
                "transaction_settings",
                "`total_timeout`",
            ),
            (
                Config {
                    receive: ReceiveSettings::default().with_parallel_calls(0),
                    ..Config::default()
                },
                "receive_settings",
                "`parallel_calls`",
            ),
            // The worker sets it: a value set here would be ignored.
            (
                Config {
                    receive: ReceiveSettings::default().with_max_in_flight(4),
                    ..Config::default()
                },
                "receive_settings",
                "`max_in_flight`",
            ),
        ];
        for (config, setting, inner) in cases {
            let (named, reason) = rejected(&config).expect("rejected");
            assert_eq!(named, setting, "{config:?}");
            assert!(reason.starts_with(inner), "{reason}");
        }
    }
}
