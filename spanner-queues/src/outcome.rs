//! Commit outcomes: what a transaction tried, and how to find out whether it was applied.
//!
//! A commit can be applied in Spanner while the client sees an error: the reply was lost, the
//! connection broke, or the client's deadline passed. Retrying such a transaction blindly can
//! apply it twice (two refunds, two shipments); giving up can lose it. This crate never re-sends
//! a commit: a [`transaction`](crate::Database::transaction) reports
//! [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown), which lists the queue operations
//! the transaction performed ([`QueueOperation`]) and says how to resolve it. Two mechanisms
//! make a retry safe.
//!
//! # 1. Commit markers (guarded transactions): exact, opt-in
//!
//! A [`guarded`](crate::transaction::TransactionBuilder::guarded) transaction makes a
//! [`MarkerId`] before the
//! first attempt and inserts it, as the transaction's first statement, into the SDK-owned table
//! [`CommitMarkers`] (create it once with [`SchemaSetup::with_commit_markers`](crate::SchemaSetup::with_commit_markers)). The marker commits
//! if and only if the rest of the transaction commits. After an unknown outcome:
//!
//! - a strong read of the marker ([`Database::resolve`](crate::Database::resolve)) says
//!   [`Resolution::Applied`] or [`Resolution::NotApplied`];
//! - a **guarded retry** (same marker) commits at most once: two transactions that insert the
//!   same primary key cannot both commit, so if the first attempt was applied, the retry's marker
//!   insert fails and nothing of the retry is applied
//!   ([`Guarded::CommittedEarlier`](crate::transaction::Guarded::CommittedEarlier)); if the retry
//!   commits, the first attempt can never commit any more.
//!
//! A guarded transaction does both by itself (bounded by
//! [`TransactionSettings::unknown_outcome_retries`](crate::TransactionSettings::unknown_outcome_retries)).
//! Pass your own marker
//! ([`guarded_as`](crate::transaction::TransactionBuilder::guarded_as),
//! for instance one stored with the job or derived from a request id) to keep the guarantee
//! across process restarts.
//!
//! Covers any transaction: sends, acks, cancels and business writes alike. Costs one small
//! insert (one round trip) per transaction, and one row per transaction kept for the retention
//! period ([`CommitMarkers::with_retention_days`], 7 days by default; a row deletion policy
//! removes older markers).
//!
//! # 2. Acks guard themselves: free, automatic
//!
//! An ack deletes the message with `ASSERT_ROWS_MODIFIED 1`. If a transaction that acked a
//! message was applied, the message is gone, so the same transaction run again fails its ack
//! with [`Error::AlreadyAcked`](crate::Error::AlreadyAcked) and rolls back: its writes are never
//! applied twice. [`OutcomeUnknown::is_self_guarded`](crate::outcome::OutcomeUnknown::is_self_guarded)
//! says whether this applies (the transaction acked at least one message). A worker's handler
//! transaction is the typical case.
//!
//! Sends guard themselves in the same way **while the message is still queued**: re-sending a
//! key that is still in the queue fails with
//! [`Error::AlreadyQueued`](crate::Error::AlreadyQueued).
//!
//! # Residual windows
//!
//! | Case | What can happen | Covered by |
//! |---|---|---|
//! | Unguarded send, the message was received **and acked** before the retry | the retry sends it again, and repeats the transaction's other writes | markers only |
//! | Unguarded transaction without queue operations (plain writes) | a retry repeats non-idempotent writes (`Balance = Balance + 1`) | markers only |
//! | Self-guarded ack, the message key was **reused** (acked, then sent again with the same key) before the retry | the retry acks the new message: effects twice, one message lost | markers; use fresh keys (UUIDs) |
//! | [`resolve`](crate::Database::resolve) reads the marker while the first attempt's commit is still in flight | `NotApplied`, then the commit applies | a guarded retry (same marker) is immune; otherwise read again later: a commit in flight settles within seconds (not documented; this crate assumes it) |
//! | Marker older than the retention period | `NotApplied` for an applied transaction | resolve and retry within the retention period |
//! | Operations run on another task, or statements that returned an error | not listed in [`OutcomeUnknown::operations`](crate::outcome::OutcomeUnknown::operations) | — |
//! | Side effects outside Spanner (an HTTP call in the closure) | repeated by any retry, even one that rolls back | neither: keep them out of the closure, or make them idempotent |
//!
//! # Classification of a failed commit
//!
//! See [`commit_outcome`](crate::transaction::commit_outcome) for the table: only public status
//! codes and the client's public predicates are used, and anything that may have reached
//! Spanner is *unknown*.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use google_cloud_spanner::statement::Statement;

