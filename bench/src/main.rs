//! Side-by-side benchmarks of spanner-queues on the embedded emulator.
//!
//! ```text
//! cargo run --release -p spanner-queues-bench -- [--quick|--long] [--out DIR]
//! ```
//!
//! Every figure is a ratio of two things measured in the same run, in interleaved rounds, so
//! that machine noise hits both sides alike. The run prints tables and writes
//! `target/bench/summary.json`; see `docs/benchmark.md` for what each measurement means.

mod consume;
mod db;
mod emulator;
mod proxy;
mod report;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::consume::{ConsumeRun, Side};
use crate::db::Bench;
use crate::report::{Report, Table, round};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How much work each measurement does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    pub(crate) name: &'static str,
    /// Messages per consume run.
    pub(crate) consume_messages: i64,
    /// Interleaved rounds per consume comparison.
    pub(crate) consume_rounds: usize,
}

impl Scale {
    fn quick() -> Self {
        Self {
            name: "quick",
            consume_messages: 40,
            consume_rounds: 1,
        }
    }

    fn default_scale() -> Self {
        Self {
            name: "default",
            consume_messages: 200,
            consume_rounds: 2,
        }
    }

    fn long() -> Self {
        Self {
            name: "long",
            consume_messages: 1_000,
            consume_rounds: 4,
        }
    }
}

#[derive(Debug)]
struct Args {
    scale: Scale,
    out: std::path::PathBuf,
}

fn usage() -> ! {
    eprintln!(
        "usage: spanner-queues-bench [--quick|--long] [--out DIR]\n\
         \n\
         Runs every measurement on the embedded emulator, prints tables of ratios and writes\n\
         DIR/summary.json (default: target/bench)."
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut scale = Scale::default_scale();
    let mut out = report::output_dir();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => scale = Scale::quick(),
            "--long" => scale = Scale::long(),
            "--out" => out = args.next().unwrap_or_else(|| usage()).into(),
            _ => usage(),
        }
    }
    Args { scale, out }
}

fn main() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if std::env::args().nth(1).as_deref() == Some("--serve-emulator") {
        return runtime.block_on(emulator::serve());
    }
    let args = parse_args();
    runtime.block_on(run(args))
}

async fn run(args: Args) -> Result<(), BoxError> {
    let started = Instant::now();
    std::fs::create_dir_all(&args.out)?;
    let scale = args.scale;
    println!(
        "spanner-queues benchmark ({} mode): ratios of things measured side by side in one run",
        scale.name
    );
    let bench = Bench::start(&args.out.join("emulator.log")).await?;
    let mut report = Report::default();

    consume_section(&bench, scale, &mut report).await?;

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
    Ok(())
}

/// Consume runs summed over rounds.
#[derive(Debug, Default, Clone)]
struct Totals {
    messages: u64,
    secs: f64,
    rpcs: BTreeMap<String, u64>,
    handler_runs: u64,
    already_acked: u64,
    errors: u64,
    rounds: usize,
}

impl Totals {
    fn add(&mut self, run: &ConsumeRun) {
        self.messages += run.messages;
        self.secs += run.secs;
        for (kind, n) in &run.rpcs {
            *self.rpcs.entry(kind.clone()).or_default() += n;
        }
        self.handler_runs += run.handler_runs;
        self.already_acked += run.already_acked;
        self.errors += run.errors;
        self.rounds += 1;
    }

    fn rate(&self) -> f64 {
        self.messages as f64 / self.secs
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
        json!({
            "messages": self.messages,
            "secs": round(self.secs, 3),
            "messages_per_sec": round(self.rate(), 2),
            "rounds": self.rounds,
            "rpcs_per_message": round(self.per_message(self.rpcs_total()), 3),
            "commits_per_message": round(self.per_message(self.commits()), 3),
            "handler_runs_per_message": round(self.per_message(self.handler_runs), 3),
            "already_acked": self.already_acked,
            "errors": self.errors,
            "rpcs_by_kind_per_message": per_message,
        })
    }
}

