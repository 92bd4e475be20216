//! Running read-write transactions whose commit outcome is classified, never blindly retried.
//!
//! [`run`] and [`run_with`] drive the official client's `TransactionRunner` with deliberate
//! settings:
//!
//! - **Aborts** (`ABORTED`: Spanner rolled the transaction back) re-run the closure, bounded by
//!   [`TransactionSettings::max_attempts`] and [`TransactionSettings::total_timeout`]. An abort
//!   means nothing was applied, so re-running is safe. (The client's own default is unbounded.)
//! - **The Commit RPC is never re-sent** by this crate: the commit retry policy is `NeverRetry`,
//!   and each commit attempt is bounded by [`TransactionSettings::commit_timeout`]. The client's
//!   default would re-send a Commit after a transport error or `UNAVAILABLE`; whether Cloud
//!   Spanner de-duplicates a re-sent Commit is not documented (the emulator applies it once), so
//!   this crate does not rely on it. Statements, `BeginTransaction` and `Rollback` keep the
//!   client's default retries: Spanner de-duplicates a re-sent statement by its sequence number,
//!   and the others apply nothing.
//! - When the commit itself fails, [`commit_outcome`] decides from public status codes and error
//!   predicates whether it was **not applied** (the error is returned as is), or **unknown** (it
//!   may have been applied): then the call returns [`Error::OutcomeUnknown`], which lists the
//!   queue operations the transaction performed, and does not retry.
//!
//! **Every error other than [`Error::OutcomeUnknown`] means nothing was applied.** An error from
//! the closure (a statement failed, or the closure returned an error) never reached the commit:
//! the runner rolled back.
//!
//! [`run_guarded`] adds a commit marker to the transaction, so that an unknown outcome is
//! resolved exactly, and retried at most once, by itself; [`resolve`] answers "was it applied?"
//! for an [`OutcomeUnknown`] returned to you. See [`crate::outcome`] for the mechanisms and the
//! cases they do not cover.
//!
//! [`run`]: crate::transaction::run
//! [`run_with`]: crate::transaction::run_with
//! [`run_guarded`]: crate::transaction::run_guarded
//! [`resolve`]: crate::transaction::resolve
//! [`commit_outcome`]: crate::transaction::commit_outcome
//! [`OutcomeUnknown`]: crate::OutcomeUnknown

use std::time::Duration;

use google_cloud_gax::error::rpc::Code as GaxCode;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::{
    BasicTransactionRetryPolicy, ReadWriteTransaction, TransactionRunner,
};

use crate::error::{Error, OutcomeUnknown, Result, SpannerError};
use crate::outcome::{CommitMarker, CommitMarkers, MarkerId, Recorder, Resolution};

/// What is known about a commit that returned an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitOutcome {
    /// The transaction was not applied: retrying it is safe.
    NotApplied,
    /// The transaction may or may not have been applied.
    Unknown,
}

