//! Per-key ordering in the worker: the policy; what one worker knows of each ordering key
//! ([`Floors`]); the messages it keeps leased while they wait for an earlier message of their
//! key ([`Holding`]), with the read-only look at those earlier messages ([`look_back`]); and the
//! check inside a handler's transaction, with its release, for the one case a look cannot
//! settle (a dead letter that does not block). The guarantee is described in
//! [`crate::ordering`].

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::key::{Key, KeyRange, KeySet};
use google_cloud_spanner::read::ReadRequest;
use google_cloud_spanner::result::ResultSet;
use google_cloud_spanner::transaction::{ReadWriteTransaction, TimestampBound};
use google_cloud_spanner::value::Value;

use crate::bounds;
use crate::codec::Payload;
use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::ordering::{EarlierLeft, earlier_in_queue, earlier_read, read_earlier, split};
use crate::queue::{DeliverAt, Queue};
use crate::receive::Delivery;
use crate::util::lock;

use super::tables::{self, Prefetched};

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
/// [the `ordering` module](crate::ordering) for the guarantee and what waiting costs.
///
/// ```
/// use std::time::Duration;
/// use spanner_queues::worker::{DeadLetterOrdering, OrderingPolicy};
///
/// let policy = OrderingPolicy::default()
///     .with_dead_letters(DeadLetterOrdering::Skip)
///     .with_recheck_delay(Duration::from_millis(100))
///     .with_max_held(5_000);
/// assert_eq!(policy.max_held(), 5_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OrderingPolicy {
    dead_letters: DeadLetterOrdering,
    recheck_delay: Duration,
    blocked_delay: Duration,
    max_held: usize,
}

impl Default for OrderingPolicy {
    fn default() -> Self {
        Self {
            dead_letters: DeadLetterOrdering::Block,
            recheck_delay: Duration::from_millis(100),
            blocked_delay: Duration::from_secs(30),
            max_held: 100,
        }
    }
}

const RECHECK_DELAY: RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::HOUR;
const BLOCKED_DELAY: RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::DAY;
/// The worker checks concurrency + prefetch + `max_held` against the receiver's slots.
const MAX_HELD: RangeInclusive<usize> = 0..=100_000;

impl OrderingPolicy {
    /// Whether a dead letter blocks the later messages of its ordering key (default
    /// [`DeadLetterOrdering::Block`]).
    pub fn with_dead_letters(mut self, dead_letters: DeadLetterOrdering) -> Self {
        self.dead_letters = dead_letters;
        self
    }

    /// How often a worker looks again at the earlier messages of the ordering keys whose
    /// messages it holds (default 100 ms; from 1 ms to 1 hour). One look is two reads for
    /// every key due (the earlier messages' rows, and the queue's dead letters), whatever the
    /// number of keys; a message that must wait is released instead of held (see
    /// [`with_max_held`](Self::with_max_held)) to come back this long after the earlier one is
    /// due, once per sequence between them, at most 32 times. A key whose earlier message
    /// another worker handles goes on about half this long after that message's ack, on
    /// average: shorter hands keys over sooner and reads more often.
    pub fn with_recheck_delay(mut self, delay: Duration) -> Self {
        self.recheck_delay = delay;
        self
    }

    /// How long a message waits when an earlier message of its ordering key is dead-lettered
    /// and dead letters block (default 30 s; from 1 ms to 24 hours): it is released to come
    /// back after this long, so after a replay the key goes on within about this long.
    pub fn with_blocked_delay(mut self, delay: Duration) -> Self {
        self.blocked_delay = delay;
        self
    }

    /// How many messages that wait for an earlier message of their ordering key a worker keeps
    /// leased in memory, beyond its handlers and prefetch (default 100; from 0 to 100,000,
    /// and concurrency + prefetch + this at most 100,000). Its receiver holds that many
    /// messages at most; their leases are renewed with the others (one `RENEWLEASE` call per
    /// 500 leases a round), and each keeps its payload in memory. When they fill the receiver,
    /// none may run, none runs, and no look sees the earlier messages of their keys go, for
    /// fifty recheck delays (from 10 s to 2 minutes), the messages its keys wait for cannot
    /// reach it: it releases a quarter of what it holds, the messages furthest behind their
    /// key (an ack and a re-send each, in transactions of up to 50, counted in
    /// [`WorkerStats::waited`](crate::worker::WorkerStats::waited)). At 0 every message that
    /// must wait is released (one transaction each), to come back after the recheck delay once
    /// per sequence it is behind.
    ///
    /// More holds more of a deep backlog without releases (a key's head that comes back late, a
    /// retry behind the messages queued before it, must find a free slot in some worker), but
    /// costs renewals: on a slow backend (the emulator's PostgreSQL dialect) a worker holding
    /// 1,000 messages lost most of their leases before it could renew them, and the first
    /// worker to start takes that much of a backlog alone.
    pub fn with_max_held(mut self, messages: usize) -> Self {
        self.max_held = messages;
        self
    }

    /// Whether dead letters block their ordering key.
    pub fn dead_letters(&self) -> DeadLetterOrdering {
        self.dead_letters
    }

    /// How often a worker looks again at a key whose messages wait.
    pub fn recheck_delay(&self) -> Duration {
        self.recheck_delay
    }

    /// The wait behind a dead-lettered earlier message.
    pub fn blocked_delay(&self) -> Duration {
        self.blocked_delay
    }

    /// How many waiting messages a worker holds at most.
    pub fn max_held(&self) -> usize {
        self.max_held
    }

    /// Checks the settings against their ranges; building a [`Worker`](crate::Worker) calls it.
    pub(crate) fn validate(&self) -> Result<()> {
        bounds::in_range("recheck_delay", self.recheck_delay, RECHECK_DELAY)?;
        bounds::in_range("blocked_delay", self.blocked_delay, BLOCKED_DELAY)?;
        bounds::in_range("max_held", self.max_held, MAX_HELD)
    }
}

/// Whether a message may run now, as the check inside its handler's transaction found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Nothing earlier of its ordering key holds it back. `settled`: nothing earlier of its
    /// ordering key is left at all, in the queue or the dead-letter table (see [`Floors`]).
    Open { settled: bool },
    /// An earlier message of its ordering key is left: come back at this time.
    Wait(DeliverAt),
}

