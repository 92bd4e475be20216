//! A web handler that writes a business row and queues a message in one transaction.
//!
//! ```text
//! SPANNER_DATABASE=projects/P/instances/I/databases/D cargo run -p spanner-queues-examples --bin web
//! curl -X POST localhost:3000/orders/42 -H 'content-type: application/json' -d '{"email":"ada@example.com"}'
//! ```
//!
//! It needs the `Orders` table and the `OrderEmails` queue of the README; set
//! `SPANNER_EMULATOR_HOST` to run it against an emulator. The `worker` example sends the e-mails.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use google_cloud_spanner::client::{DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use spanner_queues::{Error, Queue, QueueMessage, transaction};

#[derive(QueueMessage, Debug)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
    to: String,
}

#[derive(serde::Deserialize)]
struct PlaceOrder {
    email: String,
}

#[derive(Clone)]
struct App {
    db: DatabaseClient,
    emails: Queue<OrderEmail>,
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
    // The closure runs once per attempt (Spanner may abort a transaction): it borrows what it
    // needs, and the future is `Send`, as axum requires.
    let (emails, email) = (&app.emails, &email);
    let outcome = transaction::builder(&app.db)
        .run(move |tx| async move {
            let insert =
                Statement::builder("INSERT INTO Orders (OrderId, Status) VALUES (@id, 'placed')")
                    .add_param("id", order_id)
                    .build();
            tx.execute_update(insert).await?;
            emails.send(&tx, email).await?;
            Ok(())
        })
        .await;
    match outcome {
        Ok(()) => (StatusCode::CREATED, format!("order {order_id} placed\n")),
        // The order exists: its e-mail is still queued.
        Err(Error::AlreadyQueued { .. }) => (StatusCode::CONFLICT, "already placed\n".into()),
        // May have been applied: the client must check before placing it again.
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().init();
    let database = std::env::var("SPANNER_DATABASE")?;
    let db = Spanner::builder()
        .build()
        .await?
        .database_client(&database)
        .build()
        .await?;
    spanner_queues::admin::check_queue::<OrderEmail>(&db).await?; // fail fast on schema drift
    let app = Router::new()
        .route("/orders/{id}", post(place_order))
        .with_state(App {
            db,
            emails: Queue::new(),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    tracing::info!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async { tokio::signal::ctrl_c().await.unwrap_or_default() })
        .await?;
    Ok(())
}
