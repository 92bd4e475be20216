//! The reliability suite: workers killed, restarted, stalled by a faulty network and fed bad
//! input, at small scale. Every case asserts that no message is lost (each one has exactly one
//! business effect, or is dead-lettered when it cannot be processed) and that no effect is
//! applied twice.
//!
//! The small scale keeps the suite to a few minutes in CI. `SPANNER_QUEUES_LONG=1` runs each
//! case with thousands of messages (and more kills and faults).

use std::collections::HashMap;
use std::time::Duration;

use google_cloud_spanner::statement::Statement;
use spanner_queues::worker::{NoHandler, WorkerBuilder, WorkerHandle};
use spanner_queues::{
    Database, HandlerError, QueueMessage, ReceiveSettings, RedeliveryPolicy, TransactionSettings,
    Worker,
};
use spanner_queues_fault_proxy::{Code, Fault, FaultKind, Method};
use spanner_queues_tests::{
    Setup, count, db_or_skip, eventually, run_killable, setup, through_fault_proxy, until_drained,
};

const COMMIT: &str = "/google.spanner.v1.Spanner/Commit";
const STREAMING_SQL: &str = "/google.spanner.v1.Spanner/ExecuteStreamingSql";

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Jobs", payload_type = "STRING")]
struct Job {
    #[queue(key)]
    id: i64,
    amount: i64,
}

/// One row per applied effect; a second application of one job would add a second row.
const EFFECTS: &str = "CREATE TABLE Effects (EffectId STRING(36) NOT NULL, JobId INT64 NOT NULL) \
                       PRIMARY KEY (EffectId)";

/// Whether the long mode (`SPANNER_QUEUES_LONG=1`) is on.
fn long() -> bool {
    std::env::var("SPANNER_QUEUES_LONG").is_ok_and(|v| v == "1")
}

/// `small` messages (or events) in CI, `large` in the long mode.
fn scale(small: i64, large: i64) -> i64 {
    if long() { large } else { small }
}

/// The queue, the effects table and the worker's tables (and the commit markers).
fn schema() -> Setup {
    setup().with_queue::<Job>().with_ddl([EFFECTS])
}

/// The emulator runs one read-write transaction per database at a time: give workers room.
fn patient() -> TransactionSettings {
    TransactionSettings::default()
        .with_max_attempts(200)
        .with_total_timeout(Duration::from_secs(120))
}

async fn send(db: &Database, ids: impl IntoIterator<Item = i64>) {
    let jobs: Vec<Job> = ids.into_iter().map(|id| Job { id, amount: id }).collect();
    for chunk in jobs.chunks(100) {
        db.transaction()
            .with_transaction_settings(patient())
            .run(move |tx| async move { tx.send_many(chunk).await })
            .await
            .expect("send");
    }
}

/// A worker whose handler writes one effect row in the transaction that acks the job.
fn worker(db: &Database, concurrency: usize) -> Worker<Job> {
    applying_effects(
        Worker::<Job>::builder(db)
            .with_concurrency(concurrency)
            .with_transaction_settings(patient())
            .with_redelivery_policy(
                RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(200)),
            ),
    )
}

/// The worker `builder` makes, with the handler that writes one effect row in the transaction
/// that acks the job.
fn applying_effects(builder: WorkerBuilder<Job, NoHandler>) -> Worker<Job> {
    builder
        .transactional(|tx, job, _ctx| async move {
            tx.execute_update(
                Statement::builder("INSERT INTO Effects (EffectId, JobId) VALUES (@effect, @job)")
                    .add_param("effect", uuid::Uuid::new_v4().to_string())
                    .add_param("job", job.id)
                    .build(),
            )
            .await?;
            Ok::<(), HandlerError>(())
        })
        .build()
        .expect("worker")
}

/// Waits until the queue is empty, failing when it stops draining for two minutes.
async fn drained(db: &Database) {
    until_drained(Duration::from_secs(120), "the queue to drain", || async {
        count(db, "SELECT COUNT(*) FROM Jobs").await
    })
    .await;
}

/// Lost and duplicated effects among jobs `1..=n`, read from the database.
async fn audit(db: &Database, n: i64) -> (i64, i64) {
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT JobId, COUNT(*) FROM Effects GROUP BY JobId",
        ))
        .await
        .expect("effects");
    let mut applied: HashMap<i64, i64> = HashMap::new();
    while let Some(row) = rows.next().await {
        let row = row.expect("row");
        applied.insert(
            row.get::<i64>(0).expect("id"),
            row.get::<i64>(1).expect("n"),
        );
    }
    let lost = (1..=n).filter(|id| !applied.contains_key(id)).count();
    let duplicated: i64 = applied.values().map(|n| n - 1).sum();
    (i64::try_from(lost).unwrap_or(i64::MAX), duplicated)
}

