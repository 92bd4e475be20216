//! Pass-through fidelity as a property: on plain tables, the front answers exactly as the
//! official emulator it forwards to.
//!
//! One local stack (the installed official emulator and the front before it, see
//! `LocalEmulator`) holds two databases of the same schema per dialect: one used through the
//! front, one straight through the official emulator's own port. Each generated case empties
//! both tables, then sends the same steps to both, over the raw gRPC API, and requires the same
//! outcome of every step (the rows, in order where the statement orders them, the row counts,
//! and the error code of a failure; messages and timestamps are not compared), and the same
//! table at the end.
//!
//! What the generator covers (`fidelity_gen`):
//! - **Schema**: one table keyed by `INT64`/`bigint` with a nullable column of each common type:
//!   `STRING`/`varchar`, `INT64`/`bigint`, `FLOAT64`/`float8`, `BOOL`, `BYTES`/`bytea`,
//!   `TIMESTAMP`/`timestamptz`, `DATE`, `NUMERIC`/`numeric`, `ARRAY<INT64>`/`bigint[]`; in a
//!   GoogleSQL and in a PostgreSQL-dialect database.
//! - **Values**: NULL (one in five), empty and quoted strings (`it's`, a backslash, non-ASCII),
//!   small and extreme integers (`i64::MAX`), floats, bytes, timestamps with fractions, dates,
//!   numerics, arrays with NULL elements; each written as a literal or as a typed parameter
//!   (`@pN` / `$N`).
//! - **Statements**: `INSERT` of one or two rows, `UPDATE … SET` (also `I = I + n`), `DELETE`,
//!   each with or without `THEN RETURN` / `RETURNING`; `SELECT` of some columns `ORDER BY` the
//!   key with or without `LIMIT`; aggregates (`COUNT`, `MIN`, `MAX`, `AVG`, `SUM`) with or without
//!   `GROUP BY`; conditions on the key (`=`, `>`, `IN`), `IS NULL`, equality, `LIKE`, a bool
//!   column, nested `AND`/`OR`.
//! - **Calls**: queries through `ExecuteSql` and `ExecuteStreamingSql` (single-use strong
//!   reads); DML in read-write transactions begun inline or by `BeginTransaction`, then
//!   committed; `ExecuteBatchDml` of up to three statements; single-use `Commit`s of `Insert`,
//!   `Update`, `InsertOrUpdate`, `Replace` and `Delete` mutations.
//! - **Errors**: duplicate keys (`ALREADY_EXISTS`), updates of missing rows (`NOT_FOUND`), a
//!   NULL key, integer overflow, division by zero, an unknown column or table, a syntax error, a
//!   type mismatch; and whatever else a generated statement provokes.
//!
//! The seed is printed with a failure; `SPANNER_QUEUES_FIDELITY_SEED=<seed>` replays it (and
//! `SPANNER_QUEUES_FIDELITY_CASES=<n>` runs more cases than the default [`CASES`]). The test
//! needs the installed official emulator (`emulator_main`): without it, it fails under
//! `SPANNER_QUEUES_REQUIRE_EMULATOR=1` and skips with a notice otherwise.

use std::sync::OnceLock;
use std::time::Duration;

use googleapis_tonic_google_longrunning::google::longrunning::{
    GetOperationRequest, Operation, operations_client::OperationsClient,
};
use googleapis_tonic_google_spanner_admin_database_v1::google::spanner::admin::database::v1 as admin;
use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;
use pb::spanner_client::SpannerClient;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use spanner_queues_emulator::{LocalEmulator, LocalEmulatorOptions};
use tonic::transport::Channel;

use crate::fidelity_gen::{self, Dialect, Sql, Step};

/// Generated cases per dialect (about 150 steps per 24 cases; 40 cases of both dialects take
/// about 5 s on a 2-core machine).
const CASES: u32 = 40;
/// Steps per case.
const STEPS: std::ops::Range<usize> = 1..10;
const PROJECT: &str = "fidelity";
const INSTANCE: &str = "projects/fidelity/instances/fidelity";

