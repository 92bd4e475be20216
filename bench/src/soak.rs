//! Soak: the SDK `Worker` over a long run (issue 10's acceptance: a 30-minute run keeps at
//! least 80 % of its first-minute throughput).
//!
//! A producer keeps about `backlog` messages queued with the SDK's own sends
//! (`Transaction::send_many` in a read-write transaction, 20 at a time) while `workers` SDK workers of
//! `handlers` handlers each consume them; each handler inserts an effect row keyed by the
//! message id in the transaction that acks the message. Every interval prints the acks, their
//! rate against the first interval's, the rows the receiver skipped because their lease had
//! expired on receipt, the retries, and the CPU used by the official emulator, by the queue
//! front (with the counting proxy, the `--serve-emulator` child) and by this process (the SDK
//! workers and the producer), each also per ack. At the end it audits the database: one effect
//! per acked message, no acked message left in the queue, nothing lost.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::builder::RangedU64ValueParser;
use clap::value_parser;
use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::statement::Statement;
use serde::Serialize;
use serde_json::json;
use spanner_queues::worker::WorkerStats;
use spanner_queues::{Error, Worker};
use tokio_util::sync::CancellationToken;

use crate::BoxError;
use crate::consume::sdk_settings;
use crate::cpu;
use crate::db::{Bench, BenchJob, Database};
use crate::emulator::{RpcCounts, ServingPids, diff};
use crate::report::{Report, Table, round};

/// Messages per send transaction, unless `--send-batch` says otherwise.
const SEND_BATCH: u64 = 20;

/// The soak's knobs, options of the benchmark's command line.
#[derive(Debug, Clone, Copy, clap::Args)]
#[command(next_help_heading = "Soak options (--only soak)")]
pub(crate) struct SoakOptions {
    /// Length of the run, in minutes.
    // At most a week: keeps minutes * 60 far from overflowing.
    #[arg(long, value_name = "N", default_value_t = 10,
        value_parser = value_parser!(u64).range(1..=7 * 24 * 60))]
    pub(crate) minutes: u64,
    /// Seconds per printed interval.
    #[arg(long, value_name = "S", default_value_t = 60,
        value_parser = value_parser!(u64).range(1..=24 * 3600))]
    pub(crate) interval: u64,
    /// Handlers per worker.
    #[arg(long, value_name = "N", default_value_t = 4,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000))]
    pub(crate) handlers: usize,
    /// SDK workers in this process, each with its own client.
    #[arg(long, value_name = "N", default_value_t = 1,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=100))]
    pub(crate) workers: usize,
    /// Messages kept queued (sent, not yet acked).
    #[arg(long, value_name = "N", default_value_t = 200,
        value_parser = value_parser!(u64).range(1..=1_000_000))]
    pub(crate) backlog: u64,
    /// How the handler writes its effect row.
    #[arg(long, value_enum, default_value_t = Effect::Dml)]
    pub(crate) effect: Effect,
    /// Messages per send transaction: one is a single-row `INSERT`, more are sent by Batch DML,
    /// one statement per message.
    #[arg(long, value_name = "N", default_value_t = SEND_BATCH,
        value_parser = value_parser!(u64).range(1..=1_000))]
    pub(crate) send_batch: u64,
}

/// How the handler writes its effect row (`--effect dml|mutation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Effect {
    /// `INSERT INTO BenchEffects (Id) VALUES (@id)`, a DML statement (as the README and the
    /// demo do).
    Dml,
    /// An `Insert` mutation buffered in the transaction (applied at commit).
    Mutation,
}

impl SoakOptions {
    /// Checks the knobs together: the run holds at least one interval.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.interval > self.minutes * 60 {
            return Err(format!(
                "--interval {} s is longer than the run (--minutes {} = {} s)",
                self.interval,
                self.minutes,
                self.minutes * 60
            ));
        }
        Ok(())
    }

    pub(crate) fn intervals(&self) -> u64 {
        self.minutes * 60 / self.interval
    }
}

