//! Read-write transactions whose commit outcome is classified, never blindly retried.
//!
//! [`Database::transaction`] starts one; its [`run`](TransactionBuilder::run) drives the
//! official client's `TransactionRunner` with deliberate settings:
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
//! the runner rolled back. The closure returns this crate's [`Result`]: its errors come back to
//! the caller as they were returned (wrap your own with [`Error::application`]), and a Spanner
//! error that aborted the transaction makes the runner run the closure again.
//!
//! The closure is `FnOnce(Transaction) -> Fut + Clone + Send`: it is cloned once per attempt
//! and each clone is called once, so a `move` closure may capture references (they are `Copy`)
//! and owned values it can clone, and its future may own them. The future of `run` is `Send`:
//! a transaction can run inside `tokio::spawn`, a web handler or any generic code that requires
//! `Send`. (An `async` closure that captures borrows is refused by today's compiler with
//! "implementation of `Send` is not general enough", hence a closure returning a future.)
//!
//! [`guarded`](TransactionBuilder::guarded) adds a commit marker to the transaction, so that an
//! unknown outcome is resolved exactly, and retried at most once, by itself;
//! [`Database::resolve`] answers "was it applied?" for an [`OutcomeUnknown`] returned to you.
//! See [`crate::outcome`] for the mechanisms and the cases they do not cover.
//!
//! [`OutcomeUnknown`]: crate::outcome::OutcomeUnknown
//! [`Result`]: crate::Result

use std::future::Future;

use futures::future::{self, Either};

use google_cloud_gax::error::rpc::Code as GaxCode;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::{
    BasicTransactionRetryPolicy, ReadWriteTransaction, TransactionRunner,
};
use std::sync::Arc;

use tokio::sync::oneshot;

pub(crate) use crate::database::TransactionSettings;
use crate::database::{AsDatabase, Database};
use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::outcome::OutcomeUnknown;
use crate::outcome::{CommitMarker, CommitMarkers, MarkerId, Recorder, Resolution};
use crate::query::query_rows;
use crate::status::{SpannerError, code_facts};

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
/// A status code is read from the crate's one table of gRPC codes, the one behind
/// [`Error::classification`] too (`ABORTED`,
/// `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`,
/// `PERMISSION_DENIED`, `UNAUTHENTICATED`, `UNIMPLEMENTED` and `RESOURCE_EXHAUSTED` were not
/// applied; `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `INTERNAL`, `CANCELLED`, `UNKNOWN`, `DATA_LOSS`
/// and `OK` on an error may have been). Without a status:
///
/// | Error | Outcome | Why |
/// |---|---|---|
/// | [`is_timeout`](google_cloud_spanner::Error::is_timeout) (the commit attempt timeout) | unknown | measured: a stalled reply after an applied commit |
/// | [`is_exhausted`](google_cloud_spanner::Error::is_exhausted) | unknown | a retry loop gave up after at least one attempt that may have been applied |
/// | [`is_serialization`](google_cloud_spanner::Error::is_serialization) | not applied | the request could not be encoded, so it was never sent |
/// | any other error (transport failure, connection reset, a reply that cannot be decoded) | unknown | measured: a connection reset after an applied commit has no status |
///
/// The client's predicates for connection failures (`is_connect`, `is_io`, `is_transport`)
/// are not public API, so a failure to connect is also classed *unknown*: conservative, never
/// wrong. `RESOURCE_EXHAUSTED`, `FAILED_PRECONDITION` and `NOT_FOUND` are read as rejections
/// because Spanner documents them as request-level errors; if a proxy between the client and
/// Spanner could produce them after forwarding a commit, they would be unknown too (not
/// documented; this crate assumes it does not happen).
pub fn commit_outcome(error: &google_cloud_spanner::Error) -> CommitOutcome {
    if error.is_timeout() || error.is_exhausted() {
        return CommitOutcome::Unknown;
    }
    match error.status() {
        Some(status) if !code_facts(status.code).commit_may_have_applied => {
            CommitOutcome::NotApplied
        }
        Some(_) => CommitOutcome::Unknown,
        // The request could not be encoded: it was never sent.
        None if error.is_serialization() => CommitOutcome::NotApplied,
        // A transport failure after the request may have been written.
        None => CommitOutcome::Unknown,
    }
}

