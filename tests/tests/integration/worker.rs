//! Issue 5: the worker runtime.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use google_cloud_spanner::statement::Statement;
use spanner_queues::worker::WorkerStats;
use spanner_queues::{
    Database, HandlerError, QueueMessage, ReceiveSettings, RedeliveryPolicy, Transaction,
    TransactionSettings, Worker,
};
use spanner_queues_tests::{
    Setup, TestDatabase, count, db_or_skip, eventually, setup, until_drained,
};
use tokio::sync::{Barrier, watch};

/// JSON in a STRING column, so that a test can also write a payload that is not JSON.
#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Tasks", payload_type = "STRING")]
struct Task {
    #[queue(key)]
    id: i64,
    name: String,
}

const EFFECTS: &str = "CREATE TABLE Effects (EffectId STRING(36) NOT NULL, TaskId INT64 NOT NULL) \
                       PRIMARY KEY (EffectId)";

/// The queue, the effects table and the worker's tables (and the commit markers).
fn schema() -> Setup {
    setup().with_queue::<Task>().with_ddl([EFFECTS])
}

/// Each queued task's key, with its deliver time and whether it is due.
async fn deliver_times(db: &TestDatabase) -> BTreeMap<String, (SystemTime, bool)> {
    db.queued::<Task>()
        .await
        .expect("the queue reads")
        .iter()
        .map(|queued| {
            (
                queued.key.to_string(),
                (queued.deliver_time, queued.is_due()),
            )
        })
        .collect()
}

fn task(id: i64) -> Task {
    Task {
        id,
        name: format!("task {id}"),
    }
}

/// Bounds for the emulator, which runs one read-write transaction per database at a time and
/// aborts the others: give concurrent workers room to retry.
fn patient() -> TransactionSettings {
    TransactionSettings::default()
        .with_max_attempts(200)
        .with_total_timeout(Duration::from_secs(120))
}

async fn send(db: &Database, ids: impl IntoIterator<Item = i64>) {
    let tasks: Vec<Task> = ids.into_iter().map(task).collect();
    for chunk in tasks.chunks(100) {
        db.transaction()
            .with_transaction_settings(patient())
            .run(move |tx| async move { tx.send_many(chunk).await })
            .await
            .expect("send");
    }
}

/// A worker running in its own task until stopped.
struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

fn start(worker: &Arc<Worker<Task>>) -> Running {
    let (stop, mut stopped) = watch::channel(false);
    let worker = Arc::clone(worker);
    let task = tokio::spawn(async move {
        worker
            .run(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
            .expect("worker run");
    });
    Running { stop, task }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("the worker task ends cleanly");
    }
}

/// Inserts one business effect row for `task` inside the handler's transaction.
async fn record_effect(tx: &Transaction, task: &Task) -> Result<(), HandlerError> {
    tx.execute_update(
        Statement::builder("INSERT INTO Effects (EffectId, TaskId) VALUES (@effect, @task)")
            .add_param("effect", uuid::Uuid::new_v4().to_string())
            .add_param("task", task.id)
            .build(),
    )
    .await?;
    Ok(())
}

