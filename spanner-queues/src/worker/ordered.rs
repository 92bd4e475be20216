//! Per-key ordering in the worker: the policy, the in-memory gate of one worker, and the check
//! (with its release) before a handler runs. The guarantee is described in
//! [`crate::ordering`].

use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use google_cloud_spanner::key::{Key, KeyRange, KeySet};
use google_cloud_spanner::read::ReadRequest;
use google_cloud_spanner::transaction::ReadWriteTransaction;
use google_cloud_spanner::value::Value;

use crate::bounds;
use crate::codec::Payload;
use crate::error::Result;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::ordering::{earlier_in_queue, split, wire_prefix};
use crate::queue::{DeliverAt, Queue};
use crate::util::lock;

use super::tables;

/// What a dead-lettered message of an ordered queue means for the later messages of its
/// ordering key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DeadLetterOrdering {
    /// The later messages wait until the dead letter is replayed (it goes back to its place)
    /// or deleted. The default: nothing of the key runs past a message that was not handled.
    #[default]
    Block,
    /// The later messages go on as if the dead-lettered message had been handled.
    Skip,
}

/// How a worker of an ordered queue ([`QueueMessage::ORDERED`]) keeps per-key order; see
/// [the `ordering` module](crate::ordering) for the guarantee.
///
/// ```
/// use std::time::Duration;
/// use spanner_queues::worker::{DeadLetterOrdering, OrderingPolicy};
///
/// let policy = OrderingPolicy::default()
///     .with_dead_letters(DeadLetterOrdering::Skip)
///     .with_recheck_delay(Duration::from_millis(200));
/// assert_eq!(policy.recheck_delay(), Duration::from_millis(200));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OrderingPolicy {
    dead_letters: DeadLetterOrdering,
    recheck_delay: Duration,
    blocked_delay: Duration,
}

impl Default for OrderingPolicy {
    fn default() -> Self {
        Self {
            dead_letters: DeadLetterOrdering::Block,
            recheck_delay: Duration::from_millis(250),
            blocked_delay: Duration::from_secs(30),
        }
    }
}

const RECHECK_DELAY: RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::HOUR;
const BLOCKED_DELAY: RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::DAY;

impl OrderingPolicy {
    /// Whether a dead letter blocks the later messages of its ordering key (default
    /// [`DeadLetterOrdering::Block`]).
    pub fn with_dead_letters(mut self, dead_letters: DeadLetterOrdering) -> Self {
        self.dead_letters = dead_letters;
        self
    }

    /// How long a message waits when an earlier message of its ordering key is due or being
    /// handled now, or after an earlier one that is scheduled becomes due (default 250 ms;
    /// from 1 ms to 1 hour), once per sequence between them, at most 32 times: a message
    /// further behind comes back later. Each wait costs one transaction (the release).
    pub fn with_recheck_delay(mut self, delay: Duration) -> Self {
        self.recheck_delay = delay;
        self
    }

    /// How long a message waits when an earlier message of its ordering key is dead-lettered
    /// and dead letters block (default 30 s; from 1 ms to 24 hours): after a replay, the key
    /// goes on within about this long.
    pub fn with_blocked_delay(mut self, delay: Duration) -> Self {
        self.blocked_delay = delay;
        self
    }

    /// Whether dead letters block their ordering key.
    pub fn dead_letters(&self) -> DeadLetterOrdering {
        self.dead_letters
    }

    /// The wait behind an earlier message that is due or being handled.
    pub fn recheck_delay(&self) -> Duration {
        self.recheck_delay
    }

    /// The wait behind a dead-lettered earlier message.
    pub fn blocked_delay(&self) -> Duration {
        self.blocked_delay
    }

    /// Checks the delays against their ranges; building a [`Worker`](crate::Worker) calls it.
    pub(crate) fn validate(&self) -> Result<()> {
        bounds::in_range("recheck_delay", self.recheck_delay, RECHECK_DELAY)?;
        bounds::in_range("blocked_delay", self.blocked_delay, BLOCKED_DELAY)
    }
}

/// Whether a message may run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Nothing earlier of its ordering key holds it back. `settled`: nothing earlier of its
    /// ordering key is left at all, in the queue or the dead-letter table (see [`Settled`]).
    Open { settled: bool },
    /// An earlier message of its ordering key is left: come back at this time.
    Wait(DeliverAt),
}