/// Looks, inside `tx`, for an earlier message of `key`'s ordering key in the queue and in the
/// dead-letter table (a dead letter holds the key back when dead letters block; otherwise it
/// only means that the key's past is not settled). The worker runs it only for a message a
/// read-only look found behind a dead letter that does not block: a replay could put that
/// dead letter back before the message's transaction commits.
pub(super) async fn check<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    queue: &Queue<M>,
    policy: &OrderingPolicy,
    key: &MessageKey,
) -> Result<Gate> {
    let dialect = queue.dialect();
    if let Some(earlier) = earlier_in_queue::<M>(tx, dialect, key).await? {
        let wait = policy.recheck_delay * waits_behind(earlier.ahead);
        return Ok(Gate::Wait(match earlier.due {
            // Scheduled (or waiting for a retry): come back just after it is due, by
            // Spanner's clock.
            Some(at) if at > SystemTime::now() => DeliverAt::Time(at + wait),
            // Due, or leased and being handled.
            _ => DeliverAt::After(wait),
        }));
    }
    let dead = match split(key) {
        Some((ordering_key, sequence)) => {
            let rows = tx.execute_read(dead_letters_read::<M>(dialect)).await?;
            let texts = dead_letter_keys(rows).await?;
            dead_sequences(texts.iter().map(String::as_str))
                .get(&ordering_key)
                .is_some_and(|&lowest| lowest < sequence)
        }
        None => false,
    };
    if dead && policy.dead_letters == DeadLetterOrdering::Block {
        return Ok(Gate::Wait(DeliverAt::After(policy.blocked_delay)));
    }
    Ok(Gate::Open { settled: !dead })
}

/// The most recheck delays a released message waits behind the earlier messages of its key.
const MAX_WAITS_BEHIND: u32 = 32;

/// How many recheck delays a released message waits when the earliest message of its ordering
/// key left is `ahead` sequences before it: one per message ahead, at most
/// [`MAX_WAITS_BEHIND`]. A message further behind waits longer: each message ahead of it takes
/// at least a transaction, and one that comes back too early waits again.
fn waits_behind(ahead: i64) -> u32 {
    u32::try_from(ahead.clamp(1, i64::from(MAX_WAITS_BEHIND))).unwrap_or(1)
}

/// The read of the queue's dead letters (their keys): one key range of the dead-letter table.
fn dead_letters_read<M: QueueMessage>(dialect: Dialect) -> ReadRequest {
    let queue = Key::new(vec![Value::from(M::QUEUE.as_str().to_owned())]);
    ReadRequest::builder(
        tables::table_names(dialect).1,
        vec![tables::column(dialect, "MessageKey").into_owned()],
    )
    .with_keys(KeySet::from(KeyRange::closed_closed(queue.clone(), queue)))
    .build()
}

/// The lowest dead-lettered sequence of each ordering key, from the key texts of dead letters.
fn dead_sequences<'a>(texts: impl IntoIterator<Item = &'a str>) -> HashMap<MessageKey, i64> {
    let mut lowest: HashMap<MessageKey, i64> = HashMap::new();
    for text in texts {
        if let Some(letter) = MessageKey::from_wire(text)
            && let Some((ordering_key, sequence)) = split(&letter)
        {
            let at = lowest.entry(ordering_key).or_insert(sequence);
            *at = (*at).min(sequence);
        }
    }
    lowest
}

/// The key texts of the queue's dead letters, from [`dead_letters_read`].
async fn dead_letter_keys(mut rows: ResultSet) -> Result<Vec<String>> {
    let mut texts = Vec::new();
    while let Some(row) = rows.next().await {
        texts.push(row?.get::<String>(0)?);
    }
    Ok(texts)
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

/// Ordering keys kept by [`Floors`] at most; past it, it starts over (which costs only reads).
const FLOOR_KEYS: usize = 10_000;

/// Per ordering key, its **floor**: a sequence below which nothing of the key is left, neither
/// in the queue nor in the dead-letter table, as this worker learned it.
///
/// A floor only rises, and what it says stays true: sequences are assigned in commit order, so
/// no message with a lower sequence is sent after it; a release puts a message back in the
/// same transaction that acks it (so it never leaves the queue); and only a dead letter comes
/// back to the queue (a replay), of which there was none below the floor. So a message whose
/// sequence is at most its key's floor has nothing earlier left, and runs with no ordering
/// reads (its ack still asserts that it is there, so a message handled meanwhile elsewhere is
/// refused as before); once it is acked, the floor moves past it. Sequences start at 0, so
/// every key's floor is at least 0: the first message of a key never waits.
///
/// Floors rise from three facts: a read-only look that found nothing earlier left (or the
/// lowest sequence left), a check inside a handler's transaction that found nothing earlier,
/// and an ack of a message at or below the floor.
///
/// This rests on sequences coming only from the counter rows: a counter row deleted while
/// workers run (sequences starting over) would break it, as it breaks ordering itself.
#[derive(Debug, Default)]
pub(super) struct Floors(Mutex<HashMap<MessageKey, i64>>);

impl Floors {
    /// The floor of `ordering_key` (0 when nothing is known).
    fn get(&self, ordering_key: &MessageKey) -> i64 {
        lock(&self.0).get(ordering_key).copied().unwrap_or(0)
    }

    /// Whether nothing earlier than `key` is left in its ordering key (`key` is a full key).
    #[cfg(test)]
    pub(super) fn clear(&self, key: &MessageKey) -> bool {
        split(key).is_some_and(|(ordering_key, sequence)| sequence <= self.get(&ordering_key))
    }

    /// Records that nothing of `ordering_key` below `floor` is left.
    pub(super) fn raise(&self, ordering_key: &MessageKey, floor: i64) {
        let mut floors = lock(&self.0);
        if floors.len() >= FLOOR_KEYS && !floors.contains_key(ordering_key) {
            floors.clear();
        }
        let at = floors.entry(ordering_key.clone()).or_insert(floor);
        *at = (*at).max(floor);
    }

    /// Records that `key` (a full key) was acked: if nothing earlier of its ordering key was
    /// left, nothing up to it is.
    pub(super) fn acked(&self, key: &MessageKey) {
        if let Some((ordering_key, sequence)) = split(key)
            && sequence <= self.get(&ordering_key)
        {
            self.raise(&ordering_key, sequence + 1);
        }
    }

    /// Records that nothing earlier than `key` (a full key) is left.
    pub(super) fn settle(&self, key: &MessageKey) {
        if let Some((ordering_key, sequence)) = split(key) {
            self.raise(&ordering_key, sequence);
        }
    }
}

/// How a message of an ordered queue may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Clearance {
    /// Nothing earlier of its ordering key is left (its sequence is at most the key's floor):
    /// no ordering reads.
    Clear,
    /// A look found only a dead letter before it, which does not block: its handler's
    /// transaction checks again (a replay could bring the dead letter back meanwhile).
    Check,
}

/// What [`Holding`] needs of a received message ([`Delivery`]; a plain value in unit tests).
pub(super) trait Waiter {
    /// Its full key.
    fn key(&self) -> &MessageKey;
    /// Whether its lease is lost.
    fn is_lease_lost(&self) -> bool;
}

impl<M: QueueMessage> Waiter for Delivery<M> {
    fn key(&self) -> &MessageKey {
        Delivery::key(self)
    }