fn total(stats: &[WorkerStats], field: impl Fn(&WorkerStats) -> u64) -> u64 {
    stats.iter().map(field).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_messages_four_workers_each_applied_exactly_once() {
    let db = db_or_skip!(schema());
    const N: i64 = 1000;
    send(&db, 1..=N).await;

    // One database handle (with a client of its own) per worker, as separate processes would
    // have: the emulator runs one read-write transaction per session at a time (see `patient`).
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(
            Database::builder(db.path())
                .with_spanner(db.spanner().clone())
                .connect()
                .await
                .expect("a handle with its own client"),
        );
    }
    let started = Instant::now();
    let workers: Vec<Arc<Worker<Task>>> = handles
        .iter()
        .map(|handle| {
            Arc::new(
                Worker::<Task>::builder(handle)
                    .with_concurrency(1)
                    .with_prefetch(4)
                    .with_transaction_settings(patient())
                    .transactional(|tx, task, _ctx| async move { record_effect(&tx, &task).await })
                    .build()
                    .expect("worker"),
            )
        })
        .collect();
    let running: Vec<Running> = workers.iter().map(start).collect();
    until_drained(Duration::from_secs(120), "1000 tasks handled", || async {
        count(&db, "SELECT COUNT(*) FROM Tasks").await
    })
    .await;
    let elapsed = started.elapsed();
    for worker in running {
        worker.stop().await;
    }
    let stats: Vec<WorkerStats> = workers.iter().map(|w| w.stats()).collect();
    println!(
        "1000 messages, 4 workers: {elapsed:?} ({:.0} msg/s); acked per worker {:?}; \
         started {}, retried {}, lease lost {}, expired on receipt {}, renew calls {}",
        N as f64 / elapsed.as_secs_f64(),
        stats.iter().map(|s| s.acked).collect::<Vec<_>>(),
        total(&stats, |s| s.started),
        total(&stats, |s| s.retried),
        total(&stats, |s| s.lease_lost),
        total(&stats, |s| s.receiver.expired_on_receipt),
        total(&stats, |s| s.receiver.renew_requests),
    );
    println!("{stats:#?}");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Effects").await, N);
    assert_eq!(
        count(&db, "SELECT COUNT(DISTINCT TaskId) FROM Effects").await,
        N,
        "every task applied once"
    );
    db.assert_queue_empty::<Task>().await;
    assert_eq!(
        total(&stats, |s| s.acked),
        N as u64,
        "every message acked once"
    );
    assert_eq!(total(&stats, |s| s.dead_lettered), 0);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM SpannerQueuesAttempts").await,
        0,
        "attempt rows are deleted with the ack"
    );
}

#[tokio::test]
async fn a_handler_running_three_leases_keeps_its_lease() {
    let db = db_or_skip!(schema());
    send(&db, [1]).await;
    let calls = Arc::new(AtomicUsize::new(0));
    // Two workers on the queue: a redelivery would reach either.
    let workers: Vec<Arc<Worker<Task>>> = (0..2)
        .map(|_| {
            let calls = Arc::clone(&calls);
            Arc::new(
                Worker::<Task>::builder(&db)
                    .with_concurrency(1)
                    .with_transaction_settings(patient())
                    .external(move |_task, ctx| {
                        let calls = Arc::clone(&calls);
                        async move {
                            calls.fetch_add(1, Ordering::SeqCst);
                            // The work itself: three times Spanner's 10-second lease.
                            tokio::time::sleep(Duration::from_secs(30)).await;
                            assert!(!ctx.is_lease_lost());
                            Ok(())
                        }
                    })
                    .build()
                    .expect("worker"),
            )
        })
        .collect();
    let running: Vec<Running> = workers.iter().map(start).collect();
    eventually(Duration::from_secs(90), "the long task acked", || async {
        count(&db, "SELECT COUNT(*) FROM Tasks").await == 0
    })
    .await;
    for worker in running {
        worker.stop().await;
    }
    let stats: Vec<WorkerStats> = workers.iter().map(|w| w.stats()).collect();
    println!("long handler: {stats:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "never delivered again");
    assert_eq!(total(&stats, |s| s.acked), 1);
    assert_eq!(total(&stats, |s| s.lease_lost), 0);
    assert_eq!(total(&stats, |s| s.receiver.lease_lost), 0);
    assert!(
        total(&stats, |s| s.receiver.renewed) >= 6,
        "renewed through 30 s at 4 s intervals"
    );
}

#[tokio::test]
async fn a_crashed_worker_s_message_goes_to_another_worker_after_its_lease() {
    let db = db_or_skip!(schema());
    send(&db, [1]).await;
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let stuck = Arc::new(
        Worker::<Task>::builder(&db)
            .with_concurrency(1)
            .with_transaction_settings(patient())
            .external(move |_task, ctx| {
                let started_tx = started_tx.clone();
                async move {
                    let _ = started_tx.send(ctx.attempt());
                    std::future::pending::<()>().await;
                    Ok(())
                }
            })
            .build()
            .expect("worker"),
    );
    let crashed = start(&stuck);
    let first_attempt = tokio::time::timeout(Duration::from_secs(30), started_rx.recv())
        .await
        .expect("the first worker starts the task")
        .expect("attempt");
    assert_eq!(first_attempt, 1);
    // Crash: the worker's task disappears without releasing anything; renewal stops with it.
    crashed.task.abort();
    let crash_time = Instant::now();

    let seen = Arc::new(Mutex::new(Vec::new()));
    let rescuer = {
        let seen = Arc::clone(&seen);
        Worker::<Task>::builder(&db)
            .with_transaction_settings(patient())
            .transactional(move |tx, task, ctx| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock().expect("lock").push(ctx.attempt());
                    record_effect(&tx, &task).await
                }
            })
            .build()
            .expect("worker")
            .spawn()
    };
    eventually(Duration::from_secs(60), "the task redelivered", || async {
        count(&db, "SELECT COUNT(*) FROM Tasks").await == 0
    })
    .await;
    let after = crash_time.elapsed();
    assert!(
        !rescuer.is_finished(),
        "the spawned worker runs until shut down"
    );
    let stats = rescuer.shutdown().await.expect("the rescuer shuts down");
    assert_eq!(stats.acked, 1, "{stats:?}");
    println!("redelivered {after:?} after the crash");
    let seen = seen.lock().expect("lock").clone();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|attempt| *attempt == 2),
        "the crashed attempt counts: {seen:?}"
    );
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Effects").await, 1);
    assert!(
        after >= Duration::from_secs(3),
        "redelivered only once the lease lapsed ({after:?})"
    );
}

