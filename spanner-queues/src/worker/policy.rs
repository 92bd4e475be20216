//! [`RedeliveryPolicy`]: how long a failed message waits before its next attempt.

use std::time::Duration;

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
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RedeliveryPolicy {
    /// Delay after the first failed attempt (default 1 s).
    pub initial_delay: Duration,
    /// Longest delay (default 10 minutes).
    pub max_delay: Duration,
    /// Growth factor per attempt (default 2).
    pub multiplier: f64,
    /// Largest fraction taken off a delay at random, from 0 (none) to 1 (default 0.2).
    pub jitter: f64,
}

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
    /// Sets [`initial_delay`](Self::initial_delay).
    pub fn with_initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Sets [`max_delay`](Self::max_delay).
    pub fn with_max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Sets [`multiplier`](Self::multiplier) (at least 1).
    pub fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = if multiplier.is_finite() {
            multiplier.max(1.0)
        } else {
            1.0
        };
        self
    }

    /// Sets [`jitter`](Self::jitter) (clamped to 0..=1).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self
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

    #[test]
    fn odd_inputs_are_tamed() {
        let policy = RedeliveryPolicy::default()
            .with_multiplier(f64::NAN)
            .with_jitter(7.0)
            .with_initial_delay(Duration::from_secs(3));
        assert_eq!(policy.multiplier, 1.0);
        assert_eq!(policy.jitter, 1.0);
        assert!(policy.delay(u32::MAX) <= Duration::from_secs(3));
    }
}
