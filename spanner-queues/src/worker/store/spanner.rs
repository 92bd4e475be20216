//! The worker's store in Spanner: the queue and the worker's tables, in the transactions the
//! worker has always used.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::ReadWriteTransaction;

use crate::codec::Payload;
use crate::error::Result;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::queue::Queue;
use crate::receive::release_in;
use crate::transaction::TransactionSettings;

use super::super::TransactionalFn;
use super::super::batch::{AckOutcome, Batches};
use super::super::handler::{HandlerContext, to_runner_error};
use super::super::ordered::{self, Clearance, Floors, Gate, OrderingPolicy, Release};
use super::super::tables::{self, AttemptRows, Letter, buffer_rows};
use super::{Prefetched, Store};

/// The queue and the worker's tables in Spanner, for one run of a worker: the starts of
/// attempts and the acks of external handlers go through its group-commit tasks, which end when
/// it is dropped.
pub(in crate::worker) struct SpannerStore<M: QueueMessage> {
    db: DatabaseClient,
    queue: Queue<M>,
    settings: TransactionSettings,
    batches: Batches<M>,
    /// Ordered queues: below which sequence nothing of each ordering key is left (shared with
    /// the worker's holding).
    floors: Arc<Floors>,
}

impl<M: QueueMessage> SpannerStore<M> {
    /// A store whose transactions use `settings`; starts its group-commit tasks. Ordered
    /// queues: the store raises `floors` as it learns that earlier messages are gone.
    pub(in crate::worker) fn spawn(
        db: &DatabaseClient,
        queue: &Queue<M>,
        settings: &TransactionSettings,
        floors: Arc<Floors>,
    ) -> Self {
        Self {
            db: db.clone(),
            queue: queue.clone(),
            settings: settings.clone(),
            batches: Batches::spawn(db, queue, settings),
            floors,
        }
    }
}

impl<M: QueueMessage> Store<M> for SpannerStore<M> {
    fn request_start(&self, key: &MessageKey, write: bool) -> Option<Prefetched> {
        self.batches.request_start(key, write)
    }

