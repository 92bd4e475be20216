//! The main demo: an embedded queue-aware emulator, orders placed with their confirmation
//! e-mails in one transaction each, and a worker that sends the e-mails exactly once.
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin demo
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;
use spanner_queues::transaction::TransactionSettings;
use spanner_queues::worker::DeadLetters;
use spanner_queues::{HandlerError, Queue, QueueMessage, Worker};
use spanner_queues_testing as harness;

/// A confirmation e-mail to send for an order.
#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
    to: String,
}

const ORDERS: usize = 36;

type Error = Box<dyn std::error::Error + Send + Sync>;

async fn count(db: &DatabaseClient, sql: &str) -> Result<i64, Error> {
    let mut rows = db
        .single_use()
        .build()
        .execute_query(Statement::builder(sql))
        .await?;
    match rows.next().await {
        Some(row) => Ok(row?.get::<i64>(0)?),
        None => Ok(0),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();

    // 1. A database with the queue (DDL from the message type), a business table, the
    //    worker's own tables and the commit markers, in one call.
    let db = harness::setup()
        .with_queue::<OrderEmail>()
        .with_ddl([
            "CREATE TABLE Orders (OrderId INT64 NOT NULL, Status STRING(20) NOT NULL, \
             EmailedAt TIMESTAMP) PRIMARY KEY (OrderId)",
        ])
        .try_create()
        .await?;
    let client = db.client().clone();
    println!("database {} ({})", db.path(), db.mode());
    // The emulator runs one read-write transaction per database at a time: be patient.
    let settings = TransactionSettings::default().with_max_attempts(100);

    // 2. Place orders: each order row and its e-mail message commit together.
    let emails = Queue::<OrderEmail>::new();
    for order_id in 1..=ORDERS as i64 {
        let email = OrderEmail {
            order_id,
            to: format!("customer{order_id}@example.com"),
        };
        let (emails, email) = (&emails, &email);
        spanner_queues::transaction::builder(&client)
            .with_settings(settings.clone())
            .run(move |tx| async move {
                tx.execute_update(
                    Statement::builder(
                        "INSERT INTO Orders (OrderId, Status) VALUES (@id, 'placed')",
                    )
                    .add_param("id", order_id)
                    .build(),
                )
                .await?;
                emails.send(&tx, email).await?;
                Ok(())
            })
            .await?;
    }
    println!(
        "placed {ORDERS} orders; {} e-mails queued",
        count(&client, "SELECT COUNT(*) FROM OrderEmails").await?
    );

    // 3. A worker: marks the order as e-mailed in the transaction that acks the message. Order 7
    //    fails once (a flaky mail server), to show a retry.
    let flaked = Arc::new(AtomicBool::new(false));
    let worker = {
        let flaked = Arc::clone(&flaked);
        Worker::<OrderEmail>::builder(client.clone())
            .with_concurrency(2)
            .with_transaction_settings(settings.clone())
            .with_redelivery_policy(
                spanner_queues::RedeliveryPolicy::default()
                    .with_initial_delay(Duration::from_millis(500)),
            )
            .transactional(move |tx, email, _ctx| {
                let flaked = Arc::clone(&flaked);
                async move {
                    if email.order_id == 7 && !flaked.swap(true, Ordering::SeqCst) {
                        return Err(HandlerError::msg("mail server busy"));
                    }
                    tx.execute_update(
                        Statement::builder(
                            "UPDATE Orders SET Status = 'emailed', \
                                 EmailedAt = CURRENT_TIMESTAMP() WHERE OrderId = @id",
                        )
                        .add_param("id", email.order_id)
                        .build(),
                    )
                    .await?;
                    // No printing here: the runner re-runs this body when Spanner aborts
                    // the transaction; only effects inside the transaction happen once.
                    Ok(())
                }
            })
            .spawn()
    };

    // 4. Wait until every e-mail is out, then shut the worker down.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    while count(&client, "SELECT COUNT(*) FROM OrderEmails").await? > 0 {
        if Instant::now() > deadline {
            return Err("the worker did not finish within two minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let elapsed = started.elapsed();
    let stats = worker.shutdown().await?;

    let emailed = count(
        &client,
        "SELECT COUNT(*) FROM Orders WHERE Status = 'emailed'",
    )
    .await?;
    let dead = DeadLetters::new(client.clone())
        .list::<OrderEmail>(10)
        .await?;
    println!("worker done in {elapsed:.1?}:");
    println!(
        "  acked {}, retried {}, dead-lettered {}",
        stats.acked, stats.retried, stats.dead_lettered
    );
    println!(
        "  leases renewed {}, lost {}",
        stats.receiver.renewed, stats.receiver.lease_lost
    );
    println!(
        "  order 7 (its first attempt failed): {} row e-mailed",
        count(
            &client,
            "SELECT COUNT(*) FROM Orders WHERE OrderId = 7 AND Status = 'emailed'"
        )
        .await?
    );
    println!(
        "  orders e-mailed: {emailed} of {ORDERS}; messages left: 0; dead letters: {}",
        dead.len()
    );
    if emailed != ORDERS as i64 || !dead.is_empty() {
        return Err("some orders were not e-mailed".into());
    }
    println!("every order e-mailed exactly once");
    Ok(())
}
