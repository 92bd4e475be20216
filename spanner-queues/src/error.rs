//! The crate's error type, its gRPC codes and its retry classification.
//!
//! Every fallible call returns [`Error`]. [`Error::classification`] says what a caller may do:
//! retry as is, give up, or first find out whether the operation was applied.
//!
//! # Inside a transaction runner
//!
//! The official client's `TransactionRunner::run` closure must return
//! `google_cloud_spanner::Error`. `?` converts an [`Error`] into it: an error that came from
//! Spanner is passed through unchanged (so the runner still retries aborts); every other error
//! becomes a gRPC status with the right code and a `google.rpc.ErrorInfo` detail (domain
//! [`ERROR_DOMAIN`](crate::error::ERROR_DOMAIN), a stable reason such as `ALREADY_ACKED`, and the queue and key as metadata).
//! `Error::from` turns the runner's error back into the typed variant:
//!
//! ```
//! use std::collections::BTreeMap;
//! use spanner_queues::{Error, QueueMessage};
//!
//! #[derive(QueueMessage)]
//! #[queue(name = "Reports")]
//! struct Report {
//!     #[queue(key)]
//!     id: i64,
//!     // JSON object keys must be strings: encoding this map fails.
//!     cells: BTreeMap<(u8, u8), String>,
//! }
//!
//! // What `?` does inside `runner.run(async |tx| { … })`:
//! fn in_closure(report: &Report) -> google_cloud_spanner::Result<()> {
//!     let _payload = report.encode()?;
//!     Ok(())
//! }
//!
//! let report = Report { id: 7, cells: BTreeMap::from([((0, 0), "x".to_string())]) };
//! let through_runner = in_closure(&report).expect_err("cannot encode");
//! let typed = Error::from(through_runner);
//! assert!(matches!(typed, Error::Encode { ref queue, .. } if queue == "Reports"));
//! assert_eq!(typed.key().map(ToString::to_string).as_deref(), Some("(7)"));
//! ```

use std::collections::HashMap;
use std::fmt;

use google_cloud_gax::error::rpc::{Code as GaxCode, Status, StatusDetails};
use google_cloud_rpc::model::ErrorInfo;

use crate::codec::CodecError;
use crate::ident::{IdentifierError, IdentifierKind, IdentifierProblem, QueueName};
use crate::key::{BoxError, KeyError, MessageKey};
use crate::outcome::{CommitMarker, MarkerId, OperationKind, QueueOperation};
use crate::schema::Dialect;

/// `pub type Result<T, E = Error>`: the crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The `google.rpc.ErrorInfo` domain of errors this crate encodes as gRPC statuses.
pub const ERROR_DOMAIN: &str = "spanner-queues.rs";

/// gRPC status codes, as this crate reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// `OK`.
    Ok,
    /// `CANCELLED`.
    Cancelled,
    /// `UNKNOWN`.
    Unknown,
    /// `INVALID_ARGUMENT`.
    InvalidArgument,
    /// `DEADLINE_EXCEEDED`.
    DeadlineExceeded,
    /// `NOT_FOUND`.
    NotFound,
    /// `ALREADY_EXISTS`.
    AlreadyExists,
    /// `PERMISSION_DENIED`.
    PermissionDenied,
    /// `RESOURCE_EXHAUSTED`.
    ResourceExhausted,
    /// `FAILED_PRECONDITION`.
    FailedPrecondition,
    /// `ABORTED`.
    Aborted,
    /// `OUT_OF_RANGE`.
    OutOfRange,
    /// `UNIMPLEMENTED`.
    Unimplemented,
    /// `INTERNAL`.
    Internal,
    /// `UNAVAILABLE`.
    Unavailable,
    /// `DATA_LOSS`.
    DataLoss,
    /// `UNAUTHENTICATED`.
    Unauthenticated,
}

const ALL_CODES: [(Code, GaxCode, &str); 17] = [
    (Code::Ok, GaxCode::Ok, "OK"),
    (Code::Cancelled, GaxCode::Cancelled, "CANCELLED"),
    (Code::Unknown, GaxCode::Unknown, "UNKNOWN"),
    (
        Code::InvalidArgument,
        GaxCode::InvalidArgument,
        "INVALID_ARGUMENT",
    ),
    (
        Code::DeadlineExceeded,
        GaxCode::DeadlineExceeded,
        "DEADLINE_EXCEEDED",
    ),
    (Code::NotFound, GaxCode::NotFound, "NOT_FOUND"),
    (
        Code::AlreadyExists,
        GaxCode::AlreadyExists,
        "ALREADY_EXISTS",
    ),
    (
        Code::PermissionDenied,
        GaxCode::PermissionDenied,
        "PERMISSION_DENIED",
    ),
    (
        Code::ResourceExhausted,
        GaxCode::ResourceExhausted,
        "RESOURCE_EXHAUSTED",
    ),
    (
        Code::FailedPrecondition,
        GaxCode::FailedPrecondition,
        "FAILED_PRECONDITION",
    ),
    (Code::Aborted, GaxCode::Aborted, "ABORTED"),
    (Code::OutOfRange, GaxCode::OutOfRange, "OUT_OF_RANGE"),
    (Code::Unimplemented, GaxCode::Unimplemented, "UNIMPLEMENTED"),
    (Code::Internal, GaxCode::Internal, "INTERNAL"),
    (Code::Unavailable, GaxCode::Unavailable, "UNAVAILABLE"),
    (Code::DataLoss, GaxCode::DataLoss, "DATA_LOSS"),
    (
        Code::Unauthenticated,
        GaxCode::Unauthenticated,
        "UNAUTHENTICATED",
    ),
];

impl Code {
    /// The canonical upper-case name (`NOT_FOUND`, …).
    pub fn name(self) -> &'static str {
        ALL_CODES
            .iter()
            .find(|(c, _, _)| *c == self)
            .map_or("UNKNOWN", |(_, _, name)| name)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<GaxCode> for Code {
    fn from(code: GaxCode) -> Self {
        ALL_CODES
            .iter()
            .find(|(_, g, _)| *g == code)
            .map_or(Code::Unknown, |(c, _, _)| *c)
    }
}

impl From<Code> for GaxCode {
    fn from(code: Code) -> Self {
        ALL_CODES
            .iter()
            .find(|(c, _, _)| *c == code)
            .map_or(GaxCode::Unknown, |(_, g, _)| *g)
    }
}

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

/// An error returned by Spanner, kept opaque.
///
/// The official client is a preview; its error type stays behind this wrapper. Use the
/// predicates here, or walk [`source()`](std::error::Error::source) (the client's error) for
/// details.
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
        self.0.status().map(|s| Code::from(s.code))
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

