//! From polling to queues: the classic outbox table polled with `SELECT … LIMIT 1` and a
//! status `UPDATE`, next to the same workflow on a queue, and the migration between them
//! (producers switch to the queue, the poller stops, the old table is drained into the queue
//! once, in batches, and the worker takes everything from there).
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin polling_migration
//! ```

use std::time::Duration;

use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, QueueMessage, Worker};
use spanner_queues_examples::{Error, count, database, execute, init_tracing};

/// A welcome e-mail, keyed by the id it had in the outbox table: a row drained twice would meet
/// its own queued message (`Error::AlreadyQueued`) instead of becoming a second e-mail.
#[derive(QueueMessage, Debug)]
#[queue(name = "WelcomeEmails")]
struct WelcomeEmail {
    #[queue(key)]
    id: i64,
    recipient: String,
}

// ---------------------------------------------------------------------------------------------
// Before: an outbox table and a poller.
// ---------------------------------------------------------------------------------------------

/// The old producer: the outbox row is written in the business transaction (that part was
/// right, and the queue keeps it).
async fn sign_up_with_outbox(db: &Database, id: i64) -> Result<(), Error> {
    let insert = Statement::builder(
        "INSERT INTO EmailOutbox (Id, Recipient, Status, CreatedAt) \
         VALUES (@id, @to, 'pending', PENDING_COMMIT_TIMESTAMP())",
    )
    .add_param("id", id)
    .add_param("to", format!("user{id}@example.com"))
    .build();
    execute(db, insert).await?;
    Ok(())
}

/// The old consumer, one poll: claim the oldest pending row, do the work, mark it sent, in one
/// transaction. It works, but every poller reads the same first row (under load they abort each
/// other), an empty table costs a query per interval, nothing holds a row while a slow external
/// call runs (that needs a `ClaimedAt` column and a timeout), and retries, backoff and dead
/// letters are yours to write. Returns whether a row was found.
async fn poll_once(db: &Database) -> Result<bool, Error> {
    let found = db
        .transaction()
        .run(|tx| async move {
            let mut rows = tx
                .execute_query(Statement::builder(
                    "SELECT Id FROM EmailOutbox WHERE Status = 'pending' \
                     ORDER BY CreatedAt, Id LIMIT 1",
                ))
                .await?;
            let Some(row) = rows.next().await else {
                return Ok(false);
            };
            let id = row?.get::<i64>(0)?;
            // The work (here: recording the e-mail as sent), then the status update.
            tx.execute_update(
                Statement::builder("INSERT INTO SentEmails (Id, Via) VALUES (@id, 'poller')")
                    .add_param("id", id)
                    .build(),
            )
            .await?;
            tx.execute_update(
                Statement::builder("UPDATE EmailOutbox SET Status = 'sent' WHERE Id = @id")
                    .add_param("id", id)
                    .build(),
            )
            .await?;
            Ok(true)
        })
        .await?;
    Ok(found)
}

// ---------------------------------------------------------------------------------------------
// After: a queue and a worker.
// ---------------------------------------------------------------------------------------------

/// The new producer: the same transaction, with a send instead of the outbox insert.
async fn sign_up(db: &Database, id: i64) -> Result<(), Error> {
    db.transaction()
        .run(move |tx| async move {
            let email = WelcomeEmail {
                id,
                recipient: format!("user{id}@example.com"),
            };
            tx.send(&email).await
        })
        .await?;
    Ok(())
}

/// The new consumer: the same work, in the transaction that acks the message. Leases,
/// renewal, retries with backoff and dead letters come with the worker.
fn email_worker(db: &Database) -> spanner_queues::Result<Worker<WelcomeEmail>> {
    Worker::<WelcomeEmail>::builder(db)
        .transactional(|tx, email, _ctx| async move {
            tx.execute_update(
                Statement::builder("INSERT INTO SentEmails (Id, Via) VALUES (@id, 'queue')")
                    .add_param("id", email.id)
                    .build(),
            )
            .await?;
            Ok(())
        })
        .build()
}