/// Classifies an error returned by a Commit RPC, from its public status code and the client's
/// public predicates only.
///
/// | Error | Outcome | Why |
/// |---|---|---|
/// | `ABORTED` | not applied | Spanner rolled the transaction back; the runner re-runs it |
/// | `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `FAILED_PRECONDITION`, `OUT_OF_RANGE` | not applied | the commit was rejected: a bad request, a missing session or transaction, a constraint (an insert of an existing key, an Ack of a missing message) |
/// | `PERMISSION_DENIED`, `UNAUTHENTICATED` | not applied | refused before any work |
/// | `RESOURCE_EXHAUSTED` | not applied | refused for quota or size \[I\] |
/// | `UNIMPLEMENTED` | not applied | the server cannot perform the request |
/// | `UNAVAILABLE` | unknown | retryable for reads, but the request may have reached Spanner before the failure (measured: a dropped reply ended with `UNAVAILABLE` after the commit was applied) |
/// | `DEADLINE_EXCEEDED`, `CANCELLED` | unknown | the call ended early; the commit may complete anyway |
/// | `INTERNAL`, `UNKNOWN`, `DATA_LOSS` | unknown | server or proxy failure at an unknown point (an HTTP/2 stream reset arrives as `INTERNAL`) |
/// | `OK` on an error | unknown | malformed; cannot tell |
/// | [`is_timeout`](google_cloud_spanner::Error::is_timeout) (the commit attempt timeout) | unknown | measured: a stalled reply after an applied commit |
/// | [`is_exhausted`](google_cloud_spanner::Error::is_exhausted) | unknown | a retry loop gave up after at least one attempt that may have been applied |
/// | [`is_serialization`](google_cloud_spanner::Error::is_serialization) | not applied | the request could not be encoded, so it was never sent |
/// | any other error without a status (transport failure, connection reset, a reply that cannot be decoded) | unknown | measured: a connection reset after an applied commit has no status |
///
/// The client's predicates for connection failures (`is_connect`, `is_io`, `is_transport`)
/// are not public API, so a failure to connect is also classed *unknown*: conservative, never
/// wrong. `RESOURCE_EXHAUSTED`, `FAILED_PRECONDITION` and `NOT_FOUND` are read as rejections
/// because Spanner documents them as request-level errors; if a proxy between the client and
/// Spanner could produce them after forwarding a commit, they would be unknown too \[I\].
pub fn commit_outcome(error: &google_cloud_spanner::Error) -> CommitOutcome {
    if error.is_timeout() || error.is_exhausted() {
        return CommitOutcome::Unknown;
    }
    let Some(status) = error.status() else {
        if error.is_serialization() {
            return CommitOutcome::NotApplied;
        }
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

/// Bounds for [`run_with`] and [`run_guarded`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactionSettings {
    /// Attempts in total when Spanner aborts the transaction (default 10).
    pub max_attempts: u32,
    /// Time budget across all attempts (default 60 s).
    pub total_timeout: Duration,
    /// Deadline of one Commit RPC (default 30 s). When it passes, the outcome is unknown.
    pub commit_timeout: Duration,
    /// Guarded transactions only: how many unknown commit outcomes [`run_guarded`] resolves by
    /// itself (default 3). Each is resolved by reading the marker: applied, the call returns
    /// success; not applied, the transaction runs again with the same marker, so at most one
    /// attempt commits. With 0, the first unknown outcome is returned at once
    /// ([`Error::OutcomeUnknown`], with its marker) for you to [`resolve`].
    pub unknown_outcome_retries: u32,
    /// Guarded transactions only: the marker table (default: GoogleSQL, 7 days' retention).
    pub commit_markers: CommitMarkers,
}

impl Default for TransactionSettings {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            total_timeout: Duration::from_secs(60),
            commit_timeout: Duration::from_secs(30),
            unknown_outcome_retries: 3,
            commit_markers: CommitMarkers::new(),
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

    /// Sets [`unknown_outcome_retries`](Self::unknown_outcome_retries) (0: return unknown
    /// outcomes to the caller).
    pub fn with_unknown_outcome_retries(mut self, retries: u32) -> Self {
        self.unknown_outcome_retries = retries;
        self
    }

    /// Sets [`commit_markers`](Self::commit_markers).
    pub fn with_commit_markers(mut self, markers: CommitMarkers) -> Self {
        self.commit_markers = markers;
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
///         // Nothing was applied.
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
///
/// # Errors
/// [`Error::OutcomeUnknown`] when the commit may or may not have been applied (never retried);
/// it lists the queue operations of the attempt. Any other error: nothing was applied.
pub async fn run_with<T, F>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    mut work: F,
) -> Result<T>
where
    F: AsyncFnMut(ReadWriteTransaction) -> google_cloud_spanner::Result<T>,
{
    match execute(db, settings, None, &mut work).await {
        Ok(value) => Ok(value),
        Err(Failure::Unknown(unknown, _)) => Err(Error::OutcomeUnknown(unknown)),
        Err(Failure::Other(error)) => Err(error),
        // Only guarded transactions insert a marker.
        Err(Failure::MarkerExists) => Err(Error::InvalidConfig {
            reason: "commit marker conflict in an unguarded transaction".into(),
        }),
    }
}

/// How a guarded transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Guarded<T> {
    /// The transaction committed exactly once, and this is what the closure returned in the
    /// attempt that committed: either the commit succeeded, or its outcome was unknown and its
    /// marker showed it was applied.
    Committed(T),
    /// The transaction had already committed before this attempt began: its marker existed.
    /// Either an earlier call with the same marker committed, or one of several attempts of
    /// this call whose outcomes were unknown did. Its writes were applied exactly once, by that
    /// attempt; nothing of this attempt was applied, and the closure's return value is not
    /// available.
    CommittedEarlier,
}

impl<T> Guarded<T> {
    /// The closure's value, if known.
    pub fn into_value(self) -> Option<T> {
        match self {
            Self::Committed(value) => Some(value),
            Self::CommittedEarlier => None,
        }
    }
}

/// Runs `work` in a read-write transaction guarded by a fresh commit marker: an unknown commit
/// outcome is resolved by reading the marker, and the transaction is re-run, with the same
/// marker, only if it was not applied. It commits at most once.
///
/// The marker table must exist: create it once with
/// [`CommitMarkers::create_statement`] (see [`TransactionSettings::commit_markers`]).
///
/// ```no_run
/// use google_cloud_spanner::client::DatabaseClient;
/// use google_cloud_spanner::statement::Statement;
/// use spanner_queues::transaction::{self, Guarded, TransactionSettings};
///
/// async fn refund(db: &DatabaseClient, order: i64) -> spanner_queues::Result<()> {
///     let settings = TransactionSettings::default();
///     match transaction::run_guarded(db, &settings, async |tx| {
///         tx.execute_update(
///             Statement::builder("UPDATE Orders SET Refunded = Refunded + 1 WHERE Id = @id")
///                 .add_param("id", order)
///                 .build(),
///         )
///         .await
///     })
///     .await
///     {
///         // Applied once, whatever the network did.
///         Ok(Guarded::Committed(_)) | Ok(Guarded::CommittedEarlier) => Ok(()),
///         // Could not be resolved now (the database is unreachable): keep `unknown`, call
///         // `transaction::resolve` later, or retry with `run_guarded_as` and its marker.
///         Err(spanner_queues::Error::OutcomeUnknown(unknown)) => Err(unknown.into()),
///         Err(error) => Err(error), // nothing was applied
///         Ok(_) => Ok(()),
///     }
/// }
/// ```
///
/// # Errors
/// [`Error::OutcomeUnknown`] (with its [`marker`](OutcomeUnknown::marker)) when an outcome
/// stayed unknown: the marker could not be read,
/// [`unknown_outcome_retries`](TransactionSettings::unknown_outcome_retries) ran out, or a retry
/// after an unknown outcome failed. Any other error: nothing was applied.
pub async fn run_guarded<T, F>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    work: F,
) -> Result<Guarded<T>>
where
    F: AsyncFnMut(ReadWriteTransaction) -> google_cloud_spanner::Result<T>,
{
    run_guarded_as(db, settings, MarkerId::new(), work).await
}