    fn classification(&self) -> Classification {
        match self.code() {
            Some(Code::Aborted | Code::ResourceExhausted) => Classification::Retryable,
            // A commit may have been applied when these come back.
            Some(
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Unknown
                | Code::Internal
                | Code::DataLoss,
            ) => Classification::OutcomeUnknown,
            Some(_) => Classification::Permanent,
            None if self.0.is_serialization() => Classification::Permanent,
            // No status: a timeout, an exhausted retry loop, a transport or response-parsing
            // failure. The request may have been applied.
            None => Classification::OutcomeUnknown,
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
        match self.code() {
            Some(code) => write!(f, "Spanner request failed with {code}"),
            None => f.write_str("Spanner request failed"),
        }
    }
}

impl std::error::Error for SpannerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Context of [`Error::OutcomeUnknown`]: a commit whose outcome is unknown.
///
/// It says what the transaction tried ([`operations`](Self::operations): the messages it sent,
/// acked or cancelled in its last attempt) and how it can be resolved:
///
/// - [`marker`](Self::marker) is set for a guarded transaction
///   ([`guarded`](crate::transaction::TransactionBuilder::guarded)):
///   [`transaction::resolve`](crate::transaction::resolve) answers applied or not applied, and a
///   guarded retry with the same marker commits at most once.
/// - [`is_self_guarded`](Self::is_self_guarded) is true when the transaction acked a message: the
///   same transaction run again fails its ack ([`Error::AlreadyAcked`]) if this one was applied.
/// - Otherwise check the transaction's effects before running it again.
///
/// See [`crate::outcome`] for both mechanisms and the cases they do not cover.
#[derive(Debug)]
pub struct OutcomeUnknown(Box<OutcomeDetails>);

/// The fields of [`OutcomeUnknown`], boxed so that [`Error`] stays small.
#[derive(Debug)]
struct OutcomeDetails {
    queue: Option<QueueName>,
    keys: Vec<MessageKey>,
    operations: Vec<QueueOperation>,
    marker: Option<CommitMarker>,
    source: Option<SpannerError>,
}

/// How many operations `Display` lists before summarising the rest.
const DISPLAYED_OPERATIONS: usize = 5;

impl OutcomeUnknown {
    /// An unknown outcome caused by `source`.
    pub(crate) fn new(source: Option<SpannerError>) -> Self {
        Self(Box::new(OutcomeDetails {
            queue: None,
            keys: Vec::new(),
            operations: Vec::new(),
            marker: None,
            source,
        }))
    }

    /// Records the queue and the keys of the messages the transaction sent or acked, when the
    /// kind of each operation is not known.
    #[cfg(test)]
    pub(crate) fn with_messages(mut self, queue: QueueName, keys: Vec<MessageKey>) -> Self {
        self.0.queue = Some(queue);
        self.0.keys = keys;
        self
    }

    /// Records the queue operations the transaction performed; [`queue`](Self::queue) and
    /// [`keys`](Self::keys) are derived from them.
    pub(crate) fn with_operations(mut self, operations: Vec<QueueOperation>) -> Self {
        let first = operations.first().map(QueueOperation::queue);
        self.0.queue = first
            .filter(|q| operations.iter().all(|op| op.queue() == *q))
            .cloned();
        self.0.keys = operations.iter().map(|op| op.key().clone()).collect();
        self.0.operations = operations;
        self
    }

    /// Records the commit marker that guards the transaction.
    pub(crate) fn with_marker(mut self, marker: CommitMarker) -> Self {
        self.0.marker = Some(marker);
        self
    }

    /// The queue involved, when every operation of the transaction was on one queue.
    pub fn queue(&self) -> Option<&QueueName> {
        self.0.queue.as_ref()
    }

    /// The keys of the messages the transaction sent, acked or cancelled.
    pub fn keys(&self) -> &[MessageKey] {
        &self.0.keys
    }

    /// The queue operations the transaction performed in the attempt whose commit failed, in
    /// order. Operations whose statement failed, and operations run on another task, are not
    /// listed.
    pub fn operations(&self) -> &[QueueOperation] {
        &self.0.operations
    }

    /// The commit marker guarding the transaction, if it was guarded: pass this error to
    /// [`transaction::resolve`](crate::transaction::resolve).
    pub fn marker(&self) -> Option<CommitMarker> {
        self.0.marker
    }

    /// Whether the transaction acked at least one message, so that running the same
    /// transaction again is safe: if this one was applied, the retry's ack fails with
    /// [`Error::AlreadyAcked`] and the retry rolls back.
    ///
    /// Holds as long as acked keys are never reused for new messages (see [`crate::outcome`]).
    pub fn is_self_guarded(&self) -> bool {
        self.0
            .operations
            .iter()
            .any(|op| op.kind() == OperationKind::Ack)
    }

    /// The Spanner error that left the outcome unknown, if any.
    pub fn spanner_error(&self) -> Option<&SpannerError> {
        self.0.source.as_ref()
    }
}

impl fmt::Display for OutcomeUnknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the commit outcome is unknown: it may or may not have been applied")?;
        if !self.0.operations.is_empty() {
            f.write_str("; the transaction ")?;
            for (i, op) in self
                .0
                .operations
                .iter()
                .take(DISPLAYED_OPERATIONS)
                .enumerate()
            {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{op}")?;
            }
            let more = self.0.operations.len().saturating_sub(DISPLAYED_OPERATIONS);
            if more > 0 {
                write!(f, " and {more} more")?;
            }
        } else if let Some(queue) = &self.0.queue {
            write!(f, " (queue `{queue}`")?;
            for (i, key) in self.0.keys.iter().enumerate() {
                f.write_str(if i == 0 { ", messages " } else { ", " })?;
                write!(f, "{key}")?;
            }
            f.write_str(")")?;
        }
        if let Some(marker) = &self.0.marker {
            write!(
                f,
                "; it is guarded by commit marker {}: resolve it with `transaction::resolve`, \
                 or retry it with the same marker",
                marker.id()
            )
        } else if self.is_self_guarded() {
            f.write_str("; running it again is safe: its ack fails if it was applied")
        } else {
            f.write_str("; find out whether it was applied before running it again")
        }
    }
}

impl From<OutcomeUnknown> for Error {
    fn from(unknown: OutcomeUnknown) -> Self {
        Error::OutcomeUnknown(unknown)
    }
}

