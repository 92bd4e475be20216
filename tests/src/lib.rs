//! Shared helpers for the spanner-queues integration tests.
//!
//! The tests live in `tests/integration/` and run against whatever backend
//! `spanner_queues_testing` provides (emulator in a container, emulator processes, an
//! existing `SPANNER_EMULATOR_HOST`, or a real instance named by `SPANNER_QUEUES_TEST_INSTANCE`).

pub use spanner_queues_testing::{self as harness, Setup, TestDatabase, setup};

/// Creates the database a [`Setup`] describes, or skips the test (returning from it) with the
/// harness's printed reason. With `SPANNER_QUEUES_REQUIRE_EMULATOR=1` a missing backend fails
/// the test instead. Without an argument: an empty database (no queue, no worker tables, no
/// commit markers).
#[macro_export]
macro_rules! db_or_skip {
    () => {
        $crate::db_or_skip!($crate::setup().without_sdk_tables())
    };
    ($setup:expr) => {
        match $crate::Setup::create($setup).await {
            Some(db) => db,
            None => return,
        }
    };
}

use std::sync::Arc;
use std::time::{Duration, Instant};

use google_cloud_spanner::client::Spanner;
use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, QueueMessage, Worker};
use spanner_queues_fault_proxy::FaultProxy;
use tokio::task::JoinHandle;

/// The generator of the randomized tests, seeded with [`seed`] (see
/// `rand::SeedableRng::seed_from_u64`) and drawn from with `rand::RngExt`.
///
/// ChaCha8, not `SmallRng`: a test prints its seed so that a failure can be replayed later, on
/// another machine. `SmallRng` is platform-dependent and its algorithm may change in any `rand`
/// release; ChaCha8's output is fixed by the cipher and its `seed_from_u64` is value-stable.
/// The draws (`random_range`, `random_ratio`) are `rand`'s, pinned by `Cargo.lock`: a `rand`
/// upgrade may change what a seed picks, never whether the same lock file replays it. It is
/// the `chacha20` crate's (the generator `rand` itself is built on), so it costs no extra build.
pub type TestRng = chacha20::ChaCha8Rng;

/// The seed of a randomized test: the value of the environment variable `var` when it is set
/// (to replay a run whose seed was printed), else one from the clock. The test prints it.
///
/// # Panics
/// If `var` is set to something other than a `u64`: a replay with a mistyped seed must not
/// run with another one.
pub fn seed(var: &str) -> u64 {
    if let Ok(text) = std::env::var(var) {
        return text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var} is a u64 seed, not {text:?}"));
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// Runs `worker` in a task of its own, so that it can be killed: aborting the task drops its
/// handlers mid-run, releases nothing, stops renewal and abandons a transaction in flight. The
/// worker is returned too, for its counters.
pub fn run_killable<M: QueueMessage>(worker: Worker<M>) -> (Arc<Worker<M>>, JoinHandle<()>) {
    let worker = Arc::new(worker);
    let running = Arc::clone(&worker);
    let task = tokio::spawn(async move {
        let _ = running.run(std::future::pending::<()>()).await;
    });
    (worker, task)
}

/// A [`FaultProxy`] in front of `db`'s emulator, and a handle on `db` whose client dials
/// through it (the same dialect and default settings). `None`, after printing why, when the
/// backend is real Cloud Spanner: faults are injected between a client and an emulator only.
///
/// # Panics
/// If the proxy or the handle cannot start.
pub async fn through_fault_proxy(db: &TestDatabase) -> Option<(FaultProxy, Database)> {
    let Some(host) = db.emulator_host() else {
        eprintln!(
            "SKIPPING fault-injection test: the backend is real Cloud Spanner, and faults are \
             injected between the client and an emulator only"
        );
        return None;
    };
    let proxy = FaultProxy::start(host.to_owned())
        .await
        .expect("fault proxy");
    // A plaintext endpoint: the client uses anonymous credentials.
    let spanner = Spanner::builder()
        .with_endpoint(format!("http://{}", proxy.addr()))
        .build()
        .await
        .expect("client through the proxy");
    let faulty = Database::builder(db.path())
        .with_spanner(spanner)
        .with_dialect(db.dialect())
        .connect()
        .await
        .expect("database handle through the proxy");
    Some((proxy, faulty))
}

/// Runs a query whose first column of its first row is an INT64 (typically `COUNT(*)`).
///
/// # Panics
/// If the query fails or returns no row: tests want to stop there.
pub async fn count(db: &Database, sql: &str) -> i64 {
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(sql))
        .await
        .expect("query");
    let row = rows.next().await.expect("a row").expect("row");
    row.get::<i64>(0).expect("count")
}

/// Polls `condition` (an external state, such as a row count) until it holds, failing the test
/// after `within`.
///
/// # Panics
/// When `within` passes first.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `remaining` (a count of work still to do, such as queued rows) until it reaches zero,
/// failing the test only when it stops going down for `stall`. Large runs on a loaded machine
/// take as long as they take; a run that makes no progress fails.
///
/// # Panics
/// When `remaining` has not decreased for `stall`.
pub async fn until_drained<F, Fut>(stall: Duration, what: &str, mut remaining: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = i64>,
{
    let mut lowest = i64::MAX;
    let mut last_progress = Instant::now();
    loop {
        let now = remaining().await;
        if now <= 0 {
            return;
        }
        if now < lowest {
            lowest = now;
            last_progress = Instant::now();
        }
        assert!(
            last_progress.elapsed() < stall,
            "no progress for {stall:?} waiting for {what}: {now} left"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `CREATE QUEUE` statement of message type `M` (GoogleSQL).
///
/// # Panics
/// If the type's schema cannot be rendered.
pub fn queue_ddl<M: QueueMessage>() -> String {
    M::schema()
        .create_statement(spanner_queues::Dialect::GoogleSql)
        .expect("schema")
}
