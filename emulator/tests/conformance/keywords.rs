//! Keywords as names, differentially (issue 34): for every word of both dialects' keyword
//! lists (and a few words that are keywords only in some DDL positions), the front's answer to
//! a `CREATE QUEUE` that uses it as the queue name, and as a key column name, quoted and bare,
//! must be the official emulator's answer to the same name in a `CREATE TABLE` (accepted, or
//! refused with the same code). Every queue the front accepts is then used (sends by mutation
//! and by DML, receive, renew, acks by mutation and by DML, `ALTER QUEUE`, `GetDatabaseDdl`,
//! `DROP QUEUE`, then a statement after all that), and nothing may fail, least of all with
//! `INTERNAL`.
//!
//! The reference answers come from the official emulator itself, reached past the front: the
//! test starts its own embedded emulator ([`LocalEmulator`]: the front in-process, the official
//! emulator as a child process), which gives both addresses. The words are cut into parts (one
//! dialect, bare or quoted, 16 words), each with a database of its own on each side, a few parts
//! at a time: small schemas keep statements cheap, and a bare and a quoted spelling of one word
//! name the same table. Statements the reference accepts go to the front in one batch, the
//! others one by one; the uses are batched too, each queue alone only when a batch fails.
//!
//! What the official emulator answers, measured with this test (1.5.28): GoogleSQL DDL refuses
//! exactly the GoogleSQL reserved words bare, except `graph_table` and `qualify`, which it
//! accepts; PostgreSQL DDL refuses PostgreSQL's reserved words bare except `system_user`, and
//! also `ttl` and `synonym`; quoted, every word is a name in both. (By hand: a PostgreSQL table
//! name may not start with `pg_`, quoted or not.) The front passes names on as written, so it
//! needs no list of its own for them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use admin::database_admin_client::DatabaseAdminClient;
use futures::StreamExt as _;
use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::Spanner;
use googleapis_tonic_google_spanner_admin_database_v1::google::longrunning::operations_client::OperationsClient;
use googleapis_tonic_google_spanner_admin_database_v1::google::longrunning::{
    GetOperationRequest, Operation, operation,
};
use googleapis_tonic_google_spanner_admin_database_v1::google::spanner::admin::database::v1 as admin;
use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;
use pb::spanner_client::SpannerClient;
use prost_types::value::Kind;
use spanner_queues_emulator::{LocalEmulator, LocalEmulatorOptions};
use tonic::Code;
use tonic::transport::Channel;

use crate::support::chain;

const PROJECT: &str = "projects/keywords";
const INSTANCE: &str = "projects/keywords/instances/keywords";

/// Words that are keywords only in some positions of Spanner's DDL, checked besides the two
/// reserved lists.
const DDL_WORDS: [&str; 16] = [
    "action",
    "cascade",
    "deletion",
    "generated",
    "hidden",
    "index",
    "interleave",
    "key",
    "options",
    "parent",
    "policy",
    "queue",
    "row",
    "stored",
    "synonym",
    "ttl",
];

/// How many reads (receives, renewals) of one part run at once.
const LANES: usize = 2;

/// Words per part (each part has its own databases: see [`run_part`]).
const PART_WORDS: usize = 16;

/// How many parts run at once.
const PARTS_AT_ONCE: usize = 4;

/// Failures already known, each with why. They are printed, not failed on; one that no longer
/// shows fails the test, so that the list cannot go stale.
const KNOWN_GAPS: &[(&str, &str)] = &[];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    GoogleSql,
    PostgreSql,
}

/// What a statement got: accepted, or refused with a code.
type Answer = Result<(), (Code, String)>;

fn same(a: &Answer, b: &Answer) -> bool {
    match (a, b) {
        (Ok(()), Ok(())) => true,
        (Err((x, _)), Err((y, _))) => x == y,
        _ => false,
    }
}

fn show(answer: &Answer) -> String {
    match answer {
        Ok(()) => "accepted".to_owned(),
        Err((code, message)) => format!("{code:?} ({message})"),
    }
}

/// One name to try: a word, in a role, bare or quoted.
#[derive(Debug, Clone)]
struct Case {
    word: String,
    quoted: bool,
    /// The name of the queue or table (the word itself, or a made-up one for the column role).
    table: String,
    /// The table name as the statements write it.
    table_sql: String,
    /// The key column as the statements write it.
    key_sql: String,
}

