//! Issue 33: batch handlers. One read-write transaction and one commit for a batch of messages;
//! messages that fail alone are released or dead-lettered in that commit; a batch that fails as
//! a whole is split until its failing messages are alone; kills and per-key ordering.
//!
//! Every case checks the effects in the database: each message's effect exactly once, or its
//! dead letter.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use google_cloud_spanner::key::{Key, KeySet};
use google_cloud_spanner::read::ReadRequest;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::value::Value;
use rand::{RngExt as _, SeedableRng as _};
use spanner_queues::worker::{Batch, BatchOutcome, WorkerStats};
use spanner_queues::{
    Database, Dialect, HandlerError, QueueMessage, RedeliveryPolicy, Transaction,
    TransactionSettings, Worker,
};
use spanner_queues_testing::TestDatabase;
use spanner_queues_tests::{TestRng, count, eventually, run_killable, seed, until_drained};

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Jobs")]
struct Job {
    #[queue(key)]
    id: i64,
    amount: i64,
}

/// The test's own table and statements, in each dialect.
#[derive(Debug, Clone, Copy)]
struct Effects(Dialect);

impl Effects {
    fn ddl(self) -> &'static str {
        match self.0 {
            Dialect::PostgreSql => {
                "CREATE TABLE effects (effect_id varchar(36) NOT NULL, job_id bigint NOT NULL, \
                 PRIMARY KEY (effect_id))"
            }
            _ => {
                "CREATE TABLE Effects (EffectId STRING(36) NOT NULL, JobId INT64 NOT NULL) \
                 PRIMARY KEY (EffectId)"
            }
        }
    }

    /// One multi-row insert: an effect row for each job.
    fn insert(self, jobs: &[i64]) -> Statement {
        let pg = self.0 == Dialect::PostgreSql;
        let mut values = Vec::new();
        let mut params: Vec<(String, Value)> = Vec::new();
        for (i, job) in jobs.iter().enumerate() {
            let (e, j) = if pg {
                (format!("${}", 2 * i + 1), format!("${}", 2 * i + 2))
            } else {
                (format!("@e{i}"), format!("@j{i}"))
            };
            values.push(format!("({e}, {j})"));
            params.push((
                e.trim_start_matches(['@', '$']).to_owned(),
                Value::from(uuid::Uuid::new_v4().to_string()),
            ));
            params.push((
                j.trim_start_matches(['@', '$']).to_owned(),
                Value::from(*job),
            ));
        }
        let sql = if pg {
            format!(
                "INSERT INTO effects (effect_id, job_id) VALUES {}",
                values.join(", ")
            )
        } else {
            format!(
                "INSERT INTO Effects (EffectId, JobId) VALUES {}",
                values.join(", ")
            )
        };
        let mut builder = Statement::builder(sql);
        for (name, value) in params {
            // PostgreSQL parameters are named `p<n>` on the wire.
            let name = if pg { format!("p{name}") } else { name };
            builder = builder.add_param(name, value);
        }
        builder.build()
    }

    fn select(self) -> &'static str {
        match self.0 {
            Dialect::PostgreSql => "SELECT job_id, COUNT(*) FROM effects GROUP BY job_id",
            _ => "SELECT JobId, COUNT(*) FROM Effects GROUP BY JobId",
        }
    }

    fn queued(self) -> &'static str {
        match self.0 {
            Dialect::PostgreSql => "SELECT COUNT(*) FROM jobs",
            _ => "SELECT COUNT(*) FROM Jobs",
        }
    }

    fn attempt_rows(self) -> &'static str {
        match self.0 {
            Dialect::PostgreSql => "SELECT COUNT(*) FROM spanner_queues_attempts",
            _ => "SELECT COUNT(*) FROM SpannerQueuesAttempts",
        }
    }
}

async fn database(dialect: Dialect) -> Option<TestDatabase> {
    spanner_queues_testing::setup()
        .with_dialect(dialect)
        .with_queue::<Job>()
        .with_ddl([Effects(dialect).ddl()])
        .create()
        .await
}

/// The emulator runs one read-write transaction per database at a time: be patient.
fn patient() -> TransactionSettings {
    TransactionSettings::default()
        .with_max_attempts(500)
        .with_total_timeout(Duration::from_secs(180))
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

/// Effects applied per job.
async fn applied(db: &Database, effects: Effects) -> HashMap<i64, i64> {
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(effects.select()))
        .await
        .expect("effects");
    let mut applied = HashMap::new();
    while let Some(row) = rows.next().await {
        let row = row.expect("row");
        applied.insert(
            row.get::<i64>(0).expect("job"),
            row.get::<i64>(1).expect("n"),
        );
    }
    applied
}

