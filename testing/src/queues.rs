//! Queue test support: a database with the schema of your message types, draining a worker
//! until the queue is idle, and assertions on what is queued and dead-lettered.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use google_cloud_spanner::statement::Statement;
use spanner_queues::schema::SystemColumn;
use spanner_queues::worker::{DeadLetter, WorkerStats};
use spanner_queues::{
    Dialect, MessageKey, QueueMessage, SchemaSetup, TransactionSettings, Worker,
    codec::Payload,
    key::{KeyValue, TypedKey},
};

use crate::{HarnessError, TestDatabase};

/// Most dead letters read by [`TestDatabase::dead_letters`].
const DEAD_LETTER_LIMIT: usize = 10_000;
/// Messages listed in a failure message, at most.
const SHOWN: usize = 10;
/// Characters of a payload shown in a failure message, at most.
const PREVIEW: usize = 160;
/// How often [`TestDatabase::drain`] looks at the worker and the queue.
const POLL: Duration = Duration::from_millis(25);

/// A fresh database for queue tests, described before it is created: your message types'
/// queues, your own tables, and always the worker's tables and the commit-marker table.
///
/// Start one with [`setup`].
///
/// ```no_run
/// # use spanner_queues::QueueMessage;
/// # #[derive(QueueMessage, Debug, Clone, PartialEq)]
/// # #[queue(name = "Tickets")]
/// # struct Ticket { #[queue(key)] id: i64, title: String }
/// # async fn demo() {
/// let Some(db) = spanner_queues_testing::setup()
///     .with_queue::<Ticket>()
///     .with_ddl(["CREATE TABLE Triaged (Id INT64 NOT NULL) PRIMARY KEY (Id)"])
///     .create()
///     .await
/// else {
///     return; // no emulator and SPANNER_QUEUES_REQUIRE_EMULATOR unset: skipped, reason printed
/// };
/// # let _ = db;
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Setup {
    schema: SchemaSetup,
    sdk_tables: bool,
    dialect: Dialect,
    transaction_settings: Option<TransactionSettings>,
}

/// Describes a fresh database with the worker's tables and the commit-marker table; add your
/// queues with [`Setup::with_queue`] and your tables with [`Setup::with_ddl`].
pub fn setup() -> Setup {
    Setup {
        schema: SchemaSetup::new(),
        sdk_tables: true,
        dialect: Dialect::GoogleSql,
        transaction_settings: None,
    }
}

impl Setup {
    /// The queue of message type `M`, created from [`QueueMessage::schema`].
    pub fn with_queue<M: QueueMessage>(mut self) -> Self {
        self.schema = self.schema.with_queue::<M>();
        self
    }

    /// Your own DDL (tables, indexes), applied before the queues, so that a queue may be
    /// interleaved in one of these tables ([`SchemaSetup::with_ddl`]).
    pub fn with_ddl<I, S>(mut self, statements: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.schema = self.schema.with_ddl(statements);
        self
    }

    /// Leaves out the worker's tables and the commit-marker table: a database with only your
    /// DDL and queues.
    pub fn without_sdk_tables(mut self) -> Self {
        self.sdk_tables = false;
        self
    }

    /// The dialect of the database to create (GoogleSQL unless set); [`with_ddl`](Self::with_ddl)
    /// statements are in this dialect.
    pub fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// The transaction settings of the [`Database`](spanner_queues::Database) handle the test
    /// database derefs to ([`DatabaseBuilder::with_transaction_settings`]); the SDK's defaults
    /// unless set. Tests that run many transactions at once against the emulator, which runs
    /// one read-write transaction per database at a time, want more attempts.
    ///
    /// [`DatabaseBuilder::with_transaction_settings`]: spanner_queues::DatabaseBuilder::with_transaction_settings
    pub fn with_transaction_settings(mut self, settings: TransactionSettings) -> Self {
        self.transaction_settings = Some(settings);
        self
    }

