//! Building a worker: its settings and their validation.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::ReadWriteTransaction;

use crate::error::{Error, Result};
use crate::message::QueueMessage;
use crate::queue::Queue;
use crate::receive::ReceiveSettings;
use crate::transaction::TransactionSettings;

use super::*;

#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) concurrency: usize,
    /// `None`: as many as the concurrency.
    pub(super) prefetch: Option<usize>,
    pub(super) max_attempts: u32,
    pub(super) handler_timeout: Duration,
    pub(super) shutdown_grace: Duration,
    pub(super) redelivery: RedeliveryPolicy,
    pub(super) transaction: TransactionSettings,
    pub(super) receive: ReceiveSettings,
}

/// Builds a [`Worker`].
#[must_use]
pub struct WorkerBuilder<M: QueueMessage> {
    pub(super) db: DatabaseClient,
    pub(super) queue: Queue<M>,
    pub(super) config: Config,
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

pub(super) fn validate(config: &Config) -> Result<()> {
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
