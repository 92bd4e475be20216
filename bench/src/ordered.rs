//! `ordered_vs_unordered` and `ordered_skip_vs_unordered`: throughput across keys of the worker
//! on an ordered queue (at most one message per ordering key in flight, in send order), with
//! dead letters blocking their key (the default) and skipped, each against the same worker on
//! an unordered queue, the three side by side in interleaved rounds, with the same handler (one
//! effect row inserted in the transaction that acks).
//!
//! `ordered_deep_vs_unordered`, `ordered_deep_second_half_vs_first_half` and
//! `ordered_deep_commits_per_message`: deep backlogs, [`DEEP_KEYS`] ordering keys with many
//! messages each, all queued before [`DEEP_WORKERS`] workers (each its own client and receive
//! stream) start, against as many unordered workers on as many messages.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;
use serde_json::json;
use spanner_queues::worker::{DeadLetterOrdering, OrderingPolicy, WorkerStats};
use spanner_queues::{Dialect, QueueMessage, SchemaSetup, Worker};

use crate::consume::{sdk_settings, wait_until};
use crate::db::{Bench, BenchJob, Database};
use crate::report::{Report, Table, round};
use crate::targets::PG_PREFIX;
use crate::{BoxError, Scale};

/// The ordered queue's message: ordering key `Conversation`, sequence `Seq`, the same payload
/// as [`BenchJob`].
#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "BenchTurns", ordered, sequence_column = "Seq")]
struct BenchTurn {
    #[queue(key)]
    conversation: i64,
    body: String,
}

const TURN_EFFECTS_DDL: &str = "CREATE TABLE BenchTurnEffects (Conversation INT64 NOT NULL, \
                                Seq INT64 NOT NULL) PRIMARY KEY (Conversation, Seq)";
/// The same in a PostgreSQL-dialect database.
const PG_TURN_EFFECTS_DDL: &str = "CREATE TABLE benchturneffects (conversation bigint NOT NULL, \
                                   seq bigint NOT NULL, PRIMARY KEY (conversation, seq))";

/// Ordering keys per run: more than the handlers, so that order costs no parallelism.
const KEYS: i64 = 20;
/// Handlers of the one worker on each side.
const HANDLERS: usize = 4;

/// One timed run.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    messages: u64,
    secs: f64,
    waited: u64,
}

impl Run {
    fn add(&mut self, other: Run) {
        self.messages += other.messages;
        self.secs += other.secs;
        self.waited += other.waited;
    }

    fn rate(&self) -> f64 {
        self.messages as f64 / self.secs
    }

    fn waits_per_message(&self) -> f64 {
        self.waited as f64 / self.messages as f64
    }
}

/// The three workers measured side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Unordered,
    Ordered(DeadLetterOrdering),
}

const SIDES: [Side; 3] = [
    Side::Unordered,
    Side::Ordered(DeadLetterOrdering::Block),
    Side::Ordered(DeadLetterOrdering::Skip),
];

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Unordered => "unordered",
            Side::Ordered(DeadLetterOrdering::Skip) => "ordered (dead letters skipped)",
            Side::Ordered(_) => "ordered (dead letters block)",
        }
    }
}

/// Ordering keys of the deep-backlog runs.
const DEEP_KEYS: i64 = 40;
/// Workers of each deep-backlog run, each with its own client (its own receive stream).
const DEEP_WORKERS: usize = 3;
/// Handlers of each of those workers.
const DEEP_HANDLERS: usize = 4;

/// Messages per ordering key queued before the deep-backlog run's workers start: the 50
/// (75 with `--long`), 10 in a quick run.
fn deep_depth(scale: Scale) -> i64 {
    match scale.name {
        "quick" => 10,
        "long" => 75,
        _ => 50,
    }
}

/// One timed deep-backlog run.
#[derive(Debug, Default, Clone, Copy)]
struct DeepRun {
    messages: u64,
    secs: f64,
    /// Seconds until half the messages were acked.
    half_secs: f64,
    /// `Commit` RPCs while the workers ran (read-write transactions; aborted ones included).
    commits: u64,
    waited: u64,
    looks: u64,
}

