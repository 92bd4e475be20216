//! Clients, databases and test data.

use std::sync::atomic::{AtomicU32, Ordering};

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use spanner_queues::{Dialect, Producer, QueueMessage};

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

/// The emulator and a root client on it.
#[derive(Debug)]
pub(crate) struct Bench {
    pub(crate) emulator: Emulator,
    /// Data client through the counting proxy.
    pub(crate) spanner: Spanner,
    /// Admin client straight to the front (admin clients speak REST, the proxy gRPC only).
    admin: Spanner,
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
        Ok(Self {
            emulator,
            spanner,
            admin: admin_client,
            databases: AtomicU32::new(0),
        })
    }

    /// A fresh database with the queue, the worker's tables, the effects table and the outbox.
    pub(crate) async fn database(&self) -> Result<Database, BoxError> {
        self.database_with(Vec::new()).await
    }

    /// [`database`](Self::database), with `extra` statements after the common ones.
    pub(crate) async fn database_with(&self, extra: Vec<String>) -> Result<Database, BoxError> {
        let id = format!("bench{}", self.databases.fetch_add(1, Ordering::Relaxed));
        let mut ddl = vec![
            BenchJob::schema().create_statement(Dialect::GoogleSql)?,
            EFFECTS_DDL.to_owned(),
            OUTBOX_DDL.to_owned(),
        ];
        ddl.extend(spanner_queues::worker::schema_statements(
            Dialect::GoogleSql,
        ));
        ddl.extend(extra);
        let admin = self.admin.database_admin_builder().build().await?;
        admin
            .create_database()
            .set_parent(INSTANCE)
            .set_create_statement(format!("CREATE DATABASE `{id}`"))
            .set_extra_statements(ddl)
            .poller()
            .until_done()
            .await?;
        let path = format!("{INSTANCE}/databases/{id}");
        let client = self.spanner.database_client(&path).build().await?;
        Ok(Database { path, client })
    }

    /// Drops a database (the emulator holds at most 10 per instance).
    pub(crate) async fn drop_database(&self, db: Database) -> Result<(), BoxError> {
        let admin = self.admin.database_admin_builder().build().await?;
        admin.drop_database().set_database(db.path).send().await?;
        Ok(())
    }

    /// A new client (its own connections) for `db`, as a separate process would have.
    pub(crate) async fn new_client(&self, db: &Database) -> Result<DatabaseClient, BoxError> {
        let spanner = client(&self.emulator.endpoint.to_string()).await?;
        Ok(spanner.database_client(&db.path).build().await?)
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
    pub(crate) path: String,
    pub(crate) client: DatabaseClient,
}

impl Database {
    /// Sends jobs `ids` to the queue, 100 per transaction.
    pub(crate) async fn fill_queue(&self, ids: std::ops::Range<i64>) -> Result<(), BoxError> {
        let producer = Producer::new(self.client.clone());
        let jobs: Vec<BenchJob> = ids.map(BenchJob::new).collect();
        for chunk in jobs.chunks(100) {
            producer.send_many(chunk).await?;
        }
        Ok(())
    }

    /// Inserts rows `ids` into the polling outbox with status `NEW`, 100 per transaction.
    pub(crate) async fn fill_outbox(&self, ids: std::ops::Range<i64>) -> Result<(), BoxError> {
        let ids: Vec<i64> = ids.collect();
        for chunk in ids.chunks(100) {
            self.client
                .read_write_transaction()
                .build()
                .run(async |tx| {
                    let statements: Vec<Statement> = chunk
                        .iter()
                        .map(|id| {
                            Statement::builder(
                                "INSERT INTO Outbox (Id, Payload, Status) VALUES (@id, @payload, 'NEW')",
                            )
                            .add_param("id", *id)
                            .add_param("payload", format!("{{\"body\":\"{}\"}}", "x".repeat(64)))
                            .build()
                        })
                        .collect();
                    tx.execute_batch_update(statements).await
                })
                .await?;
        }
        Ok(())
    }

    /// `SELECT COUNT(*) …` as one number.
    pub(crate) async fn count(
        &self,
        sql: &str,
        ids: &std::ops::Range<i64>,
    ) -> Result<i64, BoxError> {
        let mut rows = self
            .client
            .single_use()
            .build()
            .execute_query(
                Statement::builder(sql)
                    .add_param("lo", ids.start)
                    .add_param("hi", ids.end)
                    .build(),
            )
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
        let effects = self
            .count(
                "SELECT COUNT(*) FROM BenchEffects WHERE Id >= @lo AND Id < @hi",
                ids,
            )
            .await?;
        let left = if outbox {
            self.count(
                "SELECT COUNT(*) FROM Outbox WHERE Id >= @lo AND Id < @hi AND Status != 'DONE'",
                ids,
            )
            .await?
        } else {
            self.count(
                "SELECT COUNT(*) FROM BenchJobs WHERE Id >= @lo AND Id < @hi",
                ids,
            )
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
