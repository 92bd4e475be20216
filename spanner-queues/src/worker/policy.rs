//! [`RedeliveryPolicy`]: how long a failed message waits before its next attempt.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::bounds;
use crate::error::Result;

/// Capped exponential backoff with jitter between attempts at one message.
///
/// The delay after failed attempt `n` (1-based) is
/// `min(initial_delay × multiplier^(n-1), max_delay)`, reduced by a random fraction of up to
/// `jitter` (so that messages that failed together do not come back together). The message is
/// released with `DeliverTime = now + delay`.
///
/// ```
/// use std::time::Duration;
/// use spanner_queues::RedeliveryPolicy;
///
/// let policy = RedeliveryPolicy::default()
///     .with_initial_delay(Duration::from_secs(1))
///     .with_max_delay(Duration::from_secs(60))
///     .with_jitter(0.0);
/// assert_eq!(policy.delay(1), Duration::from_secs(1));
/// assert_eq!(policy.delay(3), Duration::from_secs(4));
/// assert_eq!(policy.delay(30), Duration::from_secs(60));
/// ```
///
/// Each setter gives its range; building a [`Worker`](crate::Worker) checks them
/// ([`Error::InvalidSetting`](crate::Error::InvalidSetting)).
#[derive(Debug, Clone, PartialEq)]
pub struct RedeliveryPolicy {
    initial_delay: Duration,
    max_delay: Duration,
    multiplier: f64,
    jitter: f64,
}

/// Longest delay: a failed message comes back within 30 days at the latest.
const MAX_DELAY: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(30 * 24 * 3600);
/// `delay`, shortened to the longest delay a policy allows (a delay becomes a `DeliverTime`:
/// far-future values overflow Spanner's timestamps).
pub(super) fn capped(delay: Duration) -> Duration {
    delay.min(*MAX_DELAY.end())
}

const MULTIPLIER: RangeInclusive<f64> = 1.0..=100.0;
const JITTER: RangeInclusive<f64> = 0.0..=1.0;

impl Default for RedeliveryPolicy {
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(600),
            multiplier: 2.0,
            jitter: 0.2,
        }
    }
}

impl RedeliveryPolicy {
    /// Delay after the first failed attempt (default 1 s; from 0 to
    /// [`max_delay`](Self::with_max_delay)).
    pub fn with_initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Longest delay (default 10 minutes; from 0 to 30 days).
    pub fn with_max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Growth factor per attempt (default 2; from 1 to 100).
    pub fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier;
        self
    }

    /// Largest fraction taken off a delay at random (default 0.2; from 0, none, to 1).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// Delay after the first failed attempt.
    pub fn initial_delay(&self) -> Duration {
        self.initial_delay
    }

    /// Longest delay.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// Growth factor per attempt.
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// Largest fraction taken off a delay at random.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// Checks every value against its range (given on each setter); building a
    /// [`Worker`](crate::Worker) calls it.
    pub(crate) fn validate(&self) -> Result<()> {
        bounds::in_range("max_delay", self.max_delay, MAX_DELAY)?;
        bounds::in_range(
            "initial_delay",
            self.initial_delay,
            Duration::ZERO..=self.max_delay,
        )?;
        bounds::in_range("multiplier", self.multiplier, MULTIPLIER)?;
        bounds::in_range("jitter", self.jitter, JITTER)
    }

    /// The delay before the attempt after failed attempt `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let base = self.initial_delay.as_secs_f64() * self.multiplier.max(1.0).powi(exponent);
        let capped = base.min(self.max_delay.as_secs_f64());
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = if jitter > 0.0 {
            1.0 - jitter * rand::random_range(0.0..1.0)
        } else {
            1.0
        };
        Duration::try_from_secs_f64(capped * factor).unwrap_or(self.max_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_until_the_cap_and_jitter_only_shortens() {
        let policy = RedeliveryPolicy::default()
            .with_initial_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(1))
            .with_jitter(0.2);
        for _ in 0..100 {
            let d1 = policy.delay(1);
            let d2 = policy.delay(2);
            let d3 = policy.delay(3);
            assert!(d1 <= Duration::from_millis(100) && d1 >= Duration::from_millis(80));
            assert!(d2 > d1, "{d1:?} {d2:?}");
            assert!(d3 > d2, "{d2:?} {d3:?}");
            assert!(policy.delay(50) <= Duration::from_secs(1));
            assert!(policy.delay(50) >= Duration::from_millis(800));
        }
        // Attempt 0 (never used by the worker) is treated like attempt 1.
        assert!(policy.delay(0) <= Duration::from_millis(100));
    }

    /// The setting `validate` names for `policy`, or `None` when it is valid.
    fn rejected(policy: &RedeliveryPolicy) -> Option<&'static str> {
        match policy.validate() {
            Ok(()) => None,
            Err(crate::Error::InvalidSetting { setting, .. }) => Some(setting),
            Err(other) => panic!("not an InvalidSetting: {other:?}"),
        }
    }

    #[test]
    fn redelivery_policies_bound_every_value_at_both_ends() {
        let d = RedeliveryPolicy::default;
        let days = |n: u64| Duration::from_secs(n * 24 * 3600);
        assert_eq!(rejected(&d()), None);
        let cases = [
            (
                d().with_max_delay(Duration::ZERO)
                    .with_initial_delay(Duration::ZERO),
                None,
            ),
            (d().with_max_delay(days(30)), None),
            // The delay becomes a DeliverTime: far-future values overflow timestamps.
            (
                d().with_max_delay(days(30) + Duration::from_nanos(1)),
                Some("max_delay"),
            ),
            (d().with_max_delay(Duration::MAX), Some("max_delay")),
            (
                d().with_initial_delay(Duration::from_secs(601)),
                Some("initial_delay"),
            ),
            (d().with_initial_delay(Duration::from_secs(600)), None),
            (d().with_multiplier(1.0), None),
            (d().with_multiplier(100.0), None),
            (d().with_multiplier(0.5), Some("multiplier")),
            (d().with_multiplier(100.5), Some("multiplier")),
            (d().with_multiplier(f64::NAN), Some("multiplier")),
            (d().with_multiplier(f64::INFINITY), Some("multiplier")),
            (d().with_jitter(0.0), None),
            (d().with_jitter(1.0), None),
            (d().with_jitter(-0.1), Some("jitter")),
            (d().with_jitter(1.1), Some("jitter")),
            (d().with_jitter(f64::NAN), Some("jitter")),
        ];
        for (policy, expected) in cases {
            assert_eq!(rejected(&policy), expected, "{policy:?}");
        }
    }

    #[test]
    fn handler_delays_are_capped_at_the_longest_policy_delay() {
        let longest = Duration::from_secs(30 * 24 * 3600);
        assert_eq!(capped(Duration::from_secs(5)), Duration::from_secs(5));
        assert_eq!(capped(longest), longest);
        assert_eq!(capped(Duration::MAX), longest);
    }

    #[test]
    fn delays_of_unvalidated_policies_never_panic() {
        let policy = RedeliveryPolicy::default()
            .with_multiplier(f64::NAN)
            .with_jitter(7.0)
            .with_initial_delay(Duration::from_secs(3));
        assert!(policy.delay(u32::MAX) <= Duration::from_secs(600));
        let huge = RedeliveryPolicy::default()
            .with_max_delay(Duration::MAX)
            .with_multiplier(f64::INFINITY);
        let _ = huge.delay(u32::MAX);
    }
}