use crate::dialect::Dialect;
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::status::SpannerError;
use crate::util::lock;

/// The kind of a queue operation performed in a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OperationKind {
    /// A message was sent ([`Transaction::send`](crate::Transaction::send) and friends).
    Send,
    /// A message was acked ([`Transaction::ack`](crate::Transaction::ack)).
    Ack,
    /// A message was cancelled ([`Transaction::cancel`](crate::Transaction::cancel)).
    Cancel,
}

impl OperationKind {
    /// `send`, `ack` or `cancel`: stable, used on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Ack => "ack",
            Self::Cancel => "cancel",
        }
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One queue operation a transaction performed: its kind, queue and message key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueOperation {
    kind: OperationKind,
    queue: QueueName,
    key: MessageKey,
}

impl QueueOperation {
    /// An operation of `kind` on the message `key` of `queue`.
    pub fn new(kind: OperationKind, queue: QueueName, key: MessageKey) -> Self {
        Self { kind, queue, key }
    }

    /// Send, ack or cancel.
    pub fn kind(&self) -> OperationKind {
        self.kind
    }

    /// The queue.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// The message key.
    pub fn key(&self) -> &MessageKey {
        &self.key
    }
}

impl fmt::Display for QueueOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (verb, preposition) = match self.kind {
            OperationKind::Send => ("sent", "to"),
            OperationKind::Ack => ("acked", "in"),
            OperationKind::Cancel => ("cancelled", "in"),
        };
        write!(
            f,
            "{verb} message {} {preposition} queue `{}`",
            self.key.short(),
            self.queue
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The recorder: queue operations performed inside a transaction of `transaction::builder`.

tokio::task_local! {
    static RECORDER: Recorder;
}

/// Collects the queue operations of the current transaction attempt.
///
/// [`Database::transaction`](crate::Database::transaction)'s runs install one for the task that runs
/// the closure; [`record`] appends to it. Outside such a scope, recording does nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recorder(Arc<Mutex<Vec<QueueOperation>>>);

impl Recorder {
    /// Forgets what an earlier attempt recorded (it was rolled back).
    pub(crate) fn clear(&self) {
        lock(&self.0).clear();
    }

    /// What was recorded so far.
    pub(crate) fn snapshot(&self) -> Vec<QueueOperation> {
        lock(&self.0).clone()
    }

    fn push(&self, operations: impl IntoIterator<Item = QueueOperation>) {
        lock(&self.0).extend(operations);
    }

    /// Runs `future` with this recorder installed for the current task.
    pub(crate) async fn scope<F: Future>(&self, future: F) -> F::Output {
        RECORDER.scope(self.clone(), future).await
    }
}

/// Records queue operations that succeeded in the current transaction, if a recorder is
/// installed (inside a transaction of `transaction::builder`); otherwise does nothing.
pub(crate) fn record<I>(kind: OperationKind, queue: &QueueName, keys: I)
where
    I: IntoIterator<Item = MessageKey>,
{
    let _ = RECORDER.try_with(|recorder| {
        recorder.push(
            keys.into_iter()
                .map(|key| QueueOperation::new(kind, queue.clone(), key)),
        );
    });
}

/// The keys of the operations of `kind` on `queue` recorded so far in the current transaction
/// attempt (empty outside a transaction of `transaction::builder`).
pub(crate) fn recorded(kind: OperationKind, queue: &QueueName) -> Vec<MessageKey> {
    RECORDER
        .try_with(|recorder| {
            lock(&recorder.0)
                .iter()
                .filter(|op| op.kind() == kind && op.queue() == queue)
                .map(|op| op.key().clone())
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Commit markers.

/// The id of a commit marker: a UUID, made before a guarded transaction's first attempt.
///
/// Stored as its 36-character hyphenated lower-case form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MarkerId(uuid::Uuid);

impl MarkerId {
    /// A fresh random (version 4) id.
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4())
    }

    /// An id from a UUID you keep, for instance one stored with a job, so that a transaction
    /// can be resolved after a restart.
    pub fn from_uuid(id: uuid::Uuid) -> Self {
        Self(id)
    }

    /// The UUID.
    pub fn as_uuid(&self) -> uuid::Uuid {
        self.0
    }
}

impl Default for MarkerId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for MarkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl FromStr for MarkerId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s).map(Self)
    }
}