/// Counters shared by the producer and the handlers.
#[derive(Debug, Default)]
struct Counters {
    /// Messages whose send committed.
    sent: AtomicU64,
    /// Messages of sends whose commit outcome is unknown (each may be queued or not).
    sent_unknown: AtomicU64,
    /// Send transactions that failed.
    send_errors: AtomicU64,
    /// Handler runs whose effect insert found the message's effect already there: a message
    /// delivered again after its ack committed.
    duplicates: AtomicU64,
    /// Handler runs that failed otherwise.
    handler_errors: AtomicU64,
    /// Handler runs (the transaction runner runs the handler again when Spanner aborts it).
    handler_runs: AtomicU64,
    /// Send transaction bodies run (likewise).
    send_runs: AtomicU64,
}

/// The SDK workers, for their counters.
type Workers = Arc<Vec<Arc<Worker<BenchJob>>>>;

fn total(workers: &[Arc<Worker<BenchJob>>], field: impl Fn(&WorkerStats) -> u64) -> u64 {
    workers.iter().map(|w| field(&w.stats())).sum()
}

/// The serving processes, the official emulator's split by name.
#[derive(Debug, Clone)]
struct Processes {
    /// `emulator_main`: the official emulator's database engine.
    engine: Vec<u32>,
    /// The official emulator's other processes (`gateway_main`, its gRPC gateway).
    gateway: Vec<u32>,
    /// The queue front and the counting proxy (the `--serve-emulator` child).
    front: u32,
}

impl Processes {
    fn new(pids: &ServingPids) -> Self {
        let (engine, gateway) = pids
            .official
            .iter()
            .partition(|pid| cpu::process_name(**pid).as_deref() == Some("emulator_main"));
        Self {
            engine,
            gateway,
            front: pids.front,
        }
    }
}

/// Counters, RPC counts and CPU times at one moment.
#[derive(Debug, Clone)]
struct Snapshot {
    at: Instant,
    /// Sent (or of unknown outcome) and not acked.
    queued: u64,
    acked: u64,
    received: u64,
    expired: u64,
    retried: u64,
    handler_runs: u64,
    send_runs: u64,
    /// RPCs so far, as counted by the proxy, and the microseconds they took.
    rpcs: RpcCounts,
    rpc_micros: RpcCounts,
    engine_cpu: f64,
    gateway_cpu: f64,
    front_cpu: f64,
    client_cpu: f64,
    /// The machine's (busy, total) CPU seconds, summed over cores.
    machine: Option<(f64, f64)>,
}

impl Snapshot {
    async fn take(
        bench: &Bench,
        workers: &[Arc<Worker<BenchJob>>],
        counters: &Counters,
        pids: &Processes,
    ) -> Result<Self, BoxError> {
        let acked = total(workers, |s| s.acked);
        let sent =
            counters.sent.load(Ordering::Relaxed) + counters.sent_unknown.load(Ordering::Relaxed);
        let rpcs = bench.rpcs().await?;
        let rpc_micros = bench.emulator.rpc_micros().await?;
        Ok(Self {
            at: Instant::now(),
            queued: sent.saturating_sub(acked),
            acked,
            received: total(workers, |s| s.receiver.received),
            expired: total(workers, |s| s.receiver.expired_on_receipt),
            retried: total(workers, |s| s.retried),
            handler_runs: counters.handler_runs.load(Ordering::Relaxed),
            send_runs: counters.send_runs.load(Ordering::Relaxed),
            rpcs,
            rpc_micros,
            engine_cpu: cpu::pids_cpu_seconds(&pids.engine),
            gateway_cpu: cpu::pids_cpu_seconds(&pids.gateway),
            front_cpu: cpu::pids_cpu_seconds(&[pids.front]),
            client_cpu: cpu::process_cpu().as_secs_f64(),
            machine: cpu::machine_cpu_seconds(),
        })
    }
}