/// Starts a read-write transaction on `db`, for the crate's own transactions (their closures
/// take the official transaction and may be `FnMut`). Users start theirs with
/// [`Database::transaction`].
pub(crate) fn builder<D: AsDatabase + ?Sized>(db: &D) -> Runner<'_> {
    Runner {
        db: db.database_client(),
        dialect: db.database_dialect(),
        settings: TransactionSettings::default(),
    }
}

/// A read-write transaction to run; made by [`builder`].
#[derive(Debug, Clone)]
#[must_use = "a transaction does nothing until it is run"]
pub(crate) struct Runner<'a> {
    db: &'a DatabaseClient,
    dialect: Dialect,
    settings: TransactionSettings,
}

impl<'a> Runner<'a> {
    /// Uses `settings` instead of the defaults.
    pub(crate) fn with_settings(mut self, settings: TransactionSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Runs `work` in the transaction and commits it; see the [module docs](self) for what
    /// is retried.
    ///
    /// `work` runs once per attempt: Spanner may abort a transaction, and the runner then runs
    /// it again (bounded by [`TransactionSettings::max_attempts`] and
    /// [`TransactionSettings::total_timeout`]). When it returns an error, the transaction is
    /// rolled back and the error is returned as is; an [`Error::Spanner`] that aborted the
    /// transaction is retried instead. Wrap your own errors with [`Error::application`].
    ///
    /// # Errors
    /// [`Error::OutcomeUnknown`] when the commit may or may not have been applied (never
    /// retried); it lists the queue operations of the attempt. Any other error: nothing was
    /// applied.
    ///
    /// # Cancellation
    /// Dropping the future before it completes rolls nothing back that was committed: if the
    /// commit was already sent, it may still apply, and the outcome is then unknown to you.
    pub(crate) fn run<T, F, Fut>(self, work: F) -> impl Future<Output = Result<T>> + Send + 'a
    where
        F: FnMut(ReadWriteTransaction) -> Fut + Send + 'a,
        Fut: Future<Output = Result<T>> + Send + 'a,
        T: Send + 'a,
    {
        let mut work = work;
        async move {
            self.settings.validate()?;
            match execute(self.db, self.dialect, &self.settings, None, &mut work).await {
                Ok(value) => Ok(value),
                Err(Failure::Unknown(unknown, _)) => Err(Error::OutcomeUnknown(unknown)),
                Err(Failure::Other(error)) => Err(error),
                Err(Failure::MarkerExists) => {
                    unreachable!("only a guarded transaction inserts a commit marker")
                }
            }
        }
    }
}

/// A read-write transaction of this crate: the official
/// [`ReadWriteTransaction`] (it dereferences to it, for your own `execute_update`,
/// `execute_query` and `buffer`) together with its [`Database`], so that what is sent, acked
/// or released in it is written in the database's dialect with the database's settings.
///
/// Made by [`TransactionBuilder::run`] (one per attempt) and handed to a transactional
/// worker's handler. Its queue operations: [`send`](Self::send),
/// [`send_with`](Self::send_with), [`send_many`](Self::send_many),
/// [`send_many_with`](Self::send_many_with), [`cancel`](Self::cancel),
/// [`send_raw`](Self::send_raw), [`ack`](Self::ack) and [`release`](Self::release).
#[derive(Debug, Clone)]
pub struct Transaction {
    inner: ReadWriteTransaction,
    db: Database,
}

impl Transaction {
    /// Wraps an attempt's official transaction.
    pub(crate) fn new(inner: ReadWriteTransaction, db: Database) -> Self {
        Self { inner, db }
    }

