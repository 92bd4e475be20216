//! [`Database`]: the one handle the SDK takes, with its SQL dialect and settings.
//!
//! Spanner databases speak GoogleSQL or PostgreSQL, fixed when the database is created. Every
//! statement this crate writes depends on it (parameter syntax, names, types), so the dialect
//! belongs to the database handle: [`Database::connect`] reads it from the database once, and
//! every entry point of the crate takes a [`Database`].

use std::sync::Arc;
use std::time::Duration;

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use tracing::Instrument as _;

use crate::bounds;
use crate::dialect::Dialect;
use crate::error::{Code, Error, Result};
use crate::message::{DEFAULT_MAX_PAYLOAD_BYTES, RECOMMENDED_MAX_PAYLOAD_BYTES};
use crate::query::query_rows;

/// The largest payload limit [`DatabaseBuilder::with_max_payload_bytes`] accepts: Spanner's
/// 10 MiB limit on one cell, which a queue's payload column is.
pub const MAX_PAYLOAD_BYTES_LIMIT: usize = 10 * 1024 * 1024;

/// A Spanner database, its SQL dialect and the SDK's settings for it: the one handle every
/// entry point of this crate takes.
///
/// Cheap to clone (one shared allocation). Made by [`Database::connect`] or
/// [`Database::builder`]; the dialect is always the database's own (read on connect, or
/// stated and then checked).
///
/// ```no_run
/// use spanner_queues::Database;
///
/// async fn open() -> spanner_queues::Result<Database> {
///     // Application Default Credentials, or the emulator named by SPANNER_EMULATOR_HOST.
///     let db = Database::connect("projects/p/instances/i/databases/orders").await?;
///     println!("{} speaks {:?}", db.path(), db.dialect());
///     Ok(db)
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Database(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    path: String,
    client: DatabaseClient,
    admin: DatabaseAdmin,
    dialect: Dialect,
    max_payload_bytes: usize,
    transaction_settings: TransactionSettings,
}

impl Database {
    /// Connects to the existing database `path` (`projects/P/instances/I/databases/D`) with
    /// the default settings: [`builder`](Self::builder)`(path).connect()`.
    ///
    /// # Errors
    /// As [`DatabaseBuilder::connect`].
    ///
    /// # Cancellation
    /// Dropping the future only abandons the connection.
    pub async fn connect(path: impl Into<String>) -> Result<Self> {
        Self::builder(path).connect().await
    }

    /// A builder for a handle on database `path` (`projects/P/instances/I/databases/D`): set
    /// clients and settings, then [`connect`](DatabaseBuilder::connect) to an existing
    /// database or [`create`](DatabaseBuilder::create) a new one.
    pub fn builder(path: impl Into<String>) -> DatabaseBuilder {
        DatabaseBuilder {
            path: path.into(),
            spanner: None,
            client: None,
            admin: None,
            dialect: None,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            transaction_settings: TransactionSettings::default(),
        }
    }

    /// The database's full name, `projects/P/instances/I/databases/D`.
    pub fn path(&self) -> &str {
        &self.0.path
    }

    /// The database's SQL dialect.
    pub fn dialect(&self) -> Dialect {
        self.0.dialect
    }

    /// The official data client, for your own reads and writes outside a transaction of this
    /// crate (`single_use`, `read_only_transaction`, …).
    pub fn client(&self) -> &DatabaseClient {
        &self.0.client
    }

    /// The official database admin client (schema changes, backups, …).
    pub fn admin(&self) -> &DatabaseAdmin {
        &self.0.admin
    }

    /// The largest payload a send accepts, in bytes; larger ones fail with
    /// [`Error::PayloadTooLarge`] before anything is written.
    pub fn max_payload_bytes(&self) -> usize {
        self.0.max_payload_bytes
    }

    /// Payloads above this size (Spanner recommends under 4 KB) are sent with a warning line.
    pub(crate) fn warn_payload_bytes(&self) -> usize {
        RECOMMENDED_MAX_PAYLOAD_BYTES.min(self.0.max_payload_bytes)
    }

    /// The settings of the transactions this handle runs ([`transaction`](Self::transaction),
    /// the sends and acks that commit on their own, dead-letter replays), unless one says
    /// otherwise.
    pub fn transaction_settings(&self) -> &TransactionSettings {
        &self.0.transaction_settings
    }
}