/// Looks, inside `tx`, for an earlier message of `key`'s ordering key in the queue and in the
/// dead-letter table (a dead letter holds the key back when dead letters block; otherwise it
/// only means that the key's past is not settled).
pub(super) async fn check<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    queue: &Queue<M>,
    policy: &OrderingPolicy,
    key: &MessageKey,
) -> Result<Gate> {
    let dialect = queue.dialect();
    if let Some(earlier) = earlier_in_queue::<M>(tx, dialect, key).await? {
        // A message further behind waits longer: each message ahead of it takes at least a
        // transaction, and one that comes back too early is only released again (a
        // transaction, and a trip to the back of the queue, each time).
        let wait = policy.recheck_delay * waits_behind(earlier.ahead);
        return Ok(Gate::Wait(match earlier.due {
            // Scheduled (or waiting for a retry): come back just after it is due, by
            // Spanner's clock.
            Some(at) if at > SystemTime::now() => DeliverAt::Time(at + wait),
            // Due, or leased and being handled.
            _ => DeliverAt::After(wait),
        }));
    }
    let dead = dead_letter_before::<M>(tx, dialect, key).await?;
    if dead && policy.dead_letters == DeadLetterOrdering::Block {
        return Ok(Gate::Wait(DeliverAt::After(policy.blocked_delay)));
    }
    Ok(Gate::Open { settled: !dead })
}

/// The most recheck delays a message waits behind the earlier messages of its ordering key.
const MAX_WAITS_BEHIND: u32 = 32;

/// How many recheck delays a message waits when the earliest message of its ordering key left
/// is `ahead` sequences before it: one per message ahead, at most [`MAX_WAITS_BEHIND`].
fn waits_behind(ahead: i64) -> u32 {
    u32::try_from(ahead.clamp(1, i64::from(MAX_WAITS_BEHIND))).unwrap_or(1)
}

/// Ordering keys kept by [`Settled`] at most; past it, it starts over (which costs only reads).
const SETTLED_KEYS: usize = 10_000;

/// Per ordering key, the highest sequence this worker handled (committed, with its ack) at a
/// time when no earlier message of the key was left, neither in the queue nor in the
/// dead-letter table.
///
/// That state is stable: sequences are assigned in commit order, so no message with a lower
/// sequence can be sent after it, and only a dead letter can come back to the queue (a
/// replay), of which there was none. So once the worker handled sequence `n` of a key that
/// way, the message with sequence `n + 1` has nothing earlier left, and its transaction needs
/// no ordering reads: its ack still asserts that the message is there, so a message handled
/// meanwhile elsewhere is refused as before. Handled that way, `n + 1` is settled in turn.
///
/// This rests on sequences coming only from the counter rows: a counter row deleted while
/// workers run (sequences starting over) or keys sent with hand-picked sequences would break
/// it, as they break ordering itself.
///
/// An external handler's check comes before it runs, in a transaction of its own; a message
/// whose check found nothing earlier left is *cleared* until its ack, which then records it.
#[derive(Debug, Default)]
pub(super) struct Settled {
    last: Mutex<HashMap<MessageKey, i64>>,
    cleared: Mutex<HashSet<MessageKey>>,
}

impl Settled {
    /// Whether `key` directly follows the last settled message of its ordering key.
    pub(super) fn follows(&self, key: &MessageKey) -> bool {
        split(key).is_some_and(|(ordering_key, sequence)| {
            lock(&self.last).get(&ordering_key) == Some(&(sequence - 1))
        })
    }

    /// Records that `key` was handled while nothing earlier of its ordering key was left.
    pub(super) fn record(&self, key: &MessageKey) {
        let Some((ordering_key, sequence)) = split(key) else {
            return;
        };
        let mut last = lock(&self.last);
        if last.len() >= SETTLED_KEYS && !last.contains_key(&ordering_key) {
            last.clear();
        }
        let at = last.entry(ordering_key).or_insert(sequence);
        *at = (*at).max(sequence);
    }

    /// External handlers: nothing earlier of `key`'s ordering key is left (a fact that stays
    /// true); [`acked`](Self::acked) records it once it is acked.
    pub(super) fn clear(&self, key: &MessageKey) {
        let mut cleared = lock(&self.cleared);
        // An attempt that ends without an ack leaves its key here; forgetting costs reads.
        if cleared.len() >= SETTLED_KEYS {
            cleared.clear();
        }
        cleared.insert(key.clone());
    }

