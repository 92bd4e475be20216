//! Shared helpers for the spanner-queues integration tests.
//!
//! The tests live in `tests/integration/` and run against whatever backend
//! `spanner_queues_testing` provides (emulator in a container, emulator processes, an
//! existing `SPANNER_EMULATOR_HOST`, or a real instance named by `SPANNER_QUEUES_TEST_INSTANCE`).

pub use spanner_queues_testing::{self as harness, TestDatabase};

/// Gets a fresh database or skips the test (returning from it) with the harness's printed
/// reason. With `SPANNER_QUEUES_REQUIRE_EMULATOR=1` a missing backend fails the test instead.
#[macro_export]
macro_rules! db_or_skip {
    () => {
        match $crate::harness::database().await {
            Some(db) => db,
            None => return,
        }
    };
    ($ddl:expr) => {
        match $crate::harness::database_with_ddl($ddl).await {
            Some(db) => db,
            None => return,
        }
    };
}

use std::time::{Duration, Instant};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;
use spanner_queues::QueueMessage;

/// Runs a query whose first column of its first row is an INT64 (typically `COUNT(*)`).
///
/// # Panics
/// If the query fails or returns no row: tests want to stop there.
pub async fn count(db: &DatabaseClient, sql: &str) -> i64 {
    let mut rows = db
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
