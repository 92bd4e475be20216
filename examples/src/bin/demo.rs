//! The main demo: an embedded queue-aware emulator, orders placed with their confirmation
//! e-mails in one transaction each, and a worker that sends the e-mails exactly once.
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin demo
//! ```

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use google_cloud_spanner::statement::Statement;
use indicatif::{ProgressBar, ProgressStyle};
use spanner_queues::{HandlerError, QueueMessage, Worker};
use spanner_queues_examples::{Error, count, database, init_tracing};
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

/// Progress on stderr: a bar on a terminal, a plain line every second otherwise (CI logs).
struct Progress {
    bar: Option<ProgressBar>,
    label: &'static str,
    total: u64,
    last_line: Option<Instant>,
}

impl Progress {
    fn new(label: &'static str, total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {msg}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.set_prefix(label);
            bar
        });
        Self {
            bar,
            label,
            total,
            last_line: None,
        }
    }

    fn update(&mut self, done: u64, note: &str) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(note.to_owned());
            return;
        }
        let due = self
            .last_line
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        if due || done == self.total {
            eprintln!("{}: {done}/{} {note}", self.label, self.total);
            self.last_line = Some(Instant::now());
        }
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear(); // the summary lines that follow say the rest
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();

    // 1. A database with the queue (DDL from the message type), a business table, the
    //    worker's own tables and the commit markers, in one call.
    let (db, _harness) = database(harness::setup().with_queue::<OrderEmail>().with_ddl([
        "CREATE TABLE Orders (OrderId INT64 NOT NULL, Status STRING(20) NOT NULL, \
         Emails INT64 NOT NULL, EmailedAt TIMESTAMP) PRIMARY KEY (OrderId)",
    ]))
    .await?;

    // 2. Place orders: each order row and its e-mail message commit together.
    let mut placing = Progress::new("placing", ORDERS as u64);
    for order_id in 1..=ORDERS as i64 {
        let email = OrderEmail {
            order_id,
            to: format!("customer{order_id}@example.com"),
        };
        db.transaction()
            .run(move |tx| async move {
                tx.execute_update(
                    Statement::builder(
                        "INSERT INTO Orders (OrderId, Status, Emails) VALUES (@id, 'placed', 0)",
                    )
                    .add_param("id", order_id)
                    .build(),
                )
                .await?;
                tx.send(&email).await?;
                Ok(())
            })
            .await?;
        placing.update(order_id as u64, "orders placed");
    }
    placing.finish();
    let sent = count(&db, "SELECT COUNT(*) FROM OrderEmails").await?;
    println!("placed {ORDERS} orders; {sent} e-mails queued");

    // 3. A worker: marks the order as e-mailed in the transaction that acks the message. Order 7
    //    fails once (a flaky mail server), to show a retry.
    let flaked = Arc::new(AtomicBool::new(false));
    let worker = {
        let flaked = Arc::clone(&flaked);
        Worker::<OrderEmail>::builder(&db)
            .with_concurrency(2)
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
                    // `Emails` counts how often the effect was applied: a duplicate would
                    // leave a 2 there.
                    tx.execute_update(
                        Statement::builder(
                            "UPDATE Orders SET Status = 'emailed', Emails = Emails + 1, \
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
            .build()?
            .spawn()
    };

    // 4. Wait until every e-mail is out, then shut the worker down.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    let mut emailing = Progress::new("e-mailing", ORDERS as u64);
    loop {
        // The queue first: once it is empty, every order row already says so.
        let left = count(&db, "SELECT COUNT(*) FROM OrderEmails").await?;
        let emailed = count(&db, "SELECT COUNT(*) FROM Orders WHERE Status = 'emailed'").await?;
        let retried = worker.stats().retried;
        emailing.update(emailed as u64, &format!("e-mailed, {retried} retried"));
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err("the worker did not finish within two minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    emailing.finish();
    let elapsed = started.elapsed();
    let stats = worker.shutdown().await?;

    let emailed = count(&db, "SELECT COUNT(*) FROM Orders WHERE Status = 'emailed'").await?;
    // Effects applied more than once: what exactly-once processing keeps at zero.
    let duplicates = count(
        &db,
        "SELECT IFNULL(SUM(Emails - 1), 0) FROM Orders WHERE Emails > 1",
    )
    .await?;
    let dead = db.dead_letters().list(&OrderEmail::QUEUE, 10).await?;
    println!("worker done in {elapsed:.1?}:");
    println!(
        "  leases renewed {}, lost {}",
        stats.receiver.renewed, stats.receiver.lease_lost
    );
    println!(
        "  order 7 (its first attempt failed): {} row e-mailed",
        count(
            &db,
            "SELECT COUNT(*) FROM Orders WHERE OrderId = 7 AND Status = 'emailed'"
        )
        .await?
    );
    println!(
        "  orders e-mailed: {emailed} of {ORDERS}; messages left: 0; dead letters: {}",
        dead.len()
    );
    println!("summary:");
    println!("  sent:          {sent}");
    println!("  processed:     {}", stats.acked);
    println!("  retried:       {}", stats.retried);
    println!("  dead-lettered: {}", stats.dead_lettered);
    println!("  duplicates:    {duplicates}");
    if emailed != ORDERS as i64 || !dead.is_empty() || duplicates != 0 {
        return Err("some orders were not e-mailed exactly once".into());
    }
    println!("every order e-mailed exactly once");
    Ok(())
}
