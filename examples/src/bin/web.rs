//! In a web service: an axum handler writes the order row and sends its e-mail message in one
//! transaction, and the worker that sends the e-mails runs in the same binary. SIGTERM (or
//! Ctrl-C) shuts both down gracefully: the server finishes its requests, then the worker
//! finishes or releases what it holds.
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin web
//! curl -X POST localhost:3000/orders/42 -H 'content-type: application/json' -d '{"email":"ada@example.com"}'
//! curl localhost:3000/orders/42
//! ```
//!
//! It creates a database on an embedded emulator; with `SPANNER_DATABASE=projects/P/instances/I/databases/D`
//! it uses that one instead (it needs the `Orders` table, the `OrderEmails` queue and the
//! worker tables). `PORT` picks the port (default 3000; 0 for any free one).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use google_cloud_spanner::statement::Statement;
use spanner_queues::error::Code;
use spanner_queues::{Database, Error, QueueMessage, SchemaSetup, Worker};
use spanner_queues_examples::{connect_from_env, database, init_tracing, say};

#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
    to: String,
}

const ORDERS_TABLE: &str = "CREATE TABLE Orders (OrderId INT64 NOT NULL, \
    Status STRING(20) NOT NULL, Email STRING(MAX)) PRIMARY KEY (OrderId)";

#[derive(serde::Deserialize)]
struct PlaceOrder {
    email: String,
}

#[derive(Clone)]
struct App {
    db: Database,
}

/// `POST /orders/{id}`: the order row and its e-mail message commit together, or neither does.
async fn place_order(
    State(app): State<App>,
    Path(order_id): Path<i64>,
    Json(request): Json<PlaceOrder>,
) -> (StatusCode, String) {
    let email = OrderEmail {
        order_id,
        to: request.email,
    };
    // The closure runs once per attempt (Spanner may abort a transaction), on its own clone of
    // what it captures; the future is `Send`, as axum requires.
    let outcome = app
        .db
        .transaction()
        .run(move |tx| async move {
            let insert =
                Statement::builder("INSERT INTO Orders (OrderId, Status) VALUES (@id, 'placed')")
                    .add_param("id", order_id)
                    .build();
            tx.execute_update(insert).await?;
            tx.send(&email).await?;
            Ok(())
        })
        .await;
    match outcome {
        Ok(()) => (StatusCode::CREATED, format!("order {order_id} placed\n")),
        // The order row (or its message) exists already, as for a retried request: nothing
        // was applied this time.
        Err(error) if error.code() == Some(Code::AlreadyExists) => {
            (StatusCode::CONFLICT, "already placed\n".into())
        }
        // May have been applied: the client must check (GET) before placing it again.
        Err(error @ Error::OutcomeUnknown(_)) => {
            tracing::warn!(order_id, error = %error, "order outcome unknown");
            (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n"))
        }
        // Nothing was applied.
        Err(error) => {
            tracing::warn!(order_id, error = %error, "order not placed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "order not placed\n".into(),
            )
        }
    }
}

/// `GET /orders/{id}`: the order's status (`placed`, then `emailed`).
async fn order_status(State(app): State<App>, Path(order_id): Path<i64>) -> (StatusCode, String) {
    let read = async {
        let mut rows = app
            .db
            .client()
            .single_use()
            .build()
            .execute_query(
                Statement::builder("SELECT Status FROM Orders WHERE OrderId = @id")
                    .add_param("id", order_id)
                    .build(),
            )
            .await?;
        match rows.next().await {
            Some(row) => Ok(Some(row?.get::<String>(0)?)),
            None => Ok::<_, google_cloud_spanner::Error>(None),
        }
    };
    match read.await {
        Ok(Some(status)) => (StatusCode::OK, format!("{status}\n")),
        Ok(None) => (StatusCode::NOT_FOUND, "no such order\n".into()),
        Err(error) => {
            tracing::warn!(order_id, %error, "order not read");
            (StatusCode::INTERNAL_SERVER_ERROR, "try again\n".into())
        }
    }
}

/// The e-mail worker: marks the order e-mailed in the transaction that acks the message.
fn email_worker(db: &Database) -> spanner_queues::Result<Worker<OrderEmail>> {
    Worker::<OrderEmail>::builder(db)
        .transactional(|tx, email, _ctx| async move {
            // Where the e-mail would go out (with `ctx.idempotency_key()` for the mail API).
            tx.execute_update(
                Statement::builder(
                    "UPDATE Orders SET Status = 'emailed', Email = @to WHERE OrderId = @id",
                )
                .add_param("id", email.order_id)
                .add_param("to", email.to.clone())
                .build(),
            )
            .await?;
            Ok(())
        })
        .build()
}

/// Resolves on SIGTERM (what a container platform sends) or Ctrl-C.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[tokio::main]
async fn main() -> Result<(), spanner_queues_examples::Error> {
    init_tracing();
    // A database of your own, or a fresh one on an embedded emulator.
    let (db, _embedded) = if std::env::var_os("SPANNER_DATABASE").is_some() {
        let db = connect_from_env().await?;
        // Fail fast when the queue does not match its type.
        SchemaSetup::new()
            .with_queue::<OrderEmail>()
            .check(&db)
            .await?;
        (db, None)
    } else {
        let (db, embedded) = database(
            spanner_queues_testing::setup()
                .with_queue::<OrderEmail>()
                .with_ddl([ORDERS_TABLE]),
        )
        .await?;
        (db, Some(embedded))
    };

    // The worker runs on its own task, beside the server.
    let worker = email_worker(&db)?.spawn();

    let app = Router::new()
        .route("/orders/{id}", post(place_order).get(order_status))
        .with_state(App { db });
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    say(&format!("listening on http://{}", listener.local_addr()?));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;

    // The server has answered its last request: now stop the worker. Running handlers finish
    // (within the grace period) or are released for immediate redelivery; nothing is lost.
    let stats = worker.shutdown().await?;
    say(&format!(
        "shut down: worker acked {}, released {}",
        stats.acked, stats.released_on_shutdown
    ));
    Ok(())
}
