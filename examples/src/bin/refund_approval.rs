//! Refund approval: a refund request schedules a manager escalation for later; approving the
//! refund first updates it, sends `ExecuteRefund` and cancels the escalation, all in one
//! transaction. A worker pays the refund through a (local) payment service with the message's
//! idempotency key, so a lost reply and its retry pay once.
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin refund_approval
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
use spanner_queues::{Database, HandlerError, QueueMessage, RedeliveryPolicy, SendOptions, Worker};
use spanner_queues_examples::{Error, count, database, init_tracing, serve_local};

/// Pay a refund back to the customer.
#[derive(QueueMessage, Debug)]
#[queue(name = "ExecuteRefunds")]
struct ExecuteRefund {
    #[queue(key)]
    refund_id: i64,
    amount_cents: i64,
}

/// Tell a manager that a refund waits for a decision.
#[derive(QueueMessage, Debug)]
#[queue(name = "RefundEscalations")]
struct EscalateRefund {
    #[queue(key)]
    refund_id: i64,
}

/// How long a refund may wait for approval before a manager is asked. A day in production;
/// a few seconds here.
const ESCALATE_AFTER: Duration = Duration::from_secs(4);

/// A customer asks for a refund: the request and its (future) escalation commit together.
async fn request_refund(db: &Database, refund_id: i64, cents: i64) -> Result<(), Error> {
    db.transaction()
        .run(move |tx| async move {
            tx.execute_update(
                Statement::builder(
                    "INSERT INTO Refunds (RefundId, AmountCents, Status) \
                     VALUES (@id, @cents, 'requested')",
                )
                .add_param("id", refund_id)
                .add_param("cents", cents)
                .build(),
            )
            .await?;
            let escalation = EscalateRefund { refund_id };
            let later = SendOptions::new().deliver_after(ESCALATE_AFTER);
            tx.send_with(&escalation, later).await
        })
        .await?;
    Ok(())
}

/// A manager approves: the refund's status, the payment order and the cancelled escalation
/// commit together. Returns whether an escalation was still pending.
async fn approve_refund(db: &Database, refund_id: i64) -> Result<bool, Error> {
    let cancelled = db
        .transaction()
        .run(move |tx| async move {
            let mut rows = tx
                .execute_query(
                    Statement::builder(
                        "UPDATE Refunds SET Status = 'approved' \
                         WHERE RefundId = @id AND Status = 'requested' THEN RETURN AmountCents",
                    )
                    .add_param("id", refund_id)
                    .build(),
                )
                .await?;
            let Some(row) = rows.next().await else {
                // Already decided (escalated, or approved twice): nothing to send.
                return Ok(false);
            };
            let amount_cents = row?.get::<i64>(0)?;
            tx.send(&ExecuteRefund {
                refund_id,
                amount_cents,
            })
            .await?;
            // Gone already if it fired; then the escalation worker's own check (the status is
            // no longer 'requested') makes it a no-op.
            tx.cancel::<EscalateRefund>(&refund_id).await
        })
        .await?;
    Ok(cancelled)
}

