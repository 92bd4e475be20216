//! [`SchemaSetup`]: the one way to create and check what the SDK needs in a database, and your
//! own DDL with it.

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;

use crate::database::Database;
use crate::ddl::{QueueColumn, apply_ddl, check_columns, differences};
use crate::dialect::Dialect;
use crate::error::{Code, Error, Result};
use crate::ident::QueueName;
use crate::message::QueueMessage;
use crate::outcome::CommitMarkers;
use crate::query::query_rows;
use crate::schema::QueueSchema;

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

/// Everything a set of message types needs in a database, and your own DDL: the queues, the
/// worker's tables and the commit-marker table, created if missing and checked against the
/// types.
///
/// ```no_run
/// use spanner_queues::{Database, SchemaSetup};
/// # use spanner_queues::QueueMessage;
/// # #[derive(QueueMessage)]
/// # #[queue(name = "OrderEmails")]
/// # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
///
/// # async fn f(db: &Database) -> spanner_queues::Result<()> {
/// SchemaSetup::new()
///     .with_ddl(["CREATE TABLE IF NOT EXISTS Orders (OrderId INT64 NOT NULL) PRIMARY KEY (OrderId)"])
///     .with_queue::<OrderEmail>()
///     .with_worker_tables()
///     .with_commit_markers()
///     .apply(db) // creates what is missing, then checks everything
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct SchemaSetup {
    ddl: Vec<String>,
    queues: Vec<QueueEntry>,
    worker_tables: bool,
    commit_markers: Option<CommitMarkers>,
}

impl SchemaSetup {
    /// Nothing yet: add DDL, queues and tables with the `with_*` methods.
    pub fn new() -> Self {
        Self::default()
    }

    /// Your own DDL statements (tables a queue is interleaved in, the tables your handlers
    /// write), in the database's dialect. They come first, in the order given, and are applied
    /// as they are: write them `IF NOT EXISTS` when [`apply`](Self::apply) runs more than once.
    pub fn with_ddl<I, S>(mut self, statements: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.ddl.extend(statements.into_iter().map(Into::into));
        self
    }

    /// The queue of message type `M` ([`QueueMessage::schema`]), checked against `M`; for an
    /// ordered type ([`QueueMessage::ORDERED`]) also the sequence counter table.
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

    /// The worker's attempt and dead-letter tables ([`tables::attempts`](crate::tables::attempts),
    /// [`tables::dead_letters`](crate::tables::dead_letters)).
    pub fn with_worker_tables(mut self) -> Self {
        self.worker_tables = true;
        self
    }

    /// The commit-marker table of guarded transactions
    /// ([`tables::commit_markers`](crate::tables::commit_markers)), with the default retention
    /// ([`CommitMarkers::new`]).
    pub fn with_commit_markers(self) -> Self {
        self.with_commit_markers_as(CommitMarkers::new())
    }

    /// The commit-marker table as `markers` describes it (retention).
    pub fn with_commit_markers_as(mut self, markers: CommitMarkers) -> Self {
        self.commit_markers = Some(markers);
        self
    }

    /// The `GRANT` statements that give `roles` what they need on this setup's queues and
    /// tables, in `dialect` (see [`grants`](crate::grants)): the sequence counter table's and
    /// the commit-marker table's grants are included when this setup has them.
    ///
    /// ```
    /// use spanner_queues::{Dialect, SchemaSetup, grants::Roles};
    ///
    /// let roles = Roles::builder().with_worker_role("worker").build()?;
    /// let grants = SchemaSetup::new().with_worker_tables().grant_statements(Dialect::GoogleSql, &roles);
    /// assert!(grants.iter().any(|g| g.starts_with("GRANT") && g.contains("worker")));
    /// # Ok::<(), spanner_queues::Error>(())
    /// ```
    pub fn grant_statements(&self, dialect: Dialect, roles: &crate::grants::Roles) -> Vec<String> {
        let ordered = self.queues.iter().any(|entry| entry.ordered);
        roles
            .clone()
            .for_tables(ordered, self.commit_markers.is_some())
            .grant_statements(dialect, self.queues.iter().map(|entry| &entry.queue))
    }

    /// The DDL in `dialect`: your statements as given, then every object of the SDK in its
    /// `IF NOT EXISTS` form, so that applying it to a database that already has some of the
    /// objects creates only the others.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a marker retention out of range; a queue schema that
    /// cannot be rendered in `dialect`.
    pub fn statements(&self, dialect: Dialect) -> Result<Vec<String>> {
        let mut out = self.ddl.clone();
        for entry in &self.queues {
            out.push(entry.schema.create_if_not_exists_statement(dialect)?);
        }
        if self.queues.iter().any(|entry| entry.ordered) {
            out.extend(crate::ordering::schema_statements(dialect));
        }
        if self.worker_tables {
            out.extend(crate::worker::tables::schema_statements(dialect));
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

    /// Creates what is missing ([`statements`](Self::statements) in the database's dialect, one
    /// schema change), waits for it, then [`check`](Self::check)s everything: the one call to
    /// make at deployment or start-up. Existing objects are left as they are.
    ///
    /// # Errors
    /// As [`statements`](Self::statements) and [`check`](Self::check); Spanner's error if the
    /// DDL is refused.
    ///
    /// # Cancellation
    /// Dropping the future after the schema change was sent does not stop it.
    pub async fn apply(&self, db: &Database) -> Result<()> {
        apply_ddl(db.admin(), db.path(), self.statements(db.dialect())?).await?;
        self.check(db).await
    }

    /// Checks that every object of the SDK exists and fits: each queue against its message type
    /// (key columns, payload, `DeliverTime`), the worker's tables and the commit-marker table
    /// (readable with the columns the SDK uses). Your own DDL is not checked.
    ///
    /// # Errors
    /// The first problem found: [`Error::QueueNotFound`], [`Error::SchemaDrift`],
    /// [`Error::InvalidSchema`] for a missing or different table, or a Spanner error.
    pub async fn check(&self, db: &Database) -> Result<()> {
        let (client, dialect) = (db.client(), db.dialect());
        for entry in &self.queues {
            check_columns(client, dialect, &entry.queue, entry.differences).await?;
        }
        if self.worker_tables {
            check_worker_tables(client, dialect).await?;
        }
        if self.commit_markers.is_some() {
            check_markers(client, dialect).await?;
        }
        Ok(())
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
             SchemaSetup::with_commit_markers",
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
             apply SchemaSetup::with_worker_tables"
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
}