#[tokio::test]
async fn failures_retry_with_growing_delays_then_dead_letter_and_replay() {
    let db = db_or_skip!(schema());
    send(&db, [1, 2, 3, 4, 5, 66]).await;
    let attempts: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
    let worker = {
        let attempts = Arc::clone(&attempts);
        Arc::new(
            Worker::<Task>::builder(&db)
                .with_concurrency(2)
                .with_max_attempts(4)
                .with_transaction_settings(patient())
                .with_redelivery_policy(
                    RedeliveryPolicy::default()
                        .with_initial_delay(Duration::from_millis(400))
                        .with_multiplier(2.0)
                        .with_jitter(0.0),
                )
                .transactional(move |tx, task, ctx| {
                    let attempts = Arc::clone(&attempts);
                    async move {
                        if task.id == 66 {
                            attempts
                                .lock()
                                .expect("lock")
                                .push((ctx.attempt(), Instant::now()));
                            return Err(HandlerError::msg(format!(
                                "payment declined (attempt {})",
                                ctx.attempt()
                            )));
                        }
                        record_effect(&tx, &task).await
                    }
                })
                .build()
                .expect("worker"),
        )
    };
    let running = start(&worker);
    let dead = db.dead_letters();
    eventually(Duration::from_secs(60), "task 66 dead-lettered", || async {
        !dead.list(&Task::QUEUE, 10).await.expect("list").is_empty()
    })
    .await;
    running.stop().await;

    let attempts = attempts.lock().expect("lock").clone();
    assert_eq!(
        attempts.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1].1 - w[0].1).collect();
    println!("gaps between attempts: {gaps:?}");
    for (gap, expected) in gaps.iter().zip([400_u64, 800, 1600]) {
        assert!(
            *gap >= Duration::from_millis(expected - 50),
            "gap {gap:?} shorter than the {expected} ms back-off"
        );
    }
    // The lower bounds double, so a constant or linear back-off fails them; comparing one gap
    // with the next would also fail when load delays an early attempt, proving nothing more.

    let letters = dead.list(&Task::QUEUE, 10).await.expect("list");
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(letter.key().to_string(), "(66)");
    assert_eq!(letter.attempts(), 4);
    assert!(
        letter.error().contains("payment declined (attempt 4)"),
        "{}",
        letter.error()
    );
    assert_eq!(letter.decode::<Task>().expect("payload kept"), task(66));
    db.assert_queue_empty::<Task>().await;
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Effects").await, 5);
    let stats = worker.stats();
    assert_eq!((stats.retried, stats.dead_lettered, stats.acked), (3, 1, 5));

    // Replay: back in the queue (attempts from zero), out of the dead-letter table.
    assert!(
        dead.replay(&Task::QUEUE, letter.key())
            .await
            .expect("replay")
    );
    assert!(
        !dead
            .replay(&Task::QUEUE, letter.key())
            .await
            .expect("second replay")
    );
    assert!(dead.list(&Task::QUEUE, 10).await.expect("list").is_empty());
    let fixed = Arc::new(
        Worker::<Task>::builder(&db)
            .with_transaction_settings(patient())
            .transactional(|tx, task, ctx| async move {
                assert_eq!(ctx.attempt(), 1, "a replay starts a fresh count");
                record_effect(&tx, &task).await
            })
            .build()
            .expect("worker"),
    );
    let running = start(&fixed);
    eventually(
        Duration::from_secs(30),
        "the replayed task handled",
        || async { count(&db, "SELECT COUNT(*) FROM Effects").await == 6 },
    )
    .await;
    running.stop().await;
    db.assert_queue_empty::<Task>().await;
}

