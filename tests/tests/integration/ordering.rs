//! Per-key ordering: sends assign sequences in commit order, and a worker handles a message
//! only when no earlier message of its ordering key is left (leased, scheduled, waiting for a
//! retry, or dead-lettered when dead letters block).
//!
//! Each handler records, in the transaction that acks its message, the step it handled and the
//! step its conversation had reached before (read from a progress row in that transaction).
//! Effects are in send order exactly when every effect's previous step is its own step minus
//! one, and none is missing or repeated.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use google_cloud_spanner::key::{Key, KeySet};
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::read::ReadRequest;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::value::Value;
use rand::{Rng as _, RngExt as _, SeedableRng as _};
use spanner_queues::key::TypedKey as _;
use spanner_queues::worker::{DeadLetterOrdering, NoHandler, OrderingPolicy, WorkerBuilder};
use spanner_queues::{
    Database, Dialect, Error, HandlerContext, HandlerError, QueueMessage, ReceiveSettings,
    Receiver, RedeliveryPolicy, SendOptions, Sequence, Transaction, TransactionSettings, Worker,
};
use spanner_queues_tests::{
    TestDatabase, TestRng, count, eventually, run_killable, seed, until_drained,
};

/// A turn of a conversation: ordered per conversation, its sequence in the column `Seq`.
#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Turns", ordered, sequence_column = "Seq")]
struct Turn {
    #[queue(key)]
    conversation: i64,
    /// The producer's own numbering of the conversation's messages, in send order.
    step: i64,
}

impl Turn {
    fn new(conversation: i64, step: i64) -> Self {
        Self { conversation, step }
    }
}

const PROGRESS: &str = "CREATE TABLE Progress (Conversation INT64 NOT NULL, \
                        LastStep INT64 NOT NULL) PRIMARY KEY (Conversation)";
const EFFECTS: &str = "CREATE TABLE TurnEffects (EffectId STRING(36) NOT NULL, \
                       Conversation INT64 NOT NULL, Step INT64 NOT NULL, Seq INT64 NOT NULL, \
                       Previous INT64 NOT NULL) PRIMARY KEY (EffectId)";

async fn database() -> Option<TestDatabase> {
    spanner_queues_testing::setup()
        .with_queue::<Turn>()
        .with_ddl([PROGRESS, EFFECTS])
        .create()
        .await
}

/// The emulator runs one read-write transaction at a time: give everyone room.
fn patient() -> TransactionSettings {
    TransactionSettings::default()
        .with_max_attempts(500)
        .with_total_timeout(Duration::from_secs(180))
}

/// Applies a turn (with sequence `seq`) inside the transaction that acks it: one effect row
/// with the step the conversation had reached before, and the conversation's progress.
async fn apply(tx: Transaction, turn: &Turn, seq: Sequence) -> Result<(), HandlerError> {
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
            "INSERT INTO TurnEffects (EffectId, Conversation, Step, Seq, Previous) \
             VALUES (@id, @conversation, @step, @seq, @previous)",
        )
        .add_param("id", uuid::Uuid::new_v4().to_string())
        .add_param("conversation", turn.conversation)
        .add_param("step", turn.step)
        .add_param("seq", seq.get())
        .add_param("previous", previous)
        .build(),
    )
    .await?;
    tx.buffer([Mutation::new_insert_or_update_builder("Progress")
        .set("Conversation")
        .to(turn.conversation)
        .set("LastStep")
        .to(turn.step)
        .build()])?;
    Ok(())
}

/// The sequence of the message a handler runs for (every `Turn` has one).
fn sequence(ctx: &HandlerContext) -> Sequence {
    ctx.sequence().expect("an ordered message has a sequence")
}

fn applying(builder: WorkerBuilder<Turn, NoHandler>) -> Worker<Turn> {
    builder
        .transactional(|tx, turn, ctx| async move { apply(tx, &turn, sequence(&ctx)).await })
        .build()
        .expect("worker")
}

/// `(conversation, step, seq, previous)` of every effect.
async fn effects(db: &Database) -> Vec<(i64, i64, i64, i64)> {
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT Conversation, Step, Seq, Previous FROM TurnEffects",
        ))
        .await
        .expect("effects");
    let mut out = Vec::new();
    while let Some(row) = rows.next().await {
        let row = row.expect("row");
        out.push((
            row.get::<i64>(0).expect("conversation"),
            row.get::<i64>(1).expect("step"),
            row.get::<i64>(2).expect("seq"),
            row.get::<i64>(3).expect("previous"),
        ));
    }
    out
}

/// The steps of `conversation` in the order their effects were applied (following each
/// effect's previous step from -1).
async fn applied_steps(db: &Database, conversation: i64) -> Vec<i64> {
    let by_previous: HashMap<i64, i64> = effects(db)
        .await
        .into_iter()
        .filter(|e| e.0 == conversation)
        .map(|(_, step, _, previous)| (previous, step))
        .collect();
    let mut out = Vec::new();
    let mut at = -1;
    while let Some(step) = by_previous.get(&at) {
        out.push(*step);
        at = *step;
    }
    out
}

