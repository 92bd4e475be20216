//! Clients, databases and test data.

use std::sync::atomic::{AtomicU32, Ordering};

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use spanner_queues::{Dialect, QueueMessage, SchemaSetup};

use crate::BoxError;
use crate::emulator::{Emulator, RpcCounts};

const PROJECT: &str = "bench";
const INSTANCE: &str = "projects/bench/instances/bench";

/// The benchmark's message: a small JSON payload.
#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "BenchJobs")]
pub(crate) struct BenchJob {
    #[queue(key)]
    pub(crate) id: i64,
    pub(crate) body: String,
}

impl BenchJob {
    pub(crate) fn new(id: i64) -> Self {
        Self {
            id,
            body: "x".repeat(64),
        }
    }
}

/// The effect table every consumer writes, and the polling outbox.
const EFFECTS_DDL: &str = "CREATE TABLE BenchEffects (Id INT64 NOT NULL) PRIMARY KEY (Id)";
const OUTBOX_DDL: &str = "CREATE TABLE Outbox (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL, \
                          Status STRING(16) NOT NULL) PRIMARY KEY (Id)";
/// The same two tables in a PostgreSQL-dialect database (unquoted names fold to lower case).
const PG_EFFECTS_DDL: &str = "CREATE TABLE bencheffects (id bigint NOT NULL, PRIMARY KEY (id))";
const PG_OUTBOX_DDL: &str = "CREATE TABLE outbox (id bigint NOT NULL, payload varchar NOT NULL, \
                             status varchar(16) NOT NULL, PRIMARY KEY (id))";

/// The benchmark's own SQL (the baselines' statements, its checks) in one dialect. GoogleSQL
/// names its parameters (`@id`), PostgreSQL numbers them (`$1`, bound as `p1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sql(pub(crate) Dialect);

impl Sql {
    fn pg(self) -> bool {
        self.0 == Dialect::PostgreSql
    }

    /// A statement with one parameter, `id`.
    fn with_id(self, google: &str, postgres: &str, id: i64) -> Statement {
        if self.pg() {
            Statement::builder(postgres).add_param("p1", id).build()
        } else {
            Statement::builder(google).add_param("id", id).build()
        }
    }

    /// The effect: one row keyed by the message's id.
    pub(crate) fn insert_effect(self, id: i64) -> Statement {
        self.with_id(
            "INSERT INTO BenchEffects (Id) VALUES (@id)",
            "INSERT INTO bencheffects (id) VALUES ($1)",
            id,
        )
    }

    /// The effects of several messages in one statement: a row keyed by each message's id.
    pub(crate) fn insert_effects(self, ids: &[i64]) -> Statement {
        let pg = self.pg();
        let values: Vec<String> = (1..=ids.len())
            .map(|i| {
                if pg {
                    format!("(${i})")
                } else {
                    format!("(@id{i})")
                }
            })
            .collect();
        let sql = if pg {
            format!("INSERT INTO bencheffects (id) VALUES {}", values.join(", "))
        } else {
            format!("INSERT INTO BenchEffects (Id) VALUES {}", values.join(", "))
        };
        let mut builder = Statement::builder(sql);
        for (i, id) in (1..).zip(ids) {
            let name = if pg {
                format!("p{i}")
            } else {
                format!("id{i}")
            };
            builder = builder.add_param(name, *id);
        }
        builder.build()
    }

    /// The queue's table and its key column, as the Read API and mutations name them.
    pub(crate) fn queue_table(self) -> (&'static str, &'static str) {
        if self.pg() {
            ("benchjobs", "id")
        } else {
            ("BenchJobs", "Id")
        }
    }

    /// The hand-written batch consumer's `RECEIVE` call: batches of at most `batch` rows.
    pub(crate) fn receive_batch(self, batch: usize) -> Statement {
        Statement::builder(if self.pg() {
            format!(
                "SELECT id, payload FROM spanner.receive_benchjobs(max_batch_size => {batch}, \
                 priority => NULL, max_duration => '10s')"
            )
        } else {
            format!(
                "SELECT Id, Payload FROM RECEIVE_BenchJobs(max_duration => '10s', \
                 max_batch_size => {batch})"
            )
        })
        .build()
    }

    /// The hand-written consumer's ack: the message's row, which must be there.
    pub(crate) fn ack(self, id: i64) -> Statement {
        self.with_id(
            "DELETE FROM BenchJobs WHERE Id = @id ASSERT_ROWS_MODIFIED 1",
            "DELETE FROM benchjobs WHERE id = $1 ASSERT_ROWS_MODIFIED 1",
            id,
        )
    }