    /// The schema description behind this set-up (to apply the same objects elsewhere).
    pub fn schema(&self) -> SchemaSetup {
        if self.sdk_tables {
            self.schema
                .clone()
                .with_worker_tables()
                .with_commit_markers()
        } else {
            self.schema.clone()
        }
    }

    /// Creates the database on the process's backend (see the [crate docs](crate)) and checks
    /// every queue against its message type. Returns `None`, after printing why, when no backend
    /// is available and `SPANNER_QUEUES_REQUIRE_EMULATOR` is not `1`.
    ///
    /// # Panics
    /// When no backend is available and `SPANNER_QUEUES_REQUIRE_EMULATOR=1`, or when the
    /// database cannot be created (the message says which statement was refused).
    pub async fn create(self) -> Option<TestDatabase> {
        match self.try_create().await {
            Ok(db) => Some(db),
            Err(HarnessError::NoBackend(reason)) if !crate::require_backend() => {
                crate::skip_notice(&reason);
                None
            }
            Err(error) => panic!("{}", spanner_queues_emulator::error_chain(&error)),
        }
    }

    /// Like [`create`](Self::create), reporting every failure as an error.
    ///
    /// # Errors
    /// [`HarnessError::NoBackend`] without a backend; [`HarnessError::Spanner`] when the
    /// database or a statement is refused; [`HarnessError::Queue`] when a queue does not fit
    /// its message type.
    pub async fn try_create(self) -> Result<TestDatabase, HarnessError> {
        let db = crate::create_database(self.dialect, self.transaction_settings.clone()).await?;
        self.schema()
            .apply(db.database())
            .await
            .map_err(|source| HarnessError::Queue {
                what: format!("applying the schema to {}", db.path()),
                source,
            })?;
        Ok(db)
    }
}

/// One message in a queue, as [`TestDatabase::queued`] reads it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Queued<M> {
    /// The message key.
    pub key: MessageKey,
    /// When Spanner delivers it (or delivered it, for a message leased now).
    pub deliver_time: SystemTime,
    /// The payload as stored.
    pub payload: Payload,
    /// The payload decoded as `M`, or why it does not decode.
    pub message: Result<M, spanner_queues::Error>,
}

impl<M> Queued<M> {
    /// Whether it is deliverable now (its deliver time has come).
    pub fn is_due(&self) -> bool {
        self.deliver_time <= SystemTime::now()
    }

    /// One line for failure messages: key, when due, and a payload preview.
    fn describe(&self) -> String {
        format!(
            "{} {} payload {}",
            self.key,
            due(self.deliver_time),
            preview(&self.payload)
        )
    }
}

fn due(at: SystemTime) -> String {
    match at.duration_since(SystemTime::now()) {
        Ok(later) if later > Duration::from_millis(1) => format!("due in {later:.1?}"),
        _ => "due now".to_owned(),
    }
}

/// A payload shortened for a failure message.
fn preview(payload: &Payload) -> String {
    let text = match payload {
        Payload::Json(text) | Payload::String(text) => text.as_str(),
        other => return format!("<{} bytes>", other.as_bytes().len()),
    };
    let mut shown: String = text.chars().take(PREVIEW).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

/// What [`TestDatabase::drain`] waits for, and how long it tolerates no progress.
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct Drain {
    include_scheduled: bool,
    stall_timeout: Duration,
}

impl Default for Drain {
    fn default() -> Self {
        Self::new()
    }
}

impl Drain {
    /// Wait until no message is due (scheduled ones may remain), failing after 120 s without
    /// progress.
    pub fn new() -> Self {
        Self {
            include_scheduled: false,
            stall_timeout: Duration::from_secs(120),
        }
    }

    /// Also wait for messages scheduled for later, including retries released with a delay,
    /// until the queue is empty. Their deliver times pass in real time: use a
    /// [`RedeliveryPolicy`](spanner_queues::RedeliveryPolicy) with short delays in tests.
    pub fn including_scheduled(mut self) -> Self {
        self.include_scheduled = true;
        self
    }

    /// Fail when neither the worker's counters nor the queue's counts change for this long
    /// (default 120 s). This bounds a hung test; it is not a speed limit.
    pub fn with_stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = timeout;
        self
    }
}