/// Lost and duplicated effects among `expected`, and effects of jobs that should have none.
async fn audit(db: &Database, effects: Effects, expected: &HashSet<i64>) -> (usize, i64, usize) {
    let applied = applied(db, effects).await;
    let lost = expected
        .iter()
        .filter(|id| !applied.contains_key(id))
        .count();
    let duplicated = applied.values().map(|n| n - 1).sum();
    let unexpected = applied.keys().filter(|id| !expected.contains(id)).count();
    (lost, duplicated, unexpected)
}

/// Waits until the queue is empty, failing when it stops draining for three minutes.
async fn drained(db: &Database, effects: Effects) {
    until_drained(Duration::from_secs(180), "the queue to drain", || async {
        count(db, effects.queued()).await
    })
    .await;
}

/// The ids of the batch's jobs.
fn ids(batch: &Batch<Job>) -> Vec<i64> {
    batch.messages().map(|job| job.id).collect()
}

macro_rules! both_dialects {
    ($body:ident: $google:ident, $postgres:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $google() {
            $body(Dialect::GoogleSql).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            $body(Dialect::PostgreSql).await;
        }
    };
}

both_dialects!(transactional_batches: transactional_batches_googlesql, transactional_batches_postgresql);
both_dialects!(external_batches: external_batches_googlesql, external_batches_postgresql);

/// A job whose presence fails its whole batch (the handler returns `Err`).
const POISON: i64 = 13;
/// A job the handler fails alone, for good.
const REFUSED: i64 = 29;
/// A job the handler fails alone on its first attempt.
const FLAKY: i64 = 41;

/// A transactional batch worker: one commit per batch, per-message failures settled in it, a
/// poison job split out and dead-lettered alone after its attempts, every other effect once.
async fn transactional_batches(dialect: Dialect) {
    let Some(test) = database(dialect).await else {
        return;
    };
    let db = test.database();
    let effects = Effects(dialect);
    const N: i64 = 60;
    send(db, 1..=N).await;
    let largest = Arc::new(AtomicUsize::new(0));
    let worker = {
        let largest = Arc::clone(&largest);
        Worker::<Job>::builder(db)
            .with_batch_size(16)
            // Long enough that a batch forms from the queued jobs even on a loaded machine.
            .with_batch_linger(Duration::from_secs(1))
            .with_max_attempts(3)
            .with_transaction_settings(patient())
            .with_redelivery_policy(
                RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(100)),
            )
            .transactional_batch(move |tx, batch| {
                let largest = Arc::clone(&largest);
                async move {
                    largest.fetch_max(batch.len(), Ordering::Relaxed);
                    if ids(&batch).contains(&POISON) {
                        return Err(HandlerError::msg("poison in the batch"));
                    }
                    let mut outcome = BatchOutcome::new();
                    let mut good = Vec::new();
                    for (i, (job, ctx)) in batch.iter().enumerate() {
                        if job.id == REFUSED {
                            outcome.fail(i, HandlerError::dead_letter("refused"));
                        } else if job.id == FLAKY && ctx.attempt() == 1 {
                            outcome.fail(i, HandlerError::msg("flaky"));
                        } else {
                            good.push(job.id);
                        }
                    }
                    if !good.is_empty() {
                        tx.execute_update(effects.insert(&good)).await?;
                    }
                    Ok(outcome)
                }
            })
            .build()
            .expect("worker")
    }
    .spawn();
    drained(db, effects).await;
    let stats = worker.shutdown().await.expect("a clean shutdown");
    let expected: HashSet<i64> = (1..=N)
        .filter(|id| ![POISON, REFUSED].contains(id))
        .collect();
    let (lost, duplicated, unexpected) = audit(db, effects, &expected).await;
    let letters = db
        .dead_letters()
        .list(&Job::QUEUE, 10)
        .await
        .expect("dead letters");
    let mut dead: Vec<(String, u32)> = letters
        .iter()
        .map(|l| (l.key().to_string(), l.attempts()))
        .collect();
    dead.sort();
    println!(
        "{dialect:?}: {N} jobs, largest batch {}, {stats:?}",
        largest.load(Ordering::Relaxed)
    );
    assert_eq!((lost, duplicated, unexpected), (0, 0, 0));
    // The poison after its three attempts, the refused job after its first: each alone.
    let key = |id: i64| Job { id, amount: id }.message_key().to_string();
    assert_eq!(dead, vec![(key(POISON), 3), (key(REFUSED), 1)]);
    assert!(stats.batch_splits >= 3, "{stats:?}");
    assert_eq!(
        stats.retried, 3,
        "the flaky job once, the poison twice: {stats:?}"
    );
    assert!(
        largest.load(Ordering::Relaxed) > 1,
        "no batch held two jobs"
    );
    assert_eq!(
        count(db, effects.attempt_rows()).await,
        0,
        "attempts forgotten"
    );
}