    /// The database the transaction runs in.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The official transaction (also reachable through `Deref`).
    pub fn read_write(&self) -> &ReadWriteTransaction {
        &self.inner
    }
}

impl std::ops::Deref for Transaction {
    type Target = ReadWriteTransaction;

    fn deref(&self) -> &ReadWriteTransaction {
        &self.inner
    }
}

impl Database {
    /// Starts a read-write transaction with this database's
    /// [`transaction_settings`](Database::transaction_settings): set its options, then
    /// [`run`](TransactionBuilder::run) it (or make it [`guarded`](TransactionBuilder::guarded)
    /// first).
    pub fn transaction(&self) -> TransactionBuilder<'_> {
        TransactionBuilder {
            db: self,
            settings: self.transaction_settings().clone(),
        }
    }

    /// Reads the commit marker of an unknown outcome (a strong read): was the transaction
    /// applied?
    ///
    /// [`Resolution::Applied`] is final. [`Resolution::NotApplied`] is true as of the read; a
    /// commit still in flight could apply after it, so to act on it, retry with the same
    /// marker ([`TransactionBuilder::guarded_as`]), which commits only if the first attempt
    /// never does.
    ///
    /// # Errors
    /// [`Error::Precondition`] if the transaction was not guarded (no marker: see
    /// [`OutcomeUnknown::is_self_guarded`] and [`crate::outcome`] for what else can be done);
    /// Spanner errors from the read (nothing was written).
    pub async fn resolve(&self, unknown: &OutcomeUnknown) -> Result<Resolution> {
        resolve(self, unknown).await
    }
}

/// A read-write transaction to run; made by [`Database::transaction`].
///
/// ```no_run
/// use google_cloud_spanner::statement::Statement;
/// use spanner_queues::Database;
///
/// async fn credit(db: &Database, account: i64) -> spanner_queues::Result<()> {
///     let outcome = db
///         .transaction()
///         .run(move |tx| async move {
///             let statement =
///                 Statement::builder("UPDATE Accounts SET Balance = Balance + 1 WHERE Id = @id")
///                     .add_param("id", account)
///                     .build();
///             tx.execute_update(statement).await?;
///             Ok(())
///         })
///         .await;
///     match outcome {
///         Ok(()) => Ok(()),
///         // May have been applied: find out before doing it again.
///         Err(spanner_queues::Error::OutcomeUnknown(unknown)) => Err(unknown.into()),
///         // Nothing was applied.
///         Err(other) => Err(other),
///     }
/// }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a transaction does nothing until it is run"]
pub struct TransactionBuilder<'a> {
    db: &'a Database,
    settings: TransactionSettings,
}

impl<'a> TransactionBuilder<'a> {
    /// Uses `settings` for this transaction instead of the database's.
    pub fn with_transaction_settings(mut self, settings: TransactionSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Guards the transaction with a fresh commit marker: an unknown commit outcome is
    /// resolved by reading the marker, and the transaction is run again, with the same marker,
    /// only if it was not applied. It commits at most once.
    ///
    /// The marker table must exist: create it once with
    /// [`SchemaSetup::with_commit_markers`](crate::SchemaSetup::with_commit_markers).
    pub fn guarded(self) -> GuardedTransactionBuilder<'a> {
        self.guarded_as(MarkerId::new())
    }