#[tokio::test]
async fn panics_and_undecodable_payloads_are_dead_lettered_and_the_worker_goes_on() {
    let db = db_or_skip!(schema());
    send(&db, 1..=10).await;
    db.client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(Statement::builder(
                "INSERT INTO Tasks (Id, Payload) VALUES (999, '{not json')",
            ))
            .await
        })
        .await
        .expect("raw insert");
    let worker = Arc::new(
        Worker::<Task>::builder(&db)
            .with_concurrency(3)
            .with_max_attempts(2)
            .with_transaction_settings(patient())
            .with_redelivery_policy(
                RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(100)),
            )
            .transactional(|tx, task, _ctx| async move {
                if task.id == 7 {
                    panic!("task 7 trips a bug");
                }
                record_effect(&tx, &task).await
            })
            .build()
            .expect("worker"),
    );
    let running = start(&worker);
    let dead = db.dead_letters();
    eventually(Duration::from_secs(90), "two dead letters", || async {
        dead.list(&Task::QUEUE, 10).await.expect("list").len() == 2
    })
    .await;
    // Still serving.
    send(&db, [11]).await;
    eventually(Duration::from_secs(90), "later work done", || async {
        count(&db, "SELECT COUNT(*) FROM Effects").await == 10
    })
    .await;
    running.stop().await;

    let letters: HashMap<String, _> = dead
        .list(&Task::QUEUE, 10)
        .await
        .expect("list")
        .into_iter()
        .map(|l| (l.key().to_string(), l))
        .collect();
    let panicked = &letters["(7)"];
    assert_eq!(panicked.attempts(), 2);
    assert!(
        panicked
            .error()
            .contains("handler panicked: task 7 trips a bug"),
        "{}",
        panicked.error()
    );
    let poison = &letters["(999)"];
    assert_eq!(poison.attempts(), 1, "dead-lettered at once");
    assert!(poison.error().contains("decode"), "{}", poison.error());
    assert_eq!(
        poison.payload().as_bytes(),
        b"{not json",
        "raw payload kept"
    );
    let stats = worker.stats();
    assert_eq!(stats.panics, 2);
    assert_eq!(stats.dead_lettered, 2);
    db.assert_queue_empty::<Task>().await;
}

