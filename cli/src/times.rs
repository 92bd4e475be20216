//! Timestamps: Spanner's RFC 3339 text and `SystemTime`s, as the command line prints them.

use std::time::SystemTime;

/// An RFC 3339 UTC timestamp (`…T03:04:05.123456Z`, `…T03:04:05Z`) with exactly three
/// fraction digits, as GoogleSQL's peek prints them.
pub(crate) fn millis(text: &str) -> String {
    let Some(body) = text.strip_suffix('Z') else {
        return text.to_owned();
    };
    let (whole, fraction) = body.split_once('.').unwrap_or((body, ""));
    let mut digits: String = fraction.chars().take(3).collect();
    while digits.len() < 3 {
        digits.push('0');
    }
    format!("{whole}.{digits}Z")
}

/// Microseconds since 1970 of an RFC 3339 UTC timestamp as Spanner sends them
/// (`2026-12-02T03:04:05.123456789Z`).
pub(crate) fn unix_micros(text: &str) -> Option<i64> {
    let body = text.strip_suffix('Z')?;
    let (date, time) = body.split_once('T')?;
    let mut date_parts = date.split('-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: i64 = date_parts.next()?.parse().ok()?;
    let day: i64 = date_parts.next()?.parse().ok()?;
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut time_parts = hms.split(':');
    let hour: i64 = time_parts.next()?.parse().ok()?;
    let minute: i64 = time_parts.next()?.parse().ok()?;
    let second: i64 = time_parts.next()?.parse().ok()?;
    let mut micros_text: String = fraction.chars().take(6).collect();
    while micros_text.len() < 6 {
        micros_text.push('0');
    }
    let micros: i64 = micros_text.parse().ok()?;
    let days = days_from_civil(year, month, day);
    Some(((days * 86_400 + hour * 3600 + minute * 60 + second) * 1_000_000) + micros)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `SystemTime` as RFC 3339 UTC with milliseconds.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    let Ok(since) = at.duration_since(SystemTime::UNIX_EPOCH) else {
        return "before 1970".to_owned();
    };
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_rfc3339() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_796_166_245_123);
        assert_eq!(rfc3339(at), "2026-12-01T23:04:05.123Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // A leap day.
        let leap = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn spanner_timestamps_read_as_text() {
        assert_eq!(
            millis("2026-12-02T03:04:05.123456789Z"),
            "2026-12-02T03:04:05.123Z"
        );
        assert_eq!(millis("2026-12-02T03:04:05Z"), "2026-12-02T03:04:05.000Z");
        assert_eq!(millis("2026-12-02T03:04:05.5Z"), "2026-12-02T03:04:05.500Z");
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_796_166_245_123_456);
        let micros = unix_micros("2026-12-01T23:04:05.123456789Z").expect("parses");
        assert_eq!(
            micros,
            i64::try_from(
                at.duration_since(SystemTime::UNIX_EPOCH)
                    .expect("after")
                    .as_micros()
            )
            .expect("fits")
        );
        assert_eq!(
            unix_micros("2000-02-29T00:00:00Z"),
            Some(951_782_400_000_000)
        );
        assert_eq!(unix_micros("yesterday"), None);
    }
}
