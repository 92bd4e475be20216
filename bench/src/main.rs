//! Side-by-side benchmarks of spanner-queues on the embedded emulator.
//!
//! ```text
//! cargo run --release -p spanner-queues-bench -- [--quick|--long] [--out DIR]
//! cargo run --release -p spanner-queues-bench -- --only soak --minutes 30
//! cargo run --release -p spanner-queues-bench -- --gate   # the regression gate (CI)
//! ```
//!
//! Every figure is a ratio of two things measured in the same run, in interleaved rounds, so
//! that machine noise hits both sides alike. The run prints tables and writes
//! `target/bench/summary.json`; see `docs/benchmark.md` for what each measurement means.

mod consume;
mod cpu;
mod db;
mod emulator;
mod latency;
mod memory;
mod ordered;
mod renew;
mod report;
mod send;
mod soak;
mod targets;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::error::ErrorKind;
use clap::{ArgGroup, CommandFactory, Parser, ValueEnum, value_parser};
use serde_json::json;

use crate::consume::{ConsumeRun, Side};
use crate::db::Bench;
use crate::report::{Report, Table, round};
use crate::soak::SoakOptions;
use spanner_queues::Dialect;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How much work each measurement does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    pub(crate) name: &'static str,
    /// Messages per consume run.
    pub(crate) consume_messages: i64,
    /// Interleaved rounds per consume comparison.
    pub(crate) consume_rounds: usize,
    /// Transactions per side and round: one message each, and 100 messages each.
    pub(crate) send_single: usize,
    pub(crate) send_batch: usize,
    pub(crate) send_rounds: usize,
    /// Deliveries held at once, and renewal rounds counted at each level.
    pub(crate) renew_levels: &'static [usize],
    pub(crate) renew_rounds: u64,
    /// Messages of the small and the large memory run.
    pub(crate) rss_small: i64,
    pub(crate) rss_large: i64,
    /// Messages per side and round, rounds, and the interval between sends.
    pub(crate) latency_messages: i64,
    pub(crate) latency_rounds: usize,
    pub(crate) latency_interval: Duration,
    /// The consume comparisons made (`1x1`, `1x4`, `4x4`, `polling`, `batch`).
    pub(crate) consume_configs: &'static [&'static str],
    /// Messages per run of the batch comparison, and the batch size.
    pub(crate) batch_messages: i64,
    pub(crate) batch_size: usize,
}

/// Every consume comparison.
const ALL_CONSUME: &[&str] = &["1x1", "1x4", "4x4", "polling", "batch"];
/// The consume comparisons of the gate: those whose ratios it checks.
const GATE_CONSUME: &[&str] = &["1x1", "1x4", "polling", "batch"];
/// The ratios a gate run measures (the gate may check any of them, see `bench/targets.toml`).
pub(crate) const GATE_RATIOS: &[&str] = &[
    "worker_vs_handwritten_1x1",
    "worker_vs_handwritten_1x4",
    "worker_1x4_vs_1x1",
    "worker_1x1_vs_sequential_txn",
    "worker_vs_polling_4",
    "worker_vs_polling_4_commits",
    "worker_batch_vs_sequential_txn",
    "worker_batch_vs_handwritten_batch",
    "worker_batch_commits_x_n",
];

impl Scale {
    fn quick() -> Self {
        Self {
            name: "quick",
            consume_messages: 40,
            consume_rounds: 1,
            send_single: 20,
            send_batch: 2,
            send_rounds: 1,
            renew_levels: &[1, 20],
            renew_rounds: 2,
            rss_small: 50,
            rss_large: 300,
            latency_messages: 10,
            latency_rounds: 1,
            latency_interval: Duration::from_millis(50),
            consume_configs: ALL_CONSUME,
            batch_messages: 1_000,
            batch_size: 100,
        }
    }

    /// The regression gate: the gated consume ratios only, small runs, more rounds (ratios of
    /// short runs vary more; rounds interleave the sides so that noise hits both).
    fn gate() -> Self {
        Self {
            name: "gate",
            consume_messages: 100,
            consume_rounds: 3,
            consume_configs: GATE_CONSUME,
            ..Self::quick()
        }
    }

    fn default_scale() -> Self {
        Self {
            name: "default",
            consume_messages: 200,
            consume_rounds: 2,
            send_single: 150,
            send_batch: 3,
            send_rounds: 3,
            renew_levels: &[1, 10, 100, 500],
            renew_rounds: 4,
            // The sizes the memory target is stated for (about 4 minutes of a default run).
            rss_small: 5_000,
            rss_large: 50_000,
            latency_messages: 50,
            latency_rounds: 2,
            latency_interval: Duration::from_millis(100),
            consume_configs: ALL_CONSUME,
            batch_messages: 3_000,
            batch_size: 100,
        }
    }

    fn long() -> Self {
        Self {
            name: "long",
            consume_messages: 1_000,
            consume_rounds: 4,
            send_single: 300,
            send_batch: 30,
            send_rounds: 5,
            renew_levels: &[1, 10, 100, 500],
            renew_rounds: 10,
            rss_small: 5_000,
            rss_large: 50_000,
            latency_messages: 200,
            latency_rounds: 3,
            latency_interval: Duration::from_millis(100),
            consume_configs: ALL_CONSUME,
            batch_messages: 5_000,
            batch_size: 100,
        }
    }
}

/// A section of the benchmark (`--only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Section {
    /// Worker and receiver throughput against hand-written consumers and polling.
    Consume,
    /// Sends: the SDK's against hand-written inserts.
    Send,
    /// Lease renewals.
    Renew,
    /// A worker's peak memory.
    Memory,
    /// Delivery latency.
    Latency,
    /// Ordered queues: one worker across keys, ordered against unordered.
    Ordering,
    /// Ordered queues with deep backlogs: several workers on keys with many messages queued
    /// first, against unordered workers, in both dialects.
    OrderingDeep,
    /// Batch handlers only: the `batch` comparison of `consume` (a batch worker against a
    /// hand-written batch consumer and sequential transactions), in both dialects.
    Batch,
    /// SDK workers over a long run while a producer keeps a backlog queued: acks/s per
    /// interval against the first, expired-on-receipt rows, retries and CPU (only when named:
    /// `--only soak`).
    Soak,
}