    fn is_lease_lost(&self) -> bool {
        Delivery::is_lease_lost(self)
    }
}

/// A message waiting in a worker, with its attempt count if it was read ahead.
#[derive(Debug)]
pub(super) struct Entry<D> {
    pub(super) delivery: D,
    pub(super) count: Option<Prefetched>,
    /// When it arrived, in the worker's order of arrival (the oldest runnable goes first).
    arrived: u64,
    /// When it arrived (a batch lingers from its oldest message's arrival).
    arrived_at: Instant,
}

/// The messages of one ordering key that wait in a worker, by sequence.
#[derive(Debug)]
struct KeyWaits<D> {
    by_sequence: BTreeMap<i64, Entry<D>>,
    /// When its lowest message may be looked at again; `None`: as soon as possible.
    next_look: Option<Instant>,
    /// A look at it is on its way.
    looking: bool,
    /// A look found only a non-blocking dead letter before this sequence: it may run, with
    /// its check in its transaction ([`Clearance::Check`]).
    unsettled: Option<i64>,
    /// The key's place among the keys (the worker's arrival count when it came, or when it
    /// last went to the back): the key that came first runs first, see [`Holding::next`].
    turn: u64,
    /// Messages of the key started since it last went to the back.
    started: u32,
}

impl<D> KeyWaits<D> {
    fn new(turn: u64) -> Self {
        Self {
            by_sequence: BTreeMap::new(),
            next_look: None,
            looking: false,
            unsettled: None,
            turn,
            started: 0,
        }
    }
}

/// Messages of one key a worker starts in a row, at most, while other keys' messages may run
/// too: then the key goes behind them (see [`Holding::next`]).
const KEY_QUANTUM: u32 = 32;

/// What a worker does next with a waiting message (see [`Holding::next`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Pick {
    /// A message whose key does not split into an ordering key and a sequence (it will be
    /// dead-lettered): at once.
    Odd,
    /// The lowest waiting message of this ordering key.
    Key(MessageKey, Clearance),
}

/// A message to release: its key, payload and when it comes back.
#[derive(Debug)]
pub(super) struct Release {
    pub(super) key: MessageKey,
    pub(super) payload: Payload,
    pub(super) at: DeliverAt,
}

/// The messages of an ordered queue received by one worker and not started yet.
///
/// Each ordering key's messages wait here in sequence order, leased (the receiver renews their
/// leases with its others, one call per round). A key's lowest message runs when nothing
/// earlier of its key is left ([`Floors`]) and no message of the key runs here; otherwise the
/// worker looks at the key's earlier messages in read-only queries ([`look_back`]), every
/// [`recheck_delay`](OrderingPolicy::recheck_delay) while one is left, never in a read-write
/// transaction. A message is released (an ack and a re-send, in one transaction) only when the
/// worker is stuck (see [`overflow`](Self::overflow)), when a dead letter blocks its key, when
/// the earlier message is scheduled past [`HOLD_HORIZON`], or when
/// [`max_held`](OrderingPolicy::max_held) is 0.
#[derive(Debug)]
pub(super) struct Holding<D> {
    policy: OrderingPolicy,
    floors: Arc<Floors>,
    running: Running,
    keys: HashMap<MessageKey, KeyWaits<D>>,
    odd: VecDeque<Entry<D>>,
    held: usize,
    arrivals: u64,
    /// The receiver's slots: once the messages here fill them, it receives no more.
    slots: usize,
    /// Since when the worker has been stuck: its receiver's slots full, nothing running or
    /// runnable, and no look seeing the earlier messages of its keys go.
    stuck_since: Option<Instant>,
}

/// How long a worker stays stuck (see [`Holding::overflow`]) before it releases messages:
/// fifty recheck delays, from 10 s (longer than a lease, so that the messages of a worker
/// that died come back first) to 2 minutes.
fn stuck_after(policy: &OrderingPolicy) -> Duration {
    (policy.recheck_delay * 50).clamp(Duration::from_secs(10), Duration::from_secs(120))
}

/// How far ahead an earlier message may be scheduled for a later one to be held waiting for
/// it; past that, the later one is released to come back when the earlier one is due.
pub(super) const HOLD_HORIZON: Duration = Duration::from_secs(60);

/// Whether the lowest waiting message of `ordering_key` may run (or none waits): nothing
/// earlier is left ([`Floors`]), or a look left the check to its transaction.
fn may_run<D>(floors: &Floors, ordering_key: &MessageKey, waits: &KeyWaits<D>) -> bool {
    waits.by_sequence.keys().next().is_none_or(|&sequence| {
        sequence <= floors.get(ordering_key) || waits.unsettled == Some(sequence)
    })
}

/// One look's answer for one ordering key: what is left before the sequence looked from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Look {
    pub(super) queue: EarlierLeft,
    /// The lowest dead-lettered sequence before it, if any.
    pub(super) dead: Option<i64>,
}

impl<D: Waiter> Holding<D> {
    /// Holding for a worker whose receiver has `slots` slots (concurrency + prefetch +
    /// [`max_held`](OrderingPolicy::max_held)).
    pub(super) fn new(
        policy: OrderingPolicy,
        floors: Arc<Floors>,
        running: Running,
        slots: usize,
    ) -> Self {
        Self {
            policy,
            floors,
            running,
            keys: HashMap::new(),
            odd: VecDeque::new(),
            held: 0,
            arrivals: 0,
            slots,
            stuck_since: None,
        }
    }

    /// Messages waiting here.
    pub(super) fn len(&self) -> usize {
        self.held + self.odd.len()
    }

    /// Adds a received message. A message of the same key already here was delivered again
    /// (its lease was lost, or it would not be delivered again): the new delivery replaces it.
    pub(super) fn push(&mut self, delivery: D) {
        self.arrivals += 1;
        let entry = Entry {
            delivery,
            count: None,
            arrived: self.arrivals,
            arrived_at: Instant::now(),
        };
        let Some((ordering_key, sequence)) = split(entry.delivery.key()) else {
            self.odd.push_back(entry);
            return;
        };
        let turn = self.arrivals;
        let waits = self
            .keys
            .entry(ordering_key)
            .or_insert_with(|| KeyWaits::new(turn));
        if waits.by_sequence.insert(sequence, entry).is_none() {
            self.held += 1;
        }
    }

