//! Test support for spanner-queues: a fresh Cloud Spanner database per test, with the schema of
//! your message types, a way to run a worker until its queue is idle, and assertions on what was
//! sent, what is left and what was dead-lettered.
//!
//! # Testing queue code
//!
//! ```no_run
//! use spanner_queues::{HandlerError, QueueMessage, Worker};
//!
//! #[derive(QueueMessage, Debug, Clone, PartialEq)]
//! #[queue(name = "Emails")]
//! struct Email {
//!     #[queue(key)]
//!     id: i64,
//!     to: String,
//! }
//!
//! # async fn demo() -> spanner_queues::Result<()> {
//! // One call: a fresh database with the queue of `Email`, the worker's tables and the
//! // commit markers (plus any DDL of your own with `with_ddl`).
//! let Some(db) = spanner_queues_testing::setup().with_queue::<Email>().create().await else {
//!     return Ok(()); // no backend and SPANNER_QUEUES_REQUIRE_EMULATOR unset: skipped, reason printed
//! };
//! let email = Email { id: 1, to: "ada@example.com".into() };
//!
//! // A `TestDatabase` dereferences to the SDK's `Database`: send, run transactions, build
//! // workers on it as in production code. `sent_by` shows what a piece of code sent.
//! let (sent, captured) = db.sent_by::<Email, _>(db.send(&email)).await;
//! sent?;
//! captured.assert_exactly(&[email.clone()]);
//!
//! // Run a worker until no message is due, then look at its counters and what is left.
//! let worker = Worker::<Email>::builder(&db)
//!     .external(|_email, _ctx| async { Ok::<(), HandlerError>(()) })
//!     .build()?;
//! let stats = db.drain(&worker).await.unwrap();
//! assert_eq!(stats.acked, 1);
//! db.assert_queue_empty::<Email>().await;
//! db.assert_no_dead_letters::<Email>().await;
//! # Ok(())
//! # }
//! ```
//!
//! [`setup`] describes the database ([`Setup`]); [`TestDatabase::drain`] and
//! [`TestDatabase::drain_with`] ([`Drain`]) run a worker; [`TestDatabase::sent_by`]
//! ([`SentMessages`]), [`TestDatabase::assert_queued`], [`TestDatabase::assert_queued_keys`],
//! [`TestDatabase::assert_queue_empty`] and [`TestDatabase::assert_no_dead_letters`] check the
//! queue; [`TestDatabase::queued`] ([`Queued`]) and [`TestDatabase::query`] read it. Failed
//! assertions name the caller and list the messages (key, when due, a payload preview) or dead
//! letters (key, attempts, last error) involved.
//!
//! # Plain databases
//!
//! ```no_run
//! # async fn demo() {
//! let Some(db) = spanner_queues_testing::setup()
//!     .without_sdk_tables()
//!     .with_ddl(["CREATE TABLE T (Id INT64 NOT NULL) PRIMARY KEY (Id)"])
//!     .create()
//!     .await
//! else {
//!     return; // no backend and SPANNER_QUEUES_REQUIRE_EMULATOR unset: skipped, reason printed
//! };
//! let client = db.client(); // google_cloud_spanner::client::DatabaseClient
//! # let _ = client;
//! # }
//! ```
//!
//! The backend is chosen once per process, in this order, and one line on stderr says which:
//!
//! 1. `SPANNER_QUEUES_TEST_INSTANCE=projects/P/instances/I`: a real Cloud Spanner instance,
//!    reached with Application Default Credentials (queues need the Enterprise edition).
//! 2. `SPANNER_EMULATOR_HOST=host:port`: an emulator that is already running (it must speak
//!    queues for the queue tests: run `spanner-queues-emulator` there).
//! 3. A Docker engine answers: the image `SPANNER_EMULATOR_IMAGE` (default
//!    `spanner-queues-emulator:local`, built from the installed emulator binaries by
//!    `emulator/docker/build-image.sh`, built on demand if missing or stale) runs with the
//!    `docker` CLI.
//! 4. Otherwise the installed official emulator runs as child processes, with the queue front
//!    in-process.
//!
//! Each test gets its own database (the emulator runs one read-write transaction per database at
//! a time), dropped when the [`TestDatabase`] is dropped. Containers and child processes are
//! removed when the test process exits, however it exits: a small reaper process holds a pipe
//! from the test process and cleans up when that pipe closes.
//!
//! When no backend can be had, [`Setup::create`] prints why and returns `None`, unless
//! `SPANNER_QUEUES_REQUIRE_EMULATOR=1` (set by CI), in which case it panics with the reason.

mod provision;
mod queues;

use std::sync::{Arc, OnceLock};

use google_cloud_lro::Poller;
use google_cloud_spanner::client::Spanner;
use spanner_queues::Database;

use provision::Provisioned;
pub use provision::{DEFAULT_IMAGE, Mode};
pub use queues::{Drain, Queued, SentMessages, Setup, setup};