impl DeepRun {
    fn add(&mut self, other: DeepRun) {
        self.messages += other.messages;
        self.secs += other.secs;
        self.half_secs += other.half_secs;
        self.commits += other.commits;
        self.waited += other.waited;
        self.looks += other.looks;
    }

    fn rate(&self) -> f64 {
        self.messages as f64 / self.secs
    }

    /// The rate over the second half of the messages ÷ the rate over the first half.
    fn second_half_vs_first(&self) -> f64 {
        self.half_secs / (self.secs - self.half_secs)
    }

    fn per_message(&self, count: u64) -> f64 {
        count as f64 / self.messages as f64
    }
}

/// Deep backlogs in both dialects (the PostgreSQL ratios named with the `pg_` prefix).
pub(crate) async fn deep(bench: &Bench, scale: Scale, report: &mut Report) -> Result<(), BoxError> {
    deep_in(bench, scale, report, Dialect::GoogleSql).await?;
    deep_in(bench, scale, report, Dialect::PostgreSql).await
}

/// The ordered side's effect in `dialect`: one row per handled message, keyed by its
/// conversation and sequence.
fn turn_effect(dialect: Dialect, conversation: i64, seq: i64) -> Statement {
    match dialect {
        Dialect::PostgreSql => {
            Statement::builder("INSERT INTO benchturneffects (conversation, seq) VALUES ($1, $2)")
                .add_param("p1", conversation)
                .add_param("p2", seq)
        }
        _ => Statement::builder(
            "INSERT INTO BenchTurnEffects (Conversation, Seq) VALUES (@conversation, @seq)",
        )
        .add_param("conversation", conversation)
        .add_param("seq", seq),
    }
    .build()
}

/// The number of effects of the conversations in `[lo, hi)`, in `dialect`.
fn turn_effects_between(dialect: Dialect, lo: i64, hi: i64) -> Statement {
    match dialect {
        Dialect::PostgreSql => Statement::builder(
            "SELECT COUNT(*) FROM benchturneffects WHERE conversation >= $1 AND conversation < $2",
        )
        .add_param("p1", lo)
        .add_param("p2", hi),
        _ => Statement::builder(
            "SELECT COUNT(*) FROM BenchTurnEffects WHERE Conversation >= @lo AND Conversation < @hi",
        )
        .add_param("lo", lo)
        .add_param("hi", hi),
    }
    .build()
}