    fn run_transactional(
        &self,
        handler: &Arc<TransactionalFn<M>>,
        key: &MessageKey,
        message: Arc<M>,
        ctx: HandlerContext,
    ) -> impl Future<Output = Result<()>> + Send {
        let (handler, queue, key) = (Arc::clone(handler), self.queue.clone(), key.clone());
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                transactional_attempt(
                    tx,
                    Arc::clone(&handler),
                    queue.clone(),
                    key.clone(),
                    Arc::clone(&message),
                    ctx.clone(),
                )
            })
    }

    fn run_transactional_ordered(
        &self,
        handler: &Arc<TransactionalFn<M>>,
        key: &MessageKey,
        message: Arc<M>,
        ctx: HandlerContext,
        payload: &Payload,
        policy: &OrderingPolicy,
        clearance: Clearance,
    ) -> impl Future<Output = Result<bool>> + Send {
        let (handler, queue, key) = (Arc::clone(handler), self.queue.clone(), key.clone());
        let (payload, policy) = (payload.clone(), policy.clone());
        let (floors, handled) = (Arc::clone(&self.floors), key.clone());
        let run = crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (handler, queue, key) = (Arc::clone(&handler), queue.clone(), key.clone());
                let (message, ctx) = (Arc::clone(&message), ctx.clone());
                let (payload, policy) = (payload.clone(), policy.clone());
                async move {
                    let settles = match clearance {
                        Clearance::Clear => true,
                        Clearance::Check => {
                            match ordered::check(&tx, &queue, &policy, &key).await? {
                                Gate::Wait(at) => {
                                    ordered::release_waiting(&tx, &queue, &key, payload, at)
                                        .await?;
                                    return Ok(None);
                                }
                                Gate::Open { settled } => settled,
                            }
                        }
                    };
                    transactional_attempt(tx, handler, queue, key, message, ctx).await?;
                    Ok(Some(settles))
                }
            });
        async move {
            let ran = run.await?;
            if ran == Some(true) {
                floors.settle(&handled);
                floors.acked(&handled);
            }
            Ok(ran.is_some())
        }
    }

    fn wait_if_blocked(
        &self,
        key: &MessageKey,
        payload: &Payload,
        policy: &OrderingPolicy,
    ) -> impl Future<Output = Result<bool>> + Send {
        let (queue, key) = (self.queue.clone(), key.clone());
        let (payload, policy) = (payload.clone(), policy.clone());
        let (floors, checked) = (Arc::clone(&self.floors), key.clone());
        let run = crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, key) = (queue.clone(), key.clone());
                let (payload, policy) = (payload.clone(), policy.clone());
                async move {
                    match ordered::check(&tx, &queue, &policy, &key).await? {
                        Gate::Open { settled } => Ok(Some(settled)),
                        Gate::Wait(at) => {
                            ordered::release_waiting(&tx, &queue, &key, payload, at).await?;
                            Ok(None)
                        }
                    }
                }
            });
        async move {
            match run.await? {
                None => Ok(true),
                Some(settled) => {
                    if settled {
                        // Nothing earlier is left: its ack raises the floor past it.
                        floors.settle(&checked);
                    }
                    Ok(false)
                }
            }
        }
    }

    fn release_waiting(
        &self,
        releases: Vec<Release>,
    ) -> impl Future<Output = Result<usize>> + Send {
        let queue = self.queue.clone();
        let messages: Vec<(MessageKey, Payload, crate::queue::DeliverAt)> = releases
            .into_iter()
            .map(|r| (r.key, r.payload, r.at))
            .collect();
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, messages) = (queue.clone(), messages.clone());
                async move { queue.release_many(&tx, messages).await }
            })
    }

    fn ack_grouped(&self, key: &MessageKey) -> impl Future<Output = AckOutcome> + Send {
        let acked = self.batches.ack(key);
        let floors = M::ORDERED.then(|| (Arc::clone(&self.floors), key.clone()));
        async move {
            let outcome = acked.await;
            if let (AckOutcome::Acked, Some((floors, key))) = (&outcome, floors) {
                floors.acked(&key);
            }
            outcome
        }
    }

    fn ack(&self, key: &MessageKey) -> impl Future<Output = Result<()>> + Send {
        let (queue, key) = (self.queue.clone(), key.clone());
        let floors = M::ORDERED.then(|| (Arc::clone(&self.floors), key.clone()));
        let acked = crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, key) = (queue.clone(), key.clone());
                async move {
                    queue.ack_key(&tx, key.clone()).await?;
                    buffer_rows(&tx, queue.dialect(), &M::QUEUE, &key, &AttemptRows::Forget)?;
                    Ok(())
                }
            });
        async move {
            acked.await?;
            if let Some((floors, key)) = floors {
                floors.acked(&key);
            }
            Ok(())
        }
    }

    fn release(
        &self,
        key: &MessageKey,
        payload: &Payload,
        delay: Duration,
        rows: AttemptRows,
    ) -> impl Future<Output = Result<()>> + Send {
        let (queue, key, payload) = (self.queue.clone(), key.clone(), payload.clone());
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, key, payload, rows) =
                    (queue.clone(), key.clone(), payload.clone(), rows.clone());
                async move {
                    release_in(&queue, &tx, key.clone(), payload, delay).await?;
                    buffer_rows(&tx, queue.dialect(), &M::QUEUE, &key, &rows)?;
                    Ok(())
                }
            })
    }

    fn dead_letter(&self, letter: Letter<'_>) -> impl Future<Output = Result<()>> + Send {
        tables::dead_letter(&self.db, &self.settings, &self.queue, letter)
    }
}

/// One run of a transactional handler, with the ack, inside `tx`.
async fn transactional_attempt<M: QueueMessage>(
    tx: ReadWriteTransaction,
    handler: Arc<TransactionalFn<M>>,
    queue: Queue<M>,
    key: MessageKey,
    message: Arc<M>,
    ctx: HandlerContext,
) -> Result<()> {
    if let Err(error) = handler(tx.clone(), message, ctx).await {
        return Err(to_runner_error(error));
    }
    queue.ack_key(&tx, key.clone()).await?;
    buffer_rows(&tx, queue.dialect(), &M::QUEUE, &key, &AttemptRows::Forget)?;
    Ok(())
}