    /// External handlers: `key` was acked; records it if it was cleared.
    pub(super) fn acked(&self, key: &MessageKey) {
        if lock(&self.cleared).remove(key) {
            self.record(key);
        }
    }
}

/// Whether a message of `key`'s ordering key with a lower sequence is in the dead-letter
/// table: reads the queue's dead letters (a key range) and compares their keys.
async fn dead_letter_before<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    dialect: crate::dialect::Dialect,
    key: &MessageKey,
) -> Result<bool> {
    let Some((ordering_key, sequence)) = split(key) else {
        return Ok(false);
    };
    let prefix = wire_prefix(&ordering_key);
    let queue = Key::new(vec![Value::from(M::QUEUE.as_str().to_owned())]);
    let read = ReadRequest::builder(
        tables::table_names(dialect).1,
        vec![tables::column(dialect, "MessageKey").into_owned()],
    )
    .with_keys(KeySet::from(KeyRange::closed_closed(queue.clone(), queue)))
    .build();
    let mut rows = tx.execute_read(read).await?;
    let mut earlier = false;
    while let Some(row) = rows.next().await {
        let text: String = row?.get(0)?;
        if text.starts_with(&prefix)
            && let Some(letter) = MessageKey::from_wire(&text)
            && let Some((_, dead)) = split(&letter)
            && dead < sequence
        {
            earlier = true;
        }
    }
    Ok(earlier)
}

/// Releases a message that must wait, inside `tx`: acks it and sends it again with the same
/// key and payload, due at `at`. Not an attempt.
pub(super) async fn release_waiting<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    queue: &Queue<M>,
    key: &MessageKey,
    payload: Payload,
    at: DeliverAt,
) -> Result<()> {
    queue.ack_key(tx, key.clone()).await?;
    queue.send_raw(tx, key.clone(), payload, at).await
}

/// The ordering keys whose messages are running in one worker.
#[derive(Debug, Default, Clone)]
pub(super) struct Running(Arc<Mutex<HashSet<MessageKey>>>);

impl Running {
    /// Marks `key`'s ordering key as running until the returned guard is dropped.
    pub(super) fn enter(&self, key: &MessageKey) -> RunningGuard {
        let ordering_key = split(key).map(|(ordering_key, _)| ordering_key);
        if let Some(ordering_key) = &ordering_key {
            lock(&self.0).insert(ordering_key.clone());
        }
        RunningGuard {
            running: self.clone(),
            ordering_key,
        }
    }

    /// The index in `waiting` of the message to start next: the lowest sequence of the first
    /// ordering key (in arrival order) that has no message running. Keys that do not split
    /// (they will be dead-lettered) may always start.
    pub(super) fn pick<'a>(&self, waiting: impl Iterator<Item = &'a MessageKey>) -> Option<usize> {
        let running = lock(&self.0);
        let mut chosen: Option<(usize, MessageKey, i64)> = None;
        for (i, key) in waiting.enumerate() {
            let Some((ordering_key, sequence)) = split(key) else {
                if chosen.is_none() {
                    return Some(i);
                }
                continue;
            };
            match &mut chosen {
                None if !running.contains(&ordering_key) => {
                    chosen = Some((i, ordering_key, sequence));
                }
                Some((at, chosen_key, lowest))
                    if *chosen_key == ordering_key && sequence < *lowest =>
                {
                    *at = i;
                    *lowest = sequence;
                }
                _ => {}
            }
        }
        chosen.map(|(i, _, _)| i)
    }
}

