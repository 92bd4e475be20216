//! Settings out of range fail where they are given, before any RPC, with one error variant,
//! `Error::InvalidSetting`, from every builder: `Database::builder(..).connect()` / `create()`,
//! `Worker::builder(..).build()`, `Receiver::builder(..).build()`, and `db.transaction()` with
//! its `TransactionSettings` (checked by `run`). No path runs with a value that would make
//! retries unbounded or panic. The database has no queue and no worker tables, so a path that
//! skipped the check would fail differently (or panic).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use spanner_queues::{
    Database, Error, HandlerError, MAX_PAYLOAD_BYTES_LIMIT, QueueMessage, ReceiveSettings,
    Receiver, RedeliveryPolicy, TransactionSettings, Worker,
};
use spanner_queues_tests::db_or_skip;

#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "Missing")]
struct Missing {
    #[queue(key)]
    id: i64,
}

#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(result: spanner_queues::Result<T>, expected: &str) {
    match result {
        Err(Error::InvalidSetting { setting, .. }) => assert_eq!(setting, expected),
        other => panic!("expected InvalidSetting `{expected}`, got {other:?}"),
    }
}

/// Transaction settings through `db.transaction()`: `run` refuses them before the closure
/// runs or anything is sent.
#[tokio::test]
async fn transaction_settings_out_of_range_fail_before_the_closure_runs() {
    let db = db_or_skip!();

    // The official retry policy reads 0 attempts as unlimited: the closure must never run.
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let result = db
        .transaction()
        .with_transaction_settings(TransactionSettings::default().with_max_attempts(0))
        .run(move |_tx| async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .await;
    assert_invalid(result, "max_attempts");
    let result = db
        .transaction()
        .with_transaction_settings(
            TransactionSettings::default().with_total_timeout(Duration::ZERO),
        )
        .guarded()
        .run(|_tx| async { Ok(()) })
        .await;
    assert_invalid(result, "total_timeout");
    // Without the check, the send would fail with QueueNotFound.
    let result = db
        .transaction()
        .with_transaction_settings(
            TransactionSettings::default().with_commit_timeout(Duration::MAX),
        )
        .run(|tx| async move { tx.send(&Missing { id: 1 }).await })
        .await;
    assert_invalid(result, "commit_timeout");
    let result = db
        .transaction()
        .with_transaction_settings(
            TransactionSettings::default().with_unknown_outcome_retries(u32::MAX),
        )
        .guarded()
        .run(|tx| async move { tx.send(&Missing { id: 1 }).await })
        .await;
    assert_invalid(result, "unknown_outcome_retries");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the closure ran");
}

/// `Database::builder`: the path and every setting are checked by `connect` and `create`
/// before any call (the database named here does not exist, so a call would fail otherwise).
#[tokio::test]
async fn database_settings_out_of_range_fail_before_connecting() {
    let db = db_or_skip!();
    let builder = || Database::builder(db.path()).with_spanner(db.spanner().clone());

    assert_invalid(
        builder().with_max_payload_bytes(0).connect().await,
        "max_payload_bytes",
    );
    assert_invalid(
        builder()
            .with_max_payload_bytes(MAX_PAYLOAD_BYTES_LIMIT + 1)
            .create()
            .await,
        "max_payload_bytes",
    );
    // The database's transaction settings are checked with it, not on first use.
    assert_invalid(
        builder()
            .with_transaction_settings(
                TransactionSettings::default().with_commit_timeout(Duration::MAX),
            )
            .connect()
            .await,
        "commit_timeout",
    );
    assert_invalid(
        builder()
            .with_transaction_settings(TransactionSettings::default().with_max_attempts(0))
            .create()
            .await,
        "max_attempts",
    );
    // A malformed path is a setting too: `database`.
    assert_invalid(
        Database::builder("orders")
            .with_spanner(db.spanner().clone())
            .connect()
            .await,
        "database",
    );
    assert_invalid(
        Database::builder("projects/p/instances/i/databases/")
            .with_spanner(db.spanner().clone())
            .create()
            .await,
        "database",
    );
}

/// `Receiver::builder(..).build()`.
#[tokio::test]
async fn receiver_settings_out_of_range_fail_at_build() {
    let db = db_or_skip!();
    // Without the check, `Semaphore::new` would panic.
    let receiver = Receiver::<Missing>::builder(&db)
        .with_receive_settings(ReceiveSettings::default().with_max_in_flight(usize::MAX))
        .build();
    assert_invalid(receiver.map(|_| ()), "max_in_flight");
    let receiver = Receiver::<Missing>::builder(&db)
        .with_receive_settings(ReceiveSettings::default().with_renew_interval(Duration::ZERO))
        .build();
    assert_invalid(receiver.map(|_| ()), "renew_interval");
}

/// `Worker::builder(..).build()`: the worker's own settings, and its nested ones named after
/// the setter that took them.
#[tokio::test]
async fn worker_settings_out_of_range_fail_at_build() {
    let db = db_or_skip!();
    let ok = |_message, _ctx| async { Ok::<(), HandlerError>(()) };
    // Without the check, the worker would fail on its missing tables (InvalidSchema).
    let worker = Worker::<Missing>::builder(&db)
        .with_concurrency(usize::MAX)
        .external(ok)
        .build();
    assert_invalid(worker.map(|_| ()), "concurrency");
    let worker = Worker::<Missing>::builder(&db)
        .with_redelivery_policy(RedeliveryPolicy::default().with_max_delay(Duration::MAX))
        .external(ok)
        .build();
    assert_invalid(worker.map(|_| ()), "redelivery_policy");
    let worker = Worker::<Missing>::builder(&db)
        .with_transaction_settings(TransactionSettings::default().with_max_attempts(0))
        .transactional(|_tx, _message, _ctx| async { Ok(()) })
        .build();
    assert_invalid(worker.map(|_| ()), "transaction_settings");
    let worker = Worker::<Missing>::builder(&db)
        .with_receive_settings(ReceiveSettings::default().with_renew_interval(Duration::ZERO))
        .external(ok)
        .build();
    assert_invalid(worker.map(|_| ()), "receive_settings");
}
