//! Leases, held in the front's memory.
//!
//! A message (one *incarnation*: a row id given by the backend column
//! `SpannerQueuesEmulatorMessageId`) is leased to one receiver at a time. Keeping leases in memory
//! means receiving and renewing never open read-write transactions in the official emulator,
//! which runs one read-write transaction per database at a time: lease bookkeeping can neither
//! abort nor starve client transactions. The cost: leases do not survive a restart of the front
//! (messages then become deliverable at once), a documented difference.
//!
//! Redelivery back-off (after a lease expires without an ack) follows the reference's
//! description, "retry with back-off within the first hour, then once per hour" [I: the exact
//! curve is not documented]: `min(initial * 2^(n-1), max)` after the n-th expired lease, and one
//! hour for messages whose `DeliverTime` is more than an hour old.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::time::{Duration, SystemTime};

use rand::RngExt as _;

/// How long a lease lasts and how redelivery backs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeasePolicy {
    /// Lease granted by RECEIVE and by each RENEWLEASE (Cloud Spanner: about 10 s).
    pub(crate) lease: Duration,
    /// Delay before the first redelivery after a lease expired.
    pub(crate) initial_backoff: Duration,
    /// Largest redelivery delay within a message's first hour.
    pub(crate) max_backoff: Duration,
}

impl Default for LeasePolicy {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(10),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

impl LeasePolicy {
    /// Delay before redelivering a message whose `deliveries`-th lease expired.
    fn backoff(&self, deliveries: u32, deliver_time: SystemTime, now: SystemTime) -> Duration {
        let hour = Duration::from_secs(3600);
        if now.duration_since(deliver_time).unwrap_or_default() > hour {
            return hour;
        }
        let exponent = deliveries.saturating_sub(1).min(20);
        self.initial_backoff
            .saturating_mul(1 << exponent)
            .min(self.max_backoff)
    }
}

/// The lease state of one message incarnation.
#[derive(Debug, Clone)]
struct Lease {
    /// The current token (rotated by every renewal).
    token: String,
    expires_at: SystemTime,
    /// How many times the message was delivered.
    deliveries: u32,
    /// The message's `DeliverTime`, for the once-per-hour rule.
    deliver_time: SystemTime,
    /// When the message may be delivered again: the expiry plus the back-off, decided when the
    /// lease is granted, renewed or given back (the once-per-hour rule looks at the message's
    /// age at expiry).
    not_before: SystemTime,
}

impl Lease {
    fn new(
        token: String,
        expires_at: SystemTime,
        deliveries: u32,
        deliver_time: SystemTime,
        policy: &LeasePolicy,
    ) -> Self {
        let not_before = expires_at + policy.backoff(deliveries, deliver_time, expires_at);
        Self {
            token,
            expires_at,
            deliveries,
            deliver_time,
            not_before,
        }
    }

    fn live(&self, now: SystemTime) -> bool {
        self.expires_at > now
    }
}

/// A message granted to a receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Granted {
    pub(crate) token: String,
    pub(crate) expires_at: SystemTime,
}

/// The outcome of renewing one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Unknown, superseded or expired token: no output row.
    NoRow,
    /// The token is live; the caller must check that the message still exists.
    Live {
        /// The message's incarnation id.
        message_id: String,
    },
}

/// Where a message sent under a lease stands, as far as the lease table tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Still under the token it was sent with, and live: the receiver has not renewed it
    /// (it may have acked it: only the queue table tells).
    Held,
    /// Renewed (its token rotated) or given back: the receiver read it.
    Acted,
    /// The lease ran out.
    Expired,
}

/// How long a record outlives its back-off: a message delivered again within this time keeps
/// its delivery count (and so its growing back-off).
const RETAIN: Duration = Duration::from_secs(3600);

/// The leases of one queue.
///
/// Every receive asks which messages are leased or backing off, and a busy queue grants
/// thousands of leases a minute, most of them acked long ago. The records are therefore also
/// kept in `not_before` order: the blocked ones are a range at the end, and the records that
/// no longer matter are a range at the start, so neither question walks the whole table.
#[derive(Debug, Default)]
struct QueueLeases {
    by_id: HashMap<String, Lease>,
    by_not_before: BTreeSet<(SystemTime, String)>,
}

