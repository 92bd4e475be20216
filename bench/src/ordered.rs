//! `ordered_vs_unordered`: throughput across keys of the worker on an ordered queue (at most
//! one message per ordering key in flight, in send order) against the same worker on an
//! unordered queue, side by side in interleaved rounds, with the same handler (one effect row
//! inserted in the transaction that acks).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;
use serde_json::json;
use spanner_queues::worker::WorkerStats;
use spanner_queues::{Dialect, Producer, QueueMessage, Worker};

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

pub(crate) async fn section(
    bench: &Bench,
    scale: Scale,
    report: &mut Report,
) -> Result<(), BoxError> {
    let n = scale.consume_messages;
    let timeout = Duration::from_secs(60 + (n as u64) * 2);
    let mut ddl = BenchTurn::schema()
        .create_statement(Dialect::GoogleSql)
        .map(|queue| vec![queue])?;
    ddl.extend(spanner_queues::ordering::schema_statements(
        Dialect::GoogleSql,
    ));
    ddl.push(TURN_EFFECTS_DDL.to_owned());
    let db = bench.database_with(ddl).await?;
    let (mut ordered, mut unordered) = (Run::default(), Run::default());
    for round in 0..scale.consume_rounds.max(2) {
        let first_ordered = round % 2 == 0;
        for side_ordered in [first_ordered, !first_ordered] {
            let result = if side_ordered {
                ordered_run(bench, &db, round as i64, n, timeout).await
            } else {
                unordered_run(bench, &db, round as i64, n, timeout).await
            };
            match result {
                Ok(run) => {
                    let label = if side_ordered { "ordered" } else { "unordered" };
                    println!(
                        "  ordering round {}: {label} worker 1x{HANDLERS}: {:.1} msg/s ({} waited)",
                        round + 1,
                        run.messages as f64 / run.secs,
                        run.waited
                    );
                    let total = if side_ordered {
                        &mut ordered
                    } else {
                        &mut unordered
                    };
                    total.messages += run.messages;
                    total.secs += run.secs;
                    total.waited += run.waited;
                }
                Err(error) => report.problems.push(format!("ordering: {error}")),
            }
        }
    }
    bench.drop_database(db).await?;
    let rate = |run: &Run| run.messages as f64 / run.secs;
    let ratio = rate(&ordered) / rate(&unordered);
    report.ratio("ordered_vs_unordered", ratio);
    report.detail(
        "ordering",
        json!({
            "keys": KEYS,
            "handlers": HANDLERS,
            "messages_per_run": n,
            "ordered_messages_per_sec": round(rate(&ordered), 2),
            "unordered_messages_per_sec": round(rate(&unordered), 2),
            "ordered_waits_per_message": round(ordered.waited as f64 / ordered.messages as f64, 3),
        }),
    );
    let mut table = Table::new(
        format!("Per-key ordering ({n} messages over {KEYS} keys per run, 1 worker x {HANDLERS})"),
        &["worker", "msg/s", "waits/msg"],
    );
    table.row(vec![
        "ordered".into(),
        format!("{:.1}", rate(&ordered)),
        format!("{:.3}", ordered.waited as f64 / ordered.messages as f64),
    ]);
    table.row(vec![
        "unordered".into(),
        format!("{:.1}", rate(&unordered)),
        String::new(),
    ]);
    table.row(vec![
        "ordered_vs_unordered (target >= 0.8)".into(),
        format!("{ratio:.2}"),
        String::new(),
    ]);
    report.table(table);
    Ok(())
}

/// Sends `n` messages over [`KEYS`] ordering keys (round-robin, 100 per transaction), then
/// times one worker until every one is acked.
async fn ordered_run(
    bench: &Bench,
    db: &Database,
    round: i64,
    n: i64,
    timeout: Duration,
) -> Result<Run, BoxError> {
    let base = round * 1_000;
    let turns: Vec<BenchTurn> = (0..n)
        .map(|i| BenchTurn {
            key: base + i % KEYS,
            seq: 0,
            body: "x".repeat(64),
        })
        .collect();
    let producer = Producer::new(db.client.clone());
    for chunk in turns.chunks(100) {
        producer.send_many(chunk).await?;
    }
    let client = bench.new_client(db).await?;
    let worker = Worker::<BenchTurn>::builder(client)
        .with_concurrency(HANDLERS)
        .with_transaction_settings(sdk_settings())
        .transactional(|tx, turn, _ctx| async move {
            tx.execute_update(
                Statement::builder("INSERT INTO BenchTurnEffects (Key, Seq) VALUES (@key, @seq)")
                    .add_param("key", turn.key)
                    .add_param("seq", turn.seq)
                    .build(),
            )
            .await?;
            Ok(())
        });
    let stats = timed(worker, n, timeout).await?;
    let effects = count(
        &db.client,
        Statement::builder("SELECT COUNT(*) FROM BenchTurnEffects WHERE Key >= @lo AND Key < @hi")
            .add_param("lo", base)
            .add_param("hi", base + KEYS)
            .build(),
    )
    .await?;
    if effects != n {
        return Err(format!("ordered round {round}: {effects} effects, expected {n}").into());
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
    let worker = Worker::<BenchJob>::builder(client)
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
        });
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