    /// Like [`guarded`](Self::guarded), with a marker id of your choice.
    ///
    /// Use it to retry a transaction whose [`OutcomeUnknown`] you kept (pass its
    /// [`marker`](OutcomeUnknown::marker) id: the retry commits only if the first attempt never
    /// did, and returns [`Guarded::CommittedEarlier`] otherwise), or with an id stored before
    /// the transaction (with a job, or derived from a request id) to keep the guarantee across
    /// process restarts. Runs with the same id commit at most once between them, within the
    /// marker retention period.
    pub fn guarded_as(self, marker: MarkerId) -> GuardedTransactionBuilder<'a> {
        GuardedTransactionBuilder {
            db: self.db,
            settings: self.settings,
            marker,
        }
    }

    /// Runs `work` in the transaction and commits it; see the [module docs](self) for what
    /// is retried.
    ///
    /// `work` is `FnOnce + Clone`: it is cloned once per attempt (Spanner may abort a
    /// transaction, and the runner then runs it again, bounded by
    /// [`TransactionSettings::max_attempts`] and [`TransactionSettings::total_timeout`]), and
    /// each clone is called once with that attempt's [`Transaction`]. So a `move` closure
    /// that captures references (which are `Copy`) or cheap clones needs no
    /// `let x = &x;` line before it, and the future it returns may own its captures. The
    /// future of `run` is `Send`: it runs inside `tokio::spawn`, web handlers and generic
    /// code that requires `Send`.
    ///
    /// When `work` returns an error, the transaction is rolled back and the error is returned
    /// as is; an [`Error::Spanner`] that aborted the transaction is retried instead. Wrap your
    /// own errors with [`Error::application`].
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for settings out of range (nothing sent);
    /// [`Error::OutcomeUnknown`] when the commit may or may not have been applied (never
    /// retried); it lists the queue operations of the attempt. Any other error: nothing was
    /// applied.
    ///
    /// # Cancellation
    /// Dropping the future before it completes rolls nothing back that was committed: if the
    /// commit was already sent, it may still apply, and the outcome is then unknown to you.
    pub fn run<T, F, Fut>(self, work: F) -> impl Future<Output = Result<T>> + Send + 'a
    where
        F: FnOnce(Transaction) -> Fut + Clone + Send + 'a,
        Fut: Future<Output = Result<T>> + Send + 'a,
        T: Send + 'a,
    {
        let db = self.db;
        let mut attempt = per_attempt(db, work);
        async move {
            self.settings.validate()?;
            match execute(
                db.client(),
                db.dialect(),
                &self.settings,
                None,
                &mut attempt,
            )
            .await
            {
                Ok(value) => Ok(value),
                Err(Failure::Unknown(unknown, _)) => Err(Error::OutcomeUnknown(unknown)),
                Err(Failure::Other(error)) => Err(error),
                Err(Failure::MarkerExists) => {
                    unreachable!("only a guarded transaction inserts a commit marker")
                }
            }
        }
    }
}

/// `work` as the runner calls it: cloned and called once per attempt, with the attempt's
/// transaction wrapped with its database.
fn per_attempt<F, Fut>(db: &Database, work: F) -> impl FnMut(ReadWriteTransaction) -> Fut + Send
where
    F: FnOnce(Transaction) -> Fut + Clone + Send,
{
    let db = db.clone();
    move |tx| (work.clone())(Transaction::new(tx, db.clone()))
}

/// A read-write transaction guarded by a commit marker; made by
/// [`TransactionBuilder::guarded`] or [`TransactionBuilder::guarded_as`].
#[derive(Debug, Clone)]
#[must_use = "a transaction does nothing until it is run"]
pub struct GuardedTransactionBuilder<'a> {
    db: &'a Database,
    settings: TransactionSettings,
    marker: MarkerId,
}

impl<'a> GuardedTransactionBuilder<'a> {
    /// The marker id that guards this transaction.
    pub fn marker(&self) -> MarkerId {
        self.marker
    }