/// Messages that some work sent, as [`TestDatabase::sent_by`] saw them: those in the queue
/// after the work whose keys were not there before.
#[derive(Debug)]
pub struct SentMessages<M> {
    messages: Vec<Queued<M>>,
}

impl<M: QueueMessage> SentMessages<M> {
    /// The messages sent, ordered by deliver time, then key.
    pub fn messages(&self) -> &[Queued<M>] {
        &self.messages
    }

    /// How many messages were sent.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether nothing was sent.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Asserts that exactly `expected` were sent (in any order), comparing whole messages.
    ///
    /// # Panics
    /// Listing what was missing, unexpected, or sent with other fields.
    #[track_caller]
    pub fn assert_exactly(&self, expected: &[M])
    where
        M: PartialEq + fmt::Debug,
    {
        if let Err(report) = compare_messages(&self.messages, expected) {
            panic!("{} sent other messages than expected:\n{report}", M::QUEUE);
        }
    }

    /// Asserts that messages with exactly these keys were sent (in any order), whatever their
    /// other fields. Of an ordered type, the keys are ordering keys (one per message sent).
    ///
    /// # Panics
    /// Listing the keys missing and the keys not expected.
    #[track_caller]
    pub fn assert_keys(&self, expected: &[M::Key]) {
        if let Err(report) = compare_keys(&self.messages, expected) {
            panic!("{} sent other keys than expected:\n{report}", M::QUEUE);
        }
    }

    /// Asserts that nothing was sent.
    ///
    /// # Panics
    /// Listing what was sent.
    #[track_caller]
    pub fn assert_none(&self) {
        if !self.messages.is_empty() {
            panic!(
                "expected no message sent to {}, found {}:\n{}",
                M::QUEUE,
                self.messages.len(),
                list(&self.messages)
            );
        }
    }
}

fn list<M>(messages: &[Queued<M>]) -> String {
    let mut out: Vec<String> = messages
        .iter()
        .take(SHOWN)
        .map(|m| format!("  {}", m.describe()))
        .collect();
    if messages.len() > SHOWN {
        out.push(format!("  … and {} more", messages.len() - SHOWN));
    }
    out.join("\n")
}

fn compare_keys<M: QueueMessage>(found: &[Queued<M>], expected: &[M::Key]) -> Result<(), String> {
    let mut wanted: HashMap<MessageKey, usize> = HashMap::new();
    for key in expected {
        *wanted.entry(key.to_message_key()).or_default() += 1;
    }
    let mut unexpected = Vec::new();
    for message in found {
        // An ordered type's key is its ordering key; the queue's key adds the sequence.
        let key = if M::ORDERED && message.key.len() == M::KEY_COLUMNS.len() {
            MessageKey::new(message.key.parts()[..message.key.len() - 1].to_vec())
        } else {
            message.key.clone()
        };
        match wanted.get_mut(&key) {
            Some(n) if *n > 0 => *n -= 1,
            _ => unexpected.push(format!("  unexpected: {}", message.describe())),
        }
    }
    let mut missing: Vec<String> = wanted
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(key, _)| format!("  missing: {key}"))
        .collect();
    missing.sort();
    report(missing, unexpected, found.len(), expected.len())
}