/// Deep backlogs in `dialect`: the ordered queue with [`DEEP_KEYS`] keys × [`deep_depth`]
/// messages queued before [`DEEP_WORKERS`] workers start, against as many unordered workers on
/// as many messages, in interleaved rounds.
async fn deep_in(
    bench: &Bench,
    scale: Scale,
    report: &mut Report,
    dialect: Dialect,
) -> Result<(), BoxError> {
    let (prefix, in_dialect) = match dialect {
        Dialect::PostgreSql => (PG_PREFIX, ", PostgreSQL-dialect database"),
        _ => ("", ""),
    };
    println!("ordering, deep backlogs{in_dialect}:");
    let depth = deep_depth(scale);
    let n = DEEP_KEYS * depth;
    let timeout = Duration::from_secs(120 + (n as u64) * 2);
    let mut ddl = SchemaSetup::new()
        .with_queue::<BenchTurn>()
        .statements(dialect)?;
    ddl.push(match dialect {
        Dialect::PostgreSql => PG_TURN_EFFECTS_DDL.to_owned(),
        _ => TURN_EFFECTS_DDL.to_owned(),
    });
    let db = bench.database_in_with(dialect, ddl).await?;
    let (mut ordered, mut unordered) = (DeepRun::default(), DeepRun::default());
    for round in 0..scale.consume_rounds.max(1) {
        for turn in 0..2 {
            let ordered_side = (round + turn) % 2 == 0;
            let result = if ordered_side {
                deep_ordered(bench, &db, (round as i64 + 1) * 100_000, depth, timeout).await
            } else {
                deep_unordered(bench, &db, (round as i64 + 1) * 1_000_000, n, timeout).await
            };
            let label = if ordered_side { "ordered" } else { "unordered" };
            match result {
                Ok(run) => {
                    println!(
                        "  deep backlog round {}: {label} {DEEP_WORKERS}x{DEEP_HANDLERS}: {:.1} msg/s \
                         (second half {:.2}x the first), {:.3} commits/msg, {} released, {} looks",
                        round + 1,
                        run.rate(),
                        run.second_half_vs_first(),
                        run.per_message(run.commits),
                        run.waited,
                        run.looks
                    );
                    if ordered_side {
                        ordered.add(run);
                    } else {
                        unordered.add(run);
                    }
                }
                Err(error) => report
                    .problems
                    .push(format!("deep ordering{in_dialect}: {error}")),
            }
        }
    }
    bench.drop_database(db).await?;
    let ratio = ordered.rate() / unordered.rate();
    report.ratio(&format!("{prefix}ordered_deep_vs_unordered"), ratio);
    report.ratio(
        &format!("{prefix}ordered_deep_second_half_vs_first_half"),
        ordered.second_half_vs_first(),
    );
    report.ratio(
        &format!("{prefix}ordered_deep_commits_per_message"),
        ordered.per_message(ordered.commits),
    );
    report.detail(
        &format!("{prefix}ordering_deep"),
        json!({
            "keys": DEEP_KEYS,
            "messages_per_key": depth,
            "workers": DEEP_WORKERS,
            "handlers_per_worker": DEEP_HANDLERS,
            "ordered_messages_per_sec": round(ordered.rate(), 2),
            "unordered_messages_per_sec": round(unordered.rate(), 2),
            "ordered_commits_per_message": round(ordered.per_message(ordered.commits), 3),
            "unordered_commits_per_message": round(unordered.per_message(unordered.commits), 3),
            "ordered_releases_per_message": round(ordered.per_message(ordered.waited), 3),
            "ordered_looks_per_message": round(ordered.per_message(ordered.looks), 3),
            "unordered_second_half_vs_first_half": round(unordered.second_half_vs_first(), 3),
        }),
    );
    let mut table = Table::new(
        format!(
            "Per-key ordering, deep backlogs ({DEEP_KEYS} keys x {depth} messages queued first, \
             {DEEP_WORKERS} workers x {DEEP_HANDLERS}{in_dialect})"
        ),
        &[
            "worker",
            "msg/s",
            "2nd half / 1st (target >= 0.8)",
            "commits/msg (target <= 1.2)",
            "releases/msg",
            "looks/msg",
            "vs unordered (target >= 0.5)",
        ],
    );
    table.row(vec![
        "ordered".into(),
        format!("{:.1}", ordered.rate()),
        format!("{:.2}", ordered.second_half_vs_first()),
        format!("{:.3}", ordered.per_message(ordered.commits)),
        format!("{:.3}", ordered.per_message(ordered.waited)),
        format!("{:.3}", ordered.per_message(ordered.looks)),
        format!("{ratio:.2}"),
    ]);
    table.row(vec![
        "unordered".into(),
        format!("{:.1}", unordered.rate()),
        format!("{:.2}", unordered.second_half_vs_first()),
        format!("{:.3}", unordered.per_message(unordered.commits)),
        String::new(),
        String::new(),
        String::new(),
    ]);
    report.table(table);
    Ok(())
}

