//! Read-write transaction admission: N concurrent clients × M small read-write transactions
//! (one DML insert, then commit, through the official client's runner, which retries
//! `ABORTED`), with admission on and off, side by side in one run.
//!
//! Both fronts forward to the same official emulator, each client set to its own database, and
//! the rounds alternate which side runs first, so that machine load affects both alike.
//! Prints throughput and aborts (re-runs per committed transaction) and their ratios, and one
//! JSON line. No assertions: numbers, not pass/fail.
//!
//! ```text
//! cargo bench -p spanner-queues-emulator --bench admission [-- CLIENTS... [--txns M] [--rounds R]]
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use spanner_queues_emulator::front::{DEFAULT_ADMISSION_WAIT, Front, FrontConfig};
use spanner_queues_emulator::{LocalEmulator, LocalEmulatorOptions};

async fn client(endpoint: std::net::SocketAddr) -> Spanner {
    Spanner::builder()
        .with_endpoint(format!("http://{endpoint}"))
        .build()
        .await
        .expect("client")
}

async fn create_instance(spanner: &Spanner) {
    let instance_admin = spanner
        .instance_admin_builder()
        .build()
        .await
        .expect("admin");
    let instance = google_cloud_spanner_admin_instance_v1::model::Instance::new()
        .set_name("projects/bench/instances/bench")
        .set_config("projects/bench/instanceConfigs/emulator-config")
        .set_display_name("bench")
        .set_node_count(1);
    instance_admin
        .create_instance()
        .set_parent("projects/bench")
        .set_instance_id("bench")
        .set_instance(instance)
        .poller()
        .until_done()
        .await
        .expect("instance");
}

/// Creates database `name` through `admin_spanner`, and a data client for it through
/// `spanner`.
async fn create_database(admin_spanner: &Spanner, spanner: &Spanner, name: &str) -> DatabaseClient {
    let admin = admin_spanner
        .database_admin_builder()
        .build()
        .await
        .expect("admin");
    admin
        .create_database()
        .set_parent("projects/bench/instances/bench")
        .set_create_statement(format!("CREATE DATABASE {name}"))
        .set_extra_statements([
            "CREATE TABLE Items (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)",
        ])
        .poller()
        .until_done()
        .await
        .expect("database");
    spanner
        .database_client(format!("projects/bench/instances/bench/databases/{name}"))
        .build()
        .await
        .expect("database client")
}

/// What one side measured in one run.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    committed: u64,
    failed: u64,
    /// Handler runs beyond the first of each transaction (the runner re-ran it after ABORTED).
    reruns: u64,
    elapsed: Duration,
}

impl Run {
    fn add(&mut self, other: Run) {
        self.committed += other.committed;
        self.failed += other.failed;
        self.reruns += other.reruns;
        self.elapsed += other.elapsed;
    }

    fn throughput(&self) -> f64 {
        self.committed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn aborts_per_commit(&self) -> f64 {
        self.reruns as f64 / (self.committed as f64).max(1.0)
    }
}

/// `clients` concurrent clients, each running `txns` transactions one after the other.
async fn run(db: &DatabaseClient, clients: usize, txns: usize, next_id: &AtomicU64) -> Run {
    let runs = AtomicU64::new(0);
    let start = Instant::now();
    let outcomes = futures::future::join_all((0..clients).map(|_| {
        let runs = &runs;
        async move {
            let mut committed = 0u64;
            let mut failed = 0u64;
            for _ in 0..txns {
                let id = next_id.fetch_add(1, Ordering::Relaxed) as i64;
                let result = db
                    .read_write_transaction()
                    .build()
                    .run(async |tx| {
                        runs.fetch_add(1, Ordering::Relaxed);
                        tx.execute_update(
                            Statement::builder("INSERT INTO Items (Id, Note) VALUES (@id, 'x')")
                                .add_param("id", id)
                                .build(),
                        )
                        .await
                    })
                    .await;
                match result {
                    Ok(_) => committed += 1,
                    Err(_) => failed += 1,
                }
            }
            (committed, failed)
        }
    }))
    .await;
    let elapsed = start.elapsed();
    let committed = outcomes.iter().map(|o| o.0).sum();
    let failed = outcomes.iter().map(|o| o.1).sum();
    let total_runs = runs.load(Ordering::Relaxed);
    Run {
        committed,
        failed,
        reruns: total_runs.saturating_sub(committed + failed),
        elapsed,
    }
}

/// The bench's command line.
#[derive(Debug, clap::Parser)]
#[command(
    about = "Read-write admission on and off, side by side: N clients each committing insert transactions through the official Rust client"
)]
struct Options {
    /// Numbers of concurrent clients to compare [default: 1 4 8].
    clients: Vec<usize>,
    /// Transactions per client and round.
    #[arg(long, default_value_t = 20)]
    txns: usize,
    /// Interleaved rounds (admission on, then off).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn options() -> Options {
    let mut options = <Options as clap::Parser>::parse();
    if options.clients.is_empty() {
        options.clients = vec![1, 4, 8];
    }
    options
}

