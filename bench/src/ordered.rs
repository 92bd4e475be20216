//! `ordered_vs_unordered` and `ordered_skip_vs_unordered`: throughput across keys of the worker
//! on an ordered queue (at most one message per ordering key in flight, in send order), with
//! dead letters blocking their key (the default) and skipped, each against the same worker on
//! an unordered queue, the three side by side in interleaved rounds, with the same handler (one
//! effect row inserted in the transaction that acks).

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
use crate::{BoxError, Scale};

/// The ordered queue's message: ordering key `Key`, sequence `Seq`, the same payload as
/// [`BenchJob`].
#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "BenchTurns")]
struct BenchTurn {
    #[queue(key)]
    key: i64,
    #[queue(key, sequence)]
    seq: i64,
    body: String,
}

const TURN_EFFECTS_DDL: &str = "CREATE TABLE BenchTurnEffects (Key INT64 NOT NULL, \
                                Seq INT64 NOT NULL) PRIMARY KEY (Key, Seq)";

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

pub(crate) async fn section(
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
            key: base + i % KEYS,
            seq: 0,
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
        .transactional(|tx, turn, _ctx| async move {
            tx.execute_update(
                Statement::builder("INSERT INTO BenchTurnEffects (Key, Seq) VALUES (@key, @seq)")
                    .add_param("key", turn.key)
                    .add_param("seq", turn.seq)
                    .build(),
            )
            .await?;
            Ok(())
        })
        .build()?;
    let stats = timed(worker, n, timeout).await?;
    let effects = count(
        db.client(),
        Statement::builder("SELECT COUNT(*) FROM BenchTurnEffects WHERE Key >= @lo AND Key < @hi")
            .add_param("lo", base)
            .add_param("hi", base + KEYS)
            .build(),
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
