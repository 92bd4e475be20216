//! Settings out of range fail where they are used, before any RPC, with
//! `Error::InvalidSetting`: no path runs with a value that would make retries unbounded or
//! panic. The database has no queue and no worker tables, so a path that skipped the check
//! would fail differently (or panic).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use spanner_queues::transaction::{self, TransactionSettings};
use spanner_queues::{
    Error, HandlerError, Producer, QueueMessage, ReceiveSettings, Receiver, RedeliveryPolicy,
    Worker,
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

#[tokio::test]
async fn out_of_range_settings_fail_before_anything_runs() {
    let db = db_or_skip!();
    let client = db.client();

    // The official retry policy reads 0 attempts as unlimited: the closure must never run.
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let result = transaction::builder(client)
        .with_settings(TransactionSettings::default().with_max_attempts(0))
        .run(move |_tx| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .await;
    assert_invalid(result, "max_attempts");
    let result = transaction::builder(client)
        .with_settings(TransactionSettings::default().with_total_timeout(Duration::ZERO))
        .guarded()
        .run(|_tx| async { Ok(()) })
        .await;
    assert_invalid(result, "total_timeout");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the closure ran");

    // Without the check, the send would fail with QueueNotFound.
    let producer = Producer::new(client.clone())
        .with_settings(TransactionSettings::default().with_commit_timeout(Duration::MAX));
    assert_invalid(producer.send(&Missing { id: 1 }).await, "commit_timeout");

    // Without the check, `Semaphore::new` would panic.
    let receiver = Receiver::<Missing>::builder(client.clone())
        .with_settings(ReceiveSettings::default().with_max_in_flight(usize::MAX))
        .build();
    assert_invalid(receiver.map(|_| ()), "max_in_flight");
    let receiver = Receiver::<Missing>::builder(client.clone())
        .with_transaction_settings(TransactionSettings::default().with_max_attempts(0))
        .build();
    assert_invalid(receiver.map(|_| ()), "max_attempts");

    // Without the check, the worker would fail on its missing tables (InvalidSchema).
    let worker = Worker::<Missing>::builder(client.clone())
        .with_concurrency(usize::MAX)
        .external(|_message, _ctx| async { Ok::<(), HandlerError>(()) });
    assert_invalid(worker.run(async {}).await, "concurrency");
    let worker = Worker::<Missing>::builder(client.clone())
        .with_redelivery_policy(RedeliveryPolicy::default().with_max_delay(Duration::MAX))
        .external(|_message, _ctx| async { Ok::<(), HandlerError>(()) })
        .spawn();
    assert_invalid(worker.shutdown().await, "redelivery_policy");
}
