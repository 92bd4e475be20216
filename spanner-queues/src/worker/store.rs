//! The worker's storage seam: what an attempt does with the queue and the worker's tables.
//!
//! Each method is one whole read or transaction of the worker, so that an implementation never
//! has to pretend to be a Spanner read-write transaction. The worker decides what each one
//! writes (which attempt, whether to record a failure, forget the attempts, count them for a
//! dead letter: [`AttemptRows`], [`Letter`]) from how the attempt ended; a store carries that
//! out, atomically. [`SpannerStore`] is the real one; `memory::MemoryStore` (tests only) keeps
//! the same tables in maps, for unit tests of the worker's decisions.
//!
//! The worker is generic over its store (static dispatch, no `dyn` per message).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::codec::Payload;
use crate::error::Result;
use crate::key::MessageKey;
use crate::message::QueueMessage;

use super::batch::AckOutcome;
use super::batch_handler::Batch;
use super::handler::{HandlerContext, HandlerError};
use super::ordered::{Clearance, OrderingPolicy, Release};
use super::tables::{Attempt, AttemptRows, Letter, OwnedLetter};
use super::{TransactionalBatchFn, TransactionalFn};

#[cfg(test)]
pub(super) mod memory;
mod spanner;

pub(super) use spanner::SpannerStore;

pub(super) use super::tables::Prefetched;

/// A message of a batch, as a store needs it.
#[derive(Debug, Clone)]
pub(super) struct Member {
    pub(super) key: MessageKey,
    pub(super) payload: Payload,
    /// Ordered queues: its transaction looks for an earlier message of its ordering key first
    /// ([`Clearance::Check`]).
    pub(super) check: bool,
}

/// What the transaction of a batch does with one of its messages.
#[derive(Debug, Clone)]
pub(super) enum Settle {
    /// Ack it and forget its attempts ([`AttemptRows::Forget`]).
    Ack,
    /// Release it: ack it and send its payload again, deliverable `delay` from now, applying
    /// `rows` to its attempt rows.
    Release { delay: Duration, rows: AttemptRows },
    /// Move it to the dead-letter table.
    DeadLetter(OwnedLetter),
}

/// How a transactional batch ended for one message.
#[derive(Debug, Clone)]
pub(super) enum MemberEnd {
    /// The handler got it; settled as the worker decided, with the batch's commit.
    Settled(Settle),
    /// Settled with the batch's commit without running the handler (past its last attempt).
    Skipped(Settle),
    /// Ordered queues: released to wait for an earlier message of its ordering key (its
    /// handler did not run; not an attempt).
    Waiting,
}

/// What the worker makes of a transactional batch once the attempts of its messages are read,
/// in its transaction: the batch the handler gets, and the messages settled without it.
pub(super) struct Begun<M> {
    /// The messages the handler gets, by index among the batch's messages, in the order of
    /// `batch`.
    pub(super) run: Vec<usize>,
    pub(super) batch: Batch<M>,
    /// Messages settled without running the handler, by index.
    pub(super) skipped: Vec<(usize, Settle)>,
    /// Ordered queues: messages that wait for an earlier message of their ordering key in the
    /// same batch that does not run, by index: released to come back after the recheck delay
    /// (not attempts).
    pub(super) held: Vec<usize>,
}

/// Makes a [`Begun`] of the messages that may run (`open`, by index) from every message's
/// attempt (by index). Called once per run of the transaction.
pub(super) type BeginFn<M> = dyn Fn(&[usize], &[Attempt]) -> Begun<M> + Send + Sync;

/// Decides, from a batch handler's failures (by index among the batch's messages), what the
/// batch's transaction does with each message the handler got (`run`, by index), given every
/// message's attempt. Called once per run of the handler. An error (ordered queues: a message
/// ran after an earlier one of its key that is not acked) rolls the transaction back.
pub(super) type SettleFn = dyn Fn(&[usize], Vec<(usize, HandlerError)>, &[Attempt]) -> Result<Vec<(usize, Settle)>>
    + Send
    + Sync;

/// Where a transactional batch leaves the attempts it read (by index), even when its
/// transaction then fails.
pub(super) type AttemptsRead = Arc<std::sync::Mutex<Option<Vec<Attempt>>>>;

