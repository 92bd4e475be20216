//! Applying queue schemas and checking them against message types at start-up.

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;

use tracing::Instrument as _;

use crate::codec::Codec;
use crate::error::{Code, Error, Result};
use crate::ident::QueueName;
use crate::message::QueueMessage;
use crate::outcome::CommitMarkers;
use crate::schema::{Dialect, QueueSchema, SystemColumn};
use crate::types::{PayloadType, SortOrder, SpannerType};

/// Applies DDL statements to `database` (`projects/P/instances/I/databases/D`) and waits until
/// the schema change has finished.
///
/// # Errors
/// [`Error::Spanner`] with Spanner's error if any statement is refused.
pub async fn apply_ddl<I, S>(admin: &DatabaseAdmin, database: &str, statements: I) -> Result<()>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let statements: Vec<String> = statements.into_iter().map(Into::into).collect();
    if statements.is_empty() {
        return Ok(());
    }
    let span = tracing::info_span!(
        "spanner_queues.apply_ddl",
        database,
        statements = statements.len()
    );
    admin
        .update_database_ddl()
        .set_database(database)
        .set_statements(statements)
        .poller()
        .until_done()
        .instrument(span)
        .await
        .map(|_| ())
        .map_err(Error::from)
}

/// Creates the queue of message type `M` if it does not exist (`CREATE QUEUE IF NOT EXISTS`,
/// from [`QueueMessage::schema`]) and waits for it.
pub async fn ensure_queue<M: QueueMessage>(admin: &DatabaseAdmin, database: &str) -> Result<()> {
    let statement = M::schema().create_if_not_exists_statement(Dialect::GoogleSql)?;
    apply_ddl(admin, database, [statement]).await
}

/// One column of a queue as the database describes it.
#[derive(Debug, Clone)]
struct ActualColumn {
    name: String,
    spanner_type: String,
    key_position: Option<i64>,
    descending: bool,
}

/// Checks that the queue of `M` exists and matches `M`: key columns (names, types, order,
/// direction), a payload column the codec can read, and `DeliverTime`. Columns Spanner adds for
/// its own use are ignored. Run it at start-up so that drift fails fast with a precise error
/// instead of at the first send.
///
/// # Errors
/// [`Error::QueueNotFound`] if the queue is missing, [`Error::SchemaDrift`] listing every
/// difference, or a Spanner error.
pub async fn check_queue<M: QueueMessage>(db: &DatabaseClient) -> Result<()> {
    check_columns(db, &M::QUEUE, differences::<M>).await
}

async fn read_columns(db: &DatabaseClient, queue: &str) -> Result<Vec<ActualColumn>> {
    let statement = Statement::builder(
        "SELECT c.COLUMN_NAME, c.SPANNER_TYPE, k.ORDINAL_POSITION, k.COLUMN_ORDERING \
         FROM INFORMATION_SCHEMA.COLUMNS AS c \
         LEFT JOIN INFORMATION_SCHEMA.INDEX_COLUMNS AS k \
           ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME \
          AND k.COLUMN_NAME = c.COLUMN_NAME AND k.INDEX_NAME = 'PRIMARY_KEY' \
         WHERE c.TABLE_SCHEMA = '' AND c.TABLE_NAME = @queue \
         ORDER BY c.ORDINAL_POSITION",
    )
    .add_param("queue", queue)
    .build();
    let mut rows = db
        .single_use()
        .build()
        .execute_query(statement)
        .await
        .map_err(Error::from)?;
    let mut columns = Vec::new();
    while let Some(row) = rows.next().await {
        let row = row.map_err(Error::from)?;
        let ordering: Option<String> = row.get(3).map_err(Error::from)?;
        columns.push(ActualColumn {
            name: row.get(0).map_err(Error::from)?,
            spanner_type: row.get(1).map_err(Error::from)?,
            key_position: row.get(2).map_err(Error::from)?,
            descending: ordering.is_some_and(|o| o.eq_ignore_ascii_case("DESC")),
        });
    }
    Ok(columns)
}

/// Same type family (lengths may differ: a longer STRING column holds every value).
fn same_family(a: &SpannerType, b: &SpannerType) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