async fn effects(db: &Database) -> i64 {
    count(db, "SELECT COUNT(*) FROM Effects").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_mid_run_lose_nothing_and_apply_nothing_twice() {
    let db = db_or_skip!(schema());
    let n = scale(60, 2_000);
    let kills = scale(3, 20);
    send(&db, 1..=n).await;
    let mut running: Vec<tokio::task::JoinHandle<()>> =
        (0..3).map(|_| run_killable(worker(&db, 4)).1).collect();
    for kill in 1..=kills {
        // Kill the oldest worker once another share of the work is done, and start a fresh one.
        let target = n * kill / (kills + 1);
        eventually(
            Duration::from_secs(120),
            "progress before a kill",
            || async { effects(&db).await >= target },
        )
        .await;
        let victim = running.remove(0);
        victim.abort();
        let _ = victim.await;
        running.push(run_killable(worker(&db, 4)).1);
    }
    drained(&db).await;
    for task in &running {
        task.abort();
    }
    let (lost, duplicated) = audit(&db, n).await;
    println!("{n} jobs, {kills} workers killed: lost {lost}, duplicated effects {duplicated}");
    assert_eq!((lost, duplicated), (0, 0));
    assert_eq!(effects(&db).await, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_restarted_mid_run_lose_nothing_and_apply_nothing_twice() {
    let db = db_or_skip!(schema());
    let n = scale(60, 2_000);
    let restarts = scale(3, 10);
    send(&db, 1..=n).await;
    let mut handles: Vec<WorkerHandle> = (0..2).map(|_| worker(&db, 4).spawn()).collect();
    let mut released = 0;
    for restart in 1..=restarts {
        let target = n * restart / (restarts + 1);
        eventually(
            Duration::from_secs(120),
            "progress before a restart",
            || async { effects(&db).await >= target },
        )
        .await;
        // Graceful: every worker stops (running handlers finish or are released), then fresh
        // workers start on the same queue.
        for handle in handles.drain(..) {
            let stats = handle.shutdown().await.expect("a clean shutdown");
            released += stats.released_on_shutdown;
        }
        handles = (0..2).map(|_| worker(&db, 4).spawn()).collect();
    }
    drained(&db).await;
    for handle in handles {
        handle.shutdown().await.expect("a clean shutdown");
    }
    let (lost, duplicated) = audit(&db, n).await;
    println!(
        "{n} jobs, {restarts} restarts ({released} messages released at shutdown): \
         lost {lost}, duplicated effects {duplicated}"
    );
    assert_eq!((lost, duplicated), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_lost_on_the_way_back_and_broken_streams_apply_each_effect_once() {
    let db = db_or_skip!(schema());
    let Some((proxy, faulty)) = through_fault_proxy(&db).await else {
        return;
    };
    let n = scale(40, 1_000);
    send(&db, 1..=n).await;
    // Commits that are applied but whose answer never arrives (the client sees an error and
    // cannot know the outcome), commits held long before their answer is dropped, and receive
    // streams cut after their first message.
    let faults = u32::try_from(scale(3, 30)).unwrap_or(3);
    let mut armed = Vec::new();
    for i in 0..faults {
        armed.push(proxy.inject(Method::path(COMMIT).nth(3 + 4 * i), Fault::DropResponse));
        armed.push(proxy.inject(
            Method::path(COMMIT).nth(5 + 4 * i),
            Fault::DelayResponseThenDrop(Duration::from_millis(1_500)),
        ));
        armed.push(proxy.inject(
            Method::path(STREAMING_SQL).nth(2 + 3 * i),
            Fault::ResetMidStream { after_messages: 1 },
        ));
    }
    let handles: Vec<WorkerHandle> = (0..2).map(|_| worker(&faulty, 4).spawn()).collect();
    drained(&db).await;
    for handle in handles {
        handle.shutdown().await.expect("a clean shutdown");
    }
    let stats = proxy.stats();
    let fired =
        stats.fired(FaultKind::DropResponse) + stats.fired(FaultKind::DelayResponseThenDrop);
    let (lost, duplicated) = audit(&db, n).await;
    println!(
        "{n} jobs, {fired} commits applied but answered with an error, {} streams cut: lost \
         {lost}, duplicated effects {duplicated}",
        stats.fired(FaultKind::ResetMidStream)
    );
    assert!(fired > 0, "no commit fault fired: the case tested nothing");
    assert_eq!((lost, duplicated), (0, 0));
    drop(armed);
    proxy.stop().await;
}

/// A lease renewal can find no lease because the attempt's own ack has just committed while
/// the commit's reply is still on its way. The worker must not drop the attempt then: its commit
/// decides. The proxy holds the reply of the handler's commit until a renewal has reported the
/// lease gone, then passes it on: the job is acked once, no lost lease is counted, and no attempt
/// row is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_finds_no_lease_while_the_ack_commits_leaves_the_job_acked() {
    let db = db_or_skip!(schema());
    let Some((proxy, faulty)) = through_fault_proxy(&db).await else {
        return;
    };
    send(&db, [1]).await;
    // The worker's only commit is its handler's (reads and renewals are single-use queries).
    let held = proxy.inject(Method::path(COMMIT), Fault::HoldResponse);
    let handle = applying_effects(
        Worker::<Job>::builder(&faulty)
            .with_concurrency(1)
            .with_transaction_settings(patient())
            .with_receive_settings(
                ReceiveSettings::default().with_renew_interval(Duration::from_millis(200)),
            ),
    )
    .spawn();
    let fired = tokio::time::timeout(Duration::from_secs(60), held.fired())
        .await
        .expect("the handler's commit within a minute")
        .expect("the commit's reply held");
    assert_eq!(fired.upstream_status, Some(Code::Ok), "the commit applied");
    // The ack is applied: the next renewal finds no lease to renew.
    eventually(
        Duration::from_secs(60),
        "a renewal to report the lease gone",
        || async { handle.stats().receiver.lease_lost >= 1 },
    )
    .await;
    held.release();
    eventually(Duration::from_secs(60), "the attempt to end", || async {
        let stats = handle.stats();
        stats.acked
            + stats.lease_lost
            + stats.already_acked
            + stats.outcome_unknown
            + stats.retried
            + stats.dead_lettered
            >= 1
    })
    .await;
    let stats = handle.shutdown().await.expect("a clean shutdown");
    let attempt_rows = count(&db, "SELECT COUNT(*) FROM SpannerQueuesAttempts").await;
    println!(
        "commit held until the renewal found no lease: acked {}, lease_lost {}, receiver \
         lease_lost {}, attempt rows left {attempt_rows}",
        stats.acked, stats.lease_lost, stats.receiver.lease_lost
    );
    assert_eq!((stats.acked, stats.lease_lost), (1, 0), "{stats:?}");
    assert_eq!(attempt_rows, 0, "a stale attempt row was written");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Jobs").await, 0);
    assert_eq!(audit(&db, 1).await, (0, 0));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_dead_lettered_and_nothing_else_is_lost() {
    let db = db_or_skip!(schema());
    let n = scale(40, 2_000);
    let bad = scale(5, 100);
    send(&db, 1..=n).await;
    // Payloads the worker cannot decode, written past the SDK: truncated JSON, a wrong type,
    // an empty string, text that is not JSON at all.
    let poison = [
        r#"{"id": 1, "amou"#,
        r#"{"id": "x", "amount": []}"#,
        "",
        "not json",
    ];
    db.client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            let statements: Vec<Statement> = (0..bad)
                .map(|i| {
                    let index = usize::try_from(i).unwrap_or(0) % poison.len();
                    Statement::builder("INSERT INTO Jobs (Id, Payload) VALUES (@id, @payload)")
                        .add_param("id", 1_000_000 + i)
                        .add_param("payload", poison[index])
                        .build()
                })
                .collect();
            tx.execute_batch_update(statements).await
        })
        .await
        .expect("raw inserts");
    let handles: Vec<WorkerHandle> = (0..2).map(|_| worker(&db, 4).spawn()).collect();
    drained(&db).await;
    let mut dead_lettered = 0;
    for handle in handles {
        dead_lettered += handle
            .shutdown()
            .await
            .expect("a clean shutdown")
            .dead_lettered;
    }
    let letters = db
        .dead_letters()
        .list(&Job::QUEUE, usize::try_from(bad).unwrap_or(0) + 10)
        .await
        .expect("dead letters");
    let (lost, duplicated) = audit(&db, n).await;
    println!(
        "{n} good jobs, {bad} undecodable: lost {lost}, duplicated effects {duplicated}, \
         dead-lettered {}",
        letters.len()
    );
    assert_eq!((lost, duplicated), (0, 0));
    assert_eq!(
        i64::try_from(letters.len()).unwrap_or(-1),
        bad,
        "every bad message dead-lettered"
    );
    assert_eq!(dead_lettered, u64::try_from(bad).unwrap_or(0));
    assert_eq!(effects(&db).await, n, "no effect for a bad message");
}