#[tokio::test]
async fn shutdown_releases_running_and_waiting_messages_for_prompt_redelivery() {
    let db = db_or_skip!(schema());
    send(&db, 1..=4).await;
    let running_handlers = Arc::new(AtomicUsize::new(0));
    let slow = {
        let running_handlers = Arc::clone(&running_handlers);
        Arc::new(
            Worker::<Task>::builder(&db)
                .with_concurrency(2)
                .with_prefetch(2)
                .with_shutdown_grace(Duration::from_millis(300))
                .with_transaction_settings(patient())
                .external(move |_task, _ctx| {
                    let running_handlers = Arc::clone(&running_handlers);
                    async move {
                        running_handlers.fetch_add(1, Ordering::SeqCst);
                        std::future::pending::<()>().await;
                        Ok(())
                    }
                })
                .build()
                .expect("worker"),
        )
    };
    let running = start(&slow);
    eventually(
        Duration::from_secs(30),
        "two handlers busy, two prefetched",
        || {
            let busy = running_handlers.load(Ordering::SeqCst) == 2
                && slow.stats().receiver.in_flight == 4;
            async move { busy }
        },
    )
    .await;
    let leased = deliver_times(&db).await;
    running.stop().await;
    let stats = slow.stats();
    assert_eq!(stats.released_on_shutdown, 4, "{stats:?}");
    assert_eq!(stats.receiver.in_flight, 0);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM Tasks").await,
        4,
        "nothing lost"
    );
    // Released, not left to their leases: a release acks the message and sends it again, due
    // at once, so each row was written anew (its deliver time changed) and is due now. A
    // message left leased would keep its row until the lease lapsed.
    let released = deliver_times(&db).await;
    assert_eq!(
        released.keys().collect::<Vec<_>>(),
        leased.keys().collect::<Vec<_>>()
    );
    for (key, (deliver_time, due)) in &released {
        assert_ne!(
            Some(deliver_time),
            leased.get(key).map(|(leased_time, _)| leased_time),
            "{key}: still the row that was leased"
        );
        assert!(due, "{key}: released but not due");
    }

    // Task id -> attempt numbers seen (a transactional handler runs again after an abort).
    let seen: Arc<Mutex<HashMap<i64, Vec<u32>>>> = Arc::default();
    let next = {
        let seen = Arc::clone(&seen);
        Arc::new(
            Worker::<Task>::builder(&db)
                .with_transaction_settings(patient())
                .transactional(move |tx, task, ctx| {
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.lock()
                            .expect("lock")
                            .entry(task.id)
                            .or_default()
                            .push(ctx.attempt());
                        record_effect(&tx, &task).await
                    }
                })
                .build()
                .expect("worker"),
        )
    };
    let running = start(&next);
    eventually(Duration::from_secs(30), "all four handled", || async {
        count(&db, "SELECT COUNT(*) FROM Tasks").await == 0
    })
    .await;
    running.stop().await;
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Effects").await, 4);
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(
        seen.values().flatten().all(|attempt| *attempt == 1),
        "interrupted attempts do not count: {seen:?}"
    );
}

