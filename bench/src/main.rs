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
use std::time::{Duration, Instant};

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
    /// The consume comparisons made (`1x1`, `1x4`, `4x4`, `polling`).
    pub(crate) consume_configs: &'static [&'static str],
}

/// Every consume comparison.
const ALL_CONSUME: &[&str] = &["1x1", "1x4", "4x4", "polling"];
/// The consume comparisons of the gate: those whose ratios it checks.
const GATE_CONSUME: &[&str] = &["1x1", "1x4", "polling"];
/// The ratios a gate run measures (the gate may check any of them, see `bench/targets.toml`).
pub(crate) const GATE_RATIOS: &[&str] = &[
    "worker_vs_handwritten_1x1",
    "worker_vs_handwritten_1x4",
    "worker_1x4_vs_1x1",
    "worker_1x1_vs_sequential_txn",
    "worker_vs_polling_4",
    "worker_vs_polling_4_commits",
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
            send_single: 60,
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
        }
    }
}

/// The sections of a default run.
const SECTIONS: [&str; 6] = ["consume", "send", "renew", "memory", "latency", "ordering"];
/// Sections that run only when named with `--only` (they are long).
const ON_REQUEST: [&str; 1] = ["soak"];

#[derive(Debug)]
struct Args {
    scale: Scale,
    out: std::path::PathBuf,
    sections: Vec<String>,
    soak: SoakOptions,
    /// The regression gate: fail when a gated ratio misses its target beyond the noise margin.
    gate: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: spanner-queues-bench [--quick|--long|--gate] [--out DIR] [--only SECTION,...]\n\
         \x20                           [--rounds N] [--minutes N] [--interval S] [--handlers N] [--workers N]\n\
         \x20                           [--backlog N] [--effect dml|mutation] [--send-batch N]\n\
         \n\
         Runs every measurement on the embedded emulator, prints tables of ratios and writes\n\
         DIR/summary.json (default: target/bench). Sections: consume, send, renew, memory,\n\
         latency, ordering (default: all of these), and soak (only when named: --only soak).\n\
         \n\
         --gate: the regression gate: measures the ratios bench/targets.toml marks `gate`\n\
         (consume only, a few minutes at most) and exits with status 3 when one misses its\n\
         target by more than the file's noise margin.\n\
         \n\
         --rounds N: interleaved rounds of the consume comparisons (1 to 20; the mode's own\n\
         number otherwise): more rounds average out more noise and take longer.\n\
         \n\
         soak: SDK workers consume for a long run while a producer keeps a backlog queued;\n\
         prints acks/s per interval against the first, expired-on-receipt rows, retries and the\n\
         CPU of the emulator, the front and this process. Its options (positive numbers):\n\
         \x20 --minutes N    length of the run (default 10)\n\
         \x20 --interval S   seconds per printed interval (default 60)\n\
         \x20 --handlers N   handlers per worker (default 4)\n\
         \x20 --workers N    SDK workers in this process, each with its own client (default 1)\n\
         \x20 --backlog N    messages kept queued (default 200)\n\
         \x20 --send-batch N messages per send transaction (default 20)\n\
         \x20 --effect dml|mutation  how the handler inserts its effect row (default dml)"
    );
    std::process::exit(2)
}

/// The most consume rounds `--rounds` accepts.
const MAX_ROUNDS: usize = 20;

/// The value of `--rounds`: a whole number from 1 to [`MAX_ROUNDS`].
fn parse_rounds(value: Option<&str>) -> Result<usize, String> {
    let text = value.ok_or("--rounds needs a number")?;
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_ROUNDS).contains(&n) => Ok(n),
        _ => Err(format!(
            "--rounds must be a whole number from 1 to {MAX_ROUNDS}, not {text:?}"
        )),
    }
}

/// A usage error: says what is wrong, then prints the usage.
fn usage_error(message: &str) -> ! {
    eprintln!("error: {message}");
    usage()
}

