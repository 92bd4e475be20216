//! Applying queue schemas and checking them against message types at start-up.

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use tracing::Instrument as _;

pub use crate::ddl::{QueueColumn, apply_ddl, check_queue, database_dialect, queue_columns};

use crate::database::{AsDatabase, Database};
use crate::ddl::{check_columns, differences};
use crate::dialect::Dialect;
use crate::error::{Code, Error, Result};
use crate::ident::QueueName;
use crate::message::QueueMessage;
use crate::outcome::CommitMarkers;
use crate::query::query_rows;
use crate::schema::QueueSchema;

/// Creates the queue of message type `M` if it does not exist (`CREATE QUEUE IF NOT EXISTS`,
/// from [`QueueMessage::schema`], in the database's dialect) and waits for it.
///
/// # Errors
/// Spanner's error if the database cannot be read or the DDL is refused; a schema error if
/// the type has no form in the database's dialect.
pub async fn ensure_queue<M: QueueMessage>(admin: &DatabaseAdmin, database: &str) -> Result<()> {
    let dialect = database_dialect(admin, database).await?;
    let statement = M::schema().create_if_not_exists_statement(dialect)?;
    apply_ddl(admin, database, [statement]).await
}

/// A queue of a [`SchemaSetup`]: its DDL and how to check it against its message type.
#[derive(Clone)]
struct QueueEntry {
    schema: QueueSchema,
    queue: QueueName,
    differences: fn(&[QueueColumn], Dialect) -> Vec<String>,
    /// An ordered queue: its sends need the sequence counter table.
    ordered: bool,
}

impl std::fmt::Debug for QueueEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueEntry")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// Everything a set of message types needs in a database: their queues, the worker's tables
/// and the commit-marker table, created if missing and checked against the types, in one call.
///
/// ```no_run
/// use google_cloud_spanner::client::Spanner;
/// use spanner_queues::admin::SchemaSetup;
/// # use spanner_queues::QueueMessage;
/// # #[derive(QueueMessage)]
/// # #[queue(name = "OrderEmails")]
/// # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let spanner = Spanner::builder().build().await?;
/// let database = "projects/p/instances/i/databases/orders";
/// SchemaSetup::new()
///     .with_queue::<OrderEmail>()
///     .with_worker_tables()
///     .with_commit_markers()
///     .ensure(&spanner, database) // creates what is missing, then checks everything
///     .await?;
/// # Ok(()) }
/// ```
///
/// [`create_database`] and [`create_database_on_emulator`] create a database with the same
/// objects, so that the admin client crates are not needed for the common path.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct SchemaSetup {
    queues: Vec<QueueEntry>,
    worker_tables: bool,
    commit_markers: Option<CommitMarkers>,
}

impl SchemaSetup {
    /// Nothing yet: add queues and tables with the `with_*` methods.
    pub fn new() -> Self {
        Self::default()
    }

    /// The queue of message type `M` ([`QueueMessage::schema`]), checked with [`check_queue`];
    /// for an ordered type ([`QueueMessage::ORDERED`]) also the sequence counter table
    /// ([`ordering::schema_statements`](crate::ordering::schema_statements)).
    pub fn with_queue<M: QueueMessage>(mut self) -> Self {
        self.queues.retain(|q| q.queue != M::QUEUE);
        self.queues.push(QueueEntry {
            schema: M::schema(),
            queue: M::QUEUE,
            differences: differences::<M>,
            ordered: M::ORDERED,
        });
        self
    }

    /// The worker's attempt and dead-letter tables ([`worker::schema_statements`](crate::worker::schema_statements)).
    pub fn with_worker_tables(mut self) -> Self {
        self.worker_tables = true;
        self
    }

    /// The commit-marker table of guarded transactions, with the default retention
    /// ([`CommitMarkers::new`]).
    pub fn with_commit_markers(self) -> Self {
        self.with_commit_markers_as(CommitMarkers::new())
    }

    /// The commit-marker table as `markers` describes it (retention).
    pub fn with_commit_markers_as(mut self, markers: CommitMarkers) -> Self {
        self.commit_markers = Some(markers);
        self
    }