/// What the audit of a run found.
#[derive(Debug, PartialEq, Eq)]
struct Audit {
    lost: usize,
    duplicated: usize,
    out_of_order: usize,
    wrong_sequence: usize,
}

fn audit(effects: &[(i64, i64, i64, i64)], conversations: i64, steps: i64) -> Audit {
    let mut seen = HashSet::new();
    let mut duplicated = 0;
    for (conversation, step, _, _) in effects {
        if !seen.insert((*conversation, *step)) {
            duplicated += 1;
        }
    }
    let lost = (0..conversations)
        .flat_map(|c| (0..steps).map(move |s| (c, s)))
        .filter(|k| !seen.contains(k))
        .count();
    Audit {
        lost,
        duplicated,
        out_of_order: effects.iter().filter(|e| e.3 != e.1 - 1).count(),
        // One producer per conversation, sending in step order: sequence = step.
        wrong_sequence: effects.iter().filter(|e| e.2 != e.1).count(),
    }
}

/// Lanes of the kill test. Each has its own database, so they run at the same time: the emulator
/// runs one read-write transaction per database at a time, and one lane is bound by that, not by
/// the CPU.
const ORDERING_LANES: u64 = 2;

/// What one lane of the kill test saw.
struct LaneResult {
    audit: Audit,
    effects: usize,
    failures: u64,
    retried: u64,
    /// Messages released to wait (a read-write transaction each).
    waited: u64,
    /// Read-only looks at waiting keys.
    looks: u64,
}