#[tokio::test]
async fn never_more_handlers_than_the_concurrency() {
    let db = db_or_skip!(schema());
    send(&db, 1..=20).await;
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    // The first three runs (the concurrency) wait for each other: the worker must run that many
    // side by side, and while they are held, with 17 more messages queued, a fourth run would
    // show in `peak`.
    let together = Arc::new(Barrier::new(3));
    let arrivals = Arc::new(AtomicUsize::new(0));
    let apart = Arc::new(AtomicBool::new(false));
    let worker = {
        let (now, peak) = (Arc::clone(&now), Arc::clone(&peak));
        let (together, arrivals, apart) = (together, Arc::clone(&arrivals), Arc::clone(&apart));
        Arc::new(
            Worker::<Task>::builder(&db)
                .with_concurrency(3)
                .with_transaction_settings(patient())
                .with_receive_settings(ReceiveSettings::default().with_parallel_calls(2))
                .external(move |_task, _ctx| {
                    let (now, peak) = (Arc::clone(&now), Arc::clone(&peak));
                    let (together, arrivals) = (Arc::clone(&together), Arc::clone(&arrivals));
                    let apart = Arc::clone(&apart);
                    async move {
                        let current = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(current, Ordering::SeqCst);
                        if arrivals.fetch_add(1, Ordering::SeqCst) < 3
                            && tokio::time::timeout(Duration::from_secs(60), together.wait())
                                .await
                                .is_err()
                        {
                            apart.store(true, Ordering::SeqCst);
                        }
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    }
                })
                .build()
                .expect("worker"),
        )
    };
    let running = start(&worker);
    eventually(Duration::from_secs(60), "20 tasks", || async {
        count(&db, "SELECT COUNT(*) FROM Tasks").await == 0
    })
    .await;
    running.stop().await;
    let stats = worker.stats();
    println!(
        "concurrency 3: peak {}, {stats:?}",
        peak.load(Ordering::SeqCst)
    );
    assert!(
        !apart.load(Ordering::SeqCst),
        "the first three handler runs did not meet within 60 s: the worker ran fewer than its \
         concurrency side by side"
    );
    assert_eq!(
        peak.load(Ordering::SeqCst),
        3,
        "the concurrency, reached and never passed"
    );
    assert!(stats.max_running <= 3);
    // Concurrency + the default prefetch (the concurrency, at least 8).
    assert!(
        stats.receiver.max_in_flight <= 3 + 8,
        "concurrency + prefetch: {stats:?}"
    );
    assert_eq!(stats.acked, 20);
}

#[tokio::test]
async fn external_handlers_see_a_stable_idempotency_key_across_retries() {
    let db = db_or_skip!(schema());
    send(&db, [5]).await;
    /// Attempt, idempotency key, previous error.
    type Seen = Vec<(u32, String, Option<String>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let worker = {
        let seen = Arc::clone(&seen);
        Arc::new(
            Worker::<Task>::builder(&db)
                .with_transaction_settings(patient())
                .external(move |_task, ctx| {
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.lock().expect("lock").push((
                            ctx.attempt(),
                            ctx.idempotency_key(),
                            ctx.previous_error().map(str::to_owned),
                        ));
                        if ctx.attempt() == 1 {
                            return Err(HandlerError::retry_after(
                                Duration::from_millis(200),
                                "gateway timeout",
                            ));
                        }
                        Ok(())
                    }
                })
                .build()
                .expect("worker"),
        )
    };
    let running = start(&worker);
    eventually(
        Duration::from_secs(30),
        "acked on the second attempt",
        || async { count(&db, "SELECT COUNT(*) FROM Tasks").await == 0 },
    )
    .await;
    running.stop().await;
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!((seen[0].0, seen[1].0), (1, 2));
    assert_eq!(seen[0].1, seen[1].1, "same idempotency key");
    assert_eq!(
        seen[0].1,
        spanner_queues::worker::idempotency_key(&Task::QUEUE, &task(5).message_key()),
        "the key the SDK documents: `Tasks:` and a SHA-256 digest"
    );
    assert_eq!(seen[0].1.len(), "Tasks:".len() + 64, "{}", seen[0].1);
    assert_eq!(seen[1].2.as_deref(), Some("gateway timeout"));
    let stats = worker.stats();
    assert_eq!((stats.retried, stats.acked), (1, 1));
}

#[tokio::test]
async fn a_worker_without_its_tables_refuses_to_start() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Task>());
    let worker = Worker::<Task>::builder(&db)
        .transactional(|_tx, _task, _ctx| async move { Ok(()) })
        .build()
        .expect("worker");
    let error = worker
        .run(std::future::pending::<()>())
        .await
        .expect_err("no worker tables");
    assert!(
        matches!(error, spanner_queues::Error::InvalidSchema { .. }),
        "{error:?}"
    );
    // The fix it names is the SDK's one way to create them.
    assert!(error.to_string().contains("with_worker_tables"), "{error}");
}