    /// The message to start next, if one may start: a message whose key does not split, else
    /// the lowest message of the first key (in order of arrival) whose lowest message may run
    /// (nothing earlier of the key is left, no message of the key runs here, the lease is not
    /// lost). A key's messages thus run one after the other, depth first, rather than every
    /// key's first message before any key's second: a key's earlier messages are done sooner,
    /// so that another worker holding its later ones starts sooner. A key goes behind the
    /// others after [`KEY_QUANTUM`] messages in a row.
    pub(super) fn next(&self) -> Option<Pick> {
        if !self.odd.is_empty() {
            return Some(Pick::Odd);
        }
        let running = lock(&self.running.0);
        let mut chosen: Option<((u64, u64), Pick)> = None;
        for (ordering_key, waits) in &self.keys {
            if running.contains(ordering_key) {
                continue;
            }
            let Some((&sequence, entry)) = waits.by_sequence.first_key_value() else {
                continue;
            };
            if entry.delivery.is_lease_lost() {
                continue; // dropped by the next look round
            }
            let clearance = if sequence <= self.floors.get(ordering_key) {
                Clearance::Clear
            } else if waits.unsettled == Some(sequence) {
                Clearance::Check
            } else {
                continue;
            };
            let place = (waits.turn, entry.arrived);
            if chosen.as_ref().is_none_or(|(at, _)| place < *at) {
                chosen = Some((place, Pick::Key(ordering_key.clone(), clearance)));
            }
        }
        chosen.map(|(_, pick)| pick)
    }

    /// How many messages may start now (one per key at most: the keys' lowest messages that
    /// may run, of keys with none running here).
    pub(super) fn runnable(&self) -> usize {
        let running = lock(&self.running.0);
        self.odd.len()
            + self
                .keys
                .iter()
                .filter(|(ordering_key, waits)| {
                    waits
                        .by_sequence
                        .first_key_value()
                        .is_some_and(|(_, entry)| !entry.delivery.is_lease_lost())
                        && !running.contains(*ordering_key)
                        && may_run(&self.floors, ordering_key, waits)
                })
                .count()
    }

    /// Takes the message `pick` names (see [`next`](Self::next)).
    pub(super) fn take(&mut self, pick: &Pick) -> Option<(Entry<D>, Clearance)> {
        match pick {
            Pick::Odd => self.odd.pop_front().map(|e| (e, Clearance::Clear)),
            Pick::Key(ordering_key, clearance) => {
                let waits = self.keys.get_mut(ordering_key)?;
                let (_, entry) = waits.by_sequence.pop_first()?;
                self.held -= 1;
                waits.unsettled = None;
                waits.started += 1;
                if waits.started >= KEY_QUANTUM {
                    waits.started = 0;
                    waits.turn = self.arrivals;
                }
                if waits.by_sequence.is_empty() && !waits.looking {
                    self.keys.remove(ordering_key);
                }
                Some((entry, *clearance))
            }
        }
    }

    /// Batch handlers: takes the message right after `sequence` of `ordering_key` (the
    /// sequence after one just taken for the same batch), if it waits here with its lease.
    /// It may run in the same batch, after that one: it has nothing earlier left once that one
    /// is acked.
    pub(super) fn take_following(
        &mut self,
        ordering_key: &MessageKey,
        sequence: i64,
    ) -> Option<Entry<D>> {
        let waits = self.keys.get_mut(ordering_key)?;
        let (&next, entry) = waits.by_sequence.first_key_value()?;
        if next != sequence.checked_add(1)? || entry.delivery.is_lease_lost() {
            return None;
        }
        let (_, entry) = waits.by_sequence.pop_first()?;
        self.held -= 1;
        waits.unsettled = None;
        waits.started += 1;
        if waits.started >= KEY_QUANTUM {
            waits.started = 0;
            waits.turn = self.arrivals;
        }
        if waits.by_sequence.is_empty() && !waits.looking {
            self.keys.remove(ordering_key);
        }
        Some(entry)
    }

    /// Batch handlers: how many messages the next batch could take now (each runnable key's
    /// lowest message and, with `following`, the messages right after it in sequence), and
    /// when the first of them arrived.
    pub(super) fn batchable(&self, following: bool) -> (usize, Option<Instant>) {
        let running = lock(&self.running.0);
        let mut count = self.odd.len();
        let mut oldest = self.odd.iter().map(|e| e.arrived_at).min();
        for (ordering_key, waits) in &self.keys {
            let Some((&lowest, entry)) = waits.by_sequence.first_key_value() else {
                continue;
            };
            if entry.delivery.is_lease_lost()
                || running.contains(ordering_key)
                || !may_run(&self.floors, ordering_key, waits)
            {
                continue;
            }
            oldest = Some(oldest.map_or(entry.arrived_at, |at| at.min(entry.arrived_at)));
            count += if following {
                waits
                    .by_sequence
                    .keys()
                    .zip(lowest..)
                    .take_while(|(sequence, expected)| **sequence == *expected)
                    .count()
            } else {
                1
            };
        }
        (count, oldest)
    }

    /// The waiting messages that may run now or next, for reading their attempt counts ahead:
    /// of each key, its lowest message if it may run, and its lowest two at most that are at
    /// most one past the key's floor (the one after a message running now, or after the one
    /// that may run, which its ack lets run at once).
    pub(super) fn soon_mut(&mut self) -> impl Iterator<Item = &mut Entry<D>> {
        let floors = &self.floors;
        self.keys.iter_mut().flat_map(move |(ordering_key, waits)| {
            let floor = floors.get(ordering_key);
            let unsettled = waits.unsettled;
            waits
                .by_sequence
                .iter_mut()
                .take(2)
                .filter(move |(sequence, _)| {
                    **sequence <= floor.saturating_add(1) || unsettled == Some(**sequence)
                })
                .map(|(_, entry)| entry)
        })
    }

    /// Drops the messages whose leases were lost (Spanner delivers them again): they can no
    /// longer be acked as they were received, and they hold receiver slots. Returns how many.
    pub(super) fn drop_lost(&mut self) -> usize {
        let mut lost = 0;
        self.keys.retain(|_, waits| {
            let before = waits.by_sequence.len();
            waits.by_sequence.retain(|_, e| !e.delivery.is_lease_lost());
            lost += before - waits.by_sequence.len();
            !waits.by_sequence.is_empty() || waits.looking
        });
        let before = self.odd.len();
        self.odd.retain(|e| !e.delivery.is_lease_lost());
        self.held -= lost;
        lost + before - self.odd.len()
    }

    /// The keys to look at now, each with its lowest sequence: keys whose lowest message may
    /// not run yet, with no message running here and no look on its way, due to be looked at.
    /// Marks them as being looked at.
    pub(super) fn due_looks(&mut self, now: Instant) -> Vec<(MessageKey, i64)> {
        let running = lock(&self.running.0).clone();
        let floors = &self.floors;
        let mut due = Vec::new();
        self.keys.retain(|ordering_key, waits| {
            if waits.by_sequence.is_empty() {
                return waits.looking;
            }
            if waits.looking || running.contains(ordering_key) {
                return true;
            }
            if !may_run(floors, ordering_key, waits)
                && waits.next_look.is_none_or(|at| at <= now)
                && let Some(&sequence) = waits.by_sequence.keys().next()
            {
                waits.looking = true;
                due.push((ordering_key.clone(), sequence));
            }
            true
        });
        due
    }