impl LaneResult {
    fn releases_per_handled(&self) -> f64 {
        self.waited as f64 / self.effects.max(1) as f64
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_workers_killed_at_random_apply_every_key_in_send_order_once() {
    log_if_asked();
    // 100 conversations in all, split between the lanes.
    const CONVERSATIONS: i64 = 100;
    // 10,000 messages with SPANNER_QUEUES_LONG=1 (2026-12-04, debug build, shared 2-core machine,
    // one lane: 29 min, 7,669 waits, 0 lost, duplicated or out of order); 2,000 by default, in
    // lanes of their own, which keeps the suite's time in check.
    let steps: i64 = if std::env::var("SPANNER_QUEUES_LONG").is_ok_and(|v| v == "1") {
        100
    } else {
        20
    };
    let seed = seed("SPANNER_QUEUES_ORDERING_SEED");
    println!("ordering stress: seed {seed} (SPANNER_QUEUES_ORDERING_SEED replays it)");
    let started = Instant::now();
    let per_lane = CONVERSATIONS / i64::try_from(ORDERING_LANES).expect("fits");
    // Each lane's choice of victims follows from the run's seed (the interleaving of the lanes'
    // requests differs between runs, but not which worker each kill picks).
    let mut seeds = TestRng::seed_from_u64(seed);
    let lanes =
        (0..ORDERING_LANES).map(|lane| ordering_lane(lane, seeds.next_u64(), per_lane, steps));
    let Some(lanes) = futures::future::join_all(lanes)
        .await
        .into_iter()
        .collect::<Option<Vec<LaneResult>>>()
    else {
        return;
    };
    let total = per_lane * steps * i64::try_from(ORDERING_LANES).expect("fits");
    println!(
        "ordering stress: {total} messages over {CONVERSATIONS} keys in {ORDERING_LANES} lanes, \
         4 workers x 8 and 10 kills per lane, {} first attempts failed ({} retried), {} \
         releases to wait, {} looks, {} s",
        lanes.iter().map(|l| l.failures).sum::<u64>(),
        lanes.iter().map(|l| l.retried).sum::<u64>(),
        lanes.iter().map(|l| l.waited).sum::<u64>(),
        lanes.iter().map(|l| l.looks).sum::<u64>(),
        started.elapsed().as_secs()
    );
    for (lane, found) in lanes.iter().enumerate() {
        assert_eq!(
            found.audit,
            Audit {
                lost: 0,
                duplicated: 0,
                out_of_order: 0,
                wrong_sequence: 0
            },
            "lane {lane}"
        );
        assert_eq!(
            found.effects,
            usize::try_from(per_lane * steps).expect("fits"),
            "lane {lane}"
        );
    }
    // The retries are what make later messages of a key wait: a run where none happened tested
    // less than it says.
    assert!(
        lanes.iter().map(|l| l.retried).sum::<u64>() > 0
            && lanes.iter().map(|l| l.looks).sum::<u64>() > 0,
        "no message was retried or held back for its key: the run tested less than it says"
    );
}

/// One lane of the kill test: four workers of eight handlers on a database of its own, one killed
/// at random (and replaced) after every ~8 % of the work, while four producers send
/// `conversations` conversations of `steps` steps. `None` when there is no emulator.
async fn ordering_lane(lane: u64, seed: u64, conversations: i64, steps: i64) -> Option<LaneResult> {
    let db = database().await?;
    let total = conversations * steps;
    let mut rng = TestRng::seed_from_u64(seed);
    let started = Instant::now();
    // A first attempt of about one message in 100 fails: it waits for a retry, and the later
    // messages of its conversation wait for it.
    let failures = Arc::new(AtomicU64::new(0));
    let worker = |db: &Database| {
        let failures = Arc::clone(&failures);
        Worker::<Turn>::builder(db)
            .with_concurrency(8)
            .with_transaction_settings(patient())
            .with_redelivery_policy(
                RedeliveryPolicy::default()
                    .with_initial_delay(Duration::from_millis(100))
                    .with_max_delay(Duration::from_secs(1)),
            )
            .transactional(move |tx, turn, ctx| {
                let failures = Arc::clone(&failures);
                async move {
                    if ctx.attempt() == 1 && (turn.conversation * 31 + turn.step * 7) % 100 == 0 {
                        failures.fetch_add(1, Ordering::Relaxed);
                        return Err(HandlerError::msg("a transient failure"));
                    }
                    apply(tx, &turn, sequence(&ctx)).await
                }
            })
            .build()
            .expect("worker")
    };
    let mut all = Vec::new();
    let mut running: Vec<tokio::task::JoinHandle<()>> = (0..4)
        .map(|_| {
            let (worker, task) = run_killable(worker(&db));
            all.push(worker);
            task
        })
        .collect();

    // Four producers, a quarter of the conversations each, send step by step while the workers
    // run.
    let producers: Vec<tokio::task::JoinHandle<()>> = (0..4)
        .map(|p| {
            let db = db.database().clone();
            tokio::spawn(async move {
                for step in 0..steps {
                    let turns: Vec<Turn> = (0..conversations)
                        .filter(|c| c % 4 == p)
                        .map(|c| Turn::new(c, step))
                        .collect();
                    send(&db, &turns).await;
                }
            })
        })
        .collect();

    // Kill a random worker every ~8 % of the work, and start a fresh one.
    let kills = 10;
    let done = || async { count(&db, "SELECT COUNT(*) FROM TurnEffects").await };
    for kill in 1..=kills {
        let target = total * kill / (kills + 2);
        // The emulator slows down as its tables' history grows: fail only on a stall.
        until_drained(
            Duration::from_secs(180),
            "progress before a kill",
            || async { target - done().await },
        )
        .await;
        let victim = running.remove(rng.random_range(0..running.len()));
        victim.abort();
        let _ = victim.await;
        let (worker, task) = run_killable(worker(&db));
        all.push(worker);
        running.push(task);
        println!(
            "ordering stress: lane {lane}, kill {kill} at {} effects, {} s",
            done().await,
            started.elapsed().as_secs()
        );
    }
    for producer in producers {
        producer.await.expect("producer");
    }
    until_drained(
        Duration::from_secs(180),
        "the ordered queue to drain",
        || async { count(&db, "SELECT COUNT(*) FROM Turns").await },
    )
    .await;
    for task in &running {
        task.abort();
    }
    let effects = effects(&db).await;
    let found = LaneResult {
        audit: audit(&effects, conversations, steps),
        effects: effects.len(),
        failures: failures.load(Ordering::Relaxed),
        retried: all.iter().map(|w| w.stats().retried).sum(),
        waited: all.iter().map(|w| w.stats().waited).sum(),
        looks: all.iter().map(|w| w.stats().order_looks).sum(),
    };
    println!(
        "ordering stress: lane {lane}, {total} messages, {} s: {:?}, {:.3} releases per handled \
         message",
        started.elapsed().as_secs(),
        found.audit,
        found.releases_per_handled()
    );
    Some(found)
}

/// Deep backlogs: every key's messages queued before the workers start, workers killed at
/// random. A message that must wait for an earlier one of its key waits in memory, leased, and
/// costs no read-write transaction: the lanes count the releases per handled message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_backlogs_with_workers_killed_at_random_keep_send_order_without_releases() {
    const KEYS: i64 = 20;
    const DEPTH: i64 = 30;
    log_if_asked();
    let seed = seed("SPANNER_QUEUES_ORDERING_SEED");
    println!("deep ordering: seed {seed} (SPANNER_QUEUES_ORDERING_SEED replays it)");
    let mut seeds = TestRng::seed_from_u64(seed);
    let dialects = [Dialect::GoogleSql, Dialect::PostgreSql];
    let lanes = dialects.map(|dialect| deep_lane(dialect, seeds.next_u64(), KEYS, DEPTH));
    let lanes = futures::future::join_all(lanes).await;
    for (dialect, found) in dialects.iter().zip(lanes) {
        let Some(found) = found else { return };
        println!(
            "deep ordering, {dialect:?}: {} messages ({KEYS} keys x {DEPTH} queued first), 3 \
             workers x 8, 6 kills: {:?}, {} retried, {} releases to wait ({:.3} per handled \
             message), {} looks",
            found.effects,
            found.audit,
            found.retried,
            found.waited,
            found.releases_per_handled(),
            found.looks
        );
        assert_eq!(
            found.audit,
            Audit {
                lost: 0,
                duplicated: 0,
                out_of_order: 0,
                wrong_sequence: 0
            },
            "{dialect:?}"
        );
        assert_eq!(found.effects, usize::try_from(KEYS * DEPTH).expect("fits"));
        assert!(
            found.releases_per_handled() <= 0.5,
            "{dialect:?}: {:.3} releases per handled message",
            found.releases_per_handled()
        );
        assert!(
            found.retried > 0 && found.looks > 0,
            "{dialect:?}: no message was retried or held back for its key: the run tested less \
             than it says"
        );
    }
}

/// One lane of the deep test, in `dialect`: `keys` conversations of `depth` steps each, all
/// queued first; then three workers of eight handlers, one killed at random (and replaced)
/// after every eighth of the work, six times. `None` when there is no emulator.
async fn deep_lane(dialect: Dialect, seed: u64, keys: i64, depth: i64) -> Option<LaneResult> {
    let test = match dialect {
        Dialect::PostgreSql => {
            spanner_queues_testing::setup()
                .with_dialect(Dialect::PostgreSql)
                .with_queue::<Turn>()
                .with_ddl([PG_PROGRESS, PG_EFFECTS])
                .create()
                .await?
        }
        _ => database().await?,
    };
    let db = test.database();
    let (queue, effects_table) = match dialect {
        Dialect::PostgreSql => ("turns", "turn_effects"),
        _ => ("Turns", "TurnEffects"),
    };
    let total = keys * depth;
    for step in 0..depth {
        let turns: Vec<Turn> = (0..keys).map(|c| Turn::new(c, step)).collect();
        send(db, &turns).await;
    }
    let mut rng = TestRng::seed_from_u64(seed);
    let started = Instant::now();
    let failures = Arc::new(AtomicU64::new(0));
    let worker = || {
        let failures = Arc::clone(&failures);
        Worker::<Turn>::builder(db)
            .with_concurrency(8)
            .with_transaction_settings(patient())
            .with_redelivery_policy(
                RedeliveryPolicy::default()
                    .with_initial_delay(Duration::from_millis(100))
                    .with_max_delay(Duration::from_secs(1)),
            )
            .transactional(move |tx, turn, ctx| {
                let failures = Arc::clone(&failures);
                async move {
                    if ctx.attempt() == 1 && (turn.conversation * 31 + turn.step * 7) % 50 == 0 {
                        failures.fetch_add(1, Ordering::Relaxed);
                        return Err(HandlerError::msg("a transient failure"));
                    }
                    match dialect {
                        Dialect::PostgreSql => apply_postgresql(tx, &turn, sequence(&ctx)).await,
                        _ => apply(tx, &turn, sequence(&ctx)).await,
                    }
                }
            })
            .build()
            .expect("worker")
    };
    let mut all = Vec::new();
    let mut running: Vec<tokio::task::JoinHandle<()>> = (0..3)
        .map(|_| {
            let (worker, task) = run_killable(worker());
            all.push(worker);
            task
        })
        .collect();
    let done_sql = format!("SELECT COUNT(*) FROM {effects_table}");
    let done = || async { count(db, &done_sql).await };
    let kills = 6;
    for kill in 1..=kills {
        let target = total * kill / (kills + 2);
        until_drained(
            Duration::from_secs(180),
            "progress before a kill",
            || async { target - done().await },
        )
        .await;
        let victim = running.remove(rng.random_range(0..running.len()));
        victim.abort();
        let _ = victim.await;
        let (worker, task) = run_killable(worker());
        all.push(worker);
        running.push(task);
        println!(
            "deep ordering, {dialect:?}: kill {kill} at {} effects, {} s",
            done().await,
            started.elapsed().as_secs()
        );
    }
    let left_sql = format!("SELECT COUNT(*) FROM {queue}");
    until_drained(
        Duration::from_secs(180),
        "the ordered queue to drain",
        || async { count(db, &left_sql).await },
    )
    .await;
    for task in &running {
        task.abort();
    }
    let effects = effects_in(db, dialect).await;
    Some(LaneResult {
        audit: audit(&effects, keys, depth),
        effects: effects.len(),
        failures: failures.load(Ordering::Relaxed),
        retried: all.iter().map(|w| w.stats().retried).sum(),
        waited: all.iter().map(|w| w.stats().waited).sum(),
        looks: all.iter().map(|w| w.stats().order_looks).sum(),
    })
}

/// `(conversation, step, seq, previous)` of every effect, in `dialect`'s table.
async fn effects_in(db: &Database, dialect: Dialect) -> Vec<(i64, i64, i64, i64)> {
    if dialect != Dialect::PostgreSql {
        return effects(db).await;
    }
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT conversation, step, seq, previous FROM turn_effects",
        ))
        .await
        .expect("effects");
    let mut out = Vec::new();
    while let Some(row) = rows.next().await {
        let row = row.expect("row");
        out.push((
            row.get::<i64>(0).expect("conversation"),
            row.get::<i64>(1).expect("step"),
            row.get::<i64>(2).expect("seq"),
            row.get::<i64>(3).expect("previous"),
        ));
    }
    out
}