/// One printed interval.
#[derive(Debug, Clone, Serialize)]
struct Interval {
    /// End of the interval, in minutes since the workers started.
    end_min: f64,
    acks: u64,
    acks_per_s: f64,
    vs_first: f64,
    /// Messages sent and not acked at the interval's end.
    queued: u64,
    /// Deliveries handed to handlers in the interval.
    received: u64,
    /// Rows skipped because their lease had expired on receipt, in the interval.
    expired_on_receipt: u64,
    retried: u64,
    /// RPCs per ack in the interval (every client: workers and producer).
    rpcs_per_ack: f64,
    /// `Commit` RPCs per ack (aborted commits included; the producer's included).
    commits_per_ack: f64,
    /// Handler runs per ack (above 1 when Spanner aborts handler transactions).
    handler_runs_per_ack: f64,
    /// Send transaction bodies run per send committed (above 1 when sends are aborted).
    send_runs: u64,
    /// Mean milliseconds of the unary RPCs (every kind but the streamed `ExecuteStreamingSql`
    /// calls), at the proxy.
    unary_rpc_ms: f64,
    /// RPCs in the interval by kind.
    rpcs: RpcCounts,
    /// Mean milliseconds per RPC in the interval by kind, at the proxy, until the response
    /// headers (a streamed call's first answer; `RECEIVE` waits for rows).
    rpc_ms: BTreeMap<String, f64>,
    /// CPU used in the interval, as a percentage of one core: `emulator_main`, the official
    /// emulator's gateway, the front (with the proxy), this process.
    engine_cpu_pct: f64,
    gateway_cpu_pct: f64,
    front_cpu_pct: f64,
    client_cpu_pct: f64,
    /// CPU milliseconds per ack in the interval (the emulator's two processes together).
    emulator_cpu_ms_per_ack: f64,
    front_cpu_ms_per_ack: f64,
    client_cpu_ms_per_ack: f64,
    /// The whole machine's busy CPU, as a percentage of all its cores.
    machine_busy_pct: Option<f64>,
}

impl Interval {
    fn between(a: &Snapshot, b: &Snapshot, started: Instant, first_rate: Option<f64>) -> Self {
        let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
        let acks = b.acked - a.acked;
        let per = |n: u64| n as f64 / acks.max(1) as f64;
        let rpcs = diff(&b.rpcs, &a.rpcs);
        let micros = diff(&b.rpc_micros, &a.rpc_micros);
        let rpc_ms: BTreeMap<String, f64> = rpcs
            .iter()
            .map(|(kind, n)| {
                let us = micros.get(kind).copied().unwrap_or(0);
                (kind.clone(), round(us as f64 / 1e3 / *n as f64, 3))
            })
            .collect();
        let unary = |m: &RpcCounts| -> u64 {
            m.iter()
                .filter(|(kind, _)| !kind.starts_with("ExecuteStreamingSql"))
                .map(|(_, v)| v)
                .sum()
        };
        let unary_rpc_ms = unary(&micros) as f64 / 1e3 / unary(&rpcs).max(1) as f64;
        let rate = acks as f64 / secs;
        let pct = |from: f64, to: f64| (to - from) / secs * 100.0;
        let per_ack = |from: f64, to: f64| (to - from) * 1e3 / acks.max(1) as f64;
        let machine = match (a.machine, b.machine) {
            (Some((busy0, all0)), Some((busy1, all1))) if all1 > all0 => {
                Some((busy1 - busy0) / (all1 - all0) * 100.0)
            }
            _ => None,
        };
        Self {
            end_min: b.at.duration_since(started).as_secs_f64() / 60.0,
            acks,
            acks_per_s: rate,
            vs_first: rate / first_rate.unwrap_or(rate).max(1e-9),
            queued: b.queued,
            received: b.received - a.received,
            expired_on_receipt: b.expired - a.expired,
            retried: b.retried - a.retried,
            rpcs_per_ack: per(rpcs.values().sum()),
            commits_per_ack: per(rpcs.get("Commit").copied().unwrap_or(0)),
            handler_runs_per_ack: per(b.handler_runs - a.handler_runs),
            send_runs: b.send_runs - a.send_runs,
            unary_rpc_ms,
            rpcs,
            rpc_ms,
            engine_cpu_pct: pct(a.engine_cpu, b.engine_cpu),
            gateway_cpu_pct: pct(a.gateway_cpu, b.gateway_cpu),
            front_cpu_pct: pct(a.front_cpu, b.front_cpu),
            client_cpu_pct: pct(a.client_cpu, b.client_cpu),
            emulator_cpu_ms_per_ack: per_ack(
                a.engine_cpu + a.gateway_cpu,
                b.engine_cpu + b.gateway_cpu,
            ),
            front_cpu_ms_per_ack: per_ack(a.front_cpu, b.front_cpu),
            client_cpu_ms_per_ack: per_ack(a.client_cpu, b.client_cpu),
            machine_busy_pct: machine,
        }
    }