/// The commit marker of one guarded transaction: its id and the dialect of its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommitMarker {
    id: MarkerId,
    dialect: Dialect,
}

impl CommitMarker {
    /// A marker `id` in a database of `dialect`.
    pub fn new(id: MarkerId, dialect: Dialect) -> Self {
        Self { id, dialect }
    }

    /// The marker id.
    pub fn id(&self) -> MarkerId {
        self.id
    }

    /// The dialect of the database holding the marker table.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }
}

/// The SDK-owned table of commit markers, which guarded transactions write to.
///
/// Its name and DDL depend on the database's dialect; guarded transactions use the dialect of
/// their database.
///
/// ```
/// use spanner_queues::outcome::CommitMarkers;
/// use spanner_queues::{Dialect, SchemaSetup};
///
/// let ddl = SchemaSetup::new().with_commit_markers().statements(Dialect::GoogleSql)?;
/// assert_eq!(
///     ddl,
///     ["CREATE TABLE IF NOT EXISTS SpannerQueuesCommitMarkers (\
///       Id STRING(36) NOT NULL, \
///       CommittedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)\
///       ) PRIMARY KEY (Id), \
///       ROW DELETION POLICY (OLDER_THAN(CommittedAt, INTERVAL 7 DAY))"]
/// );
/// let ddl = SchemaSetup::new()
///     .with_commit_markers_as(CommitMarkers::new().with_retention_days(2))
///     .statements(Dialect::PostgreSql)?;
/// assert_eq!(
///     ddl,
///     ["CREATE TABLE IF NOT EXISTS spanner_queues_commit_markers (\
///       id varchar(36) NOT NULL, \
///       committed_at spanner.commit_timestamp NOT NULL, \
///       PRIMARY KEY (id)\
///       ) TTL INTERVAL '2 days' ON committed_at"]
/// );
/// # Ok::<(), spanner_queues::Error>(())
/// ```
///
/// The retention period must be longer than the time you may take to resolve an unknown
/// outcome: once Spanner deletes a marker, the transaction looks not applied.
// The PostgreSQL forms (`spanner.commit_timestamp`, `TTL INTERVAL … ON …`,
// `spanner.pending_commit_timestamp()`) follow Spanner's PostgreSQL docs for ordinary tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommitMarkers {
    retention_days: u32,
}

impl Default for CommitMarkers {
    fn default() -> Self {
        Self::new()
    }
}

impl CommitMarkers {
    /// The GoogleSQL table name.
    pub(crate) const TABLE: &'static str = "SpannerQueuesCommitMarkers";
    /// The PostgreSQL table name.
    pub(crate) const TABLE_POSTGRESQL: &'static str = "spanner_queues_commit_markers";
    /// The default retention period, in days.
    pub const DEFAULT_RETENTION_DAYS: u32 = 7;
    /// The longest retention period accepted, in days (ten years).
    // Spanner documents no upper bound for a row deletion policy's interval; ten years is this
    // crate's choice, far beyond any time needed to resolve an outcome. Easy to raise.
    pub const MAX_RETENTION_DAYS: u32 = 3650;

    /// Markers kept for [`DEFAULT_RETENTION_DAYS`](Self::DEFAULT_RETENTION_DAYS).
    pub const fn new() -> Self {
        Self {
            retention_days: Self::DEFAULT_RETENTION_DAYS,
        }
    }

