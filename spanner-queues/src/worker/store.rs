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

use super::TransactionalFn;
use super::batch::AckOutcome;
use super::handler::HandlerContext;
use super::ordered::{Clearance, OrderingPolicy, Release};
use super::tables::{AttemptRows, Letter};

#[cfg(test)]
pub(super) mod memory;
mod spanner;

pub(super) use spanner::SpannerStore;

pub(super) use super::tables::Prefetched;

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
}