/// An external batch worker: every job acked after the handler's call, a failure retried alone.
async fn external_batches(dialect: Dialect) {
    let Some(test) = database(dialect).await else {
        return;
    };
    let db = test.database();
    let effects = Effects(dialect);
    const N: i64 = 40;
    send(db, 1..=N).await;
    let calls: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let worker = {
        let calls = Arc::clone(&calls);
        Worker::<Job>::builder(db)
            .with_batch_size(10)
            .with_batch_linger(Duration::from_secs(1))
            .with_transaction_settings(patient())
            .with_redelivery_policy(
                RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(100)),
            )
            .external_batch(move |batch| {
                let calls = Arc::clone(&calls);
                async move {
                    let mut outcome = BatchOutcome::new();
                    let mut calls = calls.lock().expect("calls");
                    for (i, (job, ctx)) in batch.iter().enumerate() {
                        assert!(ctx.idempotency_key().starts_with("Jobs:"));
                        *calls.entry(job.id).or_default() += 1;
                        if job.id == FLAKY % N && ctx.attempt() == 1 {
                            outcome.fail(i, HandlerError::msg("the remote side said later"));
                        }
                    }
                    Ok(outcome)
                }
            })
            .build()
            .expect("worker")
    }
    .spawn();
    drained(db, effects).await;
    let stats = worker.shutdown().await.expect("a clean shutdown");
    let calls = calls.lock().expect("calls").clone();
    println!("{dialect:?}: {N} jobs, {stats:?}");
    assert_eq!(calls.len(), usize::try_from(N).expect("small"));
    assert_eq!(calls[&(FLAKY % N)], 2);
    assert_eq!(
        (stats.acked, stats.retried),
        (u64::try_from(N).expect("small"), 1)
    );
    assert_eq!(
        count(db, effects.attempt_rows()).await,
        0,
        "attempts forgotten"
    );
}

// ---------------------------------------------------------------------------------------------
// Kills

/// Batch workers killed at random while poison jobs fail their batches: nothing is lost, no
/// effect is applied twice, and only the poison jobs are dead-lettered, each alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_workers_killed_at_random_lose_nothing_and_dead_letter_poison_alone() {
    let dialect = Dialect::GoogleSql;
    let Some(test) = database(dialect).await else {
        return;
    };
    let db = test.database();
    let effects = Effects(dialect);
    let long = std::env::var("SPANNER_QUEUES_LONG").is_ok_and(|v| v == "1");
    let n: i64 = if long { 3_000 } else { 400 };
    let kills = if long { 20 } else { 6 };
    let seed = seed("SPANNER_QUEUES_BATCH_KILL_SEED");
    println!("batch kill test: seed {seed} (SPANNER_QUEUES_BATCH_KILL_SEED replays it)");
    let mut rng = TestRng::seed_from_u64(seed);
    // Every 37th job poisons the batch it is in.
    let poison: HashSet<i64> = (1..=n).filter(|id| id % 37 == 0).collect();
    send(db, 1..=n).await;
    let worker = |db: &Database| {
        let poison = poison.clone();
        Worker::<Job>::builder(db)
            .with_batch_size(25)
            .with_max_attempts(2)
            .with_transaction_settings(patient())
            .with_redelivery_policy(
                RedeliveryPolicy::default()
                    .with_initial_delay(Duration::from_millis(100))
                    .with_max_delay(Duration::from_millis(500)),
            )
            .transactional_batch(move |tx, batch| {
                let bad = ids(&batch).iter().any(|id| poison.contains(id));
                async move {
                    if bad {
                        return Err(HandlerError::msg("a poison job"));
                    }
                    tx.execute_update(effects.insert(&ids(&batch))).await?;
                    Ok(BatchOutcome::new())
                }
            })
            .build()
            .expect("worker")
    };
    let mut all: Vec<Arc<Worker<Job>>> = Vec::new();
    let mut running: Vec<tokio::task::JoinHandle<()>> = (0..3)
        .map(|_| {
            let (worker, task) = run_killable(worker(db));
            all.push(worker);
            task
        })
        .collect();
    let expected: HashSet<i64> = (1..=n).filter(|id| !poison.contains(id)).collect();
    let good = i64::try_from(expected.len()).expect("small");
    for kill in 1..=kills {
        let target = good * kill / (kills + 1);
        until_drained(
            Duration::from_secs(180),
            "progress before a kill",
            || async {
                let done: i64 = applied(db, effects).await.values().sum();
                target - done
            },
        )
        .await;
        let victim = running.remove(rng.random_range(0..running.len()));
        victim.abort();
        let _ = victim.await;
        let (worker, task) = run_killable(worker(db));
        all.push(worker);
        running.push(task);
    }
    drained(db, effects).await;
    for task in &running {
        task.abort();
    }
    let stats: Vec<WorkerStats> = all.iter().map(|w| w.stats()).collect();
    let (lost, duplicated, unexpected) = audit(db, effects, &expected).await;
    let letters = db
        .dead_letters()
        .list(&Job::QUEUE, poison.len() + 10)
        .await
        .expect("dead letters");
    let dead: HashSet<String> = letters.iter().map(|l| l.key().to_string()).collect();
    let want: HashSet<String> = poison
        .iter()
        .map(|&id| Job { id, amount: id }.message_key().to_string())
        .collect();
    println!(
        "{n} jobs ({} poison), {kills} kills: lost {lost}, duplicated {duplicated}, \
         dead-lettered {}, batches {}, splits {}",
        poison.len(),
        letters.len(),
        stats.iter().map(|s| s.batches).sum::<u64>(),
        stats.iter().map(|s| s.batch_splits).sum::<u64>(),
    );
    assert_eq!((lost, duplicated, unexpected), (0, 0, 0));
    assert_eq!(dead, want, "exactly the poison jobs are dead-lettered");
}