/// Like [`run_guarded`], with a marker id of your choice.
///
/// Use it to retry a transaction whose [`OutcomeUnknown`] you kept (pass its
/// [`marker`](OutcomeUnknown::marker) id: the retry commits only if the first attempt never
/// did, and returns [`Guarded::CommittedEarlier`] otherwise), or with an id stored before the
/// transaction (with a job, or derived from a request id) to keep the guarantee across process
/// restarts. Calls with the same id commit at most once between them, within the marker
/// retention period.
///
/// # Errors
/// As [`run_guarded`].
pub async fn run_guarded_as<T, F>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    marker: MarkerId,
    mut work: F,
) -> Result<Guarded<T>>
where
    F: AsyncFnMut(ReadWriteTransaction) -> google_cloud_spanner::Result<T>,
{
    let guard = CommitMarker::new(marker, settings.commit_markers.dialect());
    let mut unknown_attempts: u32 = 0;
    let mut last_unknown: Option<OutcomeUnknown> = None;
    loop {
        let (unknown, value) = match execute(db, settings, Some(marker), &mut work).await {
            Ok(value) => return Ok(Guarded::Committed(value)),
            Err(Failure::MarkerExists) => {
                tracing::info!(%marker, "commit marker exists: the transaction committed earlier");
                return Ok(Guarded::CommittedEarlier);
            }
            Err(Failure::Other(error)) => {
                // A retry that failed does not settle an earlier unknown attempt (its commit
                // could still be in flight): that one stays unknown.
                return Err(match last_unknown {
                    Some(unknown) => {
                        tracing::warn!(%marker, error = %error, "guarded retry failed; the earlier outcome stays unknown");
                        Error::OutcomeUnknown(unknown)
                    }
                    None => error,
                });
            }
            Err(Failure::Unknown(unknown, value)) => (unknown, value),
        };
        unknown_attempts += 1;
        if unknown_attempts > settings.unknown_outcome_retries {
            tracing::warn!(%marker, "unknown commit outcome left to the caller to resolve");
            return Err(Error::OutcomeUnknown(unknown));
        }
        let resolution = match resolve_marker(db, guard).await {
            Ok(resolution) => resolution,
            Err(error) => {
                tracing::warn!(%marker, error = %error, "could not read the commit marker; the outcome stays unknown");
                return Err(Error::OutcomeUnknown(unknown));
            }
        };
        match resolution {
            Resolution::Applied { .. } => {
                tracing::info!(%marker, "unknown commit outcome resolved: applied");
                // With one unknown attempt, it is the one that applied.
                return Ok(match value {
                    Some(value) if unknown_attempts == 1 => Guarded::Committed(value),
                    _ => Guarded::CommittedEarlier,
                });
            }
            Resolution::NotApplied => {
                tracing::info!(
                    %marker,
                    attempt = unknown_attempts,
                    "unknown commit outcome resolved: not applied; retrying with the same marker"
                );
                last_unknown = Some(unknown);
            }
        }
    }
}

