//! A connection to one database, in its dialect, and the reads and writes every command uses.

use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::value::Value;
use spanner_queues::Dialect;
use spanner_queues::worker::{DEAD_LETTER_TABLE, DEAD_LETTER_TABLE_POSTGRESQL};

use crate::error::{CliError, EXIT_NOT_FOUND, chain};
use crate::input::database_path;

/// A connection to one database.
#[derive(Debug)]
pub(crate) struct Session {
    path: String,
    db: DatabaseClient,
    /// The same client with the database's dialect, for the SDK's API.
    database: spanner_queues::Database,
    dialect: Dialect,
    admin: DatabaseAdmin,
}

impl Session {
    /// Connects (honouring `SPANNER_EMULATOR_HOST`) and checks that the database exists.
    pub(crate) async fn connect(database: Option<&str>) -> Result<Self, CliError> {
        let path = database.filter(|d| !d.is_empty()).ok_or_else(|| {
            CliError::usage(
                "no database: pass --database projects/P/instances/I/databases/D or set \
                 SPANNER_QUEUES_DATABASE",
            )
        })?;
        database_path(path)?;
        let spanner = Spanner::builder().build().await.map_err(|e| {
            CliError::failed(format!("cannot build a Spanner client: {}", chain(&e)))
        })?;
        Self::open(path, &spanner).await
    }

    /// Opens database `path` with an existing client (tests give their emulator's).
    pub(crate) async fn open(path: &str, spanner: &Spanner) -> Result<Self, CliError> {
        database_path(path)?;
        let admin = spanner
            .database_admin_builder()
            .build()
            .await
            .map_err(|e| {
                CliError::failed(format!(
                    "cannot build a Spanner admin client: {}",
                    chain(&e)
                ))
            })?;
        let db = spanner
            .database_client(path)
            .build()
            .await
            .map_err(|e| CliError::from_error(&format!("opening database {path}"), e))?;
        // Checked on the data plane: the emulator's REST gateway answers GetDatabase for a
        // missing database with INTERNAL ("failed to marshal error message"), not NOT_FOUND.
        // The same read learns the database's dialect.
        let database = spanner_queues::Database::connect(db.clone())
            .await
            .map_err(|e| {
                let error = CliError::from_error(&format!("opening database {path}"), e);
                if error.code == EXIT_NOT_FOUND {
                    CliError::not_found(format!("database {path} not found"))
                } else {
                    error
                }
            })?;
        // Statements are written for GoogleSQL or, in the other arm, PostgreSQL.
        if !matches!(database.dialect(), Dialect::GoogleSql | Dialect::PostgreSql) {
            return Err(CliError::usage(format!(
                "database {path} has a SQL dialect this command line does not know: {:?}",
                database.dialect()
            )));
        }
        Ok(Self {
            path: path.to_owned(),
            db,
            dialect: database.dialect(),
            database,
            admin,
        })
    }

    /// The database path, `projects/P/instances/I/databases/D`.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The database's SQL dialect.
    pub(crate) fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The SDK's handle on the database.
    pub(crate) fn database(&self) -> &spanner_queues::Database {
        &self.database
    }

    /// The data-plane client.
    pub(crate) fn client(&self) -> &DatabaseClient {
        &self.db
    }

    /// The admin client.
    pub(crate) fn admin(&self) -> &DatabaseAdmin {
        &self.admin
    }

    pub(crate) fn postgres(&self) -> bool {
        self.dialect == Dialect::PostgreSql
    }

    /// The worker's dead-letter table in this database's dialect.
    pub(crate) fn dead_letter_table(&self) -> &'static str {
        match self.dialect {
            Dialect::GoogleSql => DEAD_LETTER_TABLE,
            _ => DEAD_LETTER_TABLE_POSTGRESQL,
        }
    }

    /// The dead-letter table's queue-name column.
    pub(crate) fn queue_name_column(&self) -> &'static str {
        match self.dialect {
            Dialect::GoogleSql => "QueueName",
            _ => "queue_name",
        }
    }

    /// A column name as written in this dialect's SQL (PostgreSQL: quoted, as
    /// `information_schema` spells it).
    pub(crate) fn column_sql(&self, name: &str) -> String {
        match self.dialect {
            Dialect::GoogleSql => name.to_owned(),
            _ => format!("\"{}\"", name.replace('"', "\"\"")),
        }
    }

    /// Refuses what PostgreSQL-dialect databases cannot do.
    pub(crate) fn require_google_sql(&self, what: &str, why: &str) -> Result<(), CliError> {
        if self.postgres() {
            return Err(CliError::usage(format!(
                "{what} is not available on the PostgreSQL-dialect database {}: {why}",
                self.path
            )));
        }
        Ok(())
    }

    /// The rows of a query, as values.
    pub(crate) async fn rows(
        &self,
        statement: Statement,
        doing: &str,
    ) -> Result<Vec<Vec<Value>>, CliError> {
        let read = async {
            let mut rows = self
                .db
                .single_use()
                .build()
                .execute_query(statement)
                .await?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().await {
                out.push(row?.into_values());
            }
            Ok::<_, google_cloud_spanner::Error>(out)
        };
        read.await.map_err(|e| CliError::from_error(doing, e))
    }

    /// The rows of a query, typed.
    pub(crate) async fn query<T: google_cloud_spanner::result::FromRow>(
        &self,
        statement: Statement,
        doing: &str,
    ) -> Result<Vec<T>, CliError> {
        let read = async {
            let mut rows = self
                .db
                .single_use()
                .build()
                .execute_query(statement)
                .await?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().await {
                out.push(row?.try_into_record::<T>()?);
            }
            Ok::<_, google_cloud_spanner::Error>(out)
        };
        read.await.map_err(|e| CliError::from_error(doing, e))
    }

    /// The database's DDL.
    pub(crate) async fn ddl(&self) -> Result<Vec<String>, CliError> {
        self.admin
            .get_database_ddl()
            .set_database(&self.path)
            .send()
            .await
            .map(|r| r.statements)
            .map_err(|e| CliError::from_error(&format!("reading the schema of {}", self.path), e))
    }

    /// Whether table `table` exists.
    pub(crate) async fn table_exists(&self, table: &str) -> Result<bool, CliError> {
        let statement = match self.dialect {
            Dialect::GoogleSql => Statement::builder(
                "SELECT COUNT(*) FROM INFORMATION_SCHEMA.TABLES \
                 WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table",
            )
            .add_param("table", table.to_owned()),
            _ => Statement::builder(
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = 'public' AND table_name = $1",
            )
            .add_param("p1", table.to_owned()),
        };
        let found: Vec<(i64,)> = self.query(statement.build(), "looking up a table").await?;
        Ok(found.first().is_some_and(|(n,)| *n > 0))
    }

    /// Fails with "not found" unless the worker's dead-letter table exists.
    pub(crate) async fn require_dead_letter_table(&self) -> Result<(), CliError> {
        let table = self.dead_letter_table();
        if self.table_exists(table).await? {
            Ok(())
        } else {
            Err(CliError::not_found(format!(
                "{} has no dead-letter table {table}: no worker was set up there \
                 (`spanner-queues schema` prints its DDL)",
                self.path
            )))
        }
    }

    /// Runs one DML statement in a read-write transaction of its own.
    pub(crate) async fn commit(&self, statement: Statement) -> Result<(), CliError> {
        let statement = &statement;
        spanner_queues::transaction::builder(&self.db)
            .run(move |tx| async move {
                tx.execute_update(statement.clone()).await?;
                Ok(())
            })
            .await
            .map_err(|e| CliError::from_error("sending", e))
    }
}