fn differences<M: QueueMessage>(columns: &[ActualColumn]) -> Vec<String> {
    let mut out = Vec::new();
    let mut keys: Vec<&ActualColumn> = columns
        .iter()
        .filter(|c| c.key_position.is_some())
        .collect();
    keys.sort_by_key(|c| c.key_position);
    if keys.len() != M::KEY_COLUMNS.len() {
        out.push(format!(
            "the primary key has {} columns ({}), the message type {} ({})",
            keys.len(),
            keys.iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            M::KEY_COLUMNS.len(),
            M::KEY_COLUMNS
                .iter()
                .map(|c| c.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for (i, (expected, actual)) in M::KEY_COLUMNS.iter().zip(&keys).enumerate() {
        if !expected.name().as_str().eq_ignore_ascii_case(&actual.name) {
            out.push(format!(
                "key column {} is `{}` in the database, `{}` in the message type",
                i + 1,
                actual.name,
                expected.name()
            ));
            continue;
        }
        let want = expected.key_type().spanner_type();
        match actual.spanner_type.parse::<SpannerType>() {
            Ok(have) if same_family(&have, &want) => {}
            _ => out.push(format!(
                "key column `{}` is {} in the database, the message type needs {want}",
                actual.name, actual.spanner_type
            )),
        }
        let want_desc = expected.order() == SortOrder::Desc;
        if want_desc != actual.descending {
            out.push(format!(
                "key column `{}` is {} in the database, {} in the message type",
                actual.name,
                if actual.descending { "DESC" } else { "ASC" },
                if want_desc { "DESC" } else { "ASC" }
            ));
        }
    }
    let payload_name = SystemColumn::Payload.name(Dialect::GoogleSql);
    match columns
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(payload_name))
    {
        None => out.push("the queue has no Payload column".to_owned()),
        Some(payload) => {
            let readable = match payload.spanner_type.parse::<SpannerType>() {
                Ok(SpannerType::Json | SpannerType::String(_) | SpannerType::Bytes(_)) => {
                    match M::PAYLOAD.codec() {
                        Codec::Json => true,
                        Codec::Bytes | Codec::Proto => payload
                            .spanner_type
                            .to_ascii_uppercase()
                            .starts_with("BYTES"),
                        Codec::String => payload
                            .spanner_type
                            .to_ascii_uppercase()
                            .starts_with("STRING"),
                    }
                }
                Ok(SpannerType::Proto(_)) => M::PAYLOAD.codec() == Codec::Proto,
                _ => false,
            };
            if !readable {
                out.push(format!(
                    "the Payload column is {}, which the {} codec of the message type cannot read",
                    payload.spanner_type,
                    M::PAYLOAD.codec().as_str()
                ));
            }
            // Sends bind the payload as the type the message type declares for its column; the
            // column must accept that type, or every send fails.
            let spec = M::PAYLOAD;
            let written = spec.column();
            let writable = match (payload.spanner_type.parse::<SpannerType>(), written) {
                (Ok(SpannerType::Json), PayloadType::Json) => true,
                (Ok(SpannerType::String(_)), PayloadType::String(_)) => true,
                // [I] Spanner accepts BYTES values for PROTO columns, as for BYTES ones.
                (
                    Ok(SpannerType::Bytes(_) | SpannerType::Proto(_)),
                    PayloadType::Bytes(_) | PayloadType::Proto(_),
                ) => true,
                _ => false,
            };
            if !writable {
                out.push(format!(
                    "the Payload column is {}, but the message type sends {} values: declare \
                     the column's type on the type (payload_type) or alter the queue",
                    payload.spanner_type,
                    payload_type_name(written)
                ));
            }
        }
    }
    let deliver = SystemColumn::DeliverTime.name(Dialect::GoogleSql);
    if !columns.iter().any(|c| c.name.eq_ignore_ascii_case(deliver)) {
        out.push(
            "the queue has no DeliverTime column: is it a table rather than a queue?".to_owned(),
        );
    }
    out
}

fn payload_type_name(column: &PayloadType) -> &'static str {
    match column {
        PayloadType::Json => "JSON",
        PayloadType::String(_) => "STRING",
        PayloadType::Bytes(_) => "BYTES",
        PayloadType::Proto(_) => "PROTO",
    }
}

/// A queue of a [`SchemaSetup`]: its DDL and how to check it against its message type.
#[derive(Clone)]
struct QueueEntry {
    schema: QueueSchema,
    queue: QueueName,
    differences: fn(&[ActualColumn]) -> Vec<String>,
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

    /// The queue of message type `M` ([`QueueMessage::schema`]), checked with [`check_queue`].
    pub fn with_queue<M: QueueMessage>(mut self) -> Self {
        self.queues.retain(|q| q.queue != M::QUEUE);
        self.queues.push(QueueEntry {
            schema: M::schema(),
            queue: M::QUEUE,
            differences: differences::<M>,
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

    /// The commit-marker table as `markers` describes it (dialect, retention).
    pub fn with_commit_markers_as(mut self, markers: CommitMarkers) -> Self {
        self.commit_markers = Some(markers);
        self
    }

    /// The DDL, every statement in its `IF NOT EXISTS` form (GoogleSQL), so that applying it to
    /// a database that already has some of the objects creates only the others.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for PostgreSQL commit markers (`IF NOT EXISTS` is not rendered
    /// for them yet), or a schema that cannot be rendered.
    pub fn statements(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in &self.queues {
            out.push(
                entry
                    .schema
                    .create_if_not_exists_statement(Dialect::GoogleSql)?,
            );
        }
        if self.worker_tables {
            out.extend(crate::worker::schema_statements());
        }
        if let Some(markers) = &self.commit_markers {
            out.push(markers.create_if_not_exists_statement()?);
        }
        Ok(out)
    }

    /// Creates the objects that are missing (`IF NOT EXISTS`) and waits for the schema change.
    /// Existing objects are left as they are: [`check`](Self::check) tells whether they fit.
    ///
    /// # Errors
    /// See [`statements`](Self::statements); Spanner's error if the DDL is refused.
    pub async fn apply(&self, admin: &DatabaseAdmin, database: &str) -> Result<()> {
        apply_ddl(admin, database, self.statements()?).await
    }

    /// Checks that every object exists and fits: each queue as [`check_queue`] does, the
    /// worker's tables and the commit-marker table (readable with the columns the SDK uses).
    ///
    /// # Errors
    /// The first problem found: [`Error::QueueNotFound`], [`Error::SchemaDrift`],
    /// [`Error::InvalidSchema`] for a missing or different table, or a Spanner error.
    pub async fn check(&self, db: &DatabaseClient) -> Result<()> {
        for entry in &self.queues {
            check_columns(db, &entry.queue, entry.differences).await?;
        }
        if self.worker_tables {
            check_worker_tables(db).await?;
        }
        if let Some(markers) = &self.commit_markers {
            check_markers(db, markers).await?;
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
        self.apply(&admin, database).await?;
        let db = spanner.database_client(database).build().await?;
        self.check(&db).await
    }
}

async fn check_columns(
    db: &DatabaseClient,
    queue: &QueueName,
    differences: fn(&[ActualColumn]) -> Vec<String>,
) -> Result<()> {
    let columns = read_columns(db, queue.as_str()).await?;
    if columns.is_empty() {
        return Err(Error::QueueNotFound {
            queue: queue.clone(),
        });
    }
    let differences = differences(&columns);
    if differences.is_empty() {
        Ok(())
    } else {
        Err(Error::SchemaDrift {
            queue: queue.clone(),
            differences,
        })
    }
}

async fn check_markers(db: &DatabaseClient, markers: &CommitMarkers) -> Result<()> {
    let sql = match markers.dialect() {
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
             CommitMarkers::create_statement()",
            markers.table()
        )
    })
    .await
}

async fn check_worker_tables(db: &DatabaseClient) -> Result<()> {
    use crate::worker::{ATTEMPTS_TABLE, DEAD_LETTER_TABLE};
    let sql = format!(
        "SELECT (SELECT COUNT(*) FROM {ATTEMPTS_TABLE} WHERE FALSE), \
         (SELECT COUNT(*) FROM {DEAD_LETTER_TABLE} WHERE FALSE)"
    );
    check_readable(db, sql, || {
        format!(
            "the worker tables {ATTEMPTS_TABLE} and {DEAD_LETTER_TABLE} are missing or differ: \
             apply spanner_queues::worker::schema_statements()"
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
    let result = async {
        let mut rows = db
            .single_use()
            .build()
            .execute_query(Statement::builder(sql).build())
            .await?;
        while let Some(row) = rows.next().await {
            row?;
        }
        Ok::<(), google_cloud_spanner::Error>(())
    }
    .await
    .map_err(Error::from);
    match result {
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

/// Creates database `database` (`projects/P/instances/I/databases/D`) on an existing instance
/// with everything `setup` lists, waits until it is ready, and checks it.
///
/// # Errors
/// [`Error::InvalidSetting`] for a malformed path; Spanner's error if the database exists
/// already (`ALREADY_EXISTS`), the instance is missing (`NOT_FOUND`) or the DDL is refused.
pub async fn create_database(spanner: &Spanner, database: &str, setup: &SchemaSetup) -> Result<()> {
    let (instance, id) = split_database_path(database)?;
    let statements = setup.statements()?;
    let admin = spanner
        .database_admin_builder()
        .build()
        .await
        .map_err(client_error)?;
    let span = tracing::info_span!("spanner_queues.create_database", database);
    admin
        .create_database()
        .set_parent(instance)
        .set_create_statement(format!("CREATE DATABASE `{id}`"))
        .set_extra_statements(statements)
        .poller()
        .until_done()
        .instrument(span)
        .await?;
    let db = spanner.database_client(database).build().await?;
    setup.check(&db).await
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
    setup: &SchemaSetup,
) -> Result<()> {
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
    create_database(spanner, database, setup).await
}

#[cfg(test)]
mod tests {
    use super::*;

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