/// The migration step, run once after the poller has stopped: moves pending outbox rows into
/// the queue, a batch per transaction (each batch's sends and status updates commit together,
/// so an interrupted drain is simply run again). Returns the rows moved.
async fn drain_outbox_into_queue(db: &Database, batch: i64) -> Result<usize, Error> {
    let mut moved = 0;
    loop {
        let n = db
            .transaction()
            .run(move |tx| async move {
                let mut rows = tx
                    .execute_query(
                        Statement::builder(
                            "SELECT Id, Recipient FROM EmailOutbox WHERE Status = 'pending' \
                             ORDER BY Id LIMIT @batch",
                        )
                        .add_param("batch", batch)
                        .build(),
                    )
                    .await?;
                let mut pending = Vec::new();
                while let Some(row) = rows.next().await {
                    let row = row?;
                    pending.push(WelcomeEmail {
                        id: row.get::<i64>(0)?,
                        recipient: row.get::<String>(1)?,
                    });
                }
                if pending.is_empty() {
                    return Ok(0);
                }
                tx.send_many(&pending).await?;
                let ids: Vec<i64> = pending.iter().map(|e| e.id).collect();
                tx.execute_update(
                    Statement::builder(
                        "UPDATE EmailOutbox SET Status = 'migrated' WHERE Id IN UNNEST(@ids)",
                    )
                    .add_param("ids", ids)
                    .build(),
                )
                .await?;
                Ok(pending.len())
            })
            .await?;
        if n == 0 {
            return Ok(moved);
        }
        moved += n;
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let (db, harness) = database(
        spanner_queues_testing::setup()
            .with_queue::<WelcomeEmail>()
            .with_ddl([
                "CREATE TABLE EmailOutbox (Id INT64 NOT NULL, Recipient STRING(MAX) NOT NULL, \
                 Status STRING(16) NOT NULL, \
                 CreatedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)) \
                 PRIMARY KEY (Id)",
                "CREATE TABLE SentEmails (Id INT64 NOT NULL, Via STRING(16) NOT NULL) \
                 PRIMARY KEY (Id)",
            ]),
    )
    .await?;

    // 1. Before: ten sign-ups go to the outbox; the poller gets through four of them.
    for id in 1..=10 {
        sign_up_with_outbox(&db, id).await?;
    }
    let mut polled = 0;
    while polled < 4 {
        if poll_once(&db).await? {
            polled += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    println!("before: 10 sign-ups in the outbox, the poller sent {polled}");

    // 2. Deploy the new producers (they send to the queue) and stop the poller. Sign-ups
    //    keep coming during the migration. (Stopping the poller first keeps the story simple;
    //    it is not needed for correctness: the poller and the drain both change a row's
    //    Status in their transaction, so Spanner lets only one of them have it.)
    for id in 11..=13 {
        sign_up(&db, id).await?;
    }
    // 3. Drain what the poller left into the queue, once.
    let moved = drain_outbox_into_queue(&db, 4).await?;
    println!("migration: {moved} pending outbox rows moved into the queue; 3 new sign-ups sent");
    // Running it again is harmless: nothing is pending any more.
    assert_eq!(drain_outbox_into_queue(&db, 4).await?, 0);

    // 4. After: the worker takes everything.
    let stats = harness.drain(&email_worker(&db)?).await?;

    let via: Vec<(String, i64)> = harness
        .query("SELECT Via, COUNT(*) FROM SentEmails GROUP BY Via ORDER BY Via")
        .await?;
    let total = count(&db, "SELECT COUNT(*) FROM SentEmails").await?;
    let pending = count(
        &db,
        "SELECT COUNT(*) FROM EmailOutbox WHERE Status = 'pending'",
    )
    .await?;
    println!(
        "after: e-mails sent {total} of 13 {via:?}; worker acked {}; outbox rows pending {pending}",
        stats.acked
    );
    harness.assert_queue_empty::<WelcomeEmail>().await;
    harness.assert_no_dead_letters::<WelcomeEmail>().await;
    if total != 13 || pending != 0 || moved != 6 || stats.acked != 9 {
        return Err("the migration lost or repeated an e-mail".into());
    }
    println!("every sign-up e-mailed exactly once across the migration");
    Ok(())
}