impl Case {
    fn new(dialect: Dialect, index: usize, word: &str, quoted: bool, column_role: bool) -> Self {
        let quote = |name: &str| match (quoted, dialect) {
            (false, _) => name.to_owned(),
            (true, Dialect::GoogleSql) => format!("`{name}`"),
            (true, Dialect::PostgreSql) => format!("\"{name}\""),
        };
        let suffix = if quoted { "q" } else { "u" };
        let (table, table_sql, key_sql) = match (column_role, dialect) {
            (false, Dialect::GoogleSql) => (word.to_owned(), quote(word), "Id".to_owned()),
            (false, Dialect::PostgreSql) => (word.to_owned(), quote(word), "id".to_owned()),
            (true, Dialect::GoogleSql) => {
                let table = format!("K{index}{suffix}");
                (table.clone(), table, quote(word))
            }
            (true, Dialect::PostgreSql) => {
                let table = format!("k{index}{suffix}");
                (table.clone(), table, quote(word))
            }
        };
        Case {
            word: word.to_owned(),
            quoted,
            table,
            table_sql,
            key_sql,
        }
    }

    fn label(&self) -> String {
        let role = if self.table == self.word {
            "queue name"
        } else {
            "key column"
        };
        let spelling = if self.quoted { "quoted" } else { "bare" };
        format!("{} ({role}, {spelling})", self.word)
    }

    /// `CREATE <object>` of this case: `TABLE` for the reference, `QUEUE` for the front.
    fn create(&self, dialect: Dialect, object: &str) -> String {
        let (t, k) = (&self.table_sql, &self.key_sql);
        match dialect {
            Dialect::GoogleSql => format!(
                "CREATE {object} {t} ({k} INT64 NOT NULL, Payload STRING(MAX) NOT NULL) \
                 PRIMARY KEY ({k})"
            ),
            Dialect::PostgreSql => format!(
                "CREATE {object} {t} ({k} bigint NOT NULL, payload text NOT NULL, \
                 PRIMARY KEY ({k}))"
            ),
        }
    }
}

/// The raw admin API of one server (the front or the official emulator).
#[derive(Clone)]
struct Admin {
    admin: DatabaseAdminClient<Channel>,
    operations: OperationsClient<Channel>,
}

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("endpoint URI")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

impl Admin {
    async fn connect(addr: SocketAddr) -> Self {
        let channel = channel(addr).await;
        Admin {
            admin: DatabaseAdminClient::new(channel.clone()),
            operations: OperationsClient::new(channel),
        }
    }

    /// Waits for a long-running operation; its error, if it failed.
    async fn finish(&self, mut operation: Operation) -> Answer {
        let mut delay = Duration::from_millis(1);
        loop {
            if operation.done {
                return match operation.result {
                    Some(operation::Result::Error(status)) => {
                        Err((Code::from(status.code), status.message))
                    }
                    _ => Ok(()),
                };
            }
            // Polling a long-running operation: back-off, not synchronisation.
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(50));
            operation = self
                .operations
                .clone()
                .get_operation(GetOperationRequest {
                    name: operation.name.clone(),
                })
                .await
                .map_err(|s| (s.code(), s.message().to_owned()))?
                .into_inner();
        }
    }

    async fn create_database(&self, id: &str, dialect: Dialect) {
        let (create_statement, database_dialect) = match dialect {
            Dialect::GoogleSql => (format!("CREATE DATABASE `{id}`"), 1),
            Dialect::PostgreSql => (format!("CREATE DATABASE \"{id}\""), 2),
        };
        let operation = self
            .admin
            .clone()
            .create_database(admin::CreateDatabaseRequest {
                parent: INSTANCE.to_owned(),
                create_statement,
                database_dialect,
                ..admin::CreateDatabaseRequest::default()
            })
            .await
            .unwrap_or_else(|s| panic!("CreateDatabase {id}: {s:?}"))
            .into_inner();
        if let Err(error) = self.finish(operation).await {
            panic!("CreateDatabase {id}: {error:?}");
        }
    }

    async fn ddl(&self, database: &str, statements: Vec<String>) -> Answer {
        let operation = self
            .admin
            .clone()
            .update_database_ddl(admin::UpdateDatabaseDdlRequest {
                database: format!("{INSTANCE}/databases/{database}"),
                statements,
                ..admin::UpdateDatabaseDdlRequest::default()
            })
            .await
            .map_err(|s| (s.code(), s.message().to_owned()))?
            .into_inner();
        self.finish(operation).await
    }

    async fn get_ddl(&self, database: &str) -> Result<Vec<String>, (Code, String)> {
        self.admin
            .clone()
            .get_database_ddl(admin::GetDatabaseDdlRequest {
                database: format!("{INSTANCE}/databases/{database}"),
            })
            .await
            .map(|r| r.into_inner().statements)
            .map_err(|s| (s.code(), s.message().to_owned()))
    }
}