impl QueueLeases {
    fn insert(&mut self, message_id: String, lease: Lease) {
        if let Some(old) = self.by_id.get(&message_id) {
            self.by_not_before
                .remove(&(old.not_before, message_id.clone()));
        }
        self.by_not_before
            .insert((lease.not_before, message_id.clone()));
        self.by_id.insert(message_id, lease);
    }

    fn remove(&mut self, message_id: &str) -> Option<Lease> {
        let lease = self.by_id.remove(message_id)?;
        self.by_not_before
            .remove(&(lease.not_before, message_id.to_owned()));
        Some(lease)
    }

    /// The records blocked at `now` (leased, or backing off), earliest first.
    fn blocked(&self, now: SystemTime) -> impl Iterator<Item = &(SystemTime, String)> {
        self.by_not_before
            .range((Bound::Excluded((now, String::new())), Bound::Unbounded))
            .skip_while(move |(t, _)| *t <= now)
    }
}

/// All leases of one database, by queue, then message id.
#[derive(Debug, Default)]
pub(crate) struct LeaseTable {
    queues: HashMap<String, QueueLeases>,
    /// Current tokens: (queue key, message id).
    tokens: HashMap<String, (String, String)>,
}

fn queue_key(queue: &str) -> String {
    queue.to_ascii_lowercase()
}