/// Reads the commit marker of an unknown outcome (a strong read): was the transaction applied?
///
/// [`Resolution::Applied`] is final. [`Resolution::NotApplied`] is true as of the read; a commit
/// still in flight could apply after it, so to act on it, retry with the same marker
/// ([`run_guarded_as`]), which commits only if the first attempt never does.
///
/// # Errors
/// [`Error::InvalidConfig`] if the transaction was not guarded (no marker: see
/// [`OutcomeUnknown::is_self_guarded`] and [`crate::outcome`] for what else can be done); Spanner
/// errors from the read (nothing was written).
pub async fn resolve(db: &DatabaseClient, unknown: &OutcomeUnknown) -> Result<Resolution> {
    let Some(marker) = unknown.marker() else {
        return Err(Error::InvalidConfig {
            reason: "the transaction was not guarded by a commit marker, so its outcome cannot \
                     be read back; check its effects instead"
                .into(),
        });
    };
    resolve_marker(db, marker).await
}

/// Reads a commit marker (a strong read); see [`resolve`].
///
/// # Errors
/// Spanner errors from the read (nothing was written).
pub async fn resolve_marker(db: &DatabaseClient, marker: CommitMarker) -> Result<Resolution> {
    let markers = CommitMarkers::new().with_dialect(marker.dialect());
    let mut rows = db
        .single_use()
        .build()
        .execute_query(markers.select_statement(marker.id()))
        .await
        .map_err(Error::from)?;
    match rows.next().await {
        None => Ok(Resolution::NotApplied),
        Some(row) => {
            let row = row.map_err(Error::from)?;
            let committed_at = row.get::<std::time::SystemTime>(0).map_err(Error::from)?;
            Ok(Resolution::Applied { committed_at })
        }
    }
}

/// Why [`execute`] failed.
enum Failure<T> {
    /// The commit's outcome is unknown; the closure's value in that attempt.
    Unknown(OutcomeUnknown, Option<T>),
    /// The marker insert found the marker: the transaction committed earlier.
    MarkerExists,
    /// Anything else: nothing was applied.
    Other(Error),
}

/// The official runner configured by `settings`: aborts re-run the body (bounded by attempts
/// and total time), and the Commit RPC is never re-sent (`NeverRetry`) and is bounded by its
/// own deadline. Every runner of this crate uses it.
pub(crate) fn runner(db: &DatabaseClient, settings: &TransactionSettings) -> TransactionRunner {
    db.read_write_transaction()
        .with_commit_retry_policy(NeverRetry)
        .with_commit_attempt_timeout(settings.commit_timeout)
        .with_retry_policy(
            BasicTransactionRetryPolicy::new()
                .with_max_attempts(settings.max_attempts)
                .with_total_timeout(settings.total_timeout),
        )
        .build()
}