    fn cells(&self) -> Vec<String> {
        vec![
            format!("{:.1}", self.end_min),
            self.acks.to_string(),
            format!("{:.1}", self.acks_per_s),
            format!("{:.2}", self.vs_first),
            self.queued.to_string(),
            self.expired_on_receipt.to_string(),
            self.retried.to_string(),
            format!("{:.2}", self.rpcs_per_ack),
            format!("{:.2}", self.commits_per_ack),
            format!("{:.2}", self.handler_runs_per_ack),
            format!("{:.1}", self.unary_rpc_ms),
            format!("{:.0}", self.engine_cpu_pct),
            format!("{:.0}", self.gateway_cpu_pct),
            format!("{:.0}", self.front_cpu_pct),
            format!("{:.0}", self.client_cpu_pct),
            format!("{:.1}", self.emulator_cpu_ms_per_ack),
            format!("{:.1}", self.front_cpu_ms_per_ack),
            format!("{:.1}", self.client_cpu_ms_per_ack),
            self.machine_busy_pct
                .map_or_else(|| "?".to_owned(), |p| format!("{p:.0}")),
        ]
    }
}

const HEADER: [&str; 19] = [
    "minute",
    "acks",
    "acks/s",
    "vs first",
    "queued",
    "expired",
    "retries",
    "RPCs/ack",
    "commits/ack",
    "runs/ack",
    "unary RPC ms",
    "emulator_main CPU %",
    "gateway CPU %",
    "front CPU %",
    "client CPU %",
    "emulator ms/ack",
    "front ms/ack",
    "client ms/ack",
    "machine busy %",
];

/// Runs the soak on a fresh database and reports it.
pub(crate) async fn section(
    bench: &Bench,
    options: SoakOptions,
    report: &mut Report,
) -> Result<(), BoxError> {
    options.validate()?;
    let db = bench.database().await?;
    let pids = Processes::new(&bench.emulator.pids().await?);
    let counters = Arc::new(Counters::default());
    let mut workers = Vec::new();
    for _ in 0..options.workers {
        let client = bench.new_client(&db).await?;
        workers.push(Arc::new(worker(
            &client,
            options.handlers,
            options.effect,
            Arc::clone(&counters),
        )?));
    }
    let workers: Workers = Arc::new(workers);
    println!(
        "  soak: {} worker(s) x {} handlers, {} min in intervals of {} s, backlog {} \
         (tx.send_many of {} per transaction), effect by {:?}{}",
        options.workers,
        options.handlers,
        options.minutes,
        options.interval,
        options.backlog,
        options.send_batch,
        options.effect,
        if cfg!(debug_assertions) {
            "; DEBUG BUILD: client CPU is not representative"
        } else {
            ""
        }
    );
    println!("  {}", HEADER.join(" | "));

    let stop = CancellationToken::new();
    let producer = tokio::spawn(produce(
        bench.new_client(&db).await?,
        Arc::clone(&workers),
        Arc::clone(&counters),
        options.backlog,
        options.send_batch,
        stop.clone(),
    ));
    let mut tasks = Vec::new();
    for worker in workers.iter() {
        let worker = Arc::clone(worker);
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            worker.run(stop.cancelled_owned()).await
        }));
    }

    let started = Instant::now();
    let mut previous = Snapshot::take(bench, &workers, &counters, &pids).await?;
    let mut intervals: Vec<Interval> = Vec::new();
    for i in 1..=options.intervals() {
        let end = started + Duration::from_secs(i * options.interval);
        let mut worker_ended = None;
        tokio::select! {
            () = tokio::time::sleep_until(end.into()) => {}
            // A worker that stops early ends the soak: its error is the finding.
            (result, _, _) = futures::future::select_all(tasks.iter_mut()) => {
                worker_ended = Some(result);
            }
        }
        if let Some(result) = worker_ended {
            stop.cancel();
            let _ = producer.await;
            let error = match result {
                Ok(Ok(())) => "a worker stopped early without an error".to_owned(),
                Ok(Err(error)) => format!("a worker stopped early: {error}"),
                Err(error) => format!("a worker task failed: {error}"),
            };
            return Err(error.into());
        }
        let now = Snapshot::take(bench, &workers, &counters, &pids).await?;
        let interval = Interval::between(
            &previous,
            &now,
            started,
            intervals.first().map(|f| f.acks_per_s),
        );
        println!("  {}", interval.cells().join(" | "));
        intervals.push(interval);
        previous = now;
    }

    // Stop sending first, then the workers (a graceful stop releases what they hold).
    stop.cancel();
    producer.await?;
    for task in tasks {
        if let Err(error) = task.await? {
            report.problems.push(format!("soak: worker: {error}"));
        }
    }
    let audit = audit(&db, &workers, &counters).await?;
    bench.drop_database(db).await?;
    record(report, options, &intervals, &workers, &counters, &audit);
    Ok(())
}

