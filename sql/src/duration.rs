//! Go-style durations (`20m`, `1m30s`, `1.5s`): the format of the `max_duration` argument of
//! Spanner's `RECEIVE` queries, which the emulator's command line takes too.

use std::fmt;
use std::time::Duration;

/// A text that is not a Go-style duration, or one that does not fit a [`Duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// Not a sequence of numbers with units.
    Malformed,
    /// A number without a unit.
    MissingUnit,
    /// A negative duration.
    Negative,
    /// Longer than about 584 years (`u64::MAX` nanoseconds).
    TooLong,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DurationError::Malformed => "expected a number and a unit, e.g. '20m' or '1m30s'",
            DurationError::MissingUnit => {
                "every number needs a unit: ns, us, ms, s, m or h (e.g. '20m', '1m30s')"
            }
            DurationError::Negative => "the duration is negative",
            DurationError::TooLong => "the duration is too long",
        })
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration the way Go's `time.ParseDuration` does: a sequence of decimal numbers,
/// each with an optional fraction and a unit (`ns`, `us` or `µs`, `ms`, `s`, `m`, `h`), with an
/// optional leading sign; `0` needs no unit. Fractional digits beyond nanoseconds are dropped,
/// as Go does.
///
/// ```
/// use std::time::Duration;
/// use spanner_queues_sql::parse_go_duration;
///
/// assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
/// assert!(parse_go_duration("20").is_err());
/// ```
///
/// # Errors
/// A [`DurationError`] saying what is wrong; a negative duration is an error, since a
/// [`Duration`] cannot hold it.
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    /// Units and their length in nanoseconds; longer spellings first.
    const UNITS: [(&str, u128); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'+') => (false, &text[1..]),
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Malformed);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => f.split_at(f.bytes().take_while(u8::is_ascii_digit).count()),
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::Malformed);
        }
        let Some(&(unit, nanos)) = UNITS.iter().find(|(u, _)| after.starts_with(u)) else {
            return Err(DurationError::MissingUnit);
        };
        rest = &after[unit.len()..];
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| DurationError::TooLong)?
        };
        let mut part = int.checked_mul(nanos).ok_or(DurationError::TooLong)?;
        let mut scale = nanos;
        for digit in frac_part.bytes().take(30) {
            scale /= 10;
            part += u128::from(digit - b'0') * scale;
        }
        total = total
            .checked_add(part)
            .filter(|t| *t <= u128::from(u64::MAX))
            .ok_or(DurationError::TooLong)?;
    }
    if negative && total > 0 {
        return Err(DurationError::Negative);
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| DurationError::TooLong)?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| DurationError::TooLong)?;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let cases = [
            ("20m", Duration::from_secs(1200)),
            ("1m30s", Duration::from_secs(90)),
            ("10s", Duration::from_secs(10)),
            ("500ms", Duration::from_millis(500)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            (".5s", Duration::from_millis(500)),
            ("1.s", Duration::from_secs(1)),
            ("1h2m3s4ms5us6ns", Duration::new(3723, 4_005_006)),
            ("250µs", Duration::from_micros(250)),
            ("+2s", Duration::from_secs(2)),
            ("1.0000000001s", Duration::from_secs(1)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("-0s", Duration::ZERO),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
        let errors = [
            ("", DurationError::Malformed),
            ("m", DurationError::Malformed),
            ("20", DurationError::MissingUnit),
            ("1 m", DurationError::MissingUnit),
            ("1d", DurationError::MissingUnit),
            ("1.s2", DurationError::MissingUnit),
            ("20M", DurationError::MissingUnit),
            ("1e3s", DurationError::MissingUnit),
            ("-1s", DurationError::Negative),
            ("99999999999999999999h", DurationError::TooLong),
        ];
        for (text, want) in errors {
            assert_eq!(parse_go_duration(text), Err(want), "{text}");
        }
    }
}