/// One run of the official runner (it re-runs `work` on aborts), with the queue-operation
/// recorder installed and, for guarded transactions, the marker insert as the first statement.
async fn execute<T, F>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    marker: Option<MarkerId>,
    work: &mut F,
) -> std::result::Result<T, Failure<T>>
where
    F: AsyncFnMut(ReadWriteTransaction) -> google_cloud_spanner::Result<T>,
{
    let markers = settings.commit_markers;
    let recorder = Recorder::default();
    let mut value: Option<T> = None;
    let mut reached_commit = false;
    let mut marker_exists = false;
    let runner = runner(db, settings);
    let result = recorder
        .scope(runner.run(async |tx| {
            // A new attempt: whatever an earlier one did was rolled back.
            reached_commit = false;
            marker_exists = false;
            value = None;
            recorder.clear();
            if let Some(id) = marker
                && let Err(error) = tx.execute_update(markers.insert_statement(id)).await
            {
                marker_exists = error
                    .status()
                    .is_some_and(|s| s.code == GaxCode::AlreadyExists);
                return Err(error);
            }
            value = Some(work(tx).await?);
            reached_commit = true;
            Ok(())
        }))
        .await;
    match result {
        // The runner commits only after the closure returned `Ok`, which set `value`.
        Ok(_) => value.ok_or_else(|| {
            Failure::Other(Error::InvalidConfig {
                reason: "internal error: a transaction committed without a closure result".into(),
            })
        }),
        Err(_) if marker_exists => Err(Failure::MarkerExists),
        Err(error) if reached_commit => {
            let marker = marker.map(|id| CommitMarker::new(id, markers.dialect()));
            match commit_failure(error, &recorder, marker) {
                Error::OutcomeUnknown(unknown) => Err(Failure::Unknown(unknown, value)),
                other => Err(Failure::Other(other)),
            }
        }
        Err(error) => Err(Failure::Other(Error::from(error))),
    }
}

/// The error for a commit that failed: as is when it was not applied, otherwise
/// [`Error::OutcomeUnknown`] with the attempt's queue operations (from `recorder`) and marker.
///
/// For every transaction runner of this crate: install `recorder` around the runner
/// ([`Recorder::scope`]) and clear it when an attempt starts.
pub(crate) fn commit_failure(
    error: google_cloud_spanner::Error,
    recorder: &Recorder,
    marker: Option<CommitMarker>,
) -> Error {
    match commit_outcome(&error) {
        CommitOutcome::NotApplied => Error::from(error),
        CommitOutcome::Unknown => {
            let mut unknown = OutcomeUnknown::new(Some(SpannerError::new(error)))
                .with_operations(recorder.snapshot());
            if let Some(marker) = marker {
                unknown = unknown.with_marker(marker);
            }
            tracing::warn!(error = %unknown, "commit outcome unknown; not re-sending the commit");
            metrics::counter!("spanner_queues_commit_outcome_unknown_total").increment(1);
            Error::OutcomeUnknown(unknown)
        }
    }
}

/// Maps a failed commit to a typed error (used by the unit tests).
#[cfg(test)]
fn commit_error(error: google_cloud_spanner::Error) -> Error {
    commit_failure(error, &Recorder::default(), None)
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
    fn errors_without_a_status_are_unknown_unless_never_sent() {
        use google_cloud_spanner::Error as E;
        let table = [
            // The request could not be encoded: it was never sent.
            (
                "serialization",
                E::ser("bad request"),
                CommitOutcome::NotApplied,
            ),
            // A reply arrived but could not be decoded: the commit may have been applied.
            (
                "deserialization",
                E::deser("bad reply"),
                CommitOutcome::Unknown,
            ),
            // Measured: a connection reset after an applied commit is a transport error.
            (
                "transport",
                E::transport(Default::default(), "connection reset"),
                CommitOutcome::Unknown,
            ),
            ("io", E::io("broken pipe"), CommitOutcome::Unknown),
            // The client's `is_connect` is not public API: conservatively unknown.
            ("connect", E::connect("refused"), CommitOutcome::Unknown),
            (
                "http without a gRPC status",
                E::http(503, Default::default(), Default::default()),
                CommitOutcome::Unknown,
            ),
        ];
        for (label, error, expected) in table {
            assert!(error.status().is_none(), "{label}");
            assert_eq!(commit_outcome(&error), expected, "{label}");
        }
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