impl std::error::Error for OutcomeUnknown {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Errors returned by `spanner-queues`.
///
/// Each variant says whether anything may have been written, its [`code`](Error::code) and its
/// [`classification`](Error::classification).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A queue, column or table name breaks Spanner's naming rules.
    ///
    /// Nothing was sent to Spanner. Code `INVALID_ARGUMENT`; permanent.
    ///
    /// # Troubleshooting
    /// Names are 1 to 128 ASCII letters, digits and underscores, starting with a letter (queue
    /// names at most 117, see [`crate::ident`]). Key columns cannot be named `Payload`,
    /// `DeliverTime` or `Spanner…`.
    #[error(transparent)]
    InvalidIdentifier(#[from] IdentifierError),

    /// A queue schema is inconsistent (no key column, duplicate columns, a type that cannot be a
    /// key, a length out of range, …).
    ///
    /// Nothing was sent to Spanner. Code `INVALID_ARGUMENT`; permanent.
    ///
    /// # Troubleshooting
    /// The reason names the offending column or clause.
    #[error("invalid queue schema{}: {reason}", queue_suffix(queue.as_deref()))]
    #[non_exhaustive]
    InvalidSchema {
        /// The queue, if the schema got that far.
        queue: Option<String>,
        /// What is wrong.
        reason: String,
    },

    /// A feature that this crate cannot render or perform (for instance a PostgreSQL form that
    /// is not documented yet).
    ///
    /// Nothing was sent to Spanner. Code `UNIMPLEMENTED`; permanent.
    ///
    /// # Troubleshooting
    /// Use the GoogleSQL dialect, or write that statement by hand.
    #[error("not supported: {feature}")]
    #[non_exhaustive]
    Unsupported {
        /// What is not supported.
        feature: String,
    },

    /// An option or argument is out of range.
    ///
    /// Nothing was sent to Spanner. Code `INVALID_ARGUMENT`; permanent.
    ///
    /// # Troubleshooting
    /// The reason names the option and its allowed range.
    #[error("invalid configuration: {reason}")]
    #[non_exhaustive]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },

    /// An encoded payload is over the size limit.
    ///
    /// Nothing was written. Code `INVALID_ARGUMENT`; permanent.
    ///
    /// # Troubleshooting
    /// Keep payloads small (Spanner recommends under 4 KB): store large data in a table and send
    /// its key.
    #[error(
        "payload of message {key} for queue `{queue}` is {size} bytes, over the limit of {limit} bytes"
    )]
    #[non_exhaustive]
    PayloadTooLarge {
        /// The queue.
        queue: QueueName,
        /// The message key.
        key: MessageKey,
        /// The encoded payload size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },

    /// A payload could not be encoded.
    ///
    /// Nothing was written. Code `INVALID_ARGUMENT`; permanent.
    ///
    /// # Troubleshooting
    /// The source says which field failed (for instance a map with non-string keys in JSON).
    #[error("could not encode the payload of message {key} for queue `{queue}`")]
    #[non_exhaustive]
    Encode {
        /// The queue.
        queue: QueueName,
        /// The message key.
        key: MessageKey,
        /// The codec error.
        #[source]
        source: CodecError,
    },

    /// A message read from the queue does not match its Rust type: a poison message.
    ///
    /// Nothing was acked: the message stays in the queue and will be delivered again. Code
    /// `FAILED_PRECONDITION`; permanent for this message.
    ///
    /// # Troubleshooting
    /// The payload was probably written by another client or an older version of the type.
    /// Make new fields `Option` (or `#[serde(default)]`) to stay compatible, or move the message
    /// aside (ack it and record it elsewhere in one transaction).
    #[error("could not decode message {key} from queue `{queue}`")]
    #[non_exhaustive]
    Decode {
        /// The queue.
        queue: QueueName,
        /// The message key as read.
        key: MessageKey,
        /// The codec error.
        #[source]
        source: CodecError,
    },

    /// A key does not fit the queue's key columns (wrong number or kind of values, or a value out
    /// of range).
    ///
    /// Nothing was written. Code `INVALID_ARGUMENT`; permanent.
    ///
    /// # Troubleshooting
    /// Pass keys as the message type's [`Key`](crate::QueueMessage::Key).
    #[error("invalid key for queue `{queue}`")]
    #[non_exhaustive]
    InvalidKey {
        /// The queue.
        queue: QueueName,
        /// What is wrong with the key.
        #[source]
        source: KeyError,
    },

    /// An ack found no message: it was already acked (or cancelled, or deleted).
    ///
    /// Raised by the ack statement's `ASSERT_ROWS_MODIFIED 1` (Spanner `OUT_OF_RANGE`) or an Ack
    /// mutation's `NOT_FOUND`. The transaction must not commit: return this error from the
    /// transaction closure so the runner rolls back every other write in it. Nothing was written
    /// once the transaction is rolled back. Code `NOT_FOUND`; permanent.
    ///
    /// # Troubleshooting
    /// Another worker processed the message (for instance after this worker's lease expired), or
    /// an earlier attempt of this transaction committed although its outcome looked unknown.
    /// Never catch this error and commit anyway.
    #[error("message {key} in queue `{queue}` was already acked")]
    #[non_exhaustive]
    AlreadyAcked {
        /// The queue.
        queue: QueueName,
        /// The message key.
        key: MessageKey,
    },

    /// A send used the key of a message that is still in the queue.
    ///
    /// Nothing was written by this send; the transaction must roll back. Code `ALREADY_EXISTS`;
    /// permanent.
    ///
    /// # Troubleshooting
    /// Use a fresh key per message (a UUID), or ack the old message and send the new one in the
    /// same transaction to reschedule it.
    #[error("message {key} is already queued in queue `{queue}`")]
    #[non_exhaustive]
    AlreadyQueued {
        /// The queue.
        queue: QueueName,
        /// The message key.
        key: MessageKey,
    },

    /// The queue does not exist in the database.
    ///
    /// Nothing was written. Code `NOT_FOUND`; permanent.
    ///
    /// # Troubleshooting
    /// Create it from the message type's [`schema`](crate::QueueMessage::schema).
    #[error("queue `{queue}` does not exist")]
    #[non_exhaustive]
    QueueNotFound {
        /// The queue.
        queue: QueueName,
    },

    /// The queue's columns in the database differ from its message type.
    ///
    /// Nothing was written. Code `FAILED_PRECONDITION`; permanent.
    ///
    /// # Troubleshooting
    /// Each difference names a column and the expected and actual types. Migrate the queue or
    /// fix the type; renaming a key field needs `#[queue(column = "…")]` to keep its column.
    #[error("queue `{queue}` does not match its message type: {}", differences.join("; "))]
    #[non_exhaustive]
    SchemaDrift {
        /// The queue.
        queue: QueueName,
        /// One entry per difference.
        differences: Vec<String>,
    },

    /// The lease on a received message expired or could not be renewed.
    ///
    /// Nothing was written by the renewal. Another worker may now receive the message; an ack
    /// from this worker would still delete it (acks are by key). Code `FAILED_PRECONDITION`;
    /// permanent for this delivery.
    ///
    /// # Troubleshooting
    /// Stop processing the message. Keep handlers shorter than the total lease time, or ack and
    /// re-send the message with a later delivery time to checkpoint long work.
    #[error("lease on message {key} in queue `{queue}` was lost")]
    #[non_exhaustive]
    LeaseLost {
        /// The queue.
        queue: QueueName,
        /// The message key.
        key: MessageKey,
    },

    /// A commit's outcome is unknown: it may or may not have been applied.
    ///
    /// Classification `OutcomeUnknown`; the code is that of the underlying failure, or `UNKNOWN`.
    ///
    /// # Troubleshooting
    /// Do not retry blindly: check whether the messages were sent or acked first.
    #[error(transparent)]
    OutcomeUnknown(OutcomeUnknown),

    /// An error of your own, returned from a transaction closure (see [`Error::application`]).
    ///
    /// Nothing was written: the transaction was rolled back. No gRPC code; permanent.
    ///
    /// # Troubleshooting
    /// Get your error back with [`Error::downcast_application`].
    #[error(transparent)]
    Application(ApplicationError),

    /// Spanner returned an error.
    ///
    /// Code as returned. Classification: `ABORTED` and `RESOURCE_EXHAUSTED` are retryable;
    /// `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `CANCELLED`, `UNKNOWN`, `INTERNAL`, `DATA_LOSS` and
    /// errors without a status (timeouts, transport failures) leave the outcome unknown; every
    /// other code is permanent. Nothing was written unless the outcome is unknown.
    ///
    /// # Troubleshooting
    /// Walk the error's [`source()`](std::error::Error::source) chain for Spanner's message.
    #[error(transparent)]
    Spanner(SpannerError),
}

