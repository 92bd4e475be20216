//! Notification fan-out with batch handlers: shipment events become in-app notifications and
//! push-notification tasks, a batch of events per transaction; the push tasks go to a push
//! provider's bulk API, a batch per call.
//!
//! - A **transactional batch handler** takes up to 50 events at once. For the whole batch it
//!   writes the notification rows and sends one push task per event, and the worker acks the
//!   events in the same transaction: one commit for 50 messages instead of 50.
//! - An **external batch handler** hands up to 25 push tasks to the provider in one call, each
//!   with its idempotency key, and fails the tasks the provider refuses: a device that is no
//!   longer registered is dead-lettered on its own, the rest of the batch is acked.
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin notification_fanout
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use google_cloud_spanner::mutation::Mutation;
use spanner_queues::worker::{Batch, BatchOutcome};
use spanner_queues::{Database, HandlerError, QueueMessage, Worker};
use spanner_queues_examples::{Error, count, database, init_tracing, wait_for};

/// A shipment left the warehouse: tell the customer.
#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "ShipmentEvents")]
struct Shipped {
    #[queue(key)]
    event_id: i64,
    user_id: i64,
}

/// A push notification to deliver to the customer's phone.
#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "PushTasks")]
struct Push {
    #[queue(key)]
    event_id: i64,
    user_id: i64,
}

const EVENTS: i64 = 200;
const USERS: i64 = 40;
/// The user whose phone is no longer registered with the push provider.
const UNREGISTERED: i64 = 13;

/// The push provider's bulk API, in this process: it remembers every idempotency key it has
/// accepted, so a repeated call (a batch delivered again) sends nothing twice.
#[derive(Default)]
struct PushProvider {
    delivered: Mutex<HashMap<String, u32>>,
}

impl PushProvider {
    /// Sends one push per `(idempotency key, user)`; returns, per request, whether the device
    /// is registered.
    fn send_many(&self, requests: &[(String, i64)]) -> Vec<bool> {
        let mut delivered = self.delivered.lock().unwrap_or_else(|e| e.into_inner());
        requests
            .iter()
            .map(|(key, user)| {
                if *user == UNREGISTERED {
                    return false;
                }
                *delivered.entry(key.clone()).or_default() += 1;
                true
            })
            .collect()
    }
}

/// Stage 1: each batch of events writes its notifications and sends its push tasks, and is
/// acked, in one transaction.
fn fan_out(db: &Database) -> spanner_queues::Result<Worker<Shipped>> {
    Worker::<Shipped>::builder(db)
        .with_batch_size(50)
        .transactional_batch(|tx, events: Batch<Shipped>| async move {
            // Insert mutations: a second notification for an event would fail the commit.
            tx.buffer(events.messages().map(|event| {
                Mutation::new_insert_builder("Notifications")
                    .set("EventId")
                    .to(event.event_id)
                    .set("UserId")
                    .to(event.user_id)
                    .set("Text")
                    .to(format!(
                        "Your order is on its way (event {})",
                        event.event_id
                    ))
                    .build()
            }))?;
            let pushes: Vec<Push> = events
                .messages()
                .map(|event| Push {
                    event_id: event.event_id,
                    user_id: event.user_id,
                })
                .collect();
            tx.send_many(&pushes).await?;
            Ok(BatchOutcome::new())
        })
        .build()
}

/// Stage 2: each batch of push tasks is one call to the provider; refused devices are
/// dead-lettered, the other tasks acked together.
fn deliver(db: &Database, provider: Arc<PushProvider>) -> spanner_queues::Result<Worker<Push>> {
    Worker::<Push>::builder(db)
        .with_batch_size(25)
        .external_batch(move |pushes: Batch<Push>| {
            let provider = Arc::clone(&provider);
            async move {
                let requests: Vec<(String, i64)> = pushes
                    .iter()
                    .map(|(push, ctx)| (ctx.idempotency_key(), push.user_id))
                    .collect();
                let mut outcome = BatchOutcome::new();
                for (i, registered) in provider.send_many(&requests).into_iter().enumerate() {
                    if !registered {
                        outcome.fail(i, HandlerError::dead_letter("device token unregistered"));
                    }
                }
                Ok(outcome)
            }
        })
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let (db, harness) = database(
        spanner_queues_testing::setup()
            .with_queue::<Shipped>()
            .with_queue::<Push>()
            .with_ddl([
                "CREATE TABLE Notifications (EventId INT64 NOT NULL, UserId INT64 NOT NULL, \
                 Text STRING(MAX) NOT NULL) PRIMARY KEY (EventId)",
            ]),
    )
    .await?;
    let events: Vec<Shipped> = (1..=EVENTS)
        .map(|event_id| Shipped {
            event_id,
            user_id: event_id % USERS,
        })
        .collect();
    for chunk in events.chunks(100) {
        db.transaction()
            .run(move |tx| async move { tx.send_many(chunk).await })
            .await?;
    }
    println!("{EVENTS} shipment events sent");

    let provider = Arc::new(PushProvider::default());
    let fan_out = fan_out(&db)?.spawn();
    let deliver = deliver(&db, Arc::clone(&provider))?.spawn();
    let refused = EVENTS / USERS;
    wait_for(
        "every push task to be settled",
        Duration::from_secs(180),
        || {
            let db = db.clone();
            async move {
                Ok(
                    count(&db, "SELECT COUNT(*) FROM ShipmentEvents").await? == 0
                        && count(&db, "SELECT COUNT(*) FROM PushTasks").await? == 0
                        && count(&db, "SELECT COUNT(*) FROM Notifications").await? == EVENTS,
                )
            }
        },
    )
    .await?;
    let first = fan_out.shutdown().await?;
    let second = deliver.shutdown().await?;

    let notifications = count(&db, "SELECT COUNT(*) FROM Notifications").await?;
    let per_commit = first.acked as f64 / first.batches.max(1) as f64;
    println!(
        "fan-out: {} events in {} batches ({per_commit:.1} per commit)",
        first.acked, first.batches
    );
    println!("notifications: {notifications} for {EVENTS} events");
    let delivered = provider
        .delivered
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let duplicates: u32 = delivered.values().map(|n| n - 1).sum();
    println!(
        "pushes: {} delivered in {} provider calls, {} acked, {} dead-lettered",
        delivered.len(),
        second.batches,
        second.acked,
        second.dead_lettered
    );
    let letters = db.dead_letters().list(&Push::QUEUE, 100).await?;
    for letter in &letters {
        println!("dead letter {}: {}", letter.key(), letter.error());
    }
    harness.assert_queue_empty::<Shipped>().await;
    harness.assert_queue_empty::<Push>().await;
    harness.assert_no_dead_letters::<Shipped>().await;
    if notifications != EVENTS
        || delivered.len() as i64 != EVENTS - refused
        || letters.len() as i64 != refused
        || duplicates != 0
    {
        return Err("each event should be notified once, and pushed once unless refused".into());
    }
    println!(
        "every event notified once; {} pushes, duplicates: 0; {refused} unregistered devices \
         dead-lettered alone",
        EVENTS - refused
    );
    Ok(())
}