/// Errors from the harness.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// No backend could be started or reached.
    #[error("no Spanner backend for tests: {0}")]
    NoBackend(String),
    /// A Spanner call made by the harness failed.
    #[error("{what}")]
    Spanner {
        /// What the harness was doing.
        what: String,
        /// The client's error.
        #[source]
        source: google_cloud_spanner::Error,
    },
    /// Building a client failed.
    #[error("cannot build a Spanner client")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A queue operation made by the harness failed (a schema check, reading a queue or the
    /// dead letters).
    #[error("{what}")]
    Queue {
        /// What the harness was doing.
        what: String,
        /// The SDK's error.
        #[source]
        source: spanner_queues::Error,
    },
    /// A worker run by [`TestDatabase::drain`] could not start or stop.
    #[error("{what}")]
    Worker {
        /// What the harness was doing.
        what: String,
        /// What the worker returned.
        #[source]
        source: spanner_queues::Error,
    },
    /// A row the harness cannot read back (a key column that does not fit the message type).
    #[error("{0}")]
    Unreadable(String),
    /// [`TestDatabase::drain`] saw no progress for its stall timeout; the text says what was
    /// left.
    #[error("{0}")]
    Stalled(String),
}

/// A fresh database for one test, made by [`setup`]; it dereferences to the SDK's
/// [`Database`], so everything the SDK does with a database works on it directly.
#[derive(Debug)]
pub struct TestDatabase {
    provisioned: Arc<Provisioned>,
    spanner: Spanner,
    database: Database,
}

impl std::ops::Deref for TestDatabase {
    type Target = Database;

    fn deref(&self) -> &Database {
        &self.database
    }
}

impl TestDatabase {
    /// This database for the SDK (also reachable through `Deref`).
    pub fn database(&self) -> &Database {
        &self.database
    }

    /// The database id (last path segment).
    pub fn id(&self) -> &str {
        let path = self.database.path();
        path.rsplit('/').next().unwrap_or(path)
    }

    /// The root client (to build more database clients or admin clients).
    pub fn spanner(&self) -> &Spanner {
        &self.spanner
    }

    /// Which backend serves this database.
    pub fn mode(&self) -> &Mode {
        &self.provisioned.mode
    }

    /// `host:port` of the emulator (for `SPANNER_EMULATOR_HOST` of other clients), or `None`
    /// against real Cloud Spanner.
    pub fn emulator_host(&self) -> Option<&str> {
        self.provisioned.emulator_host.as_deref()
    }

    /// `http://host:port` of the emulator for raw gRPC clients, or `None` against real Cloud
    /// Spanner.
    pub fn endpoint(&self) -> Option<String> {
        self.emulator_host().map(|h| format!("http://{h}"))
    }

    /// Applies DDL statements and waits for the schema change to finish.
    ///
    /// # Errors
    /// [`HarnessError::Spanner`] with Spanner's error.
    pub async fn apply_ddl<I, S>(&self, statements: I) -> Result<(), HarnessError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let statements: Vec<String> = statements.into_iter().map(Into::into).collect();
        self.admin()
            .update_database_ddl()
            .set_database(self.path())
            .set_statements(statements.clone())
            .poller()
            .until_done()
            .await
            .map(|_| ())
            .map_err(|source| HarnessError::Spanner {
                what: format!("applying DDL {statements:?} to {}", self.path()),
                source,
            })
    }

    /// The database's schema as `GetDatabaseDdl` reports it.
    ///
    /// # Errors
    /// [`HarnessError::Spanner`] with Spanner's error.
    pub async fn ddl(&self) -> Result<Vec<String>, HarnessError> {
        self.admin()
            .get_database_ddl()
            .set_database(self.path())
            .send()
            .await
            .map(|r| r.statements)
            .map_err(|source| HarnessError::Spanner {
                what: format!("reading the DDL of {}", self.path()),
                source,
            })
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Best effort: drop the database in the background so the instance does not fill up.
        let admin = self.database.admin().clone();
        let path = self.database.path().to_owned();
        provision::runtime().spawn(async move {
            let _ = admin.drop_database().set_database(path).send().await;
        });
    }
}

static SKIP_NOTICE: OnceLock<()> = OnceLock::new();

/// Creates a fresh database of `dialect`, reporting every failure as an error.
async fn create_database(dialect: spanner_queues::Dialect) -> Result<TestDatabase, HarnessError> {
    let provisioned = provision::provisioned().await?;
    let spanner = provisioned.spanner().await?;
    let path = format!(
        "{}/databases/{}",
        provisioned.instance,
        provision::database_id()
    );
    let database = Database::builder(&path)
        .with_spanner(spanner.clone())
        .with_dialect(dialect)
        .create()
        .await
        .map_err(|source| HarnessError::Queue {
            what: format!("creating {dialect:?}-dialect database {path}"),
            source,
        })?;
    Ok(TestDatabase {
        provisioned,
        spanner,
        database,
    })
}

/// The backend for this process, starting it on first use.
pub async fn mode() -> Result<Mode, HarnessError> {
    Ok(provision::provisioned().await?.mode.clone())
}

/// Prints, once per process, why emulator-backed tests are skipped.
fn skip_notice(reason: &str) {
    SKIP_NOTICE.get_or_init(|| {
        provision::notice(&format!(
            "SKIPPING emulator-backed tests: {reason} \
             (set SPANNER_QUEUES_REQUIRE_EMULATOR=1 to make this an error)"
        ));
    });
}

fn require_backend() -> bool {
    std::env::var("SPANNER_QUEUES_REQUIRE_EMULATOR").is_ok_and(|v| v == "1" || v == "true")
}