/// What the worker does with the queue and its tables, one read or transaction per method.
pub(super) trait Store<M: QueueMessage>: Send + Sync + 'static {
    /// Counts an attempt at `key` in the next round of starts: writes the attempt's row first
    /// if `write` (an external handler, whose crash must count), then reads the message's
    /// attempt rows. The round runs whether or not the answer is awaited (a written row stays
    /// and counts, as a crash would). `None` if the store no longer takes requests.
    fn request_start(&self, key: &MessageKey, write: bool) -> Option<Prefetched>;

    /// Runs a transactional handler and, in its transaction, acks the message and forgets its
    /// attempts ([`AttemptRows::Forget`]). The handler's own error comes back as the
    /// transaction runner returns it.
    fn run_transactional(
        &self,
        handler: &Arc<TransactionalFn<M>>,
        key: &MessageKey,
        message: Arc<M>,
        ctx: HandlerContext,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Ordered queues: as [`run_transactional`](Self::run_transactional). With
    /// [`Clearance::Clear`] (nothing earlier of `key`'s ordering key is left) that is all;
    /// with [`Clearance::Check`] the transaction first looks for an earlier message of the
    /// ordering key (in the queue and, as `policy` says, the dead-letter table) and, if there
    /// is one, releases this message (`payload` sent again, not an attempt) to come back later
    /// instead of running the handler. `Ok(true)`: handled and acked; `Ok(false)`: released to
    /// wait.
    #[allow(clippy::too_many_arguments)]
    fn run_transactional_ordered(
        &self,
        handler: &Arc<TransactionalFn<M>>,
        key: &MessageKey,
        message: Arc<M>,
        ctx: HandlerContext,
        payload: &Payload,
        policy: &OrderingPolicy,
        clearance: Clearance,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Ordered queues, external handlers with [`Clearance::Check`]: looks for an earlier
    /// message of `key`'s ordering key and, if there is one, releases this message to come
    /// back later, in one transaction. `Ok(true)`: released to wait; `Ok(false)`: the handler
    /// may run.
    fn wait_if_blocked(
        &self,
        key: &MessageKey,
        payload: &Payload,
        policy: &OrderingPolicy,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Acks `key` and forgets its attempts, in one transaction shared with other acks.
    fn ack_grouped(&self, key: &MessageKey) -> impl Future<Output = AckOutcome> + Send;

    /// Acks `key` and forgets its attempts, in a transaction of its own.
    fn ack(&self, key: &MessageKey) -> impl Future<Output = Result<()>> + Send;

    /// Releases the message `key` (acks it and sends `payload` again, deliverable `delay` from
    /// now) and applies `rows` to its attempt rows, in one transaction.
    fn release(
        &self,
        key: &MessageKey,
        payload: &Payload,
        delay: Duration,
        rows: AttemptRows,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Ordered queues: releases messages that wait for an earlier message of their ordering
    /// key (each acked and sent again with its payload, due at its time; not attempts), in
    /// one transaction. Returns how many were released (a message gone meanwhile is skipped).
    fn release_waiting(&self, releases: Vec<Release>)
    -> impl Future<Output = Result<usize>> + Send;

    /// Acks a message and records it in the dead-letter table, in one transaction.
    fn dead_letter(&self, letter: Letter<'_>) -> impl Future<Output = Result<()>> + Send;

    /// Runs a transactional batch of `members` in one read-write transaction: reads every
    /// message's attempt rows and asserts that every message is there (one keyed read each, at
    /// once), leaving the attempts in `read`; for an ordered queue (`ordering` set) looks for an
    /// earlier message of each message's ordering key and releases those that must wait; then
    /// runs the handler on the batch `begin` makes, and carries out, in the same transaction,
    /// what `settle` decides from its outcome: the acks (one delete for all), releases and dead
    /// letters. Returns how each message ended, by index; the handler's own error comes back as
    /// the transaction runner returns it.
    fn run_transactional_batch(
        &self,
        handler: &Arc<TransactionalBatchFn<M>>,
        members: Arc<[Member]>,
        begin: Arc<BeginFn<M>>,
        settle: Arc<SettleFn>,
        ordering: Option<&OrderingPolicy>,
        read: AttemptsRead,
    ) -> impl Future<Output = Result<Vec<MemberEnd>>> + Send;

    /// Carries out `settles` (one per message of `members`) in one transaction: an external
    /// batch's acks, releases and dead letters.
    fn settle_batch(
        &self,
        members: Arc<[Member]>,
        settles: Vec<Settle>,
    ) -> impl Future<Output = Result<()>> + Send;
}