/// The data API of the front, on one session of one database.
#[derive(Clone)]
struct Data {
    client: SpannerClient<Channel>,
    session: String,
}

fn string(s: impl Into<String>) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StringValue(s.into())),
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

fn status(s: tonic::Status) -> (Code, String) {
    (s.code(), s.message().to_owned())
}

impl Data {
    async fn connect(addr: SocketAddr, database: &str) -> Self {
        let mut client = SpannerClient::new(channel(addr).await);
        let session = client
            .create_session(pb::CreateSessionRequest {
                database: format!("{INSTANCE}/databases/{database}"),
                session: None,
            })
            .await
            .unwrap_or_else(|s| panic!("CreateSession: {s:?}"))
            .into_inner()
            .name;
        Data { client, session }
    }

    async fn commit(&self, mutations: Vec<pb::Mutation>) -> Answer {
        self.client
            .clone()
            .commit(pb::CommitRequest {
                session: self.session.clone(),
                mutations,
                transaction: Some(pb::commit_request::Transaction::SingleUseTransaction(
                    read_write(),
                )),
                ..pb::CommitRequest::default()
            })
            .await
            .map(|_| ())
            .map_err(status)
    }

    /// A read-write transaction that runs `statements` as one batch of DML and commits; with
    /// `rows`, each statement must have modified that many rows. A failed transaction is rolled
    /// back (an open one would hold the database's one read-write slot).
    async fn batch_dml(
        &self,
        statements: Vec<pb::execute_batch_dml_request::Statement>,
        rows: Option<i64>,
    ) -> Answer {
        let mut client = self.client.clone();
        let transaction = client
            .begin_transaction(pb::BeginTransactionRequest {
                session: self.session.clone(),
                options: Some(read_write()),
                ..pb::BeginTransactionRequest::default()
            })
            .await
            .map_err(status)?
            .into_inner();
        let outcome = async {
            let response = client
                .clone()
                .execute_batch_dml(pb::ExecuteBatchDmlRequest {
                    session: self.session.clone(),
                    transaction: Some(pb::TransactionSelector {
                        selector: Some(pb::transaction_selector::Selector::Id(
                            transaction.id.clone(),
                        )),
                    }),
                    statements,
                    seqno: 1,
                    ..pb::ExecuteBatchDmlRequest::default()
                })
                .await
                .map_err(status)?
                .into_inner();
            if let Some(failed) = response.status.filter(|s| s.code != 0) {
                return Err((Code::from(failed.code), failed.message));
            }
            let modified =
                |r: &pb::ResultSet| match r.stats.as_ref().and_then(|s| s.row_count.as_ref()) {
                    Some(pb::result_set_stats::RowCount::RowCountExact(n)) => *n,
                    _ => -1,
                };
            if let Some(want) = rows
                && let Some(got) = response
                    .result_sets
                    .iter()
                    .map(modified)
                    .find(|n| *n != want)
            {
                return Err((
                    Code::Unknown,
                    format!("a statement modified {got} rows instead of {want}"),
                ));
            }
            client
                .clone()
                .commit(pb::CommitRequest {
                    session: self.session.clone(),
                    transaction: Some(pb::commit_request::Transaction::TransactionId(
                        transaction.id.clone(),
                    )),
                    ..pb::CommitRequest::default()
                })
                .await
                .map(|_| ())
                .map_err(status)
        }
        .await;
        if outcome.is_err() {
            let _ = client
                .rollback(pb::RollbackRequest {
                    session: self.session.clone(),
                    transaction_id: transaction.id,
                })
                .await;
        }
        outcome
    }