/// Removes an ordering key from [`Running`] when dropped.
pub(super) struct RunningGuard {
    running: Running,
    ordering_key: Option<MessageKey>,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if let Some(ordering_key) = &self.ordering_key {
            lock(&self.running.0).remove(ordering_key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::key::TypedKey as _;

    fn key(conversation: &str, sequence: i64) -> MessageKey {
        (conversation.to_owned(), sequence).to_message_key()
    }

    #[test]
    fn one_message_per_ordering_key_runs_and_the_lowest_sequence_goes_first() {
        let running = Running::default();
        let waiting = [key("a", 2), key("b", 5), key("a", 1), key("b", 4)];
        // Nothing runs: the first key in arrival order, at its lowest sequence.
        assert_eq!(running.pick(waiting.iter()), Some(2));
        let a = running.enter(&waiting[2]);
        // `a` runs: `b`, at its lowest sequence.
        assert_eq!(running.pick(waiting.iter()), Some(3));
        let b = running.enter(&waiting[3]);
        assert_eq!(running.pick(waiting.iter()), None);
        drop(a);
        assert_eq!(running.pick(waiting.iter()), Some(2));
        drop(b);
        // A key that does not split (not an ordered key) is never held back.
        let odd = [1_i64.to_message_key()];
        let _a = running.enter(&key("a", 0));
        assert_eq!(running.pick(odd.iter()), Some(0));
    }

    #[test]
    fn only_the_message_right_after_a_settled_one_skips_the_reads() {
        let settled = Settled::default();
        assert!(!settled.follows(&key("a", 0)), "nothing settled yet");
        settled.record(&key("a", 4));
        assert!(settled.follows(&key("a", 5)));
        // A gap (a message in between may be left), the same or an older sequence, another
        // ordering key: all of them are checked.
        for other in [key("a", 6), key("a", 4), key("a", 3), key("b", 5)] {
            assert!(!settled.follows(&other), "{other}");
        }
        settled.record(&key("a", 5));
        assert!(settled.follows(&key("a", 6)));
        // A late record of an older sequence never moves it back.
        settled.record(&key("a", 2));
        assert!(settled.follows(&key("a", 6)));
        // Keys that do not split are never settled.
        settled.record(&7_i64.to_message_key());
        assert!(!settled.follows(&8_i64.to_message_key()));
    }

    #[test]
    fn a_cleared_message_is_settled_by_its_ack_only() {
        let settled = Settled::default();
        settled.acked(&key("a", 0));
        assert!(
            !settled.follows(&key("a", 1)),
            "acked without being cleared"
        );
        settled.clear(&key("a", 0));
        assert!(!settled.follows(&key("a", 1)), "cleared, not yet acked");
        settled.acked(&key("a", 0));
        assert!(settled.follows(&key("a", 1)));
    }

    #[test]
    fn a_message_further_behind_waits_longer_up_to_a_bound() {
        assert_eq!(waits_behind(1), 1);
        assert_eq!(waits_behind(5), 5);
        assert_eq!(waits_behind(0), 1);
        assert_eq!(waits_behind(-3), 1);
        assert_eq!(waits_behind(1_000), MAX_WAITS_BEHIND);
        assert_eq!(waits_behind(i64::MAX), MAX_WAITS_BEHIND);
    }

    #[test]
    fn settled_keys_are_bounded() {
        let settled = Settled::default();
        for i in 0..SETTLED_KEYS {
            settled.record(&key(&format!("k{i}"), 0));
        }
        assert!(settled.follows(&key("k0", 1)));
        // One more key starts over: forgetting only costs reads.
        settled.record(&key("new", 0));
        assert!(!settled.follows(&key("k0", 1)));
        assert!(settled.follows(&key("new", 1)));
        assert_eq!(lock(&settled.last).len(), 1);
    }

    #[test]
    fn the_policy_bounds_its_delays() {
        let named = |policy: OrderingPolicy| match policy.validate() {
            Ok(()) => None,
            Err(Error::InvalidSetting { setting, .. }) => Some(setting),
            Err(other) => panic!("{other:?}"),
        };
        assert_eq!(named(OrderingPolicy::default()), None);
        let policy = OrderingPolicy::default();
        assert_eq!(
            named(policy.clone().with_recheck_delay(Duration::ZERO)),
            Some("recheck_delay")
        );
        assert_eq!(named(policy.clone().with_recheck_delay(bounds::HOUR)), None);
        assert_eq!(
            named(
                policy
                    .clone()
                    .with_recheck_delay(bounds::HOUR + Duration::from_millis(1))
            ),
            Some("recheck_delay")
        );
        assert_eq!(
            named(policy.clone().with_blocked_delay(Duration::ZERO)),
            Some("blocked_delay")
        );
        assert_eq!(
            named(policy.with_blocked_delay(Duration::MAX)),
            Some("blocked_delay")
        );
        assert_eq!(
            OrderingPolicy::default().dead_letters(),
            DeadLetterOrdering::Block
        );
    }
}
