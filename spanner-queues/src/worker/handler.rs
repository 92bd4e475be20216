//! Handler errors, the handler context and idempotency keys.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::error::Error;
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::receive::lease::LeaseHandle;
use crate::telemetry;
use crate::util::BoxError;

/// What the worker should do after a handler error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandlerErrorKind {
    /// Retry after the [`RedeliveryPolicy`](super::RedeliveryPolicy)'s delay (dead-letter after the last attempt).
    Retry,
    /// Retry after this delay (dead-letter after the last attempt).
    RetryAfter(Duration),
    /// Do not retry: move the message to the dead-letter table now.
    DeadLetter,
}

/// The error a handler returns.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into it, so `?` works on the
/// official client's errors, this crate's errors and your own. Those are retried according to
/// the worker's [`RedeliveryPolicy`](super::RedeliveryPolicy); use [`retry_after`](Self::retry_after) or
/// [`dead_letter`](Self::dead_letter) to decide otherwise. Inside a transactional handler, an
/// error from Spanner that aborts the transaction (`ABORTED`) makes the transaction runner run
/// the handler again, as it would for any closure.
pub struct HandlerError {
    kind: HandlerErrorKind,
    error: BoxError,
}

impl HandlerError {
    /// A failure to retry after the policy's delay.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self {
            kind: HandlerErrorKind::Retry,
            error: error.into(),
        }
    }

    /// A failure described by `text`, retried after the policy's delay.
    pub fn msg(text: impl fmt::Display) -> Self {
        Self::new(text.to_string())
    }

    /// A failure to retry after `delay` instead of the policy's delay (at most 30 days, the
    /// longest [`max_delay`](super::RedeliveryPolicy::with_max_delay): a longer delay is
    /// shortened to 30 days).
    pub fn retry_after(delay: Duration, error: impl Into<BoxError>) -> Self {
        Self {
            kind: HandlerErrorKind::RetryAfter(delay),
            error: error.into(),
        }
    }

    /// A permanent failure: the message goes to the dead-letter table without further attempts.
    pub fn dead_letter(error: impl Into<BoxError>) -> Self {
        Self {
            kind: HandlerErrorKind::DeadLetter,
            error: error.into(),
        }
    }

    /// What the worker does with it.
    pub fn kind(&self) -> HandlerErrorKind {
        self.kind
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    /// Takes the underlying error.
    pub fn into_error(self) -> BoxError {
        self.error
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        Self::new(error)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&telemetry::ErrorChain(&*self.error), f)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("kind", &self.kind)
            .field("error", &self.error)
            .finish()
    }
}

/// The idempotency key of a message: stable across deliveries, retries, processes and
/// versions of this crate, derived from the queue name and the message key only.
///
/// The text is `<queue>:<64 hex digits>`, the digits the SHA-256 digest of the UTF-8 bytes of
/// `spanner-queues/idempotency/v1`, a line feed, the queue name, a line feed, and the key in
/// [`KeyEncoding::V1`](crate::key::KeyEncoding::V1). **Stability:** this text never changes
/// within a major version of this crate; a change would come with a new version tag in that
/// input (`v2`) and a new major version. The unit tests pin it.
///
/// A new message sent later with the same key gets the same idempotency key: use unique keys
/// (a UUID) for messages that are not repeats of each other.
///
/// ```
/// use spanner_queues::{MessageKey, key::KeyValue, ident::QueueName};
/// use spanner_queues::worker::idempotency_key;
///
/// let queue = QueueName::from_static("Payments");
/// let key = MessageKey::new(vec![KeyValue::Int64(42)]);
/// let id = idempotency_key(&queue, &key);
/// assert!(id.starts_with("Payments:") && id.len() == "Payments:".len() + 64);
/// assert_eq!(id, idempotency_key(&queue, &key));
/// ```
pub fn idempotency_key(queue: &QueueName, key: &MessageKey) -> String {
    let input = format!(
        "{IDEMPOTENCY_INPUT_TAG}\n{}\n{}",
        queue.as_str(),
        crate::key::KeyEncoding::V1.encode(key)
    );
    format!("{queue}:{}", telemetry::sha256_hex(input.as_bytes()))
}

/// The version tag at the start of the hashed input of [`idempotency_key`].
const IDEMPOTENCY_INPUT_TAG: &str = "spanner-queues/idempotency/v1";

/// What a handler knows about the message it is working on.
#[derive(Clone)]
pub struct HandlerContext(pub(super) Arc<ContextInner>);

pub(super) struct ContextInner {
    pub(super) queue: QueueName,
    pub(super) key: MessageKey,
    pub(super) sequence: Option<crate::ordering::Sequence>,
    pub(super) attempt: u32,
    pub(super) max_attempts: u32,
    pub(super) previous_error: Option<String>,
    pub(super) deliver_time: Option<SystemTime>,
    pub(super) lease: LeaseHandle,
}

impl HandlerContext {
    /// The queue.
    pub fn queue(&self) -> &QueueName {
        &self.0.queue
    }

    /// The message key (the full key: of an ordered type, the ordering key and the sequence).
    pub fn key(&self) -> &MessageKey {
        &self.0.key
    }

    /// The message's [`Sequence`](crate::ordering::Sequence) in its ordering key, for an
    /// ordered type; `None` otherwise.
    pub fn sequence(&self) -> Option<crate::ordering::Sequence> {
        self.0.sequence
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        self.0.attempt
    }

    /// The worker's `max_attempts`.
    pub fn max_attempts(&self) -> u32 {
        self.0.max_attempts
    }