/// Your error inside [`Error::Application`]: it displays as your error, and its
/// [`source`](std::error::Error::source) is your error's source.
pub struct ApplicationError(BoxError);

impl ApplicationError {
    /// Your error.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }

    /// Takes your error.
    pub fn into_inner(self) -> BoxError {
        self.0
    }
}

impl fmt::Debug for ApplicationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for ApplicationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for ApplicationError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

fn queue_suffix(queue: Option<&str>) -> String {
    queue
        .map(|q| format!(" for queue `{q}`"))
        .unwrap_or_default()
}

impl From<google_cloud_spanner::Error> for Error {
    /// Rebuilds an error this crate encoded as a gRPC status (see the [module docs](self));
    /// anything else becomes [`Error::Spanner`].
    fn from(error: google_cloud_spanner::Error) -> Self {
        if let Some(status) = error.status() {
            for detail in &status.details {
                if let StatusDetails::ErrorInfo(info) = detail
                    && info.domain == ERROR_DOMAIN
                    && let Some(rebuilt) = Error::from_error_info(info)
                {
                    return rebuilt;
                }
            }
        }
        Error::Spanner(SpannerError::new(error))
    }
}

impl From<Error> for google_cloud_spanner::Error {
    /// Spanner's own errors pass through unchanged, so the transaction runner still sees (and
    /// retries) aborts; every other error becomes a status with the error's code and an
    /// `ErrorInfo` detail.
    fn from(error: Error) -> Self {
        match error {
            Error::Spanner(e) => e.into_inner(),
            other => google_cloud_spanner::Error::service(other.to_status()),
        }
    }
}

impl Error {
    /// Wraps an error of your own, to return it from a transaction closure: the transaction
    /// rolls back and the caller gets this error back ([`Error::Application`]).
    ///
    /// ```
    /// use spanner_queues::Error;
    ///
    /// #[derive(Debug)]
    /// struct InsufficientFunds;
    ///
    /// impl std::fmt::Display for InsufficientFunds {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    ///         f.write_str("insufficient funds")
    ///     }
    /// }
    ///
    /// impl std::error::Error for InsufficientFunds {}
    ///
    /// let error = Error::application(InsufficientFunds);
    /// assert_eq!(error.to_string(), "insufficient funds");
    /// assert!(matches!(error.downcast_application::<InsufficientFunds>(), Ok(InsufficientFunds)));
    /// ```
    pub fn application(error: impl Into<BoxError>) -> Self {
        Self::Application(ApplicationError(error.into()))
    }