    /// The hand-written consumer's `RECEIVE` call (one batch of any size, for up to 10 s).
    pub(crate) fn receive(self) -> Statement {
        Statement::builder(if self.pg() {
            "SELECT id, payload FROM spanner.receive_benchjobs(max_batch_size => NULL, \
             priority => NULL, max_duration => '10s')"
        } else {
            "SELECT Id, Payload FROM RECEIVE_BenchJobs(max_duration => '10s')"
        })
        .build()
    }

    /// The polling outbox's claim query.
    pub(crate) fn claim(self) -> Statement {
        Statement::builder(if self.pg() {
            "SELECT id FROM outbox WHERE status = 'NEW' LIMIT 1"
        } else {
            "SELECT Id FROM Outbox WHERE Status = 'NEW' LIMIT 1"
        })
        .build()
    }

    /// The polling outbox's status update to `status` (a literal of the benchmark's own).
    pub(crate) fn set_status(self, id: i64, status: &str) -> Statement {
        self.with_id(
            &format!("UPDATE Outbox SET Status = '{status}' WHERE Id = @id"),
            &format!("UPDATE outbox SET status = '{status}' WHERE id = $1"),
            id,
        )
    }

    fn insert_outbox(self, id: i64, payload: String) -> Statement {
        if self.pg() {
            Statement::builder("INSERT INTO outbox (id, payload, status) VALUES ($1, $2, 'NEW')")
                .add_param("p1", id)
                .add_param("p2", payload)
                .build()
        } else {
            Statement::builder(
                "INSERT INTO Outbox (Id, Payload, Status) VALUES (@id, @payload, 'NEW')",
            )
            .add_param("id", id)
            .add_param("payload", payload)
            .build()
        }
    }

    /// `SELECT COUNT(*)` of `table`'s rows with ids in `[lo, hi)`, only those not yet `DONE`
    /// when `not_done` (the outbox).
    fn count_ids(self, table: &str, not_done: bool, ids: &std::ops::Range<i64>) -> Statement {
        if self.pg() {
            let and = if not_done {
                " AND status != 'DONE'"
            } else {
                ""
            };
            Statement::builder(format!(
                "SELECT COUNT(*) FROM {} WHERE id >= $1 AND id < $2{and}",
                table.to_ascii_lowercase()
            ))
            .add_param("p1", ids.start)
            .add_param("p2", ids.end)
            .build()
        } else {
            let and = if not_done {
                " AND Status != 'DONE'"
            } else {
                ""
            };
            Statement::builder(format!(
                "SELECT COUNT(*) FROM {table} WHERE Id >= @lo AND Id < @hi{and}"
            ))
            .add_param("lo", ids.start)
            .add_param("hi", ids.end)
            .build()
        }
    }
}

/// The emulator and a root client on it.
#[derive(Debug)]
pub(crate) struct Bench {
    pub(crate) emulator: Emulator,
    /// Data client through the counting proxy.
    pub(crate) spanner: Spanner,
    /// Database admin client straight to the front (admin clients speak REST, the proxy gRPC
    /// only).
    database_admin: DatabaseAdmin,
    databases: AtomicU32,
}

impl Bench {
    pub(crate) async fn start(log: &std::path::Path) -> Result<Self, BoxError> {
        let emulator = Emulator::start(log).await?;
        let spanner = client(&emulator.endpoint.to_string()).await?;
        let admin_client = client(&emulator.admin_endpoint.to_string()).await?;
        let admin = admin_client.instance_admin_builder().build().await?;
        let instance = google_cloud_spanner_admin_instance_v1::model::Instance::new()
            .set_name(INSTANCE)
            .set_config(format!(
                "projects/{PROJECT}/instanceConfigs/emulator-config"
            ))
            .set_display_name("bench")
            .set_node_count(1);
        admin
            .create_instance()
            .set_parent(format!("projects/{PROJECT}"))
            .set_instance_id("bench")
            .set_instance(instance)
            .poller()
            .until_done()
            .await?;
        let database_admin = admin_client.database_admin_builder().build().await?;
        Ok(Self {
            emulator,
            spanner,
            database_admin,
            databases: AtomicU32::new(0),
        })
    }

    /// A fresh GoogleSQL database with the queue, the worker's tables, the effects table and
    /// the outbox.
    pub(crate) async fn database(&self) -> Result<Database, BoxError> {
        self.database_with(Vec::new()).await
    }

    /// [`database`](Self::database) in `dialect`.
    pub(crate) async fn database_in(&self, dialect: Dialect) -> Result<Database, BoxError> {
        self.database_in_with(dialect, Vec::new()).await
    }

