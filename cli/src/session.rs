//! A connection to one database, in its dialect, and the reads every command uses.

use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient};
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::value::Value;
use spanner_queues::{Database, DatabaseBuilder, Dialect, tables};

use crate::error::{CliError, EXIT_NOT_FOUND};
use crate::input::database_path;

/// A connection to one database.
#[derive(Debug)]
pub(crate) struct Session {
    database: Database,
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
        Self::open(path, Database::builder(path)).await
    }

    /// Opens database `path` with `builder` (tests give their emulator's client): the one read
    /// of the connection checks that the database exists and learns its dialect.
    pub(crate) async fn open(path: &str, builder: DatabaseBuilder) -> Result<Self, CliError> {
        // Checked on the data plane: the emulator's REST gateway answers GetDatabase for a
        // missing database with INTERNAL ("failed to marshal error message"), not NOT_FOUND.
        let database = builder.connect().await.map_err(|e| {
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
        Ok(Self { database })
    }

    /// The database path, `projects/P/instances/I/databases/D`.
    pub(crate) fn path(&self) -> &str {
        self.database.path()
    }

    /// The database's SQL dialect.
    pub(crate) fn dialect(&self) -> Dialect {
        self.database.dialect()
    }

    /// The SDK's handle on the database.
    pub(crate) fn database(&self) -> &Database {
        &self.database
    }

    /// The data-plane client.
    fn client(&self) -> &DatabaseClient {
        self.database.client()
    }

    /// The admin client.
    pub(crate) fn admin(&self) -> &DatabaseAdmin {
        self.database.admin()
    }

    pub(crate) fn postgres(&self) -> bool {
        self.dialect() == Dialect::PostgreSql
    }

    /// A column name as written in this dialect's SQL (PostgreSQL: quoted, as
    /// `information_schema` spells it).
    pub(crate) fn column_sql(&self, name: &str) -> String {
        match self.dialect() {
            Dialect::GoogleSql => name.to_owned(),
            _ => format!("\"{}\"", name.replace('"', "\"\"")),
        }
    }

    /// Refuses what PostgreSQL-dialect databases cannot do.
    pub(crate) fn require_google_sql(&self, what: &str, why: &str) -> Result<(), CliError> {
        if self.postgres() {
            return Err(CliError::usage(format!(
                "{what} is not available on the PostgreSQL-dialect database {}: {why}",
                self.path()
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
                .client()
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
                .client()
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
        self.admin()
            .get_database_ddl()
            .set_database(self.path())
            .send()
            .await
            .map(|r| r.statements)
            .map_err(|e| CliError::from_error(&format!("reading the schema of {}", self.path()), e))
    }

    /// Whether table `table` exists.
    async fn table_exists(&self, table: &str) -> Result<bool, CliError> {
        let statement = match self.dialect() {
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

    /// Whether the worker's dead-letter table exists.
    pub(crate) async fn has_dead_letter_table(&self) -> Result<bool, CliError> {
        self.table_exists(tables::dead_letters(self.dialect()))
            .await
    }

    /// Fails with "not found" unless the worker's dead-letter table exists.
    pub(crate) async fn require_dead_letter_table(&self) -> Result<(), CliError> {
        if self.has_dead_letter_table().await? {
            Ok(())
        } else {
            Err(CliError::not_found(format!(
                "{} has no dead-letter table {}: no worker was set up there \
                 (`spanner-queues schema` prints its DDL)",
                self.path(),
                tables::dead_letters(self.dialect())
            )))
        }
    }
}