impl Section {
    /// The sections of a default run: all but `soak`, which is long.
    const DEFAULT: [Section; 7] = [
        Section::Consume,
        Section::Send,
        Section::Renew,
        Section::Memory,
        Section::Latency,
        Section::Ordering,
        Section::OrderingDeep,
    ];
}

impl std::fmt::Display for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = self.to_possible_value().expect("no section is skipped");
        f.write_str(value.get_name())
    }
}

/// The most consume rounds `--rounds` accepts.
const MAX_ROUNDS: u64 = 20;

/// Runs every measurement on the embedded emulator, prints tables of ratios and writes
/// DIR/summary.json.
#[derive(Debug, Parser)]
// A negative number is a refused value (`--rounds -1`), not an unknown option.
#[command(name = "spanner-queues-bench", allow_negative_numbers = true)]
#[command(group(ArgGroup::new("mode").args(["quick", "long", "gate"])))]
struct Cli {
    /// Small runs of every section: a smoke run of about a minute.
    #[arg(long)]
    quick: bool,
    /// The issue's full sizes (50,000 messages).
    #[arg(long)]
    long: bool,
    /// The regression gate: measures the ratios bench/targets.toml marks `gate` (consume only, a
    /// few minutes at most) and exits with status 3 when one misses its target by more than the
    /// file's noise margin.
    #[arg(long, conflicts_with = "only")]
    gate: bool,
    /// Where summary.json and the emulator's log go [default: target/bench].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The sections to run, comma-separated [default: all but soak].
    #[arg(long, value_name = "SECTION,...", value_delimiter = ',')]
    only: Option<Vec<Section>>,
    /// Interleaved rounds of the consume comparisons (the mode's own number otherwise): more
    /// rounds average out more noise and take longer.
    #[arg(long, value_name = "N", value_parser = value_parser!(u64).range(1..=MAX_ROUNDS))]
    rounds: Option<u64>,
    #[command(flatten)]
    soak: SoakOptions,
    /// The child that serves the emulator, the queue front and the counting proxy (internal).
    #[arg(long, hide = true, exclusive = true)]
    serve_emulator: bool,
    /// The memory section's worker child (internal).
    #[arg(long, hide = true, exclusive = true, num_args = 4,
        value_names = ["ENDPOINT", "DATABASE", "MESSAGES", "TIMEOUT_SECS"])]
    rss_worker: Option<Vec<String>>,
}

/// What the command line asks for.
#[derive(Debug)]
enum Command {
    /// A benchmark run.
    Run(Box<Args>),
    /// The `--serve-emulator` child.
    ServeEmulator,
    /// The `--rss-worker` child, with its arguments.
    RssWorker(Vec<String>),
}

#[derive(Debug)]
struct Args {
    scale: Scale,
    out: PathBuf,
    sections: Vec<Section>,
    soak: SoakOptions,
    /// The regression gate: fail when a gated ratio misses its target beyond the noise margin.
    gate: bool,
}

impl Cli {
    /// The command, after the checks that span several options (and the slow-handler variable).
    fn into_command(self) -> Result<Command, clap::Error> {
        if self.serve_emulator {
            return Ok(Command::ServeEmulator);
        }
        if let Some(args) = self.rss_worker {
            return Ok(Command::RssWorker(args));
        }
        let error = |kind, message: String| Cli::command().error(kind, message);
        self.soak
            .validate()
            .map_err(|message| error(ErrorKind::ArgumentConflict, message))?;
        consume::slow_handler().map_err(|message| error(ErrorKind::InvalidValue, message))?;
        let mut scale = match (self.quick, self.long, self.gate) {
            (true, _, _) => Scale::quick(),
            (_, true, _) => Scale::long(),
            (_, _, true) => Scale::gate(),
            _ => Scale::default_scale(),
        };
        let sections = match (self.gate, self.only) {
            (true, _) => vec![Section::Consume],
            (false, Some(only)) => only,
            (false, None) => Section::DEFAULT.to_vec(),
        };
        // A mode (--quick, --long, --gate) sets its own number of rounds; --rounds overrides it.
        if let Some(rounds) = self.rounds {
            scale.consume_rounds = usize::try_from(rounds).expect("at most MAX_ROUNDS");
        }
        Ok(Command::Run(Box::new(Args {
            scale,
            out: self.out.unwrap_or_else(report::output_dir),
            sections,
            soak: self.soak,
            gate: self.gate,
        })))
    }
}

fn main() -> Result<(), BoxError> {
    // RUST_LOG=spanner_queues=debug shows what the SDK does (on stderr).
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let command = Cli::parse()
        .into_command()
        .unwrap_or_else(|error| error.exit());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let args = match command {
        Command::ServeEmulator => return runtime.block_on(emulator::serve()),
        Command::RssWorker(args) => return runtime.block_on(memory::child(&args)),
        Command::Run(args) => *args,
    };
    let targets = targets::Targets::load()?;
    if args.gate
        && let Some(name) = targets.gated().find(|name| !GATE_RATIOS.contains(name))
    {
        return Err(format!(
            "bench/targets.toml gates {name}, which the gate run does not measure"
        )
        .into());
    }
    let gate_failed = runtime.block_on(run(args, &targets))?;
    if gate_failed {
        std::process::exit(targets::GATE_FAILED_EXIT);
    }
    Ok(())
}