    /// Whether a failure now sends the message to the dead-letter table.
    pub fn is_last_attempt(&self) -> bool {
        self.0.attempt >= self.0.max_attempts
    }

    /// The error recorded by the previous failed attempt, if any.
    pub fn previous_error(&self) -> Option<&str> {
        self.0.previous_error.as_deref()
    }

    /// The message's `DeliverTime`, if known.
    pub fn deliver_time(&self) -> Option<SystemTime> {
        self.0.deliver_time
    }

    /// A stable idempotency key for side effects outside Spanner; see [`idempotency_key`].
    pub fn idempotency_key(&self) -> String {
        idempotency_key(&self.0.queue, &self.0.key)
    }

    /// When the lease expires (renewed in the background).
    pub fn lease_expiry(&self) -> SystemTime {
        self.0.lease.expiry()
    }

    /// Whether the lease is lost. The worker stops an external handler when it is; a
    /// transactional handler runs on (its commit fails if another consumer acked first), and may
    /// watch this to give up early.
    pub fn is_lease_lost(&self) -> bool {
        self.0.lease.is_lost()
    }

    /// Resolves when the lease is lost.
    pub async fn lease_lost(&self) {
        self.0.lease.wait_lost().await;
    }
}

impl fmt::Debug for HandlerContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerContext")
            .field("queue", &self.0.queue)
            .field("key", &self.0.key)
            .field("attempt", &self.0.attempt)
            .field("max_attempts", &self.0.max_attempts)
            .finish_non_exhaustive()
    }
}

/// Hands a handler error to the transaction runner: Spanner's own errors go back as they are
/// (so aborts re-run the handler), and so do this crate's errors; anything else travels as an
/// application error, which the runner returns after rolling back.
pub(super) fn to_runner_error(error: HandlerError) -> Error {
    if error.kind == HandlerErrorKind::Retry {
        match error.error.downcast::<google_cloud_spanner::Error>() {
            Ok(spanner) => return Error::from(*spanner),
            Err(other) => match other.downcast::<Error>() {
                Ok(ours) => return *ours,
                Err(other) => return Error::application(HandlerFailed(HandlerError::new(other))),
            },
        }
    }
    Error::application(HandlerFailed(error))
}

/// A handler's error on its way through the transaction runner (as [`Error::Application`]).
#[derive(Debug)]
pub(super) struct HandlerFailed(pub(super) HandlerError);

impl fmt::Display for HandlerFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for HandlerFailed {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("business rule")]
    struct Business;

    #[test]
    fn handler_errors_keep_their_kind_and_source() {
        let error: HandlerError = Business.into();
        assert_eq!(error.kind(), HandlerErrorKind::Retry);
        assert_eq!(error.to_string(), "business rule");
        let later = HandlerError::retry_after(Duration::from_secs(5), Business);
        assert_eq!(
            later.kind(),
            HandlerErrorKind::RetryAfter(Duration::from_secs(5))
        );
        let dead = HandlerError::dead_letter("bad input");
        assert_eq!(dead.kind(), HandlerErrorKind::DeadLetter);
        assert_eq!(HandlerError::msg(42).to_string(), "42");
    }

    #[test]
    fn spanner_errors_go_back_to_the_runner_and_others_travel_as_application_errors() {
        let aborted = || {
            google_cloud_spanner::Error::service(
                google_cloud_gax::error::rpc::Status::default()
                    .set_code(google_cloud_gax::error::rpc::Code::Aborted)
                    .set_message("retry"),
            )
        };
        let back = to_runner_error(HandlerError::from(aborted()));
        assert!(
            matches!(&back, Error::Spanner(s) if s.is_aborted()),
            "{back:?}"
        );

        let back = to_runner_error(HandlerError::from(Business));
        let Ok(HandlerFailed(handler_error)) = back.downcast_application::<HandlerFailed>() else {
            panic!("a business error travels as an application error");
        };
        assert_eq!(handler_error.kind(), HandlerErrorKind::Retry);
        assert_eq!(handler_error.to_string(), "business rule");

        // A dead-letter request is kept as it is, even when it wraps a Spanner error.
        let back = to_runner_error(HandlerError::dead_letter(aborted()));
        let Ok(HandlerFailed(handler_error)) = back.downcast_application::<HandlerFailed>() else {
            panic!("a dead-letter request travels as an application error");
        };
        assert_eq!(handler_error.kind(), HandlerErrorKind::DeadLetter);
    }

    #[test]
    fn idempotency_keys_are_pinned() {
        // Pinned test vectors (computed independently, with Python's hashlib, from the
        // documented input): a change would make external systems see retries as new requests.
        use crate::key::KeyValue;
        let order = MessageKey::new(vec![KeyValue::String("order-1".into())]);
        let cases = [
            (
                QueueName::from_static("Payments"),
                order.clone(),
                "Payments:5f1107ddec0d59bbfae6eb536b74dffab68ad0b32693643e591c63834bddbad6",
            ),
            (
                QueueName::from_static("Refunds"),
                order,
                "Refunds:81ac2e8daf182bf703007f89691b8187259d8fd56708faab3ec1495ae7ed7ab3",
            ),
            (
                QueueName::from_static("OrderEmails"),
                MessageKey::new(vec![KeyValue::Int64(42), KeyValue::Bytes(vec![1, 2, 3])]),
                "OrderEmails:6932cc3463274eb9b39bf824d938175bac13c3fe1afab78c2518baadf310f82d",
            ),
        ];
        for (queue, key, expected) in cases {
            assert_eq!(idempotency_key(&queue, &key), expected, "{queue} {key}");
        }
    }
}