    /// When the next key is due to be looked at, if one waits for a look (a key
    /// [`due_looks`](Self::due_looks) would take then): `now` for a key never looked at yet.
    pub(super) fn next_look_at(&self, now: Instant) -> Option<Instant> {
        let running = lock(&self.running.0);
        self.keys
            .iter()
            .filter(|(ordering_key, waits)| {
                !waits.looking
                    && !running.contains(*ordering_key)
                    && !may_run(&self.floors, ordering_key, waits)
            })
            .map(|(_, waits)| waits.next_look.unwrap_or(now))
            .min()
    }

    /// Applies a look's answers (`looked`: each key with the sequence it was looked from, and
    /// what was found; `None` if the look failed). Returns the messages to release, with when
    /// they come back: every waiting message of a key blocked by a dead letter, or waiting for
    /// a message scheduled past [`HOLD_HORIZON`].
    pub(super) fn looked(
        &mut self,
        looked: Vec<(MessageKey, i64, Option<Look>)>,
        now: Instant,
    ) -> Vec<(D, DeliverAt)> {
        let mut releases = Vec::new();
        for (ordering_key, sequence, look) in looked {
            let Some(waits) = self.keys.get_mut(&ordering_key) else {
                continue;
            };
            waits.looking = false;
            waits.next_look = Some(now + self.policy.recheck_delay);
            let Some(look) = look else {
                continue; // the look failed: again after the recheck delay
            };
            // Nothing below the lowest message left (in the queue or dead) is left.
            let floor = [look.queue.lowest, look.dead]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(sequence);
            if floor > self.floors.get(&ordering_key) {
                // The key's earlier messages go: the worker is not stuck.
                self.stuck_since = None;
            }
            self.floors.raise(&ordering_key, floor);
            let release_at = match (look.queue.lowest, look.dead) {
                (_, Some(_)) if self.policy.dead_letters == DeadLetterOrdering::Block => {
                    Some(DeliverAt::After(self.policy.blocked_delay))
                }
                (None, Some(_)) => {
                    waits.unsettled = Some(sequence);
                    None
                }
                (Some(lowest), _) => {
                    let wait = self.policy.recheck_delay * waits_behind(sequence - lowest);
                    match look.queue.latest_due {
                        Some(due) if due > SystemTime::now() + HOLD_HORIZON => {
                            Some(DeliverAt::Time(due + self.policy.recheck_delay))
                        }
                        // Holding nothing: released, as if past the bound.
                        Some(due) if self.policy.max_held == 0 && due > SystemTime::now() => {
                            Some(DeliverAt::Time(due + wait))
                        }
                        _ if self.policy.max_held == 0 => Some(DeliverAt::After(wait)),
                        _ => None,
                    }
                }
                (None, None) => None,
            };
            if let Some(at) = release_at {
                let entries = std::mem::take(&mut waits.by_sequence);
                self.held -= entries.len();
                releases.extend(entries.into_values().map(|entry| (entry.delivery, at)));
            }
            if waits.by_sequence.is_empty() {
                self.keys.remove(&ordering_key);
            }
        }
        releases
    }

    /// When the worker is stuck: every slot of its receiver taken by a message here, none of
    /// them may run and none runs, and its looks see none of the earlier messages of its keys
    /// go, for [`stuck_after`] (the messages its keys wait for cannot reach it, and perhaps no
    /// other worker has room for them either). Then it takes a quarter of what it holds, the
    /// messages furthest behind their key's floor, to release: each comes back after the
    /// recheck delay once per sequence it is behind (at most 32 times). Otherwise nothing.
    pub(super) fn overflow(&mut self, now: Instant) -> Vec<(D, DeliverAt)> {
        let full = self.len() >= self.slots;
        if !full || !lock(&self.running.0).is_empty() || self.next().is_some() {
            self.stuck_since = None;
            return Vec::new();
        }
        let since = *self.stuck_since.get_or_insert(now);
        if now.duration_since(since) < stuck_after(&self.policy) {
            return Vec::new();
        }
        self.stuck_since = None;
        let mut releases = Vec::new();
        for _ in 0..(self.held / 4).max(1) {
            let furthest = self
                .keys
                .iter()
                .filter_map(|(ordering_key, waits)| {
                    let (&sequence, _) = waits.by_sequence.last_key_value()?;
                    Some((sequence - self.floors.get(ordering_key), ordering_key))
                })
                .max_by_key(|(behind, _)| *behind)
                .map(|(behind, ordering_key)| (behind, ordering_key.clone()));
            let Some((behind, ordering_key)) = furthest else {
                break;
            };
            let Some(waits) = self.keys.get_mut(&ordering_key) else {
                break;
            };
            let Some((_, entry)) = waits.by_sequence.pop_last() else {
                break;
            };
            self.held -= 1;
            if waits.by_sequence.is_empty() && !waits.looking {
                self.keys.remove(&ordering_key);
            }
            let at = DeliverAt::After(self.policy.recheck_delay * waits_behind(behind));
            releases.push((entry.delivery, at));
        }
        releases
    }

    /// When the worker would be stuck next (see [`overflow`](Self::overflow)), if it is on
    /// its way.
    pub(super) fn stuck_at(&self) -> Option<Instant> {
        self.stuck_since
            .map(|since| since + stuck_after(&self.policy))
    }

    /// Everything waiting here (at shutdown).
    pub(super) fn drain(&mut self) -> Vec<D> {
        self.held = 0;
        let mut out: Vec<D> = self.odd.drain(..).map(|e| e.delivery).collect();
        for (_, waits) in self.keys.drain() {
            out.extend(waits.by_sequence.into_values().map(|e| e.delivery));
        }
        out
    }
}