/// The local stack every case of this process uses, with the runtime it runs on.
struct Stack {
    runtime: tokio::runtime::Runtime,
    emulator: LocalEmulator,
}

static STACK: OnceLock<Result<Stack, String>> = OnceLock::new();

/// The stack, started on first use; `None` (after a notice) when the installed official
/// emulator is missing and not required.
fn stack() -> Option<&'static Stack> {
    let stack = STACK.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime: {e}"))?;
        let emulator = runtime
            .block_on(async {
                let emulator = LocalEmulator::start(LocalEmulatorOptions::new()).await?;
                create_instance(&emulator).await;
                Ok::<_, spanner_queues_emulator::LocalEmulatorError>(emulator)
            })
            .map_err(|e| spanner_queues_emulator::error_chain(&e))?;
        Ok(Stack { runtime, emulator })
    });
    match stack {
        Ok(stack) => Some(stack),
        Err(reason) if std::env::var("SPANNER_QUEUES_REQUIRE_EMULATOR").is_ok_and(|v| v == "1") => {
            panic!("the pass-through property test needs the installed official emulator: {reason}")
        }
        Err(reason) => {
            crate::python::notice(&format!(
                "SKIPPING the pass-through property test: no installed official emulator ({reason}); \
                 set SPANNER_QUEUES_REQUIRE_EMULATOR=1 to make this an error"
            ));
            None
        }
    }
}

async fn create_instance(emulator: &LocalEmulator) {
    use google_cloud_lro::Poller as _;
    let spanner = google_cloud_spanner::client::Spanner::builder()
        .with_endpoint(format!("http://{}", emulator.addr()))
        .build()
        .await
        .expect("a client");
    let instance = google_cloud_spanner_admin_instance_v1::model::Instance::new()
        .set_name(INSTANCE)
        .set_config(format!(
            "projects/{PROJECT}/instanceConfigs/emulator-config"
        ))
        .set_display_name("fidelity")
        .set_node_count(1);
    spanner
        .instance_admin_builder()
        .build()
        .await
        .expect("an instance admin client")
        .create_instance()
        .set_parent(format!("projects/{PROJECT}"))
        .set_instance_id("fidelity")
        .set_instance(instance)
        .poller()
        .until_done()
        .await
        .expect("the instance");
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("an endpoint")
        .connect()
        .await
        .expect("connect")
}

/// Waits for a long-running operation of `channel`'s server.
async fn until_done(channel: &Channel, mut op: Operation) {
    let mut operations = OperationsClient::new(channel.clone());
    let mut pause = Duration::from_millis(5);
    while !op.done {
        // Polling an operation, as the official clients do.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
        op = operations
            .get_operation(GetOperationRequest {
                name: op.name.clone(),
            })
            .await
            .expect("GetOperation")
            .into_inner();
    }
    if let Some(
        googleapis_tonic_google_longrunning::google::longrunning::operation::Result::Error(e),
    ) = op.result
    {
        panic!("operation {} failed: {e:?}", op.name);
    }
}

/// What one step gave.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Rows (each row's values in Debug form) and the DML row count, if any.
    Rows {
        rows: Vec<String>,
        count: Option<i64>,
    },
    /// A batch's row counts, and the code of the statement that failed, if one did.
    Batch {
        counts: Vec<i64>,
        failed: Option<tonic::Code>,
    },
    /// A commit of mutations that went through.
    Committed,
    /// A failure, by code.
    Failed(tonic::Code),
}

/// One database, used through one port.
#[derive(Clone)]
struct Side {
    spanner: SpannerClient<Channel>,
    session: String,
}

fn read_write() -> pb::TransactionOptions {
    pb::TransactionOptions {
        mode: Some(pb::transaction_options::Mode::ReadWrite(
            pb::transaction_options::ReadWrite::default(),
        )),
        ..pb::TransactionOptions::default()
    }
}

