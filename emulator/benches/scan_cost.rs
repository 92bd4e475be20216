//! What one operation costs as a table accumulates history in the official emulator: the time
//! of reads and DML on a queue table after N of its messages were sent and acked (deleted), and
//! on a plain table holding N live rows. Best of 5 per cell; prints a table, then one JSON line.
//! No assertions.
//!
//! ```text
//! cargo bench -p spanner-queues-emulator --bench scan_cost -- [--levels 0,5000,10000,20000]
//! ```

use std::time::{Duration, Instant};

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use spanner_queues_emulator::{LocalEmulator, LocalEmulatorOptions};

const CHUNK: i64 = 500;

async fn setup(spanner: &Spanner) -> String {
    let instance_admin = spanner
        .instance_admin_builder()
        .build()
        .await
        .expect("admin");
    let instance = google_cloud_spanner_admin_instance_v1::model::Instance::new()
        .set_name("projects/scan/instances/scan")
        .set_config("projects/scan/instanceConfigs/emulator-config")
        .set_display_name("scan")
        .set_node_count(1);
    instance_admin
        .create_instance()
        .set_parent("projects/scan")
        .set_instance_id("scan")
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
        .set_parent("projects/scan/instances/scan")
        .set_create_statement("CREATE DATABASE scan")
        .set_extra_statements([
            "CREATE QUEUE Jobs (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
            "CREATE TABLE Effects (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)",
        ])
        .poller()
        .until_done()
        .await
        .expect("database");
    "projects/scan/instances/scan/databases/scan".to_owned()
}

async fn query(db: &DatabaseClient, sql: &str) {
    let mut rows = db
        .single_use()
        .build()
        .execute_query(Statement::builder(sql))
        .await
        .expect("query");
    while let Some(row) = rows.next().await {
        row.expect("row");
    }
}

async fn dml(db: &DatabaseClient, sql: &str, id: i64) {
    let sql = sql.to_owned();
    db.read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(Statement::builder(sql.clone()).add_param("id", id).build())
                .await
        })
        .await
        .expect("dml");
}

async fn best_of_5<F: AsyncFnMut()>(mut f: F) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        f().await;
        best = best.min(start.elapsed());
    }
    best
}

/// Sends and acks `n` more messages (inserted and deleted in chunks), and inserts `n` more
/// live rows into Effects.
async fn grow(db: &DatabaseClient, from: i64, n: i64) {
    let mut first = from;
    while first < from + n {
        let last = (first + CHUNK).min(from + n);
        db.read_write_transaction()
            .build()
            .run(async |tx| {
                let statements: Vec<Statement> = (first..last)
                    .flat_map(|id| {
                        [
                            Statement::builder("INSERT INTO Jobs (Id, Payload) VALUES (@id, 'x')")
                                .add_param("id", id)
                                .build(),
                            Statement::builder("INSERT INTO Effects (Id, Note) VALUES (@id, 'x')")
                                .add_param("id", id)
                                .build(),
                        ]
                    })
                    .collect();
                tx.execute_batch_update(statements).await
            })
            .await
            .expect("insert");
        dml(db, "DELETE FROM Jobs WHERE Id >= @id", first).await;
        first = last;
    }
}

/// The bench's command line.
#[derive(Debug, clap::Parser)]
#[command(about = "What single reads and DML cost after N acked messages")]
struct Options {
    /// Acked messages after which single reads and DML are measured.
    #[arg(long, value_delimiter = ',', default_values_t = [0_i64, 5_000, 10_000, 20_000])]
    levels: Vec<i64>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[tokio::main]
async fn main() {
    let levels = <Options as clap::Parser>::parse().levels;
    let emulator = LocalEmulator::start(LocalEmulatorOptions::new())
        .await
        .expect("start the emulator (needs the installed Cloud SDK emulator)");
    let spanner = Spanner::builder()
        .with_endpoint(format!("http://{}", emulator.addr()))
        .build()
        .await
        .expect("client");
    let path = setup(&spanner).await;
    let db = spanner.database_client(&path).build().await.expect("db");
    let ops: [(&str, &str); 6] = [
        ("count queue", "SELECT COUNT(*) FROM Jobs"),
        ("queue by key", "SELECT Id FROM Jobs WHERE Id = -1"),
        ("delete queue key", "DELETE FROM Jobs WHERE Id = @id"),
        ("count table", "SELECT COUNT(*) FROM Effects"),
        ("table by key", "SELECT Id FROM Effects WHERE Id = 1"),
        (
            "insert-or-ignore",
            "INSERT OR IGNORE INTO Effects (Id, Note) VALUES (@id, 'y')",
        ),
    ];
    println!(
        "{:>8} | {}",
        "history",
        ops.iter()
            .map(|(n, _)| format!("{n:>17}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut json = Vec::new();
    let mut done = 0_i64;
    for level in levels {
        grow(&db, done, level - done).await;
        done = level;
        let mut cells = Vec::new();
        for (_, sql) in ops {
            let took = if sql.starts_with("SELECT") {
                best_of_5(async || query(&db, sql).await).await
            } else {
                best_of_5(async || dml(&db, sql, -1).await).await
            };
            cells.push(took.as_secs_f64() * 1e3);
        }
        println!(
            "{level:>8} | {}",
            cells
                .iter()
                .map(|ms| format!("{ms:>14.1} ms"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        json.push(format!(
            "{{\"history\":{level},\"ms\":[{}]}}",
            cells
                .iter()
                .map(|c| format!("{c:.2}"))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    println!("{{\"scan_cost\":[{}]}}", json.join(","));
    emulator.stop().await;
}