    /// Your error back from [`Error::Application`], if it is one of type `E`; otherwise the
    /// error unchanged.
    ///
    /// # Errors
    /// `self` when it is not an application error of type `E`.
    pub fn downcast_application<E: std::error::Error + 'static>(self) -> Result<E, Self> {
        match self {
            Self::Application(ApplicationError(inner)) => match inner.downcast::<E>() {
                Ok(error) => Ok(*error),
                Err(inner) => Err(Self::Application(ApplicationError(inner))),
            },
            other => Err(other),
        }
    }

    /// Your error inside [`Error::Application`], by reference, if it is of type `E`.
    pub fn application_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Self::Application(ApplicationError(inner)) => inner.downcast_ref::<E>(),
            _ => None,
        }
    }

    pub(crate) fn unsupported(feature: impl Into<String>) -> Self {
        Self::Unsupported {
            feature: feature.into(),
        }
    }

    pub(crate) fn invalid_schema(queue: Option<&str>, reason: impl Into<String>) -> Self {
        Self::InvalidSchema {
            queue: queue.map(str::to_owned),
            reason: reason.into(),
        }
    }

    /// The gRPC code of this error: Spanner's for [`Error::Spanner`] (`None` if it sent none),
    /// `None` for [`Error::Application`], otherwise the code documented on the variant.
    pub fn code(&self) -> Option<Code> {
        Some(match self {
            Self::InvalidIdentifier(_)
            | Self::InvalidSchema { .. }
            | Self::InvalidConfig { .. }
            | Self::PayloadTooLarge { .. }
            | Self::Encode { .. }
            | Self::InvalidKey { .. } => Code::InvalidArgument,
            Self::Unsupported { .. } => Code::Unimplemented,
            Self::Decode { .. } | Self::SchemaDrift { .. } | Self::LeaseLost { .. } => {
                Code::FailedPrecondition
            }
            Self::AlreadyAcked { .. } | Self::QueueNotFound { .. } => Code::NotFound,
            Self::AlreadyQueued { .. } => Code::AlreadyExists,
            Self::OutcomeUnknown(o) => o
                .spanner_error()
                .and_then(SpannerError::code)
                .unwrap_or(Code::Unknown),
            Self::Application(_) => return None,
            Self::Spanner(e) => return e.code(),
        })
    }

    /// What a caller may do: retry, give up, or resolve an unknown outcome first.
    pub fn classification(&self) -> Classification {
        match self {
            Self::OutcomeUnknown(_) => Classification::OutcomeUnknown,
            Self::Spanner(e) => e.classification(),
            _ => Classification::Permanent,
        }
    }

    /// The queue involved, if the error is about one queue.
    pub fn queue(&self) -> Option<&QueueName> {
        match self {
            Self::PayloadTooLarge { queue, .. }
            | Self::Encode { queue, .. }
            | Self::Decode { queue, .. }
            | Self::InvalidKey { queue, .. }
            | Self::AlreadyAcked { queue, .. }
            | Self::AlreadyQueued { queue, .. }
            | Self::QueueNotFound { queue }
            | Self::SchemaDrift { queue, .. }
            | Self::LeaseLost { queue, .. } => Some(queue),
            Self::OutcomeUnknown(o) => o.queue(),
            _ => None,
        }
    }

    /// The message key involved, if the error is about one message.
    pub fn key(&self) -> Option<&MessageKey> {
        match self {
            Self::PayloadTooLarge { key, .. }
            | Self::Encode { key, .. }
            | Self::Decode { key, .. }
            | Self::AlreadyAcked { key, .. }
            | Self::AlreadyQueued { key, .. }
            | Self::LeaseLost { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The stable `ErrorInfo` reason of this error, `None` for [`Error::Spanner`].
    pub fn reason(&self) -> Option<&'static str> {
        Some(match self {
            Self::InvalidIdentifier(_) => reason::INVALID_IDENTIFIER,
            Self::InvalidSchema { .. } => reason::INVALID_SCHEMA,
            Self::Unsupported { .. } => reason::UNSUPPORTED,
            Self::InvalidConfig { .. } => reason::INVALID_CONFIG,
            Self::PayloadTooLarge { .. } => reason::PAYLOAD_TOO_LARGE,
            Self::Encode { .. } => reason::ENCODE_FAILED,
            Self::Decode { .. } => reason::DECODE_FAILED,
            Self::InvalidKey { .. } => reason::INVALID_KEY,
            Self::AlreadyAcked { .. } => reason::ALREADY_ACKED,
            Self::AlreadyQueued { .. } => reason::ALREADY_QUEUED,
            Self::QueueNotFound { .. } => reason::QUEUE_NOT_FOUND,
            Self::SchemaDrift { .. } => reason::SCHEMA_DRIFT,
            Self::LeaseLost { .. } => reason::LEASE_LOST,
            Self::OutcomeUnknown(_) => reason::OUTCOME_UNKNOWN,
            Self::Application(_) | Self::Spanner(_) => return None,
        })
    }

    fn metadata(&self) -> HashMap<String, String> {
        let mut m = HashMap::new();
        let mut put = |k: &str, v: String| {
            m.insert(k.to_owned(), v);
        };
        match self {
            Self::InvalidIdentifier(e) => {
                put(meta::KIND, e.kind().as_str().to_owned());
                put(meta::NAME, e.name().to_owned());
                put(meta::PROBLEM, e.problem().code().to_owned());
            }
            Self::InvalidSchema { queue, reason } => {
                if let Some(q) = queue {
                    put(meta::QUEUE, q.clone());
                }
                put(meta::REASON, reason.clone());
            }
            Self::Unsupported { feature } => put(meta::FEATURE, feature.clone()),
            Self::InvalidConfig { reason } => put(meta::REASON, reason.clone()),
            Self::PayloadTooLarge {
                queue,
                key,
                size,
                limit,
            } => {
                put(meta::QUEUE, queue.to_string());
                put(meta::KEY, key.to_wire());
                put(meta::SIZE, size.to_string());
                put(meta::LIMIT, limit.to_string());
            }
            Self::Encode { queue, key, source } | Self::Decode { queue, key, source } => {
                put(meta::QUEUE, queue.to_string());
                put(meta::KEY, key.to_wire());
                put(meta::SOURCE, chain_text(source));
            }
            Self::InvalidKey { queue, source } => {
                put(meta::QUEUE, queue.to_string());
                put(meta::SOURCE, chain_text(source));
            }
            Self::AlreadyAcked { queue, key }
            | Self::AlreadyQueued { queue, key }
            | Self::LeaseLost { queue, key } => {
                put(meta::QUEUE, queue.to_string());
                put(meta::KEY, key.to_wire());
            }
            Self::QueueNotFound { queue } => put(meta::QUEUE, queue.to_string()),
            Self::SchemaDrift { queue, differences } => {
                put(meta::QUEUE, queue.to_string());
                put(
                    meta::DIFFERENCES,
                    serde_json::Value::from(differences.clone()).to_string(),
                );
            }
            Self::OutcomeUnknown(o) => {
                if let Some(q) = o.queue() {
                    put(meta::QUEUE, q.to_string());
                }
                let keys: Vec<String> = o.keys().iter().map(MessageKey::to_wire).collect();
                put(meta::KEYS, serde_json::Value::from(keys).to_string());
                if !o.operations().is_empty() {
                    let operations: Vec<serde_json::Value> = o
                        .operations()
                        .iter()
                        .map(|op| {
                            serde_json::json!([
                                op.kind().as_str(),
                                op.queue().as_str(),
                                op.key().to_wire()
                            ])
                        })
                        .collect();
                    put(
                        meta::OPERATIONS,
                        serde_json::Value::from(operations).to_string(),
                    );
                }
                if let Some(marker) = o.marker() {
                    put(meta::MARKER, marker.id().to_string());
                    put(
                        meta::MARKER_DIALECT,
                        dialect_wire(marker.dialect()).to_owned(),
                    );
                }
                if let Some(s) = o.spanner_error() {
                    if let Some(code) = s.code() {
                        put(meta::SOURCE_CODE, code.name().to_owned());
                    }
                    let text = s
                        .status_message()
                        .map_or_else(|| chain_text(&s.0), str::to_owned);
                    put(meta::SOURCE, text);
                }
            }
            Self::Application(_) | Self::Spanner(_) => {}
        }
        m
    }

    fn to_status(&self) -> Status {
        let code = self.code().unwrap_or(Code::Unknown);
        let mut status = Status::default()
            .set_code(GaxCode::from(code))
            .set_message(chain_text(self));
        if let Some(reason) = self.reason() {
            let info = ErrorInfo::new()
                .set_reason(reason)
                .set_domain(ERROR_DOMAIN)
                .set_metadata(self.metadata());
            status = status.set_details([StatusDetails::ErrorInfo(info)]);
        }
        status
    }

    fn from_error_info(info: &ErrorInfo) -> Option<Self> {
        let get = |k: &str| info.metadata.get(k).map(String::as_str);
        let queue = || get(meta::QUEUE).and_then(|q| QueueName::new(q).ok());
        let key = || get(meta::KEY).and_then(MessageKey::from_wire);
        let source = || RemoteError(get(meta::SOURCE).unwrap_or_default().to_owned());
        Some(match info.reason.as_str() {
            reason::INVALID_IDENTIFIER => Self::InvalidIdentifier(IdentifierError::new(
                IdentifierKind::parse(get(meta::KIND)?)?,
                get(meta::NAME)?,
                IdentifierProblem::parse(get(meta::PROBLEM)?)?,
            )),
            reason::INVALID_SCHEMA => Self::InvalidSchema {
                queue: get(meta::QUEUE).map(str::to_owned),
                reason: get(meta::REASON)?.to_owned(),
            },
            reason::UNSUPPORTED => Self::Unsupported {
                feature: get(meta::FEATURE)?.to_owned(),
            },
            reason::INVALID_CONFIG => Self::InvalidConfig {
                reason: get(meta::REASON)?.to_owned(),
            },
            reason::PAYLOAD_TOO_LARGE => Self::PayloadTooLarge {
                queue: queue()?,
                key: key()?,
                size: get(meta::SIZE)?.parse().ok()?,
                limit: get(meta::LIMIT)?.parse().ok()?,
            },
            reason::ENCODE_FAILED => Self::Encode {
                queue: queue()?,
                key: key()?,
                source: CodecError::Other(Box::new(source())),
            },
            reason::DECODE_FAILED => Self::Decode {
                queue: queue()?,
                key: key()?,
                source: CodecError::Other(Box::new(source())),
            },
            reason::INVALID_KEY => Self::InvalidKey {
                queue: queue()?,
                source: KeyError::Other(Box::new(source())),
            },
            reason::ALREADY_ACKED => Self::AlreadyAcked {
                queue: queue()?,
                key: key()?,
            },
            reason::ALREADY_QUEUED => Self::AlreadyQueued {
                queue: queue()?,
                key: key()?,
            },
            reason::QUEUE_NOT_FOUND => Self::QueueNotFound { queue: queue()? },
            reason::SCHEMA_DRIFT => Self::SchemaDrift {
                queue: queue()?,
                differences: serde_json::from_str(get(meta::DIFFERENCES)?).ok()?,
            },
            reason::LEASE_LOST => Self::LeaseLost {
                queue: queue()?,
                key: key()?,
            },
            reason::OUTCOME_UNKNOWN => {
                let wire_keys: Vec<String> = serde_json::from_str(get(meta::KEYS)?).ok()?;
                let keys = wire_keys
                    .iter()
                    .map(|k| MessageKey::from_wire(k))
                    .collect::<Option<Vec<_>>>()?;
                // The original client error cannot cross a status; keep its code and text.
                let spanner = get(meta::SOURCE).map(|text| {
                    let code = get(meta::SOURCE_CODE)
                        .and_then(|c| ALL_CODES.iter().find(|(_, _, n)| *n == c))
                        .map_or(GaxCode::Unknown, |(_, g, _)| *g);
                    SpannerError(google_cloud_spanner::Error::service(
                        Status::default().set_code(code).set_message(text),
                    ))
                });
                let operations = match get(meta::OPERATIONS) {
                    Some(text) => parse_operations(text)?,
                    None => Vec::new(),
                };
                let marker = match get(meta::MARKER) {
                    Some(id) => Some(CommitMarker::new(
                        id.parse::<MarkerId>().ok()?,
                        parse_dialect(get(meta::MARKER_DIALECT)?)?,
                    )),
                    None => None,
                };
                // Set every field as sent, so that the rebuilt error is the same.
                Self::OutcomeUnknown(OutcomeUnknown(Box::new(OutcomeDetails {
                    queue: queue(),
                    keys,
                    operations,
                    marker,
                    source: spanner,
                })))
            }
            _ => return None,
        })
    }
}

/// `ErrorInfo.reason` values. Stable: other processes may match on them.
mod reason {
    pub(super) const INVALID_IDENTIFIER: &str = "INVALID_IDENTIFIER";
    pub(super) const INVALID_SCHEMA: &str = "INVALID_SCHEMA";
    pub(super) const UNSUPPORTED: &str = "UNSUPPORTED";
    pub(super) const INVALID_CONFIG: &str = "INVALID_CONFIG";
    pub(super) const PAYLOAD_TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";
    pub(super) const ENCODE_FAILED: &str = "ENCODE_FAILED";
    pub(super) const DECODE_FAILED: &str = "DECODE_FAILED";
    pub(super) const INVALID_KEY: &str = "INVALID_KEY";
    pub(super) const ALREADY_ACKED: &str = "ALREADY_ACKED";
    pub(super) const ALREADY_QUEUED: &str = "ALREADY_QUEUED";
    pub(super) const QUEUE_NOT_FOUND: &str = "QUEUE_NOT_FOUND";
    pub(super) const SCHEMA_DRIFT: &str = "SCHEMA_DRIFT";
    pub(super) const LEASE_LOST: &str = "LEASE_LOST";
    pub(super) const OUTCOME_UNKNOWN: &str = "OUTCOME_UNKNOWN";
}

/// `ErrorInfo.metadata` keys.
mod meta {
    pub(super) const QUEUE: &str = "queue";
    pub(super) const KEY: &str = "key";
    pub(super) const KEYS: &str = "keys";
    pub(super) const KIND: &str = "kind";
    pub(super) const NAME: &str = "name";
    pub(super) const PROBLEM: &str = "problem";
    pub(super) const REASON: &str = "reason";
    pub(super) const FEATURE: &str = "feature";
    pub(super) const SIZE: &str = "size";
    pub(super) const LIMIT: &str = "limit";
    pub(super) const SOURCE: &str = "source";
    pub(super) const SOURCE_CODE: &str = "source_code";
    pub(super) const DIFFERENCES: &str = "differences";
    pub(super) const OPERATIONS: &str = "operations";
    pub(super) const MARKER: &str = "marker";
    pub(super) const MARKER_DIALECT: &str = "marker_dialect";
}

/// The dialect as Spanner's `DatabaseDialect` names it.
fn dialect_wire(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::GoogleSql => "GOOGLE_STANDARD_SQL",
        Dialect::PostgreSql => "POSTGRESQL",
    }
}