/// Builds a [`Database`]; made by [`Database::builder`].
///
/// ```no_run
/// use std::time::Duration;
/// use spanner_queues::{Database, Dialect, TransactionSettings};
///
/// async fn open() -> spanner_queues::Result<Database> {
///     Database::builder("projects/p/instances/i/databases/orders")
///         .with_dialect(Dialect::PostgreSql) // checked against the database on connect
///         .with_max_payload_bytes(64 * 1024)
///         .with_transaction_settings(
///             TransactionSettings::default().with_total_timeout(Duration::from_secs(20)),
///         )
///         .connect()
///         .await
/// }
/// ```
#[derive(Debug)]
#[must_use = "a database builder does nothing until `connect` or `create`"]
pub struct DatabaseBuilder {
    path: String,
    spanner: Option<Spanner>,
    client: Option<DatabaseClient>,
    admin: Option<DatabaseAdmin>,
    dialect: Option<Dialect>,
    max_payload_bytes: usize,
    transaction_settings: TransactionSettings,
}

impl DatabaseBuilder {
    /// Builds the data and admin clients from `spanner` (its endpoint and credentials) instead
    /// of a default `Spanner::builder().build()`.
    pub fn with_spanner(mut self, spanner: Spanner) -> Self {
        self.spanner = Some(spanner);
        self
    }

    /// Uses this data client; it must be a client of the builder's database.
    pub fn with_client(mut self, client: DatabaseClient) -> Self {
        self.client = Some(client);
        self
    }

    /// Uses this admin client.
    pub fn with_admin(mut self, admin: DatabaseAdmin) -> Self {
        self.admin = Some(admin);
        self
    }

    /// States the database's dialect. [`connect`](Self::connect) checks it against the
    /// database ([`Error::DialectMismatch`] when it differs); [`create`](Self::create) creates
    /// the database in it (default GoogleSQL).
    pub fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = Some(dialect);
        self
    }

    /// The largest payload a send accepts (default 1 MiB; from 1 byte to
    /// [`MAX_PAYLOAD_BYTES_LIMIT`]).
    pub fn with_max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// Settings of the transactions the handle runs (default [`TransactionSettings::default`]).
    pub fn with_transaction_settings(mut self, settings: TransactionSettings) -> Self {
        self.transaction_settings = settings;
        self
    }

    /// Connects to the existing database: builds the clients that were not given and reads the
    /// database's dialect (`INFORMATION_SCHEMA.DATABASE_OPTIONS`, one single-use read).
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a malformed path or a setting out of range (before any
    /// RPC); [`Error::Precondition`] when a client cannot be built (no credentials);
    /// [`Error::DialectMismatch`] when a stated dialect is not the database's; Spanner's error
    /// for the read (the database does not exist, no permission, …).
    ///
    /// # Cancellation
    /// Dropping the future only abandons the connection.
    pub async fn connect(self) -> Result<Database> {
        self.validate()?;
        let (client, admin) = self.clients().await?;
        let actual = detect_dialect(&client).await?;
        if let Some(stated) = self.dialect
            && stated != actual
        {
            return Err(Error::DialectMismatch { stated, actual });
        }
        Ok(self.finish(client, admin, actual))
    }

    /// Creates the database, empty, in the stated dialect (default GoogleSQL), waits until it
    /// is ready, and connects to it. Meant for tests and tools; create the SDK's tables with
    /// [`SchemaSetup`](crate::SchemaSetup). On an emulator, whose instances cost nothing, a
    /// missing instance is created first (with the `emulator-config` configuration).
    ///
    /// # Errors
    /// As [`connect`](Self::connect); Spanner's error when the database exists already
    /// (`ALREADY_EXISTS`) or the instance is missing (`NOT_FOUND`).
    ///
    /// # Cancellation
    /// Dropping the future after the request was sent may leave the database created.
    pub async fn create(self) -> Result<Database> {
        use google_cloud_spanner_admin_database_v1::model::DatabaseDialect;
        self.validate()?;
        let (instance, id) = split_database_path(&self.path)?;
        let dialect = self.dialect.unwrap_or_default();
        let admin = match &self.admin {
            Some(admin) => admin.clone(),
            None => build_admin(&self.spanner().await?).await?,
        };
        let span = tracing::info_span!("spanner_queues.create_database", database = %self.path);
        let create = || {
            let request = admin.create_database().set_parent(instance);
            match dialect {
                Dialect::GoogleSql => {
                    request.set_create_statement(format!("CREATE DATABASE `{id}`"))
                }
                Dialect::PostgreSql => request
                    .set_create_statement(format!("CREATE DATABASE \"{id}\""))
                    .set_database_dialect(DatabaseDialect::Postgresql),
            }
            .poller()
            .until_done()
        };
        match create().instrument(span.clone()).await.map_err(Error::from) {
            Ok(_) => {}
            // The official emulator answers a missing instance with NOT_FOUND over gRPC, but
            // its REST gateway with INTERNAL ("failed to marshal error message"), measured on
            // 1.5.28; on Cloud Spanner the instance creation below fails (there is no
            // `emulator-config` there) and the first error is returned.
            Err(error) if matches!(error.code(), Some(Code::NotFound | Code::Internal)) => {
                // An emulator's instance can be made on the spot; a real one cannot.
                if create_emulator_instance(&self.spanner().await?, instance)
                    .await
                    .is_err()
                {
                    return Err(error);
                }
                create().instrument(span).await?;
            }
            Err(error) => return Err(error),
        }
        let client = match &self.client {
            Some(client) => client.clone(),
            None => {
                self.spanner()
                    .await?
                    .database_client(&self.path)
                    .build()
                    .await?
            }
        };
        Ok(self.finish(client, admin, dialect))
    }

    fn validate(&self) -> Result<()> {
        split_database_path(&self.path)?;
        bounds::in_range(
            "max_payload_bytes",
            self.max_payload_bytes,
            1..=MAX_PAYLOAD_BYTES_LIMIT,
        )?;
        self.transaction_settings.validate()
    }

    async fn spanner(&self) -> Result<Spanner> {
        match &self.spanner {
            Some(spanner) => Ok(spanner.clone()),
            None => Spanner::builder().build().await.map_err(client_error),
        }
    }

    async fn clients(&self) -> Result<(DatabaseClient, DatabaseAdmin)> {
        if let (Some(client), Some(admin)) = (&self.client, &self.admin) {
            return Ok((client.clone(), admin.clone()));
        }
        let spanner = self.spanner().await?;
        let client = match &self.client {
            Some(client) => client.clone(),
            None => spanner.database_client(&self.path).build().await?,
        };
        let admin = match &self.admin {
            Some(admin) => admin.clone(),
            None => build_admin(&spanner).await?,
        };
        Ok((client, admin))
    }

    fn finish(self, client: DatabaseClient, admin: DatabaseAdmin, dialect: Dialect) -> Database {
        Database(Arc::new(Inner {
            path: self.path,
            client,
            admin,
            dialect,
            max_payload_bytes: self.max_payload_bytes,
            transaction_settings: self.transaction_settings,
        }))
    }
}

