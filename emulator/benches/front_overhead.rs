//! How much the queue front costs on calls it only forwards, and how fast queue operations run
//! through it. Prints ratios measured side by side in one run (front / direct), interleaving
//! the two so that machine load affects both alike. No assertions: numbers, not pass/fail.
//!
//! ```text
//! cargo bench -p spanner-queues-emulator --bench front_overhead
//! ```

use std::time::{Duration, Instant};

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use spanner_queues_emulator::{LocalEmulator, LocalEmulatorOptions};

const ROUNDS: usize = 5;
const QUERIES_PER_ROUND: usize = 100;
const COMMITS_PER_ROUND: usize = 40;
const MESSAGES: usize = 300;

async fn client(endpoint: std::net::SocketAddr) -> Spanner {
    Spanner::builder()
        .with_endpoint(format!("http://{endpoint}"))
        .build()
        .await
        .expect("client")
}

async fn setup(spanner: &Spanner) -> String {
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
    let admin = spanner
        .database_admin_builder()
        .build()
        .await
        .expect("admin");
    admin
        .create_database()
        .set_parent("projects/bench/instances/bench")
        .set_create_statement("CREATE DATABASE bench")
        .set_extra_statements([
            "CREATE TABLE Items (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)",
            "CREATE QUEUE Jobs (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
        ])
        .poller()
        .until_done()
        .await
        .expect("database");
    "projects/bench/instances/bench/databases/bench".to_owned()
}

async fn queries(db: &DatabaseClient) -> Duration {
    let start = Instant::now();
    for _ in 0..QUERIES_PER_ROUND {
        let mut rows = db
            .single_use()
            .build()
            .execute_query(Statement::builder("SELECT 1"))
            .await
            .expect("query");
        while rows.next().await.transpose().expect("row").is_some() {}
    }
    start.elapsed()
}

async fn commits(db: &DatabaseClient, base: i64) -> Duration {
    let start = Instant::now();
    for i in 0..COMMITS_PER_ROUND as i64 {
        db.read_write_transaction()
            .build()
            .run(async |tx| {
                tx.execute_update(
                    Statement::builder("INSERT INTO Items (Id, Note) VALUES (@id, 'x')")
                        .add_param("id", base + i)
                        .build(),
                )
                .await
            })
            .await
            .expect("commit");
    }
    start.elapsed()
}

fn per_op(total: Duration, ops: usize) -> f64 {
    total.as_secs_f64() * 1e6 / ops as f64
}

#[tokio::main]
async fn main() {
    let emulator = LocalEmulator::start(LocalEmulatorOptions::new())
        .await
        .expect("start the emulator (needs the installed Cloud SDK emulator)");
    let through_front = client(emulator.addr()).await;
    let path = setup(&through_front).await;
    let front_db = through_front
        .database_client(&path)
        .build()
        .await
        .expect("db");
    let direct = client(emulator.backend_addr()).await;
    let direct_db = direct.database_client(&path).build().await.expect("db");

    // Warm up both paths.
    queries(&front_db).await;
    queries(&direct_db).await;

    let (mut q_front, mut q_direct, mut c_front, mut c_direct) = (
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
    );
    for round in 0..ROUNDS {
        q_front += queries(&front_db).await;
        q_direct += queries(&direct_db).await;
        let base = (round * 2 * COMMITS_PER_ROUND) as i64;
        c_front += commits(&front_db, base).await;
        c_direct += commits(&direct_db, base + COMMITS_PER_ROUND as i64).await;
    }
    let queries_total = ROUNDS * QUERIES_PER_ROUND;
    let commits_total = ROUNDS * COMMITS_PER_ROUND;
    println!("forwarded calls, {ROUNDS} interleaved rounds:");
    println!(
        "  single-use query: front {:8.1} µs/op, direct {:8.1} µs/op, ratio {:.2}",
        per_op(q_front, queries_total),
        per_op(q_direct, queries_total),
        q_front.as_secs_f64() / q_direct.as_secs_f64()
    );
    println!(
        "  DML transaction:  front {:8.1} µs/op, direct {:8.1} µs/op, ratio {:.2}",
        per_op(c_front, commits_total),
        per_op(c_direct, commits_total),
        c_front.as_secs_f64() / c_direct.as_secs_f64()
    );

    // Queue operations (front only: the official emulator has no queues).
    let start = Instant::now();
    for chunk in (0..MESSAGES as i64).collect::<Vec<_>>().chunks(50) {
        front_db
            .read_write_transaction()
            .build()
            .run(async |tx| {
                let statements: Vec<Statement> = chunk
                    .iter()
                    .map(|id| {
                        Statement::builder("INSERT INTO Jobs (Id, Payload) VALUES (@id, 'job')")
                            .add_param("id", *id)
                            .build()
                    })
                    .collect();
                tx.execute_batch_update(statements).await
            })
            .await
            .expect("send");
    }
    let sent = start.elapsed();
    let start = Instant::now();
    let mut received = 0;
    let mut rows = front_db
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT Id FROM RECEIVE_Jobs(max_duration => '30s', max_batch_size => 50)",
        ))
        .await
        .expect("receive");
    while let Some(row) = rows.next().await.transpose().expect("row") {
        let _id: i64 = row.get(0).expect("id");
        received += 1;
        if received == MESSAGES {
            break;
        }
    }
    let receive = start.elapsed();
    println!("queue operations through the front ({MESSAGES} messages):");
    println!(
        "  send (batches of 50): {:8.1} µs/message",
        per_op(sent, MESSAGES)
    );
    println!(
        "  receive (batches of 50, leased): {:8.1} µs/message",
        per_op(receive, MESSAGES)
    );
    emulator.stop().await;
}