/// Runs the measurements; `Ok(true)` when the gate ran and a ratio missed its target.
async fn run(args: Args, targets: &targets::Targets) -> Result<bool, BoxError> {
    let started = Instant::now();
    std::fs::create_dir_all(&args.out)?;
    let scale = args.scale;
    println!(
        "spanner-queues benchmark ({} mode): ratios of things measured side by side in one run",
        scale.name
    );
    let mut report = Report::default();

    for section in &args.sections {
        // Each section gets an emulator of its own, so that what it measures does not depend on
        // what ran before it: the official emulator's clock runs ahead of the wall clock by
        // about a microsecond per request it serves (300 ms after the memory section's 55,000
        // messages), and reads at a timestamp taken from the client's clock (the ordered
        // worker's looks) then see commits later and later. Cloud Spanner's clock does not drift.
        let bench = Bench::start(&args.out.join(format!("emulator-{section}.log"))).await?;
        let result = match section {
            Section::Consume => consume_section(&bench, scale, &mut report).await,
            Section::Batch => {
                let only_batch = Scale {
                    consume_configs: &["batch"],
                    ..scale
                };
                consume_section(&bench, only_batch, &mut report).await
            }
            Section::Send => send_section(&bench, scale, &mut report).await,
            Section::Renew => renew_section(&bench, scale, &mut report).await,
            Section::Memory => memory_section(&bench, scale, &mut report).await,
            Section::Latency => latency_section(&bench, scale, &mut report).await,
            Section::Ordering => ordered::one_worker(&bench, scale, &mut report).await,
            Section::OrderingDeep => ordered::deep(&bench, scale, &mut report).await,
            Section::Soak => soak::section(&bench, args.soak, &mut report).await,
        };
        if let Err(error) = result {
            report.problems.push(format!("{section}: {error}"));
        }
        bench.emulator.stop().await;
    }

    let checked = targets.check_all(&report.ratios);
    report.table(targets::table(
        "Targets (bench/targets.toml; a full run reports, only the gate fails)",
        &checked,
    ));
    report.value("targets", targets::json(&checked));
    let mut gate_failed = false;
    if args.gate {
        let checked = targets.check_gate(&report.ratios);
        report.table(targets::table(
            &format!(
                "Gate (fails when a ratio misses its target by more than {:.0} %)",
                targets.gate.noise * 100.0
            ),
            &checked,
        ));
        for c in checked
            .iter()
            .filter(|c| c.verdict == targets::Verdict::Missed)
        {
            eprintln!(
                "GATE FAILED: {} = {:.3}, target {} (the gate fails {}, a noise margin of {:.0} %): {}",
                c.name,
                c.value,
                c.target.describe(),
                c.target.gate_bound(targets.gate.noise),
                targets.gate.noise * 100.0,
                c.target.why
            );
        }
        let unmeasured: Vec<&str> = checked
            .iter()
            .filter(|c| c.verdict == targets::Verdict::NotMeasured)
            .map(|c| c.name.as_str())
            .collect();
        if !unmeasured.is_empty() {
            println!(
                "not measured (neither passes nor fails the gate): {}",
                unmeasured.join(", ")
            );
        }
        match targets::gate_decision(&checked) {
            targets::GateDecision::Passed => {
                println!(
                    "gate passed: every measured gated ratio within its target's noise margin"
                );
            }
            targets::GateDecision::Failed(_) => gate_failed = true,
            targets::GateDecision::NothingMeasured => report
                .problems
                .push("gate: none of the gated ratios was measured".to_owned()),
        }
    }
    let summary = report.to_json(scale.name, started.elapsed().as_secs_f64());
    let path = args.out.join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")?;
    println!(
        "\nwrote {} ({:.0} s)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    if !report.problems.is_empty() {
        for problem in &report.problems {
            eprintln!("PROBLEM: {problem}");
        }
        return Err(format!("{} behaviour problem(s); see above", report.problems.len()).into());
    }
    Ok(gate_failed)
}

/// Consume runs summed over rounds.
#[derive(Debug, Default, Clone)]
struct Totals {
    messages: u64,
    secs: f64,
    /// Start-up time (start to first commit), summed over rounds.
    first_secs: f64,
    rpcs: BTreeMap<String, u64>,
    /// Rows returned in result sets, by kind of RPC.
    rows: BTreeMap<String, u64>,
    handler_runs: u64,
    already_acked: u64,
    errors: u64,
    rounds: usize,
}

impl Totals {
    fn add(&mut self, run: &ConsumeRun) {
        self.messages += run.messages;
        self.secs += run.secs;
        self.first_secs += run.first_secs;
        for (kind, n) in &run.rpcs {
            *self.rpcs.entry(kind.clone()).or_default() += n;
        }
        for (kind, n) in &run.rows {
            *self.rows.entry(kind.clone()).or_default() += n;
        }
        self.handler_runs += run.handler_runs;
        self.already_acked += run.already_acked;
        self.errors += run.errors;
        self.rounds += 1;
    }

    fn rate(&self) -> f64 {
        self.messages as f64 / self.secs
    }

    /// The mean time from a run's start to its first commit (the consumers' start-up).
    fn first_commit_secs(&self) -> f64 {
        self.first_secs / self.rounds.max(1) as f64
    }

    /// The rate once consuming was under way: the messages after each run's first commit over
    /// the time after it (the consumers' start-up left out).
    fn rate_after_first(&self) -> f64 {
        self.messages.saturating_sub(self.rounds as u64) as f64 / (self.secs - self.first_secs)
    }

    fn per_message(&self, count: u64) -> f64 {
        count as f64 / self.messages as f64
    }

    fn rpcs_total(&self) -> u64 {
        self.rpcs.values().sum()
    }

    fn commits(&self) -> u64 {
        self.rpcs.get("Commit").copied().unwrap_or(0)
    }

    fn json(&self) -> serde_json::Value {
        let per_message: BTreeMap<&String, f64> = self
            .rpcs
            .iter()
            .map(|(kind, n)| (kind, round(self.per_message(*n), 3)))
            .collect();
        let rows_per_message: BTreeMap<&String, f64> = self
            .rows
            .iter()
            .map(|(kind, n)| (kind, round(self.per_message(*n), 3)))
            .collect();
        json!({
            "messages": self.messages,
            "secs": round(self.secs, 3),
            "messages_per_sec": round(self.rate(), 2),
            "first_commit_secs_per_round": round(self.first_commit_secs(), 3),
            "messages_per_sec_after_first_commit": round(self.rate_after_first(), 2),
            "rounds": self.rounds,
            "rpcs_per_message": round(self.per_message(self.rpcs_total()), 3),
            "commits_per_message": round(self.per_message(self.commits()), 3),
            "handler_runs_per_message": round(self.per_message(self.handler_runs), 3),
            "already_acked": self.already_acked,
            "errors": self.errors,
            "rpcs_by_kind_per_message": per_message,
            "rows_by_kind_per_message": rows_per_message,
        })
    }
}

/// Consume, on a GoogleSQL database and then on a PostgreSQL-dialect one (whose ratios are
/// named with the `pg_` prefix).
async fn consume_section(bench: &Bench, scale: Scale, report: &mut Report) -> Result<(), BoxError> {
    consume_in(bench, scale, report, Dialect::GoogleSql).await?;
    consume_in(bench, scale, report, Dialect::PostgreSql).await
}