#[tokio::main]
async fn main() {
    let options = options();
    let emulator = LocalEmulator::start(LocalEmulatorOptions::new())
        .await
        .expect("start the emulator (needs the installed Cloud SDK emulator)");
    // Two fronts on the same official emulator, alike but for admission (the emulator's own
    // front, with its REST gateway, serves the admin calls).
    let loopback = [std::net::SocketAddr::from(([127, 0, 0, 1], 0))];
    let on_front = Front::start(
        FrontConfig::new(emulator.backend_addr()).with_admission_wait(Some(DEFAULT_ADMISSION_WAIT)),
        &loopback,
    )
    .await
    .expect("front with admission");
    let off_front = Front::start(
        FrontConfig::new(emulator.backend_addr()).with_admission_wait(None),
        &loopback,
    )
    .await
    .expect("front without admission");
    let admin_spanner = client(emulator.addr()).await;
    let on_spanner = client(on_front.addrs()[0]).await;
    let off_spanner = client(off_front.addrs()[0]).await;
    // Admin calls (REST in this client) go through the main front, which has the gateway.
    create_instance(&admin_spanner).await;
    let next_id = AtomicU64::new(1);
    println!(
        "read-write admission: N clients x {} transactions (insert + commit), {} interleaved rounds",
        options.txns, options.rounds
    );
    println!(
        "{:>8} | {:>12} {:>12} {:>7} | {:>13} {:>13} | {:>6} {:>6}",
        "clients",
        "on txn/s",
        "off txn/s",
        "on/off",
        "on aborts/txn",
        "off aborts/txn",
        "on err",
        "off err"
    );
    let mut json = Vec::new();
    for &clients in &options.clients {
        let on_db = create_database(&admin_spanner, &on_spanner, &format!("on{clients}")).await;
        let off_db = create_database(&admin_spanner, &off_spanner, &format!("off{clients}")).await;
        // Warm up both paths (sessions, channels).
        run(&on_db, 1, 2, &next_id).await;
        run(&off_db, 1, 2, &next_id).await;
        let (mut on, mut off) = (Run::default(), Run::default());
        for round in 0..options.rounds {
            if round % 2 == 0 {
                on.add(run(&on_db, clients, options.txns, &next_id).await);
                off.add(run(&off_db, clients, options.txns, &next_id).await);
            } else {
                off.add(run(&off_db, clients, options.txns, &next_id).await);
                on.add(run(&on_db, clients, options.txns, &next_id).await);
            }
        }
        let ratio = on.throughput() / off.throughput().max(1e-9);
        println!(
            "{:>8} | {:>12.1} {:>12.1} {:>7.2} | {:>13.3} {:>13.3} | {:>6} {:>6}",
            clients,
            on.throughput(),
            off.throughput(),
            ratio,
            on.aborts_per_commit(),
            off.aborts_per_commit(),
            on.failed,
            off.failed,
        );
        json.push(format!(
            "\"admission_{clients}\":{{\"on_txn_per_s\":{:.2},\"off_txn_per_s\":{:.2},\
             \"on_vs_off\":{:.3},\"on_aborts_per_txn\":{:.4},\"off_aborts_per_txn\":{:.4},\
             \"on_failed\":{},\"off_failed\":{}}}",
            on.throughput(),
            off.throughput(),
            ratio,
            on.aborts_per_commit(),
            off.aborts_per_commit(),
            on.failed,
            off.failed
        ));
    }
    println!("{{{}}}", json.join(","));
    on_front.shutdown();
    off_front.shutdown();
    emulator.stop().await;
}
