//! Long-run throughput of the front: a producer keeps a queue supplied while consumers receive
//! (`RECEIVE_Q` streams) and ack each message in a read-write transaction with a business write
//! (an `Effects` row, `--effect insert|insert-or-ignore|none`), for N minutes. Prints the acks per interval, the ratio of each interval
//! to the first, the time of a probe scan of the queue table and the CPU used by the official
//! emulator in the interval, then one JSON line. No assertions: numbers, not pass/fail.
//!
//! ```text
//! cargo bench -p spanner-queues-emulator --bench soak -- [--minutes 10] [--interval 60] [--consumers 4] [--backlog 40] [--effect insert] [--send dml|mutation]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseClient, Spanner};
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::statement::Statement;
use spanner_queues_emulator::{LocalEmulator, LocalEmulatorOptions};

const SEND_BATCH: i64 = 20;

/// The soak's command line.
#[derive(Debug, clap::Parser)]
#[command(
    about = "Long-run throughput of the queue front: consumers receive and ack for N minutes; prints acks per interval and the official emulator's CPU per ack"
)]
struct Options {
    /// Messages kept queued ahead of the consumers. Each consumer's stream leases what it can
    /// get; a backlog much larger than consumers x batch leaves rows leased ahead of a busy
    /// reader until their lease runs out (counted as `late`).
    #[arg(long, default_value_t = 40)]
    backlog: i64,
    /// How long the soak runs, in minutes.
    #[arg(long, default_value_t = 10)]
    minutes: u64,
    /// Seconds between two lines of the report.
    #[arg(long, default_value_t = 60)]
    interval: u64,
    /// Consumers, each with its own RECEIVE stream.
    #[arg(long, default_value_t = 4)]
    consumers: usize,
    /// The business write of each ack.
    #[arg(long, value_enum, default_value_t = Effect::Insert)]
    effect: Effect,
    /// How the producer sends: DML `INSERT` statements, or `Insert` mutations.
    #[arg(long, value_enum, default_value_t = SendBy::Dml)]
    send: SendBy,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

impl Options {
    /// Whether the producer sends by `Insert` mutations instead of DML `INSERT` statements.
    fn send_mutations(&self) -> bool {
        self.send == SendBy::Mutation
    }
}

/// How the producer sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SendBy {
    /// DML `INSERT` statements.
    Dml,
    /// `Insert` mutations.
    Mutation,
}

/// How a consumer writes the business effect of a message.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Effect {
    /// `INSERT` (the ack in the same transaction makes it once-only).
    Insert,
    /// `INSERT OR IGNORE`, the idempotent form. In the official emulator it reads the whole
    /// table, so it slows down as `Effects` grows.
    InsertOrIgnore,
    /// No effect: receive and ack only.
    None,
}

impl Effect {
    fn sql(self) -> Option<&'static str> {
        match self {
            Self::Insert => Some("INSERT INTO Effects (Id, Note) VALUES (@id, 'done')"),
            Self::InsertOrIgnore => {
                Some("INSERT OR IGNORE INTO Effects (Id, Note) VALUES (@id, 'done')")
            }
            Self::None => None,
        }
    }
}

async fn setup(spanner: &Spanner) -> String {
    let instance_admin = spanner
        .instance_admin_builder()
        .build()
        .await
        .expect("admin");
    let instance = google_cloud_spanner_admin_instance_v1::model::Instance::new()
        .set_name("projects/soak/instances/soak")
        .set_config("projects/soak/instanceConfigs/emulator-config")
        .set_display_name("soak")
        .set_node_count(1);
    instance_admin
        .create_instance()
        .set_parent("projects/soak")
        .set_instance_id("soak")
        .set_instance(instance)
        .poller()
        .until_done()
        .await
        .expect("instance");
    let admin = spanner
        .database_admin_builder()
        .build()
        .await
        .expect("admin");
    admin
        .create_database()
        .set_parent("projects/soak/instances/soak")
        .set_create_statement("CREATE DATABASE soak")
        .set_extra_statements([
            "CREATE QUEUE Jobs (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
            "CREATE TABLE Effects (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)",
        ])
        .poller()
        .until_done()
        .await
        .expect("database");
    "projects/soak/instances/soak/databases/soak".to_owned()
}

#[derive(Default)]
struct Counters {
    /// The first few failures, printed once.
    errors: std::sync::Mutex<Vec<String>>,
    sent: AtomicI64,
    acked: AtomicU64,
    /// Deliveries read after their lease ran out, or of a message acked already.
    late: AtomicU64,
    failed: AtomicU64,
    stop: AtomicBool,
}

