//! The crate's error type and its retry classification.
//!
//! Every fallible call returns [`Error`]. [`Error::classification`] says what a caller may do:
//! retry as is, give up, or first find out whether the operation was applied.
//!
//! # Inside a transaction
//!
//! The closure of [`Database::transaction`](crate::Database::transaction)'s `run` returns this
//! crate's [`Result`]: its errors come back to the caller as they were returned, in process.
//! Wrap your own errors with [`Error::application`] and get them back with
//! [`Error::downcast_application`]:
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
//! // What `?` does inside a transaction closure: the typed error, unchanged.
//! fn in_closure(report: &Report) -> spanner_queues::Result<()> {
//!     let _payload = report.encode()?;
//!     Ok(())
//! }
//!
//! let report = Report { id: 7, cells: BTreeMap::from([((0, 0), "x".to_string())]) };
//! let error = in_closure(&report).expect_err("cannot encode");
//! assert!(matches!(error, Error::Encode { ref queue, .. } if queue == "Reports"));
//! assert_eq!(error.key().map(ToString::to_string).as_deref(), Some("(7)"));
//! ```
//!
//! Inside the official client's own `TransactionRunner`, whose closure returns
//! `google_cloud_spanner::Error`, `?` converts an [`Error`] too: Spanner's own errors pass
//! through unchanged (so the runner still retries aborts); any other error becomes a status
//! with its [`code`](Error::code), its text and its [`reason`](Error::reason). That conversion
//! is lossy: the typed error cannot be rebuilt from it.

use std::fmt;

use google_cloud_gax::error::rpc::{Status, StatusDetails};
use google_cloud_rpc::model::ErrorInfo;

pub use crate::outcome::OutcomeUnknown;
pub use crate::status::{Classification, Code, SpannerError};
pub use crate::util::BoxError;

use crate::codec::CodecError;
use crate::dialect::Dialect;
use crate::ident::{IdentifierError, QueueName};
use crate::key::{KeyError, MessageKey};
use crate::types::{SchemaError, queue_suffix};

