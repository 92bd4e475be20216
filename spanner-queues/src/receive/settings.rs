//! [`ReceiveSettings`]: the knobs of a [`Receiver`](super::Receiver).

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::bounds;
use crate::error::Result;

/// How a [`Receiver`](super::Receiver) calls `RECEIVE` and renews leases.
///
/// The defaults suit Spanner's 10-second lease: one receive call of 60 s at a time, at most 32
/// deliveries held by the application, renewals every 4 s for at most 30 minutes per message.
/// Each setter gives its range; building a receiver or a worker checks them
/// ([`Error::InvalidSetting`](crate::Error::InvalidSetting)).
///
/// ```
/// use std::time::Duration;
/// use spanner_queues::ReceiveSettings;
///
/// let settings = ReceiveSettings::default()
///     .with_max_in_flight(64)
///     .with_max_duration(Duration::from_secs(20 * 60));
/// assert_eq!(settings.max_in_flight(), 64);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveSettings {
    batch_size: Option<u32>,
    parallel_calls: usize,
    /// `None`: the default, and not set by the user (a worker sets it from its concurrency).
    max_in_flight: Option<usize>,
    max_duration: Duration,
    call_deadline_margin: Duration,
    renew_interval: Duration,
    renew_timeout: Duration,
    renew_chunk_size: usize,
    max_lease_duration: Duration,
    min_lease_remaining: Duration,
    min_restart_backoff: Duration,
    max_restart_backoff: Duration,
}

/// Deliveries held at once by default.
const DEFAULT_MAX_IN_FLIGHT: usize = 32;

// The ranges of the settings (the setters' docs repeat them).
/// Spanner documents neither a default nor a maximum `max_batch_size`; a call never asks for
/// more rows than there are free slots anyway.
pub(crate) const BATCH_SIZE: RangeInclusive<u32> = 1..=100_000;
/// Spanner allows 1000 active receive queries with the same arguments per queue.
const PARALLEL_CALLS: RangeInclusive<usize> = 1..=1_000;
/// Far below `Semaphore::MAX_PERMITS`; every held delivery has its lease renewed.
pub(crate) const MAX_IN_FLIGHT: RangeInclusive<usize> = 1..=100_000;
const MAX_DURATION: RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::HOUR;
/// The call's deadline is `max_duration` plus this margin; with no margin the client would
/// cut a call off as Spanner ends it.
const CALL_DEADLINE_MARGIN: RangeInclusive<Duration> = Duration::from_secs(1)..=bounds::HOUR;
/// Spanner's lease lasts about 10 s (documented; not configurable): a round must come before a
/// lease ends, with time left for the call itself. Change here if the lease changes.
const RENEW_INTERVAL: RangeInclusive<Duration> = Duration::from_millis(1)..=Duration::from_secs(8);
const RENEW_TIMEOUT: RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::MINUTE;
const RENEW_CHUNK_SIZE: RangeInclusive<usize> = 1..=100_000;
const MAX_LEASE_DURATION: RangeInclusive<Duration> = Duration::ZERO..=bounds::DAY;
/// A fresh lease has about 10 s left: a larger minimum would skip every row.
const MIN_LEASE_REMAINING: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(5);
const RESTART_BACKOFF: RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::HOUR;