fn parse_args() -> Args {
    let mut scale = Scale::default_scale();
    let mut out = report::output_dir();
    let mut sections: Vec<String> = SECTIONS.iter().map(|s| (*s).to_owned()).collect();
    let mut soak = SoakOptions::default();
    let mut gate = false;
    let mut rounds = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => scale = Scale::quick(),
            "--long" => scale = Scale::long(),
            "--gate" => {
                gate = true;
                scale = Scale::gate();
                sections = vec!["consume".to_owned()];
            }
            "--out" => {
                out = args
                    .next()
                    .unwrap_or_else(|| usage_error("--out needs a directory"))
                    .into();
            }
            "--only" => {
                sections = args
                    .next()
                    .unwrap_or_else(|| usage_error("--only needs a list of sections"))
                    .split(',')
                    .map(str::to_owned)
                    .collect();
                if let Some(unknown) = sections
                    .iter()
                    .find(|s| !SECTIONS.contains(&s.as_str()) && !ON_REQUEST.contains(&s.as_str()))
                {
                    usage_error(&format!("unknown section {unknown:?}"));
                }
            }
            "--rounds" => match parse_rounds(args.next().as_deref()) {
                Ok(n) => rounds = Some(n),
                Err(message) => usage_error(&message),
            },
            knob if SoakOptions::is_knob(knob) => {
                let value = args.next();
                if let Err(message) = soak.set(knob, value.as_deref()) {
                    usage_error(&message);
                }
            }
            other => usage_error(&format!("unknown option {other:?}")),
        }
    }
    if let Err(message) = soak.validate() {
        usage_error(&message);
    }
    if let Err(message) = consume::slow_handler() {
        usage_error(&message);
    }
    if gate && sections != ["consume"] {
        usage_error("--gate measures the consume section only (no --only)");
    }
    // After every option: a mode (--quick, --long, --gate) sets its own number of rounds.
    if let Some(rounds) = rounds {
        scale.consume_rounds = rounds;
    }
    Args {
        scale,
        out,
        sections,
        soak,
        gate,
    }
}

