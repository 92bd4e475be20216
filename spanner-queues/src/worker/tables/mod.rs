//! The worker's own tables: attempt counts and dead letters.
//!
//! - [`layout`]: the tables' names, columns and DDL, and the start-up check of their layout;
//! - [`attempts`]: counting attempts, recording failures, forgetting a message's attempts;
//! - [`dead_letters`]: moving a message to the dead-letter table, and [`DeadLetters`].

mod attempts;
mod dead_letters;
mod layout;

use std::time::Duration;

pub(crate) use attempts::attempt_from;
pub(crate) use attempts::{
    Attempt, AttemptRows, Prefetched, StartRequest, attempts_in, buffer_rows, start_attempts,
};
// For the in-memory store, which counts attempts and cuts error texts as the tables do.
#[cfg(test)]
pub(crate) use attempts::AttemptRow;
pub use dead_letters::{DeadLetter, DeadLetters, Purge};
pub(crate) use dead_letters::{Letter, OwnedLetter, dead_letter, dead_letter_in};
pub use layout::MAX_ERROR_TEXT;
pub(crate) use layout::schema_statements;
pub(crate) use layout::truncate;
pub(crate) use layout::{check_start, column, table_names};

/// How long to wait at most for worker-table transactions at shutdown.
pub(crate) const SHUTDOWN_RELEASE_BUDGET: Duration = Duration::from_secs(60);