    /// Runs a query (strong, single use, streamed) and returns up to `limit` rows by column
    /// name, then drops the stream.
    async fn query(
        &self,
        sql: String,
        limit: usize,
    ) -> Result<Vec<HashMap<String, prost_types::Value>>, (Code, String)> {
        let mut stream = self
            .client
            .clone()
            .execute_streaming_sql(pb::ExecuteSqlRequest {
                session: self.session.clone(),
                transaction: Some(strong_single_use()),
                sql,
                ..pb::ExecuteSqlRequest::default()
            })
            .await
            .map_err(status)?
            .into_inner();
        let mut names: Vec<String> = Vec::new();
        let mut values: Vec<prost_types::Value> = Vec::new();
        let mut rows = Vec::new();
        let mut chunked = false;
        while rows.len() < limit {
            let Some(part) = stream.message().await.map_err(status)? else {
                break;
            };
            if let Some(metadata) = part.metadata {
                names = metadata
                    .row_type
                    .map(|t| t.fields.into_iter().map(|f| f.name).collect())
                    .unwrap_or_default();
            }
            let mut incoming = part.values.into_iter();
            if chunked
                && let (Some(last), Some(next)) = (values.last_mut(), incoming.next())
                && let (Some(Kind::StringValue(a)), Some(Kind::StringValue(b))) =
                    (&mut last.kind, next.kind)
            {
                a.push_str(&b);
            }
            values.extend(incoming);
            chunked = part.chunked_value;
            let complete = if chunked {
                values.len().saturating_sub(1)
            } else {
                values.len()
            };
            while !names.is_empty() && complete - rows.len() * names.len() >= names.len() {
                let start = rows.len() * names.len();
                rows.push(
                    names
                        .iter()
                        .cloned()
                        .zip(values[start..start + names.len()].iter().cloned())
                        .collect(),
                );
            }
        }
        rows.truncate(limit);
        Ok(rows)
    }
}