fn main() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let raw: Vec<String> = std::env::args().skip(1).collect();
    match raw.first().map(String::as_str) {
        Some("--serve-emulator") => return runtime.block_on(emulator::serve()),
        Some("--rss-worker") => return runtime.block_on(memory::child(&raw[1..])),
        _ => {}
    }
    let args = parse_args();
    let targets = targets::Targets::load()?;
    if args.gate
        && let Some(name) = targets.gated().find(|name| !GATE_RATIOS.contains(name))
    {
        usage_error(&format!(
            "bench/targets.toml gates {name}, which the gate run does not measure"
        ));
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
    let bench = Bench::start(&args.out.join("emulator.log")).await?;
    let mut report = Report::default();

    for section in &args.sections {
        let result = match section.as_str() {
            "consume" => consume_section(&bench, scale, &mut report).await,
            "send" => send_section(&bench, scale, &mut report).await,
            "renew" => renew_section(&bench, scale, &mut report).await,
            "memory" => memory_section(&bench, scale, &mut report).await,
            "latency" => latency_section(&bench, scale, &mut report).await,
            "ordering" => ordered::section(&bench, scale, &mut report).await,
            "soak" => soak::section(&bench, args.soak, &mut report).await,
            _ => Ok(()),
        };
        if let Err(error) = result {
            report.problems.push(format!("{section}: {error}"));
        }
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
    bench.emulator.stop().await;
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
    let configs: [(&str, Vec<Side>); 4] = [
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
    ];
    // Each configuration has a database of its own, kept for the whole measurement, and the
    // configurations take turns round by round (in reversed order every other round), like the
    // sides within one: the emulator slows down as it runs, so configurations measured one
    // after the other would compare early with late (the ratios between worker
    // configurations, 4x4 against 1x1, compare across them).
    let selected: Vec<&(&str, Vec<Side>)> = configs
        .iter()
        .filter(|(config, _)| scale.consume_configs.contains(config))
        .collect();
    let mut dbs = Vec::with_capacity(selected.len());
    for _ in &selected {
        dbs.push(bench.database_in(dialect).await?);
    }
    for round in 0..scale.consume_rounds {
        let mut turns: Vec<usize> = (0..selected.len()).collect();
        if round % 2 == 1 {
            turns.reverse();
        }
        for turn in turns {
            let (config, sides) = selected[turn];
            let db = &dbs[turn];
            // Alternate which side goes first.
            let mut order: Vec<Side> = sides.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            let mut labels: Vec<String> = Vec::new();
            for (position, side) in order.into_iter().enumerate() {
                // 1x1: sequential transactions run between the two sides, so that each side is
                // as close to them in time as the other (the emulator's speed drifts).
                if position == 1 && *config == "1x1" {
                    sequential(bench, db, ids(n), round, &mut totals).await?;
                }
                let label = if *config == "polling" && matches!(side, Side::Worker { .. }) {
                    "SDK worker 1x4 (vs polling)".to_owned()
                } else {
                    side.label()
                };
                match consume::run(bench, db, side, ids(n), timeout).await {
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
    for db in dbs {
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
        w11 / rate("sequential read-write transactions"),
    );

    let mut table = Table::new(
        format!(
            "Consume ({n} messages per run, {} interleaved rounds{in_dialect})",
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
    let columns: Vec<&str> = [
        "SDK worker 1x1",
        "hand-written 1x1",
        "SDK worker 1x4",
        "hand-written 1x4",
        "SDK worker 4x4",
        "hand-written 4x4",
        "polling outbox x4",
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
async fn sequential(
    bench: &Bench,
    db: &crate::db::Database,
    ids: std::ops::Range<i64>,
    round: usize,
    totals: &mut BTreeMap<String, Totals>,
) -> Result<(), BoxError> {
    let run = consume::sequential_transactions(bench, db, ids).await?;
    println!(
        "  1x1 round {}: sequential transactions: {:.1} txn/s",
        round + 1,
        run.rate()
    );
    totals
        .entry("sequential read-write transactions".to_owned())
        .or_default()
        .add(&run);
    Ok(())
}

/// Send: the SDK's send paths vs hand-written DML with the same statements.
async fn send_section(bench: &Bench, scale: Scale, report: &mut Report) -> Result<(), BoxError> {
    use send::{Cost, Variant};
    let mut costs: BTreeMap<(usize, bool), Cost> = BTreeMap::new();
    for round in 0..scale.send_rounds {
        // A fresh database per round: the emulator slows down as the queue table grows.
        let db = bench.database().await?;
        let mut next = 0_i64;
        // Warm up both paths (statement caches, connections): not measured.
        for variant in Variant::ALL {
            for sdk in [true, false] {
                let cost = send::measure(&db, variant, sdk, next, 1).await?;
                next += cost.messages as i64;
            }
        }
        for (i, variant) in Variant::ALL.into_iter().enumerate() {
            let transactions = if variant.per_transaction() == 1 {
                scale.send_single
            } else {
                scale.send_batch
            };
            let order = if (round + i) % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for sdk in order {
                let cost = send::measure(&db, variant, sdk, next, transactions).await?;
                next += cost.messages as i64;
                costs.entry((i, sdk)).or_default().add(cost);
            }
        }
        bench.drop_database(db).await?;
    }
    let mut table = Table::new(
        format!(
            "Send ({} interleaved rounds; ratio = SDK / hand-written, lower is better)",
            scale.send_rounds
        ),
        &[
            "variant",
            "SDK µs/msg",
            "DML µs/msg",
            "wall ratio",
            "SDK CPU µs/msg",
            "DML CPU µs/msg",
            "CPU ratio",
        ],
    );
    let mut details = serde_json::Map::new();
    for (i, variant) in Variant::ALL.into_iter().enumerate() {
        let sdk = costs[&(i, true)];
        let dml = costs[&(i, false)];
        let per = |d: Duration, c: &Cost| d.as_secs_f64() * 1e6 / c.messages as f64;
        let wall_ratio = sdk.wall.as_secs_f64() / dml.wall.as_secs_f64();
        let cpu_ratio = sdk.cpu.as_secs_f64() / dml.cpu.as_secs_f64();
        report.ratio(variant.ratio_name(), wall_ratio);
        report.ratio(&format!("{}_cpu", variant.ratio_name()), cpu_ratio);
        table.row(vec![
            variant.label().to_owned(),
            format!("{:.0}", per(sdk.wall, &sdk)),
            format!("{:.0}", per(dml.wall, &dml)),
            format!("{wall_ratio:.3}"),
            format!("{:.0}", per(sdk.cpu, &sdk)),
            format!("{:.0}", per(dml.cpu, &dml)),
            format!("{cpu_ratio:.3}"),
        ]);
        details.insert(
            variant.ratio_name().to_owned(),
            json!({
                "label": variant.label(),
                "messages_per_side": sdk.messages,
                "sdk_wall_us_per_msg": round(per(sdk.wall, &sdk), 1),
                "dml_wall_us_per_msg": round(per(dml.wall, &dml), 1),
                "sdk_cpu_us_per_msg": round(per(sdk.cpu, &sdk), 1),
                "dml_cpu_us_per_msg": round(per(dml.cpu, &dml), 1),
                "wall_ratio": round(wall_ratio, 3),
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
    use super::{MAX_ROUNDS, parse_rounds};

    #[test]
    fn rounds_take_a_whole_number_from_one_to_the_maximum() {
        assert_eq!(parse_rounds(Some("1")), Ok(1));
        assert_eq!(parse_rounds(Some(" 4 ")), Ok(4));
        assert_eq!(parse_rounds(Some("20")), Ok(MAX_ROUNDS));
        for bad in ["0", "21", "-1", "two", "", "2.5"] {
            let error = parse_rounds(Some(bad)).expect_err(bad);
            assert!(
                error.contains("--rounds") && error.contains("1 to 20"),
                "{error}"
            );
        }
        assert_eq!(
            parse_rounds(None),
            Err("--rounds needs a number".to_owned())
        );
    }
}