fn strong_read() -> pb::TransactionSelector {
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

fn row_strings(
    rows: impl IntoIterator<Item = Vec<prost_types::Value>>,
    ordered: bool,
) -> Vec<String> {
    let mut rows: Vec<String> = rows.into_iter().map(|r| format!("{r:?}")).collect();
    if !ordered {
        rows.sort();
    }
    rows
}

impl Side {
    /// A database named `id` through `addr`, with the test table, and a session on it.
    async fn create(addr: std::net::SocketAddr, id: &str, dialect: Dialect) -> Self {
        let channel = channel(addr).await;
        let mut admin = admin::database_admin_client::DatabaseAdminClient::new(channel.clone());
        let (create_statement, database_dialect) = match dialect {
            Dialect::GoogleSql => (
                format!("CREATE DATABASE `{id}`"),
                admin::DatabaseDialect::GoogleStandardSql,
            ),
            Dialect::PostgreSql => (
                format!("CREATE DATABASE \"{id}\""),
                admin::DatabaseDialect::Postgresql,
            ),
        };
        let op = admin
            .create_database(admin::CreateDatabaseRequest {
                parent: INSTANCE.to_owned(),
                create_statement,
                database_dialect: database_dialect as i32,
                ..admin::CreateDatabaseRequest::default()
            })
            .await
            .expect("CreateDatabase")
            .into_inner();
        until_done(&channel, op).await;
        let database = format!("{INSTANCE}/databases/{id}");
        let op = admin
            .update_database_ddl(admin::UpdateDatabaseDdlRequest {
                database: database.clone(),
                statements: vec![fidelity_gen::table_ddl(dialect).to_owned()],
                ..admin::UpdateDatabaseDdlRequest::default()
            })
            .await
            .expect("UpdateDatabaseDdl")
            .into_inner();
        until_done(&channel, op).await;
        let mut spanner = SpannerClient::new(channel);
        let session = spanner
            .create_session(pb::CreateSessionRequest {
                database,
                session: None,
            })
            .await
            .expect("CreateSession")
            .into_inner()
            .name;
        Self { spanner, session }
    }

    fn request(
        &self,
        sql: &Sql,
        transaction: pb::TransactionSelector,
        seqno: i64,
    ) -> pb::ExecuteSqlRequest {
        pb::ExecuteSqlRequest {
            session: self.session.clone(),
            transaction: Some(transaction),
            sql: sql.text.clone(),
            params: Some(sql.params.clone()),
            param_types: sql.param_types.clone(),
            seqno,
            ..pb::ExecuteSqlRequest::default()
        }
    }

    async fn query(&self, sql: &Sql, streaming: bool, ordered: bool) -> Outcome {
        let request = self.request(sql, strong_read(), 0);
        let mut spanner = self.spanner.clone();
        if !streaming {
            return match spanner.execute_sql(request).await {
                Ok(rs) => {
                    let rs = rs.into_inner();
                    Outcome::Rows {
                        rows: row_strings(rs.rows.into_iter().map(|r| r.values), ordered),
                        count: None,
                    }
                }
                Err(status) => Outcome::Failed(status.code()),
            };
        }
        let mut stream = match spanner.execute_streaming_sql(request).await {
            Ok(stream) => stream.into_inner(),
            Err(status) => return Outcome::Failed(status.code()),
        };
        let mut columns = 0;
        let mut values = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(part)) => {
                    assert!(!part.chunked_value, "small values are never chunked");
                    if let Some(metadata) = part.metadata {
                        columns = metadata.row_type.map_or(0, |t| t.fields.len());
                    }
                    values.extend(part.values);
                }
                Ok(None) => break,
                Err(status) => return Outcome::Failed(status.code()),
            }
        }
        let rows = values
            .chunks(columns.max(1))
            .map(<[prost_types::Value]>::to_vec)
            .collect::<Vec<_>>();
        Outcome::Rows {
            rows: row_strings(rows, ordered),
            count: None,
        }
    }

    async fn begin(&self) -> Result<Vec<u8>, tonic::Status> {
        let tx = self
            .spanner
            .clone()
            .begin_transaction(pb::BeginTransactionRequest {
                session: self.session.clone(),
                options: Some(read_write()),
                ..pb::BeginTransactionRequest::default()
            })
            .await?
            .into_inner();
        Ok(tx.id.to_vec())
    }

    async fn commit(&self, id: Vec<u8>) -> Result<(), tonic::Status> {
        self.spanner
            .clone()
            .commit(pb::CommitRequest {
                session: self.session.clone(),
                transaction: Some(pb::commit_request::Transaction::TransactionId(id.into())),
                ..pb::CommitRequest::default()
            })
            .await
            .map(|_| ())
    }

    async fn rollback(&self, id: Vec<u8>) {
        // Its outcome is the failure already recorded.
        let _ = self
            .spanner
            .clone()
            .rollback(pb::RollbackRequest {
                session: self.session.clone(),
                transaction_id: id.into(),
            })
            .await;
    }

    async fn dml(&self, sql: &Sql, inline_begin: bool) -> Outcome {
        let selector = |s| pb::TransactionSelector { selector: Some(s) };
        let (transaction, begun) = if inline_begin {
            (
                selector(pb::transaction_selector::Selector::Begin(read_write())),
                None,
            )
        } else {
            match self.begin().await {
                Ok(id) => (
                    selector(pb::transaction_selector::Selector::Id(id.clone().into())),
                    Some(id),
                ),
                Err(status) => return Outcome::Failed(status.code()),
            }
        };
        let result = self
            .spanner
            .clone()
            .execute_sql(self.request(sql, transaction, 1))
            .await;
        let rs = match result {
            Ok(rs) => rs.into_inner(),
            Err(status) => {
                if let Some(id) = begun {
                    self.rollback(id).await;
                }
                return Outcome::Failed(status.code());
            }
        };
        let id = begun.or_else(|| {
            rs.metadata
                .as_ref()
                .and_then(|m| m.transaction.as_ref())
                .map(|t| t.id.to_vec())
        });
        let Some(id) = id else {
            return Outcome::Failed(tonic::Code::Internal);
        };
        if let Err(status) = self.commit(id).await {
            return Outcome::Failed(status.code());
        }
        let count = rs.stats.and_then(|s| match s.row_count {
            Some(pb::result_set_stats::RowCount::RowCountExact(n)) => Some(n),
            _ => None,
        });
        Outcome::Rows {
            rows: row_strings(rs.rows.into_iter().map(|r| r.values), false),
            count,
        }
    }

    async fn batch(&self, statements: &[Sql]) -> Outcome {
        let id = match self.begin().await {
            Ok(id) => id,
            Err(status) => return Outcome::Failed(status.code()),
        };
        let request = pb::ExecuteBatchDmlRequest {
            session: self.session.clone(),
            transaction: Some(pb::TransactionSelector {
                selector: Some(pb::transaction_selector::Selector::Id(id.clone().into())),
            }),
            statements: statements
                .iter()
                .map(|s| pb::execute_batch_dml_request::Statement {
                    sql: s.text.clone(),
                    params: Some(s.params.clone()),
                    param_types: s.param_types.clone(),
                })
                .collect(),
            seqno: 1,
            ..pb::ExecuteBatchDmlRequest::default()
        };
        let response = match self.spanner.clone().execute_batch_dml(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                self.rollback(id).await;
                return Outcome::Failed(status.code());
            }
        };
        let counts = response
            .result_sets
            .iter()
            .filter_map(|rs| match rs.stats.as_ref()?.row_count {
                Some(pb::result_set_stats::RowCount::RowCountExact(n)) => Some(n),
                _ => None,
            })
            .collect();
        let failed = response
            .status
            .map(|s| tonic::Code::from_i32(s.code))
            .filter(|c| *c != tonic::Code::Ok);
        if failed.is_some() {
            self.rollback(id).await;
        } else if let Err(status) = self.commit(id).await {
            return Outcome::Failed(status.code());
        }
        Outcome::Batch { counts, failed }
    }

    async fn mutate(&self, mutations: Vec<pb::Mutation>) -> Outcome {
        let request = pb::CommitRequest {
            session: self.session.clone(),
            transaction: Some(pb::commit_request::Transaction::SingleUseTransaction(
                read_write(),
            )),
            mutations,
            ..pb::CommitRequest::default()
        };
        match self.spanner.clone().commit(request).await {
            Ok(_) => Outcome::Committed,
            Err(status) => Outcome::Failed(status.code()),
        }
    }

    async fn apply(&self, dialect: Dialect, step: &Step) -> Outcome {
        match step {
            Step::Query { shape, streaming } => {
                let ordered = matches!(shape, fidelity_gen::Shape::Select { .. });
                self.query(&fidelity_gen::render(dialect, shape), *streaming, ordered)
                    .await
            }
            Step::Dml {
                shape,
                inline_begin,
            } => {
                self.dml(&fidelity_gen::render(dialect, shape), *inline_begin)
                    .await
            }
            Step::Batch(shapes) => {
                let statements: Vec<Sql> = shapes
                    .iter()
                    .map(|s| fidelity_gen::render(dialect, s))
                    .collect();
                self.batch(&statements).await
            }
            Step::Mutations(writes) => self.mutate(fidelity_gen::mutations(dialect, writes)).await,
        }
    }

    async fn sql(&self, text: &str, dml: bool) -> Outcome {
        let sql = Sql {
            text: text.to_owned(),
            ..Sql::default()
        };
        if dml {
            self.dml(&sql, false).await
        } else {
            self.query(&sql, false, true).await
        }
    }
}