/// How far in the past a look reads. Any timestamp at which the message looked from is in the
/// queue is as good (what it finds left is only more than is left now, and "nothing earlier
/// left" stays true; a read that does not see that message says nothing, see
/// [`EarlierLeft::seen`]); a past one serves at once, where a strong read may wait (and the
/// queue-aware emulator runs strong reads as locking ones, in turn with the read-write
/// transactions).
///
/// The timestamp comes from this machine's clock, so a server whose clock runs ahead sees the
/// look as staler: the official emulator's runs ahead by about a microsecond per request it
/// serves (300 ms after 55,000 messages), and there deep backlogs ran at two thirds of their
/// pace. Measured alternatives on the emulator: an exact-staleness read-only transaction and a
/// strong one wait for the emulator's clock (deep ratio 0.25 and lower); three strong
/// single-use reads (dead letters, key ranges, dead letters, so that a message moved between
/// the queue and the dead letters meanwhile is seen by one of them) did not wait: GoogleSQL
/// deep ratio 0.72 on a fresh emulator (0.63 reading 100 ms in the past) and 0.78 on an aged
/// one, the PostgreSQL ratio not measured. The emulator front runs strong reads as locking
/// reads, in turn with the transactions. On Cloud Spanner (TrueTime; clients on GCP keep time
/// within milliseconds) the local clock serves without waiting; unconfirmed there whether
/// strong reads would hand a key over sooner. Switching is a change to `look_back` alone.
///
/// Every handover of a key between two workers waits this long at least (the look must read
/// after the earlier message's ack), plus half a recheck delay on average. It was 100 ms
/// until a faster machine showed the cost: on the emulator (GoogleSQL deep backlogs, 40 keys
/// x 50, three workers of four) the ordered workers ran at 179 msg/s with 100 ms, 201 with
/// 10 ms, and 259 with 10 ms and a 100 ms recheck delay (unordered: 310-320). 10 ms stays in
/// the past by the server's clock as long as this machine's clock is not more than that ahead
/// of it; if it is, a look waits for the server's clock by the difference and is no less
/// correct. Unconfirmed on Cloud Spanner whether a read this fresh ever waits there for
/// in-flight commits; if looks turn out slow there, raise this (one constant).
const LOOK_STALENESS: Duration = Duration::from_millis(10);