impl Default for ReceiveSettings {
    fn default() -> Self {
        Self {
            batch_size: None,
            parallel_calls: 1,
            max_in_flight: None,
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
    /// `max_batch_size` of each `RECEIVE` call (from 1 to 100 000; default: left to
    /// Spanner, which documents neither its default nor its maximum). A call never asks for
    /// more rows than there are free slots.
    pub fn with_batch_size(mut self, batch_size: u32) -> Self {
        self.batch_size = Some(batch_size);
        self
    }

    /// How many `RECEIVE` calls run at once (default 1; from 1 to 1000: Spanner allows 1000
    /// active receive queries with the same arguments per queue).
    pub fn with_parallel_calls(mut self, calls: usize) -> Self {
        self.parallel_calls = calls;
        self
    }

    /// Deliveries handed out and not yet dropped, at most (default 32; from 1 to 100 000).
    /// When reached, the receiver stops reading rows (see the [module docs](super) for what
    /// that means for rows Spanner already leased).
    ///
    /// A [`Worker`](crate::Worker) sets this from its concurrency and prefetch, and refuses
    /// settings that set it.
    pub fn with_max_in_flight(mut self, deliveries: usize) -> Self {
        self.max_in_flight = Some(deliveries);
        self
    }

    /// `max_duration` of each `RECEIVE` call (default 60 s; from 1 ms to 1 hour). The call is
    /// re-issued when it ends. Spanner recommends avoiding both very short and very long calls
    /// (about 20 minutes in its samples); a shorter call notices a dropped connection sooner.
    pub fn with_max_duration(mut self, duration: Duration) -> Self {
        self.max_duration = duration;
        self
    }

    /// How much longer than `max_duration` the client lets one call run before it times out
    /// (default 30 s; from 1 s to 1 hour).
    ///
    /// The official client sets no deadline on streaming queries unless the application
    /// configured one on its client; the receiver always sets one, so that a call is neither
    /// cut short by a client-wide timeout nor left hanging forever.
    pub fn with_call_deadline_margin(mut self, margin: Duration) -> Self {
        self.call_deadline_margin = margin;
        self
    }

    /// Time between lease renewal rounds (default 4 s; from 1 ms to 8 s, as Spanner's lease
    /// lasts about 10 s). Each round renews every held lease in as few `RENEWLEASE` calls as
    /// [`renew_chunk_size`](Self::with_renew_chunk_size) allows.
    pub fn with_renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = interval;
        self
    }

    /// Deadline of one `RENEWLEASE` call (default 5 s; from 1 ms to 1 minute). Renewal calls
    /// are never retried by the client: a renewal rotates tokens, so a call whose reply was
    /// lost cannot be repeated.
    pub fn with_renew_timeout(mut self, timeout: Duration) -> Self {
        self.renew_timeout = timeout;
        self
    }

    /// Most lease tokens in one `RENEWLEASE` call (default 500; from 1 to 100 000).
    pub fn with_renew_chunk_size(mut self, tokens: usize) -> Self {
        self.renew_chunk_size = tokens;
        self
    }

    /// Total lease time of one delivery (default 30 minutes; from 0 to 24 hours): renewals
    /// stop after it, and the lease then lapses (the holder is told the lease is lost).
    /// `Duration::ZERO` turns renewal off: every lease lapses after Spanner's initial lease
    /// time.
    pub fn with_max_lease_duration(mut self, duration: Duration) -> Self {
        self.max_lease_duration = duration;
        self
    }

    /// A row read with less lease left than this is skipped and counted as expired on receipt
    /// (default 1 s; from 0 to 5 s, as a fresh lease has about 10 s left): Spanner delivers it
    /// again once the lease has expired.
    pub fn with_min_lease_remaining(mut self, remaining: Duration) -> Self {
        self.min_lease_remaining = remaining;
        self
    }

    /// Delays before re-issuing a `RECEIVE` call that failed: the first is `min` (default
    /// 100 ms), and each next one doubles, with jitter, up to `max` (default 30 s). Both from
    /// 1 ms to 1 hour, with `min <= max`.
    pub fn with_restart_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.min_restart_backoff = min;
        self.max_restart_backoff = max;
        self
    }

    /// `max_batch_size` of each `RECEIVE` call; `None` leaves it to Spanner.
    pub fn batch_size(&self) -> Option<u32> {
        self.batch_size
    }

    /// How many `RECEIVE` calls run at once.
    pub fn parallel_calls(&self) -> usize {
        self.parallel_calls
    }

