//! Group commit of the worker's own writes: the attempt starts of a round in one commit and one
//! read, and the acks of external handlers in one transaction.
//!
//! Each is one task that takes the requests queued while its previous round ran, so nothing
//! waits for a batch to fill: with one message in flight a round is that message alone, and
//! with many the rounds grow by themselves.

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::ReadWriteTransaction;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Classification, Error, Result};
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::queue::Queue;
use crate::telemetry;
use crate::transaction::TransactionSettings;

use super::tables::{self, Attempt, AttemptRows, StartRequest};
use crate::dialect::Dialect;

/// Most requests in one round (one commit of attempt rows, one read, one ack transaction).
const MAX_BATCH: usize = 500;

/// The worker's batches, for the lifetime of one [`Worker::run`](super::Worker::run) (owned by
/// its [`SpannerStore`](super::store::SpannerStore)).
pub(super) struct Batches<M: QueueMessage> {
    starts: mpsc::UnboundedSender<PendingStart>,
    acks: mpsc::UnboundedSender<PendingAck>,
    _message: std::marker::PhantomData<fn() -> M>,
}

struct PendingStart {
    request: StartRequest,
    reply: oneshot::Sender<Result<Attempt>>,
}

struct PendingAck {
    key: MessageKey,
    reply: oneshot::Sender<AckOutcome>,
}

/// How a grouped ack ended for one message.
#[derive(Debug)]
pub(super) enum AckOutcome {
    Acked,
    /// The message was gone.
    AlreadyAcked,
    /// The commit's outcome is unknown.
    Unknown,
    /// The group failed; the message is acked on its own instead.
    Failed,
}

impl<M: QueueMessage> Batches<M> {
    /// Starts the batching tasks; they end when the last handle is dropped.
    pub(super) fn spawn(
        db: &DatabaseClient,
        queue: &Queue<M>,
        settings: &TransactionSettings,
    ) -> Self {
        let (starts, start_requests) = mpsc::unbounded_channel();
        let (acks, ack_requests) = mpsc::unbounded_channel();
        tokio::spawn(serve_starts(
            db.clone(),
            queue.dialect(),
            M::QUEUE,
            start_requests,
        ));
        tokio::spawn(serve_acks(
            db.clone(),
            queue.clone(),
            settings.clone(),
            ack_requests,
        ));
        Self {
            starts,
            acks,
            _message: std::marker::PhantomData,
        }
    }

    /// Queues the start of an attempt at `key` for the next round and returns where its answer
    /// arrives (`None` if the batching task is gone). The round runs whether or not the
    /// answer is awaited.
    pub(super) fn request_start(
        &self,
        key: &MessageKey,
        write: bool,
    ) -> Option<oneshot::Receiver<Result<Attempt>>> {
        let (reply, answer) = oneshot::channel();
        let request = StartRequest {
            key: key.clone(),
            write,
        };
        self.starts.send(PendingStart { request, reply }).ok()?;
        Some(answer)
    }

    /// Acks `key` (and deletes its attempt rows) in the next grouped transaction.
    pub(super) async fn ack(&self, key: &MessageKey) -> AckOutcome {
        let (reply, answer) = oneshot::channel();
        let pending = PendingAck {
            key: key.clone(),
            reply,
        };
        if self.acks.send(pending).is_err() {
            return AckOutcome::Failed;
        }
        answer.await.unwrap_or(AckOutcome::Failed)
    }
}

/// Takes the first request, then whatever else is already queued (up to [`MAX_BATCH`]).
async fn next_round<T>(requests: &mut mpsc::UnboundedReceiver<T>) -> Option<Vec<T>> {
    let first = requests.recv().await?;
    let mut round = vec![first];
    while round.len() < MAX_BATCH {
        match requests.try_recv() {
            Ok(more) => round.push(more),
            Err(_) => break,
        }
    }
    Some(round)
}

async fn serve_starts(
    db: DatabaseClient,
    dialect: Dialect,
    queue: QueueName,
    mut requests: mpsc::UnboundedReceiver<PendingStart>,
) {
    while let Some(round) = next_round(&mut requests).await {
        let batch: Vec<StartRequest> = round.iter().map(|p| p.request.clone()).collect();
        match tables::start_attempts(&db, dialect, &queue, &batch).await {
            Ok(attempts) => {
                for (pending, attempt) in round.into_iter().zip(attempts) {
                    let _ = pending.reply.send(Ok(attempt));
                }
            }
            Err(error) if round.len() == 1 => {
                if let Some(pending) = round.into_iter().next() {
                    let _ = pending.reply.send(Err(error));
                }
            }
            Err(error) => {
                // One at a time, so that each message gets its own error (and a permanent
                // error poisons only the message it is about).
                tracing::debug!(
                    queue = %queue,
                    error = %telemetry::ErrorChain(&error),
                    batch = round.len(),
                    "starting a batch of attempts failed; starting them one by one"
                );
                for pending in round {
                    let result = tables::start_attempts(
                        &db,
                        dialect,
                        &queue,
                        std::slice::from_ref(&pending.request),
                    )
                    .await
                    .map(|mut attempts| attempts.remove(0));
                    let _ = pending.reply.send(result);
                }
            }
        }
    }
}

async fn serve_acks<M: QueueMessage>(
    db: DatabaseClient,
    queue: Queue<M>,
    settings: TransactionSettings,
    mut requests: mpsc::UnboundedReceiver<PendingAck>,
) {
    while let Some(mut round) = next_round(&mut requests).await {
        while !round.is_empty() {
            let keys: Vec<MessageKey> = round.iter().map(|p| p.key.clone()).collect();
            let queue = queue.clone();
            let result = crate::transaction::builder(&db)
                .with_settings(settings.clone())
                .run(move |tx: ReadWriteTransaction| {
                    let (queue, keys) = (queue.clone(), keys.clone());
                    async move {
                        for key in keys {
                            queue.ack_key(&tx, key.clone()).await?;
                            tables::buffer_rows(
                                &tx,
                                queue.dialect(),
                                &M::QUEUE,
                                &key,
                                &AttemptRows::Forget,
                            )?;
                        }
                        Ok(())
                    }
                })
                .await;
            match result {
                Ok(()) => {
                    for pending in round.drain(..) {
                        let _ = pending.reply.send(AckOutcome::Acked);
                    }
                }
                Err(Error::AlreadyAcked { key, .. }) => {
                    // That one is gone (the transaction rolled back): ack the others again.
                    match round.iter().position(|p| p.key == key) {
                        Some(at) => {
                            let _ = round.remove(at).reply.send(AckOutcome::AlreadyAcked);
                        }
                        None => {
                            for pending in round.drain(..) {
                                let _ = pending.reply.send(AckOutcome::Failed);
                            }
                        }
                    }
                }
                Err(error) if error.classification() == Classification::OutcomeUnknown => {
                    for pending in round.drain(..) {
                        let _ = pending.reply.send(AckOutcome::Unknown);
                    }
                }
                Err(error) => {
                    tracing::debug!(
                        queue = %M::QUEUE,
                        error = %telemetry::ErrorChain(&error),
                        batch = round.len(),
                        "a grouped ack failed; acking one by one"
                    );
                    for pending in round.drain(..) {
                        let _ = pending.reply.send(AckOutcome::Failed);
                    }
                }
            }
        }
    }
}