/// The worker: a transactional handler inserting the effect row keyed by the message id; the
/// worker acks in the same transaction.
fn worker(
    db: &spanner_queues::Database,
    handlers: usize,
    effect: Effect,
    counters: Arc<Counters>,
) -> Result<Worker<BenchJob>, BoxError> {
    Ok(Worker::<BenchJob>::builder(db)
        .with_concurrency(handlers)
        .with_transaction_settings(sdk_settings())
        .transactional(move |tx, job, _ctx| {
            let counters = Arc::clone(&counters);
            async move {
                counters.handler_runs.fetch_add(1, Ordering::Relaxed);
                if effect == Effect::Mutation {
                    // A taken id fails the commit (ALREADY_EXISTS), not this call.
                    tx.buffer([Mutation::new_insert_builder("BenchEffects")
                        .set("Id")
                        .to(job.id)
                        .build()])?;
                    return Ok(());
                }
                let inserted = tx
                    .execute_update(
                        Statement::builder("INSERT INTO BenchEffects (Id) VALUES (@id)")
                            .add_param("id", job.id)
                            .build(),
                    )
                    .await;
                match inserted {
                    Ok(_) => Ok(()),
                    Err(error) => {
                        if error
                            .status()
                            .is_some_and(|s| s.code == Code::AlreadyExists)
                        {
                            counters.duplicates.fetch_add(1, Ordering::Relaxed);
                        } else if error.status().is_none_or(|s| s.code != Code::Aborted) {
                            counters.handler_errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error.into())
                    }
                }
            }
        })
        .build()?)
}