impl Counters {
    fn fail(&self, what: &str, error: &dyn std::fmt::Display) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut errors = self
            .errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if errors.len() < 5 {
            let text = format!("{what}: {error}");
            eprintln!("failure: {text}");
            errors.push(text);
        }
    }
}

async fn produce(db: &DatabaseClient, counters: &Counters, backlog: i64, mutations: bool) {
    let mut next = 1i64;
    while !counters.stop.load(Ordering::Relaxed) {
        let acked = i64::try_from(counters.acked.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        if next - 1 - acked >= backlog {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let first = next;
        if mutations {
            let inserts = (first..first + SEND_BATCH).map(|id| {
                Mutation::new_insert_builder("Jobs")
                    .set("Id")
                    .to(id)
                    .set("Payload")
                    .to("job")
                    .build()
            });
            match db.write_only_transaction().build().write(inserts).await {
                Ok(_) => {
                    next += SEND_BATCH;
                    counters.sent.store(next - 1, Ordering::Relaxed);
                }
                Err(error) => counters.fail("send", &error),
            }
            continue;
        }
        // One multi-row statement, as the SDK sends a batch.
        let rows: Vec<String> = (0..SEND_BATCH)
            .map(|i| format!("(@id{i}, 'job')"))
            .collect();
        let sql = format!("INSERT INTO Jobs (Id, Payload) VALUES {}", rows.join(", "));
        let result = db
            .read_write_transaction()
            .build()
            .run(async |tx| {
                let mut statement = Statement::builder(sql.clone());
                for i in 0..SEND_BATCH {
                    statement = statement.add_param(format!("id{i}"), first + i);
                }
                tx.execute_update(statement.build()).await
            })
            .await;
        match result {
            Ok(_) => {
                next += SEND_BATCH;
                counters.sent.store(next - 1, Ordering::Relaxed);
            }
            Err(error) => counters.fail("send", &error),
        }
    }
}

async fn consume(db: &DatabaseClient, counters: &Counters, effect: Effect) {
    while !counters.stop.load(Ordering::Relaxed) {
        let mut rows = match db
            .single_use()
            .build()
            .execute_query(Statement::builder(
                "SELECT Id, SpannerLeaseExpirationTimestamp FROM \
                 RECEIVE_Jobs(max_duration => '30s', max_batch_size => 10)",
            ))
            .await
        {
            Ok(rows) => rows,
            Err(error) => {
                counters.fail("receive", &error);
                continue;
            }
        };
        while let Some(row) = rows.next().await {
            if counters.stop.load(Ordering::Relaxed) {
                return;
            }
            let (id, expires) = match row
                .and_then(|r| Ok((r.get::<i64>(0)?, r.get::<std::time::SystemTime>(1)?)))
            {
                Ok(pair) => pair,
                Err(error) => {
                    counters.fail("receive stream", &error);
                    break;
                }
            };
            // A row read after its lease ran out (the stream leased it ahead of this reader)
            // is skipped: it is delivered again, possibly to another consumer.
            if expires <= std::time::SystemTime::now() {
                counters.late.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let result = db
                .read_write_transaction()
                .build()
                .run(async |tx| {
                    // Ack first: only the transaction that deletes the message writes its
                    // effect (a message redelivered after its lease ran out may be gone).
                    let deleted = tx
                        .execute_update(
                            Statement::builder("DELETE FROM Jobs WHERE Id = @id")
                                .add_param("id", id)
                                .build(),
                        )
                        .await?;
                    if deleted == 1
                        && let Some(sql) = effect.sql()
                    {
                        tx.execute_update(Statement::builder(sql).add_param("id", id).build())
                            .await?;
                    }
                    Ok(deleted)
                })
                .await;
            match result {
                Ok(deleted) if deleted.result == 1 => {
                    counters.acked.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {
                    counters.late.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => counters.fail("ack", &error),
            }
        }
    }
}

/// CPU seconds (user + system) used so far by the processes `pids`.
fn cpu_seconds(pids: &[u32]) -> f64 {
    // Clock ticks per second: 100 on Linux everywhere this runs.
    const TICKS: f64 = 100.0;
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the parenthesised command name; utime and stime are 14th and 15th.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / TICKS)
        })
        .sum()
}

async fn probe(db: &DatabaseClient) -> Duration {
    let start = Instant::now();
    if let Ok(mut rows) = db
        .single_use()
        .build()
        .execute_query(Statement::builder("SELECT COUNT(*) FROM Jobs"))
        .await
    {
        while let Some(Ok(_)) = rows.next().await {}
    }
    start.elapsed()
}

#[tokio::main]
async fn main() {
    let options = <Options as clap::Parser>::parse();
    let emulator = LocalEmulator::start(LocalEmulatorOptions::new())
        .await
        .expect("start the emulator (needs the installed Cloud SDK emulator)");
    let spanner = Spanner::builder()
        .with_endpoint(format!("http://{}", emulator.addr()))
        .build()
        .await
        .expect("client");
    let path = setup(&spanner).await;
    let mut clients = Vec::new();
    for _ in 0..=options.consumers {
        clients.push(spanner.database_client(&path).build().await.expect("db"));
    }
    let counters = Arc::new(Counters::default());
    let pids = emulator.child_pids();
    println!(
        "soak: {} consumers, {} minutes, intervals of {} s (backlog {}, sends in batches of {SEND_BATCH} by {}, effect {:?})",
        options.consumers,
        options.minutes,
        options.interval,
        options.backlog,
        if options.send_mutations() {
            "mutations"
        } else {
            "DML"
        },
        options.effect
    );
    println!(
        "{:>6} | {:>8} {:>9} {:>8} | {:>9} {:>12} {:>11} {:>8} {:>8}",
        "minute",
        "acks",
        "acks/s",
        "vs first",
        "probe ms",
        "emulator cpu",
        "cpu ms/ack",
        "late",
        "failed"
    );
    let report = {
        let counters = Arc::clone(&counters);
        let probe_db = clients[0].clone();
        async move {
            let mut rates: Vec<f64> = Vec::new();
            let mut cpu_per_ack: Vec<f64> = Vec::new();
            let mut last_acked = 0;
            let mut last_cpu = cpu_seconds(&pids);
            let intervals = options.minutes * 60 / options.interval.max(1);
            for i in 1..=intervals {
                tokio::time::sleep(Duration::from_secs(options.interval)).await;
                let acked = counters.acked.load(Ordering::Relaxed);
                let cpu = cpu_seconds(&pids);
                let rate = (acked - last_acked) as f64 / options.interval as f64;
                rates.push(rate);
                // The probe's own CPU is left out: measured before it runs.
                let ms_per_ack = (cpu - last_cpu) * 1e3 / (acked - last_acked).max(1) as f64;
                cpu_per_ack.push(ms_per_ack);
                let probe_ms = probe(&probe_db).await.as_secs_f64() * 1e3;
                println!(
                    "{:>6.1} | {:>8} {:>9.1} {:>8.2} | {:>9.1} {:>11.0}% {:>11.1} {:>8} {:>8}",
                    (i * options.interval) as f64 / 60.0,
                    acked - last_acked,
                    rate,
                    rate / rates[0].max(1e-9),
                    probe_ms,
                    (cpu - last_cpu) / options.interval as f64 * 100.0,
                    ms_per_ack,
                    counters.late.load(Ordering::Relaxed),
                    counters.failed.load(Ordering::Relaxed),
                );
                last_acked = acked;
                last_cpu = cpu_seconds(&pids);
            }
            counters.stop.store(true, Ordering::Relaxed);
            (rates, cpu_per_ack)
        }
    };
    let workers = async {
        let mut tasks = vec![];
        let (producer, consumers) = clients.split_first().expect("clients");
        tasks.push(Box::pin(produce(
            producer,
            &counters,
            options.backlog,
            options.send_mutations(),
        ))
            as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>);
        for db in consumers {
            tasks.push(Box::pin(consume(db, &counters, options.effect)));
        }
        futures::future::join_all(tasks).await;
    };
    let ((rates, cpu_per_ack), ()) = tokio::join!(report, workers);
    let ratio = |v: &[f64]| {
        v.last().copied().unwrap_or_default() / v.first().copied().unwrap_or_default().max(1e-9)
    };
    let list = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    println!(
        "{{\"soak_acks_per_s\":[{}],\"soak_last_vs_first\":{:.3},\"soak_cpu_ms_per_ack\":[{}],\"soak_cpu_per_ack_last_vs_first\":{:.3}}}",
        list(&rates),
        ratio(&rates),
        list(&cpu_per_ack),
        ratio(&cpu_per_ack)
    );
    emulator.stop().await;
}
