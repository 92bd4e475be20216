//! Low-water marks of the queues' delivery times: where a receiver's read of a queue's due
//! index starts.
//!
//! The official emulator keeps the versions of deleted rows, and every read steps over those
//! in its range: a receiver that read its queue from the first `DeliverTime` on would step
//! over every message ever acked. A receiver therefore reads from the queue's floor, a
//! delivery time below which no message exists. After a read, the floor rises to the
//! oldest message found. A commit that may add messages lowers the floors first (to the time
//! its sends began, less [`SLACK`]), before and again after the backend applies it, so that a
//! read that could have missed the new messages does not raise a floor past them. As a safety
//! net (a message inserted with an explicit past `DeliverTime` by DML, a writer that
//! bypasses the front), each queue is read from its first row every [`FULL_READ_EVERY`].

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

/// Margin below a commit's send time that floors are lowered to: covers the time between a
/// DML statement's `CURRENT_TIMESTAMP` and the moment the front noted the send.
pub(crate) const SLACK: Duration = Duration::from_secs(30);
/// How often a queue is read from its first row whatever its floor.
pub(crate) const FULL_READ_EVERY: Duration = Duration::from_secs(30);

/// The floors of one database's queues.
#[derive(Debug, Default)]
pub(crate) struct Floors {
    by_queue: HashMap<String, Floor>,
    /// Bumped whenever floors are lowered: a read that started before may not raise one.
    epoch: u64,
}

#[derive(Debug, Clone, Copy)]
struct Floor {
    /// No message of the queue has an earlier `DeliverTime` (`None`: not known).
    at: Option<SystemTime>,
    full_read_at: Instant,
}

impl Floors {
    /// Where the next read of `queue` starts (`None`: from its first row), and the epoch to
    /// hand to [`Floors::raise`] after it.
    pub(crate) fn start(&mut self, queue: &str, now: Instant) -> (Option<SystemTime>, u64) {
        let floor = self
            .by_queue
            .entry(queue.to_ascii_lowercase())
            .or_insert(Floor {
                at: None,
                full_read_at: now,
            });
        if now.duration_since(floor.full_read_at) >= FULL_READ_EVERY {
            floor.full_read_at = now;
            return (None, self.epoch);
        }
        (floor.at, self.epoch)
    }

    /// A read that started at `epoch` found no message of `queue` earlier than `oldest`.
    pub(crate) fn raise(&mut self, queue: &str, epoch: u64, oldest: SystemTime) {
        if epoch != self.epoch {
            return;
        }
        if let Some(floor) = self.by_queue.get_mut(&queue.to_ascii_lowercase()) {
            floor.at = Some(floor.at.map_or(oldest, |at| at.max(oldest)));
        }
    }

    /// A commit may add messages delivered from `from` on (`None`: at any time).
    pub(crate) fn lower(&mut self, from: Option<SystemTime>) {
        self.epoch = self.epoch.wrapping_add(1);
        let bound = from.and_then(|t| t.checked_sub(SLACK));
        for floor in self.by_queue.values_mut() {
            floor.at = match (floor.at, bound) {
                (Some(at), Some(bound)) => Some(at.min(bound)),
                _ => None,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_rise_after_reads_and_fall_before_commits() {
        let mut floors = Floors::default();
        let t0 = Instant::now();
        let at = SystemTime::now();
        let (from, epoch) = floors.start("Q", t0);
        assert_eq!(from, None, "unknown at first");
        floors.raise("q", epoch, at);
        assert_eq!(floors.start("Q", t0).0, Some(at));
        // Never lowered by a read.
        floors.raise("Q", epoch, at - Duration::from_secs(5));
        assert_eq!(floors.start("Q", t0).0, Some(at));

        // A commit during a read: the read may not raise the floor.
        let (_, epoch) = floors.start("Q", t0);
        floors.lower(Some(at));
        floors.raise("Q", epoch, at + Duration::from_secs(60));
        assert_eq!(floors.start("Q", t0).0, Some(at - SLACK));
        floors.lower(None);
        assert_eq!(floors.start("Q", t0).0, None);

        // The safety net: a full read every FULL_READ_EVERY.
        let (_, epoch) = floors.start("Q", t0);
        floors.raise("Q", epoch, at);
        assert_eq!(floors.start("Q", t0 + FULL_READ_EVERY).0, None);
        assert_eq!(floors.start("Q", t0 + FULL_READ_EVERY).0, Some(at));
    }
}
