//! Running read-write transactions whose commit outcome is classified, never blindly retried.
//!
//! [`run`] drives the official client's `TransactionRunner` with deliberate settings:
//!
//! - **Aborts** (`ABORTED`: Spanner rolled the transaction back) re-run the closure, bounded by
//!   [`TransactionSettings::max_attempts`] and [`TransactionSettings::total_timeout`]. An abort
//!   means nothing was applied, so re-running is safe.
//! - **The Commit RPC is never re-sent** by this crate: the commit retry policy is
//!   `NeverRetry`, and each commit attempt is bounded by
//!   [`TransactionSettings::commit_timeout`].
//! - When the commit itself fails, [`commit_outcome`] decides from public status codes and error
//!   predicates whether it was **not applied** (safe to retry), or **unknown** (it may have been
//!   applied): then [`run`] returns [`Error::OutcomeUnknown`] and does not retry.
//!
//! An error from the closure (a statement failed, or the closure returned an error) never
//! reached the commit: the runner rolled back and nothing was applied.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use google_cloud_gax::error::rpc::Code as GaxCode;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::{BasicTransactionRetryPolicy, ReadWriteTransaction};

use crate::error::{Error, OutcomeUnknown, Result, SpannerError};

/// What is known about a commit that returned an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitOutcome {
    /// The transaction was not applied: retrying it is safe.
    NotApplied,
    /// The transaction may or may not have been applied.
    Unknown,
}

/// Classifies an error returned by a Commit RPC.
///
/// | Error | Outcome |
/// |---|---|
/// | `ABORTED` | not applied (Spanner rolled the transaction back) |
/// | `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`, `UNIMPLEMENTED`, `RESOURCE_EXHAUSTED` | not applied (rejected) |
/// | `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `CANCELLED`, `UNKNOWN`, `INTERNAL`, `DATA_LOSS`, `OK` | unknown |
/// | client timeout ([`is_timeout`](google_cloud_spanner::Error::is_timeout)), retry policy exhausted, transport failure without a status | unknown |
///
/// `UNAVAILABLE` is unknown for a commit although it is retryable for reads: the request may
/// have reached Spanner before the connection failed.
pub fn commit_outcome(error: &google_cloud_spanner::Error) -> CommitOutcome {
    if error.is_timeout() || error.is_exhausted() {
        return CommitOutcome::Unknown;
    }
    let Some(status) = error.status() else {
        // A transport failure after the request may have been written.
        return CommitOutcome::Unknown;
    };
    match status.code {
        GaxCode::Aborted
        | GaxCode::InvalidArgument
        | GaxCode::NotFound
        | GaxCode::AlreadyExists
        | GaxCode::PermissionDenied
        | GaxCode::Unauthenticated
        | GaxCode::FailedPrecondition
        | GaxCode::OutOfRange
        | GaxCode::Unimplemented
        | GaxCode::ResourceExhausted => CommitOutcome::NotApplied,
        _ => CommitOutcome::Unknown,
    }
}

/// Bounds for [`run`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactionSettings {
    /// Attempts in total when Spanner aborts the transaction (default 10).
    pub max_attempts: u32,
    /// Time budget across all attempts (default 60 s).
    pub total_timeout: Duration,
    /// Deadline of one Commit RPC (default 30 s). When it passes, the outcome is unknown.
    pub commit_timeout: Duration,
}

impl Default for TransactionSettings {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            total_timeout: Duration::from_secs(60),
            commit_timeout: Duration::from_secs(30),
        }
    }
}

impl TransactionSettings {
    /// Sets [`max_attempts`](Self::max_attempts).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets [`total_timeout`](Self::total_timeout).
    pub fn with_total_timeout(mut self, timeout: Duration) -> Self {
        self.total_timeout = timeout;
        self
    }

    /// Sets [`commit_timeout`](Self::commit_timeout).
    pub fn with_commit_timeout(mut self, timeout: Duration) -> Self {
        self.commit_timeout = timeout;
        self
    }
}

/// Runs `work` in a read-write transaction with the default [`TransactionSettings`].
///
/// ```no_run
/// use google_cloud_spanner::client::DatabaseClient;
/// use google_cloud_spanner::statement::Statement;
///
/// async fn credit(db: &DatabaseClient) -> spanner_queues::Result<()> {
///     let outcome = spanner_queues::transaction::run(db, async |tx| {
///         tx.execute_update(Statement::builder("UPDATE Accounts SET Balance = Balance + 1 WHERE Id = 1"))
///             .await
///     })
///     .await;
///     match outcome {
///         Ok(_) => Ok(()),
///         // May have been applied: find out before doing it again.
///         Err(spanner_queues::Error::OutcomeUnknown(unknown)) => Err(unknown.into()),
///         Err(other) => Err(other),
///     }
/// }
/// ```
pub async fn run<T, F>(db: &DatabaseClient, work: F) -> Result<T>
where
    F: AsyncFnMut(ReadWriteTransaction) -> google_cloud_spanner::Result<T>,
{
    run_with(db, &TransactionSettings::default(), work).await
}