/// Consume in one dialect: the SDK worker vs the hand-written consumer (1x1, 1x4, 4x4),
/// sequential transactions (1x1 only), and the polling outbox at 4.
async fn consume_in(
    bench: &Bench,
    scale: Scale,
    report: &mut Report,
    dialect: Dialect,
) -> Result<(), BoxError> {
    let (prefix, in_dialect) = match dialect {
        Dialect::PostgreSql => (targets::PG_PREFIX, ", PostgreSQL-dialect database"),
        _ => ("", ""),
    };
    println!("consume{in_dialect}:");
    let n = scale.consume_messages;
    let timeout = Duration::from_secs(60 + (n as u64) * 2);
    let mut totals: BTreeMap<String, Totals> = BTreeMap::new();
    let mut next_id = 0_i64;
    let mut ids = |count: i64| {
        let range = next_id..next_id + count;
        next_id += count;
        range
    };
    let batch = scale.batch_size;
    let configs: [(&str, Vec<Side>); 5] = [
        (
            "1x1",
            vec![
                Side::Worker {
                    workers: 1,
                    handlers: 1,
                },
                Side::Handwritten {
                    workers: 1,
                    handlers: 1,
                },
            ],
        ),
        (
            "1x4",
            vec![
                Side::Worker {
                    workers: 1,
                    handlers: 4,
                },
                Side::Handwritten {
                    workers: 1,
                    handlers: 4,
                },
            ],
        ),
        (
            "4x4",
            vec![
                Side::Worker {
                    workers: 4,
                    handlers: 4,
                },
                Side::Handwritten {
                    workers: 4,
                    handlers: 4,
                },
            ],
        ),
        (
            "polling",
            vec![
                Side::Worker {
                    workers: 1,
                    handlers: 4,
                },
                Side::Polling { consumers: 4 },
            ],
        ),
        (
            "batch",
            vec![
                Side::BatchWorker { batch },
                Side::HandwrittenBatch { batch },
            ],
        ),
    ];
    // Each configuration has a database of its own, kept for the whole measurement, and the
    // configurations take turns round by round (in reversed order every other round), like the
    // sides within one: the emulator slows down as it runs, so configurations measured one
    // after the other would compare early with late (the ratios between worker
    // configurations, 4x4 against 1x1, compare across them). The batch comparison is the
    // exception: each of its runs (and its sequential transactions) gets a new database,
    // dropped after it. Its runs are long, and this emulator's statements slow down as a
    // database's queue history grows (PostgreSQL's most: its sequential rate fell from 87 to 32
    // transactions per second between two rounds on one database), so on one shared database
    // whichever side ran last in a round was measured on the slowest database.
    let selected: Vec<&(&str, Vec<Side>)> = configs
        .iter()
        .filter(|(config, _)| scale.consume_configs.contains(config))
        .collect();
    let mut dbs = Vec::with_capacity(selected.len());
    for (config, _) in &selected {
        dbs.push(if *config == "batch" {
            None
        } else {
            Some(bench.database_in(dialect).await?)
        });
    }
    // The batch comparison's first run is the first work of a fresh emulator when it runs alone
    // (`--only batch`, and PostgreSQL's right after GoogleSQL's): that run measured 6,500
    // messages per second where the same side's second run measured 8,300, and the SDK side
    // always goes first in round 1. One unmeasured run of each side first, on a database of
    // its own, so that neither side's measured runs pay for the warm-up.
    if selected.iter().any(|(config, _)| *config == "batch") {
        let warm_up = (batch as i64) * 5;
        for side in [
            Side::BatchWorker { batch },
            Side::HandwrittenBatch { batch },
        ] {
            let db = bench.database_in(dialect).await?;
            let result = consume::run(bench, &db, side, ids(warm_up), timeout).await;
            bench.drop_database(db).await?;
            match result {
                Ok(run) => println!(
                    "  batch warm-up (not measured): {}: {:.1} msg/s",
                    side.label(),
                    run.rate()
                ),
                Err(error) => report.problems.push(format!(
                    "{prefix}consume: batch warm-up: {}: {error}",
                    side.label()
                )),
            }
        }
    }
    for round in 0..scale.consume_rounds {
        let mut turns: Vec<usize> = (0..selected.len()).collect();
        if round % 2 == 1 {
            turns.reverse();
        }
        for turn in turns {
            let (config, sides) = selected[turn];
            let shared = dbs[turn].as_ref();
            // Alternate which side goes first.
            let mut order: Vec<Side> = sides.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            let mut labels: Vec<String> = Vec::new();
            let n = if *config == "batch" {
                scale.batch_messages
            } else {
                n
            };
            for (position, side) in order.into_iter().enumerate() {
                // 1x1 and batch: sequential transactions run between the two sides, so that
                // each side is as close to them in time as the other (the emulator's speed
                // drifts).
                if position == 1 && (*config == "1x1" || *config == "batch") {
                    let label = if *config == "batch" {
                        SEQUENTIAL_BATCH
                    } else {
                        SEQUENTIAL
                    };
                    // A rate: a few hundred transactions measure it (the batch comparison's
                    // runs are long, and this emulator's PostgreSQL statements slow down as
                    // its queues' history grows).
                    let count = if *config == "batch" { n.min(500) } else { n };
                    let db = RunDatabase::open(bench, dialect, shared).await?;
                    sequential(bench, db.get(), ids(count), round, label, &mut totals).await?;
                    db.close(bench).await?;
                }
                let label = if *config == "polling" && matches!(side, Side::Worker { .. }) {
                    "SDK worker 1x4 (vs polling)".to_owned()
                } else {
                    side.label()
                };
                let db = RunDatabase::open(bench, dialect, shared).await?;
                let result = consume::run(bench, db.get(), side, ids(n), timeout).await;
                db.close(bench).await?;
                match result {
                    Ok(run) => {
                        println!(
                            "  {config} round {}: {label}: {:.1} msg/s (first commit after \
                             {:.0} ms)",
                            round + 1,
                            run.rate(),
                            run.first_secs * 1e3
                        );
                        totals.entry(label.clone()).or_default().add(&run);
                    }
                    Err(error) => report
                        .problems
                        .push(format!("{prefix}consume: {label}: {error}")),
                }
                labels.push(label);
            }
        }
    }
    for db in dbs.into_iter().flatten() {
        bench.drop_database(db).await?;
    }

    let rate = |label: &str| totals.get(label).map(Totals::rate).unwrap_or(f64::NAN);
    let w11 = rate("SDK worker 1x1");
    let w14 = rate("SDK worker 1x4");
    let w44 = rate("SDK worker 4x4");
    report.ratio(
        &format!("{prefix}worker_vs_handwritten_1x1"),
        w11 / rate("hand-written 1x1"),
    );
    report.ratio(
        &format!("{prefix}worker_vs_handwritten_1x4"),
        w14 / rate("hand-written 1x4"),
    );
    report.ratio(
        &format!("{prefix}worker_vs_handwritten_4x4"),
        w44 / rate("hand-written 4x4"),
    );
    report.ratio(
        &format!("{prefix}worker_vs_polling_4"),
        rate("SDK worker 1x4 (vs polling)") / rate("polling outbox x4"),
    );
    // By cost rather than by this emulator's one-commit-at-a-time clock: commits per message.
    let commits = |label: &str| {
        totals
            .get(label)
            .map_or(f64::NAN, |t| t.per_message(t.commits()))
    };
    report.ratio(
        &format!("{prefix}worker_vs_polling_4_commits"),
        commits("polling outbox x4") / commits("SDK worker 1x4 (vs polling)"),
    );
    report.ratio(&format!("{prefix}worker_1x4_vs_1x1"), w14 / w11);
    report.ratio(&format!("{prefix}worker_4x4_vs_1x1"), w44 / w11);
    report.ratio(
        &format!("{prefix}worker_1x1_vs_sequential_txn"),
        w11 / rate(SEQUENTIAL),
    );
    let batch_worker = Side::BatchWorker { batch }.label();
    let wb = rate(&batch_worker);
    report.ratio(
        &format!("{prefix}worker_batch_vs_sequential_txn"),
        wb / rate(SEQUENTIAL_BATCH),
    );
    report.ratio(
        &format!("{prefix}worker_batch_vs_handwritten_batch"),
        wb / rate(&Side::HandwrittenBatch { batch }.label()),
    );
    // Commits per message times the batch size: 1 when every batch is full.
    report.ratio(
        &format!("{prefix}worker_batch_commits_x_n"),
        commits(&batch_worker) * batch as f64,
    );

    // The batch comparison's runs have a size of their own.
    let per_run = match (
        scale.consume_configs.contains(&"batch"),
        scale.consume_configs.len(),
    ) {
        (true, 1) => format!("{} messages per run", scale.batch_messages),
        (true, _) => format!(
            "{n} messages per run, {} in the batch comparison",
            scale.batch_messages
        ),
        (false, _) => format!("{n} messages per run"),
    };
    let mut table = Table::new(
        format!(
            "Consume ({per_run}, {} interleaved rounds{in_dialect})",
            scale.consume_rounds
        ),
        &[
            "consumer",
            "msg/s",
            "first commit ms",
            "msg/s after it",
            "RPCs/msg",
            "commits/msg",
            "handler runs/msg",
        ],
    );
    for (label, t) in &totals {
        table.row(vec![
            label.clone(),
            format!("{:.1}", t.rate()),
            format!("{:.0}", t.first_commit_secs() * 1e3),
            format!("{:.1}", t.rate_after_first()),
            format!("{:.2}", t.per_message(t.rpcs_total())),
            format!("{:.2}", t.per_message(t.commits())),
            format!("{:.2}", t.per_message(t.handler_runs)),
        ]);
    }
    report.table(table);

    let mut ratios = Table::new(
        format!(
            "Consume ratios{in_dialect} (higher is better for the SDK; targets: the Targets table at the end)"
        ),
        &["ratio", "value"],
    );
    for name in [
        "worker_vs_handwritten_1x1",
        "worker_vs_handwritten_1x4",
        "worker_vs_handwritten_4x4",
        "worker_vs_polling_4",
        "worker_vs_polling_4_commits",
        "worker_1x4_vs_1x1",
        "worker_4x4_vs_1x1",
        "worker_1x1_vs_sequential_txn",
        "worker_batch_vs_sequential_txn",
        "worker_batch_vs_handwritten_batch",
        "worker_batch_commits_x_n",
    ] {
        let name = format!("{prefix}{name}");
        if let Some(value) = report.ratios.get(&name) {
            ratios.row(vec![name, format!("{value:.2}")]);
        }
    }
    report.table(ratios);

    // Cost accounting: RPCs per message by kind, worker vs hand-written.
    let kinds: std::collections::BTreeSet<&String> =
        totals.values().flat_map(|t| t.rpcs.keys()).collect();
    let batch_labels = [
        Side::BatchWorker { batch }.label(),
        Side::HandwrittenBatch { batch }.label(),
    ];
    let columns: Vec<&str> = [
        "SDK worker 1x1",
        "hand-written 1x1",
        "SDK worker 1x4",
        "hand-written 1x4",
        "SDK worker 4x4",
        "hand-written 4x4",
        "polling outbox x4",
        batch_labels[0].as_str(),
        batch_labels[1].as_str(),
    ]
    .into_iter()
    .filter(|c| totals.contains_key(*c))
    .collect();
    let mut header = vec!["RPC kind (per message)"];
    header.extend(columns.iter().copied());
    let mut cost = Table::new(
        format!("Cost accounting{in_dialect} (counted at the proxy every RPC passes)"),
        &header,
    );
    for kind in kinds {
        let mut row = vec![kind.clone()];
        for column in &columns {
            let t = &totals[*column];
            row.push(format!(
                "{:.3}",
                t.per_message(t.rpcs.get(kind).copied().unwrap_or(0))
            ));
        }
        cost.row(row);
    }
    report.table(cost);

    let details: serde_json::Map<String, serde_json::Value> = totals
        .iter()
        .map(|(label, t)| (label.clone(), t.json()))
        .collect();
    report.detail(
        &format!("{prefix}consume"),
        serde_json::Value::Object(details),
    );
    for (label, t) in &totals {
        if t.errors > 0 {
            report
                .problems
                .push(format!("{prefix}consume: {label}: {} errors", t.errors));
        }
    }
    Ok(())
}