/// The payment provider's API, reduced to what matters: a refund keyed by an idempotency key.
#[derive(Default)]
struct PaymentService {
    /// Idempotency key -> payment reference.
    payments: Mutex<HashMap<String, String>>,
    requests: AtomicU64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RefundRequest {
    refund_id: i64,
    amount_cents: i64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RefundReply {
    payment: String,
}

async fn pay_refund(
    State(service): State<Arc<PaymentService>>,
    headers: HeaderMap,
    Json(request): Json<RefundRequest>,
) -> Result<Json<RefundReply>, StatusCode> {
    let n = service.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .ok_or(StatusCode::BAD_REQUEST)?
        .to_owned();
    let (payment, first) = {
        let mut payments = service.payments.lock().expect("not poisoned");
        let known = payments.len();
        let payment = payments
            .entry(key)
            .or_insert_with(|| format!("pay_{}_{}", request.refund_id, known + 1));
        (payment.clone(), n == 1)
    };
    if first {
        // The very first refund is paid, but its reply is lost on the way back: the worker
        // sees an error and retries with the same key.
        return Err(StatusCode::BAD_GATEWAY);
    }
    Ok(Json(RefundReply { payment }))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let (db, harness) = database(
        spanner_queues_testing::setup()
            .with_queue::<ExecuteRefund>()
            .with_queue::<EscalateRefund>()
            .with_ddl([
                "CREATE TABLE Refunds (RefundId INT64 NOT NULL, AmountCents INT64 NOT NULL, \
                 Status STRING(16) NOT NULL, Payment STRING(64)) PRIMARY KEY (RefundId)",
            ]),
    )
    .await?;

    let payments = Arc::new(PaymentService::default());
    let address = serve_local(
        Router::new()
            .route("/refunds", post(pay_refund))
            .with_state(Arc::clone(&payments)),
    )
    .await?;
    let http = reqwest::Client::new();
    let retry_soon = RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(300));

    // Pays a refund, then records the payment and acks, in one transaction. The payment call is
    // outside Spanner, so it may happen more than once (a retry after an error, a re-run after
    // an abort): the idempotency key, stable across deliveries, makes the provider pay once.
    let executor = Worker::<ExecuteRefund>::builder(&db)
        .with_redelivery_policy(retry_soon.clone())
        .transactional(move |tx, refund, ctx| {
            let (http, url) = (http.clone(), format!("http://{address}/refunds"));
            async move {
                let reply: RefundReply = http
                    .post(url)
                    .header("idempotency-key", ctx.idempotency_key())
                    .json(&RefundRequest {
                        refund_id: refund.refund_id,
                        amount_cents: refund.amount_cents,
                    })
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                tx.execute_update(
                    Statement::builder(
                        "UPDATE Refunds SET Status = 'refunded', Payment = @payment \
                         WHERE RefundId = @id",
                    )
                    .add_param("id", refund.refund_id)
                    .add_param("payment", reply.payment)
                    .build(),
                )
                .await?;
                Ok::<(), HandlerError>(())
            }
        })
        .build()?
        .spawn();

    // Escalates a refund still waiting; one decided in the meantime is left alone.
    let escalator = Worker::<EscalateRefund>::builder(&db)
        .with_redelivery_policy(retry_soon)
        .transactional(|tx, escalation, _ctx| async move {
            tx.execute_update(
                Statement::builder(
                    "UPDATE Refunds SET Status = 'escalated' \
                     WHERE RefundId = @id AND Status = 'requested'",
                )
                .add_param("id", escalation.refund_id)
                .build(),
            )
            .await?;
            Ok(())
        })
        .build()?
        .spawn();

    for (refund_id, cents) in [(1, 1_999), (2, 4_500), (3, 12_000)] {
        request_refund(&db, refund_id, cents).await?;
    }
    println!("3 refunds requested; each escalates after {ESCALATE_AFTER:?} unless approved");
    for refund_id in [1, 2] {
        let cancelled = approve_refund(&db, refund_id).await?;
        println!("refund {refund_id} approved; escalation cancelled: {cancelled}");
    }

    spanner_queues_examples::wait_for("the refunds to settle", Duration::from_secs(120), || {
        let db = db.clone();
        async move {
            Ok(count(
                &db,
                "SELECT COUNT(*) FROM Refunds WHERE Status IN ('refunded', 'escalated')",
            )
            .await?
                == 3)
        }
    })
    .await?;
    let executed = executor.shutdown().await?;
    let escalated = escalator.shutdown().await?;

    let rows: Vec<(i64, String, Option<String>)> = harness
        .query("SELECT RefundId, Status, Payment FROM Refunds ORDER BY RefundId")
        .await?;
    for (id, status, payment) in &rows {
        println!(
            "refund {id}: {status} {}",
            payment.as_deref().unwrap_or("(no payment)")
        );
    }
    let paid = payments.payments.lock().expect("not poisoned").len();
    println!(
        "payment service: {} requests, {paid} refunds paid; executor acked {}, retried {}; \
         escalations run {}",
        payments.requests.load(Ordering::SeqCst),
        executed.acked,
        executed.retried,
        escalated.acked,
    );
    let statuses: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    if statuses != ["refunded", "refunded", "escalated"] || paid != 2 || executed.retried < 1 {
        return Err("unexpected outcome".into());
    }
    harness.assert_queue_empty::<ExecuteRefund>().await;
    harness.assert_queue_empty::<EscalateRefund>().await;
    println!("each approved refund paid exactly once; the unapproved one escalated");
    Ok(())
}