/// Runs `work` in a read-write transaction with explicit [`TransactionSettings`].
pub async fn run_with<T, F>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    mut work: F,
) -> Result<T>
where
    F: AsyncFnMut(ReadWriteTransaction) -> google_cloud_spanner::Result<T>,
{
    let reached_commit = Arc::new(AtomicBool::new(false));
    let runner = db
        .read_write_transaction()
        .with_commit_retry_policy(NeverRetry)
        .with_commit_attempt_timeout(settings.commit_timeout)
        .with_retry_policy(
            BasicTransactionRetryPolicy::new()
                .with_max_attempts(settings.max_attempts)
                .with_total_timeout(settings.total_timeout),
        )
        .build();
    let flag = Arc::clone(&reached_commit);
    let result = runner
        .run(async |tx| {
            flag.store(false, Ordering::SeqCst);
            let result = work(tx).await;
            flag.store(result.is_ok(), Ordering::SeqCst);
            result
        })
        .await;
    match result {
        Ok(done) => Ok(done.result),
        Err(error) if reached_commit.load(Ordering::SeqCst) => Err(commit_error(error)),
        Err(error) => Err(Error::from(error)),
    }
}

/// Maps a failed commit to a typed error.
fn commit_error(error: google_cloud_spanner::Error) -> Error {
    match commit_outcome(&error) {
        CommitOutcome::NotApplied => Error::from(error),
        CommitOutcome::Unknown => {
            tracing::warn!(error = %error, "commit outcome unknown; not retrying");
            Error::OutcomeUnknown(OutcomeUnknown::new(Some(SpannerError::new(error))))
        }
    }
}

/// Sends messages for producers that have no transaction of their own: each call commits.
///
/// ```no_run
/// # use spanner_queues::{Producer, QueueMessage};
/// # #[derive(QueueMessage)]
/// # #[queue(name = "Emails")]
/// # struct Email { #[queue(key)] id: uuid::Uuid, to: String }
/// # async fn demo(db: google_cloud_spanner::client::DatabaseClient) -> spanner_queues::Result<()> {
/// let producer = Producer::new(db);
/// producer.send(&Email { id: uuid::Uuid::new_v4(), to: "ada@example.com".into() }).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Producer {
    db: DatabaseClient,
    settings: TransactionSettings,
}

impl Producer {
    /// A producer on `db` with default [`TransactionSettings`].
    pub fn new(db: DatabaseClient) -> Self {
        Self {
            db,
            settings: TransactionSettings::default(),
        }
    }

    /// Uses `settings` for every commit.
    pub fn with_settings(mut self, settings: TransactionSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Sends one message in its own transaction.
    ///
    /// # Errors
    /// [`Error::OutcomeUnknown`] when the commit's outcome is unknown (never retried);
    /// [`Error::AlreadyQueued`] when the key is still queued; encoding and size errors before
    /// any RPC.
    pub async fn send<M: crate::QueueMessage>(&self, message: &M) -> Result<()> {
        self.send_with(&crate::Queue::<M>::new(), message, crate::DeliverAt::Now)
            .await
    }

    /// Sends one message through `queue` (its settings apply) at `deliver`.
    pub async fn send_with<M: crate::QueueMessage>(
        &self,
        queue: &crate::Queue<M>,
        message: &M,
        deliver: crate::DeliverAt,
    ) -> Result<()> {
        run_with(&self.db, &self.settings, async |tx| {
            queue
                .send_with(&tx, message, deliver)
                .await
                .map_err(google_cloud_spanner::Error::from)
        })
        .await
    }

    /// Sends several messages in one transaction (all or none).
    pub async fn send_many<M: crate::QueueMessage>(&self, messages: &[M]) -> Result<usize> {
        let queue = crate::Queue::<M>::new();
        run_with(&self.db, &self.settings, async |tx| {
            queue
                .send_many(&tx, messages)
                .await
                .map_err(google_cloud_spanner::Error::from)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_gax::error::rpc::Status;

    fn status(code: GaxCode) -> google_cloud_spanner::Error {
        google_cloud_spanner::Error::service(Status::default().set_code(code).set_message("x"))
    }

    #[test]
    fn every_grpc_code_has_a_commit_outcome() {
        use CommitOutcome::{NotApplied, Unknown};
        let table = [
            (GaxCode::Ok, Unknown),
            (GaxCode::Cancelled, Unknown),
            (GaxCode::Unknown, Unknown),
            (GaxCode::InvalidArgument, NotApplied),
            (GaxCode::DeadlineExceeded, Unknown),
            (GaxCode::NotFound, NotApplied),
            (GaxCode::AlreadyExists, NotApplied),
            (GaxCode::PermissionDenied, NotApplied),
            (GaxCode::ResourceExhausted, NotApplied),
            (GaxCode::FailedPrecondition, NotApplied),
            (GaxCode::Aborted, NotApplied),
            (GaxCode::OutOfRange, NotApplied),
            (GaxCode::Unimplemented, NotApplied),
            (GaxCode::Internal, Unknown),
            (GaxCode::Unavailable, Unknown),
            (GaxCode::DataLoss, Unknown),
            (GaxCode::Unauthenticated, NotApplied),
        ];
        for (code, expected) in table {
            assert_eq!(commit_outcome(&status(code)), expected, "{code:?}");
        }
    }

    #[test]
    fn client_side_timeouts_and_exhaustion_are_unknown() {
        let timeout = google_cloud_spanner::Error::timeout("deadline");
        assert_eq!(commit_outcome(&timeout), CommitOutcome::Unknown);
        let exhausted = google_cloud_spanner::Error::exhausted("retries");
        assert_eq!(commit_outcome(&exhausted), CommitOutcome::Unknown);
    }

    #[test]
    fn unknown_commit_becomes_a_typed_error() {
        let error = commit_error(status(GaxCode::Unavailable));
        assert!(matches!(error, Error::OutcomeUnknown(_)), "{error:?}");
        assert_eq!(
            error.classification(),
            crate::Classification::OutcomeUnknown
        );
        let error = commit_error(status(GaxCode::Aborted));
        assert!(matches!(error, Error::Spanner(_)), "{error:?}");
    }
}