/// Queues `depth` messages for each of [`DEEP_KEYS`] ordering keys from `base` (in rounds over
/// the keys, 100 per transaction), then times [`DEEP_WORKERS`] workers until every one is
/// acked.
async fn deep_ordered(
    bench: &Bench,
    db: &Database,
    base: i64,
    depth: i64,
    timeout: Duration,
) -> Result<DeepRun, BoxError> {
    let n = DEEP_KEYS * depth;
    let dialect = db.dialect();
    let turns: Vec<BenchTurn> = (0..n)
        .map(|i| BenchTurn {
            conversation: base + i % DEEP_KEYS,
            body: "x".repeat(64),
        })
        .collect();
    for chunk in turns.chunks(100) {
        db.sdk.send_many(chunk).await?;
    }
    let mut workers = Vec::new();
    for _ in 0..DEEP_WORKERS {
        let client = bench.new_client(db).await?;
        workers.push(
            Worker::<BenchTurn>::builder(&client)
                .with_concurrency(DEEP_HANDLERS)
                .with_transaction_settings(sdk_settings())
                .transactional(move |tx, turn, ctx| async move {
                    let seq = ctx.sequence().map_or(-1, i64::from);
                    tx.execute_update(turn_effect(dialect, turn.conversation, seq))
                        .await?;
                    Ok(())
                })
                .build()?,
        );
    }
    let before = bench.rpcs().await?;
    let (stats, secs, half_secs) = timed_all(workers, n, timeout).await?;
    let after = bench.rpcs().await?;
    let effects = count(
        db.client(),
        turn_effects_between(dialect, base, base + DEEP_KEYS),
    )
    .await?;
    if effects != n {
        return Err(format!("deep run at keys {base}..: {effects} effects, expected {n}").into());
    }
    Ok(DeepRun {
        messages: stats.iter().map(|s| s.acked).sum(),
        secs,
        half_secs,
        commits: commits(&after) - commits(&before),
        waited: stats.iter().map(|s| s.waited).sum(),
        looks: stats.iter().map(|s| s.order_looks).sum(),
    })
}

/// The same for `n` messages of the unordered queue.
async fn deep_unordered(
    bench: &Bench,
    db: &Database,
    base: i64,
    n: i64,
    timeout: Duration,
) -> Result<DeepRun, BoxError> {
    let ids = base..base + n;
    db.fill_queue(ids.clone()).await?;
    let sql = db.sql();
    let mut workers = Vec::new();
    for _ in 0..DEEP_WORKERS {
        let client = bench.new_client(db).await?;
        workers.push(
            Worker::<BenchJob>::builder(&client)
                .with_concurrency(DEEP_HANDLERS)
                .with_transaction_settings(sdk_settings())
                .transactional(move |tx, job, _ctx| async move {
                    tx.execute_update(sql.insert_effect(job.id)).await?;
                    Ok(())
                })
                .build()?,
        );
    }
    let before = bench.rpcs().await?;
    let (stats, secs, half_secs) = timed_all(workers, n, timeout).await?;
    let after = bench.rpcs().await?;
    db.verify(&ids, false).await?;
    Ok(DeepRun {
        messages: stats.iter().map(|s| s.acked).sum(),
        secs,
        half_secs,
        commits: commits(&after) - commits(&before),
        waited: 0,
        looks: 0,
    })
}

fn commits(rpcs: &crate::emulator::RpcCounts) -> u64 {
    rpcs.get("Commit").copied().unwrap_or(0)
}

