//! A database and its SQL dialect, learned once.
//!
//! Spanner databases speak GoogleSQL or PostgreSQL, fixed when the database is created. Every
//! statement this crate writes depends on it (parameter syntax, names, types), so the dialect
//! belongs to the database handle, not to individual queues: [`Database::connect`] asks the
//! database once, [`Database::new`] is told. Every entry point of the crate takes a
//! [`Database`] (or a bare `DatabaseClient`, which is taken to be GoogleSQL) and writes its
//! statements in that database's dialect.

use std::ops::Deref;

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;

use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::query::query_rows;

/// A database client and the SQL dialect of its database.
///
/// Cheap to clone (the client is shared). Dereferences to the official `DatabaseClient`, so
/// the official client's own calls (`single_use`, `read_write_transaction`, …) work on it.
///
/// ```no_run
/// use google_cloud_spanner::client::DatabaseClient;
/// use spanner_queues::{Database, Dialect};
///
/// async fn open(client: DatabaseClient) -> spanner_queues::Result<Database> {
///     // One query of INFORMATION_SCHEMA.DATABASE_OPTIONS.
///     let db = Database::connect(client).await?;
///     println!("the database speaks {:?}", db.dialect());
///     Ok(db)
/// }
///
/// // Or, without the query, when you know it:
/// fn told(client: DatabaseClient) -> Database {
///     Database::new(client, Dialect::PostgreSql)
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Database {
    client: DatabaseClient,
    dialect: Dialect,
}

impl Database {
    /// A handle on a database whose dialect you know.
    ///
    /// If `dialect` is not the database's, the database refuses the statements of this crate
    /// (nothing is written); [`connect`](Self::connect) asks the database instead.
    pub fn new(client: DatabaseClient, dialect: Dialect) -> Self {
        Self { client, dialect }
    }

    /// A handle on the database of `client`, whose dialect is read from the database
    /// (`INFORMATION_SCHEMA.DATABASE_OPTIONS`, one single-use read).
    ///
    /// # Errors
    /// Spanner's error for the read (the database does not exist, no permission, …);
    /// [`Error::Precondition`] if the database reports a dialect this crate does not know.
    ///
    /// # Cancellation
    /// Dropping the future only abandons the read.
    pub async fn connect(client: DatabaseClient) -> Result<Self> {
        let dialect = detect_dialect(&client).await?;
        Ok(Self { client, dialect })
    }

    /// The official client.
    pub fn client(&self) -> &DatabaseClient {
        &self.client
    }

    /// The database's SQL dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The official client, without the dialect.
    pub fn into_client(self) -> DatabaseClient {
        self.client
    }
}

impl Deref for Database {
    type Target = DatabaseClient;

    fn deref(&self) -> &DatabaseClient {
        &self.client
    }
}

/// A bare client is taken to be a GoogleSQL database (the default dialect of Spanner); for a
/// PostgreSQL-dialect database use [`Database::connect`] or [`Database::new`].
impl From<DatabaseClient> for Database {
    fn from(client: DatabaseClient) -> Self {
        Self::new(client, Dialect::GoogleSql)
    }
}

/// As `From<DatabaseClient>`, cloning the (shared) client.
impl From<&DatabaseClient> for Database {
    fn from(client: &DatabaseClient) -> Self {
        Self::new(client.clone(), Dialect::GoogleSql)
    }
}

impl From<&Database> for Database {
    fn from(db: &Database) -> Self {
        db.clone()
    }
}

/// Something the crate can run statements on: a [`Database`] (its dialect), or a bare
/// `DatabaseClient` (taken to be GoogleSQL).
///
/// Sealed: implemented by this crate only.
pub trait AsDatabase: sealed::Sealed + Sync {
    /// The official client.
    fn database_client(&self) -> &DatabaseClient;
    /// The dialect statements are written in.
    fn database_dialect(&self) -> Dialect;
}

impl AsDatabase for Database {
    fn database_client(&self) -> &DatabaseClient {
        &self.client
    }
    fn database_dialect(&self) -> Dialect {
        self.dialect
    }
}

impl AsDatabase for DatabaseClient {
    fn database_client(&self) -> &DatabaseClient {
        self
    }
    fn database_dialect(&self) -> Dialect {
        Dialect::GoogleSql
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Database {}
    impl Sealed for google_cloud_spanner::client::DatabaseClient {}
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
