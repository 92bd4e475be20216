//! Throughput of the worker on the embedded emulator, next to the raw transaction rate.
//!
//! ```text
//! cargo run --release -p spanner-queues-examples --bin bench [messages]
//! ```
//!
//! Prints rates and ratios only; the numbers depend on the machine and on the emulator, which
//! runs one read-write transaction per database at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::statement::Statement;
use spanner_queues::transaction::TransactionSettings;
use spanner_queues::{Producer, QueueMessage, Worker};
use spanner_queues_emulator::harness::{self, TestDatabase};

#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "BenchJobs")]
struct BenchJob {
    #[queue(key)]
    id: i64,
    body: String,
}

fn settings() -> TransactionSettings {
    TransactionSettings::default()
        .with_max_attempts(500)
        .with_total_timeout(Duration::from_secs(300))
}

async fn database() -> Result<TestDatabase, Box<dyn std::error::Error>> {
    let mut ddl = vec![
        BenchJob::schema().create_statement(spanner_queues::Dialect::GoogleSql)?,
        "CREATE TABLE BenchEffects (Id INT64 NOT NULL) PRIMARY KEY (Id)".to_owned(),
    ];
    ddl.extend(spanner_queues::worker::schema_statements());
    Ok(harness::try_database(ddl).await?)
}

async fn remaining(db: &DatabaseClient) -> Result<i64, Box<dyn std::error::Error>> {
    let mut rows = db
        .single_use()
        .build()
        .execute_query(Statement::builder("SELECT COUNT(*) FROM BenchJobs"))
        .await?;
    match rows.next().await {
        Some(row) => Ok(row?.get::<i64>(0)?),
        None => Ok(0),
    }
}

/// Sends `n` jobs, runs `workers` workers of `concurrency` handlers until the queue is empty,
/// and returns messages per second.
async fn run_workers(
    n: i64,
    workers: usize,
    concurrency: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let db = database().await?;
    let jobs: Vec<BenchJob> = (0..n)
        .map(|id| BenchJob {
            id,
            body: "x".repeat(64),
        })
        .collect();
    let producer = Producer::new(db.client().clone()).with_settings(settings());
    for chunk in jobs.chunks(200) {
        producer.send_many(chunk).await?;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let client = db.spanner().database_client(db.path()).build().await?;
        let worker = Arc::new(
            Worker::<BenchJob>::builder(client)
                .with_concurrency(concurrency)
                .with_transaction_settings(settings())
                .transactional(|tx, job, _ctx| async move {
                    tx.execute_update(
                        Statement::builder("INSERT INTO BenchEffects (Id) VALUES (@id)")
                            .add_param("id", job.id)
                            .build(),
                    )
                    .await?;
                    Ok(())
                }),
        );
        let mut stopped = stopped.clone();
        tasks.push(tokio::spawn(async move {
            worker
                .run(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
        }));
    }
    while remaining(db.client()).await? > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    for task in tasks {
        task.await??;
    }
    Ok(n as f64 / elapsed.as_secs_f64())
}

/// Read-write transactions per second, one after the other (an insert and a commit each).
async fn sequential_transactions(n: i64) -> Result<f64, Box<dyn std::error::Error>> {
    let db = database().await?;
    let started = Instant::now();
    for id in 0..n {
        spanner_queues::transaction::run_with(db.client(), &settings(), async |tx| {
            tx.execute_update(
                Statement::builder("INSERT INTO BenchEffects (Id) VALUES (@id)")
                    .add_param("id", id)
                    .build(),
            )
            .await
        })
        .await?;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// Blind single-commit writes per second, one after the other.
async fn sequential_blind_writes(n: i64) -> Result<f64, Box<dyn std::error::Error>> {
    let db = database().await?;
    let started = Instant::now();
    for id in 0..n {
        db.client()
            .write_only_transaction()
            .build()
            .write_at_least_once([Mutation::new_insert_builder("BenchEffects")
                .set("Id")
                .to(id)
                .build()])
            .await?;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: i64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(300);
    let tx = sequential_transactions(n).await?;
    println!("read-write transactions, sequential: {tx:.1}/s");
    let blind = sequential_blind_writes(n).await?;
    println!("blind writes, sequential:            {blind:.1}/s");
    for (workers, concurrency) in [(1, 1), (1, 4), (4, 1), (4, 4)] {
        let rate = run_workers(n, workers, concurrency).await?;
        println!(
            "worker throughput, {workers} worker(s) x {concurrency} handler(s): {rate:.1} msg/s \
             ({:.2} messages per sequential transaction time)",
            rate / tx
        );
    }
    Ok(())
}