/// One run of sequential read-write transactions (the 1x1 comparison's reference), added to
/// `totals`.
/// The database one run of a consume comparison uses: its configuration's, shared by all its
/// runs, or (the batch comparison) one made for the run alone and dropped by
/// [`close`](Self::close).
enum RunDatabase<'a> {
    Shared(&'a crate::db::Database),
    Own(crate::db::Database),
}

impl<'a> RunDatabase<'a> {
    /// `shared`, or a new database in `dialect` when there is none.
    async fn open(
        bench: &Bench,
        dialect: Dialect,
        shared: Option<&'a crate::db::Database>,
    ) -> Result<Self, BoxError> {
        Ok(match shared {
            Some(db) => Self::Shared(db),
            None => Self::Own(bench.database_in(dialect).await?),
        })
    }

    fn get(&self) -> &crate::db::Database {
        match self {
            Self::Shared(db) => db,
            Self::Own(db) => db,
        }
    }

    /// Drops the database if it was the run's own.
    async fn close(self, bench: &Bench) -> Result<(), BoxError> {
        if let Self::Own(db) = self {
            bench.drop_database(db).await?;
        }
        Ok(())
    }
}

async fn sequential(
    bench: &Bench,
    db: &crate::db::Database,
    ids: std::ops::Range<i64>,
    round: usize,
    label: &str,
    totals: &mut BTreeMap<String, Totals>,
) -> Result<(), BoxError> {
    let run = consume::sequential_transactions(bench, db, ids).await?;
    println!("  round {}: {label}: {:.1} txn/s", round + 1, run.rate());
    totals.entry(label.to_owned()).or_default().add(&run);
    Ok(())
}

