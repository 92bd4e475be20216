//! [`Delivery`]: one received message under a lease.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use google_cloud_spanner::transaction::ReadWriteTransaction;
use tokio::sync::OwnedSemaphorePermit;

use crate::codec::Payload;
use crate::database::Database;
use crate::error::{Error, Result};
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::queue::{DeliverAt, Queue};
use crate::receive::Shared;
use crate::receive::lease::Lease;
use crate::telemetry;
use crate::transaction::Transaction;

/// A message received under a lease.
///
/// It holds the decoded message (or, for a payload that does not match `M`, the
/// [`Error::Decode`] — a poison message whose key is still known), the raw payload, and the
/// lease, which the receiver renews in the background for as long as the delivery is alive
/// (up to [`max_lease_duration`](super::ReceiveSettings::max_lease_duration)).
///
/// Finish with one of:
/// - [`Transaction::ack`] inside your own read-write transaction (with the message's effects),
///   then drop the delivery once the transaction has committed;
/// - [`Database::ack`], in a transaction of its own;
/// - [`Transaction::release`] / [`Database::release`]: ack and re-send the same payload with a
///   later `DeliverTime`, in one transaction, to retry later;
/// - or just drop it: renewal stops, the lease lapses and Spanner delivers the message again.
///
/// Dropping a delivery frees its slot in [`max_in_flight`](super::ReceiveSettings::max_in_flight).
///
/// # Acking after the lease was lost
///
/// Acks go by key, not by lease token. An ack after the lease was lost therefore still deletes
/// the message if it is there, even when another consumer has received it meanwhile; that
/// consumer's ack then fails with [`Error::AlreadyAcked`] and its transaction rolls back. When
/// every consumer acks in the transaction that applies the message's effects (what the
/// transactional worker does), exactly one of those transactions commits, so the effects are
/// applied once. What the lease loss does change is exclusivity: two consumers may be working
/// on the message at the same time, so side effects outside Spanner must be idempotent.
pub struct Delivery<M: QueueMessage> {
    message: std::result::Result<Arc<M>, Error>,
    key: MessageKey,
    payload: Payload,
    deliver_time: Option<SystemTime>,
    lease: Arc<Lease>,
    shared: Arc<Shared<M>>,
    _slot: OwnedSemaphorePermit,
}

impl<M: QueueMessage> Delivery<M> {
    pub(crate) fn new(
        shared: Arc<Shared<M>>,
        key: MessageKey,
        payload: Payload,
        deliver_time: Option<SystemTime>,
        lease: Arc<Lease>,
        slot: OwnedSemaphorePermit,
    ) -> Self {
        let message = M::decode_parts(key.clone(), payload.clone()).map(Arc::new);
        if message.is_err() {
            metrics::counter!(telemetry::UNDECODABLE, "queue" => M::QUEUE.as_str().to_owned())
                .increment(1);
        }
        let counters = &shared.leases.counters;
        counters.received.fetch_add(1, Ordering::Relaxed);
        let now = counters.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        counters.max_in_flight.fetch_max(now, Ordering::SeqCst);
        metrics::counter!(telemetry::RECEIVED, "queue" => M::QUEUE.as_str().to_owned())
            .increment(1);
        metrics::gauge!(telemetry::IN_FLIGHT, "queue" => M::QUEUE.as_str().to_owned())
            .increment(1.0);
        Self {
            message,
            key,
            payload,
            deliver_time,
            lease,
            shared,
            _slot: slot,
        }
    }

    /// The decoded message, or [`Error::Decode`] when the payload does not match `M` (a poison
    /// message: move it aside, for instance with the worker's dead-letter table).
    pub fn message(&self) -> std::result::Result<&M, &Error> {
        self.message.as_deref()
    }

    /// The decoded message, shared (for handlers that outlive a borrow).
    pub(crate) fn shared_message(&self) -> Option<Arc<M>> {
        self.message.as_ref().ok().cloned()
    }

    /// The message's primary key.
    pub fn key(&self) -> &MessageKey {
        &self.key
    }

    /// The message's [`Sequence`](crate::ordering::Sequence) in its ordering key, for an
    /// ordered type ([`QueueMessage::ORDERED`]); `None` otherwise. With the message's key it
    /// names this one message (for example to cancel it).
    pub fn sequence(&self) -> Option<crate::ordering::Sequence> {
        crate::ordering::Sequence::of::<M>(&self.key)
    }

    /// The payload exactly as read from the queue.
    pub fn payload(&self) -> &Payload {
        &self.payload
    }

    /// The message's `DeliverTime`, if the receive call returned it.
    pub fn deliver_time(&self) -> Option<SystemTime> {
        self.deliver_time
    }

    /// When the lease expires, as Spanner reported it (kept current by renewals).
    ///
    /// Compared with this machine's clock to decide that a lease is lost; clock skew
    /// between this machine and Spanner shifts that decision.
    pub fn lease_expiry(&self) -> SystemTime {
        self.lease.expiry()
    }

    /// How long ago the message was received.
    pub fn age(&self) -> Duration {
        self.lease.received().elapsed()
    }

    /// When the message was received (monotonic clock).
    pub fn received_at(&self) -> Instant {
        self.lease.received()
    }

