//! The console's bounded in-memory history of queue counts.

use std::collections::{BTreeMap, VecDeque};

use crate::output::QueueInfo;

/// One reading of every queue.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// Seconds since the console started.
    pub(crate) at: f64,
    /// Depth and messages due now, by queue name.
    pub(crate) counts: BTreeMap<String, (i64, i64)>,
}

/// One queue's reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    /// Seconds since the console started.
    pub(crate) at: f64,
    pub(crate) depth: i64,
    pub(crate) due: i64,
}

/// The last `capacity` samples, oldest first, and the last sampling error.
#[derive(Debug, Clone)]
pub(crate) struct History {
    samples: VecDeque<Sample>,
    capacity: usize,
    last_error: Option<String>,
}

impl History {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            samples: VecDeque::with_capacity(capacity),
            capacity: capacity.max(1),
            last_error: None,
        }
    }

    /// Keeps a reading taken `at` seconds after the start, dropping the oldest beyond capacity.
    pub(crate) fn push(&mut self, at: f64, queues: &[QueueInfo]) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            at,
            counts: queues
                .iter()
                .map(|q| (q.name.clone(), (q.depth, q.due)))
                .collect(),
        });
        self.last_error = None;
    }

    /// Remembers why the last reading failed (shown on the pages until one succeeds).
    pub(crate) fn failed(&mut self, error: String) {
        self.last_error = Some(error);
    }

    pub(crate) fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    pub(crate) fn len(&self) -> usize {
        self.samples.len()
    }

    /// `queue`'s readings, oldest first.
    pub(crate) fn series(&self, queue: &str) -> Vec<Point> {
        self.samples
            .iter()
            .filter_map(|s| {
                s.counts.get(queue).map(|&(depth, due)| Point {
                    at: s.at,
                    depth,
                    due,
                })
            })
            .collect()
    }

    /// Between each two readings of `queue`: (when the later was taken, messages per second
    /// by which the queue shrank; negative when it grew).
    ///
    /// Spanner keeps no count of acked messages, so this is the net flow: messages that left
    /// the queue minus those sent to it meanwhile.
    pub(crate) fn drain_rates(&self, queue: &str) -> Vec<(f64, f64)> {
        self.series(queue)
            .windows(2)
            .filter_map(|pair| {
                let seconds = pair[1].at - pair[0].at;
                (seconds > 0.0).then(|| {
                    // Depths are message counts: far below 2^52, exact as f64.
                    #[allow(clippy::cast_precision_loss)]
                    let shrunk = (pair[0].depth - pair[1].depth) as f64;
                    (pair[1].at, shrunk / seconds)
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, depth: i64, due: i64) -> QueueInfo {
        QueueInfo {
            name: name.to_owned(),
            depth,
            due,
            scheduled: depth - due,
            oldest_due: None,
            paused: false,
            dead_letters: Some(0),
        }
    }

    #[test]
    fn history_is_bounded_and_keeps_the_newest() {
        let mut history = History::new(3);
        for i in 0..5 {
            history.push(f64::from(i), &[info("A", i64::from(i), 0)]);
        }
        assert_eq!(history.len(), 3);
        let depths: Vec<i64> = history.series("A").iter().map(|p| p.depth).collect();
        assert_eq!(depths, [2, 3, 4]);
        assert!(history.series("B").is_empty());
    }

    #[test]
    fn drain_rate_is_the_net_shrink_per_second() {
        let mut history = History::new(10);
        history.push(0.0, &[info("A", 100, 100)]);
        history.push(2.0, &[info("A", 60, 50)]);
        history.push(4.0, &[info("A", 70, 70)]);
        assert_eq!(history.drain_rates("A"), [(2.0, 20.0), (4.0, -5.0)]);
        history.failed("boom".to_owned());
        assert_eq!(history.last_error(), Some("boom"));
        history.push(6.0, &[info("A", 70, 70)]);
        assert_eq!(history.last_error(), None);
    }
}
