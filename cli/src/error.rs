//! Exit statuses and the one error every command returns.

use spanner_queues::error::Code;

/// Exit status: success.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status: the operation failed (a Spanner error, unreadable data).
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit status: bad usage (clap uses 2 as well for unknown flags and missing arguments).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status: the database, queue, table, message or dead letter does not exist.
pub(crate) const EXIT_NOT_FOUND: u8 = 3;
/// Exit status: a message with that key is already in the queue.
pub(crate) const EXIT_CONFLICT: u8 = 4;

/// A failure with its exit status.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl CliError {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Bad usage (exit status 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(EXIT_USAGE, message)
    }

    /// Something named does not exist (exit status 3).
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(EXIT_NOT_FOUND, message)
    }

    /// The operation failed (exit status 1).
    pub(crate) fn failed(message: impl Into<String>) -> Self {
        Self::new(EXIT_FAILED, message)
    }

    /// A Spanner or SDK error while `doing`, with its cause chain; NOT_FOUND and ALREADY_EXISTS
    /// keep their exit statuses.
    pub(crate) fn from_error(doing: &str, error: impl Into<spanner_queues::Error>) -> Self {
        let error: spanner_queues::Error = error.into();
        let code = match error.code() {
            Some(Code::NotFound) => EXIT_NOT_FOUND,
            Some(Code::AlreadyExists) => EXIT_CONFLICT,
            _ => EXIT_FAILED,
        };
        Self::new(code, format!("{doing}: {}", chain(&error)))
    }
}

/// An error and its sources on one line.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}