    /// The DDL in `dialect`, every statement in its `IF NOT EXISTS` form, so that applying it
    /// to a database that already has some of the objects creates only the others.
    ///
    /// # Errors
    /// A queue schema that cannot be rendered in `dialect`.
    pub fn statements(&self, dialect: Dialect) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in &self.queues {
            out.push(entry.schema.create_if_not_exists_statement(dialect)?);
        }
        if self.queues.iter().any(|entry| entry.ordered) {
            out.extend(crate::ordering::schema_statements(dialect));
        }
        if self.worker_tables {
            out.extend(crate::worker::schema_statements(dialect));
        }
        if let Some(markers) = &self.commit_markers {
            crate::bounds::in_range(
                "retention_days",
                markers.retention_days(),
                1..=CommitMarkers::MAX_RETENTION_DAYS,
            )?;
            out.push(markers.create_if_not_exists_statement(dialect));
        }
        Ok(out)
    }

    /// Creates the objects that are missing (`IF NOT EXISTS`, in the database's dialect) and
    /// waits for the schema change. Existing objects are left as they are:
    /// [`check`](Self::check) tells whether they fit. Returns the database's dialect.
    ///
    /// # Errors
    /// See [`statements`](Self::statements); Spanner's error if the database cannot be read or
    /// the DDL is refused.
    pub async fn apply(&self, admin: &DatabaseAdmin, database: &str) -> Result<Dialect> {
        let dialect = database_dialect(admin, database).await?;
        apply_ddl(admin, database, self.statements(dialect)?).await?;
        Ok(dialect)
    }

    /// Checks that every object exists and fits: each queue as [`check_queue`] does, the
    /// worker's tables and the commit-marker table (readable with the columns the SDK uses).
    ///
    /// # Errors
    /// The first problem found: [`Error::QueueNotFound`], [`Error::SchemaDrift`],
    /// [`Error::InvalidSchema`] for a missing or different table, or a Spanner error.
    pub async fn check<D: AsDatabase + ?Sized>(&self, db: &D) -> Result<()> {
        let (db, dialect) = (db.database_client(), db.database_dialect());
        for entry in &self.queues {
            check_columns(db, dialect, &entry.queue, entry.differences).await?;
        }
        if self.worker_tables {
            check_worker_tables(db, dialect).await?;
        }
        if self.commit_markers.is_some() {
            check_markers(db, dialect).await?;
        }
        Ok(())
    }

    /// [`apply`](Self::apply), then [`check`](Self::check): the one call to make at deployment
    /// or start-up. `database` is `projects/P/instances/I/databases/D`.
    ///
    /// # Errors
    /// As [`apply`](Self::apply) and [`check`](Self::check).
    pub async fn ensure(&self, spanner: &Spanner, database: &str) -> Result<()> {
        let admin = spanner
            .database_admin_builder()
            .build()
            .await
            .map_err(client_error)?;
        let dialect = self.apply(&admin, database).await?;
        let db = spanner.database_client(database).build().await?;
        self.check(&Database::new(db, dialect)).await
    }
}

async fn check_markers(db: &DatabaseClient, dialect: Dialect) -> Result<()> {
    let sql = match dialect {
        Dialect::GoogleSql => format!(
            "SELECT Id, CommittedAt FROM {} WHERE FALSE",
            CommitMarkers::TABLE
        ),
        Dialect::PostgreSql => format!(
            "SELECT id, committed_at FROM {} WHERE FALSE",
            CommitMarkers::TABLE_POSTGRESQL
        ),
    };
    check_readable(db, sql, || {
        format!(
            "the commit-marker table {} is missing or differs: apply \
             CommitMarkers::create_statement(Dialect::{dialect:?})",
            CommitMarkers::table(dialect)
        )
    })
    .await
}

async fn check_worker_tables(db: &DatabaseClient, dialect: Dialect) -> Result<()> {
    let (attempts, dead) = crate::worker::tables::table_names(dialect);
    let digest = crate::worker::tables::column(dialect, "KeyDigest");
    let sql = format!(
        "SELECT (SELECT COUNT({digest}) FROM {attempts} WHERE FALSE), \
         (SELECT COUNT({digest}) FROM {dead} WHERE FALSE)"
    );
    check_readable(db, sql, || {
        format!(
            "the worker tables {attempts} and {dead} are missing or differ: \
             apply spanner_queues::worker::schema_statements(Dialect::{dialect:?})"
        )
    })
    .await
}

/// Runs `sql` (a query returning nothing), turning "no such table or column" into
/// [`Error::InvalidSchema`] with `fix`'s text.
async fn check_readable(
    db: &DatabaseClient,
    sql: String,
    fix: impl FnOnce() -> String,
) -> Result<()> {
    let result = query_rows(db, Statement::builder(sql).build(), |_| Ok(())).await;
    match result.map(drop) {
        Err(error) if matches!(error.code(), Some(Code::InvalidArgument | Code::NotFound)) => {
            Err(Error::invalid_schema(
                None,
                format!("{} ({})", fix(), crate::telemetry::ErrorChain(&error)),
            ))
        }
        other => other,
    }
}

/// An admin client that could not be built (no credentials, a bad endpoint).
fn client_error(error: google_cloud_gax::client_builder::Error) -> Error {
    Error::Precondition {
        reason: format!("cannot build a Spanner admin client: {error}"),
    }
}

/// The parts of `projects/P/instances/I/databases/D`: (`projects/P/instances/I`, `D`).
fn split_database_path(database: &str) -> Result<(&str, &str)> {
    let bad = || Error::InvalidSetting {
        setting: "database",
        reason: format!(
            "`{database}` is not a database path of the form projects/P/instances/I/databases/D"
        ),
    };
    let (instance, id) = database.rsplit_once("/databases/").ok_or_else(bad)?;
    let parts: Vec<&str> = instance.split('/').collect();
    let well_formed = matches!(parts.as_slice(), ["projects", p, "instances", i] if !p.is_empty() && !i.is_empty());
    if !well_formed || id.is_empty() || id.contains('/') {
        return Err(bad());
    }
    Ok((instance, id))
}