    /// Whether the lease is lost: a renewal found it expired or not renewable, or its expiry
    /// has passed. Once lost, it stays lost.
    pub fn is_lease_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Resolves when the lease is lost. Select on it to stop work another consumer may now be
    /// doing too.
    pub async fn lease_lost(&self) {
        self.lease
            .wait_lost(&self.shared.leases.counters, &M::QUEUE)
            .await;
    }

    /// A short hash of the lease token, for correlating log lines (never the token itself).
    pub fn lease_label(&self) -> &str {
        self.lease.label()
    }

    pub(crate) fn lease_handle(&self) -> crate::receive::lease::LeaseHandle {
        crate::receive::lease::LeaseHandle {
            lease: Arc::clone(&self.lease),
            counters: Arc::clone(&self.shared.leases.counters),
            queue: M::QUEUE,
        }
    }
}

/// Acks and releases in the caller's transaction.
impl Transaction {
    /// Acks `delivery` inside this transaction, the one that applies its effects
    /// (`DELETE … ASSERT_ROWS_MODIFIED 1`). Drop the delivery after the commit.
    ///
    /// ```no_run
    /// # use spanner_queues::QueueMessage;
    /// # #[derive(QueueMessage)]
    /// # #[queue(name = "OrderEmails")]
    /// # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
    /// use spanner_queues::{Database, Delivery};
    ///
    /// async fn handle(db: &Database, delivery: &Delivery<OrderEmail>) -> spanner_queues::Result<()> {
    ///     db.transaction()
    ///         .run(move |tx| async move {
    ///             // … the effects of `delivery.message()` …
    ///             tx.ack(delivery).await // one commit for both
    ///         })
    ///         .await
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::AlreadyAcked`] when the message is gone: **propagate it** (`?`) so that the
    /// transaction rolls back. As a safety fuse the transaction is also made uncommittable, so
    /// the other writes of the transaction can never be applied next to a failed ack.
    pub async fn ack<M: QueueMessage>(&self, delivery: &Delivery<M>) -> Result<()> {
        Queue::<M>::of(self.database())
            .ack_key(self.read_write(), delivery.key.clone())
            .await
    }

    /// Releases `delivery` for a later retry inside this transaction: acks it and sends the
    /// same payload (byte for byte) again with `DeliverTime` `delay` from now, by Spanner's
    /// clock.
    ///
    /// # Errors
    /// [`Error::AlreadyAcked`] when the message is gone (propagate it).
    pub async fn release<M: QueueMessage>(
        &self,
        delivery: &Delivery<M>,
        delay: Duration,
    ) -> Result<()> {
        release_in(
            &Queue::<M>::of(self.database()),
            self.read_write(),
            delivery.key.clone(),
            delivery.payload.clone(),
            delay,
        )
        .await
    }
}

/// Acks and releases in a transaction of their own, with the database's
/// [`transaction_settings`](Database::transaction_settings).
///
/// # Cancellation
/// Dropping one of these futures after the commit was sent may still apply it, and you cannot
/// tell: the message is then either gone (or released) or delivered again when its lease
/// lapses (at least once, as always).
impl Database {
    /// Acks `delivery` in a transaction of its own.
    ///
    /// # Errors
    /// [`Error::AlreadyAcked`] when the message is gone; [`Error::OutcomeUnknown`] when the
    /// commit's outcome is unknown. A message that was not acked is delivered again after its
    /// lease lapses.
    pub async fn ack<M: QueueMessage>(&self, delivery: &Delivery<M>) -> Result<()> {
        self.transaction()
            .run(move |tx| async move { tx.ack(delivery).await })
            .await
    }

    /// [`Transaction::release`] in a transaction of its own.
    ///
    /// # Errors
    /// As [`ack`](Self::ack). If the release fails, the message stays in the queue and is
    /// delivered again when its lease lapses.
    pub async fn release<M: QueueMessage>(
        &self,
        delivery: &Delivery<M>,
        delay: Duration,
    ) -> Result<()> {
        self.transaction()
            .run(move |tx| async move { tx.release(delivery, delay).await })
            .await
    }
}

/// Acks a message and sends its payload again, `delay` from now, inside `tx`.
pub(crate) async fn release_in<M: QueueMessage>(
    queue: &crate::queue::Queue<M>,
    tx: &ReadWriteTransaction,
    key: MessageKey,
    payload: Payload,
    delay: Duration,
) -> Result<()> {
    queue.ack_key(tx, key.clone()).await?;
    queue.send_raw(tx, key, payload, deliver_after(delay)).await
}

fn deliver_after(delay: Duration) -> DeliverAt {
    if delay.is_zero() {
        DeliverAt::Now
    } else {
        DeliverAt::After(delay)
    }
}

impl<M: QueueMessage> Drop for Delivery<M> {
    fn drop(&mut self) {
        self.shared.leases.unregister(self.lease.id);
        self.shared
            .leases
            .counters
            .in_flight
            .fetch_sub(1, Ordering::SeqCst);
        metrics::gauge!(telemetry::IN_FLIGHT, "queue" => M::QUEUE.as_str().to_owned())
            .decrement(1.0);
    }
}

impl<M: QueueMessage> fmt::Debug for Delivery<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("queue", &M::QUEUE)
            .field("key", &self.key)
            .field("decoded", &self.message.is_ok())
            .field("payload", &self.payload)
            .field("lease", &self.lease.label())
            .field("lease_expiry", &self.lease.expiry())
            .finish()
    }
}
