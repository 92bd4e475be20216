//! Agent follow-up: an agent's investigation result and its "create a ticket" task commit
//! together. A worker calls a (local) ticket service with the message's idempotency key and
//! records the ticket id in the transaction that acks the task.
//!
//! The example kills the worker process between the ticket call and the ack, as a crash would.
//! The message comes back once its lease expires, the next worker calls the ticket service
//! again with the same key, gets the same ticket, and records it: one ticket, not two.
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin agent_followup
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, HandlerError, QueueMessage, Worker};
use spanner_queues_examples::{
    Error, WorkerProcess, connect_from_env, count, database, init_tracing, role, say, serve_local,
};

/// Open a ticket for an investigation's finding.
#[derive(QueueMessage, Debug)]
#[queue(name = "TicketTasks")]
struct CreateTicket {
    #[queue(key)]
    investigation_id: String,
    title: String,
}

/// The agent's result and the follow-up task commit together, or neither does.
async fn record_investigation(db: &Database, id: &str, finding: &str) -> Result<(), Error> {
    db.transaction()
        .run(move |tx| async move {
            tx.execute_update(
                Statement::builder(
                    "INSERT INTO Investigations (Id, Finding) VALUES (@id, @finding)",
                )
                .add_param("id", id)
                .add_param("finding", finding)
                .build(),
            )
            .await?;
            let task = CreateTicket {
                investigation_id: id.to_owned(),
                title: format!("Follow up: {finding}"),
            };
            tx.send(&task).await
        })
        .await?;
    Ok(())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct NewTicket {
    title: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct TicketReply {
    ticket_id: String,
}

/// The worker. With `crash_before_ack`, it stops dead after the ticket call (and the example
/// kills its process there).
fn ticket_worker(
    db: &Database,
    tickets_url: String,
    crash_before_ack: bool,
) -> spanner_queues::Result<Worker<CreateTicket>> {
    let http = reqwest::Client::new();
    Worker::<CreateTicket>::builder(db)
        .transactional(move |tx, task, ctx| {
            let (http, url) = (http.clone(), tickets_url.clone());
            async move {
                // 1. The external call, outside Spanner: it may run more than once (after a
                //    crash, or when Spanner aborts this transaction and the body runs again).
                //    The idempotency key is derived from the queue and the message key, so
                //    every delivery of this message presents the same one.
                let ticket: TicketReply = http
                    .post(url)
                    .header("idempotency-key", ctx.idempotency_key())
                    .json(&NewTicket {
                        title: task.title.clone(),
                    })
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                if crash_before_ack {
                    say(&format!(
                        "ticket {} created for investigation {}; crashing before the ack",
                        ticket.ticket_id, task.investigation_id
                    ));
                    std::future::pending::<()>().await;
                }
                // 2. Record the ticket; the worker acks the task in this same transaction.
                tx.execute_update(
                    Statement::builder(
                        "UPDATE Investigations SET TicketId = @ticket WHERE Id = @id",
                    )
                    .add_param("ticket", ticket.ticket_id)
                    .add_param("id", task.investigation_id.clone())
                    .build(),
                )
                .await?;
                Ok::<(), HandlerError>(())
            }
        })
        .build()
}

/// The ticket system: creating a ticket with a key seen before returns that ticket.
#[derive(Default)]
struct TicketService {
    /// Idempotency key -> ticket id.
    tickets: Mutex<HashMap<String, String>>,
    requests: AtomicU64,
}

async fn create_ticket(
    State(service): State<Arc<TicketService>>,
    headers: HeaderMap,
    Json(_ticket): Json<NewTicket>,
) -> Result<Json<TicketReply>, StatusCode> {
    service.requests.fetch_add(1, Ordering::SeqCst);
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .ok_or(StatusCode::BAD_REQUEST)?;
    let mut tickets = service.tickets.lock().expect("not poisoned");
    let next = format!("TCK-{}", 1000 + tickets.len() + 1);
    let ticket_id = tickets.entry(key.to_owned()).or_insert(next).clone();
    Ok(Json(TicketReply { ticket_id }))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    if role().as_deref() == Some("crash-before-ack") {
        // The worker process the example kills.
        let url = std::env::var("TICKETS_URL")?;
        let _worker = ticket_worker(&connect_from_env().await?, url, true)?.spawn();
        std::future::pending::<()>().await;
    }

    let (db, harness) = database(
        spanner_queues_testing::setup()
            .with_queue::<CreateTicket>()
            .with_ddl([
                "CREATE TABLE Investigations (Id STRING(36) NOT NULL, Finding STRING(MAX) NOT NULL, \
                 TicketId STRING(16)) PRIMARY KEY (Id)",
            ]),
    )
    .await?;
    let service = Arc::new(TicketService::default());
    let address = serve_local(
        Router::new()
            .route("/tickets", post(create_ticket))
            .with_state(Arc::clone(&service)),
    )
    .await?;
    let url = format!("http://{address}/tickets");

    let id = uuid::Uuid::new_v4().to_string();
    record_investigation(&db, &id, "disk 3 on db-7 reports media errors").await?;
    println!("investigation {id} recorded with its ticket task");

    // A worker in its own process takes the task, creates the ticket, and is killed (SIGKILL)
    // before its transaction commits.
    let mut crashing = WorkerProcess::start(
        &harness,
        "crash-before-ack",
        &[("TICKETS_URL", url.clone())],
    )?;
    crashing
        .wait_for_line("crashing before the ack", Duration::from_secs(120))
        .await?;
    crashing.kill().await?;
    let recorded = count(
        &db,
        "SELECT COUNT(*) FROM Investigations WHERE TicketId IS NOT NULL",
    )
    .await?;
    let queued = count(&db, "SELECT COUNT(*) FROM TicketTasks").await?;
    let created = service.tickets.lock().expect("not poisoned").len();
    println!(
        "worker killed: tickets created {created}, ticket ids recorded {recorded}, \
         tasks queued {queued}"
    );

    // A healthy worker. The task is delivered again when the dead worker's lease expires
    // (about 10 s); the ticket service answers the repeated call with the same ticket.
    let worker = ticket_worker(&db, url, false)?.spawn();
    spanner_queues_examples::wait_for(
        "the ticket id to be recorded",
        Duration::from_secs(120),
        || {
            let db = db.clone();
            async move {
                Ok(count(
                    &db,
                    "SELECT COUNT(*) FROM Investigations WHERE TicketId IS NOT NULL",
                )
                .await?
                    == 1)
            }
        },
    )
    .await?;
    let stats = worker.shutdown().await?;
    let tickets = service.tickets.lock().expect("not poisoned").clone();
    let recorded: Vec<(String,)> = harness.query("SELECT TicketId FROM Investigations").await?;
    println!(
        "after the restart: ticket service calls {}, tickets created {}, recorded {:?}, acked {}",
        service.requests.load(Ordering::SeqCst),
        tickets.len(),
        recorded.first().map(|r| r.0.as_str()),
        stats.acked
    );
    harness.assert_queue_empty::<CreateTicket>().await;
    let only = tickets.values().next();
    if tickets.len() != 1 || only.map(String::as_str) != recorded.first().map(|r| r.0.as_str()) {
        return Err("expected exactly one ticket, the one recorded".into());
    }
    println!("duplicates: 0 (one ticket despite the crash between the call and the ack)");
    Ok(())
}