/// With `RUST_LOG` set (say `spanner_queues=debug`), the test shows what the workers do.
fn log_if_asked() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// A worker for the focused tests: short waits, so that they end soon.
fn focused(db: &Database, policy: OrderingPolicy) -> WorkerBuilder<Turn, NoHandler> {
    Worker::<Turn>::builder(db)
        .with_transaction_settings(patient())
        .with_ordering(
            policy
                .with_recheck_delay(Duration::from_millis(100))
                .with_blocked_delay(Duration::from_millis(300)),
        )
}

async fn send(db: &Database, turns: &[Turn]) {
    db.transaction()
        .with_transaction_settings(patient())
        .run(move |tx| async move { tx.send_many(turns).await })
        .await
        .expect("send");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_message_waits_while_an_earlier_one_is_leased() {
    let Some(db) = database().await else { return };
    send(&db, &[Turn::new(1, 0)]).await;
    // Another consumer holds the first message's lease (and takes no other message).
    let mut receiver = Receiver::<Turn>::builder(&db)
        .with_receive_settings(ReceiveSettings::default().with_max_in_flight(1))
        .build()
        .expect("receiver");
    let held = futures::StreamExt::next(&mut receiver)
        .await
        .expect("a delivery")
        .expect("delivery");
    assert_eq!(held.message().expect("decodes").step, 0);
    send(&db, &[Turn::new(1, 1)]).await;
    let worker = applying(focused(&db, OrderingPolicy::default())).spawn();
    // It waits in memory, leased, and looks again and again (read-only).
    eventually(
        Duration::from_secs(60),
        "the later message to wait",
        || async {
            let stats = worker.stats();
            stats.holding == 1 && stats.order_looks >= 3
        },
    )
    .await;
    assert!(
        applied_steps(&db, 1).await.is_empty(),
        "the later message ran while the earlier one was leased"
    );
    // The other consumer stops and gives the message back: both are handled, in order.
    drop(receiver);
    db.release(&held, Duration::ZERO).await.expect("release");
    drop(held);
    eventually(Duration::from_secs(60), "both messages", || async {
        count(&db, "SELECT COUNT(*) FROM TurnEffects").await == 2
    })
    .await;
    assert_eq!(applied_steps(&db, 1).await, [0, 1]);
    let stats = worker.shutdown().await.expect("shutdown");
    assert_eq!(stats.waited, 0, "waiting cost a release: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_message_waits_while_an_earlier_one_is_scheduled() {
    let Some(db) = database().await else { return };
    db.transaction()
        .run(|tx| async move {
            let later = SendOptions::new().deliver_after(Duration::from_secs(3));
            tx.send_with(&Turn::new(2, 0), later).await?;
            tx.send(&Turn::new(2, 1)).await
        })
        .await
        .expect("send");
    let worker = applying(focused(&db, OrderingPolicy::default())).spawn();
    eventually(Duration::from_secs(60), "both messages", || async {
        count(&db, "SELECT COUNT(*) FROM TurnEffects").await == 2
    })
    .await;
    // The later one was due first, and waited (in memory) for the scheduled one.
    assert_eq!(applied_steps(&db, 2).await, [0, 1]);
    let stats = worker.shutdown().await.expect("shutdown");
    assert!(stats.order_looks >= 1, "{stats:?}");
    assert_eq!(stats.waited, 0, "waiting cost a release: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_earlier_message_no_longer_holds_its_key_back() {
    let Some(db) = database().await else { return };
    // The send tells the sequence it assigned: enough to cancel that one message later.
    let first = db
        .transaction()
        .run(|tx| async move {
            let later = SendOptions::new().deliver_after(Duration::from_secs(10));
            let first = tx.send_with(&Turn::new(6, 0), later).await?;
            tx.send(&Turn::new(6, 1)).await?;
            Ok(first)
        })
        .await
        .expect("send");
    let first = first.sequence().expect("an ordered message has a sequence");
    assert_eq!(first, Sequence::new(0));
    let worker = applying(focused(&db, OrderingPolicy::default())).spawn();
    eventually(
        Duration::from_secs(60),
        "the later message to wait",
        || async {
            let stats = worker.stats();
            stats.holding == 1 && stats.order_looks >= 1
        },
    )
    .await;
    // The ordering key alone names no one message.
    assert!(matches!(
        db.cancel::<Turn>(&6).await,
        Err(Error::InvalidKey { .. })
    ));
    let cancelled = db
        .transaction()
        .run(|tx| async move { tx.cancel_sequenced::<Turn>(&6, first).await })
        .await
        .expect("cancel");
    assert!(cancelled, "the scheduled message was still there");
    eventually(Duration::from_secs(60), "the later message", || async {
        count(&db, "SELECT COUNT(*) FROM TurnEffects").await == 1
    })
    .await;
    // Its ack committed with its effect.
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Turns").await, 0);
    // Only step 1 ran, first in its conversation: the cancelled step never did.
    let effects = effects(&db).await;
    assert_eq!(
        effects.iter().map(|e| (e.1, e.3)).collect::<Vec<_>>(),
        [(1, -1)]
    );
    worker.shutdown().await.expect("shutdown");
}

/// A worker whose handler dead-letters step 0 of every conversation until `heal` is set.
fn dead_lettering(db: &Database, policy: OrderingPolicy, heal: &Arc<AtomicBool>) -> Worker<Turn> {
    let heal = Arc::clone(heal);
    focused(db, policy)
        .transactional(move |tx, turn, ctx| {
            let heal = Arc::clone(&heal);
            async move {
                if turn.step == 0 && !heal.load(Ordering::SeqCst) {
                    return Err(HandlerError::dead_letter("cannot handle step 0"));
                }
                apply(tx, &turn, sequence(&ctx)).await
            }
        })
        .build()
        .expect("worker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_blocks_its_key_until_it_is_replayed() {
    let Some(db) = database().await else { return };
    send(&db, &[Turn::new(3, 0)]).await;
    send(&db, &[Turn::new(3, 1)]).await;
    let heal = Arc::new(AtomicBool::new(false));
    let worker = dead_lettering(&db, OrderingPolicy::default(), &heal).spawn();
    eventually(
        Duration::from_secs(60),
        "the dead letter and a wait",
        || async {
            let stats = worker.stats();
            stats.dead_lettered == 1 && stats.waited >= 2
        },
    )
    .await;
    assert!(
        applied_steps(&db, 3).await.is_empty(),
        "the later message ran past the dead letter"
    );
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Turns").await, 1);
    // Replayed (to its old place) once the handler can take it: both run, in order.
    heal.store(true, Ordering::SeqCst);
    let replayed = db
        .dead_letters()
        .replay(&Turn::QUEUE, &(3_i64, 0_i64).to_message_key())
        .await
        .expect("replay");
    assert!(replayed);
    eventually(Duration::from_secs(60), "both messages", || async {
        count(&db, "SELECT COUNT(*) FROM TurnEffects").await == 2
    })
    .await;
    assert_eq!(applied_steps(&db, 3).await, [0, 1]);
    worker.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_skip_a_dead_letter_does_not_hold_its_key_back() {
    let Some(db) = database().await else { return };
    send(&db, &[Turn::new(4, 0)]).await;
    send(&db, &[Turn::new(4, 1)]).await;
    let heal = Arc::new(AtomicBool::new(false));
    let policy = OrderingPolicy::default().with_dead_letters(DeadLetterOrdering::Skip);
    let worker = dead_lettering(&db, policy, &heal).spawn();
    eventually(Duration::from_secs(60), "the later message", || async {
        count(&db, "SELECT COUNT(*) FROM TurnEffects").await == 1
    })
    .await;
    let effects = effects(&db).await;
    // Step 1 ran after step 0 left the queue (as a dead letter), not before.
    assert_eq!(
        effects.iter().map(|e| (e.1, e.3)).collect::<Vec<_>>(),
        [(1, -1)]
    );
    assert_eq!(worker.stats().dead_lettered, 1);
    let letters = db
        .dead_letters()
        .list(&Turn::QUEUE, 10)
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1);
    worker.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_skip_a_replayed_dead_letter_goes_back_to_its_old_place() {
    log_if_asked();
    let Some(db) = database().await else { return };
    send(&db, &[Turn::new(7, 0)]).await;
    send(&db, &[Turn::new(7, 1)]).await;
    let heal = Arc::new(AtomicBool::new(false));
    let policy = OrderingPolicy::default().with_dead_letters(DeadLetterOrdering::Skip);
    // Step 0 is dead-lettered until healed; once replayed, its first attempt fails, so it
    // stays in the queue (waiting for its retry) for a while.
    let worker = {
        let heal = Arc::clone(&heal);
        focused(&db, policy)
            .with_redelivery_policy(
                RedeliveryPolicy::default().with_initial_delay(Duration::from_secs(1)),
            )
            .transactional(move |tx, turn, ctx| {
                let heal = Arc::clone(&heal);
                async move {
                    if turn.step == 0 && !heal.load(Ordering::SeqCst) {
                        return Err(HandlerError::dead_letter("cannot handle step 0"));
                    }
                    if turn.step == 0 && ctx.attempt() == 1 {
                        return Err(HandlerError::msg("not yet"));
                    }
                    apply(tx, &turn, sequence(&ctx)).await
                }
            })
            .build()
            .expect("worker")
            .spawn()
    };
    eventually(
        Duration::from_secs(60),
        "step 1 past the dead letter",
        || async { count(&db, "SELECT COUNT(*) FROM TurnEffects").await == 1 },
    )
    .await;
    heal.store(true, Ordering::SeqCst);
    let replayed = db
        .dead_letters()
        .replay(&Turn::QUEUE, &(7_i64, 0_i64).to_message_key())
        .await
        .expect("replay");
    assert!(replayed);
    // Step 2, sent after the replay, waits for the replayed step 0 (an earlier sequence).
    send(&db, &[Turn::new(7, 2)]).await;
    eventually(Duration::from_secs(60), "all three steps", || async {
        count(&db, "SELECT COUNT(*) FROM TurnEffects").await == 3
    })
    .await;
    assert_eq!(applied_steps(&db, 7).await, [1, 0, 2]);
    assert!(worker.stats().retried >= 1, "{:?}", worker.stats());
    worker.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_handler_is_called_in_send_order_per_key() {
    let Some(db) = database().await else { return };
    // Three conversations, ten steps each, sent step by step in transactions of their own;
    // the first attempt at step 4 of each conversation fails, and the later steps wait.
    for step in 0..10 {
        let turns: Vec<Turn> = (10..13).map(|c| Turn::new(c, step)).collect();
        send(&db, &turns).await;
    }
    let calls: Arc<std::sync::Mutex<Vec<(i64, i64, i64)>>> = Arc::default();
    let worker = {
        let calls = Arc::clone(&calls);
        focused(&db, OrderingPolicy::default())
            .with_concurrency(4)
            .with_redelivery_policy(
                RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(200)),
            )
            .external(move |turn: Arc<Turn>, ctx| {
                let calls = Arc::clone(&calls);
                async move {
                    if turn.step == 4 && ctx.attempt() == 1 {
                        return Err(HandlerError::msg("not yet"));
                    }
                    calls.lock().expect("calls").push((
                        turn.conversation,
                        turn.step,
                        sequence(&ctx).get(),
                    ));
                    Ok(())
                }
            })
            .build()
            .expect("worker")
            .spawn()
    };
    eventually(Duration::from_secs(120), "every step handled", || async {
        count(&db, "SELECT COUNT(*) FROM Turns").await == 0
    })
    .await;
    let calls = calls.lock().expect("calls").clone();
    for conversation in 10..13 {
        let steps: Vec<(i64, i64)> = calls
            .iter()
            .filter(|c| c.0 == conversation)
            .map(|c| (c.1, c.2))
            .collect();
        assert_eq!(
            steps,
            (0..10).map(|s| (s, s)).collect::<Vec<_>>(),
            "conversation {conversation}"
        );
    }
    assert!(worker.stats().retried >= 3, "{:?}", worker.stats());
    worker.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_senders_of_one_key_get_consecutive_sequences() {
    let Some(db) = database().await else { return };
    let senders: Vec<tokio::task::JoinHandle<()>> = (0..2)
        .map(|_| {
            let db = db.database().clone();
            tokio::spawn(async move {
                for _ in 0..15 {
                    send(&db, &[Turn::new(5, 0)]).await;
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.expect("sender");
    }
    // Two sends of one key in one transaction number on from each other, and each receipt
    // carries the sequence it was given.
    let (first, second) = db
        .transaction()
        .run(|tx| async move {
            let first = tx.send(&Turn::new(5, 0)).await?;
            let second = tx.send(&Turn::new(5, 0)).await?;
            Ok((first, second))
        })
        .await
        .expect("two sends");
    assert_eq!(first.key(), &(5_i64, 30_i64).to_message_key());
    assert_eq!(second.key(), &(5_i64, 31_i64).to_message_key());
    assert_eq!(
        (first.sequence(), second.sequence()),
        (Some(Sequence::new(30)), Some(Sequence::new(31)))
    );
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT Seq FROM Turns WHERE Conversation = 5 ORDER BY Seq",
        ))
        .await
        .expect("query");
    let mut sequences = Vec::new();
    while let Some(row) = rows.next().await {
        sequences.push(row.expect("row").get::<i64>(0).expect("seq"));
    }
    assert_eq!(sequences, (0..32).collect::<Vec<i64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_settings_on_an_unordered_queue_are_refused() {
    let Some(db) = database().await else { return };
    #[derive(QueueMessage, Debug)]
    #[queue(name = "Plain")]
    struct Plain {
        #[queue(key)]
        id: i64,
    }
    let worker = Worker::<Plain>::builder(&db)
        .with_ordering(OrderingPolicy::default())
        .external(|_plain, _ctx| async { Ok::<(), HandlerError>(()) })
        .build();
    match worker.map(|_| ()) {
        Err(Error::InvalidSetting {
            setting, reason, ..
        }) => {
            assert_eq!(setting, "ordering");
            assert!(reason.contains("#[queue(ordered)]"), "{reason}");
        }
        other => panic!("expected InvalidSetting, got {other:?}"),
    }
    let bad = Worker::<Turn>::builder(&db)
        .with_ordering(OrderingPolicy::default().with_recheck_delay(Duration::ZERO))
        .external(|_turn, _ctx| async { Ok::<(), HandlerError>(()) })
        .build();
    assert!(matches!(
        bad.map(|_| ()),
        Err(Error::InvalidSetting {
            setting: "ordering",
            ..
        })
    ));
}

const PG_PROGRESS: &str = "CREATE TABLE progress (conversation bigint NOT NULL, \
                           last_step bigint NOT NULL, PRIMARY KEY (conversation))";
const PG_EFFECTS: &str = "CREATE TABLE turn_effects (effect_id varchar(36) NOT NULL, \
                          conversation bigint NOT NULL, step bigint NOT NULL, seq bigint NOT NULL, \
                          previous bigint NOT NULL, PRIMARY KEY (effect_id))";

/// [`apply`] on a PostgreSQL-dialect database.
async fn apply_postgresql(tx: Transaction, turn: &Turn, seq: Sequence) -> Result<(), HandlerError> {
    let read = ReadRequest::builder("progress", vec!["last_step"])
        .with_keys(KeySet::from(Key::new(vec![Value::from(turn.conversation)])))
        .build();
    let mut rows = tx.execute_read(read).await?;
    let previous = match rows.next().await {
        Some(row) => row?.get::<i64>(0)?,
        None => -1,
    };
    tx.execute_update(
        Statement::builder(
            "INSERT INTO turn_effects (effect_id, conversation, step, seq, previous) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .add_param("p1", uuid::Uuid::new_v4().to_string())
        .add_param("p2", turn.conversation)
        .add_param("p3", turn.step)
        .add_param("p4", seq.get())
        .add_param("p5", previous)
        .build(),
    )
    .await?;
    tx.buffer([Mutation::new_insert_or_update_builder("progress")
        .set("conversation")
        .to(turn.conversation)
        .set("last_step")
        .to(turn.step)
        .build()])?;
    Ok(())
}

/// `(step, seq, previous)` of `conversation`'s effects on a PostgreSQL-dialect database, in
/// the order they were applied (following each effect's previous step from -1), and how many
/// there are in all.
async fn applied_postgresql(db: &Database, conversation: i64) -> (Vec<(i64, i64)>, usize) {
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(
            Statement::builder(
                "SELECT step, seq, previous FROM turn_effects WHERE conversation = $1",
            )
            .add_param("p1", conversation)
            .build(),
        )
        .await
        .expect("effects");
    let mut by_previous = HashMap::new();
    let mut all = 0;
    while let Some(row) = rows.next().await {
        let row = row.expect("row");
        let (step, seq, previous) = (
            row.get::<i64>(0).expect("step"),
            row.get::<i64>(1).expect("seq"),
            row.get::<i64>(2).expect("previous"),
        );
        by_previous.insert(previous, (step, seq));
        all += 1;
    }
    let mut out = Vec::new();
    let mut at = -1;
    while let Some(&(step, seq)) = by_previous.get(&at) {
        out.push((step, seq));
        at = step;
    }
    (out, all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_postgresql_database_keys_keep_send_order_and_a_dead_letter_blocks_its_key() {
    let Some(test) = spanner_queues_testing::setup()
        .with_dialect(Dialect::PostgreSql)
        .with_queue::<Turn>()
        .with_ddl([PG_PROGRESS, PG_EFFECTS])
        .create()
        .await
    else {
        return;
    };
    let db = test.database();
    // Conversation 1: six steps, sent in two transactions while nothing runs yet.
    // Conversation 2: step 0 is dead-lettered until healed; steps 1 and 2 must wait for it.
    for steps in [0..3, 3..6] {
        let turns: Vec<Turn> = steps.map(|step| Turn::new(1, step)).collect();
        send(db, &turns).await;
    }
    let turns: Vec<Turn> = (0..3).map(|step| Turn::new(2, step)).collect();
    send(db, &turns).await;
    let heal = Arc::new(AtomicBool::new(false));
    let worker = {
        let heal = Arc::clone(&heal);
        Worker::<Turn>::builder(db)
            .with_concurrency(4)
            .with_transaction_settings(patient())
            .with_ordering(
                OrderingPolicy::default()
                    .with_recheck_delay(Duration::from_millis(100))
                    .with_blocked_delay(Duration::from_millis(300)),
            )
            .transactional(move |tx, turn, ctx| {
                let heal = Arc::clone(&heal);
                async move {
                    if turn.conversation == 2 && turn.step == 0 && !heal.load(Ordering::SeqCst) {
                        return Err(HandlerError::dead_letter("cannot handle step 0"));
                    }
                    apply_postgresql(tx, &turn, sequence(&ctx)).await
                }
            })
            .build()
            .expect("worker")
            .spawn()
    };
    eventually(
        Duration::from_secs(120),
        "conversation 1 handled, conversation 2 dead-lettered and waiting",
        || async {
            let stats = worker.stats();
            applied_postgresql(db, 1).await.1 == 6 && stats.dead_lettered == 1 && stats.waited >= 2
        },
    )
    .await;
    // Send order is sequence order, and the effects followed it.
    assert_eq!(
        applied_postgresql(db, 1).await,
        ((0..6).map(|step| (step, step)).collect::<Vec<_>>(), 6)
    );
    assert_eq!(
        applied_postgresql(db, 2).await,
        (Vec::new(), 0),
        "a later message ran past the dead letter"
    );
    assert_eq!(count(db, "SELECT COUNT(*) FROM turns").await, 2);
    heal.store(true, Ordering::SeqCst);
    let replayed = db
        .dead_letters()
        .replay(&Turn::QUEUE, &(2_i64, 0_i64).to_message_key())
        .await
        .expect("replay");
    assert!(replayed);
    eventually(
        Duration::from_secs(120),
        "conversation 2 after the replay",
        || async { applied_postgresql(db, 2).await.1 == 3 },
    )
    .await;
    assert_eq!(
        applied_postgresql(db, 2).await,
        (vec![(0, 0), (1, 1), (2, 2)], 3)
    );
    worker.shutdown().await.expect("shutdown");
}