async fn build_admin(spanner: &Spanner) -> Result<DatabaseAdmin> {
    spanner
        .database_admin_builder()
        .build()
        .await
        .map_err(client_error)
}

/// Creates `instance` (`projects/P/instances/I`) with the emulator's instance configuration;
/// `ALREADY_EXISTS` is success.
async fn create_emulator_instance(spanner: &Spanner, instance: &str) -> Result<()> {
    let (project, instance_id) = instance
        .strip_prefix("projects/")
        .and_then(|rest| rest.split_once("/instances/"))
        .ok_or_else(|| bounds::invalid("database", format!("bad instance path {instance}")))?;
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
        Ok(_) => Ok(()),
        Err(error) if error.code() == Some(Code::AlreadyExists) => Ok(()),
        Err(error) => Err(error),
    }
}

/// A client that could not be built (no credentials, a bad endpoint).
fn client_error(error: google_cloud_gax::client_builder::Error) -> Error {
    Error::Precondition {
        reason: format!("cannot build a Spanner client: {error}"),
    }
}

/// The parts of `projects/P/instances/I/databases/D`: (`projects/P/instances/I`, `D`).
pub(crate) fn split_database_path(database: &str) -> Result<(&str, &str)> {
    let bad = || {
        bounds::invalid(
            "database",
            format!(
                "`{database}` is not a database path of the form projects/P/instances/I/databases/D"
            ),
        )
    };
    let (instance, id) = database.rsplit_once("/databases/").ok_or_else(bad)?;
    let parts: Vec<&str> = instance.split('/').collect();
    let well_formed = matches!(parts.as_slice(), ["projects", p, "instances", i] if !p.is_empty() && !i.is_empty());
    if !well_formed || id.is_empty() || id.contains('/') {
        return Err(bad());
    }
    Ok((instance, id))
}

/// Something internal code runs statements on: a [`Database`], or a bare client with the
/// dialect the caller knows. Not public: users always hand over a [`Database`].
pub(crate) trait AsDatabase: Sync {
    /// The official client.
    fn database_client(&self) -> &DatabaseClient;
    /// The dialect statements are written in.
    fn database_dialect(&self) -> Dialect;
}