    /// How long Spanner keeps a marker, between 1 and
    /// [`MAX_RETENTION_DAYS`](Self::MAX_RETENTION_DAYS) days. With another value, the schema
    /// set-up that creates these markers ([`SchemaSetup`](crate::SchemaSetup)) fails with
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) before any DDL is sent.
    pub const fn with_retention_days(mut self, days: u32) -> Self {
        self.retention_days = days;
        self
    }

    /// The retention period in days.
    pub const fn retention_days(&self) -> u32 {
        self.retention_days
    }

    /// The table name in `dialect`.
    pub(crate) const fn table(dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::GoogleSql => Self::TABLE,
            Dialect::PostgreSql => Self::TABLE_POSTGRESQL,
        }
    }

    /// The `CREATE TABLE` statement for the marker table in `dialect`, with its row deletion
    /// policy.
    #[cfg(test)]
    pub(crate) fn create_statement(&self, dialect: Dialect) -> String {
        self.create(dialect, "")
    }

    /// The `CREATE TABLE IF NOT EXISTS` form of [`create_statement`](Self::create_statement).
    pub(crate) fn create_if_not_exists_statement(&self, dialect: Dialect) -> String {
        self.create(dialect, "IF NOT EXISTS ")
    }

    fn create(&self, dialect: Dialect, if_not_exists: &str) -> String {
        let days = self.retention_days;
        match dialect {
            Dialect::GoogleSql => format!(
                "CREATE TABLE {if_not_exists}{} (Id STRING(36) NOT NULL, CommittedAt TIMESTAMP \
                 NOT NULL OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (Id), \
                 ROW DELETION POLICY (OLDER_THAN(CommittedAt, INTERVAL {days} DAY))",
                Self::TABLE
            ),
            Dialect::PostgreSql => format!(
                "CREATE TABLE {if_not_exists}{} (id varchar(36) NOT NULL, committed_at \
                 spanner.commit_timestamp NOT NULL, PRIMARY KEY (id)) \
                 TTL INTERVAL '{days} days' ON committed_at",
                Self::TABLE_POSTGRESQL
            ),
        }
    }

    /// Inserts marker `id`, stamped with the commit timestamp.
    pub(crate) fn insert_statement(dialect: Dialect, id: MarkerId) -> Statement {
        let sql = match dialect {
            Dialect::GoogleSql => format!(
                "INSERT INTO {} (Id, CommittedAt) VALUES (@id, PENDING_COMMIT_TIMESTAMP())",
                Self::TABLE
            ),
            Dialect::PostgreSql => format!(
                "INSERT INTO {} (id, committed_at) VALUES ($1, spanner.pending_commit_timestamp())",
                Self::TABLE_POSTGRESQL
            ),
        };
        Statement::builder(sql)
            .add_param(param_name(dialect), id.to_string())
            .build()
    }

    /// Reads marker `id`'s commit timestamp (no row: not applied).
    pub(crate) fn select_statement(dialect: Dialect, id: MarkerId) -> Statement {
        let sql = match dialect {
            Dialect::GoogleSql => format!("SELECT CommittedAt FROM {} WHERE Id = @id", Self::TABLE),
            Dialect::PostgreSql => format!(
                "SELECT committed_at FROM {} WHERE id = $1",
                Self::TABLE_POSTGRESQL
            ),
        };
        Statement::builder(sql)
            .add_param(param_name(dialect), id.to_string())
            .build()
    }
}

fn param_name(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::GoogleSql => "id",
        // The official client names PostgreSQL positional parameters `p1`, `p2`, ….
        Dialect::PostgreSql => "p1",
    }
}

/// What a strong read of a commit marker found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// The marker exists: the transaction was applied, once, at `committed_at`.
    Applied {
        /// The transaction's commit timestamp.
        committed_at: SystemTime,
    },
    /// No marker: the transaction was not applied as of the read.
    ///
    /// A commit still in flight could apply after the read; a guarded retry with the same
    /// marker is safe anyway (it commits only if that commit never does).
    NotApplied,
}

impl Resolution {
    /// Whether the transaction was applied.
    pub fn is_applied(&self) -> bool {
        matches!(self, Self::Applied { .. })
    }
}

/// Context of [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown): a commit whose outcome is unknown.
///
/// It says what the transaction tried ([`operations`](Self::operations): the messages it sent,
/// acked or cancelled in its last attempt) and how it can be resolved:
///
/// - [`marker`](Self::marker) is set for a guarded transaction
///   ([`guarded`](crate::transaction::TransactionBuilder::guarded)):
///   [`Database::resolve`](crate::Database::resolve) answers applied or not applied, and a
///   guarded retry with the same marker commits at most once.
/// - [`is_self_guarded`](Self::is_self_guarded) is true when the transaction acked a message: the
///   same transaction run again fails its ack ([`Error::AlreadyAcked`](crate::Error::AlreadyAcked)) if this one was applied.
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
    /// [`Database::resolve`](crate::Database::resolve).
    pub fn marker(&self) -> Option<CommitMarker> {
        self.0.marker
    }

    /// Whether the transaction acked at least one message, so that running the same
    /// transaction again is safe: if this one was applied, the retry's ack fails with
    /// [`Error::AlreadyAcked`](crate::Error::AlreadyAcked) and the retry rolls back.
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

impl std::error::Error for OutcomeUnknown {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KeyValue;

    fn queue() -> QueueName {
        QueueName::new("Tasks").expect("valid")
    }

