//! A production-shaped worker, the one the README's "Writing a worker" guide shows.
//!
//! ```text
//! SPANNER_DATABASE=projects/P/instances/I/databases/D cargo run -p spanner-queues-examples --bin worker
//! ```
//!
//! It needs the `Orders` table, the `OrderEmails` queue and the worker tables
//! (`SchemaSetup::new().with_queue::<OrderEmail>().with_worker_tables()` creates the last two);
//! set `SPANNER_EMULATOR_HOST` to run it against an emulator. Ctrl-C shuts it down gracefully.

use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, QueueMessage, SchemaSetup, Worker};

#[derive(QueueMessage, Debug)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
    to: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().init();
    let db = Database::connect(std::env::var("SPANNER_DATABASE")?).await?;
    // Fail fast when the queue or the worker's tables do not match.
    let schema = SchemaSetup::new()
        .with_queue::<OrderEmail>()
        .with_worker_tables();
    schema.check(&db).await?;
    let worker = Worker::<OrderEmail>::builder(&db)
        .with_concurrency(16)
        .with_max_attempts(8)
        .transactional(|tx, email, _ctx| async move {
            // Applied exactly once: the worker acks the message in this same transaction.
            let update =
                Statement::builder("UPDATE Orders SET Status = 'emailed' WHERE OrderId = @id")
                    .add_param("id", email.order_id)
                    .build();
            tx.execute_update(update).await?;
            Ok(())
        })
        .build()?;
    // The worker runs on its own task; a web server could run next to it.
    let worker = worker.spawn();
    tokio::signal::ctrl_c().await?;
    // Graceful: running handlers finish (or are released for redelivery), nothing is lost.
    let stats = worker.shutdown().await?;
    tracing::info!(
        acked = stats.acked,
        dead_lettered = stats.dead_lettered,
        "worker stopped"
    );
    Ok(())
}