fn text_of(row: &HashMap<String, prost_types::Value>, column: &str) -> Option<String> {
    row.iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(column))
        .and_then(|(_, value)| match &value.kind {
            Some(Kind::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
}

/// Everything that went wrong, with a count of what was checked.
#[derive(Default)]
struct Findings {
    mismatches: Vec<String>,
    failures: Vec<String>,
    internal: Vec<String>,
    compared: usize,
    accepted: usize,
    /// Time spent on the reference answers, on the front's, and using the queues.
    reference: Duration,
    answering: Duration,
    using: Duration,
    /// Time per step of the use, for the report.
    steps: Vec<(&'static str, Duration)>,
}

impl Findings {
    fn failed(&mut self, what: String, error: &(Code, String)) {
        let line = format!("{what}: {:?} {}", error.0, error.1);
        if error.0 == Code::Internal {
            self.internal.push(line.clone());
        }
        self.failures.push(line);
    }

    fn check(&mut self, what: impl Fn() -> String, answer: Answer) {
        if let Err(error) = answer {
            self.failed(what(), &error);
        }
    }
}

/// Words of one dialect, bare or quoted, with their numbers in [`words`] (which name the
/// tables of the key-column cases).
struct Part {
    dialect: Dialect,
    quoted: bool,
    index: usize,
    words: Vec<(usize, String)>,
}

/// The words: both reserved lists and [`DDL_WORDS`], lower case, once each.
fn words() -> Vec<String> {
    let mut words: Vec<String> = spanner_queues_sql::GOOGLE_SQL_RESERVED
        .iter()
        .chain(spanner_queues_sql::POSTGRES_RESERVED)
        .chain(&DDL_WORDS)
        .map(|w| w.to_ascii_lowercase())
        .collect();
    words.sort();
    words.dedup();
    words
}

/// One part of the words in one dialect, bare or quoted: the reference answers, the front's,
/// the use of every accepted queue, and a statement after all that. Each part has a database
/// of its own on each side: the official emulator analyses every statement against the whole
/// schema, so a statement costs more the more tables its database has (in one database of 320
/// queues, an `INSERT` took about 0.25 s).
async fn run_part(front_addr: SocketAddr, backend_addr: SocketAddr, part: Part) -> Findings {
    let Part {
        dialect,
        quoted,
        index,
        words,
    } = part;
    let database = format!(
        "kw{}{}{index}",
        match dialect {
            Dialect::GoogleSql => "g",
            Dialect::PostgreSql => "p",
        },
        if quoted { "q" } else { "b" }
    );
    let official = Admin::connect(backend_addr).await;
    let front = Admin::connect(front_addr).await;
    // One emulator behind both: the reference's database is another one.
    let reference = format!("{database}r");
    official.create_database(&reference, dialect).await;
    front.create_database(&database, dialect).await;
    let data = Data::connect(front_addr, &database).await;
    let mut findings = Findings::default();
    let cases: Vec<Case> = words
        .iter()
        .flat_map(|(i, word)| {
            [false, true].map(|column_role| Case::new(dialect, *i, word, quoted, column_role))
        })
        .collect();
    // The reference: one statement at a time, straight to the official emulator.
    let clock = Instant::now();
    let mut expected = Vec::with_capacity(cases.len());
    for case in &cases {
        expected.push(
            official
                .ddl(&reference, vec![case.create(dialect, "TABLE")])
                .await,
        );
    }
    findings.reference += clock.elapsed();
    // The front: what the reference refuses one at a time, what it accepts in one batch.
    let clock = Instant::now();
    let mut answers: Vec<Option<Answer>> = vec![None; cases.len()];
    for (i, case) in cases.iter().enumerate() {
        if expected[i].is_err() {
            answers[i] = Some(
                front
                    .ddl(&database, vec![case.create(dialect, "QUEUE")])
                    .await,
            );
        }
    }
    let accepted: Vec<usize> = (0..cases.len()).filter(|&i| expected[i].is_ok()).collect();
    let creates: Vec<String> = accepted
        .iter()
        .map(|&i| cases[i].create(dialect, "QUEUE"))
        .collect();
    let created = batched(&creates, |c| front.ddl(&database, c)).await;
    for (&i, answer) in accepted.iter().zip(created) {
        answers[i] = Some(answer);
    }
    let mut queues = Vec::new();
    for (case, (answer, expected)) in cases.iter().zip(answers.into_iter().zip(&expected)) {
        let answer = answer.expect("every case was answered");
        findings.compared += 1;
        if !same(&answer, expected) {
            findings.mismatches.push(format!(
                "{dialect:?} {}: CREATE TABLE {} / CREATE QUEUE {}",
                case.label(),
                show(expected),
                show(&answer)
            ));
        }
        if answer.is_ok() {
            queues.push(case.clone());
        }
    }
    findings.accepted += queues.len();
    findings.answering += clock.elapsed();
    // Use every queue, then the database once more.
    let clock = Instant::now();
    use_queues(dialect, &front, &database, &data, &queues, &mut findings).await;
    let later = Case::new(dialect, 0, "later", false, false);
    let answer = front
        .ddl(&database, vec![later.create(dialect, "QUEUE")])
        .await;
    findings.check(
        || format!("{dialect:?}: CREATE QUEUE later, after all"),
        answer,
    );
    let answer = data.query("SELECT 1".to_owned(), 1).await.map(|_| ());
    findings.check(|| format!("{dialect:?}: SELECT 1, after all"), answer);
    findings.using += clock.elapsed();
    findings
}

/// Runs `run` on all of `items` at once; when that fails, on each item alone, to tell which
/// fail. One answer per item.
async fn batched<T, F, Fut>(items: &[T], run: F) -> Vec<Answer>
where
    T: Clone + Sync,
    F: Fn(Vec<T>) -> Fut + Sync,
    Fut: Future<Output = Answer> + Send,
{
    if items.is_empty() {
        return Vec::new();
    }
    let all = run(items.to_vec()).await;
    if all.is_ok() {
        return vec![Ok(()); items.len()];
    }
    let mut answers = Vec::with_capacity(items.len());
    for item in items {
        answers.push(run(vec![item.clone()]).await);
    }
    answers
}

/// A DML statement with the key parameter (and the payload's, when `payload`).
fn dml_statement(
    dialect: Dialect,
    sql: String,
    key: &str,
    payload: bool,
) -> pb::execute_batch_dml_request::Statement {
    let (key_param, payload_param) = match dialect {
        Dialect::GoogleSql => ("k", "p"),
        Dialect::PostgreSql => ("p1", "p2"),
    };
    let typed = |code: pb::TypeCode| pb::Type {
        code: code as i32,
        ..pb::Type::default()
    };
    let mut params = prost_types::Struct::default();
    let mut param_types = HashMap::new();
    params.fields.insert(key_param.to_owned(), string(key));
    param_types.insert(key_param.to_owned(), typed(pb::TypeCode::Int64));
    if payload {
        params
            .fields
            .insert(payload_param.to_owned(), string("by DML"));
        param_types.insert(payload_param.to_owned(), typed(pb::TypeCode::String));
    }
    pb::execute_batch_dml_request::Statement {
        sql,
        params: Some(params),
        param_types,
    }
}

/// A `Send` (`ack` false) or `Ack` mutation of key `key`.
fn queue_mutation(queue: &str, key: &str, ack: bool) -> pb::Mutation {
    let key = Some(prost_types::ListValue {
        values: vec![string(key)],
    });
    let operation = if ack {
        pb::mutation::Operation::Ack(pb::mutation::Ack {
            queue: queue.to_owned(),
            key,
            ignore_not_found: false,
        })
    } else {
        pb::mutation::Operation::Send(pb::mutation::Send {
            queue: queue.to_owned(),
            key,
            payload: Some(string("by mutation")),
            deliver_time: None,
        })
    };
    pb::Mutation {
        operation: Some(operation),
    }
}

/// Receives a queue's `expected` messages, then renews their leases at once (a lease lasts
/// about 10 s).
async fn receive_and_renew(data: &Data, dialect: Dialect, queue: &Case, expected: usize) -> Answer {
    let (receive, token, new_token) = match dialect {
        Dialect::GoogleSql => (
            format!(
                "SELECT * FROM RECEIVE_{}(max_duration => '5s', max_batch_size => 2)",
                queue.table
            ),
            "SpannerLeaseToken",
            "SpannerNewLeaseToken",
        ),
        Dialect::PostgreSql => (
            format!(
                "SELECT * FROM spanner.receive_{}(2, NULL, '5s')",
                queue.table
            ),
            "spanner_lease_token",
            "spanner_new_lease_token",
        ),
    };
    let tokens: Vec<String> = data
        .query(receive, expected)
        .await?
        .iter()
        .filter_map(|row| text_of(row, token))
        .collect();
    if tokens.len() != expected {
        return Err((
            Code::Unknown,
            format!("RECEIVE gave {} of {expected} messages", tokens.len()),
        ));
    }
    let list = tokens
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let renew = match dialect {
        Dialect::GoogleSql => format!(
            "SELECT * FROM RENEWLEASE_{}(lease_tokens => [{list}])",
            queue.table
        ),
        Dialect::PostgreSql => format!(
            "SELECT * FROM spanner.renewlease_{}(lease_tokens => ARRAY[{list}])",
            queue.table
        ),
    };
    let renewed = data
        .query(renew, usize::MAX)
        .await
        .map_err(|(code, message)| (code, format!("RENEWLEASE: {message}")))?
        .iter()
        .filter(|row| text_of(row, new_token).is_some())
        .count();
    if renewed == expected {
        Ok(())
    } else {
        Err((
            Code::Unknown,
            format!("RENEWLEASE renewed {renewed} of {expected} leases"),
        ))
    }
}

/// Sends to, receives from, renews, acks, alters and drops every queue of `queues`, in batches
/// (each queue alone when a batch fails, to tell which).
async fn use_queues(
    dialect: Dialect,
    front: &Admin,
    database: &str,
    data: &Data,
    queues: &[Case],
    findings: &mut Findings,
) {
    let quote = |name: &str| match dialect {
        Dialect::GoogleSql => format!("`{name}`"),
        Dialect::PostgreSql => format!("\"{name}\""),
    };
    let mut clock = Instant::now();
    let mut lap = |findings: &mut Findings, step: &'static str| {
        findings.steps.push((step, clock.elapsed()));
        clock = Instant::now();
    };
    let record = |findings: &mut Findings, step: &'static str, answers: &[Answer]| -> Vec<bool> {
        queues
            .iter()
            .zip(answers)
            .map(|(queue, answer)| match answer {
                Ok(()) => true,
                Err(error) => {
                    findings.failed(format!("{dialect:?} {}: {step}", queue.label()), error);
                    false
                }
            })
            .collect()
    };
    // Sends: key 1 by mutation, key 2 by DML (parameters, as the SDK sends).
    let sends: Vec<pb::Mutation> = queues
        .iter()
        .map(|q| queue_mutation(&q.table, "1", false))
        .collect();
    let answers = batched(&sends, |m| data.commit(m)).await;
    let by_mutation = record(findings, "Mutation.Send", &answers);
    lap(findings, "Mutation.Send");
    let inserts: Vec<_> = queues
        .iter()
        .map(|q| {
            let payload = match dialect {
                Dialect::GoogleSql => "Payload",
                Dialect::PostgreSql => "payload",
            };
            let values = match dialect {
                Dialect::GoogleSql => "@k, @p",
                Dialect::PostgreSql => "$1, $2",
            };
            let sql = format!(
                "INSERT INTO {} ({}, {payload}) VALUES ({values})",
                q.table_sql, q.key_sql
            );
            dml_statement(dialect, sql, "2", true)
        })
        .collect();
    let answers = batched(&inserts, |s| data.batch_dml(s, Some(1))).await;
    let by_dml = record(findings, "INSERT (a send by DML)", &answers);
    lap(findings, "INSERT (a send by DML)");
    // Receive each queue's messages and renew their leases, several queues at a time.
    let answers: Vec<Answer> = futures::stream::iter(queues.iter().enumerate())
        .map(|(i, q)| {
            let expected = usize::from(by_mutation[i]) + usize::from(by_dml[i]);
            async move { receive_and_renew(data, dialect, q, expected).await }
        })
        .buffered(LANES)
        .collect()
        .await;
    record(findings, "RECEIVE and RENEWLEASE", &answers);
    lap(findings, "RECEIVE and RENEWLEASE");
    // Acks: key 1 by mutation, key 2 by DML; each must find its message.
    let acked: Vec<usize> = (0..queues.len()).filter(|&i| by_mutation[i]).collect();
    let acks: Vec<pb::Mutation> = acked
        .iter()
        .map(|&i| queue_mutation(&queues[i].table, "1", true))
        .collect();
    let answers = batched(&acks, |m| data.commit(m)).await;
    let mut all: Vec<Answer> = vec![Ok(()); queues.len()];
    for (&i, answer) in acked.iter().zip(answers) {
        all[i] = answer;
    }
    record(findings, "Mutation.Ack", &all);
    lap(findings, "Mutation.Ack");
    let deleted: Vec<usize> = (0..queues.len()).filter(|&i| by_dml[i]).collect();
    let deletes: Vec<_> = deleted
        .iter()
        .map(|&i| {
            let q = &queues[i];
            // The key column quoted: a bare `current_date` in an expression is the function.
            let key = quote(q.key_sql.trim_matches(['`', '"']));
            let sql = match dialect {
                Dialect::GoogleSql => format!(
                    "DELETE FROM {} WHERE {key} = @k ASSERT_ROWS_MODIFIED 1",
                    q.table_sql
                ),
                // The front accepts the clause on a batch's last statement only: the row count
                // is checked below.
                Dialect::PostgreSql => format!("DELETE FROM {} WHERE {key} = $1", q.table_sql),
            };
            dml_statement(dialect, sql, "2", false)
        })
        .collect();
    let answers = batched(&deletes, |s| data.batch_dml(s, Some(1))).await;
    let mut all: Vec<Answer> = vec![Ok(()); queues.len()];
    for (&i, answer) in deleted.iter().zip(answers) {
        all[i] = answer;
    }
    record(findings, "DELETE (an ack by DML)", &all);
    lap(findings, "DELETE (an ack by DML)");
    // Schema statements on every queue, and the schema as clients see it.
    let alters: Vec<String> = queues
        .iter()
        .map(|q| match dialect {
            Dialect::GoogleSql => {
                format!(
                    "ALTER QUEUE {} SET OPTIONS (disable_send = false)",
                    q.table_sql
                )
            }
            Dialect::PostgreSql => format!(
                "ALTER QUEUE {} ADD TTL INTERVAL '7 days' ON deliver_time",
                q.table_sql
            ),
        })
        .collect();
    let answers = batched(&alters, |a| front.ddl(database, a)).await;
    record(findings, "ALTER QUEUE", &answers);
    lap(findings, "ALTER QUEUE");
    match front.get_ddl(database).await {
        Ok(statements) => {
            let shown = statements
                .iter()
                .filter(|s| s.starts_with("CREATE QUEUE"))
                .count();
            if shown != queues.len() {
                findings.failures.push(format!(
                    "{dialect:?}: GetDatabaseDdl shows {shown} CREATE QUEUE statements for {} \
                     queues",
                    queues.len()
                ));
            }
        }
        Err(error) => findings.failed(format!("{dialect:?}: GetDatabaseDdl"), &error),
    }
    lap(findings, "GetDatabaseDdl");
    let drops: Vec<String> = queues
        .iter()
        .map(|q| format!("DROP QUEUE {}", q.table_sql))
        .collect();
    let answers = batched(&drops, |d| front.ddl(database, d)).await;
    record(findings, "DROP QUEUE", &answers);
    lap(findings, "DROP QUEUE");
}

/// Every keyword of both dialects as a queue name and as a key column name, bare and quoted:
/// the front answers `CREATE QUEUE` as the official emulator answers `CREATE TABLE`, and every
/// queue it accepts works (issue 34).
#[tokio::test]
async fn keywords_as_names_are_answered_as_the_official_emulator_answers_them() {
    let started = Instant::now();
    let emulator = LocalEmulator::start(LocalEmulatorOptions::new())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the keyword test starts its own emulator and needs the official emulator's \
                 binaries: {}",
                chain(&e)
            )
        });
    let spanner = Spanner::builder()
        .with_endpoint(format!("http://{}", emulator.addr()))
        .build()
        .await
        .expect("an official client for the instance");
    spanner
        .instance_admin_builder()
        .build()
        .await
        .expect("instance admin")
        .create_instance()
        .set_parent(PROJECT)
        .set_instance_id("keywords")
        .set_instance(
            google_cloud_spanner_admin_instance_v1::model::Instance::new()
                .set_name(INSTANCE)
                .set_config(format!("{PROJECT}/instanceConfigs/emulator-config"))
                .set_display_name("keywords")
                .set_node_count(1),
        )
        .poller()
        .until_done()
        .await
        .expect("an instance");
    let (front, backend) = (emulator.addr(), emulator.backend_addr());
    let words: Vec<(usize, String)> = words().into_iter().enumerate().collect();
    let mut parts = Vec::new();
    for dialect in [Dialect::GoogleSql, Dialect::PostgreSql] {
        for quoted in [false, true] {
            for (index, chunk) in words.chunks(PART_WORDS).enumerate() {
                parts.push(Part {
                    dialect,
                    quoted,
                    index,
                    words: chunk.to_vec(),
                });
            }
        }
    }
    let results: Vec<(Dialect, Findings)> = futures::stream::iter(parts)
        .map(|part| async move { (part.dialect, run_part(front, backend, part).await) })
        .buffer_unordered(PARTS_AT_ONCE)
        .collect()
        .await;
    emulator.stop().await;
    let mut report = String::new();
    let (mut mismatches, mut failures, mut internal) = (Vec::new(), Vec::new(), Vec::new());
    for dialect in [Dialect::GoogleSql, Dialect::PostgreSql] {
        let mut sum = Findings::default();
        for (_, findings) in results.iter().filter(|(d, _)| *d == dialect) {
            sum.compared += findings.compared;
            sum.accepted += findings.accepted;
            sum.reference += findings.reference;
            sum.answering += findings.answering;
            sum.using += findings.using;
            for (step, took) in &findings.steps {
                match sum.steps.iter_mut().find(|(s, _)| s == step) {
                    Some((_, total)) => *total += *took,
                    None => sum.steps.push((step, *took)),
                }
            }
            mismatches.extend(findings.mismatches.iter().cloned());
            failures.extend(findings.failures.iter().cloned());
            internal.extend(findings.internal.iter().cloned());
        }
        let _ = writeln!(
            report,
            "  {dialect:?}: {} CREATE QUEUE statements compared with CREATE TABLE ({:.1?} for the \
             official emulator's answers, {:.1?} for the front's), {} queues accepted and used \
             ({:.1?}); times summed over parts that run {PARTS_AT_ONCE} at a time",
            sum.compared, sum.reference, sum.answering, sum.accepted, sum.using
        );
        let steps: Vec<String> = sum
            .steps
            .iter()
            .map(|(step, took)| format!("{step} {took:.1?}"))
            .collect();
        let _ = writeln!(report, "    using: {}", steps.join(", "));
    }
    // Known gaps are reported, not failed on; one that no longer shows fails the test, so that
    // the list cannot go stale.
    let mut gone = Vec::new();
    for (prefix, why) in KNOWN_GAPS {
        let before = failures.len();
        failures.retain(|f| !f.starts_with(prefix));
        if failures.len() == before {
            gone.push(*prefix);
        } else {
            let _ = writeln!(report, "  known gap, not failed on: {prefix} ({why})");
        }
    }
    println!(
        "keyword test: {} words, both dialects, bare and quoted, as queue and as key column \
         names, in {} parts:\n{report}  took {:.1?}",
        words.len(),
        words.len().div_ceil(PART_WORDS) * 4,
        started.elapsed()
    );
    assert!(
        internal.is_empty() && mismatches.is_empty() && failures.is_empty(),
        "INTERNAL answers ({}):\n{}\n\nanswers that differ from the official emulator's ({}):\n{}\
         \n\nfailures using accepted queues ({}):\n{}",
        internal.len(),
        internal.join("\n"),
        mismatches.len(),
        mismatches.join("\n"),
        failures.len(),
        failures.join("\n")
    );
    assert!(
        gone.is_empty(),
        "known gaps that no longer show (remove them from KNOWN_GAPS): {gone:?}"
    );
}