#[tokio::test]
async fn a_worker_on_a_missing_queue_fails_fast_with_queue_not_found() {
    // The worker's tables but no queue: it used to idle with WARN lines and return Ok.
    let db = db_or_skip!(setup());
    let worker = Worker::<Task>::builder(&db)
        .transactional(|_tx, _task, _ctx| async move { Ok(()) })
        .build()
        .expect("worker");
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        worker.run(std::future::pending::<()>()),
    )
    .await
    .expect("returns instead of idling")
    .expect_err("no queue");
    assert!(
        matches!(error, spanner_queues::Error::QueueNotFound { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_worker_on_a_queue_whose_key_type_drifted_fails_fast_with_schema_drift() {
    // `Tasks` keyed by STRING while the type's key is an INT64, with a message in it: the
    // worker must refuse at start, naming the key column, not idle with the row never handled.
    let db = db_or_skip!(setup().with_ddl([
        "CREATE QUEUE Tasks (Id STRING(MAX) NOT NULL, Payload STRING(MAX) NOT NULL) \
         PRIMARY KEY (Id)"
    ]));
    db.client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(Statement::builder(
                "INSERT INTO Tasks (Id, Payload) VALUES ('seven', '{\"id\": 7, \"name\": \"x\"}')",
            ))
            .await
        })
        .await
        .expect("raw insert");
    let worker = Worker::<Task>::builder(&db)
        .with_transaction_settings(patient())
        .transactional(|_tx, _task, _ctx| async move { Ok(()) })
        .build()
        .expect("worker");
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        worker.run(std::future::pending::<()>()),
    )
    .await
    .expect("returns instead of idling")
    .expect_err("a drifted key column");
    match &error {
        spanner_queues::Error::SchemaDrift { differences, .. } => assert!(
            differences.iter().any(|d| d.contains("key column `Id`")),
            "{differences:?}"
        ),
        other => panic!("expected SchemaDrift, got {other:?}"),
    }
    assert_eq!(worker.stats().started, 0, "no handler ran");
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM Tasks").await,
        1,
        "the message is left alone"
    );
}

#[tokio::test]
async fn an_aborted_transaction_runs_the_handler_again_within_the_same_attempt() {
    let db = db_or_skip!(schema());
    send(&db, [1]).await;
    let runs: Arc<Mutex<Vec<u32>>> = Arc::default();
    let worker = {
        let runs = Arc::clone(&runs);
        Worker::<Task>::builder(&db)
            .with_transaction_settings(patient())
            .transactional(move |tx, task, ctx| {
                let runs = Arc::clone(&runs);
                async move {
                    let first = {
                        let mut runs = runs.lock().expect("lock");
                        runs.push(ctx.attempt());
                        runs.len() == 1
                    };
                    record_effect(&tx, &task).await?;
                    if first {
                        // As Spanner does when it aborts a transaction: the runner runs the
                        // body again, and nothing of this run is applied.
                        return Err(google_cloud_spanner::Error::service(
                            google_cloud_gax::error::rpc::Status::default()
                                .set_code(google_cloud_gax::error::rpc::Code::Aborted)
                                .set_message("aborted by the test"),
                        )
                        .into());
                    }
                    Ok(())
                }
            })
            .build()
            .expect("worker")
            .spawn()
    };
    eventually(Duration::from_secs(60), "the task handled", || async {
        count(&db, "SELECT COUNT(*) FROM Tasks").await == 0
    })
    .await;
    let stats = worker.shutdown().await.expect("shutdown");
    assert_eq!(
        *runs.lock().expect("lock"),
        vec![1, 1],
        "the re-run is the same attempt"
    );
    assert_eq!((stats.started, stats.acked, stats.retried), (1, 1, 0));
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Effects").await, 1);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM SpannerQueuesAttempts").await,
        0
    );
}