    /// [`database_in`](Self::database_in), with `extra` statements (in `dialect`) after the
    /// common ones.
    pub(crate) async fn database_in_with(
        &self,
        dialect: Dialect,
        extra: Vec<String>,
    ) -> Result<Database, BoxError> {
        match dialect {
            Dialect::PostgreSql => self.postgres_database(extra).await,
            _ => self.database_with(extra).await,
        }
    }

    fn next_id(&self) -> String {
        format!("bench{}", self.databases.fetch_add(1, Ordering::Relaxed))
    }

    /// [`database`](Self::database), with `extra` statements after the common ones.
    pub(crate) async fn database_with(&self, extra: Vec<String>) -> Result<Database, BoxError> {
        let id = self.next_id();
        let mut ddl = vec![
            BenchJob::schema().create_statement(Dialect::GoogleSql)?,
            EFFECTS_DDL.to_owned(),
            OUTBOX_DDL.to_owned(),
        ];
        ddl.extend(
            SchemaSetup::new()
                .with_worker_tables()
                .statements(Dialect::GoogleSql)?,
        );
        ddl.extend(extra);
        self.database_admin
            .create_database()
            .set_parent(INSTANCE)
            .set_create_statement(format!("CREATE DATABASE `{id}`"))
            .set_extra_statements(ddl)
            .poller()
            .until_done()
            .await?;
        self.open(&id, Dialect::GoogleSql).await
    }

    /// The same tables in a PostgreSQL-dialect database: created empty, then its schema in one
    /// change (Cloud Spanner takes no extra statements when it creates a PostgreSQL-dialect
    /// database).
    async fn postgres_database(&self, extra: Vec<String>) -> Result<Database, BoxError> {
        use google_cloud_spanner_admin_database_v1::model::DatabaseDialect;
        let id = self.next_id();
        let mut ddl = vec![
            BenchJob::schema().create_statement(Dialect::PostgreSql)?,
            PG_EFFECTS_DDL.to_owned(),
            PG_OUTBOX_DDL.to_owned(),
        ];
        ddl.extend(
            SchemaSetup::new()
                .with_worker_tables()
                .statements(Dialect::PostgreSql)?,
        );
        ddl.extend(extra);
        let admin = &self.database_admin;
        admin
            .create_database()
            .set_parent(INSTANCE)
            .set_create_statement(format!("CREATE DATABASE \"{id}\""))
            .set_database_dialect(DatabaseDialect::Postgresql)
            .poller()
            .until_done()
            .await?;
        let path = format!("{INSTANCE}/databases/{id}");
        admin
            .update_database_ddl()
            .set_database(&path)
            .set_statements(ddl)
            .poller()
            .until_done()
            .await?;
        self.open(&id, Dialect::PostgreSql).await
    }

    async fn open(&self, id: &str, dialect: Dialect) -> Result<Database, BoxError> {
        let path = format!("{INSTANCE}/databases/{id}");
        let client = self.spanner.database_client(&path).build().await?;
        Ok(Database {
            sdk: self.connect(path, client, dialect).await?,
        })
    }

    /// The SDK's handle on database `path` with data client `client`: connecting reads the
    /// database's dialect (one single-use query) and checks it is `dialect`.
    async fn connect(
        &self,
        path: impl Into<String>,
        client: DatabaseClient,
        dialect: Dialect,
    ) -> Result<spanner_queues::Database, BoxError> {
        Ok(spanner_queues::Database::builder(path)
            .with_client(client)
            .with_admin(self.database_admin.clone())
            .with_dialect(dialect)
            .connect()
            .await?)
    }

    /// Drops a database (the emulator holds at most 10 per instance).
    pub(crate) async fn drop_database(&self, db: Database) -> Result<(), BoxError> {
        self.database_admin
            .drop_database()
            .set_database(db.path())
            .send()
            .await?;
        Ok(())
    }

    /// The SDK's handle on `db` with a new client (its own connections), as a separate process
    /// would have. Connecting costs one query (the dialect), made here, before any
    /// measurement; the consumers that use only the official client take the handle's client,
    /// so that every side starts from the same warmed-up client.
    pub(crate) async fn new_client(
        &self,
        db: &Database,
    ) -> Result<spanner_queues::Database, BoxError> {
        let spanner = client(&self.emulator.endpoint.to_string()).await?;
        let client = spanner.database_client(db.path()).build().await?;
        self.connect(db.path(), client, db.dialect()).await
    }

    pub(crate) async fn rpcs(&self) -> Result<RpcCounts, BoxError> {
        self.emulator.rpcs().await
    }

    /// Rows returned in result sets so far, by kind of RPC.
    pub(crate) async fn rows(&self) -> Result<RpcCounts, BoxError> {
        self.emulator.rpc_rows().await
    }
}