impl AsDatabase for Database {
    fn database_client(&self) -> &DatabaseClient {
        &self.0.client
    }
    fn database_dialect(&self) -> Dialect {
        self.0.dialect
    }
}

/// A bare client, for the crate's own unguarded transactions (the runner writes in the
/// dialect only for a commit marker, which they never insert).
impl AsDatabase for DatabaseClient {
    fn database_client(&self) -> &DatabaseClient {
        self
    }
    fn database_dialect(&self) -> Dialect {
        Dialect::GoogleSql
    }
}

/// The `database_dialect` option of the database. The same text is valid in both dialects
/// (PostgreSQL folds the unquoted names to the lower-case ones it has).
const DIALECT_QUERY: &str = "SELECT OPTION_VALUE FROM INFORMATION_SCHEMA.DATABASE_OPTIONS \
                             WHERE OPTION_NAME = 'database_dialect'";

/// The dialect the database reports (one single-use read).
pub(crate) async fn detect_dialect(client: &DatabaseClient) -> Result<Dialect> {
    let values = query_rows(client, Statement::builder(DIALECT_QUERY).build(), |row| {
        Ok(row.get::<String>(0)?)
    })
    .await?;
    match values.first().map(String::as_str) {
        // A database without the option predates PostgreSQL support: GoogleSQL.
        None | Some("GOOGLE_STANDARD_SQL") => Ok(Dialect::GoogleSql),
        Some("POSTGRESQL") => Ok(Dialect::PostgreSql),
        Some(other) => Err(Error::Precondition {
            reason: format!(
                "the database reports the dialect {other}, which this crate does not know"
            ),
        }),
    }
}

/// Bounds of a read-write transaction run by this crate.
///
/// Every value is checked when it is handed over: by [`DatabaseBuilder`]'s
/// `connect`/`create`, by the builders that take it, and by every run. A value out of range
/// fails with [`Error::InvalidSetting`] before anything is sent. Zero never means "unlimited"
/// here (the official client's retry policy reads a zero attempt count or time budget as no
/// limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionSettings {
    max_attempts: u32,
    total_timeout: Duration,
    commit_timeout: Duration,
    unknown_outcome_retries: u32,
}

/// Attempts per transaction. Busy emulators abort often, so the top is generous.
const MAX_ATTEMPTS: std::ops::RangeInclusive<u32> = 1..=10_000;
/// Time budget across all attempts.
const TOTAL_TIMEOUT: std::ops::RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::DAY;
/// Deadline of one Commit RPC.
const COMMIT_TIMEOUT: std::ops::RangeInclusive<Duration> = Duration::from_millis(1)..=bounds::HOUR;
/// Unknown outcomes a guarded transaction resolves by itself.
const UNKNOWN_OUTCOME_RETRIES: std::ops::RangeInclusive<u32> = 0..=100;

impl Default for TransactionSettings {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            total_timeout: Duration::from_secs(60),
            commit_timeout: Duration::from_secs(30),
            unknown_outcome_retries: 3,
        }
    }
}

impl TransactionSettings {
    /// Attempts in total when Spanner aborts the transaction (default 10; from 1 to 10 000).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Time budget across all attempts (default 60 s; from 1 ms to 24 hours). No attempt
    /// starts after it has passed.
    pub fn with_total_timeout(mut self, timeout: Duration) -> Self {
        self.total_timeout = timeout;
        self
    }

    /// Deadline of one Commit RPC (default 30 s; from 1 ms to 1 hour). When it passes, the
    /// outcome is unknown.
    pub fn with_commit_timeout(mut self, timeout: Duration) -> Self {
        self.commit_timeout = timeout;
        self
    }

    /// Guarded transactions only: how many unknown commit outcomes a
    /// [`guarded`](crate::transaction::TransactionBuilder::guarded) transaction resolves by
    /// itself (default 3; from 0 to 100).
    ///
    /// Each is resolved by reading the marker: applied, the call returns success; not applied,
    /// the transaction runs again with the same marker, so at most one attempt commits. With
    /// 0, the first unknown outcome is returned at once ([`Error::OutcomeUnknown`], with its
    /// marker) for you to [`resolve`](Database::resolve).
    pub fn with_unknown_outcome_retries(mut self, retries: u32) -> Self {
        self.unknown_outcome_retries = retries;
        self
    }

    /// Attempts in total when Spanner aborts the transaction.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Time budget across all attempts.
    pub fn total_timeout(&self) -> Duration {
        self.total_timeout
    }

    /// Deadline of one Commit RPC.
    pub fn commit_timeout(&self) -> Duration {
        self.commit_timeout
    }

