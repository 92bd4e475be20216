//! Shared helpers: databases, a raw gRPC client for `Mutation.Send` / `Mutation.Ack`, the
//! official client for DML and queries, and a `RECEIVE_<Q>` stream reader.
//!
//! Nothing here knows how the emulator is built: every helper speaks the public Spanner API
//! (official Rust client, or raw `google.spanner.v1` protos for what that client lacks).

#![allow(dead_code)] // Not every module uses every helper.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::result::{ResultSet, Row};
use google_cloud_spanner::statement::Statement;
use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;
use pb::spanner_client::SpannerClient;
use prost_types::value::Kind;
use spanner_queues_testing::{self as harness, TestDatabase};
use tonic::transport::Channel;

pub(crate) use pb::Mutation;

/// The lease Cloud Spanner grants on delivery and on each renewal: "about 10 s" [C].
pub(crate) const LEASE: Duration = Duration::from_secs(10);

/// A queue with one INT64 key and a STRING payload, used by most tests.
pub(crate) const SIMPLE_QUEUE: &str =
    "CREATE QUEUE Q (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)";

/// A plain table for business writes that must commit (or not) together with queue writes.
pub(crate) const ORDERS: &str =
    "CREATE TABLE Orders (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)";

/// A fresh database with `ddl` applied as one `UpdateDatabaseDdl` batch after it is created
/// (the harness's way; [`created_ddl`] takes the `CreateDatabase` extra statements path).
///
/// Conformance tests never skip: no backend is a failure.
pub(crate) async fn database(ddl: &[&str]) -> TestDatabase {
    harness::setup()
        .without_sdk_tables()
        .with_ddl(ddl.iter().copied())
        .try_create()
        .await
        .unwrap_or_else(|e| panic!("the harness could not create a database: {}", chain(&e)))
}

/// Creates another database on `db`'s instance with `ddl` as `CreateDatabase` extra statements
/// and returns its `GetDatabaseDdl`, or `CreateDatabase`'s error; the database is dropped
/// again. The harness applies a test database's DDL after creating it, so the extra statements
/// path is taken only here.
pub(crate) async fn created_ddl(
    db: &TestDatabase,
    ddl: &[&str],
) -> Result<Vec<String>, google_cloud_spanner::Error> {
    use google_cloud_lro::Poller as _;
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);

    let (instance, _) = db
        .path()
        .split_once("/databases/")
        .expect("a database path");
    // A test database's id is 21 characters; ids may have 30.
    let id = format!("{}c{}", db.id(), NEXT.fetch_add(1, Ordering::Relaxed));
    db.admin()
        .create_database()
        .set_parent(instance)
        .set_create_statement(format!("CREATE DATABASE `{id}`"))
        .set_extra_statements(ddl.iter().copied())
        .poller()
        .until_done()
        .await?;
    let path = format!("{instance}/databases/{id}");
    let shown = db
        .admin()
        .get_database_ddl()
        .set_database(&path)
        .send()
        .await
        .map(|response| response.statements);
    db.admin()
        .drop_database()
        .set_database(&path)
        .send()
        .await
        .expect("DropDatabase");
    Ok(shown.expect("GetDatabaseDdl of a created database"))
}

/// An error and its sources, on one line.
pub(crate) use spanner_queues_emulator::error_chain as chain;

// ---------------------------------------------------------------------------------------------
// Values and mutations (raw protos)
// ---------------------------------------------------------------------------------------------

/// An INT64 value in Spanner's wire encoding (a decimal string).
pub(crate) fn int(n: i64) -> prost_types::Value {
    text(n.to_string())
}

/// A STRING (or JSON) value.
pub(crate) fn text(s: impl Into<String>) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

/// A BYTES value (base64 text on the wire).
pub(crate) fn bytes(b: &[u8]) -> prost_types::Value {
    use base64::Engine as _;
    text(base64::engine::general_purpose::STANDARD.encode(b))
}

/// A NULL value.
pub(crate) fn null() -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::NullValue(0)),
    }
}

/// A protobuf timestamp.
pub(crate) fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
    }
}

fn list(values: Vec<prost_types::Value>) -> prost_types::ListValue {
    prost_types::ListValue { values }
}