/// Keeps about `backlog` messages queued (sent and not yet acked), `batch` per send transaction,
/// with the SDK's `Transaction::send_many` in a read-write transaction, until `stop`.
async fn produce(
    db: spanner_queues::Database,
    workers: Workers,
    counters: Arc<Counters>,
    backlog: u64,
    batch: u64,
    stop: CancellationToken,
) {
    let batch = batch.min(backlog);
    let mut next: i64 = 0;
    while !stop.is_cancelled() {
        let sent =
            counters.sent.load(Ordering::Relaxed) + counters.sent_unknown.load(Ordering::Relaxed);
        let queued = sent.saturating_sub(total(&workers, |s| s.acked));
        if queued + batch > backlog {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(20)) => continue,
            }
        }
        let jobs: Vec<BenchJob> = (next..next + batch as i64).map(BenchJob::new).collect();
        let (jobs, counters_ref) = (&jobs, &*counters);
        let result = db
            .transaction()
            .with_transaction_settings(sdk_settings())
            .run(move |tx| async move {
                counters_ref.send_runs.fetch_add(1, Ordering::Relaxed);
                tx.send_many(jobs).await
            })
            .await;
        match result {
            Ok(_) => {
                counters.sent.fetch_add(batch, Ordering::Relaxed);
                next += batch as i64;
            }
            Err(error) => {
                let n = counters.send_errors.fetch_add(1, Ordering::Relaxed);
                if n < 3 {
                    eprintln!("  soak: send: {error}");
                }
                if matches!(error, Error::OutcomeUnknown(_)) {
                    // The batch may be queued: never send its ids again.
                    counters.sent_unknown.fetch_add(batch, Ordering::Relaxed);
                    next += batch as i64;
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    }
}

/// The final state of the database against the counters.
#[derive(Debug, Clone, Serialize)]
struct Audit {
    sent: u64,
    sent_outcome_unknown: u64,
    acked: u64,
    effects: i64,
    /// Messages still queued (sent, not acked when the workers stopped).
    left_in_queue: i64,
    /// Acked messages (with an effect) still in the queue.
    acked_left_in_queue: i64,
    dead_lettered: u64,
    /// Sent messages with neither an effect, nor a queue row, nor a dead letter.
    lost: i64,
    duplicates: u64,
    handler_errors: u64,
    send_errors: u64,
    already_acked: u64,
    lease_lost: u64,
    outcome_unknown: u64,
    received: u64,
    expired_on_receipt: u64,
}

impl Audit {
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.effects != self.acked as i64 {
            problems.push(format!(
                "{} effects for {} acked messages",
                self.effects, self.acked
            ));
        }
        if self.acked_left_in_queue != 0 {
            problems.push(format!(
                "{} messages with an effect are still in the queue",
                self.acked_left_in_queue
            ));
        }
        if self.lost > 0 {
            problems.push(format!("{} sent messages lost", self.lost));
        }
        if self.duplicates != 0 {
            problems.push(format!(
                "{} deliveries of a message whose effect was committed",
                self.duplicates
            ));
        }
        problems
    }
}

async fn audit(db: &Database, workers: &Workers, counters: &Counters) -> Result<Audit, BoxError> {
    // Every id ever sent is below i64::MAX; the bounds are the count queries' parameters.
    let all = 0..i64::MAX;
    let effects = db
        .count(
            "SELECT COUNT(*) FROM BenchEffects WHERE Id >= @lo AND Id < @hi",
            &all,
        )
        .await?;
    let left_in_queue = db
        .count(
            "SELECT COUNT(*) FROM BenchJobs WHERE Id >= @lo AND Id < @hi",
            &all,
        )
        .await?;
    let acked_left_in_queue = db
        .count(
            "SELECT COUNT(*) FROM BenchJobs j JOIN BenchEffects e ON j.Id = e.Id \
             WHERE j.Id >= @lo AND j.Id < @hi",
            &all,
        )
        .await?;
    let sent = counters.sent.load(Ordering::Relaxed);
    let sent_outcome_unknown = counters.sent_unknown.load(Ordering::Relaxed);
    let dead_lettered = total(workers, |s| s.dead_lettered);
    let accounted = effects + left_in_queue + dead_lettered as i64;
    Ok(Audit {
        sent,
        sent_outcome_unknown,
        acked: total(workers, |s| s.acked),
        effects,
        left_in_queue,
        acked_left_in_queue,
        dead_lettered,
        // Messages whose send outcome is unknown may be missing without being lost.
        lost: (sent as i64 - accounted).max(0),
        duplicates: counters.duplicates.load(Ordering::Relaxed),
        handler_errors: counters.handler_errors.load(Ordering::Relaxed),
        send_errors: counters.send_errors.load(Ordering::Relaxed),
        already_acked: total(workers, |s| s.already_acked),
        lease_lost: total(workers, |s| s.lease_lost),
        outcome_unknown: total(workers, |s| s.outcome_unknown),
        received: total(workers, |s| s.receiver.received),
        expired_on_receipt: total(workers, |s| s.receiver.expired_on_receipt),
    })
}

