//! Example producers and workers for `spanner-queues`, and the set-up code they share.
//!
//! Every example runs with one command on an embedded emulator (no cloud account needed):
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin demo
//! cargo run -p spanner-queues-examples --bin refund_approval
//! ```
//!
//! The set-up here (a fresh database, small loopback services, a worker in a child process
//! that can be killed) is scaffolding: the binaries in `src/bin` are the part to read.

use std::future::Future;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, TransactionSettings};
use spanner_queues_testing::{Setup, TestDatabase};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// The error type of the examples' `main` functions.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Logs `warn` and above to stderr, unless `RUST_LOG` says otherwise.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Transaction settings for the emulator, which runs one read-write transaction per database at
/// a time and aborts the others: more attempts than the default. Against Cloud Spanner the
/// defaults are right.
pub fn patient() -> TransactionSettings {
    TransactionSettings::default().with_max_attempts(100)
}

/// Creates a fresh database: on the emulator named by `SPANNER_EMULATOR_HOST`, or on one started
/// for this process (see the README's Quickstart). Prints one line saying where.
///
/// Returns the example's handle on it (with [`patient`] transaction settings), and the test
/// harness's, which the example checks its outcome with and which drops the database at the end.
///
/// # Errors
/// When no backend is available or the schema cannot be applied.
pub async fn database(setup: Setup) -> Result<(Database, TestDatabase), Error> {
    let harness = setup
        .with_transaction_settings(patient())
        .try_create()
        .await?;
    println!("database {} ({})", harness.path(), harness.mode());
    Ok((harness.database().clone(), harness))
}

/// Runs one statement in a read-write transaction of its own and returns the rows it changed.
///
/// # Errors
/// Spanner's error.
pub async fn execute(db: &Database, statement: Statement) -> Result<i64, Error> {
    let changed = db
        .transaction()
        .run(move |tx| async move { Ok(tx.execute_update(statement).await?) })
        .await?;
    Ok(changed)
}

/// The first column of the first row of `sql` as an integer (0 without rows).
///
/// # Errors
/// Spanner's error.
pub async fn count(db: &Database, sql: &str) -> Result<i64, Error> {
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(sql))
        .await?;
    match rows.next().await {
        Some(row) => Ok(row?.get::<i64>(0)?),
        None => Ok(0),
    }
}

/// Polls `done` every 200 ms until it says yes, for at most `limit`.
///
/// # Errors
/// `done`'s error, or a timeout naming `what`.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut done: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, Error>>,
{
    let deadline = Instant::now() + limit;
    while !done().await? {
        if Instant::now() > deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Serves `app` on a free loopback port, in the background; returns its address.
///
/// # Errors
/// When no loopback port can be bound.
pub async fn serve_local(app: axum::Router) -> Result<SocketAddr, Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "local service stopped");
        }
    });
    Ok(address)
}

/// The environment variable that turns an example binary into its own worker process.
pub const ROLE_VARIABLE: &str = "SPANNER_QUEUES_EXAMPLE_ROLE";

/// The role this process was started in by [`WorkerProcess::start`], if any.
pub fn role() -> Option<String> {
    std::env::var(ROLE_VARIABLE).ok()
}

/// The database named by `SPANNER_DATABASE`, through `SPANNER_EMULATOR_HOST` when it is set (as
/// a worker process started by [`WorkerProcess::start`] has them), with [`patient`] transaction
/// settings.
///
/// # Errors
/// When the variable is missing or the database cannot be reached.
pub async fn connect_from_env() -> Result<Database, Error> {
    let path = std::env::var("SPANNER_DATABASE").map_err(|_| "SPANNER_DATABASE is not set")?;
    Ok(Database::builder(path)
        .with_transaction_settings(patient())
        .connect()
        .await?)
}

/// This example's binary, run again as a separate worker process (so that the example can kill
/// it as a crash would), with stdout read line by line.
#[derive(Debug)]
pub struct WorkerProcess {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl WorkerProcess {
    /// Starts this binary with [`ROLE_VARIABLE`] set to `role`, connected to `db`, with the
    /// extra environment `env`.
    ///
    /// # Errors
    /// When the process cannot start.
    pub fn start(db: &TestDatabase, role: &str, env: &[(&str, String)]) -> Result<Self, Error> {
        let mut command = tokio::process::Command::new(std::env::current_exe()?);
        command
            .env(ROLE_VARIABLE, role)
            .env("SPANNER_DATABASE", db.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        match db.emulator_host() {
            Some(host) => command.env("SPANNER_EMULATOR_HOST", host),
            None => command.env_remove("SPANNER_EMULATOR_HOST"),
        };
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        Ok(Self {
            child,
            stdout: BufReader::new(stdout).lines(),
        })
    }

    /// Waits for a line of its output that contains `needle` (echoing every line), for at most
    /// `limit`.
    ///
    /// # Errors
    /// When the process ends first, or on timeout.
    pub async fn wait_for_line(&mut self, needle: &str, limit: Duration) -> Result<String, Error> {
        let read = async {
            while let Some(line) = self.stdout.next_line().await? {
                println!("  [worker process] {line}");
                if line.contains(needle) {
                    return Ok(line);
                }
            }
            Err::<String, Error>(format!("the worker process ended before {needle:?}").into())
        };
        tokio::time::timeout(limit, read)
            .await
            .map_err(|_| format!("no {needle:?} from the worker process within {limit:?}"))?
    }

    /// Kills the process with SIGKILL, as a crash or an OOM kill would, and reaps it.
    ///
    /// # Errors
    /// When the process cannot be killed.
    pub async fn kill(mut self) -> Result<(), Error> {
        self.child.kill().await?;
        Ok(())
    }
}

/// Prints `line` and flushes stdout (a parent process reads it line by line).
pub fn say(line: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The README's code blocks, compiled as doctests (the ones that need a database are
/// `no_run`). The "Testing your queue code" block is `testing/tests/readme_example.rs`, which
/// runs as a test of its own.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// The code blocks of `docs/sending.md`, compiled as doctests like the README's.
#[cfg(doctest)]
#[doc = include_str!("../../docs/sending.md")]
struct SendingDoctests;

/// The code blocks of `docs/commit-outcomes.md`, compiled as doctests like the README's.
#[cfg(doctest)]
#[doc = include_str!("../../docs/commit-outcomes.md")]
struct CommitOutcomesDoctests;

/// The code blocks of `docs/batches.md`, compiled as doctests like the README's.
#[cfg(doctest)]
#[doc = include_str!("../../docs/batches.md")]
struct BatchesDoctests;

/// The code blocks of `docs/workers.md`, compiled as doctests like the README's.
#[cfg(doctest)]
#[doc = include_str!("../../docs/workers.md")]
struct WorkersDoctests;

/// The code blocks of `docs/ordering.md`, compiled as doctests like the README's.
#[cfg(doctest)]
#[doc = include_str!("../../docs/ordering.md")]
struct OrderingDoctests;