/// A fresh opaque, unguessable token (128 random bits, URL-safe base64).
fn new_token() -> String {
    use base64::Engine as _;
    let bytes: [u8; 16] = rand::rng().random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl LeaseTable {
    fn queue(&self, queue: &str) -> Option<&QueueLeases> {
        self.queues.get(&queue_key(queue))
    }

    fn lease(&self, queue: &str, message_id: &str) -> Option<&Lease> {
        self.queue(queue)?.by_id.get(message_id)
    }

    /// Message ids of `queue` that must not be delivered now (live lease, or backing off).
    /// Costs what is blocked, not what the queue ever delivered.
    pub(crate) fn excluded(&self, queue: &str, now: SystemTime) -> Vec<String> {
        self.queue(queue)
            .map(|q| q.blocked(now).map(|(_, id)| id.clone()).collect())
            .unwrap_or_default()
    }

    /// The earliest future time at which a message of `queue` becomes deliverable again.
    pub(crate) fn next_wake(&self, queue: &str, now: SystemTime) -> Option<SystemTime> {
        self.queue(queue)?.blocked(now).next().map(|(t, _)| *t)
    }

    /// Leases `message_id` if it is deliverable now; `None` if it is leased or backing off.
    pub(crate) fn try_grant(
        &mut self,
        queue: &str,
        message_id: &str,
        deliver_time: SystemTime,
        policy: &LeasePolicy,
        now: SystemTime,
    ) -> Option<Granted> {
        let key = queue_key(queue);
        let leases = self.queues.entry(key.clone()).or_default();
        let deliveries = match leases.by_id.get(message_id) {
            Some(lease) if lease.not_before > now => return None,
            Some(lease) => {
                self.tokens.remove(&lease.token);
                lease.deliveries
            }
            None => 0,
        };
        let lease = Lease::new(
            new_token(),
            now + policy.lease,
            deliveries + 1,
            deliver_time,
            policy,
        );
        let granted = Granted {
            token: lease.token.clone(),
            expires_at: lease.expires_at,
        };
        self.tokens
            .insert(lease.token.clone(), (key, message_id.to_owned()));
        leases.insert(message_id.to_owned(), lease);
        Some(granted)
    }

    /// Gives back a lease that never reached its receiver (the stream broke): the message is
    /// deliverable again at once, and the delivery is not counted.
    pub(crate) fn release(&mut self, queue: &str, message_id: &str, token: &str) {
        let Some(leases) = self.queues.get_mut(&queue_key(queue)) else {
            return;
        };
        if leases
            .by_id
            .get(message_id)
            .is_none_or(|l| l.token != token)
        {
            return;
        }
        self.tokens.remove(token);
        let Some(mut lease) = leases.remove(message_id) else {
            return;
        };
        if lease.deliveries > 1 {
            lease.deliveries -= 1;
            lease.expires_at = SystemTime::UNIX_EPOCH;
            lease.not_before = SystemTime::UNIX_EPOCH;
            leases.insert(message_id.to_owned(), lease);
        }
    }

    /// Forgets the lease of a message its receiver acked (it is no longer in the queue), if
    /// `token` is still its lease: nothing can be delivered again under that id.
    pub(crate) fn forget_acked(&mut self, queue: &str, message_id: &str, token: &str) {
        let Some(leases) = self.queues.get_mut(&queue_key(queue)) else {
            return;
        };
        if leases
            .by_id
            .get(message_id)
            .is_some_and(|l| l.token == token)
        {
            leases.remove(message_id);
            self.tokens.remove(token);
        }
    }

    /// How the message `message_id`, sent under `token`, stands now.
    pub(crate) fn standing(
        &self,
        queue: &str,
        message_id: &str,
        token: &str,
        now: SystemTime,
    ) -> Standing {
        match self.lease(queue, message_id) {
            Some(lease) if lease.token == token && lease.live(now) => Standing::Held,
            Some(lease) if lease.token == token => Standing::Expired,
            _ => Standing::Acted,
        }
    }

    /// Looks a token up for `RENEWLEASE_<queue>`.
    pub(crate) fn check(&self, queue: &str, token: &str, now: SystemTime) -> Renewal {
        match self.tokens.get(token) {
            Some((q, id)) if *q == queue_key(queue) => match self.lease(q, id) {
                Some(lease) if lease.token == token && lease.live(now) => Renewal::Live {
                    message_id: id.clone(),
                },
                _ => Renewal::NoRow,
            },
            _ => Renewal::NoRow,
        }
    }

    /// The current expiry of a live token (for the NULL-new-token row of an acked message).
    pub(crate) fn expiry(&self, token: &str) -> Option<SystemTime> {
        self.tokens
            .get(token)
            .and_then(|(q, id)| self.lease(q, id))
            .map(|lease| lease.expires_at)
    }

    /// Extends a live lease by `policy.lease` from `now` and rotates its token. `None` if the
    /// token stopped being live meanwhile.
    pub(crate) fn renew(
        &mut self,
        queue: &str,
        token: &str,
        policy: &LeasePolicy,
        now: SystemTime,
    ) -> Option<Granted> {
        let Renewal::Live { message_id } = self.check(queue, token, now) else {
            return None;
        };
        let key = queue_key(queue);
        let leases = self.queues.get_mut(&key)?;
        let old = leases.by_id.get(&message_id)?;
        let lease = Lease::new(
            new_token(),
            now + policy.lease,
            old.deliveries,
            old.deliver_time,
            policy,
        );
        self.tokens.remove(token);
        self.tokens
            .insert(lease.token.clone(), (key, message_id.clone()));
        let granted = Granted {
            token: lease.token.clone(),
            expires_at: lease.expires_at,
        };
        leases.insert(message_id, lease);
        Some(granted)
    }

    /// Drops lease records that cannot matter any more: expired, and past their back-off by
    /// more than an hour (an acked message's record, typically). Costs what it drops.
    pub(crate) fn collect_garbage(&mut self, now: SystemTime) {
        let Some(horizon) = now.checked_sub(RETAIN) else {
            return;
        };
        for leases in self.queues.values_mut() {
            while let Some((not_before, _)) = leases.by_not_before.first()
                && *not_before < horizon
            {
                let Some((_, id)) = leases.by_not_before.pop_first() else {
                    break;
                };
                if let Some(lease) = leases.by_id.remove(&id) {
                    self.tokens.remove(&lease.token);
                }
            }
        }
        self.queues.retain(|_, leases| !leases.by_id.is_empty());
    }

    /// Number of lease records (live or not).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.queues.values().map(|q| q.by_id.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    #[test]
    fn a_leased_message_is_not_granted_twice_until_expiry_and_backoff() {
        let policy = LeasePolicy::default();
        let mut table = LeaseTable::default();
        let first = table.try_grant("Q", "m1", at(0), &policy, at(0)).unwrap();
        assert_eq!(first.expires_at, at(10));
        assert!(table.try_grant("q", "m1", at(0), &policy, at(5)).is_none());
        assert_eq!(table.excluded("Q", at(5)), vec!["m1".to_owned()]);
        // Expired at 10, first back-off 1 s: not before 11.
        assert!(table.try_grant("Q", "m1", at(0), &policy, at(10)).is_none());
        assert_eq!(table.next_wake("Q", at(10)), Some(at(11)));
        let second = table.try_grant("Q", "m1", at(0), &policy, at(11)).unwrap();
        assert_ne!(first.token, second.token, "a redelivery gets a new token");
        // Second expiry at 21, back-off 2 s.
        assert!(table.try_grant("Q", "m1", at(0), &policy, at(22)).is_none());
        assert!(table.try_grant("Q", "m1", at(0), &policy, at(23)).is_some());
    }

    #[test]
    fn backoff_grows_then_caps_and_is_hourly_for_old_messages() {
        let policy = LeasePolicy::default();
        let t = at(0);
        assert_eq!(policy.backoff(1, t, t), Duration::from_secs(1));
        assert_eq!(policy.backoff(3, t, t), Duration::from_secs(4));
        assert_eq!(policy.backoff(30, t, t), Duration::from_secs(60));
        assert_eq!(policy.backoff(1, t, at(3601)), Duration::from_secs(3600));
    }

    #[test]
    fn renewal_rotates_tokens_and_old_tokens_stop_working() {
        let policy = LeasePolicy::default();
        let mut table = LeaseTable::default();
        let granted = table.try_grant("Q", "m1", at(0), &policy, at(0)).unwrap();
        assert_eq!(
            table.check("Q", &granted.token, at(8)),
            Renewal::Live {
                message_id: "m1".into()
            }
        );
        assert_eq!(table.check("Other", &granted.token, at(8)), Renewal::NoRow);
        let renewed = table.renew("Q", &granted.token, &policy, at(8)).unwrap();
        assert_eq!(renewed.expires_at, at(18));
        assert_ne!(renewed.token, granted.token);
        assert_eq!(table.check("Q", &granted.token, at(9)), Renewal::NoRow);
        assert!(
            table.renew("Q", &renewed.token, &policy, at(18)).is_none(),
            "expired"
        );
        assert_eq!(table.check("Q", "garbage", at(9)), Renewal::NoRow);
    }

    #[test]
    fn standing_tells_held_renewed_and_expired_leases_apart() {
        let policy = LeasePolicy::default();
        let mut table = LeaseTable::default();
        let a = table.try_grant("Q", "a", at(0), &policy, at(0)).unwrap();
        let b = table.try_grant("Q", "b", at(0), &policy, at(0)).unwrap();
        assert_eq!(table.standing("q", "a", &a.token, at(1)), Standing::Held);
        table.renew("Q", &a.token, &policy, at(2)).unwrap();
        assert_eq!(table.standing("Q", "a", &a.token, at(3)), Standing::Acted);
        assert_eq!(
            table.standing("Q", "b", &b.token, at(10)),
            Standing::Expired
        );
        table.release("Q", "b", &b.token);
        assert_eq!(table.standing("Q", "b", &b.token, at(5)), Standing::Acted);
    }

    #[test]
    fn release_makes_a_message_deliverable_at_once() {
        let policy = LeasePolicy::default();
        let mut table = LeaseTable::default();
        let granted = table.try_grant("Q", "m1", at(0), &policy, at(0)).unwrap();
        table.release("Q", "m1", &granted.token);
        assert!(table.excluded("Q", at(1)).is_empty());
        assert!(table.try_grant("Q", "m1", at(0), &policy, at(1)).is_some());
    }

    #[test]
    fn garbage_collection_keeps_recent_records() {
        let policy = LeasePolicy::default();
        let mut table = LeaseTable::default();
        table.try_grant("Q", "m1", at(0), &policy, at(0)).unwrap();
        // Expired at 10, back-off 1 s: the record is kept until an hour after 11, so a
        // redelivery within that hour still counts the first delivery.
        table.collect_garbage(at(100));
        assert_eq!(table.len(), 1);
        table.collect_garbage(at(3610));
        assert_eq!(table.len(), 1);
        table.collect_garbage(at(3612));
        assert_eq!(table.len(), 0);
        assert!(table.excluded("Q", at(3612)).is_empty());
    }

    #[test]
    fn tokens_are_unguessable_and_distinct() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        assert_eq!(a.len(), 22, "128 bits in unpadded base64");
    }
}