// ---------------------------------------------------------------------------------------------
// Per-key ordering

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Turns", ordered)]
struct Turn {
    #[queue(key)]
    conversation: i64,
    step: i64,
}

const PROGRESS: &str = "CREATE TABLE Progress (Conversation INT64 NOT NULL, \
                        LastStep INT64 NOT NULL) PRIMARY KEY (Conversation)";
const TURN_EFFECTS: &str = "CREATE TABLE TurnEffects (EffectId STRING(36) NOT NULL, \
                            Conversation INT64 NOT NULL, Step INT64 NOT NULL, \
                            Previous INT64 NOT NULL) PRIMARY KEY (EffectId)";

/// Applies a turn in the batch's transaction: its effect, with the step its conversation had
/// reached before.
async fn apply(tx: &Transaction, turn: &Turn) -> Result<(), HandlerError> {
    let read = ReadRequest::builder("Progress", vec!["LastStep"])
        .with_keys(KeySet::from(Key::new(vec![Value::from(turn.conversation)])))
        .build();
    let mut rows = tx.execute_read(read).await?;
    let previous = match rows.next().await {
        Some(row) => row?.get::<i64>(0)?,
        None => -1,
    };
    tx.execute_update(
        Statement::builder(
            "INSERT INTO TurnEffects (EffectId, Conversation, Step, Previous) \
             VALUES (@id, @conversation, @step, @previous)",
        )
        .add_param("id", uuid::Uuid::new_v4().to_string())
        .add_param("conversation", turn.conversation)
        .add_param("step", turn.step)
        .add_param("previous", previous)
        .build(),
    )
    .await?;
    // DML, not a buffered mutation: the next turn of the conversation in the same batch reads
    // it in the same transaction.
    let updated = tx
        .execute_update(
            Statement::builder("UPDATE Progress SET LastStep = @step WHERE Conversation = @c")
                .add_param("step", turn.step)
                .add_param("c", turn.conversation)
                .build(),
        )
        .await?;
    if updated == 0 {
        tx.execute_update(
            Statement::builder("INSERT INTO Progress (Conversation, LastStep) VALUES (@c, @step)")
                .add_param("c", turn.conversation)
                .add_param("step", turn.step)
                .build(),
        )
        .await?;
    }
    Ok(())
}