/// The two databases of one dialect.
struct Pair {
    dialect: Dialect,
    front: Side,
    direct: Side,
    /// How many steps ended how (`rows`, `batch`, `committed`, or the failure's code).
    tally: std::sync::Mutex<std::collections::BTreeMap<String, usize>>,
}

impl Outcome {
    fn kind(&self) -> String {
        match self {
            Outcome::Rows { .. } => "rows".to_owned(),
            Outcome::Batch { failed: None, .. } => "batch".to_owned(),
            Outcome::Batch {
                failed: Some(code), ..
            } => format!("batch {code:?}"),
            Outcome::Committed => "committed".to_owned(),
            Outcome::Failed(code) => format!("{code:?}"),
        }
    }

    fn succeeded(kind: &str) -> bool {
        matches!(kind, "rows" | "batch" | "committed")
    }
}

impl Pair {
    /// Databases `front-<name>` (used through the front) and `direct-<name>`.
    async fn create_named(stack: &Stack, dialect: Dialect, name: &str) -> Self {
        Self {
            dialect,
            tally: std::sync::Mutex::default(),
            front: Side::create(stack.emulator.addr(), &format!("front-{name}"), dialect).await,
            direct: Side::create(
                stack.emulator.backend_addr(),
                &format!("direct-{name}"),
                dialect,
            )
            .await,
        }
    }