/// Looks at what is left before each `(ordering key, sequence)` of `wanted`: the lowest
/// sequence of the key still in the queue (and the latest `DeliverTime` among those
/// messages), and the lowest of its dead letters. Two single-use reads at one timestamp,
/// [`LOOK_STALENESS`] ago, so that a message dead-lettered or replayed between them is seen by
/// one or the other: one read of the key ranges up to those sequences (the rows of earlier
/// messages and of the message looked from only) and one of the queue's dead letters. Answers
/// in the order of `wanted`; `None` for every key when a row of the queue could not be told
/// apart, and for a key whose message looked from the read did not see (the timestamp may
/// predate the sends of earlier messages: see [`EarlierLeft::seen`]; the next look tells).
pub(super) async fn look_back<M: QueueMessage>(
    db: &DatabaseClient,
    dialect: Dialect,
    wanted: &[(MessageKey, i64)],
) -> Result<Vec<Option<Look>>> {
    let at = SystemTime::now() - LOOK_STALENESS;
    let bound = || {
        TimestampBound::try_read_timestamp(at).map_err(|e| Error::Precondition {
            reason: format!("the clock reads a time Spanner cannot read at: {e}"),
        })
    };
    let mut rows = db
        .single_use()
        .set_timestamp_bound(bound()?)
        .build()
        .execute_read(earlier_read::<M>(dialect, wanted)?)
        .await?;
    let mut queue = vec![EarlierLeft::default(); wanted.len()];
    let complete = read_earlier::<M>(&mut rows, wanted, &mut queue).await?;
    let rows = db
        .single_use()
        .set_timestamp_bound(bound()?)
        .build()
        .execute_read(dead_letters_read::<M>(dialect))
        .await?;
    let texts = dead_letter_keys(rows).await?;
    let dead = dead_sequences(texts.iter().map(String::as_str));
    Ok(wanted
        .iter()
        .zip(queue)
        .map(|((ordering_key, sequence), queue)| {
            (complete && queue.seen).then(|| Look {
                queue,
                dead: dead.get(ordering_key).copied().filter(|d| d < sequence),
            })
        })
        .collect())
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

    fn ordering(conversation: &str) -> MessageKey {
        conversation.to_owned().to_message_key()
    }

    /// A received message for the unit tests: its key, and whether its lease is lost.
    #[derive(Debug)]
    struct Fake(MessageKey, bool);

    impl Waiter for Fake {
        fn key(&self) -> &MessageKey {
            &self.0
        }

        fn is_lease_lost(&self) -> bool {
            self.1
        }
    }

    fn setup(policy: OrderingPolicy) -> (Holding<Fake>, Arc<Floors>, Running) {
        let slots = 16 + policy.max_held();
        setup_with(policy, slots)
    }

    fn setup_with(policy: OrderingPolicy, slots: usize) -> (Holding<Fake>, Arc<Floors>, Running) {
        let (floors, running) = (Arc::new(Floors::default()), Running::default());
        (
            Holding::new(policy, Arc::clone(&floors), running.clone(), slots),
            floors,
            running,
        )
    }

    fn push(holding: &mut Holding<Fake>, conversation: &str, sequence: i64) {
        holding.push(Fake(key(conversation, sequence), false));
    }

    /// Takes what `next` picks: its key and clearance.
    fn start(holding: &mut Holding<Fake>) -> Option<(MessageKey, Clearance)> {
        let pick = holding.next()?;
        let (entry, clearance) = holding.take(&pick).expect("the pick is there");
        Some((entry.delivery.0, clearance))
    }

    fn found(lowest: Option<i64>, dead: Option<i64>) -> Option<Look> {
        Some(Look {
            queue: EarlierLeft {
                lowest,
                latest_due: None,
                seen: true,
            },
            dead,
        })
    }

    #[test]
    fn the_first_sequence_runs_at_once_and_the_next_one_follows_its_ack() {
        let (mut holding, floors, running) = setup(OrderingPolicy::default());
        push(&mut holding, "a", 1);
        push(&mut holding, "a", 0);
        push(&mut holding, "b", 0);
        // Sequence 0 has nothing before it; the first key to arrive goes first.
        assert_eq!(start(&mut holding), Some((key("a", 0), Clearance::Clear)));
        let a = running.enter(&key("a", 0));
        assert_eq!(start(&mut holding), Some((key("b", 0), Clearance::Clear)));
        // `a` runs here: its next message waits in memory, with no look.
        assert_eq!(start(&mut holding), None);
        assert!(holding.due_looks(Instant::now()).is_empty());
        floors.acked(&key("a", 0));
        drop(a);
        assert_eq!(start(&mut holding), Some((key("a", 1), Clearance::Clear)));
        assert_eq!(holding.len(), 0);
    }

    #[test]
    fn a_batch_takes_a_key_s_next_sequences_only_right_after_the_one_before() {
        let (mut holding, _floors, running) = setup(OrderingPolicy::default());
        for sequence in [0, 1, 2, 4] {
            push(&mut holding, "a", sequence);
        }
        push(&mut holding, "b", 3);
        // `a` may run from 0 (a chain of three: 3 is missing before 4); `b` waits for a look.
        assert_eq!(holding.batchable(true).0, 3);
        assert_eq!(holding.batchable(false).0, 1);
        let (first, clearance) = holding.take(&holding.next().expect("a/0")).expect("a/0");
        assert_eq!(
            (first.delivery.0.clone(), clearance),
            (key("a", 0), Clearance::Clear)
        );
        let _a = running.enter(&first.delivery.0);
        // Only the very next sequence follows, never past a gap.
        assert!(holding.take_following(&ordering("a"), 1).is_none());
        let next = holding.take_following(&ordering("a"), 0).expect("a/1");
        assert_eq!(next.delivery.0, key("a", 1));
        let next = holding.take_following(&ordering("a"), 1).expect("a/2");
        assert_eq!(next.delivery.0, key("a", 2));
        assert!(
            holding.take_following(&ordering("a"), 2).is_none(),
            "3 is not here"
        );
        // `a` runs: nothing else may start.
        assert_eq!(holding.next(), None);
        assert_eq!(holding.batchable(true).0, 0);
        assert_eq!(holding.len(), 2);
    }

    #[test]
    fn a_message_behind_an_earlier_one_elsewhere_is_looked_at_until_nothing_is_left() {
        let (mut holding, _floors, _running) = setup(OrderingPolicy::default());
        push(&mut holding, "a", 5);
        push(&mut holding, "a", 7);
        assert_eq!(holding.next(), None);
        let now = Instant::now();
        // A key never looked at is due at once: the run loop wakes for it.
        assert_eq!(holding.next_look_at(now), Some(now));
        // One look for the key, from its lowest sequence; none while it is on its way.
        assert_eq!(holding.due_looks(now), [(ordering("a"), 5)]);
        assert!(holding.due_looks(now).is_empty());
        assert_eq!(holding.next_look_at(now), None);
        // Sequence 3 is left: hold, look again after the recheck delay.
        let released = holding.looked(vec![(ordering("a"), 5, found(Some(3), None))], now);
        assert!(released.is_empty());
        assert_eq!(holding.next(), None);
        let again = holding.next_look_at(now).expect("a look is due later");
        assert!(again > now);
        assert!(holding.due_looks(now).is_empty());
        assert_eq!(holding.due_looks(again), [(ordering("a"), 5)]);
        // A failed look changes nothing but the time of the next.
        assert!(
            holding
                .looked(vec![(ordering("a"), 5, None)], again)
                .is_empty()
        );
        assert_eq!(holding.next(), None);
        let later = again + Duration::from_secs(1);
        assert_eq!(holding.due_looks(later), [(ordering("a"), 5)]);
        // Nothing left before 5: it runs with no reads, and 7 waits for it in memory. Waiting
        // for a handler slot, the key is due for no look (the run loop would wake for nothing).
        assert!(
            holding
                .looked(vec![(ordering("a"), 5, found(None, None))], later)
                .is_empty()
        );
        assert_eq!(holding.next_look_at(later), None);
        assert!(
            holding
                .due_looks(later + Duration::from_secs(60))
                .is_empty()
        );
        assert_eq!(start(&mut holding), Some((key("a", 5), Clearance::Clear)));
        assert_eq!(holding.len(), 1);
    }

    #[test]
    fn a_blocking_dead_letter_releases_the_key_and_a_skipped_one_leaves_the_check_to_the_transaction()
     {
        let (mut holding, floors, _running) = setup(OrderingPolicy::default());
        push(&mut holding, "a", 4);
        push(&mut holding, "a", 6);
        let now = Instant::now();
        assert_eq!(holding.due_looks(now), [(ordering("a"), 4)]);
        let released = holding.looked(vec![(ordering("a"), 4, found(None, Some(2)))], now);
        // Every waiting message of the key goes, to come back after the blocked delay.
        let keys: Vec<MessageKey> = released.iter().map(|(d, _)| d.0.clone()).collect();
        assert_eq!(keys, [key("a", 4), key("a", 6)]);
        assert!(
            released
                .iter()
                .all(|(_, at)| *at == DeliverAt::After(Duration::from_secs(30)))
        );
        assert_eq!(holding.len(), 0);
        // The dead letter is the floor: nothing below 2 is left.
        assert!(floors.clear(&key("a", 2)) && !floors.clear(&key("a", 3)));

        let skip = OrderingPolicy::default().with_dead_letters(DeadLetterOrdering::Skip);
        let (mut holding, _floors, _running) = setup(skip);
        push(&mut holding, "b", 4);
        assert_eq!(holding.due_looks(now), [(ordering("b"), 4)]);
        assert!(
            holding
                .looked(vec![(ordering("b"), 4, found(None, Some(2)))], now)
                .is_empty()
        );
        assert_eq!(start(&mut holding), Some((key("b", 4), Clearance::Check)));
    }

    #[test]
    fn a_message_behind_one_scheduled_far_ahead_is_released_until_then() {
        let (mut holding, _floors, _running) = setup(OrderingPolicy::default());
        push(&mut holding, "a", 2);
        let now = Instant::now();
        assert_eq!(holding.due_looks(now), [(ordering("a"), 2)]);
        let due = SystemTime::now() + HOLD_HORIZON + Duration::from_secs(60);
        let look = Look {
            queue: EarlierLeft {
                lowest: Some(1),
                latest_due: Some(due),
                seen: true,
            },
            dead: None,
        };
        let released = holding.looked(vec![(ordering("a"), 2, Some(look))], now);
        assert_eq!(released.len(), 1);
        assert_eq!(
            released[0].1,
            DeliverAt::Time(due + OrderingPolicy::default().recheck_delay())
        );
        // Due soon: held.
        push(&mut holding, "b", 2);
        assert_eq!(holding.due_looks(now), [(ordering("b"), 2)]);
        let soon = Look {
            queue: EarlierLeft {
                lowest: Some(1),
                latest_due: Some(SystemTime::now() + Duration::from_secs(5)),
                seen: true,
            },
            dead: None,
        };
        assert!(
            holding
                .looked(vec![(ordering("b"), 2, Some(soon))], now)
                .is_empty()
        );
        assert_eq!(holding.len(), 1);
    }

    #[test]
    fn a_stuck_worker_releases_a_quarter_of_what_it_holds_furthest_behind_first() {
        let policy = OrderingPolicy::default().with_max_held(6);
        let (mut holding, _floors, running) = setup_with(policy.clone(), 8);
        for (conversation, sequence) in [("b", 3), ("b", 40), ("c", 9), ("c", 2), ("d", 5)] {
            push(&mut holding, conversation, sequence);
        }
        let now = Instant::now();
        // Room left in the receiver: not stuck.
        assert!(holding.overflow(now).is_empty());
        assert_eq!(holding.stuck_at(), None);
        for (conversation, sequence) in [("d", 6), ("d", 7), ("e", 1)] {
            push(&mut holding, conversation, sequence);
        }
        // Full, and nothing may run: stuck from now on, released only after a while. A look
        // that sees earlier messages of a key go is progress: the wait starts over.
        assert!(holding.overflow(now).is_empty());
        assert_eq!(holding.stuck_at(), Some(now + Duration::from_secs(10)));
        assert_eq!(holding.due_looks(now).len(), 4);
        let looked = vec![
            (ordering("b"), 3, found(Some(1), None)),
            (ordering("c"), 2, found(Some(1), None)),
            (ordering("d"), 5, found(Some(0), None)),
            (ordering("e"), 1, found(Some(0), None)),
        ];
        assert!(holding.looked(looked, now).is_empty());
        assert_eq!(holding.stuck_at(), None);
        let now = now + Duration::from_secs(1);
        assert!(holding.overflow(now).is_empty());
        let at = holding.stuck_at().expect("stuck");
        assert_eq!(at, now + Duration::from_secs(10));
        assert!(holding.overflow(at - Duration::from_millis(1)).is_empty());
        let released = holding.overflow(at);
        // A quarter of 8: `b` 40 (39 behind its floor) and `c` 9 (8 behind).
        let keys: Vec<MessageKey> = released.iter().map(|(d, _)| d.0.clone()).collect();
        assert_eq!(keys, [key("b", 40), key("c", 9)]);
        let recheck = policy.recheck_delay();
        assert_eq!(released[0].1, DeliverAt::After(recheck * MAX_WAITS_BEHIND));
        assert_eq!(released[1].1, DeliverAt::After(recheck * 8));
        assert_eq!(holding.len(), 6);
        assert_eq!(holding.stuck_at(), None);
        // Full, but a message may run (or one runs): not stuck.
        push(&mut holding, "e", 2);
        push(&mut holding, "f", 0);
        assert!(holding.overflow(at).is_empty());
        assert_eq!(holding.stuck_at(), None);
        let pick = holding.next().expect("f 0 may run");
        let (entry, _) = holding.take(&pick).expect("taken");
        assert_eq!(entry.delivery.0, key("f", 0));
        let _f = running.enter(&key("f", 0));
        push(&mut holding, "f", 1);
        assert!(holding.overflow(at).is_empty());
        assert_eq!(holding.stuck_at(), None);
    }

    #[test]
    fn holding_nothing_every_message_that_must_wait_is_released() {
        let (mut holding, _floors, _running) = setup(OrderingPolicy::default().with_max_held(0));
        push(&mut holding, "a", 4);
        let now = Instant::now();
        assert_eq!(holding.due_looks(now), [(ordering("a"), 4)]);
        let released = holding.looked(vec![(ordering("a"), 4, found(Some(1), None))], now);
        assert_eq!(released.len(), 1);
        assert_eq!(
            released[0].1,
            DeliverAt::After(OrderingPolicy::default().recheck_delay() * 3)
        );
        assert_eq!(holding.len(), 0);
    }

    #[test]
    fn a_key_runs_depth_first_until_its_quantum_then_goes_behind_the_others() {
        let (mut holding, floors, _running) = setup(OrderingPolicy::default());
        for sequence in 0..=KEY_QUANTUM as i64 {
            push(&mut holding, "a", sequence);
            if sequence == 0 {
                push(&mut holding, "b", 0);
            }
        }
        // `a` came first: its messages run one after the other (here, acked at once).
        for sequence in 0..i64::from(KEY_QUANTUM) {
            assert_eq!(
                start(&mut holding),
                Some((key("a", sequence), Clearance::Clear))
            );
            floors.acked(&key("a", sequence));
        }
        // After its quantum, `b` goes first.
        assert_eq!(start(&mut holding), Some((key("b", 0), Clearance::Clear)));
        assert_eq!(
            start(&mut holding),
            Some((key("a", i64::from(KEY_QUANTUM)), Clearance::Clear))
        );
    }

    #[test]
    fn lost_leases_are_dropped_and_a_new_delivery_replaces_the_old() {
        let (mut holding, _floors, _running) = setup(OrderingPolicy::default());
        holding.push(Fake(key("a", 3), true));
        push(&mut holding, "a", 4);
        // The lost one is skipped when picking, and dropped.
        assert_eq!(holding.runnable(), 0);
        assert_eq!(holding.drop_lost(), 1);
        assert_eq!(holding.due_looks(Instant::now()), [(ordering("a"), 4)]);
        assert_eq!(holding.len(), 1);
        push(&mut holding, "a", 4);
        assert_eq!(holding.len(), 1, "delivered again: replaces");
        // A key that does not split runs at once.
        holding.push(Fake(7_i64.to_message_key(), false));
        assert_eq!(
            start(&mut holding),
            Some((7_i64.to_message_key(), Clearance::Clear))
        );
    }

    #[test]
    fn floors_only_rise_and_an_ack_moves_a_clear_key_past_its_message() {
        let floors = Floors::default();
        assert!(floors.clear(&key("a", 0)), "sequences start at 0");
        assert!(!floors.clear(&key("a", 1)));
        // An ack of a message that was not clear says nothing of the ones before it.
        floors.acked(&key("a", 2));
        assert!(!floors.clear(&key("a", 1)));
        floors.acked(&key("a", 0));
        assert!(floors.clear(&key("a", 1)));
        floors.settle(&key("a", 5));
        assert!(floors.clear(&key("a", 5)) && !floors.clear(&key("a", 6)));
        floors.raise(&ordering("a"), 2);
        assert!(floors.clear(&key("a", 5)), "never lowered");
        // Keys that do not split are never clear.
        assert!(!floors.clear(&7_i64.to_message_key()));
    }

    #[test]
    fn floors_are_bounded() {
        let floors = Floors::default();
        for i in 0..FLOOR_KEYS {
            floors.raise(&ordering(&format!("k{i}")), 3);
        }
        assert!(floors.clear(&key("k0", 3)));
        // One more key starts over: forgetting only costs reads.
        floors.raise(&ordering("new"), 3);
        assert!(!floors.clear(&key("k0", 3)));
        assert!(floors.clear(&key("new", 3)));
        assert_eq!(lock(&floors.0).len(), 1);
    }

    #[test]
    fn a_released_message_further_behind_waits_longer_up_to_a_bound() {
        assert_eq!(waits_behind(1), 1);
        assert_eq!(waits_behind(5), 5);
        assert_eq!(waits_behind(0), 1);
        assert_eq!(waits_behind(-3), 1);
        assert_eq!(waits_behind(1_000), MAX_WAITS_BEHIND);
        assert_eq!(waits_behind(i64::MAX), MAX_WAITS_BEHIND);
    }

    #[test]
    fn the_policy_bounds_its_settings() {
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
            named(policy.clone().with_blocked_delay(Duration::MAX)),
            Some("blocked_delay")
        );
        assert_eq!(named(policy.clone().with_max_held(0)), None);
        assert_eq!(named(policy.clone().with_max_held(100_000)), None);
        assert_eq!(named(policy.with_max_held(100_001)), Some("max_held"));
        assert_eq!(
            OrderingPolicy::default().dead_letters(),
            DeadLetterOrdering::Block
        );
        assert_eq!(OrderingPolicy::default().max_held(), 100);
    }
}