/// A batch worker of an ordered queue: a batch holds a key's messages in sequence order, each
/// right after the one before it, and a message never runs past an earlier one left in the
/// queue (one fails its first attempt and waits for a retry; the later ones of its key, in its
/// batch or not, wait for it: none of them commits its effect before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_batches_apply_every_key_in_send_order_once() {
    let Some(test) = spanner_queues_testing::setup()
        .with_queue::<Turn>()
        .with_ddl([PROGRESS, TURN_EFFECTS])
        .create()
        .await
    else {
        return;
    };
    let db = test.database();
    const CONVERSATIONS: i64 = 8;
    const STEPS: i64 = 8;
    for step in 0..STEPS {
        let turns: Vec<Turn> = (0..CONVERSATIONS)
            .map(|conversation| Turn { conversation, step })
            .collect();
        let turns = &turns;
        db.transaction()
            .with_transaction_settings(patient())
            .run(move |tx| async move { tx.send_many(turns).await })
            .await
            .expect("send");
    }
    // Batches with several messages of one key, and batches where a key's messages were not
    // consecutive sequences in order.
    let chained = Arc::new(AtomicUsize::new(0));
    let gaps = Arc::new(AtomicUsize::new(0));
    // Runs where the failing turn had the next turn of its conversation after it.
    let failed_before_next = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (chained, gaps) = (Arc::clone(&chained), Arc::clone(&gaps));
        let failed_before_next = Arc::clone(&failed_before_next);
        Worker::<Turn>::builder(db)
            .with_batch_size(20)
            .with_transaction_settings(patient())
            .with_redelivery_policy(
                RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(200)),
            )
            .transactional_batch(move |tx, batch| {
                let (chained, gaps) = (Arc::clone(&chained), Arc::clone(&gaps));
                let failed_before_next = Arc::clone(&failed_before_next);
                async move {
                    let keys: HashSet<i64> = batch.messages().map(|t| t.conversation).collect();
                    if keys.len() < batch.len() {
                        chained.fetch_add(1, Ordering::Relaxed);
                    }
                    let mut last: std::collections::HashMap<i64, i64> = Default::default();
                    for (turn, ctx) in batch.iter() {
                        let sequence = ctx.sequence().expect("an ordered queue").get();
                        if let Some(before) = last.insert(turn.conversation, sequence)
                            && before + 1 != sequence
                        {
                            gaps.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let failing = |turn: &Turn, attempt: u32| {
                        turn.conversation == 3 && turn.step == 1 && attempt == 1
                    };
                    let turns: Vec<(&Turn, u32)> =
                        batch.iter().map(|(t, ctx)| (t, ctx.attempt())).collect();
                    if turns
                        .windows(2)
                        .any(|pair| failing(pair[0].0, pair[0].1) && pair[1].0.conversation == 3)
                    {
                        failed_before_next.fetch_add(1, Ordering::Relaxed);
                    }
                    let mut outcome = BatchOutcome::new();
                    for (i, (turn, ctx)) in batch.iter().enumerate() {
                        if failing(turn, ctx.attempt()) {
                            outcome.fail(i, HandlerError::msg("not yet"));
                            continue;
                        }
                        apply(&tx, turn).await?;
                    }
                    Ok(outcome)
                }
            })
            .build()
            .expect("worker")
    }
    .spawn();
    eventually(Duration::from_secs(300), "every turn applied", || async {
        count(db, "SELECT COUNT(*) FROM TurnEffects").await >= CONVERSATIONS * STEPS
    })
    .await;
    let stats = worker.shutdown().await.expect("a clean shutdown");
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT Conversation, Step, Previous FROM TurnEffects",
        ))
        .await
        .expect("effects");
    let mut seen = HashSet::new();
    let mut out_of_order = 0;
    while let Some(row) = rows.next().await {
        let row = row.expect("row");
        let (c, s, p) = (
            row.get::<i64>(0).expect("c"),
            row.get::<i64>(1).expect("s"),
            row.get::<i64>(2).expect("p"),
        );
        assert!(seen.insert((c, s)), "turn {c}/{s} applied twice");
        if p != s - 1 {
            out_of_order += 1;
        }
    }
    let chained = chained.load(Ordering::Relaxed);
    let failed_before_next = failed_before_next.load(Ordering::Relaxed);
    println!(
        "ordered batches: {chained} with several messages of a key, {failed_before_next} runs \
         with the failing turn before the next of its conversation; {stats:?}"
    );
    assert_eq!(
        seen.len(),
        usize::try_from(CONVERSATIONS * STEPS).expect("small")
    );
    assert_eq!(out_of_order, 0);
    assert_eq!(gaps.load(Ordering::Relaxed), 0);
    assert!(chained >= 1, "a key's queued messages share batches");
    assert!(stats.retried >= 1, "{stats:?}");
    if failed_before_next > 0 {
        // The next turn ran after the failing one in its batch: released to wait for it.
        assert!(stats.waited >= 1, "{stats:?}");
    }
}