    /// Runs `work` in the transaction, with the marker insert as its first statement, and
    /// commits it at most once. `work` is called as by [`TransactionBuilder::run`].
    ///
    /// ```no_run
    /// use google_cloud_spanner::statement::Statement;
    /// use spanner_queues::Database;
    /// use spanner_queues::transaction::Guarded;
    ///
    /// async fn refund(db: &Database, order: i64) -> spanner_queues::Result<()> {
    ///     let outcome = db
    ///         .transaction()
    ///         .guarded()
    ///         .run(move |tx| async move {
    ///             let statement =
    ///                 Statement::builder("UPDATE Orders SET Refunded = Refunded + 1 WHERE Id = @id")
    ///                     .add_param("id", order)
    ///                     .build();
    ///             tx.execute_update(statement).await?;
    ///             Ok(())
    ///         })
    ///         .await;
    ///     match outcome {
    ///         // Applied once, whatever the network did.
    ///         Ok(Guarded::Committed(())) | Ok(Guarded::CommittedEarlier) => Ok(()),
    ///         // Could not be resolved now (the database is unreachable): keep `unknown`, call
    ///         // `db.resolve(&unknown)` later, or run again with `guarded_as` and its marker.
    ///         Err(spanner_queues::Error::OutcomeUnknown(unknown)) => Err(unknown.into()),
    ///         Err(error) => Err(error), // nothing was applied
    ///     }
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::OutcomeUnknown`] (with its [`marker`](OutcomeUnknown::marker)) when an outcome
    /// stayed unknown: the marker could not be read,
    /// [`unknown_outcome_retries`](TransactionSettings::unknown_outcome_retries) ran out, or a
    /// retry after an unknown outcome failed. Any other error: nothing was applied.
    ///
    /// # Cancellation
    /// Dropping the future before it completes leaves the outcome unknown to you if a commit
    /// was already sent; run again with [`guarded_as`](TransactionBuilder::guarded_as) and the
    /// same [`marker`](Self::marker) to find out, and to commit at most once.
    pub fn run<T, F, Fut>(self, work: F) -> impl Future<Output = Result<Guarded<T>>> + Send + 'a
    where
        F: FnOnce(Transaction) -> Fut + Clone + Send + 'a,
        Fut: Future<Output = Result<T>> + Send + 'a,
        T: Send + 'a,
    {
        let db = self.db;
        let mut attempt = per_attempt(db, work);
        async move {
            self.settings.validate()?;
            run_guarded(
                db.client(),
                db.dialect(),
                &self.settings,
                self.marker,
                &mut attempt,
            )
            .await
        }
    }
}

/// How a guarded transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guarded<T> {
    /// The transaction committed exactly once, and this is what the closure returned in the
    /// attempt that committed: either the commit succeeded, or its outcome was unknown and its
    /// marker showed it was applied.
    Committed(T),
    /// The transaction had already committed before this attempt began: its marker existed.
    /// Either an earlier run with the same marker committed, or one of several attempts of
    /// this run whose outcomes were unknown did. Its writes were applied exactly once, by that
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

/// The loop of a guarded transaction: run, and resolve unknown outcomes by reading the marker.
async fn run_guarded<T, F, Fut>(
    db: &DatabaseClient,
    dialect: Dialect,
    settings: &TransactionSettings,
    marker: MarkerId,
    work: &mut F,
) -> Result<Guarded<T>>
where
    F: FnMut(ReadWriteTransaction) -> Fut + Send,
    Fut: Future<Output = Result<T>> + Send,
    T: Send,
{
    let guard = CommitMarker::new(marker, dialect);
    let mut unknown_attempts: u32 = 0;
    let mut last_unknown: Option<OutcomeUnknown> = None;
    loop {
        let (unknown, value) = match execute(db, dialect, settings, Some(marker), &mut *work).await
        {
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
        if unknown_attempts > settings.unknown_outcome_retries() {
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
/// ([`TransactionBuilder::guarded_as`]), which commits only if the first attempt never does.
///
/// # Errors
/// [`Error::Precondition`] if the transaction was not guarded (no marker: see
/// [`OutcomeUnknown::is_self_guarded`] and [`crate::outcome`] for what else can be done); Spanner
/// errors from the read (nothing was written).
pub(crate) async fn resolve<D: AsDatabase + ?Sized>(
    db: &D,
    unknown: &OutcomeUnknown,
) -> Result<Resolution> {
    let Some(marker) = unknown.marker() else {
        return Err(Error::Precondition {
            reason: "the transaction was not guarded by a commit marker, so its outcome cannot \
                     be read back; check its effects instead"
                .into(),
        });
    };
    resolve_marker(db.database_client(), marker).await
}

/// Reads a commit marker (a strong read); see [`resolve`].
///
/// # Errors
/// Spanner errors from the read (nothing was written).
pub(crate) async fn resolve_marker(
    db: &DatabaseClient,
    marker: CommitMarker,
) -> Result<Resolution> {
    let statement = CommitMarkers::select_statement(marker.dialect(), marker.id());
    let committed = query_rows(
        db,
        statement,
        |row| Ok(row.get::<std::time::SystemTime>(0)?),
    )
    .await?;
    Ok(match committed.first() {
        None => Resolution::NotApplied,
        Some(&committed_at) => Resolution::Applied { committed_at },
    })
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
/// own deadline.
fn runner(db: &DatabaseClient, settings: &TransactionSettings) -> TransactionRunner {
    db.read_write_transaction()
        .with_commit_retry_policy(NeverRetry)
        .with_commit_attempt_timeout(settings.commit_timeout())
        .with_retry_policy(
            BasicTransactionRetryPolicy::new()
                .with_max_attempts(settings.max_attempts())
                .with_total_timeout(settings.total_timeout()),
        )
        .build()
}

/// What one attempt of [`execute`] left behind for it.
struct Attempt<T> {
    /// The closure's value, once it returned `Ok`.
    value: Option<T>,
    /// The closure returned `Ok`: any error after it is the commit's.
    reached_commit: bool,
    /// The marker insert found the marker.
    marker_exists: bool,
    /// The closure's error, unless it came from Spanner (those go to the runner as they are).
    failed: Option<Error>,
}

impl<T> Attempt<T> {
    fn new() -> Self {
        Self {
            value: None,
            reached_commit: false,
            marker_exists: false,
            failed: None,
        }
    }
}

/// An attempt handed from the official runner's closure to [`execute`]'s driver: the
/// transaction, and where to answer.
type AttemptCall = (
    ReadWriteTransaction,
    oneshot::Sender<google_cloud_spanner::Result<()>>,
);

/// Hands each attempt from the official runner's closure to [`execute`]'s driver: a slot for
/// one attempt (attempts run one after the other) and the driver's waker.
#[derive(Default)]
struct Handoff {
    call: std::sync::Mutex<Option<AttemptCall>>,
    driver: futures::task::AtomicWaker,
}

impl Handoff {
    /// Hands an attempt over and wakes the driver.
    fn hand(&self, call: AttemptCall) {
        *crate::util::lock(&self.call) = Some(call);
        self.driver.wake();
    }

    /// The attempt handed over, or `Pending` until one is.
    fn poll_take(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<AttemptCall> {
        self.driver.register(cx.waker());
        match crate::util::lock(&self.call).take() {
            Some(call) => std::task::Poll::Ready(call),
            None => std::task::Poll::Pending,
        }
    }
}

/// One run of the official runner (it re-runs `work` on aborts), with the queue-operation
/// recorder installed and, for guarded transactions, the marker insert as the first statement.
///
/// Errors travel in process: a Spanner error from `work` goes back to the runner unchanged
/// (so that an abort re-runs the attempt); any other error is kept aside, the runner gets a
/// stand-in that rolls the transaction back, and the kept error is returned.
///
/// Why a channel: the official runner takes an async closure, and a future that awaits one
/// built from a non-`'static` closure cannot be proven `Send` in generic code today ("`Send`
/// is not general enough"). So the closure given to the runner holds only `'static` types: it
/// passes each attempt's transaction to a driver, which runs `work` next to the runner in the
/// same task, and waits for the driver's answer.
async fn execute<T, F, Fut>(
    db: &DatabaseClient,
    dialect: Dialect,
    settings: &TransactionSettings,
    marker: Option<MarkerId>,
    work: &mut F,
) -> std::result::Result<T, Failure<T>>
where
    F: FnMut(ReadWriteTransaction) -> Fut + Send,
    Fut: Future<Output = Result<T>> + Send,
    T: Send,
{
    let recorder = Recorder::default();
    let mut state = Attempt::new();
    let handoff = Arc::new(Handoff::default());
    let calls = Arc::clone(&handoff);
    // Pinned in place, not boxed: the official runner's future is large (kilobytes), and
    // boxing it would copy it to the heap on every transaction.
    let runner = std::pin::pin!(runner(db, settings).run(move |tx: ReadWriteTransaction| {
        let (answer, answered) = oneshot::channel();
        calls.hand((tx, answer));
        async move { answered.await.unwrap_or_else(|_| Err(rolled_back())) }
    }));
    let result = {
        let driver = std::pin::pin!(async {
            loop {
                let (tx, answer) = future::poll_fn(|cx| handoff.poll_take(cx)).await;
                // A new attempt: whatever an earlier one did was rolled back.
                recorder.clear();
                state = Attempt::new();
                let outcome = attempt(tx, marker, dialect, &mut *work, &mut state).await;
                let _ = answer.send(outcome);
            }
        });
        match recorder.scope(future::select(runner, driver)).await {
            Either::Left((result, _)) => result,
            Either::Right(((), _)) => unreachable!("the driver waits for attempts forever"),
        }
    };
    let error = match result {
        Ok(_) => match state.value.take() {
            Some(value) => return Ok(value),
            None => unreachable!("the runner commits only after the closure returned Ok"),
        },
        Err(error) => error,
    };
    if let Some(failed) = state.failed.take() {
        return Err(Failure::Other(failed));
    }
    if state.marker_exists {
        return Err(Failure::MarkerExists);
    }
    if !state.reached_commit {
        return Err(Failure::Other(Error::from(error)));
    }
    let marker = marker.map(|id| CommitMarker::new(id, dialect));
    match commit_failure(error, &recorder, marker) {
        Error::OutcomeUnknown(unknown) => Err(Failure::Unknown(unknown, state.value.take())),
        other => Err(Failure::Other(other)),
    }
}

/// One attempt: the marker insert (guarded transactions), then `work`.
async fn attempt<T, F, Fut>(
    tx: ReadWriteTransaction,
    marker: Option<MarkerId>,
    dialect: Dialect,
    work: &mut F,
    state: &mut Attempt<T>,
) -> google_cloud_spanner::Result<()>
where
    F: FnMut(ReadWriteTransaction) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    if let Some(id) = marker
        && let Err(error) = tx
            .execute_update(CommitMarkers::insert_statement(dialect, id))
            .await
    {
        state.marker_exists = error
            .status()
            .is_some_and(|s| s.code == GaxCode::AlreadyExists);
        return Err(error);
    }
    match work(tx).await {
        Ok(value) => {
            state.value = Some(value);
            state.reached_commit = true;
            Ok(())
        }
        Err(Error::Spanner(error)) => Err(error.into_inner()),
        Err(other) => {
            state.failed = Some(other);
            Err(rolled_back())
        }
    }
}

/// The error handed to the runner when the closure failed with an error of its own: it rolls
/// the transaction back and is never seen by callers (the closure's error is returned).
fn rolled_back() -> google_cloud_spanner::Error {
    google_cloud_spanner::Error::service(
        google_cloud_gax::error::rpc::Status::default()
            .set_code(GaxCode::Cancelled)
            .set_message("the transaction closure failed; rolling back"),
    )
}

/// The error for a commit that failed: as is when it was not applied, otherwise
/// [`Error::OutcomeUnknown`] with the attempt's queue operations (from `recorder`) and marker.
fn commit_failure(
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
            metrics::counter!(crate::telemetry::COMMIT_OUTCOME_UNKNOWN).increment(1);
            Error::OutcomeUnknown(unknown)
        }
    }
}

/// Maps a failed commit to a typed error (used by the unit tests).
#[cfg(test)]
fn commit_error(error: google_cloud_spanner::Error) -> Error {
    commit_failure(error, &Recorder::default(), None)
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
            crate::error::Classification::OutcomeUnknown
        );
        let error = commit_error(status(GaxCode::Aborted));
        assert!(matches!(error, Error::Spanner(_)), "{error:?}");
    }
}