/// Runs `workers` until they acked `n` messages together; their counters, the seconds that
/// took, and the seconds until half were acked.
async fn timed_all<M: QueueMessage>(
    workers: Vec<Worker<M>>,
    n: i64,
    timeout: Duration,
) -> Result<(Vec<WorkerStats>, f64, f64), BoxError> {
    let handles: Vec<_> = workers.into_iter().map(Worker::spawn).collect();
    let acked = || handles.iter().map(|h| h.stats().acked).sum::<u64>();
    let started = Instant::now();
    let target = n as u64;
    // A line every 15 s: these runs are long on a loaded machine.
    let progress = async {
        loop {
            tokio::time::sleep(Duration::from_secs(15)).await;
            let stats: Vec<WorkerStats> = handles.iter().map(|h| h.stats()).collect();
            println!(
                "    {:.0} s: {} of {n} acked; per worker acked/holding/looks/waited/leases \
                 lost: {}",
                started.elapsed().as_secs_f64(),
                acked(),
                stats
                    .iter()
                    .map(|s| {
                        format!(
                            "{}/{}/{}/{}/{}",
                            s.acked, s.holding, s.order_looks, s.waited, s.receiver.lease_lost
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    };
    let (half_secs, finished) = tokio::select! {
        () = progress => unreachable!("the progress lines never end"),
        done = async {
            wait_until(started, timeout, || acked() >= target.div_ceil(2)).await;
            let half_secs = started.elapsed().as_secs_f64();
            (half_secs, wait_until(started, timeout, || acked() >= target).await)
        } => done,
    };
    let secs = started.elapsed().as_secs_f64();
    let done = acked();
    let mut stats = Vec::new();
    for handle in handles {
        stats.push(handle.shutdown().await?);
    }
    if !finished {
        return Err(format!("only {done} of {n} messages acked in {timeout:?}").into());
    }
    Ok((stats, secs, half_secs))
}

/// Throughput across keys of one worker, ordered (both dead-letter policies) against
/// unordered.
pub(crate) async fn one_worker(
    bench: &Bench,
    scale: Scale,
    report: &mut Report,
) -> Result<(), BoxError> {
    let n = scale.consume_messages;
    let timeout = Duration::from_secs(60 + (n as u64) * 2);
    // The ordered queue and its sequence counter table.
    let mut ddl = SchemaSetup::new()
        .with_queue::<BenchTurn>()
        .statements(Dialect::GoogleSql)?;
    ddl.push(TURN_EFFECTS_DDL.to_owned());
    let db = bench.database_with(ddl).await?;
    let mut totals = [Run::default(); SIDES.len()];
    for round in 0..scale.consume_rounds.max(2) {
        // The side that goes first rotates from round to round.
        for turn in 0..SIDES.len() {
            let index = (round + turn) % SIDES.len();
            let side = SIDES[index];
            // Each ordered run has ordering keys of its own.
            let base = (round * SIDES.len() + index) as i64 * 1_000;
            let result = match side {
                Side::Unordered => unordered_run(bench, &db, round as i64, n, timeout).await,
                Side::Ordered(dead_letters) => {
                    ordered_run(bench, &db, base, dead_letters, n, timeout).await
                }
            };
            match result {
                Ok(run) => {
                    println!(
                        "  ordering round {}: {} worker 1x{HANDLERS}: {:.1} msg/s ({} waited)",
                        round + 1,
                        side.label(),
                        run.rate(),
                        run.waited
                    );
                    totals[index].add(run);
                }
                Err(error) => report.problems.push(format!("ordering: {error}")),
            }
        }
    }
    bench.drop_database(db).await?;
    let [unordered, block, skip] = totals;
    let block_ratio = block.rate() / unordered.rate();
    let skip_ratio = skip.rate() / unordered.rate();
    report.ratio("ordered_vs_unordered", block_ratio);
    report.ratio("ordered_skip_vs_unordered", skip_ratio);
    report.detail(
        "ordering",
        json!({
            "keys": KEYS,
            "handlers": HANDLERS,
            "messages_per_run": n,
            "ordered_messages_per_sec": round(block.rate(), 2),
            "ordered_skip_messages_per_sec": round(skip.rate(), 2),
            "unordered_messages_per_sec": round(unordered.rate(), 2),
            "ordered_waits_per_message": round(block.waits_per_message(), 3),
            "ordered_skip_waits_per_message": round(skip.waits_per_message(), 3),
        }),
    );
    let mut table = Table::new(
        format!("Per-key ordering ({n} messages over {KEYS} keys per run, 1 worker x {HANDLERS})"),
        &[
            "worker",
            "msg/s",
            "waits/msg",
            "vs unordered (target >= 0.8)",
        ],
    );
    for (side, run, ratio) in [
        (SIDES[1], block, Some(block_ratio)),
        (SIDES[2], skip, Some(skip_ratio)),
        (SIDES[0], unordered, None),
    ] {
        table.row(vec![
            side.label().into(),
            format!("{:.1}", run.rate()),
            if ratio.is_some() {
                format!("{:.3}", run.waits_per_message())
            } else {
                String::new()
            },
            ratio.map(|r| format!("{r:.2}")).unwrap_or_default(),
        ]);
    }
    report.table(table);
    Ok(())
}

/// Sends `n` messages over [`KEYS`] ordering keys from `base` (round-robin, 100 per
/// transaction), then times one worker with `dead_letters` until every one is acked.
async fn ordered_run(
    bench: &Bench,
    db: &Database,
    base: i64,
    dead_letters: DeadLetterOrdering,
    n: i64,
    timeout: Duration,
) -> Result<Run, BoxError> {
    let turns: Vec<BenchTurn> = (0..n)
        .map(|i| BenchTurn {
            conversation: base + i % KEYS,
            body: "x".repeat(64),
        })
        .collect();
    for chunk in turns.chunks(100) {
        db.sdk.send_many(chunk).await?;
    }
    let client = bench.new_client(db).await?;
    let worker = Worker::<BenchTurn>::builder(&client)
        .with_concurrency(HANDLERS)
        .with_transaction_settings(sdk_settings())
        .with_ordering(OrderingPolicy::default().with_dead_letters(dead_letters))
        .transactional(|tx, turn, ctx| async move {
            let seq = ctx.sequence().map_or(-1, i64::from);
            tx.execute_update(turn_effect(Dialect::GoogleSql, turn.conversation, seq))
                .await?;
            Ok(())
        })
        .build()?;
    let stats = timed(worker, n, timeout).await?;
    let effects = count(
        db.client(),
        turn_effects_between(Dialect::GoogleSql, base, base + KEYS),
    )
    .await?;
    if effects != n {
        return Err(
            format!("ordered run at keys {base}..: {effects} effects, expected {n}").into(),
        );
    }
    Ok(Run {
        messages: stats.0.acked,
        secs: stats.1,
        waited: stats.0.waited,
    })
}

/// The same for `n` messages of the unordered queue ([`BenchJob`], the consume section's).
async fn unordered_run(
    bench: &Bench,
    db: &Database,
    round: i64,
    n: i64,
    timeout: Duration,
) -> Result<Run, BoxError> {
    let ids = round * 100_000..round * 100_000 + n;
    db.fill_queue(ids.clone()).await?;
    let client = bench.new_client(db).await?;
    let worker = Worker::<BenchJob>::builder(&client)
        .with_concurrency(HANDLERS)
        .with_transaction_settings(sdk_settings())
        .transactional(|tx, job, _ctx| async move {
            tx.execute_update(
                Statement::builder("INSERT INTO BenchEffects (Id) VALUES (@id)")
                    .add_param("id", job.id)
                    .build(),
            )
            .await?;
            Ok(())
        })
        .build()?;
    let stats = timed(worker, n, timeout).await?;
    db.verify(&ids, false).await?;
    Ok(Run {
        messages: stats.0.acked,
        secs: stats.1,
        waited: 0,
    })
}

/// Runs `worker` until it acked `n` messages; its counters and the seconds that took.
async fn timed<M: QueueMessage>(
    worker: Worker<M>,
    n: i64,
    timeout: Duration,
) -> Result<(WorkerStats, f64), BoxError> {
    let acked = Arc::new(AtomicU64::new(0));
    let handle = worker.spawn();
    let started = Instant::now();
    let target = n as u64;
    let finished = wait_until(started, timeout, || {
        let now = handle.stats().acked;
        acked.store(now, Ordering::Relaxed);
        now >= target
    })
    .await;
    let secs = started.elapsed().as_secs_f64();
    let stats = handle.shutdown().await?;
    if !finished {
        return Err(format!(
            "only {} of {n} messages acked in {timeout:?}",
            acked.load(Ordering::Relaxed)
        )
        .into());
    }
    Ok((stats, secs))
}

async fn count(client: &DatabaseClient, statement: Statement) -> Result<i64, BoxError> {
    let mut rows = client.single_use().build().execute_query(statement).await?;
    match rows.next().await {
        Some(row) => Ok(row?.get::<i64>(0)?),
        None => Ok(0),
    }
}