fn parse_dialect(s: &str) -> Option<Dialect> {
    match s {
        "GOOGLE_STANDARD_SQL" => Some(Dialect::GoogleSql),
        "POSTGRESQL" => Some(Dialect::PostgreSql),
        _ => None,
    }
}

/// Operations as `[[kind, queue, key], …]` (keys in their wire form).
fn parse_operations(text: &str) -> Option<Vec<QueueOperation>> {
    let rows: Vec<(String, String, String)> = serde_json::from_str(text).ok()?;
    rows.into_iter()
        .map(|(kind, queue, key)| {
            Some(QueueOperation::new(
                OperationKind::parse(&kind)?,
                QueueName::new(queue).ok()?,
                MessageKey::from_wire(&key)?,
            ))
        })
        .collect()
}

/// The error's text followed by its sources', joined with `": "`.
fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        text.push_str(": ");
        text.push_str(&e.to_string());
        next = e.source();
    }
    text
}

/// A source error rebuilt from its text, after crossing a gRPC status.
#[derive(Debug)]
struct RemoteError(String);

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RemoteError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{KeyType, KeyValue};
    use crate::outcome::{CommitMarker, MarkerId, OperationKind, QueueOperation};
    use static_assertions::assert_impl_all;
    use std::error::Error as _;

    assert_impl_all!(Error: Send, Sync, std::fmt::Debug);
    assert_impl_all!(SpannerError: Send, Sync, std::fmt::Debug);
    assert_impl_all!(Code: Send, Sync, Copy);

    fn queue() -> QueueName {
        QueueName::new("OrderEmails").expect("valid")
    }

    fn key() -> MessageKey {
        MessageKey::new(vec![
            KeyValue::Int64(42),
            KeyValue::String("6f1c".into()),
            KeyValue::Bytes(vec![1, 2, 3]),
        ])
    }

    fn json_error() -> CodecError {
        let e = serde_json::from_str::<u32>("\"x\"").expect_err("not a number");
        CodecError::Json(e)
    }

    fn spanner(code: GaxCode) -> SpannerError {
        SpannerError(google_cloud_spanner::Error::service(
            Status::default().set_code(code).set_message("boom"),
        ))
    }

    /// One value of every variant, and the text its `Display` must produce.
    fn every_variant() -> Vec<Error> {
        vec![
            Error::InvalidIdentifier(IdentifierError::new(
                IdentifierKind::Column,
                "Payload",
                IdentifierProblem::ReservedForSystem,
            )),
            Error::invalid_schema(Some("Q"), "no key"),
            Error::invalid_schema(None, "unknown type"),
            Error::unsupported("ALTER QUEUE in PostgreSQL"),
            Error::InvalidConfig {
                reason: "batch size 0".into(),
            },
            Error::PayloadTooLarge {
                queue: queue(),
                key: key(),
                size: 5000,
                limit: 4096,
            },
            Error::Encode {
                queue: queue(),
                key: key(),
                source: json_error(),
            },
            Error::Decode {
                queue: queue(),
                key: key(),
                source: json_error(),
            },
            Error::InvalidKey {
                queue: queue(),
                source: KeyError::TypeMismatch {
                    position: 1,
                    expected: KeyType::Uuid,
                    found: KeyType::String,
                },
            },
            Error::AlreadyAcked {
                queue: queue(),
                key: key(),
            },
            Error::AlreadyQueued {
                queue: queue(),
                key: key(),
            },
            Error::QueueNotFound { queue: queue() },
            Error::SchemaDrift {
                queue: queue(),
                differences: vec![
                    "column `Id`: expected INT64, found STRING(MAX)".into(),
                    "x".into(),
                ],
            },
            Error::LeaseLost {
                queue: queue(),
                key: key(),
            },
            Error::OutcomeUnknown(
                OutcomeUnknown::new(Some(spanner(GaxCode::DeadlineExceeded))).with_messages(
                    queue(),
                    vec![key(), MessageKey::new(vec![KeyValue::Bool(true)])],
                ),
            ),
            Error::OutcomeUnknown(OutcomeUnknown::new(None)),
            Error::OutcomeUnknown(
                OutcomeUnknown::new(Some(spanner(GaxCode::Unavailable)))
                    .with_operations(vec![
                        QueueOperation::new(OperationKind::Send, queue(), key()),
                        QueueOperation::new(
                            OperationKind::Ack,
                            QueueName::new("Refunds").expect("valid"),
                            MessageKey::new(vec![KeyValue::Int64(1)]),
                        ),
                    ])
                    .with_marker(CommitMarker::new(MarkerId::new(), Dialect::PostgreSql)),
            ),
            Error::OutcomeUnknown(
                OutcomeUnknown::new(None).with_operations(
                    (0..7)
                        .map(|i| {
                            QueueOperation::new(
                                OperationKind::Cancel,
                                queue(),
                                MessageKey::new(vec![KeyValue::Int64(i)]),
                            )
                        })
                        .collect(),
                ),
            ),
        ]
    }

    #[test]
    fn outcome_unknown_says_what_was_tried_and_how_to_resolve_it() {
        let send = QueueOperation::new(OperationKind::Send, queue(), key());
        let ack = QueueOperation::new(
            OperationKind::Ack,
            QueueName::new("Refunds").expect("valid"),
            MessageKey::new(vec![KeyValue::Int64(1)]),
        );

        let unguarded = OutcomeUnknown::new(Some(spanner(GaxCode::DeadlineExceeded)))
            .with_operations(vec![send.clone()]);
        assert_eq!(
            unguarded.to_string(),
            "the commit outcome is unknown: it may or may not have been applied; the \
             transaction sent message (42, \"6f1c\", b\"\\x01\\x02\\x03\") to queue \
             `OrderEmails`; find out whether it was applied before running it again"
        );
        assert!(!unguarded.is_self_guarded());
        assert_eq!(unguarded.queue(), Some(&queue()));
        assert_eq!(unguarded.keys(), [key()]);
        assert_eq!(unguarded.marker(), None);

        let acked = OutcomeUnknown::new(None).with_operations(vec![send.clone(), ack.clone()]);
        assert!(acked.is_self_guarded());
        assert_eq!(acked.queue(), None, "two queues");
        assert_eq!(acked.keys().len(), 2);
        assert!(
            acked
                .to_string()
                .ends_with("; running it again is safe: its ack fails if it was applied"),
            "{acked}"
        );

        let id: MarkerId = "6f1c2a9e-0000-4000-8000-000000000001"
            .parse()
            .expect("uuid");
        let guarded = OutcomeUnknown::new(None)
            .with_operations(vec![ack])
            .with_marker(CommitMarker::new(id, Dialect::GoogleSql));
        assert_eq!(guarded.marker().map(|m| m.id()), Some(id));
        assert!(
            guarded.to_string().ends_with(
                "; it is guarded by commit marker 6f1c2a9e-0000-4000-8000-000000000001: resolve \
                 it with `transaction::resolve`, or retry it with the same marker"
            ),
            "{guarded}"
        );

        let many = OutcomeUnknown::new(None).with_operations(vec![send; 8]);
        assert!(
            many.to_string().contains("`OrderEmails` and 3 more;"),
            "{many}"
        );
    }

    #[test]
    fn every_sdk_variant_round_trips_through_the_client_error() {
        for original in every_variant() {
            let code = original.code();
            let class = original.classification();
            let text = chain_text(&original);
            let display = original.to_string();
            let queue = original.queue().cloned();
            let key = original.key().cloned();
            let reason = original.reason();

            let client: google_cloud_spanner::Error = original.into();
            let status = client.status().expect("SDK errors become statuses");
            assert_eq!(Some(Code::from(status.code)), code, "{display}");
            assert_eq!(status.message, text);
            assert!(status.details.iter().any(|d| matches!(
                d,
                StatusDetails::ErrorInfo(i) if i.domain == ERROR_DOMAIN && Some(i.reason.as_str()) == reason
            )));

            let back = Error::from(client);
            assert_eq!(back.reason(), reason, "{display}");
            assert_eq!(back.to_string(), display);
            assert_eq!(back.code(), code, "{display}");
            assert_eq!(back.classification(), class, "{display}");
            assert_eq!(back.queue().cloned(), queue, "{display}");
            assert_eq!(back.key().cloned(), key, "{display}");
            // The whole chain survives as text (sources are rebuilt from it).
            assert_eq!(chain_text(&back), text, "{display}");
        }
    }

    #[test]
    fn identifier_and_drift_details_survive() {
        let e: google_cloud_spanner::Error = every_variant().swap_remove(0).into();
        match Error::from(e) {
            Error::InvalidIdentifier(i) => {
                assert_eq!(i.kind(), IdentifierKind::Column);
                assert_eq!(i.name(), "Payload");
                assert_eq!(i.problem(), IdentifierProblem::ReservedForSystem);
            }
            other => panic!("{other:?}"),
        }
        let drift = Error::SchemaDrift {
            queue: queue(),
            differences: vec!["a".into(), "b; c".into()],
        };
        match Error::from(google_cloud_spanner::Error::from(drift)) {
            Error::SchemaDrift { differences, .. } => assert_eq!(differences, ["a", "b; c"]),
            other => panic!("{other:?}"),
        }
        let unknown = Error::OutcomeUnknown(
            OutcomeUnknown::new(Some(spanner(GaxCode::Unavailable)))
                .with_messages(queue(), vec![key()]),
        );
        match Error::from(google_cloud_spanner::Error::from(unknown)) {
            Error::OutcomeUnknown(o) => {
                assert_eq!(o.keys(), [key()]);
                assert_eq!(
                    o.spanner_error().and_then(SpannerError::code),
                    Some(Code::Unavailable)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn spanner_errors_pass_through_unchanged() {
        for code in [GaxCode::Aborted, GaxCode::NotFound, GaxCode::OutOfRange] {
            let status = Status::default().set_code(code).set_message("from spanner");
            let original = google_cloud_spanner::Error::service(status.clone());
            let ours = Error::from(original);
            assert!(matches!(ours, Error::Spanner(_)));
            assert_eq!(ours.reason(), None);
            let back: google_cloud_spanner::Error = ours.into();
            assert_eq!(back.status(), Some(&status), "unchanged");
        }
        let timeout = Error::from(google_cloud_spanner::Error::timeout("slow"));
        assert_eq!(timeout.code(), None);
        assert_eq!(timeout.classification(), Classification::OutcomeUnknown);
        let back: google_cloud_spanner::Error = timeout.into();
        assert!(back.is_timeout());
    }

    #[test]
    fn foreign_or_malformed_error_info_is_not_ours() {
        let foreign =
            Status::default()
                .set_code(GaxCode::NotFound)
                .set_details([StatusDetails::ErrorInfo(
                    ErrorInfo::new()
                        .set_domain("spanner.googleapis.com")
                        .set_reason("ALREADY_ACKED"),
                )]);
        assert!(matches!(
            Error::from(google_cloud_spanner::Error::service(foreign)),
            Error::Spanner(_)
        ));
        let malformed =
            Status::default()
                .set_code(GaxCode::NotFound)
                .set_details([StatusDetails::ErrorInfo(
                    ErrorInfo::new()
                        .set_domain(ERROR_DOMAIN)
                        .set_reason("ALREADY_ACKED")
                        .set_metadata([("queue", "bad name")]),
                )]);
        assert!(matches!(
            Error::from(google_cloud_spanner::Error::service(malformed)),
            Error::Spanner(_)
        ));
    }

    #[test]
    fn spanner_classification_table() {
        use Classification::*;
        let table = [
            (GaxCode::Aborted, Retryable),
            (GaxCode::ResourceExhausted, Retryable),
            (GaxCode::Unavailable, OutcomeUnknown),
            (GaxCode::DeadlineExceeded, OutcomeUnknown),
            (GaxCode::Cancelled, OutcomeUnknown),
            (GaxCode::Unknown, OutcomeUnknown),
            (GaxCode::Internal, OutcomeUnknown),
            (GaxCode::DataLoss, OutcomeUnknown),
            (GaxCode::InvalidArgument, Permanent),
            (GaxCode::NotFound, Permanent),
            (GaxCode::AlreadyExists, Permanent),
            (GaxCode::PermissionDenied, Permanent),
            (GaxCode::FailedPrecondition, Permanent),
            (GaxCode::OutOfRange, Permanent),
            (GaxCode::Unimplemented, Permanent),
            (GaxCode::Unauthenticated, Permanent),
        ];
        for (code, class) in table {
            let e = Error::Spanner(spanner(code));
            assert_eq!(e.classification(), class, "{code:?}");
            assert_eq!(e.code().map(GaxCode::from), Some(code));
        }
        assert!(spanner(GaxCode::Aborted).is_aborted());
        assert!(!spanner(GaxCode::Unavailable).is_aborted());
    }

    #[test]
    fn codes_convert_both_ways() {
        for (ours, gax, name) in ALL_CODES {
            assert_eq!(Code::from(gax), ours);
            assert_eq!(GaxCode::from(ours), gax);
            assert_eq!(ours.name(), name);
            assert_eq!(gax.name(), name);
        }
    }

    #[test]
    fn display_never_repeats_the_source() {
        for e in every_variant() {
            if let Some(source) = e.source() {
                let source_text = source.to_string();
                // Transparent variants share their source's text by construction.
                if matches!(
                    e,
                    Error::InvalidIdentifier(_) | Error::OutcomeUnknown(_) | Error::Spanner(_)
                ) {
                    continue;
                }
                assert!(!e.to_string().contains(&source_text), "{e}");
            }
        }
        let e = Error::Spanner(spanner(GaxCode::NotFound));
        assert_eq!(e.to_string(), "Spanner request failed with NOT_FOUND");
        assert!(e.source().is_some());
        assert_eq!(
            Error::AlreadyAcked {
                queue: queue(),
                key: key()
            }
            .to_string(),
            "message (42, \"6f1c\", b\"\\x01\\x02\\x03\") in queue `OrderEmails` was already acked"
        );
    }
}