/// `Mutation.Send` to `queue` with `key` (all key columns, in primary-key order).
pub(crate) fn send(
    queue: &str,
    key: Vec<prost_types::Value>,
    payload: Option<prost_types::Value>,
    deliver_time: Option<SystemTime>,
) -> Mutation {
    Mutation {
        operation: Some(pb::mutation::Operation::Send(pb::mutation::Send {
            queue: queue.to_owned(),
            key: Some(list(key)),
            deliver_time: deliver_time.map(timestamp),
            payload,
        })),
    }
}

/// `Mutation.Send` of a STRING payload to a queue keyed by one INT64, delivered now.
pub(crate) fn send_now(queue: &str, id: i64, payload: &str) -> Mutation {
    send(queue, vec![int(id)], Some(text(payload)), None)
}

/// `Mutation.Send` of a STRING payload to a queue keyed by one INT64, delivered at `at`.
pub(crate) fn send_at(queue: &str, id: i64, payload: &str, at: SystemTime) -> Mutation {
    send(queue, vec![int(id)], Some(text(payload)), Some(at))
}

/// `Mutation.Ack` of `key` in `queue`.
pub(crate) fn ack(queue: &str, key: Vec<prost_types::Value>, ignore_not_found: bool) -> Mutation {
    Mutation {
        operation: Some(pb::mutation::Operation::Ack(pb::mutation::Ack {
            queue: queue.to_owned(),
            key: Some(list(key)),
            ignore_not_found,
        })),
    }
}

/// An `Insert` mutation of `columns` = `values` into `table`.
pub(crate) fn insert(table: &str, columns: &[&str], values: Vec<prost_types::Value>) -> Mutation {
    write(table, columns, values, WriteKind::Insert)
}

/// Which write mutation to build.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WriteKind {
    Insert,
    Update,
    InsertOrUpdate,
    Replace,
}

/// A write mutation of one row.
pub(crate) fn write(
    table: &str,
    columns: &[&str],
    values: Vec<prost_types::Value>,
    kind: WriteKind,
) -> Mutation {
    let write = pb::mutation::Write {
        table: table.to_owned(),
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        values: vec![list(values)],
    };
    use pb::mutation::Operation;
    Mutation {
        operation: Some(match kind {
            WriteKind::Insert => Operation::Insert(write),
            WriteKind::Update => Operation::Update(write),
            WriteKind::InsertOrUpdate => Operation::InsertOrUpdate(write),
            WriteKind::Replace => Operation::Replace(write),
        }),
    }
}

/// A `Delete` mutation of one key.
pub(crate) fn delete(table: &str, key: Vec<prost_types::Value>) -> Mutation {
    Mutation {
        operation: Some(pb::mutation::Operation::Delete(pb::mutation::Delete {
            table: table.to_owned(),
            key_set: Some(pb::KeySet {
                keys: vec![list(key)],
                ..pb::KeySet::default()
            }),
        })),
    }
}

fn read_write() -> pb::TransactionOptions {
    pb::TransactionOptions {
        mode: Some(pb::transaction_options::Mode::ReadWrite(
            pb::transaction_options::ReadWrite::default(),
        )),
        ..pb::TransactionOptions::default()
    }
}

