//! The queue test support: set-up, drain, and assertions whose failures say what to fix.

use std::sync::Arc;
use std::time::Duration;

use spanner_queues::{HandlerError, QueueMessage, RedeliveryPolicy, SendOptions, Worker};
use spanner_queues_testing::{Drain, HarnessError, TestDatabase};

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Jobs")]
struct Job {
    #[queue(key)]
    id: i64,
    action: String,
}

fn job(id: i64, action: &str) -> Job {
    Job {
        id,
        action: action.to_owned(),
    }
}

async fn database() -> Option<TestDatabase> {
    spanner_queues_testing::setup()
        .with_queue::<Job>()
        .create()
        .await
}

/// A worker that fails every job whose action is "fail", once (then dead-letters it).
fn worker(db: &TestDatabase) -> Worker<Job> {
    Worker::<Job>::builder(db)
        .with_max_attempts(1)
        .external(|job, _ctx| async move {
            if job.action == "fail" {
                Err(HandlerError::msg(format!(
                    "job {} cannot {}",
                    job.id, job.action
                )))
            } else {
                Ok(())
            }
        })
        .build()
        .expect("worker settings")
}

/// Runs `check` on its own task and returns its panic message (it must panic).
async fn panic_message<F, Fut>(db: &Arc<TestDatabase>, check: F) -> String
where
    F: FnOnce(Arc<TestDatabase>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let error = tokio::spawn(check(Arc::clone(db)))
        .await
        .expect_err("the assertion must fail");
    let payload = error.into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .expect("a panic message")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_assertions_list_what_is_left_and_what_differs() {
    let Some(db) = database().await else { return };
    let db = Arc::new(db);
    db.send(&job(1, "print")).await.expect("send");
    db.send(&job(2, "scan")).await.expect("send");
    assert_eq!(db.queue_len::<Job>().await.expect("len"), 2);

    // Passing forms.
    db.assert_queued(&[job(2, "scan"), job(1, "print")]).await;
    db.assert_queued_keys::<Job>(&[2, 1]).await;

    let message = panic_message(
        &db,
        |db| async move { db.assert_queue_empty::<Job>().await },
    )
    .await;
    assert!(
        message.contains("expected the queue Jobs to be empty"),
        "{message}"
    );
    assert!(message.contains("2 message(s) left"), "{message}");
    assert!(
        message.contains("(1) due now payload {\"action\":\"print\"}"),
        "{message}"
    );
    assert!(
        message.contains("queue_support.rs"),
        "names the caller: {message}"
    );

    let message = panic_message(&db, |db| async move {
        db.assert_queued(&[job(1, "print"), job(2, "copy"), job(3, "fax")])
            .await;
    })
    .await;
    assert!(message.contains("(2 found, 3 expected)"), "{message}");
    assert!(
        message.contains("missing: Job { id: 3, action: \"fax\" }"),
        "{message}"
    );
    assert!(
        message.contains(
            "unexpected: Job { id: 2, action: \"scan\" }\n      expected Job { id: 2, action: \"copy\" }"
        ),
        "{message}"
    );

    let message = panic_message(&db, |db| async move {
        db.assert_queued_keys::<Job>(&[1, 4]).await;
    })
    .await;
    assert!(message.contains("missing: (4)"), "{message}");
    assert!(message.contains("unexpected: (2)"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sent_by_sees_only_what_the_work_sent() {
    let Some(db) = database().await else { return };
    db.send(&job(1, "before")).await.expect("send");
    let ((), sent) = db
        .sent_by::<Job, _>(async {
            db.send(&job(2, "during")).await.expect("send");
            db.send(&job(3, "during")).await.expect("send");
        })
        .await;
    assert_eq!(sent.len(), 2);
    sent.assert_keys(&[3, 2]);
    sent.assert_exactly(&[job(2, "during"), job(3, "during")]);
    let ((), nothing) = db.sent_by::<Job, _>(async {}).await;
    nothing.assert_none();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sent.assert_none()));
    assert!(result.is_err(), "assert_none fails when something was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_runs_the_worker_until_idle_and_dead_letters_are_reported() {
    let Some(db) = database().await else { return };
    let db = Arc::new(db);
    for (id, action) in [(1, "print"), (2, "fail"), (3, "scan")] {
        db.send(&job(id, action)).await.expect("send");
    }
    let stats = db.drain(&worker(&db)).await.expect("drain");
    assert_eq!(stats.acked, 2, "{stats:?}");
    assert_eq!(stats.dead_lettered, 1, "{stats:?}");
    assert_eq!(stats.running, 0);
    db.assert_queue_empty::<Job>().await;

    let letters = db
        .dead_letters()
        .list(&Job::QUEUE, 100)
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].decode::<Job>().expect("decodes"), job(2, "fail"));
    let message = panic_message(
        &db,
        |db| async move { db.assert_no_dead_letters::<Job>().await },
    )
    .await;
    assert!(message.contains("found 1"), "{message}");
    assert!(
        message.contains("(2) after 1 attempt(s)") && message.contains("job 2 cannot fail"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_leaves_scheduled_messages_unless_asked_and_reports_a_stall() {
    let Some(db) = database().await else { return };
    db.send_with(
        &job(1, "later"),
        SendOptions::new().deliver_after(Duration::from_secs(3600)),
    )
    .await
    .expect("schedule");
    let worker = worker(&db);
    let stats = db.drain(&worker).await.expect("drain");
    assert_eq!(stats.started, 0, "{stats:?}");
    assert_eq!(db.queue_len::<Job>().await.expect("len"), 1);

    let error = db
        .drain_with(
            &worker,
            Drain::new()
                .including_scheduled()
                .with_stall_timeout(Duration::from_secs(2)),
        )
        .await
        .expect_err("an hour-later message never drains");
    let HarnessError::Stalled(text) = &error else {
        panic!("expected Stalled, got {error:?}");
    };
    assert!(text.contains("0 message(s) due, 1 scheduled"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn including_scheduled_waits_for_retries() {
    let Some(db) = database().await else { return };
    db.send(&job(1, "flaky")).await.expect("send");
    let tries = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = Arc::clone(&tries);
    let worker = Worker::<Job>::builder(&db)
        .with_redelivery_policy(
            RedeliveryPolicy::default()
                .with_initial_delay(Duration::from_millis(200))
                .with_multiplier(1.0),
        )
        .external(move |_job, _ctx| {
            let attempt = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            async move {
                if attempt < 3 {
                    Err(HandlerError::msg("not yet"))
                } else {
                    Ok(())
                }
            }
        })
        .build()
        .expect("worker settings");
    let stats = db
        .drain_with(&worker, Drain::new().including_scheduled())
        .await
        .expect("drain");
    assert_eq!(stats.acked, 1, "{stats:?}");
    assert_eq!(stats.retried, 2, "{stats:?}");
    assert_eq!(tries.load(std::sync::atomic::Ordering::SeqCst), 3);
    db.assert_queue_empty::<Job>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_cannot_start_is_an_error_not_a_hang() {
    // The queue only: no worker tables.
    let Some(db) = spanner_queues_testing::setup()
        .without_sdk_tables()
        .with_queue::<Job>()
        .create()
        .await
    else {
        return;
    };
    db.send(&job(1, "print")).await.expect("send");
    let error = db.drain(&worker(&db)).await.expect_err("no worker tables");
    assert!(matches!(error, HarnessError::Worker { .. }), "{error:?}");
    let chain = spanner_queues_emulator::error_chain(&error);
    assert!(chain.contains("with_worker_tables"), "{chain}");
}