/// The reference of the 1x1 comparison, and of the batch comparison (in its own database).
const SEQUENTIAL: &str = "sequential read-write transactions";
const SEQUENTIAL_BATCH: &str = "sequential read-write transactions (batch db)";

/// Send: the SDK's send paths vs hand-written DML with the same statements.
///
/// The wall ratio compares the median transaction of each side: on a shared machine a few
/// transactions in a hundred stall for milliseconds (the process waits for a core), and a sum
/// would measure those stalls, not the sends. The ratio of the means is reported next to it,
/// and the CPU ratio sums every transaction.
async fn send_section(bench: &Bench, scale: Scale, report: &mut Report) -> Result<(), BoxError> {
    use send::{Cost, Variant};
    let mut costs: BTreeMap<(usize, bool), Cost> = BTreeMap::new();
    for round in 0..scale.send_rounds {
        // A fresh database per round: the emulator slows down as the queue table grows.
        let db = bench.database().await?;
        let mut next = 0_i64;
        // Warm up both paths (statement caches, connections): not measured.
        for variant in Variant::ALL {
            let warm = send::measure(&db, variant, next, 1, true).await?;
            next += warm.iter().map(|c| c.messages as i64).sum::<i64>();
        }
        for (i, variant) in Variant::ALL.into_iter().enumerate() {
            let transactions = if variant.per_transaction() == 1 {
                scale.send_single
            } else {
                scale.send_batch
            };
            let [sdk, dml] =
                send::measure(&db, variant, next, transactions, (round + i) % 2 == 0).await?;
            next += (sdk.messages + dml.messages) as i64;
            costs.entry((i, true)).or_default().add(sdk);
            costs.entry((i, false)).or_default().add(dml);
        }
        bench.drop_database(db).await?;
    }
    let mut table = Table::new(
        format!(
            "Send ({} rounds, SDK and hand-written transactions interleaved; ratio = SDK / \
             hand-written, lower is better; wall: median transactions)",
            scale.send_rounds
        ),
        &[
            "variant",
            "SDK µs/msg",
            "DML µs/msg",
            "wall ratio",
            "mean ratio",
            "SDK CPU µs/msg",
            "DML CPU µs/msg",
            "CPU ratio",
        ],
    );
    let mut details = serde_json::Map::new();
    for (i, variant) in Variant::ALL.into_iter().enumerate() {
        let sdk = &costs[&(i, true)];
        let dml = &costs[&(i, false)];
        let per_message = |d: Duration| d.as_secs_f64() * 1e6 / variant.per_transaction() as f64;
        let per = |d: Duration, c: &Cost| d.as_secs_f64() * 1e6 / c.messages as f64;
        let wall_ratio = sdk.median_wall().as_secs_f64() / dml.median_wall().as_secs_f64();
        let mean_ratio = sdk.wall().as_secs_f64() / dml.wall().as_secs_f64();
        let cpu_ratio = sdk.cpu.as_secs_f64() / dml.cpu.as_secs_f64();
        report.ratio(variant.ratio_name(), wall_ratio);
        report.ratio(&format!("{}_mean", variant.ratio_name()), mean_ratio);
        report.ratio(&format!("{}_cpu", variant.ratio_name()), cpu_ratio);
        table.row(vec![
            variant.label().to_owned(),
            format!("{:.0}", per_message(sdk.median_wall())),
            format!("{:.0}", per_message(dml.median_wall())),
            format!("{wall_ratio:.3}"),
            format!("{mean_ratio:.3}"),
            format!("{:.0}", per(sdk.cpu, sdk)),
            format!("{:.0}", per(dml.cpu, dml)),
            format!("{cpu_ratio:.3}"),
        ]);
        details.insert(
            variant.ratio_name().to_owned(),
            json!({
                "label": variant.label(),
                "messages_per_side": sdk.messages,
                "transactions_per_side": sdk.walls.len(),
                "sdk_median_wall_us_per_msg": round(per_message(sdk.median_wall()), 1),
                "dml_median_wall_us_per_msg": round(per_message(dml.median_wall()), 1),
                "sdk_mean_wall_us_per_msg": round(per(sdk.wall(), sdk), 1),
                "dml_mean_wall_us_per_msg": round(per(dml.wall(), dml), 1),
                "sdk_cpu_us_per_msg": round(per(sdk.cpu, sdk), 1),
                "dml_cpu_us_per_msg": round(per(dml.cpu, dml), 1),
                "wall_ratio": round(wall_ratio, 3),
                "mean_wall_ratio": round(mean_ratio, 3),
                "cpu_ratio": round(cpu_ratio, 3),
            }),
        );
    }
    report.table(table);
    report.detail("send", serde_json::Value::Object(details));
    Ok(())
}