    /// Runs one case on both sides, from empty tables.
    async fn case(&self, steps: &[Step]) -> Result<(), TestCaseError> {
        let k = fidelity_gen::Col::K.name(self.dialect);
        let t = match self.dialect {
            Dialect::GoogleSql => "T",
            Dialect::PostgreSql => "t",
        };
        let empty = format!("DELETE FROM {t} WHERE TRUE");
        for side in [&self.front, &self.direct] {
            let outcome = side.sql(&empty, true).await;
            prop_assert!(
                matches!(outcome, Outcome::Rows { .. }),
                "emptying the table: {outcome:?}"
            );
        }
        for (n, step) in steps.iter().enumerate() {
            let front = self.front.apply(self.dialect, step).await;
            let direct = self.direct.apply(self.dialect, step).await;
            prop_assert_eq!(
                &front,
                &direct,
                "step {} of {}: {:?}",
                n + 1,
                steps.len(),
                step
            );
            *self
                .tally
                .lock()
                .expect("the tally")
                .entry(front.kind())
                .or_default() += 1;
        }
        let dump = format!("SELECT * FROM {t} ORDER BY {k}");
        let front = self.front.sql(&dump, false).await;
        let direct = self.direct.sql(&dump, false).await;
        prop_assert_eq!(front, direct, "the table after the case");
        Ok(())
    }
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

fn run(dialect: Dialect) {
    let Some(stack) = stack() else {
        return;
    };
    let name = match dialect {
        Dialect::GoogleSql => "googlesql",
        Dialect::PostgreSql => "postgresql",
    };
    let pair = stack
        .runtime
        .block_on(Pair::create_named(stack, dialect, name));
    let seed = env_number("SPANNER_QUEUES_FIDELITY_SEED").unwrap_or_else(rand::random);
    let cases = env_number("SPANNER_QUEUES_FIDELITY_CASES")
        .map_or(CASES, |n| u32::try_from(n).unwrap_or(u32::MAX));
    println!("pass-through property, {dialect:?}: {cases} cases, seed {seed}");
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 256,
        ..Config::default()
    });
    let strategy = prop::collection::vec(fidelity_gen::step(), STEPS);
    let result = runner.run(&strategy, |steps| stack.runtime.block_on(pair.case(&steps)));
    if let Err(failure) = result {
        panic!(
            "the front answered differently from the official emulator ({dialect:?}): {failure}\n\
             replay with SPANNER_QUEUES_FIDELITY_SEED={seed}"
        );
    }
    let tally = pair.tally.into_inner().expect("the tally");
    println!("outcomes of the steps: {tally:?}");
    // A generator that lost its way (every statement refused on both sides) would compare
    // nothing worth comparing.
    let total: usize = tally.values().sum();
    let succeeded: usize = tally
        .iter()
        .filter(|(kind, _)| Outcome::succeeded(kind))
        .map(|(_, n)| n)
        .sum();
    assert!(
        succeeded * 2 >= total,
        "most generated steps should succeed: {tally:?} (seed {seed})"
    );
}