    fn key(n: i64) -> MessageKey {
        MessageKey::new(vec![KeyValue::Int64(n)])
    }

    #[tokio::test]
    async fn recorder_collects_operations_inside_its_scope_only() {
        // Outside a scope, recording is a no-op (no panic).
        record(OperationKind::Send, &queue(), [key(0)]);

        let recorder = Recorder::default();
        recorder
            .scope(async {
                record(OperationKind::Send, &queue(), [key(1), key(2)]);
                // Nested futures on the same task see the recorder.
                async { record(OperationKind::Ack, &queue(), [key(3)]) }.await;
            })
            .await;
        let kinds: Vec<(OperationKind, MessageKey)> = recorder
            .snapshot()
            .into_iter()
            .map(|op| (op.kind(), op.key().clone()))
            .collect();
        assert_eq!(
            kinds,
            [
                (OperationKind::Send, key(1)),
                (OperationKind::Send, key(2)),
                (OperationKind::Ack, key(3)),
            ]
        );

        // A new attempt starts empty.
        recorder.clear();
        assert!(recorder.snapshot().is_empty());

        // Another task does not see this task's recorder.
        recorder
            .scope(async {
                tokio::spawn(async { record(OperationKind::Cancel, &queue(), [key(4)]) })
                    .await
                    .expect("task");
            })
            .await;
        assert!(recorder.snapshot().is_empty());
    }

    #[tokio::test]
    async fn nested_scopes_record_into_the_innermost() {
        let outer = Recorder::default();
        let inner = Recorder::default();
        outer
            .scope(async {
                record(OperationKind::Send, &queue(), [key(1)]);
                inner
                    .scope(async { record(OperationKind::Ack, &queue(), [key(2)]) })
                    .await;
            })
            .await;
        assert_eq!(outer.snapshot().len(), 1);
        assert_eq!(inner.snapshot()[0].kind(), OperationKind::Ack);
    }

    #[test]
    fn operations_display_what_happened() {
        let op = QueueOperation::new(OperationKind::Send, queue(), key(7));
        assert_eq!(op.to_string(), "sent message (7) to queue `Tasks`");
        let op = QueueOperation::new(OperationKind::Ack, queue(), key(7));
        assert_eq!(op.to_string(), "acked message (7) in queue `Tasks`");
        let op = QueueOperation::new(OperationKind::Cancel, queue(), key(7));
        assert_eq!(op.to_string(), "cancelled message (7) in queue `Tasks`");
    }

    #[test]
    fn marker_ids_are_uuids() {
        let id = MarkerId::new();
        let text = id.to_string();
        assert_eq!(text.len(), 36);
        assert_eq!(text.parse::<MarkerId>().expect("parses"), id);
        assert_ne!(MarkerId::new(), id);
        assert!("not-a-uuid".parse::<MarkerId>().is_err());
    }

    #[test]
    fn marker_statements() {
        let id: MarkerId = "6f1c2a9e-0000-4000-8000-000000000001"
            .parse()
            .expect("uuid");
        let google = Dialect::GoogleSql;
        let insert = CommitMarkers::insert_statement(google, id);
        assert_eq!(
            insert.sql(),
            "INSERT INTO SpannerQueuesCommitMarkers (Id, CommittedAt) \
             VALUES (@id, PENDING_COMMIT_TIMESTAMP())"
        );
        assert_eq!(
            CommitMarkers::select_statement(google, id).sql(),
            "SELECT CommittedAt FROM SpannerQueuesCommitMarkers WHERE Id = @id"
        );
        let pg = Dialect::PostgreSql;
        assert_eq!(
            CommitMarkers::insert_statement(pg, id).sql(),
            "INSERT INTO spanner_queues_commit_markers (id, committed_at) \
             VALUES ($1, spanner.pending_commit_timestamp())"
        );
        assert_eq!(
            CommitMarkers::select_statement(pg, id).sql(),
            "SELECT committed_at FROM spanner_queues_commit_markers WHERE id = $1"
        );
        assert_eq!(CommitMarkers::table(pg), "spanner_queues_commit_markers");
        assert!(
            CommitMarkers::new()
                .with_retention_days(30)
                .create_statement(google)
                .ends_with("INTERVAL 30 DAY))")
        );
        assert!(
            CommitMarkers::new()
                .create_if_not_exists_statement(pg)
                .starts_with("CREATE TABLE IF NOT EXISTS spanner_queues_commit_markers (")
        );
    }
}
