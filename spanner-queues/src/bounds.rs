//! Range checks shared by the settings types' `validate()` methods.
//!
//! Every numeric setting has a lower and an upper bound. The lower bounds keep zero from
//! meaning "unlimited" or "never"; the upper bounds keep values far below the sizes at which
//! the runtime would panic (`Semaphore::new` above `Semaphore::MAX_PERMITS`) or overflow
//! (`Instant + Duration`, `Duration + Duration`, timestamps past year 9999).

use std::fmt::Debug;
use std::ops::RangeInclusive;
use std::time::Duration;

use crate::error::{Error, Result};

/// One minute.
pub(crate) const MINUTE: Duration = Duration::from_secs(60);
/// One hour.
pub(crate) const HOUR: Duration = Duration::from_secs(60 * 60);
/// One day.
pub(crate) const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// [`Error::InvalidSetting`] for `setting`.
pub(crate) fn invalid(setting: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidSetting {
        setting,
        reason: reason.into(),
    }
}

/// `Ok` when `value` lies in `range`; otherwise [`Error::InvalidSetting`] naming `setting`, the
/// range and the value.
pub(crate) fn in_range<T: PartialOrd + Debug>(
    setting: &'static str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<()> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(invalid(
            setting,
            format!(
                "must be between {:?} and {:?}, got {value:?}",
                range.start(),
                range.end()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_names_the_setting_the_range_and_the_value() {
        assert!(in_range("x", 5_u32, 1..=10).is_ok());
        assert!(in_range("x", 1_u32, 1..=10).is_ok());
        assert!(in_range("x", 10_u32, 1..=10).is_ok());
        let error = in_range("concurrency", 0_usize, 1..=10).expect_err("below");
        match &error {
            Error::InvalidSetting { setting, reason } => {
                assert_eq!(*setting, "concurrency");
                assert_eq!(reason, "must be between 1 and 10, got 0");
            }
            other => panic!("{other:?}"),
        }
        assert!(in_range("x", Duration::MAX, Duration::ZERO..=DAY).is_err());
    }
}