fn compare_messages<M>(found: &[Queued<M>], expected: &[M]) -> Result<(), String>
where
    M: QueueMessage + PartialEq + fmt::Debug,
{
    let mut wanted: Vec<Option<&M>> = expected.iter().map(Some).collect();
    let mut unexpected = Vec::new();
    for message in found {
        let matched = match &message.message {
            Ok(decoded) => wanted
                .iter_mut()
                .find(|w| w.is_some_and(|w| w == decoded))
                .map(Option::take),
            Err(_) => None,
        };
        if matched.is_some() {
            continue;
        }
        let line = match &message.message {
            Ok(decoded) => {
                let same_key = expected
                    .iter()
                    .find(|e| e.message_key() == message.key)
                    .map(|e| format!("\n      expected {e:?}"))
                    .unwrap_or_default();
                format!("  unexpected: {decoded:?}{same_key}")
            }
            Err(error) => format!(
                "  does not decode: {} ({})",
                message.describe(),
                spanner_queues_emulator::error_chain(error)
            ),
        };
        unexpected.push(line);
    }
    let missing = wanted
        .into_iter()
        .flatten()
        .map(|m| format!("  missing: {m:?}"))
        .collect();
    report(missing, unexpected, found.len(), expected.len())
}

fn report(
    missing: Vec<String>,
    unexpected: Vec<String>,
    found: usize,
    expected: usize,
) -> Result<(), String> {
    if missing.is_empty() && unexpected.is_empty() {
        return Ok(());
    }
    let mut lines = vec![format!("  ({found} found, {expected} expected)")];
    for group in [missing, unexpected] {
        let n = group.len();
        lines.extend(group.into_iter().take(SHOWN));
        if n > SHOWN {
            lines.push(format!("  … and {} more", n - SHOWN));
        }
    }
    Err(lines.join("\n"))
}