/// A root client on `endpoint` (`host:port`).
pub(crate) async fn client(endpoint: &str) -> Result<Spanner, BoxError> {
    Ok(Spanner::builder()
        .with_endpoint(format!("http://{endpoint}"))
        .build()
        .await?)
}

/// One benchmark database.
#[derive(Debug, Clone)]
pub(crate) struct Database {
    /// The SDK's handle (with the root data client, through the counting proxy).
    pub(crate) sdk: spanner_queues::Database,
}

impl Database {
    /// The database's full name.
    pub(crate) fn path(&self) -> &str {
        self.sdk.path()
    }

    /// The database's dialect.
    pub(crate) fn dialect(&self) -> Dialect {
        self.sdk.dialect()
    }

    /// The root data client.
    pub(crate) fn client(&self) -> &DatabaseClient {
        self.sdk.client()
    }

    /// The benchmark's own SQL in this database's dialect.
    pub(crate) fn sql(&self) -> Sql {
        Sql(self.dialect())
    }

    /// Sends jobs `ids` to the queue, 100 per transaction.
    pub(crate) async fn fill_queue(&self, ids: std::ops::Range<i64>) -> Result<(), BoxError> {
        let jobs: Vec<BenchJob> = ids.map(BenchJob::new).collect();
        for chunk in jobs.chunks(100) {
            self.sdk.send_many(chunk).await?;
        }
        Ok(())
    }

    /// Inserts rows `ids` into the polling outbox with status `NEW`, 100 per transaction.
    pub(crate) async fn fill_outbox(&self, ids: std::ops::Range<i64>) -> Result<(), BoxError> {
        let ids: Vec<i64> = ids.collect();
        let dialect = self.dialect();
        for chunk in ids.chunks(100) {
            self.client()
                .read_write_transaction()
                .build()
                .run(async |tx| {
                    let statements: Vec<Statement> = chunk
                        .iter()
                        .map(|id| {
                            Sql(dialect)
                                .insert_outbox(*id, format!("{{\"body\":\"{}\"}}", "x".repeat(64)))
                        })
                        .collect();
                    tx.execute_batch_update(statements).await
                })
                .await?;
        }
        Ok(())
    }

    /// `SELECT COUNT(*) …` with GoogleSQL parameters `@lo` and `@hi` (the bounds of `ids`), as
    /// one number.
    pub(crate) async fn count(
        &self,
        sql: &str,
        ids: &std::ops::Range<i64>,
    ) -> Result<i64, BoxError> {
        self.count_of(
            Statement::builder(sql)
                .add_param("lo", ids.start)
                .add_param("hi", ids.end)
                .build(),
        )
        .await
    }

    /// A count as one number.
    async fn count_of(&self, statement: Statement) -> Result<i64, BoxError> {
        let mut rows = self
            .client()
            .single_use()
            .build()
            .execute_query(statement)
            .await?;
        match rows.next().await {
            Some(row) => Ok(row?.get::<i64>(0)?),
            None => Ok(0),
        }
    }

    /// Checks that every id in `ids` has exactly one effect and nothing is left to consume.
    pub(crate) async fn verify(
        &self,
        ids: &std::ops::Range<i64>,
        outbox: bool,
    ) -> Result<(), BoxError> {
        let sql = self.sql();
        let effects = self
            .count_of(sql.count_ids("BenchEffects", false, ids))
            .await?;
        let left = if outbox {
            self.count_of(sql.count_ids("Outbox", true, ids)).await?
        } else {
            self.count_of(sql.count_ids("BenchJobs", false, ids))
                .await?
        };
        let expected = ids.end - ids.start;
        if effects != expected || left != 0 {
            return Err(format!(
                "ids {ids:?}: {effects} effects (expected {expected}), {left} left unconsumed"
            )
            .into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_gets_its_own_names_and_parameters_and_literals_keep_their_case() {
        let pg = Sql(Dialect::PostgreSql);
        assert_eq!(
            pg.count_ids("Outbox", true, &(0..10)).sql(),
            "SELECT COUNT(*) FROM outbox WHERE id >= $1 AND id < $2 AND status != 'DONE'"
        );
        assert_eq!(
            pg.ack(1).sql(),
            "DELETE FROM benchjobs WHERE id = $1 ASSERT_ROWS_MODIFIED 1"
        );
        let google = Sql(Dialect::GoogleSql);
        assert_eq!(
            google.count_ids("BenchJobs", false, &(0..10)).sql(),
            "SELECT COUNT(*) FROM BenchJobs WHERE Id >= @lo AND Id < @hi"
        );
        assert_eq!(
            google.set_status(3, "DONE").sql(),
            "UPDATE Outbox SET Status = 'DONE' WHERE Id = @id"
        );
    }
}