    /// Deliveries handed out and not yet dropped, at most.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT)
    }

    /// Whether [`with_max_in_flight`](Self::with_max_in_flight) was called.
    pub(crate) fn max_in_flight_is_set(&self) -> bool {
        self.max_in_flight.is_some()
    }

    /// `max_duration` of each `RECEIVE` call.
    pub fn max_duration(&self) -> Duration {
        self.max_duration
    }

    /// How much longer than `max_duration` one call may run before it times out.
    pub fn call_deadline_margin(&self) -> Duration {
        self.call_deadline_margin
    }

    /// Time between lease renewal rounds.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }

    /// Deadline of one `RENEWLEASE` call.
    pub fn renew_timeout(&self) -> Duration {
        self.renew_timeout
    }

    /// Most lease tokens in one `RENEWLEASE` call.
    pub fn renew_chunk_size(&self) -> usize {
        self.renew_chunk_size
    }

    /// Total lease time of one delivery.
    pub fn max_lease_duration(&self) -> Duration {
        self.max_lease_duration
    }

    /// Rows read with less lease left than this are skipped.
    pub fn min_lease_remaining(&self) -> Duration {
        self.min_lease_remaining
    }

    /// First delay before re-issuing a failed `RECEIVE` call.
    pub fn min_restart_backoff(&self) -> Duration {
        self.min_restart_backoff
    }

    /// Longest delay between failed `RECEIVE` calls.
    pub fn max_restart_backoff(&self) -> Duration {
        self.max_restart_backoff
    }

    /// Checks every value against its range (given on each setter); building a
    /// [`Receiver`](super::Receiver) or a [`Worker`](crate::Worker) calls it.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(batch_size) = self.batch_size {
            bounds::in_range("batch_size", batch_size, BATCH_SIZE)?;
        }
        bounds::in_range("parallel_calls", self.parallel_calls, PARALLEL_CALLS)?;
        bounds::in_range("max_in_flight", self.max_in_flight(), MAX_IN_FLIGHT)?;
        bounds::in_range("max_duration", self.max_duration, MAX_DURATION)?;
        bounds::in_range(
            "call_deadline_margin",
            self.call_deadline_margin,
            CALL_DEADLINE_MARGIN,
        )?;
        bounds::in_range("renew_interval", self.renew_interval, RENEW_INTERVAL)?;
        bounds::in_range("renew_timeout", self.renew_timeout, RENEW_TIMEOUT)?;
        bounds::in_range("renew_chunk_size", self.renew_chunk_size, RENEW_CHUNK_SIZE)?;
        bounds::in_range(
            "max_lease_duration",
            self.max_lease_duration,
            MAX_LEASE_DURATION,
        )?;
        bounds::in_range(
            "min_lease_remaining",
            self.min_lease_remaining,
            MIN_LEASE_REMAINING,
        )?;
        bounds::in_range("restart_backoff", self.min_restart_backoff, RESTART_BACKOFF)?;
        bounds::in_range(
            "restart_backoff",
            self.max_restart_backoff,
            self.min_restart_backoff..=*RESTART_BACKOFF.end(),
        )
    }
}