/// Creates database `database` (`projects/P/instances/I/databases/D`) of `dialect` on an
/// existing instance with everything `setup` lists, waits until it is ready, and checks it.
/// Returns a handle on it.
///
/// # Errors
/// [`Error::InvalidSetting`] for a malformed path; Spanner's error if the database exists
/// already (`ALREADY_EXISTS`), the instance is missing (`NOT_FOUND`) or the DDL is refused.
pub async fn create_database(
    spanner: &Spanner,
    database: &str,
    dialect: Dialect,
    setup: &SchemaSetup,
) -> Result<Database> {
    use google_cloud_spanner_admin_database_v1::model::DatabaseDialect;
    let (instance, id) = split_database_path(database)?;
    let statements = setup.statements(dialect)?;
    let admin = spanner
        .database_admin_builder()
        .build()
        .await
        .map_err(client_error)?;
    let span = tracing::info_span!("spanner_queues.create_database", database);
    let request = admin.create_database().set_parent(instance);
    let request = match dialect {
        Dialect::GoogleSql => request
            .set_create_statement(format!("CREATE DATABASE `{id}`"))
            .set_extra_statements(statements.clone()),
        // Spanner takes no extra statements with a PostgreSQL database's creation: they
        // follow as a schema change.
        Dialect::PostgreSql => request
            .set_create_statement(format!("CREATE DATABASE \"{id}\""))
            .set_database_dialect(DatabaseDialect::Postgresql),
    };
    request
        .poller()
        .until_done()
        .instrument(span.clone())
        .await?;
    if dialect == Dialect::PostgreSql {
        apply_ddl(&admin, database, statements)
            .instrument(span)
            .await?;
    }
    let db = Database::new(spanner.database_client(database).build().await?, dialect);
    setup.check(&db).await?;
    Ok(db)
}

/// Like [`create_database`], for an emulator: first creates the instance of `database` with the
/// emulator's instance configuration (`projects/P/instanceConfigs/emulator-config`) if it does
/// not exist. Use it against the official emulator or `spanner-queues-emulator`; on Cloud
/// Spanner instances are created with their own capacity and edition, not by this crate.
///
/// # Errors
/// As [`create_database`]; Spanner's error if the instance cannot be created.
pub async fn create_database_on_emulator(
    spanner: &Spanner,
    database: &str,
    dialect: Dialect,
    setup: &SchemaSetup,
) -> Result<Database> {
    let (instance, _) = split_database_path(database)?;
    let (project, instance_id) = instance
        .strip_prefix("projects/")
        .and_then(|rest| rest.split_once("/instances/"))
        .expect("split_database_path checked the form");
    let admin = spanner
        .instance_admin_builder()
        .build()
        .await
        .map_err(client_error)?;
    let model = google_cloud_spanner_admin_instance_v1::model::Instance::new()
        .set_name(instance)
        .set_config(format!(
            "projects/{project}/instanceConfigs/emulator-config"
        ))
        .set_display_name(instance_id)
        .set_node_count(1);
    let created = admin
        .create_instance()
        .set_parent(format!("projects/{project}"))
        .set_instance_id(instance_id)
        .set_instance(model)
        .poller()
        .until_done()
        .await;
    match created.map_err(Error::from) {
        Ok(_) => {}
        Err(error) if error.code() == Some(Code::AlreadyExists) => {}
        Err(error) => return Err(error),
    }
    create_database(spanner, database, dialect, setup).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_retention_is_range_checked_before_any_ddl() {
        for days in [0, CommitMarkers::MAX_RETENTION_DAYS + 1] {
            let setup = SchemaSetup::new()
                .with_commit_markers_as(CommitMarkers::new().with_retention_days(days));
            for dialect in [Dialect::GoogleSql, Dialect::PostgreSql] {
                match setup.statements(dialect) {
                    Err(Error::InvalidSetting { setting, .. }) => {
                        assert_eq!(setting, "retention_days");
                    }
                    other => panic!("{days} days: {other:?}"),
                }
            }
        }
        for days in [1, CommitMarkers::MAX_RETENTION_DAYS] {
            let setup = SchemaSetup::new()
                .with_commit_markers_as(CommitMarkers::new().with_retention_days(days));
            let statements = setup.statements(Dialect::GoogleSql).expect("valid");
            assert!(
                statements[0].contains(&format!("INTERVAL {days} DAY")),
                "{statements:?}"
            );
        }
    }

    #[test]
    fn database_paths_are_split_or_refused() {
        assert_eq!(
            split_database_path("projects/p/instances/i/databases/d").expect("ok"),
            ("projects/p/instances/i", "d")
        );
        for bad in [
            "d",
            "projects/p/instances/i/databases/",
            "projects/p/databases/d",
            "projects//instances/i/databases/d",
            "projects/p/instances/i/databases/d/x",
        ] {
            assert!(split_database_path(bad).is_err(), "{bad}");
        }
    }
}
