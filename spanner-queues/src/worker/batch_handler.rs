//! What a batch handler gets and returns: [`Batch`] and [`BatchOutcome`].

use std::fmt;
use std::sync::Arc;

use super::handler::{HandlerContext, HandlerError};

/// The messages a batch handler gets together, each with its [`HandlerContext`].
///
/// A batch holds up to [`batch_size`](super::WorkerBuilder::with_batch_size) messages of one
/// queue, in the order they were received (of an ordered queue: each ordering key's messages
/// in sequence order, see [`crate::ordering`]); the handler refers to them by their index here
/// (from 0) in its [`BatchOutcome`]. Cloning a batch is cheap (its messages are shared).
pub struct Batch<M> {
    members: Arc<[Member<M>]>,
}

struct Member<M> {
    message: Arc<M>,
    ctx: HandlerContext,
}

impl<M> Batch<M> {
    pub(super) fn new(members: impl IntoIterator<Item = (Arc<M>, HandlerContext)>) -> Self {
        Self {
            members: members
                .into_iter()
                .map(|(message, ctx)| Member { message, ctx })
                .collect(),
        }
    }

    /// How many messages the batch holds (at least one).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the batch holds no message (never, for a batch the worker hands out).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The message at `index`.
    pub fn get(&self, index: usize) -> Option<&M> {
        self.members.get(index).map(|m| &*m.message)
    }

    /// The message at `index`, shared (for work that outlives a borrow of the batch).
    pub fn shared(&self, index: usize) -> Option<Arc<M>> {
        self.members.get(index).map(|m| Arc::clone(&m.message))
    }

    /// The context of the message at `index`: its key, attempt, lease.
    pub fn context(&self, index: usize) -> Option<&HandlerContext> {
        self.members.get(index).map(|m| &m.ctx)
    }

    /// The messages, in order.
    pub fn messages(&self) -> impl ExactSizeIterator<Item = &M> {
        self.members.iter().map(|m| &*m.message)
    }

    /// The messages with their contexts, in order (`enumerate()` gives the indices a
    /// [`BatchOutcome`] takes).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&M, &HandlerContext)> {
        self.members.iter().map(|m| (&*m.message, &m.ctx))
    }
}

impl<M> Clone for Batch<M> {
    fn clone(&self) -> Self {
        Self {
            members: Arc::clone(&self.members),
        }
    }
}

impl<M> fmt::Debug for Batch<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.members.len())
            .field(
                "keys",
                &self
                    .members
                    .iter()
                    .map(|m| m.ctx.key().short().to_string())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// What a batch handler reports when it returns `Ok`: the messages of its batch that failed,
/// each with its [`HandlerError`]; every other message succeeded.
///
/// The worker then acks the messages that succeeded and releases or dead-letters those that
/// failed (as the error's [kind](super::HandlerErrorKind) and the attempts left say), all in one
/// transaction: for a [transactional batch handler](super::WorkerBuilder::transactional_batch),
/// the handler's own transaction, so **its writes commit whatever the messages' results**: fail
/// a message before writing its effects, or return `Err` to roll everything back.
///
/// ```
/// use spanner_queues::HandlerError;
/// use spanner_queues::worker::BatchOutcome;
///
/// let mut outcome = BatchOutcome::new();
/// outcome.fail(2, HandlerError::dead_letter("no such customer"));
/// outcome.fail(5, HandlerError::msg("rate limited"));
/// assert_eq!(outcome.failures().map(|(i, _)| i).collect::<Vec<_>>(), [2, 5]);
/// ```
#[derive(Debug, Default)]
#[must_use]
pub struct BatchOutcome {
    failed: Vec<(usize, HandlerError)>,
}

impl BatchOutcome {
    /// Every message succeeded (so far: add failures with [`fail`](Self::fail)).
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the message at `index` of the batch as failed with `error`. A second failure of
    /// the same message is ignored, and so is an index outside the batch (with a warning).
    pub fn fail(&mut self, index: usize, error: impl Into<HandlerError>) -> &mut Self {
        if !self.failed.iter().any(|(i, _)| *i == index) {
            self.failed.push((index, error.into()));
        }
        self
    }

    /// As [`fail`](Self::fail), by value.
    pub fn with_failure(mut self, index: usize, error: impl Into<HandlerError>) -> Self {
        self.fail(index, error);
        self
    }

    /// The failed messages' indices and errors, in the order they were marked.
    pub fn failures(&self) -> impl ExactSizeIterator<Item = (usize, &HandlerError)> {
        self.failed.iter().map(|(i, e)| (*i, e))
    }

    /// Whether every message succeeded.
    pub fn is_success(&self) -> bool {
        self.failed.is_empty()
    }

    /// The failures, taken out.
    pub(super) fn into_failures(self) -> Vec<(usize, HandlerError)> {
        self.failed
    }
}

impl From<()> for BatchOutcome {
    /// Every message succeeded.
    fn from((): ()) -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_keeps_the_first_failure_of_each_message() {
        let mut outcome = BatchOutcome::new();
        assert!(outcome.is_success());
        outcome
            .fail(3, HandlerError::msg("first"))
            .fail(1, HandlerError::msg("other"))
            .fail(3, HandlerError::msg("second"));
        let failures: Vec<(usize, String)> = outcome
            .failures()
            .map(|(i, e)| (i, e.to_string()))
            .collect();
        assert_eq!(failures, [(3, "first".into()), (1, "other".into())]);
        assert!(!outcome.is_success());
        assert!(BatchOutcome::from(()).is_success());
    }
}