fn record(
    report: &mut Report,
    options: SoakOptions,
    intervals: &[Interval],
    workers: &Workers,
    counters: &Counters,
    audit: &Audit,
) {
    let rates: Vec<f64> = intervals.iter().map(|i| round(i.acks_per_s, 2)).collect();
    let first = intervals.first().map_or(f64::NAN, |i| i.acks_per_s);
    let last = intervals.last().map_or(f64::NAN, |i| i.acks_per_s);
    let min = intervals
        .iter()
        .map(|i| i.acks_per_s)
        .fold(f64::INFINITY, f64::min);
    report.value("soak_acks_per_s", json!(rates));
    report.ratio("soak_last_vs_first", last / first);
    report.ratio("soak_min_vs_first", min / first);
    report.value("soak_expired_on_receipt", json!(audit.expired_on_receipt));

    let mut table = Table::new(
        format!(
            "Soak: SDK worker {}x{}, {} min, backlog {} (issue 10: the last interval keeps >= 0.8 of the first)",
            options.workers, options.handlers, options.minutes, options.backlog
        ),
        &HEADER,
    );
    for interval in intervals {
        table.row(interval.cells());
    }
    report.table(table);
    if let (Some(first), Some(last)) = (intervals.first(), intervals.last()) {
        let mut latency = Table::new(
            "Soak: mean RPC time by kind, first and last interval (ms, at the proxy, until the \
             response headers; RECEIVE waits for rows)",
            &[
                "RPC kind",
                "first ms",
                "last ms",
                "last / first",
                "first per ack",
                "last per ack",
            ],
        );
        let kinds: BTreeSet<&String> = first.rpc_ms.keys().chain(last.rpc_ms.keys()).collect();
        for kind in kinds {
            let ms = |i: &Interval| i.rpc_ms.get(kind).copied().unwrap_or(f64::NAN);
            let per_ack =
                |i: &Interval| i.rpcs.get(kind).copied().unwrap_or(0) as f64 / i.acks.max(1) as f64;
            latency.row(vec![
                kind.clone(),
                format!("{:.2}", ms(first)),
                format!("{:.2}", ms(last)),
                format!("{:.2}", ms(last) / ms(first)),
                format!("{:.2}", per_ack(first)),
                format!("{:.2}", per_ack(last)),
            ]);
        }
        report.table(latency);
    }
    let mut audit_table = Table::new(
        "Soak audit (after the producer and the workers stopped)",
        &["check", "value"],
    );
    for (check, value) in [
        ("sent (committed)", audit.sent.to_string()),
        ("acked", audit.acked.to_string()),
        ("effects (must equal acked)", audit.effects.to_string()),
        (
            "acked still queued (must be 0)",
            audit.acked_left_in_queue.to_string(),
        ),
        (
            "duplicate deliveries of acked messages (must be 0)",
            audit.duplicates.to_string(),
        ),
        ("lost (must be 0)", audit.lost.to_string()),
        ("left in queue", audit.left_in_queue.to_string()),
        ("dead-lettered", audit.dead_lettered.to_string()),
        (
            "expired on receipt / received",
            format!("{} / {}", audit.expired_on_receipt, audit.received),
        ),
        ("handler errors", audit.handler_errors.to_string()),
        ("send errors", audit.send_errors.to_string()),
    ] {
        audit_table.row(vec![check.to_owned(), value]);
    }
    report.table(audit_table);
    for problem in audit.problems() {
        report.problems.push(format!("soak: {problem}"));
    }
    let stats: Vec<String> = workers.iter().map(|w| format!("{:?}", w.stats())).collect();
    report.detail(
        "soak",
        json!({
            "minutes": options.minutes,
            "interval_secs": options.interval,
            "workers": options.workers,
            "handlers": options.handlers,
            "backlog": options.backlog,
            "effect": options.effect,
            "send_batch": options.send_batch,
            "intervals": intervals,
            "audit": audit,
            "send_errors": counters.send_errors.load(Ordering::Relaxed),
            "worker_stats": stats,
            "release_build": !cfg!(debug_assertions),
        }),
    );
}