#[test]
fn plain_tables_pass_through_as_the_official_emulator_answers_in_googlesql() {
    run(Dialect::GoogleSql);
}

#[test]
fn plain_tables_pass_through_as_the_official_emulator_answers_in_postgresql() {
    run(Dialect::PostgreSql);
}

/// The two sides answer one hand-written statement of each kind the same way, so that a
/// broken comparison (every outcome a failure on both sides) does not pass unnoticed.
#[test]
fn the_comparison_sees_rows_counts_and_failures() {
    let Some(stack) = stack() else {
        return;
    };
    stack.runtime.block_on(async {
        let pair = Pair::create_named(stack, Dialect::GoogleSql, "check").await;
        let insert = pair
            .front
            .sql(
                "INSERT INTO T (K, S) VALUES (1, 'a'), (2, NULL) THEN RETURN K",
                true,
            )
            .await;
        assert_eq!(
            insert,
            Outcome::Rows {
                rows: row_strings(
                    [1, 2].map(|k| vec![prost_types::Value {
                        kind: Some(prost_types::value::Kind::StringValue(k.to_string())),
                    }]),
                    false
                ),
                count: Some(2),
            }
        );
        let again = pair.front.sql("INSERT INTO T (K) VALUES (1)", true).await;
        assert_eq!(again, Outcome::Failed(tonic::Code::AlreadyExists));
        let direct = pair.direct.sql("SELECT K FROM T", false).await;
        assert_eq!(
            direct,
            Outcome::Rows {
                rows: Vec::new(),
                count: None
            },
            "two databases"
        );
    });
}