/// Consume: the SDK worker vs the hand-written consumer (1x1, 1x4, 4x4), sequential
/// transactions (1x1 only), and the polling outbox at 4.
async fn consume_section(bench: &Bench, scale: Scale, report: &mut Report) -> Result<(), BoxError> {
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
    for (config, sides) in &configs {
        let db = bench.database().await?;
        for round in 0..scale.consume_rounds {
            // Alternate which side goes first.
            let mut order: Vec<Side> = sides.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            let mut labels: Vec<String> = Vec::new();
            for side in order {
                let label = if *config == "polling" && matches!(side, Side::Worker { .. }) {
                    "SDK worker 1x4 (vs polling)".to_owned()
                } else {
                    side.label()
                };
                match consume::run(bench, &db, side, ids(n), timeout).await {
                    Ok(run) => {
                        println!(
                            "  {config} round {}: {label}: {:.1} msg/s",
                            round + 1,
                            run.rate()
                        );
                        totals.entry(label.clone()).or_default().add(&run);
                    }
                    Err(error) => report.problems.push(format!("{label}: {error}")),
                }
                labels.push(label);
            }
            if *config == "1x1" {
                let run = consume::sequential_transactions(bench, &db, ids(n)).await?;
                println!(
                    "  {config} round {}: sequential transactions: {:.1} txn/s",
                    round + 1,
                    run.rate()
                );
                totals
                    .entry("sequential read-write transactions".to_owned())
                    .or_default()
                    .add(&run);
            }
        }
    }

    let rate = |label: &str| totals.get(label).map(Totals::rate).unwrap_or(f64::NAN);
    let w11 = rate("SDK worker 1x1");
    let w14 = rate("SDK worker 1x4");
    let w44 = rate("SDK worker 4x4");
    report.ratio("worker_vs_handwritten_1x1", w11 / rate("hand-written 1x1"));
    report.ratio("worker_vs_handwritten_1x4", w14 / rate("hand-written 1x4"));
    report.ratio("worker_vs_handwritten_4x4", w44 / rate("hand-written 4x4"));
    report.ratio(
        "worker_vs_polling_4",
        rate("SDK worker 1x4 (vs polling)") / rate("polling outbox x4"),
    );
    report.ratio("worker_1x4_vs_1x1", w14 / w11);
    report.ratio("worker_4x4_vs_1x1", w44 / w11);
    report.ratio(
        "worker_1x1_vs_sequential_txn",
        w11 / rate("sequential read-write transactions"),
    );

    let mut table = Table::new(
        format!(
            "Consume ({n} messages per run, {} interleaved rounds)",
            scale.consume_rounds
        ),
        &[
            "consumer",
            "msg/s",
            "RPCs/msg",
            "commits/msg",
            "handler runs/msg",
        ],
    );
    for (label, t) in &totals {
        table.row(vec![
            label.clone(),
            format!("{:.1}", t.rate()),
            format!("{:.2}", t.per_message(t.rpcs_total())),
            format!("{:.2}", t.per_message(t.commits())),
            format!("{:.2}", t.per_message(t.handler_runs)),
        ]);
    }
    report.table(table);

    let mut ratios = Table::new(
        "Consume ratios (higher is better for the SDK)",
        &["ratio", "value", "target"],
    );
    for (name, target) in [
        ("worker_vs_handwritten_1x1", ">= 0.9"),
        ("worker_vs_handwritten_1x4", ">= 0.9"),
        ("worker_vs_handwritten_4x4", ""),
        ("worker_vs_polling_4", ">= 5"),
        ("worker_1x4_vs_1x1", ">= 1"),
        ("worker_4x4_vs_1x1", ">= 1"),
        ("worker_1x1_vs_sequential_txn", ">= 0.4"),
    ] {
        let value = report.ratios.get(name).copied().unwrap_or(f64::NAN);
        ratios.row(vec![
            name.to_owned(),
            format!("{value:.2}"),
            target.to_owned(),
        ]);
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
    ]
    .into_iter()
    .filter(|c| totals.contains_key(*c))
    .collect();
    let mut header = vec!["RPC kind (per message)"];
    header.extend(columns.iter().copied());
    let mut cost = Table::new(
        "Cost accounting (counted at the proxy every RPC passes)",
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
    report.detail("consume", serde_json::Value::Object(details));
    for (label, t) in &totals {
        if t.errors > 0 {
            report
                .problems
                .push(format!("{label}: {} errors", t.errors));
        }
    }
    Ok(())
}