    /// Unknown commit outcomes a guarded transaction resolves by itself.
    pub fn unknown_outcome_retries(&self) -> u32 {
        self.unknown_outcome_retries
    }

    /// Checks every value against its range (given on each setter).
    pub(crate) fn validate(&self) -> Result<()> {
        bounds::in_range("max_attempts", self.max_attempts, MAX_ATTEMPTS)?;
        bounds::in_range("total_timeout", self.total_timeout, TOTAL_TIMEOUT)?;
        bounds::in_range("commit_timeout", self.commit_timeout, COMMIT_TIMEOUT)?;
        bounds::in_range(
            "unknown_outcome_retries",
            self.unknown_outcome_retries,
            UNKNOWN_OUTCOME_RETRIES,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The setting `validate` names for `settings`, or `None` when they are valid.
    fn rejected(settings: &TransactionSettings) -> Option<&'static str> {
        match settings.validate() {
            Ok(()) => None,
            Err(Error::InvalidSetting { setting, .. }) => Some(setting),
            Err(other) => panic!("not an InvalidSetting: {other:?}"),
        }
    }

    #[test]
    fn transaction_settings_bound_every_value_at_both_ends() {
        let d = TransactionSettings::default;
        assert_eq!(rejected(&d()), None);
        // The official retry policy reads 0 attempts and a zero budget as "no limit".
        let cases = [
            (d().with_max_attempts(0), Some("max_attempts")),
            (d().with_max_attempts(1), None),
            (d().with_max_attempts(10_000), None),
            (d().with_max_attempts(10_001), Some("max_attempts")),
            (d().with_max_attempts(u32::MAX), Some("max_attempts")),
            (
                d().with_total_timeout(Duration::ZERO),
                Some("total_timeout"),
            ),
            (d().with_total_timeout(Duration::from_millis(1)), None),
            (d().with_total_timeout(bounds::DAY), None),
            (
                d().with_total_timeout(bounds::DAY + Duration::from_nanos(1)),
                Some("total_timeout"),
            ),
            (d().with_total_timeout(Duration::MAX), Some("total_timeout")),
            (
                d().with_commit_timeout(Duration::ZERO),
                Some("commit_timeout"),
            ),
            (d().with_commit_timeout(Duration::from_millis(1)), None),
            (d().with_commit_timeout(bounds::HOUR), None),
            (
                d().with_commit_timeout(bounds::HOUR + Duration::from_nanos(1)),
                Some("commit_timeout"),
            ),
            (
                d().with_commit_timeout(Duration::MAX),
                Some("commit_timeout"),
            ),
            (d().with_unknown_outcome_retries(0), None),
            (d().with_unknown_outcome_retries(100), None),
            (
                d().with_unknown_outcome_retries(101),
                Some("unknown_outcome_retries"),
            ),
        ];
        for (settings, expected) in cases {
            assert_eq!(rejected(&settings), expected, "{settings:?}");
        }
    }

    #[test]
    fn setters_store_what_they_are_given() {
        let settings = TransactionSettings::default()
            .with_max_attempts(7)
            .with_total_timeout(Duration::from_secs(9))
            .with_commit_timeout(Duration::from_secs(4))
            .with_unknown_outcome_retries(0);
        assert_eq!(settings.max_attempts(), 7);
        assert_eq!(settings.total_timeout(), Duration::from_secs(9));
        assert_eq!(settings.commit_timeout(), Duration::from_secs(4));
        assert_eq!(settings.unknown_outcome_retries(), 0);
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
            match split_database_path(bad) {
                Err(Error::InvalidSetting { setting, .. }) => assert_eq!(setting, "database"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn builder_settings_are_checked_before_any_rpc() {
        let builder = |bytes| {
            Database::builder("projects/p/instances/i/databases/d").with_max_payload_bytes(bytes)
        };
        for bytes in [0, MAX_PAYLOAD_BYTES_LIMIT + 1] {
            match builder(bytes).validate() {
                Err(Error::InvalidSetting { setting, .. }) => {
                    assert_eq!(setting, "max_payload_bytes");
                }
                other => panic!("{bytes}: {other:?}"),
            }
        }
        for bytes in [1, MAX_PAYLOAD_BYTES_LIMIT] {
            assert!(builder(bytes).validate().is_ok(), "{bytes}");
        }
        let bad = Database::builder("projects/p/instances/i/databases/d")
            .with_transaction_settings(TransactionSettings::default().with_max_attempts(0));
        assert!(matches!(
            bad.validate(),
            Err(Error::InvalidSetting {
                setting: "max_attempts",
                ..
            })
        ));
    }
}
