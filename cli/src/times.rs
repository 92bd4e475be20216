//! Timestamps and ages, through the `time` crate: Spanner's RFC 3339 text and `SystemTime`s in,
//! RFC 3339 UTC with milliseconds out.

use std::time::SystemTime;

use time::format_description::BorrowedFormatItem;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{Duration, OffsetDateTime, UtcOffset};

/// How the command line prints a timestamp: RFC 3339, UTC, exactly three fraction digits
/// (cut, not rounded), e.g. `2026-12-01T23:04:05.123Z`.
const MILLIS: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// Parses an RFC 3339 timestamp as Spanner sends them (`2026-12-02T03:04:05.123456789Z`).
pub(crate) fn parse(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).ok()
}

/// `at` in the command line's form (see [`MILLIS`]).
pub(crate) fn format(at: OffsetDateTime) -> String {
    let at = at.to_offset(UtcOffset::UTC);
    // Only years 0-9999 fit the format; Spanner's timestamps all do.
    at.format(MILLIS)
        .unwrap_or_else(|_| at.format(&Rfc3339).unwrap_or_else(|_| at.to_string()))
}

/// A timestamp Spanner sent as text, in the command line's form; text that is not RFC 3339 is
/// kept as it is.
pub(crate) fn millis(text: &str) -> String {
    parse(text).map_or_else(|| text.to_owned(), format)
}

/// `at` in the command line's form.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    // `OffsetDateTime::from(SystemTime)` panics outside the years it can hold: go through a
    // checked sum instead.
    let since_epoch = match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => Duration::try_from(after).ok(),
        Err(before) => Duration::try_from(before.duration()).ok().map(|d| -d),
    };
    since_epoch
        .and_then(|d| OffsetDateTime::UNIX_EPOCH.checked_add(d))
        .map_or_else(|| format!("{at:?}"), format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_times_print_as_rfc3339_with_milliseconds() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_796_166_245_123);
        assert_eq!(rfc3339(at), "2026-12-01T23:04:05.123Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // A leap day.
        let leap = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
        // Before 1970, and a fraction that is cut rather than rounded.
        let before = SystemTime::UNIX_EPOCH - std::time::Duration::from_micros(1_999);
        assert_eq!(rfc3339(before), "1969-12-31T23:59:59.998Z");
    }

    #[test]
    fn spanner_timestamps_print_with_three_fraction_digits() {
        assert_eq!(
            millis("2026-12-02T03:04:05.123456789Z"),
            "2026-12-02T03:04:05.123Z"
        );
        assert_eq!(
            millis("2026-12-02T03:04:05.999999Z"),
            "2026-12-02T03:04:05.999Z"
        );
        assert_eq!(millis("2026-12-02T03:04:05Z"), "2026-12-02T03:04:05.000Z");
        assert_eq!(millis("2026-12-02T03:04:05.5Z"), "2026-12-02T03:04:05.500Z");
        // An offset is turned into UTC.
        assert_eq!(
            millis("2026-12-02T04:04:05.5+01:00"),
            "2026-12-02T03:04:05.500Z"
        );
        assert_eq!(millis("yesterday"), "yesterday");
    }

    #[test]
    fn spanner_timestamps_parse_to_the_microsecond() {
        let at = parse("2026-12-01T23:04:05.123456789Z").expect("parses");
        assert_eq!(at.unix_timestamp(), 1_796_166_245);
        assert_eq!(at.nanosecond(), 123_456_789);
        assert_eq!(
            parse("2000-02-29T00:00:00Z").map(OffsetDateTime::unix_timestamp),
            Some(951_782_400)
        );
        assert_eq!(parse("2026-02-30T00:00:00Z"), None);
        assert_eq!(parse("yesterday"), None);
    }
}
