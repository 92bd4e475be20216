//! gRPC status codes, what they say about a failed request, and Spanner's own errors.
//!
//! A leaf below [`error`](crate::error) and [`outcome`](crate::outcome), which both hold a
//! [`SpannerError`]; the public paths are in [`error`](crate::error).

use std::fmt;

/// gRPC status codes (the official client's type).
pub use google_cloud_gax::error::rpc::Code;

/// What a caller may do after an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Classification {
    /// Nothing was applied and the cause is transient: the same call may be retried as is
    /// (with backoff).
    Retryable,
    /// Retrying the same call will fail the same way (bad input, a message already acked, a
    /// missing queue, …). Whether anything was written is stated on each variant.
    Permanent,
    /// The operation may or may not have been applied (for instance a commit whose reply was
    /// lost). Find out before retrying, or retry only what is idempotent.
    OutcomeUnknown,
}

/// What a gRPC status code says about a failed request, in one table: whether the same request
/// may be retried as is (nothing was applied, and the cause is transient), and whether a
/// Commit that failed with it may have been applied.
///
/// | Code | Retryable | Commit may have applied | Why |
/// |---|---|---|---|
/// | `ABORTED` | yes | no | Spanner rolled the transaction back |
/// | `RESOURCE_EXHAUSTED` | yes | no | refused for quota or size, before any work (assumed: Spanner documents it as a request-level error) |
/// | `UNAVAILABLE` | yes | yes | transient, but the request may have reached Spanner (measured: a dropped reply ended with `UNAVAILABLE` after the commit was applied) |
/// | `DEADLINE_EXCEEDED` | yes | yes | the call ended early; a commit may complete anyway |
/// | `INTERNAL` | yes | yes | a server or proxy failure at an unknown point (an HTTP/2 stream reset arrives as `INTERNAL`) |
/// | `CANCELLED`, `UNKNOWN`, `DATA_LOSS` | no | yes | ended at an unknown point |
/// | `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `FAILED_PRECONDITION`, `OUT_OF_RANGE` | no | no | rejected: a bad request, a missing session or transaction, a constraint |
/// | `PERMISSION_DENIED`, `UNAUTHENTICATED`, `UNIMPLEMENTED` | no | no | refused before any work |
/// | `OK` on an error, or a code this crate does not know | no | yes | malformed: cannot tell |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CodeFacts {
    /// The same request may be retried as is.
    pub(crate) retryable: bool,
    /// A Commit that failed with this code may have been applied.
    pub(crate) commit_may_have_applied: bool,
}

/// See [`CodeFacts`].
pub(crate) fn code_facts(code: Code) -> CodeFacts {
    let (retryable, commit_may_have_applied) = match code {
        Code::Aborted | Code::ResourceExhausted => (true, false),
        Code::Unavailable | Code::DeadlineExceeded | Code::Internal => (true, true),
        Code::Cancelled | Code::Unknown | Code::DataLoss => (false, true),
        Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::Unimplemented => (false, false),
        // `OK` on an error, or a code added to the client after this crate.
        _ => (false, true),
    };
    CodeFacts {
        retryable,
        commit_may_have_applied,
    }
}

/// An error returned by Spanner (or by the client on its way there), kept opaque.
///
/// The official client is a preview; its error type stays behind this wrapper. Its `Display`
/// shows the status code and Spanner's message.
pub struct SpannerError(google_cloud_spanner::Error);

impl SpannerError {
    pub(crate) fn new(error: google_cloud_spanner::Error) -> Self {
        Self(error)
    }

    /// The official client's error. Crate-internal, to pass it back to the client unchanged.
    pub(crate) fn into_inner(self) -> google_cloud_spanner::Error {
        self.0
    }

    /// The gRPC status code, if Spanner answered with one.
    pub fn code(&self) -> Option<Code> {
        self.0.status().map(|s| s.code)
    }

    /// The status message Spanner sent, if any.
    pub fn status_message(&self) -> Option<&str> {
        self.0.status().map(|s| s.message.as_str())
    }

    /// Whether Spanner aborted the transaction (`ABORTED`); the transaction runner retries these.
    pub fn is_aborted(&self) -> bool {
        self.code() == Some(Code::Aborted)
    }

    /// Whether the request timed out on the client. The request may still have completed in
    /// Spanner.
    pub fn is_timeout(&self) -> bool {
        self.0.is_timeout()
    }

    /// Whether the client's retry policy gave up (attempts or time exhausted).
    pub fn is_exhausted(&self) -> bool {
        self.0.is_exhausted()
    }

    /// Retryable or permanent: nothing was applied (a commit that may have been applied is an
    /// [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown), never an [`Error::Spanner`](crate::Error::Spanner)).
    pub(crate) fn classification(&self) -> Classification {
        let retryable = match self.code() {
            Some(code) => code_facts(code).retryable,
            // The request could not be encoded, or the reply decoded: the same call fails again.
            None if self.0.is_serialization() || self.0.is_deserialization() => false,
            // A client-side timeout, an exhausted retry loop, a transport failure.
            None => true,
        };
        if retryable {
            Classification::Retryable
        } else {
            Classification::Permanent
        }
    }
}

impl fmt::Debug for SpannerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SpannerError").field(&self.0).finish()
    }
}

impl fmt::Display for SpannerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.status() {
            Some(status) if status.message.is_empty() => {
                write!(f, "Spanner request failed with {}", status.code.name())
            }
            Some(status) => write!(
                f,
                "Spanner request failed with {}: {}",
                status.code.name(),
                status.message
            ),
            None => write!(f, "Spanner request failed: {}", self.0),
        }
    }
}

impl std::error::Error for SpannerError {
    /// The client error's own cause (its text is already in this error's `Display`).
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