/// Renewal: RENEWLEASE RPCs per round from 1 to 500 deliveries held.
async fn renew_section(bench: &Bench, scale: Scale, report: &mut Report) -> Result<(), BoxError> {
    let mut table = Table::new(
        format!(
            "Renewal (every {:?}; {} rounds per level; must stay flat)",
            renew::INTERVAL,
            scale.renew_rounds
        ),
        &[
            "deliveries held",
            "RENEWLEASE RPCs/round",
            "leases renewed/round",
            "leases lost",
        ],
    );
    let mut details = serde_json::Map::new();
    for &in_flight in scale.renew_levels {
        let run = renew::measure(bench, in_flight, scale.renew_rounds).await?;
        println!(
            "  renewal with {in_flight} held: {:.2} RPCs/round",
            run.rpcs_per_round()
        );
        report.ratio(
            &format!("renew_rpcs_per_round_{in_flight}"),
            run.rpcs_per_round(),
        );
        table.row(vec![
            in_flight.to_string(),
            format!("{:.2}", run.rpcs_per_round()),
            format!("{:.1}", run.renewed_per_round()),
            run.lost.to_string(),
        ]);
        if run.lost > 0 {
            report.problems.push(format!(
                "renewal: {} leases lost with {in_flight} held",
                run.lost
            ));
        }
        if (run.renewed_per_round() - in_flight as f64).abs() > 0.5 {
            report.problems.push(format!(
                "renewal: {:.1} leases renewed per round with {in_flight} held",
                run.renewed_per_round()
            ));
        }
        details.insert(
            in_flight.to_string(),
            json!({
                "rounds": run.rounds,
                "renew_rpcs": run.rpcs,
                "rpcs_per_round": round(run.rpcs_per_round(), 3),
                "renewed_per_round": round(run.renewed_per_round(), 2),
                "leases_lost": run.lost,
                "all_rpcs": run.all_rpcs,
            }),
        );
    }
    report.table(table);
    report.detail("renew", serde_json::Value::Object(details));
    Ok(())
}

/// Memory: peak RSS of one worker process over many messages vs few.
async fn memory_section(bench: &Bench, scale: Scale, report: &mut Report) -> Result<(), BoxError> {
    let small = memory::measure(bench, scale.rss_small).await?;
    println!(
        "  memory: {} messages: peak RSS {} KiB",
        small.messages, small.peak_rss_kib
    );
    let large = memory::measure(bench, scale.rss_large).await?;
    println!(
        "  memory: {} messages: peak RSS {} KiB",
        large.messages, large.peak_rss_kib
    );
    let growth = large.peak_rss_kib as f64 / small.peak_rss_kib as f64;
    report.ratio("rss_growth", growth);
    let mut table = Table::new(
        format!(
            "Memory (one worker process, 1x{}, a steady backlog of {}; rss_growth = large / small, must stay near 1)",
            memory::HANDLERS,
            memory::BACKLOG
        ),
        &["messages", "peak RSS MiB", "msg/s"],
    );
    for run in [&small, &large] {
        table.row(vec![
            run.messages.to_string(),
            format!("{:.1}", run.peak_rss_kib as f64 / 1024.0),
            format!("{:.1}", run.messages as f64 / run.secs),
        ]);
    }
    table.row(vec![
        "rss_growth".into(),
        format!("{growth:.3}"),
        String::new(),
    ]);
    report.table(table);
    report.detail(
        "memory",
        json!({
            "handlers": memory::HANDLERS,
            "small": small,
            "large": large,
            "scaled_down": scale.rss_large != 50_000,
        }),
    );
    Ok(())
}

