//! [`ReceiveSettings`]: the knobs of a [`Receiver`](super::Receiver).

use std::time::Duration;

use crate::error::{Error, Result};

/// How a [`Receiver`](super::Receiver) calls `RECEIVE` and renews leases.
///
/// The defaults suit Spanner's 10-second lease: one receive call of 60 s at a time, at most 32
/// deliveries held by the application, renewals every 4 s for at most 30 minutes per message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceiveSettings {
    /// `max_batch_size` of each `RECEIVE` call; `None` leaves it to Spanner (default `None`).
    /// \[?\] Spanner documents neither the default nor the maximum.
    pub batch_size: Option<u32>,
    /// How many `RECEIVE` calls run at once (default 1). Spanner allows 1000 active receive
    /// queries with the same arguments per queue.
    pub parallel_calls: usize,
    /// Deliveries handed out and not yet dropped, at most (default 32). When reached, the
    /// receiver stops reading rows (see the [module docs](super) for what that means for rows
    /// Spanner already leased).
    pub max_in_flight: usize,
    /// `max_duration` of each `RECEIVE` call (default 60 s). The call is re-issued when it ends.
    /// Spanner recommends avoiding both very short and very long calls (about 20 minutes in its
    /// samples); a shorter call notices a dropped connection sooner.
    pub max_duration: Duration,
    /// How much longer than `max_duration` the client lets one call run before it times out
    /// (default 30 s). The official client sets no deadline on streaming queries unless the
    /// application configured one on its client; the receiver always sets one, so that a call
    /// is neither cut short by a client-wide timeout nor left hanging forever.
    pub call_deadline_margin: Duration,
    /// Time between lease renewal rounds (default 4 s, for Spanner's 10-second lease). Each
    /// round renews every held lease in as few `RENEWLEASE` calls as
    /// [`renew_chunk_size`](Self::renew_chunk_size) allows.
    pub renew_interval: Duration,
    /// Deadline of one `RENEWLEASE` call (default 5 s). Renewal calls are never retried by the
    /// client: a renewal rotates tokens, so a call whose reply was lost cannot be repeated.
    pub renew_timeout: Duration,
    /// Most lease tokens in one `RENEWLEASE` call (default 500).
    pub renew_chunk_size: usize,
    /// Total lease time of one delivery (default 30 minutes): renewals stop after it, and the
    /// lease then lapses (the holder is told the lease is lost).
    pub max_lease_duration: Duration,
    /// A row read with less lease left than this is skipped and counted as expired on receipt
    /// (default 1 s): Spanner delivers it again once the lease has expired.
    pub min_lease_remaining: Duration,
    /// First delay before re-issuing a `RECEIVE` call that failed (default 100 ms); it doubles,
    /// with jitter, up to [`max_restart_backoff`](Self::max_restart_backoff).
    pub min_restart_backoff: Duration,
    /// Longest delay between failed `RECEIVE` calls (default 30 s).
    pub max_restart_backoff: Duration,
}

impl Default for ReceiveSettings {
    fn default() -> Self {
        Self {
            batch_size: None,
            parallel_calls: 1,
            max_in_flight: 32,
            max_duration: Duration::from_secs(60),
            call_deadline_margin: Duration::from_secs(30),
            renew_interval: Duration::from_secs(4),
            renew_timeout: Duration::from_secs(5),
            renew_chunk_size: 500,
            max_lease_duration: Duration::from_secs(30 * 60),
            min_lease_remaining: Duration::from_secs(1),
            min_restart_backoff: Duration::from_millis(100),
            max_restart_backoff: Duration::from_secs(30),
        }
    }
}

impl ReceiveSettings {
    /// Sets [`batch_size`](Self::batch_size).
    pub fn with_batch_size(mut self, batch_size: u32) -> Self {
        self.batch_size = Some(batch_size);
        self
    }

    /// Sets [`parallel_calls`](Self::parallel_calls).
    pub fn with_parallel_calls(mut self, calls: usize) -> Self {
        self.parallel_calls = calls;
        self
    }

    /// Sets [`max_in_flight`](Self::max_in_flight).
    pub fn with_max_in_flight(mut self, deliveries: usize) -> Self {
        self.max_in_flight = deliveries;
        self
    }