/// Formats `max_duration` for `RECEIVE`: whole minutes as `'20m'` (the documented form), other
/// whole seconds as `'90s'`, anything finer in milliseconds (`'1500ms'`).
///
/// Spanner documents only minute values (`'20m'`, `'1m'`); the other units follow the
/// Go-style durations the emulator accepts (not documented). Change it here if Spanner refuses
/// them.
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

    /// The setting `validate` names for `settings`, or `None` when they are valid.
    fn rejected(settings: &ReceiveSettings) -> Option<&'static str> {
        match settings.validate() {
            Ok(()) => None,
            Err(crate::Error::InvalidSetting { setting, .. }) => Some(setting),
            Err(other) => panic!("not an InvalidSetting: {other:?}"),
        }
    }

    #[test]
    fn receive_settings_bound_every_value_at_both_ends() {
        let d = ReceiveSettings::default;
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        let ns = Duration::from_nanos(1);
        let hour = bounds::HOUR;
        assert_eq!(rejected(&d()), None);
        let cases = [
            (d().with_batch_size(0), Some("batch_size")),
            (d().with_batch_size(1), None),
            (d().with_batch_size(100_000), None),
            (d().with_batch_size(100_001), Some("batch_size")),
            (d().with_parallel_calls(0), Some("parallel_calls")),
            (d().with_parallel_calls(1_000), None),
            (d().with_parallel_calls(1_001), Some("parallel_calls")),
            (d().with_max_in_flight(0), Some("max_in_flight")),
            (d().with_max_in_flight(1), None),
            (d().with_max_in_flight(100_000), None),
            // `Semaphore::new` panics above `Semaphore::MAX_PERMITS`.
            (d().with_max_in_flight(100_001), Some("max_in_flight")),
            (d().with_max_in_flight(usize::MAX), Some("max_in_flight")),
            (d().with_max_duration(Duration::ZERO), Some("max_duration")),
            (d().with_max_duration(ms(1)), None),
            (d().with_max_duration(hour), None),
            (d().with_max_duration(hour + ns), Some("max_duration")),
            // `max_duration + call_deadline_margin` would overflow.
            (d().with_max_duration(Duration::MAX), Some("max_duration")),
            (
                d().with_call_deadline_margin(Duration::ZERO),
                Some("call_deadline_margin"),
            ),
            (d().with_call_deadline_margin(s(1)), None),
            (d().with_call_deadline_margin(hour), None),
            (
                d().with_call_deadline_margin(Duration::MAX),
                Some("call_deadline_margin"),
            ),
            (
                d().with_renew_interval(Duration::ZERO),
                Some("renew_interval"),
            ),
            (d().with_renew_interval(ms(1)), None),
            (d().with_renew_interval(s(8)), None),
            // Spanner's lease lasts about 10 s: every lease would lapse between rounds.
            (d().with_renew_interval(s(10)), Some("renew_interval")),
            (
                d().with_renew_interval(Duration::MAX),
                Some("renew_interval"),
            ),
            (
                d().with_renew_timeout(Duration::ZERO),
                Some("renew_timeout"),
            ),
            (d().with_renew_timeout(bounds::MINUTE), None),
            (d().with_renew_timeout(Duration::MAX), Some("renew_timeout")),
            (d().with_renew_chunk_size(0), Some("renew_chunk_size")),
            (d().with_renew_chunk_size(100_000), None),
            (d().with_renew_chunk_size(100_001), Some("renew_chunk_size")),
            (d().with_max_lease_duration(Duration::ZERO), None),
            (d().with_max_lease_duration(bounds::DAY), None),
            (
                d().with_max_lease_duration(bounds::DAY + ns),
                Some("max_lease_duration"),
            ),
            (d().with_min_lease_remaining(Duration::ZERO), None),
            (d().with_min_lease_remaining(s(5)), None),
            // A fresh lease has about 10 s left: every row would be skipped.
            (
                d().with_min_lease_remaining(s(10)),
                Some("min_lease_remaining"),
            ),
            (
                d().with_restart_backoff(Duration::ZERO, s(1)),
                Some("restart_backoff"),
            ),
            (d().with_restart_backoff(ms(1), ms(1)), None),
            (d().with_restart_backoff(ms(1), hour), None),
            (
                d().with_restart_backoff(s(2), s(1)),
                Some("restart_backoff"),
            ),
            (
                d().with_restart_backoff(ms(1), Duration::MAX),
                Some("restart_backoff"),
            ),
        ];
        for (settings, expected) in cases {
            assert_eq!(rejected(&settings), expected, "{settings:?}");
        }
    }

    #[test]
    fn max_in_flight_defaults_to_32_and_remembers_being_set() {
        let default = ReceiveSettings::default();
        assert_eq!(default.max_in_flight(), 32);
        assert!(!default.max_in_flight_is_set());
        let set = default.with_max_in_flight(32);
        assert!(set.max_in_flight_is_set());
        assert_eq!(set.max_in_flight(), 32);
    }
}