/// Latency: send commit → handler start, SDK worker vs hand-written consumer, both 1x4.
async fn latency_section(bench: &Bench, scale: Scale, report: &mut Report) -> Result<(), BoxError> {
    let db = bench.database().await?;
    let sides = [
        Side::Worker {
            workers: 1,
            handlers: 4,
        },
        Side::Handwritten {
            workers: 1,
            handlers: 4,
        },
    ];
    let mut samples: BTreeMap<String, latency::Samples> = BTreeMap::new();
    let mut next = 0_i64;
    for round in 0..scale.latency_rounds {
        let mut order = sides;
        if round % 2 == 1 {
            order.reverse();
        }
        for side in order {
            let ids = next..next + scale.latency_messages + 1;
            next = ids.end;
            let run = latency::measure(bench, &db, side, ids, scale.latency_interval).await?;
            samples.entry(side.label()).or_default().extend(run);
        }
    }
    bench.drop_database(db).await?;
    let mut table = Table::new(
        format!(
            "Latency: send commit returned -> handler start (one send every {:?})",
            scale.latency_interval
        ),
        &["consumer", "samples", "p50 ms", "p99 ms"],
    );
    let mut details = serde_json::Map::new();
    for (label, s) in &samples {
        table.row(vec![
            label.clone(),
            s.micros.len().to_string(),
            format!("{:.1}", s.percentile_ms(50.0)),
            format!("{:.1}", s.percentile_ms(99.0)),
        ]);
        details.insert(
            label.clone(),
            json!({
                "samples": s.micros.len(),
                "p50_ms": round(s.percentile_ms(50.0), 2),
                "p99_ms": round(s.percentile_ms(99.0), 2),
                "handler_started_before_commit_returned": s.before_commit_returned,
            }),
        );
    }
    let worker = &samples[&sides[0].label()];
    let hand = &samples[&sides[1].label()];
    report.ratio("latency_p50_ms", worker.percentile_ms(50.0));
    report.ratio("latency_p99_ms", worker.percentile_ms(99.0));
    report.ratio(
        "latency_p50_vs_handwritten",
        worker.percentile_ms(50.0) / hand.percentile_ms(50.0),
    );
    report.ratio(
        "latency_p99_vs_handwritten",
        worker.percentile_ms(99.0) / hand.percentile_ms(99.0),
    );
    report.table(table);
    report.detail("latency", serde_json::Value::Object(details));
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;
    use clap::{CommandFactory, Parser};

    use super::{Cli, Command, MAX_ROUNDS, Section};
    use crate::soak::Effect;

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("spanner-queues-bench").chain(args.iter().copied()))
            .and_then(Cli::into_command)
    }

    fn run(args: &[&str]) -> super::Args {
        match parse(args) {
            Ok(Command::Run(args)) => *args,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn kind(args: &[&str]) -> ErrorKind {
        parse(args).expect_err(&format!("{args:?} accepted")).kind()
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn rounds_take_a_whole_number_from_one_to_the_maximum() {
        assert_eq!(run(&["--rounds", "1"]).scale.consume_rounds, 1);
        assert_eq!(run(&["--rounds", "4"]).scale.consume_rounds, 4);
        assert_eq!(
            run(&["--rounds", "20"]).scale.consume_rounds as u64,
            MAX_ROUNDS
        );
        for bad in ["0", "21", "-1", "two", "", "2.5"] {
            let error = parse(&["--rounds", bad]).expect_err(bad);
            assert_eq!(error.kind(), ErrorKind::ValueValidation, "{bad}: {error}");
            assert!(error.to_string().contains("--rounds"), "{error}");
        }
        assert_eq!(kind(&["--rounds"]), ErrorKind::InvalidValue);
        // A mode sets its own rounds; --rounds overrides it, before or after the mode.
        assert_eq!(run(&["--gate"]).scale.consume_rounds, 3);
        assert_eq!(run(&["--rounds", "5", "--gate"]).scale.consume_rounds, 5);
        assert_eq!(run(&["--quick", "--rounds", "6"]).scale.consume_rounds, 6);
    }

    #[test]
    fn modes_choose_the_scale_and_exclude_each_other() {
        assert_eq!(run(&[]).scale.name, "default");
        assert_eq!(run(&["--quick"]).scale.name, "quick");
        assert_eq!(run(&["--long"]).scale.name, "long");
        let gate = run(&["--gate"]);
        assert!(gate.gate);
        assert_eq!(gate.scale.name, "gate");
        assert_eq!(gate.sections, [Section::Consume]);
        assert_eq!(kind(&["--quick", "--long"]), ErrorKind::ArgumentConflict);
        assert_eq!(kind(&["--gate", "--quick"]), ErrorKind::ArgumentConflict);
        // The gate measures the consume section only.
        assert_eq!(
            kind(&["--gate", "--only", "consume"]),
            ErrorKind::ArgumentConflict
        );
        assert_eq!(
            kind(&["--only", "send", "--gate"]),
            ErrorKind::ArgumentConflict
        );
    }

    #[test]
    fn sections_are_named_and_soak_runs_only_when_named() {
        let default = run(&[]);
        assert_eq!(default.sections, Section::DEFAULT);
        assert!(!default.sections.contains(&Section::Soak));
        assert_eq!(
            run(&["--only", "soak,consume"]).sections,
            [Section::Soak, Section::Consume]
        );
        assert_eq!(
            Section::DEFAULT.map(|s| s.to_string()),
            [
                "consume",
                "send",
                "renew",
                "memory",
                "latency",
                "ordering",
                "ordering-deep"
            ]
        );
        assert_eq!(kind(&["--only", "sned"]), ErrorKind::InvalidValue);
        assert_eq!(kind(&["--only", ""]), ErrorKind::InvalidValue);
        assert_eq!(kind(&["--only"]), ErrorKind::InvalidValue);
        assert_eq!(kind(&["--fast"]), ErrorKind::UnknownArgument);
        assert_eq!(
            run(&["--out", "/tmp/b"]).out,
            std::path::Path::new("/tmp/b")
        );
    }

    #[test]
    fn soak_knobs_take_positive_numbers_in_range() {
        let args = run(&[
            "--minutes",
            "30",
            "--workers",
            "2",
            "--handlers",
            "8",
            "--backlog",
            "500",
            "--send-batch",
            "1",
            "--interval",
            "20",
            "--effect",
            "mutation",
        ]);
        let soak = args.soak;
        assert_eq!(
            (soak.minutes, soak.workers, soak.handlers, soak.backlog),
            (30, 2, 8, 500)
        );
        assert_eq!((soak.send_batch, soak.interval), (1, 20));
        assert_eq!(soak.effect, Effect::Mutation);
        let default = run(&[]).soak;
        assert_eq!(
            (
                default.minutes,
                default.interval,
                default.handlers,
                default.workers
            ),
            (10, 60, 4, 1)
        );
        assert_eq!((default.backlog, default.send_batch), (200, 20));
        assert_eq!(default.effect, Effect::Dml);
        for bad in ["0", "-1", "x", "1.5", ""] {
            let error = parse(&["--handlers", bad]).expect_err(bad);
            assert_eq!(error.kind(), ErrorKind::ValueValidation, "{bad:?}");
            assert!(error.to_string().contains("--handlers"), "{error}");
        }
        for (flag, over) in [
            ("--minutes", "10081"),
            ("--interval", "86401"),
            ("--handlers", "1001"),
            ("--workers", "101"),
            ("--backlog", "1000001"),
            ("--send-batch", "1001"),
        ] {
            let error = parse(&[flag, over]).expect_err(flag);
            assert_eq!(error.kind(), ErrorKind::ValueValidation, "{flag} {over}");
            assert!(error.to_string().contains(flag), "{error}");
        }
        assert_eq!(kind(&["--effect", "insert"]), ErrorKind::InvalidValue);
        assert_eq!(kind(&["--effect"]), ErrorKind::InvalidValue);
    }

    #[test]
    fn a_soak_run_holds_at_least_one_interval() {
        let error = parse(&["--minutes", "1", "--interval", "61"]).expect_err("61 s > 1 min");
        assert_eq!(error.kind(), ErrorKind::ArgumentConflict);
        assert!(error.to_string().contains("--interval 61 s"), "{error}");
        assert_eq!(
            run(&["--minutes", "1", "--interval", "20"])
                .soak
                .intervals(),
            3
        );
    }

    #[test]
    fn the_children_take_their_own_arguments_alone() {
        assert!(matches!(
            parse(&["--serve-emulator"]),
            Ok(Command::ServeEmulator)
        ));
        match parse(&["--rss-worker", "http://127.0.0.1:1", "db", "10", "60"]) {
            Ok(Command::RssWorker(args)) => assert_eq!(args[2], "10"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            kind(&["--serve-emulator", "--quick"]),
            ErrorKind::ArgumentConflict
        );
        assert_eq!(
            kind(&["--rss-worker", "a", "b"]),
            ErrorKind::WrongNumberOfValues
        );
    }
}