/// `pub type Result<T, E = Error>`: the crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The `google.rpc.ErrorInfo` domain of the statuses an [`Error`] converts into (see the
/// [module docs](self)).
pub const ERROR_DOMAIN: &str = "spanner-queues.rs";

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

    /// A setting is out of its range.
    ///
    /// Nothing was sent to Spanner. Code `INVALID_ARGUMENT`; permanent.
    ///
    /// # Troubleshooting
    /// The reason gives the allowed range.
    #[error("invalid setting `{setting}`: {reason}")]
    #[non_exhaustive]
    InvalidSetting {
        /// The setting, as its `with_*` setter names it.
        setting: &'static str,
        /// What is wrong.
        reason: String,
    },

    /// A call was made in a state that does not allow it (outside a Tokio runtime, or
    /// resolving a transaction that was not guarded).
    ///
    /// Nothing was sent to Spanner. Code `FAILED_PRECONDITION`; permanent.
    ///
    /// # Troubleshooting
    /// The reason says what the call needs.
    #[error("{reason}")]
    #[non_exhaustive]
    Precondition {
        /// What the call needs.
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
        "payload of message {} for queue `{queue}` is {size} bytes, over the limit of {limit} bytes", key.short()
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
    #[error("could not encode the payload of message {} for queue `{queue}`", key.short())]
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
    #[error("could not decode message {} from queue `{queue}`", key.short())]
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
    #[error("message {} in queue `{queue}` was already acked", key.short())]
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
    #[error("message {} is already queued in queue `{queue}`", key.short())]
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

    /// A name given to [`Database::queue_by_name`](crate::Database::queue_by_name) (or an
    /// untyped dead-letter replay) is not a queue of the database: no object of that name, a
    /// table rather than a queue, or not a valid queue name.
    ///
    /// Nothing was written. Code `NOT_FOUND`; permanent.
    ///
    /// # Troubleshooting
    /// Names are matched as Spanner matches them (exactly in GoogleSQL, folded to lower case
    /// in PostgreSQL). List the queues with the CLI's `queues` command.
    #[error("`{name}` is not a queue of this database: {reason}")]
    #[non_exhaustive]
    NotAQueue {
        /// The name as it was given.
        name: String,
        /// Why it is not a queue.
        reason: String,
    },

    /// The dialect stated with [`DatabaseBuilder::with_dialect`](crate::DatabaseBuilder::with_dialect)
    /// is not the database's.
    ///
    /// Nothing was written. Code `FAILED_PRECONDITION`; permanent.
    ///
    /// # Troubleshooting
    /// Drop `with_dialect` (the dialect is read from the database), or connect to the
    /// database you meant.
    #[error("the database speaks {actual:?}, not the stated {stated:?}")]
    #[non_exhaustive]
    DialectMismatch {
        /// The dialect stated by the caller.
        stated: Dialect,
        /// The database's dialect.
        actual: Dialect,
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
    #[error("lease on message {} in queue `{queue}` was lost", key.short())]
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

    /// Spanner returned an error (or the request failed on its way there).
    ///
    /// Nothing was written: a commit that may have been applied is an
    /// [`Error::OutcomeUnknown`] instead. Code as returned. Retryable for `ABORTED`,
    /// `RESOURCE_EXHAUSTED`, `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `INTERNAL` and errors without a
    /// status (client timeouts, transport failures); permanent otherwise.
    ///
    /// # Troubleshooting
    /// The message shows Spanner's status code and text.
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

impl From<SchemaError> for Error {
    fn from(error: SchemaError) -> Self {
        match error {
            SchemaError::InvalidSchema { queue, reason } => Self::InvalidSchema { queue, reason },
            SchemaError::Unsupported { feature } => Self::Unsupported { feature },
        }
    }
}

impl From<OutcomeUnknown> for Error {
    fn from(unknown: OutcomeUnknown) -> Self {
        Error::OutcomeUnknown(unknown)
    }
}

impl From<google_cloud_spanner::Error> for Error {
    fn from(error: google_cloud_spanner::Error) -> Self {
        Error::Spanner(SpannerError::new(error))
    }
}

impl From<Error> for google_cloud_spanner::Error {
    /// For the official client's own `TransactionRunner` closures (see the [module
    /// docs](self)). Spanner's own errors pass through unchanged, so the runner still sees (and
    /// retries) aborts. Any other error becomes a status with the error's [`code`](Error::code)
    /// (`UNKNOWN` when it has none), its text with its causes, and an `ErrorInfo` with its
    /// [`reason`](Error::reason) in the domain [`ERROR_DOMAIN`]. Lossy: the typed error cannot
    /// be rebuilt from it.
    fn from(error: Error) -> Self {
        match error {
            Error::Spanner(e) => e.into_inner(),
            other => {
                let mut status = Status::default()
                    .set_code(other.code().unwrap_or(Code::Unknown))
                    .set_message(crate::telemetry::ErrorChain(&other).to_string());
                if let Some(reason) = other.reason() {
                    let info = ErrorInfo::new().set_reason(reason).set_domain(ERROR_DOMAIN);
                    status = status.set_details([StatusDetails::ErrorInfo(info)]);
                }
                google_cloud_spanner::Error::service(status)
            }
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
            | Self::InvalidSetting { .. }
            | Self::PayloadTooLarge { .. }
            | Self::Encode { .. }
            | Self::InvalidKey { .. } => Code::InvalidArgument,
            Self::Unsupported { .. } => Code::Unimplemented,
            Self::Precondition { .. } => Code::FailedPrecondition,
            Self::Decode { .. } | Self::SchemaDrift { .. } | Self::LeaseLost { .. } => {
                Code::FailedPrecondition
            }
            Self::AlreadyAcked { .. } | Self::QueueNotFound { .. } | Self::NotAQueue { .. } => {
                Code::NotFound
            }
            Self::DialectMismatch { .. } => Code::FailedPrecondition,
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

    /// A stable name of this error's kind (`ALREADY_ACKED`, …), `None` for
    /// [`Error::Application`] and [`Error::Spanner`]: the `ErrorInfo` reason of the status it
    /// converts into (see the [module docs](self)).
    pub fn reason(&self) -> Option<&'static str> {
        Some(match self {
            Self::InvalidIdentifier(_) => reason::INVALID_IDENTIFIER,
            Self::InvalidSchema { .. } => reason::INVALID_SCHEMA,
            Self::Unsupported { .. } => reason::UNSUPPORTED,
            Self::InvalidSetting { .. } => reason::INVALID_SETTING,
            Self::Precondition { .. } => reason::PRECONDITION,
            Self::PayloadTooLarge { .. } => reason::PAYLOAD_TOO_LARGE,
            Self::Encode { .. } => reason::ENCODE_FAILED,
            Self::Decode { .. } => reason::DECODE_FAILED,
            Self::InvalidKey { .. } => reason::INVALID_KEY,
            Self::AlreadyAcked { .. } => reason::ALREADY_ACKED,
            Self::AlreadyQueued { .. } => reason::ALREADY_QUEUED,
            Self::QueueNotFound { .. } => reason::QUEUE_NOT_FOUND,
            Self::NotAQueue { .. } => reason::NOT_A_QUEUE,
            Self::DialectMismatch { .. } => reason::DIALECT_MISMATCH,
            Self::SchemaDrift { .. } => reason::SCHEMA_DRIFT,
            Self::LeaseLost { .. } => reason::LEASE_LOST,
            Self::OutcomeUnknown(_) => reason::OUTCOME_UNKNOWN,
            Self::Application(_) | Self::Spanner(_) => return None,
        })
    }
}

/// [`Error::reason`] values. Stable: other processes may match on them.
mod reason {
    pub(super) const INVALID_IDENTIFIER: &str = "INVALID_IDENTIFIER";
    pub(super) const INVALID_SCHEMA: &str = "INVALID_SCHEMA";
    pub(super) const UNSUPPORTED: &str = "UNSUPPORTED";
    pub(super) const INVALID_SETTING: &str = "INVALID_SETTING";
    pub(super) const PRECONDITION: &str = "PRECONDITION";
    pub(super) const PAYLOAD_TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";
    pub(super) const ENCODE_FAILED: &str = "ENCODE_FAILED";
    pub(super) const DECODE_FAILED: &str = "DECODE_FAILED";
    pub(super) const INVALID_KEY: &str = "INVALID_KEY";
    pub(super) const ALREADY_ACKED: &str = "ALREADY_ACKED";
    pub(super) const ALREADY_QUEUED: &str = "ALREADY_QUEUED";
    pub(super) const QUEUE_NOT_FOUND: &str = "QUEUE_NOT_FOUND";
    pub(super) const NOT_A_QUEUE: &str = "NOT_A_QUEUE";
    pub(super) const DIALECT_MISMATCH: &str = "DIALECT_MISMATCH";
    pub(super) const SCHEMA_DRIFT: &str = "SCHEMA_DRIFT";
    pub(super) const LEASE_LOST: &str = "LEASE_LOST";
    pub(super) const OUTCOME_UNKNOWN: &str = "OUTCOME_UNKNOWN";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ident::{IdentifierKind, IdentifierProblem};
    use crate::key::{KeyType, KeyValue};
    use crate::outcome::{CommitMarker, MarkerId, OperationKind, QueueOperation};
    use crate::schema::Dialect;
    use static_assertions::assert_impl_all;
    use std::error::Error as _;

    assert_impl_all!(Error: Send, Sync, std::fmt::Debug);
    assert_impl_all!(SpannerError: Send, Sync, std::fmt::Debug);

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

    fn spanner(code: Code) -> SpannerError {
        SpannerError::new(google_cloud_spanner::Error::service(
            Status::default().set_code(code).set_message("boom"),
        ))
    }

    /// One value of every variant but `Spanner` and `Application`.
    fn every_sdk_variant() -> Vec<Error> {
        vec![
            Error::InvalidIdentifier(IdentifierError::new(
                IdentifierKind::Column,
                "Payload",
                IdentifierProblem::ReservedForSystem,
            )),
            Error::invalid_schema(Some("Q"), "no key"),
            Error::invalid_schema(None, "unknown type"),
            Error::Unsupported {
                feature: "ALTER QUEUE in PostgreSQL".into(),
            },
            Error::InvalidSetting {
                setting: "batch_size",
                reason: "must be at least 1".into(),
            },
            Error::Precondition {
                reason: "needs a Tokio runtime".into(),
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
            Error::NotAQueue {
                name: "Orders".into(),
                reason: "it is a table".into(),
            },
            Error::DialectMismatch {
                stated: Dialect::PostgreSql,
                actual: Dialect::GoogleSql,
            },
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
            Error::OutcomeUnknown(OutcomeUnknown::new(Some(spanner(Code::DeadlineExceeded)))),
            Error::OutcomeUnknown(
                OutcomeUnknown::new(None)
                    .with_operations(vec![QueueOperation::new(
                        OperationKind::Send,
                        queue(),
                        key(),
                    )])
                    .with_marker(CommitMarker::new(MarkerId::new(), Dialect::GoogleSql)),
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

        let unguarded = OutcomeUnknown::new(Some(spanner(Code::DeadlineExceeded)))
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
    fn only_an_unknown_outcome_classifies_as_unknown() {
        for error in every_sdk_variant() {
            let unknown = matches!(error, Error::OutcomeUnknown(_));
            assert_eq!(
                error.classification() == Classification::OutcomeUnknown,
                unknown,
                "{error}"
            );
        }
        let codes = [
            Code::Ok,
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
            Code::Unauthenticated,
        ];
        for code in codes {
            let class = Error::Spanner(spanner(code)).classification();
            assert_ne!(class, Classification::OutcomeUnknown, "{code:?}");
        }
        for (error, class) in [
            (
                google_cloud_spanner::Error::timeout("slow"),
                Classification::Retryable,
            ),
            (
                google_cloud_spanner::Error::io("reset"),
                Classification::Retryable,
            ),
            (
                google_cloud_spanner::Error::ser("bad request"),
                Classification::Permanent,
            ),
        ] {
            assert_eq!(Error::from(error).classification(), class);
        }
    }

    #[test]
    fn retryable_spanner_codes_follow_the_code_table() {
        use Classification::{Permanent, Retryable};
        let table = [
            (Code::Aborted, Retryable),
            (Code::ResourceExhausted, Retryable),
            (Code::Unavailable, Retryable),
            (Code::DeadlineExceeded, Retryable),
            (Code::Internal, Retryable),
            (Code::Cancelled, Permanent),
            (Code::Unknown, Permanent),
            (Code::DataLoss, Permanent),
            (Code::InvalidArgument, Permanent),
            (Code::NotFound, Permanent),
            (Code::AlreadyExists, Permanent),
            (Code::PermissionDenied, Permanent),
            (Code::FailedPrecondition, Permanent),
            (Code::OutOfRange, Permanent),
            (Code::Unimplemented, Permanent),
            (Code::Unauthenticated, Permanent),
            (Code::Ok, Permanent),
        ];
        for (code, class) in table {
            let e = Error::Spanner(spanner(code));
            assert_eq!(e.classification(), class, "{code:?}");
            assert_eq!(e.code(), Some(code));
        }
        assert!(spanner(Code::Aborted).is_aborted());
        assert!(!spanner(Code::Unavailable).is_aborted());
    }

    #[test]
    fn sdk_errors_convert_into_a_lossy_status_and_spanner_errors_pass_through() {
        for original in every_sdk_variant() {
            let code = original.code();
            let reason = original.reason();
            let text = crate::telemetry::ErrorChain(&original).to_string();
            let client: google_cloud_spanner::Error = original.into();
            let status = client.status().expect("SDK errors become statuses");
            assert_eq!(Some(status.code), code, "{text}");
            assert_eq!(status.message, text);
            assert!(status.details.iter().any(|d| matches!(
                d,
                StatusDetails::ErrorInfo(i) if i.domain == ERROR_DOMAIN && Some(i.reason.as_str()) == reason
            )));
            // Lossy: back, it is a Spanner error with the same code, not the typed variant.
            let back = Error::from(client);
            assert!(matches!(back, Error::Spanner(_)), "{back:?}");
            assert_eq!(back.code(), code);
        }
        for code in [Code::Aborted, Code::NotFound, Code::OutOfRange] {
            let status = Status::default().set_code(code).set_message("from spanner");
            let ours = Error::from(google_cloud_spanner::Error::service(status.clone()));
            assert!(matches!(ours, Error::Spanner(_)));
            assert_eq!(ours.reason(), None);
            let back: google_cloud_spanner::Error = ours.into();
            assert_eq!(back.status(), Some(&status), "unchanged");
        }
        let back: google_cloud_spanner::Error =
            Error::from(google_cloud_spanner::Error::timeout("slow")).into();
        assert!(back.is_timeout());
        let back: google_cloud_spanner::Error = Error::application("business rule").into();
        assert_eq!(back.status().map(|s| s.code), Some(Code::Unknown));
        assert_eq!(
            back.status().map(|s| s.message.as_str()),
            Some("business rule")
        );
    }

    #[test]
    fn errors_display_their_cause_once() {
        for e in every_sdk_variant() {
            if let Some(source) = e.source() {
                let source_text = source.to_string();
                // Transparent variants share their source's text by construction.
                if matches!(e, Error::InvalidIdentifier(_) | Error::OutcomeUnknown(_)) {
                    continue;
                }
                assert!(!e.to_string().contains(&source_text), "{e}");
            }
        }
        let e = Error::Spanner(spanner(Code::NotFound));
        assert_eq!(
            e.to_string(),
            "Spanner request failed with NOT_FOUND: boom",
            "code and Spanner's message"
        );
        assert!(e.source().is_none(), "the client error adds nothing more");
        let e = Error::from(google_cloud_spanner::Error::io("connection reset"));
        assert!(e.to_string().contains("connection reset"), "{e}");
        assert_eq!(
            Error::AlreadyAcked {
                queue: queue(),
                key: key()
            }
            .to_string(),
            "message (42, \"6f1c\", b\"\\x01\\x02\\x03\") in queue `OrderEmails` was already acked"
        );
    }

    #[test]
    fn long_keys_are_shortened_in_messages() {
        let long = MessageKey::new(vec![KeyValue::String("k".repeat(200))]);
        let text = Error::AlreadyAcked {
            queue: queue(),
            key: long.clone(),
        }
        .to_string();
        assert!(text.len() < 140, "{text}");
        assert!(text.contains("(\"kkkk"), "{text}");
        assert!(text.contains('…'), "{text}");
        // The key itself is whole.
        assert_eq!(long.to_string().chars().count(), 204);
    }

    #[test]
    fn application_errors_come_back_typed() {
        #[derive(Debug, PartialEq)]
        struct Rule(&'static str);
        impl fmt::Display for Rule {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Rule {}

        let error = Error::application(Rule("no stock"));
        assert_eq!(error.to_string(), "no stock");
        assert_eq!(error.classification(), Classification::Permanent);
        assert_eq!(error.code(), None);
        assert_eq!(error.application_ref::<Rule>(), Some(&Rule("no stock")));
        let error = error
            .downcast_application::<std::io::Error>()
            .expect_err("not an io error");
        assert_eq!(
            error.downcast_application::<Rule>().ok(),
            Some(Rule("no stock"))
        );
        let spanner = Error::Spanner(spanner(Code::Aborted));
        assert!(spanner.downcast_application::<Rule>().is_err());
    }
}
