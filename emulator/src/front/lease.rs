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

use std::collections::HashMap;
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
}

impl Lease {
    fn live(&self, now: SystemTime) -> bool {
        self.expires_at > now
    }

    fn not_before(&self, policy: &LeasePolicy, now: SystemTime) -> SystemTime {
        self.expires_at + policy.backoff(self.deliveries, self.deliver_time, now)
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

/// All leases of one database, keyed by (queue, message id).
#[derive(Debug, Default)]
pub(crate) struct LeaseTable {
    leases: HashMap<(String, String), Lease>,
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
    /// Message ids of `queue` that must not be delivered now (live lease, or backing off).
    pub(crate) fn excluded(
        &self,
        queue: &str,
        policy: &LeasePolicy,
        now: SystemTime,
    ) -> Vec<String> {
        let queue = queue_key(queue);
        self.leases
            .iter()
            .filter(|((q, _), lease)| *q == queue && lease.not_before(policy, now) > now)
            .map(|((_, id), _)| id.clone())
            .collect()
    }

    /// The earliest future time at which a message of `queue` becomes deliverable again.
    pub(crate) fn next_wake(
        &self,
        queue: &str,
        policy: &LeasePolicy,
        now: SystemTime,
    ) -> Option<SystemTime> {
        let queue = queue_key(queue);
        self.leases
            .iter()
            .filter(|((q, _), _)| *q == queue)
            .map(|(_, lease)| lease.not_before(policy, now))
            .filter(|t| *t > now)
            .min()
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
        let key = (queue_key(queue), message_id.to_owned());
        let deliveries = match self.leases.get(&key) {
            Some(lease) if lease.not_before(policy, now) > now => return None,
            Some(lease) => {
                self.tokens.remove(&lease.token);
                lease.deliveries
            }
            None => 0,
        };
        let lease = Lease {
            token: new_token(),
            expires_at: now + policy.lease,
            deliveries: deliveries + 1,
            deliver_time,
        };
        let granted = Granted {
            token: lease.token.clone(),
            expires_at: lease.expires_at,
        };
        self.tokens.insert(lease.token.clone(), key.clone());
        self.leases.insert(key, lease);
        Some(granted)
    }

    /// Gives back a lease that never reached its receiver (the stream broke): the message is
    /// deliverable again at once, and the delivery is not counted.
    pub(crate) fn release(&mut self, queue: &str, message_id: &str, token: &str) {
        let key = (queue_key(queue), message_id.to_owned());
        let Some(lease) = self.leases.get_mut(&key) else {
            return;
        };
        if lease.token != token {
            return;
        }
        self.tokens.remove(token);
        if lease.deliveries <= 1 {
            self.leases.remove(&key);
        } else {
            lease.deliveries -= 1;
            lease.expires_at = SystemTime::UNIX_EPOCH;
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
        match self.leases.get(&(queue_key(queue), message_id.to_owned())) {
            Some(lease) if lease.token == token && lease.live(now) => Standing::Held,
            Some(lease) if lease.token == token => Standing::Expired,
            _ => Standing::Acted,
        }
    }

    /// Looks a token up for `RENEWLEASE_<queue>`.
    pub(crate) fn check(&self, queue: &str, token: &str, now: SystemTime) -> Renewal {
        match self.tokens.get(token) {
            Some(key) if key.0 == queue_key(queue) => match self.leases.get(key) {
                Some(lease) if lease.token == token && lease.live(now) => Renewal::Live {
                    message_id: key.1.clone(),
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
            .and_then(|key| self.leases.get(key))
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
        let key = (queue_key(queue), message_id);
        let lease = self.leases.get_mut(&key)?;
        self.tokens.remove(token);
        lease.token = new_token();
        lease.expires_at = now + policy.lease;
        self.tokens.insert(lease.token.clone(), key);
        Some(Granted {
            token: lease.token.clone(),
            expires_at: lease.expires_at,
        })
    }

    /// Drops lease records that cannot matter any more: expired, and past their back-off by
    /// more than an hour (an acked message's record, typically).
    pub(crate) fn collect_garbage(&mut self, policy: &LeasePolicy, now: SystemTime) {
        let hour = Duration::from_secs(3600);
        let tokens = &mut self.tokens;
        self.leases.retain(|_, lease| {
            let keep = lease.not_before(policy, now) + hour > now;
            if !keep {
                tokens.remove(&lease.token);
            }
            keep
        });
    }

    /// Number of lease records (live or not).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.leases.len()
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
        assert_eq!(table.excluded("Q", &policy, at(5)), vec!["m1".to_owned()]);
        // Expired at 10, first back-off 1 s: not before 11.
        assert!(table.try_grant("Q", "m1", at(0), &policy, at(10)).is_none());
        assert_eq!(table.next_wake("Q", &policy, at(10)), Some(at(11)));
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
        assert!(table.excluded("Q", &policy, at(1)).is_empty());
        assert!(table.try_grant("Q", "m1", at(0), &policy, at(1)).is_some());
    }

    #[test]
    fn garbage_collection_keeps_recent_records() {
        let policy = LeasePolicy::default();
        let mut table = LeaseTable::default();
        table.try_grant("Q", "m1", at(0), &policy, at(0)).unwrap();
        table.collect_garbage(&policy, at(100));
        assert_eq!(table.len(), 1);
        // The message is then over an hour old: its back-off is an hour, so its record matters
        // until an hour after that.
        table.collect_garbage(&policy, at(7000));
        assert_eq!(table.len(), 1);
        table.collect_garbage(&policy, at(7300));
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn tokens_are_unguessable_and_distinct() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        assert_eq!(a.len(), 22, "128 bits in unpadded base64");
    }
}