impl TestDatabase {
    /// Runs a query in a strong single-use read and returns its rows as `T`: a tuple of column
    /// types, or any [`FromRow`](google_cloud_spanner::result::FromRow) type.
    ///
    /// ```no_run
    /// # async fn demo(db: spanner_queues_testing::TestDatabase) {
    /// let rows: Vec<(i64, String)> = db.query("SELECT Id, Status FROM Tickets ORDER BY Id").await.unwrap();
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`HarnessError::Spanner`] with Spanner's error.
    pub async fn query<T: google_cloud_spanner::result::FromRow>(
        &self,
        sql: impl Into<String>,
    ) -> Result<Vec<T>, HarnessError> {
        let sql = sql.into();
        let read = async {
            let mut rows = self
                .client()
                .single_use()
                .build()
                .execute_query(Statement::builder(sql.clone()).build())
                .await?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().await {
                out.push(row?.try_into_record::<T>()?);
            }
            Ok::<_, google_cloud_spanner::Error>(out)
        };
        read.await.map_err(|source| HarnessError::Spanner {
            what: format!("running {sql:?}"),
            source,
        })
    }

    /// Every message in the queue of `M` (due, scheduled, or leased now), ordered by deliver
    /// time, then key. A payload that does not decode is listed with its error.
    ///
    /// # Errors
    /// [`HarnessError::Spanner`] when the queue cannot be read (it is missing);
    /// [`HarnessError::Unreadable`] when its key columns do not fit `M`.
    pub async fn queued<M: QueueMessage>(&self) -> Result<Vec<Queued<M>>, HarnessError> {
        let dialect = self.database().dialect();
        let keys: Vec<String> = M::KEY_COLUMNS
            .iter()
            .map(|c| c.name().to_sql(dialect))
            .collect();
        let sql = format!(
            "SELECT {keys}, {payload}, {deliver} FROM {queue} ORDER BY {deliver}, {keys}",
            keys = keys.join(", "),
            payload = SystemColumn::Payload.name(dialect),
            deliver = SystemColumn::DeliverTime.name(dialect),
            queue = M::QUEUE.to_sql(dialect)
        );
        let spanner = |source| HarnessError::Spanner {
            what: format!("reading the queue {} of {}", M::QUEUE, self.path()),
            source,
        };
        let unreadable = |what: String| {
            HarnessError::Unreadable(format!("the queue {} of {}: {what}", M::QUEUE, self.path()))
        };
        let mut rows = self
            .client()
            .single_use()
            .build()
            .execute_query(Statement::builder(sql).build())
            .await
            .map_err(spanner)?;
        let types = rows.metadata().column_types().to_vec();
        let n = keys.len();
        let mut out = Vec::new();
        while let Some(row) = rows.next().await {
            let row = row.map_err(spanner)?;
            let values = row.raw_values();
            let mut parts = Vec::with_capacity(n);
            for (position, column) in M::KEY_COLUMNS.iter().enumerate() {
                let part =
                    KeyValue::from_value(column.key_type(), &values[position], &types[position])
                        .map_err(|e| {
                            unreadable(format!(
                                "key column {}: {}",
                                column.name(),
                                e.at_position(position)
                            ))
                        })?;
                parts.push(part);
            }
            let key = MessageKey::new(parts);
            let payload = Payload::from_value(values[n].clone(), &types[n])
                .map_err(|e| unreadable(format!("payload of {key}: {e}")))?;
            let deliver_time: SystemTime = row.get(n + 1).map_err(spanner)?;
            let message = M::decode_parts(key.clone(), payload.clone());
            out.push(Queued {
                key,
                deliver_time,
                payload,
                message,
            });
        }
        Ok(out)
    }

    /// Messages in the queue of `M`: (due now, all).
    async fn queue_counts<M: QueueMessage>(&self) -> Result<(i64, i64), HarnessError> {
        let dialect = self.database().dialect();
        let sql = format!(
            "SELECT COUNT(CASE WHEN {} <= CURRENT_TIMESTAMP THEN 1 END), COUNT(*) FROM {}",
            SystemColumn::DeliverTime.name(dialect),
            M::QUEUE.to_sql(dialect)
        );
        let read = async {
            let mut rows = self
                .client()
                .single_use()
                .build()
                .execute_query(Statement::builder(sql).build())
                .await?;
            let mut counts = (0, 0);
            while let Some(row) = rows.next().await {
                let row = row?;
                counts = (row.get::<i64>(0)?, row.get::<i64>(1)?);
            }
            Ok::<_, google_cloud_spanner::Error>(counts)
        };
        read.await.map_err(|source| HarnessError::Spanner {
            what: format!("counting the messages in {}", M::QUEUE),
            source,
        })
    }

    /// How many messages the queue of `M` holds (due, scheduled, or leased now).
    ///
    /// # Errors
    /// [`HarnessError::Spanner`] when the queue cannot be read.
    pub async fn queue_len<M: QueueMessage>(&self) -> Result<usize, HarnessError> {
        let (_, all) = self.queue_counts::<M>().await?;
        Ok(usize::try_from(all).unwrap_or(0))
    }

    /// Asserts that the queue of `M` holds no message (due, scheduled, or leased).
    ///
    /// # Panics
    /// Listing up to ten messages left (key, when due, payload preview), or when the queue
    /// cannot be read.
    #[track_caller]
    pub fn assert_queue_empty<M: QueueMessage>(&self) -> impl Future<Output = ()> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            let left = self.queued_or_panic::<M>(caller).await;
            if !left.is_empty() {
                panic!(
                    "expected the queue {} to be empty (at {caller}), {} message(s) left:\n{}",
                    M::QUEUE,
                    left.len(),
                    list(&left)
                );
            }
        }
    }

    /// Asserts that the queue of `M` holds exactly `expected` (in any order), comparing whole
    /// messages. With a fresh database per test, this is "the code under test sent exactly
    /// these"; to look at what one piece of code sent, use [`sent_by`](Self::sent_by).
    ///
    /// # Panics
    /// Listing what is missing, unexpected, or queued with other fields.
    #[track_caller]
    pub fn assert_queued<'a, M>(&'a self, expected: &'a [M]) -> impl Future<Output = ()> + 'a
    where
        M: QueueMessage + PartialEq + fmt::Debug,
    {
        let caller = std::panic::Location::caller();
        async move {
            let found = self.queued_or_panic::<M>(caller).await;
            if let Err(report) = compare_messages(&found, expected) {
                panic!(
                    "the queue {} holds other messages than expected (at {caller}):\n{report}",
                    M::QUEUE
                );
            }
        }
    }

    /// Asserts that the queue of `M` holds messages with exactly these keys (in any order).
    ///
    /// # Panics
    /// Listing the keys missing and the messages not expected.
    #[track_caller]
    pub fn assert_queued_keys<'a, M: QueueMessage>(
        &'a self,
        expected: &'a [M::Key],
    ) -> impl Future<Output = ()> + 'a {
        let caller = std::panic::Location::caller();
        async move {
            let found = self.queued_or_panic::<M>(caller).await;
            if let Err(report) = compare_keys(&found, expected) {
                panic!(
                    "the queue {} holds other keys than expected (at {caller}):\n{report}",
                    M::QUEUE
                );
            }
        }
    }

    async fn queued_or_panic<M: QueueMessage>(
        &self,
        caller: &std::panic::Location<'_>,
    ) -> Vec<Queued<M>> {
        match self.queued::<M>().await {
            Ok(found) => found,
            Err(error) => panic!(
                "{} (at {caller})",
                spanner_queues_emulator::error_chain(&error)
            ),
        }
    }

    /// Runs `work` and returns its output with the messages it sent to the queue of `M`: those
    /// in the queue afterwards whose keys were not there before. Run no worker on that queue
    /// meanwhile (it could take them first).
    ///
    /// ```no_run
    /// # use spanner_queues::QueueMessage;
    /// # #[derive(QueueMessage, Debug, Clone, PartialEq)]
    /// # #[queue(name = "Tickets")]
    /// # struct Ticket { #[queue(key)] id: i64, title: String }
    /// # async fn demo(db: spanner_queues_testing::TestDatabase) {
    /// let ticket = Ticket { id: 7, title: "printer on fire".into() };
    /// let (result, sent) = db.sent_by::<Ticket, _>(db.send(&ticket)).await;
    /// result.expect("the send commits");
    /// sent.assert_exactly(&[ticket]);
    /// # }
    /// ```
    ///
    /// # Panics
    /// When the queue cannot be read.
    pub async fn sent_by<M: QueueMessage, T>(
        &self,
        work: impl Future<Output = T>,
    ) -> (T, SentMessages<M>) {
        let read = |when: &str| {
            let when = when.to_owned();
            async move {
                self.queued::<M>().await.unwrap_or_else(|error| {
                    panic!(
                        "sent_by, reading the queue {when}: {}",
                        spanner_queues_emulator::error_chain(&error)
                    )
                })
            }
        };
        let before: std::collections::HashSet<MessageKey> =
            read("before").await.into_iter().map(|m| m.key).collect();
        let output = work.await;
        let messages = read("after")
            .await
            .into_iter()
            .filter(|m| !before.contains(&m.key))
            .collect();
        (output, SentMessages { messages })
    }

    /// The dead letters of the queue of `M`, oldest first.
    async fn dead_letters_of<M: QueueMessage>(&self) -> Result<Vec<DeadLetter>, HarnessError> {
        self.database()
            .dead_letters()
            .list(&M::QUEUE, DEAD_LETTER_LIMIT)
            .await
            .map_err(|source| HarnessError::Queue {
                what: format!("reading the dead letters of {}", M::QUEUE),
                source,
            })
    }

    /// Asserts that no message of the queue of `M` was dead-lettered.
    ///
    /// # Panics
    /// Listing each dead letter's key, attempts and last error.
    #[track_caller]
    pub fn assert_no_dead_letters<M: QueueMessage>(&self) -> impl Future<Output = ()> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            let letters = self.dead_letters_of::<M>().await.unwrap_or_else(|e| {
                panic!("{} (at {caller})", spanner_queues_emulator::error_chain(&e))
            });
            if !letters.is_empty() {
                let lines: Vec<String> = letters
                    .iter()
                    .take(SHOWN)
                    .map(|l| {
                        format!(
                            "  {} after {} attempt(s): {}",
                            l.key(),
                            l.attempts(),
                            l.error()
                        )
                    })
                    .collect();
                panic!(
                    "expected no dead letters in {} (at {caller}), found {}:\n{}",
                    M::QUEUE,
                    letters.len(),
                    lines.join("\n")
                );
            }
        }
    }

    /// Runs `worker` until no message of its queue is due and no handler is running, then shuts
    /// it down gracefully and returns its counters (since it was built). See
    /// [`drain_with`](Self::drain_with) to wait for scheduled messages too.
    ///
    /// Messages a failed attempt released for a later retry are scheduled, not due: the drain
    /// can end before their retry (the returned [`WorkerStats::retried`] counts them).
    ///
    /// # Errors
    /// As [`drain_with`](Self::drain_with).
    pub async fn drain<M: QueueMessage>(
        &self,
        worker: &Worker<M>,
    ) -> Result<WorkerStats, HarnessError> {
        self.drain_with(worker, Drain::new()).await
    }

    /// [`drain`](Self::drain) with options.
    ///
    /// # Errors
    /// [`HarnessError::Worker`] when the worker cannot start (missing tables, a queue that
    /// does not fit `M`, invalid settings); [`HarnessError::Stalled`] when neither the worker's
    /// counters nor the queue changed for the stall timeout (the message shows both);
    /// [`HarnessError::Spanner`] when the queue cannot be read.
    pub async fn drain_with<M: QueueMessage>(
        &self,
        worker: &Worker<M>,
        options: Drain,
    ) -> Result<WorkerStats, HarnessError> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = worker.run(async move {
            let _ = stopped.await;
        });
        tokio::pin!(run);
        let verdict = tokio::select! {
            ran = &mut run => {
                return match ran {
                    Err(source) => Err(HarnessError::Worker {
                        what: format!("running the worker of {}", M::QUEUE),
                        source,
                    }),
                    Ok(()) => Err(HarnessError::Stalled(format!(
                        "the worker of {} stopped on its own before its queue was idle",
                        M::QUEUE
                    ))),
                };
            }
            verdict = self.until_idle(worker, options) => verdict,
        };
        let _ = stop.send(());
        let ran = run.await;
        verdict?;
        ran.map_err(|source| HarnessError::Worker {
            what: format!("shutting down the worker of {}", M::QUEUE),
            source,
        })?;
        Ok(worker.stats())
    }

    async fn until_idle<M: QueueMessage>(
        &self,
        worker: &Worker<M>,
        options: Drain,
    ) -> Result<(), HarnessError> {
        let busy = |s: &WorkerStats| {
            s.running > 0 || s.receiver.in_flight > 0 || s.receiver.read_ahead > 0
        };
        let mut last = None;
        let mut last_change = Instant::now();
        loop {
            let before = worker.stats();
            let counts = self.queue_counts::<M>().await?;
            let after = worker.stats();
            let (due, all) = counts;
            let settled = before == after && !busy(&after);
            if settled && due == 0 && (!options.include_scheduled || all == 0) {
                return Ok(());
            }
            // Progress: messages handled or received, or the queue's counts moving. Renewals
            // alone are not progress (a handler that hangs keeps renewing).
            let now = (
                [
                    after.started,
                    after.acked,
                    after.retried,
                    after.dead_lettered,
                    after.lease_lost,
                    after.already_acked,
                    after.outcome_unknown,
                    after.receiver.received,
                ],
                counts,
            );
            if last != Some(now) {
                last = Some(now);
                last_change = Instant::now();
            } else if last_change.elapsed() >= options.stall_timeout {
                return Err(HarnessError::Stalled(format!(
                    "the queue {} was not idle and nothing changed for {:?}: {due} message(s) \
                     due, {} scheduled; worker: {} running, {} acked, {} retried, {} \
                     dead-lettered, {} handler errors, {} lease(s) lost",
                    M::QUEUE,
                    options.stall_timeout,
                    all - due,
                    after.running,
                    after.acked,
                    after.retried,
                    after.dead_lettered,
                    after.handler_errors,
                    after.lease_lost,
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