fn strong_single_use() -> pb::TransactionSelector {
    pb::TransactionSelector {
        selector: Some(pb::transaction_selector::Selector::SingleUse(
            pb::TransactionOptions {
                mode: Some(pb::transaction_options::Mode::ReadOnly(
                    pb::transaction_options::ReadOnly {
                        timestamp_bound: Some(
                            pb::transaction_options::read_only::TimestampBound::Strong(true),
                        ),
                        return_read_timestamp: false,
                    },
                )),
                ..pb::TransactionOptions::default()
            },
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Raw gRPC client
// ---------------------------------------------------------------------------------------------

/// A raw `google.spanner.v1.Spanner` client on one session of the test database.
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    client: SpannerClient<Channel>,
    session: String,
}

impl Raw {
    /// Connects to the emulator and creates a regular session.
    pub(crate) async fn connect(db: &TestDatabase) -> Self {
        Self::with_session(db, false).await
    }

    /// Connects and creates a multiplexed session (as current official clients do).
    pub(crate) async fn connect_multiplexed(db: &TestDatabase) -> Self {
        Self::with_session(db, true).await
    }

    async fn with_session(db: &TestDatabase, multiplexed: bool) -> Self {
        let endpoint = db
            .endpoint()
            .expect("the conformance suite runs against an emulator (no endpoint)");
        let channel = Channel::from_shared(endpoint)
            .expect("endpoint URI")
            .connect()
            .await
            .expect("connect to the emulator");
        let mut client = SpannerClient::new(channel);
        let session = client
            .create_session(pb::CreateSessionRequest {
                database: db.path().to_owned(),
                session: Some(pb::Session {
                    multiplexed,
                    ..pb::Session::default()
                }),
            })
            .await
            .expect("CreateSession")
            .into_inner()
            .name;
        Self { client, session }
    }

    /// The session name.
    pub(crate) fn session(&self) -> &str {
        &self.session
    }

    /// The generated client (for calls without a helper).
    pub(crate) fn client(&self) -> SpannerClient<Channel> {
        self.client.clone()
    }

    /// Commits `mutations` in a single-use read-write transaction.
    pub(crate) async fn commit(
        &self,
        mutations: Vec<Mutation>,
    ) -> Result<pb::CommitResponse, tonic::Status> {
        let request = pb::CommitRequest {
            session: self.session.clone(),
            mutations,
            transaction: Some(pb::commit_request::Transaction::SingleUseTransaction(
                read_write(),
            )),
            ..pb::CommitRequest::default()
        };
        self.client
            .clone()
            .commit(request)
            .await
            .map(tonic::Response::into_inner)
    }

    /// `BeginTransaction` (read-write) followed by `Commit` of `mutations`. With
    /// `mutation_key`, the first mutation is also given to `BeginTransaction` as its
    /// `mutation_key`, as multiplexed-session clients do for mutation-only transactions.
    pub(crate) async fn begin_and_commit(
        &self,
        mutations: Vec<Mutation>,
        mutation_key: bool,
    ) -> Result<pb::CommitResponse, tonic::Status> {
        let transaction = self
            .client
            .clone()
            .begin_transaction(pb::BeginTransactionRequest {
                session: self.session.clone(),
                options: Some(read_write()),
                mutation_key: if mutation_key {
                    mutations.first().cloned()
                } else {
                    None
                },
                ..pb::BeginTransactionRequest::default()
            })
            .await?
            .into_inner();
        let request = pb::CommitRequest {
            session: self.session.clone(),
            mutations,
            transaction: Some(pb::commit_request::Transaction::TransactionId(
                transaction.id,
            )),
            precommit_token: transaction.precommit_token,
            ..pb::CommitRequest::default()
        };
        self.client
            .clone()
            .commit(request)
            .await
            .map(tonic::Response::into_inner)
    }

    /// Non-streaming `ExecuteSql` in a strong single-use read-only transaction.
    pub(crate) async fn execute_sql(&self, sql: &str) -> Result<pb::ResultSet, tonic::Status> {
        self.client
            .clone()
            .execute_sql(pb::ExecuteSqlRequest {
                session: self.session.clone(),
                transaction: Some(strong_single_use()),
                sql: sql.to_owned(),
                ..pb::ExecuteSqlRequest::default()
            })
            .await
            .map(tonic::Response::into_inner)
    }
}

/// A single-use commit retried while the emulator aborts it: it runs one read-write
/// transaction per database at a time, so concurrent clients see `ABORTED` and retry, as the
/// official clients' runners do.
pub(crate) async fn commit_retrying(
    raw: &Raw,
    mutations: Vec<Mutation>,
) -> Result<pb::CommitResponse, tonic::Status> {
    let mut delay = Duration::from_millis(5);
    loop {
        match raw.commit(mutations.clone()).await {
            Err(status) if status.code() == tonic::Code::Aborted => {
                // Back-off between attempts, not synchronisation.
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// Commits, panicking with the status on failure.
pub(crate) async fn commit_ok(raw: &Raw, mutations: Vec<Mutation>) -> pb::CommitResponse {
    match raw.commit(mutations).await {
        Ok(response) => response,
        Err(status) => panic!("commit failed: {status:?}"),
    }
}

/// The commit timestamp of a commit response.
pub(crate) fn commit_time(response: &pb::CommitResponse) -> SystemTime {
    let ts = response
        .commit_timestamp
        .as_ref()
        .expect("commit response has a timestamp");
    SystemTime::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(ts.seconds).unwrap_or(0))
        + Duration::from_nanos(u64::try_from(ts.nanos).unwrap_or(0))
}

/// Asserts that an error message names `word` (case-insensitive): errors must say what is
/// wrong.
#[track_caller]
pub(crate) fn assert_mentions(message: &str, word: &str) {
    assert!(
        message.to_lowercase().contains(&word.to_lowercase()),
        "the error message should mention {word:?}: {message:?}"
    );
}

/// Asserts that `result` failed with `code`, returning the status message.
#[track_caller]
pub(crate) fn expect_status<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    code: tonic::Code,
) -> String {
    match result {
        Ok(value) => panic!("expected {code:?}, got success: {value:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "unexpected status: {status:?}");
            status.message().to_owned()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Official client
// ---------------------------------------------------------------------------------------------

/// The gRPC code of an official-client error. Admin calls of the official client go over REST;
/// the front answers REST errors in Google's JSON error format, so the client reports a status
/// for them too (the official emulator's own gateway answers a flat body the client cannot read).
pub(crate) fn code(error: &google_cloud_spanner::Error) -> Option<Code> {
    error.status().map(|status| status.code)
}

/// The message of an official-client error (its status message, or the error chain).
pub(crate) fn message(error: &google_cloud_spanner::Error) -> String {
    error
        .status()
        .map(|status| status.message.clone())
        .unwrap_or_else(|| chain(error))
}

/// Asserts that an official-client result failed with `code`; returns the message.
#[track_caller]
pub(crate) fn expect_code<T: std::fmt::Debug>(
    result: Result<T, google_cloud_spanner::Error>,
    expected: Code,
) -> String {
    match result {
        Ok(value) => panic!("expected {expected:?}, got success: {value:?}"),
        Err(error) => {
            assert_eq!(
                code(&error),
                Some(expected),
                "unexpected error: {}",
                chain(&error)
            );
            message(&error)
        }
    }
}

/// Runs DML statements in one read-write transaction of the official client.
pub(crate) async fn dml(
    db: &TestDatabase,
    statements: Vec<Statement>,
) -> Result<Vec<i64>, google_cloud_spanner::Error> {
    db.client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            let mut counts = Vec::with_capacity(statements.len());
            for statement in statements.clone() {
                counts.push(tx.execute_update(statement).await?);
            }
            Ok(counts)
        })
        .await
        .map(|r| r.result)
}

/// Runs one DML statement given as SQL text in its own read-write transaction.
pub(crate) async fn dml1(db: &TestDatabase, sql: &str) -> Result<i64, google_cloud_spanner::Error> {
    dml(db, vec![Statement::builder(sql).build()])
        .await
        .map(|counts| counts.first().copied().unwrap_or_default())
}

/// Runs a query in a strong single-use read-only transaction and collects every row.
pub(crate) async fn query(
    client: &DatabaseClient,
    statement: impl Into<Statement>,
) -> Result<Vec<Row>, google_cloud_spanner::Error> {
    let mut rs = client.single_use().build().execute_query(statement).await?;
    let mut rows = Vec::new();
    while let Some(row) = rs.next().await {
        rows.push(row?);
    }
    Ok(rows)
}

/// A single INT64 from a query like `SELECT COUNT(*) FROM T`.
pub(crate) async fn scalar_i64(db: &TestDatabase, sql: &str) -> i64 {
    let rows = query(db.client(), Statement::builder(sql).build())
        .await
        .unwrap_or_else(|e| panic!("query {sql}: {}", chain(&e)));
    assert_eq!(rows.len(), 1, "{sql}: one row expected");
    rows[0]
        .get::<i64>(0usize)
        .unwrap_or_else(|e| panic!("{sql}: {}", chain(&e)))
}

/// The ids (INT64 key `Id`) of the rows of queue or table `name`, ascending.
pub(crate) async fn ids(db: &TestDatabase, name: &str) -> Vec<i64> {
    let sql = format!("SELECT Id FROM {name} ORDER BY Id");
    query(db.client(), Statement::builder(&sql).build())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", chain(&e)))
        .iter()
        .map(|r| r.get::<i64>("Id").expect("Id"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// RECEIVE
// ---------------------------------------------------------------------------------------------

/// One row of a `RECEIVE_<Q>` stream.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// The `Id` key column, when the queue has one.
    pub(crate) id: Option<i64>,
    /// `SpannerLeaseToken`, kept opaque. [?] STRING per the GoogleSQL docs; a BYTES token
    /// would arrive as base64 text and read the same way here.
    pub(crate) token: String,
    /// `SpannerLeaseExpirationTimestamp`.
    pub(crate) expires: SystemTime,
    /// `DeliverTime`.
    pub(crate) deliver_time: Option<SystemTime>,
    /// `SpannerLastBatchMessage`, when selected.
    pub(crate) last_in_batch: Option<bool>,
    /// When this process read the row.
    pub(crate) received_at: SystemTime,
    /// The whole row.
    pub(crate) row: Row,
}

impl Delivery {
    fn from_row(row: Row, names: &[String]) -> Self {
        let has = |name: &str| names.iter().any(|n| n.eq_ignore_ascii_case(name));
        let token = if has("SpannerLeaseToken") {
            row.get::<google_cloud_spanner::value::Value>("SpannerLeaseToken")
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        } else {
            String::new()
        };
        Self {
            id: has("Id").then(|| row.get::<i64>("Id").ok()).flatten(),
            token,
            expires: if has("SpannerLeaseExpirationTimestamp") {
                row.get::<SystemTime>("SpannerLeaseExpirationTimestamp")
                    .expect("SpannerLeaseExpirationTimestamp is a TIMESTAMP")
            } else {
                SystemTime::UNIX_EPOCH
            },
            deliver_time: has("DeliverTime")
                .then(|| row.get::<SystemTime>("DeliverTime").ok())
                .flatten(),
            last_in_batch: has("SpannerLastBatchMessage")
                .then(|| row.get::<bool>("SpannerLastBatchMessage").ok())
                .flatten(),
            received_at: SystemTime::now(),
            row,
        }
    }

    /// The `Payload` column as text (STRING or JSON payloads).
    pub(crate) fn payload_text(&self) -> String {
        self.row.get::<String>("Payload").expect("Payload as text")
    }
}

/// `SELECT * FROM RECEIVE_<queue>(max_duration => '<d>'[, max_batch_size => n])`.
pub(crate) fn receive_sql(queue: &str, max_duration: &str, batch: Option<i64>) -> String {
    match batch {
        Some(n) => format!(
            "SELECT * FROM RECEIVE_{queue}(max_duration => '{max_duration}', max_batch_size => {n})"
        ),
        None => format!("SELECT * FROM RECEIVE_{queue}(max_duration => '{max_duration}')"),
    }
}

/// An open `RECEIVE_<Q>` stream (official client, strong single-use read-only,
/// `ExecuteStreamingSql`).
#[derive(Debug)]
pub(crate) struct Receiver {
    rs: ResultSet,
    names: Vec<String>,
    /// When the query was issued.
    pub(crate) opened_at: Instant,
}

impl Receiver {
    /// Opens a stream.
    pub(crate) async fn open(
        db: &TestDatabase,
        sql: &str,
    ) -> Result<Self, google_cloud_spanner::Error> {
        Self::open_with(db.client(), Statement::builder(sql).build()).await
    }

    /// Opens a stream with a prepared statement.
    pub(crate) async fn open_with(
        client: &DatabaseClient,
        statement: Statement,
    ) -> Result<Self, google_cloud_spanner::Error> {
        let opened_at = Instant::now();
        let rs = client.single_use().build().execute_query(statement).await?;
        let names = rs.metadata().column_names().to_vec();
        Ok(Self {
            rs,
            names,
            opened_at,
        })
    }

    /// The output column names, in order.
    pub(crate) fn columns(&self) -> &[String] {
        &self.names
    }

    /// The output column types, in order.
    pub(crate) fn types(&self) -> Vec<google_cloud_spanner::types::TypeCode> {
        self.rs
            .metadata()
            .column_types()
            .iter()
            .map(|t| t.code())
            .collect()
    }

    /// The next delivery; `None` when the stream ends (after `max_duration`).
    pub(crate) async fn next(&mut self) -> Option<Delivery> {
        let row = self.rs.next().await?;
        let row = row.unwrap_or_else(|e| panic!("RECEIVE stream failed: {}", chain(&e)));
        Some(Delivery::from_row(row, &self.names))
    }

    /// The next delivery, or an error from the stream.
    pub(crate) async fn try_next(
        &mut self,
    ) -> Option<Result<Delivery, google_cloud_spanner::Error>> {
        let row = self.rs.next().await?;
        Some(row.map(|r| Delivery::from_row(r, &self.names)))
    }

    /// The next delivery, failing the test if none arrives within `limit` (a guard against a
    /// hung test, not a timing assertion: `limit` is far above what the step needs).
    pub(crate) async fn expect_next(&mut self, limit: Duration, what: &str) -> Delivery {
        match tokio::time::timeout(limit, self.next()).await {
            Ok(Some(d)) => d,
            Ok(None) => panic!("{what}: the RECEIVE stream ended without a delivery"),
            Err(_) => panic!("{what}: no delivery within {limit:?}"),
        }
    }

    /// Reads until the stream ends, returning every delivery.
    pub(crate) async fn drain(mut self) -> Vec<Delivery> {
        let mut out = Vec::new();
        while let Some(d) = self.next().await {
            out.push(d);
        }
        out
    }
}

/// Receives until the stream ends (`max_duration`), returning every delivery.
pub(crate) async fn receive_all(db: &TestDatabase, sql: &str) -> Vec<Delivery> {
    Receiver::open(db, sql)
        .await
        .unwrap_or_else(|e| panic!("RECEIVE {sql}: {}", chain(&e)))
        .drain()
        .await
}

/// Receives until `n` deliveries arrived (a guard fails the test after `limit`), in batches
/// of `n`: this reader acts on no lease, and a stream leases no more than `max_batch_size`
/// messages ahead of such a reader at once.
pub(crate) async fn receive_n(
    db: &TestDatabase,
    queue: &str,
    n: usize,
    limit: Duration,
) -> Vec<Delivery> {
    let batch = i64::try_from(n.max(1)).unwrap_or(i64::MAX);
    let mut receiver = Receiver::open(db, &receive_sql(queue, "60s", Some(batch)))
        .await
        .unwrap_or_else(|e| panic!("RECEIVE_{queue}: {}", chain(&e)));
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        out.push(
            receiver
                .expect_next(limit, &format!("delivery {} of {n}", out.len() + 1))
                .await,
        );
    }
    out
}

/// `SELECT * FROM RENEWLEASE_<queue>(lease_tokens => @tokens)`, as
/// old token → (new token, expiration).
pub(crate) async fn renew(
    db: &TestDatabase,
    queue: &str,
    tokens: &[String],
) -> Result<HashMap<String, (Option<String>, SystemTime)>, google_cloud_spanner::Error> {
    let statement = Statement::builder(format!(
        "SELECT * FROM RENEWLEASE_{queue}(lease_tokens => @tokens)"
    ))
    .add_param("tokens", tokens.to_vec())
    .build();
    renewals(db, statement).await
}

/// Runs a RENEWLEASE statement and maps its rows old token → (new token, expiration).
pub(crate) async fn renewals(
    db: &TestDatabase,
    statement: Statement,
) -> Result<HashMap<String, (Option<String>, SystemTime)>, google_cloud_spanner::Error> {
    let rows = query(db.client(), statement).await?;
    let mut out = HashMap::new();
    for row in rows {
        let old = row
            .get::<google_cloud_spanner::value::Value>("SpannerOldLeaseToken")?
            .as_str()
            .map(str::to_owned)
            .unwrap_or_default();
        let new = row
            .get::<google_cloud_spanner::value::Value>("SpannerNewLeaseToken")?
            .as_str()
            .map(str::to_owned);
        let expires = row.get::<SystemTime>("SpannerLeaseExpirationTimestamp")?;
        let previous = out.insert(old.clone(), (new, expires));
        assert!(previous.is_none(), "two RENEWLEASE rows for token {old}");
    }
    Ok(out)
}

/// `|a - b|`.
pub(crate) fn distance(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b)
        .or_else(|_| b.duration_since(a))
        .unwrap_or_default()
}

/// Asserts that `expires` is "about 10 s" after an event that happened between `before` and
/// `after` (generous slack on both sides for a loaded machine).
#[track_caller]
pub(crate) fn assert_lease_about_10s(expires: SystemTime, before: SystemTime, after: SystemTime) {
    let low = before + LEASE - Duration::from_secs(2);
    let high = after + LEASE + Duration::from_secs(2);
    assert!(
        expires >= low && expires <= high,
        "lease expiration {:?} is not about 10 s after the event ({:?} .. {:?})",
        time::OffsetDateTime::from(expires),
        time::OffsetDateTime::from(before),
        time::OffsetDateTime::from(after),
    );
}