    /// Sets [`max_duration`](Self::max_duration).
    pub fn with_max_duration(mut self, duration: Duration) -> Self {
        self.max_duration = duration;
        self
    }

    /// Sets [`call_deadline_margin`](Self::call_deadline_margin).
    pub fn with_call_deadline_margin(mut self, margin: Duration) -> Self {
        self.call_deadline_margin = margin;
        self
    }

    /// Sets [`renew_interval`](Self::renew_interval).
    pub fn with_renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = interval;
        self
    }

    /// Sets [`renew_timeout`](Self::renew_timeout).
    pub fn with_renew_timeout(mut self, timeout: Duration) -> Self {
        self.renew_timeout = timeout;
        self
    }

    /// Sets [`renew_chunk_size`](Self::renew_chunk_size).
    pub fn with_renew_chunk_size(mut self, tokens: usize) -> Self {
        self.renew_chunk_size = tokens;
        self
    }

    /// Sets [`max_lease_duration`](Self::max_lease_duration). `Duration::ZERO` turns renewal
    /// off: every lease lapses after Spanner's initial lease time.
    pub fn with_max_lease_duration(mut self, duration: Duration) -> Self {
        self.max_lease_duration = duration;
        self
    }

    /// Sets [`min_lease_remaining`](Self::min_lease_remaining).
    pub fn with_min_lease_remaining(mut self, remaining: Duration) -> Self {
        self.min_lease_remaining = remaining;
        self
    }

    /// Sets [`min_restart_backoff`](Self::min_restart_backoff) and
    /// [`max_restart_backoff`](Self::max_restart_backoff).
    pub fn with_restart_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.min_restart_backoff = min;
        self.max_restart_backoff = max;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming the first setting out of range.
    pub fn validate(&self) -> Result<()> {
        let invalid = |setting: &'static str, reason: &str| {
            Err(Error::InvalidSetting {
                setting,
                reason: reason.to_owned(),
            })
        };
        if self.batch_size == Some(0) {
            return invalid("batch_size", "must be positive");
        }
        if self.parallel_calls == 0 {
            return invalid("parallel_calls", "must be at least 1");
        }
        if self.max_in_flight == 0 {
            return invalid("max_in_flight", "must be at least 1");
        }
        if self.max_duration < Duration::from_millis(1) {
            return invalid("max_duration", "must be at least 1 ms");
        }
        if self.renew_interval.is_zero() {
            return invalid("renew_interval", "must be positive");
        }
        if self.renew_timeout.is_zero() {
            return invalid("renew_timeout", "must be positive");
        }
        if self.renew_chunk_size == 0 {
            return invalid("renew_chunk_size", "must be at least 1");
        }
        if self.min_restart_backoff.is_zero() || self.max_restart_backoff < self.min_restart_backoff
        {
            return invalid("restart_backoff", "needs 0 < min <= max");
        }
        Ok(())
    }
}

/// Formats `max_duration` for `RECEIVE`: whole minutes as `'20m'` (the documented form), other
/// whole seconds as `'90s'`, anything finer in milliseconds (`'1500ms'`).
///
/// \[?\] Spanner documents only minute values (`'20m'`, `'1m'`); the other units follow the
/// Go-style durations the emulator accepts. Change it here if Spanner refuses them.
pub(crate) fn format_max_duration(duration: Duration) -> String {
    let millis = duration.as_millis().max(1);
    if millis.is_multiple_of(60_000) {
        format!("{}m", millis / 60_000)
    } else if millis.is_multiple_of(1000) {
        format!("{}s", millis / 1000)
    } else {
        format!("{millis}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_use_the_documented_minute_form_when_they_can() {
        assert_eq!(format_max_duration(Duration::from_secs(20 * 60)), "20m");
        assert_eq!(format_max_duration(Duration::from_secs(60)), "1m");
        assert_eq!(format_max_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_max_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_max_duration(Duration::from_micros(10)), "1ms");
    }

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        ReceiveSettings::default().validate().expect("defaults");
        let error = ReceiveSettings::default()
            .with_max_in_flight(0)
            .validate()
            .expect_err("zero in flight");
        assert!(error.to_string().contains("max_in_flight"), "{error}");
        let error = ReceiveSettings::default()
            .with_batch_size(0)
            .validate()
            .expect_err("zero batch");
        assert!(error.to_string().contains("batch_size"), "{error}");
    }
}
