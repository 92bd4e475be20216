//! Compile-time checks: the public transaction runner works where services run their code,
//! inside `tokio::spawn` and in handlers that must be `Send + 'static`, with closures that use
//! the caller's values without a `let x = &x;` line. Nothing here touches a database: every
//! function below only has to type-check.
#![allow(dead_code)]

use std::future::Future;

use google_cloud_spanner::statement::Statement;
use spanner_queues::transaction::{Guarded, TransactionBuilder};
use spanner_queues::{Database, Delivery, Error, QueueMessage, SendOptions, TransactionSettings};

#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "Emails")]
struct Email {
    #[queue(key)]
    id: i64,
    to: String,
}

/// What axum and tonic ask of a handler's future.
fn handler_like<F>(future: F) -> F
where
    F: Future + Send + 'static,
{
    future
}

/// A transaction that writes a row and sends a message, borrowing both from its caller.
async fn write_and_send(db: &Database, email: &Email) -> spanner_queues::Result<i64> {
    db.transaction()
        .run(move |tx| async move {
            let rows = tx
                .execute_update(
                    Statement::builder("INSERT INTO Orders (Id) VALUES (@id)")
                        .add_param("id", email.id)
                        .build(),
                )
                .await?;
            tx.send(email).await?;
            Ok(rows)
        })
        .await
}

/// Owned captures are cloned once per attempt: no borrow line before the closure.
async fn owned_capture(db: &Database, email: Email) -> spanner_queues::Result<()> {
    db.transaction()
        .run(move |tx| async move {
            tx.send_with(
                &email,
                SendOptions::new().deliver_after(std::time::Duration::from_secs(5)),
            )
            .await?;
            Ok(())
        })
        .await
}

/// A send and an ack in one transaction.
async fn send_and_ack(
    db: &Database,
    next: &Email,
    delivery: &Delivery<Email>,
) -> spanner_queues::Result<()> {
    db.transaction()
        .run(move |tx| async move {
            tx.send(next).await?;
            tx.ack(delivery).await
        })
        .await
}

fn spawned(db: Database) -> tokio::task::JoinHandle<spanner_queues::Result<i64>> {
    tokio::spawn(async move {
        let email = Email {
            id: 1,
            to: "ada@example.com".into(),
        };
        write_and_send(&db, &email).await
    })
}

fn spawned_own_transaction(db: Database) -> tokio::task::JoinHandle<spanner_queues::Result<()>> {
    tokio::spawn(async move {
        let email = Email {
            id: 1,
            to: "ada@example.com".into(),
        };
        db.send(&email).await?;
        db.send_many(&vec![email.clone(), email]).await?;
        Ok(())
    })
}

fn spawned_guarded(db: Database) -> tokio::task::JoinHandle<spanner_queues::Result<()>> {
    tokio::spawn(async move {
        let settings = TransactionSettings::default().with_unknown_outcome_retries(1);
        let outcome = db
            .transaction()
            .with_transaction_settings(settings)
            .guarded()
            .run(|tx| async move {
                tx.execute_update(Statement::builder("DELETE FROM Orders WHERE TRUE").build())
                    .await?;
                Ok(())
            })
            .await?;
        match outcome {
            Guarded::Committed(()) | Guarded::CommittedEarlier => Ok(()),
        }
    })
}

/// Generic over the message type, as a library of handlers would be.
fn generic_handler<M: QueueMessage + Clone>(
    db: Database,
    message: M,
) -> impl Future<Output = spanner_queues::Result<()>> + Send + 'static {
    handler_like(async move {
        db.transaction()
            .run(move |tx| async move { tx.send(&message).await.map(drop) })
            .await
    })
}

/// Generic over the closure too: a helper that runs any transaction body for its callers.
fn generic_body<T, F, Fut>(
    db: Database,
    body: F,
) -> tokio::task::JoinHandle<spanner_queues::Result<T>>
where
    T: Send + 'static,
    F: FnOnce(spanner_queues::Transaction) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = spanner_queues::Result<T>> + Send + 'static,
{
    tokio::spawn(async move { db.transaction().run(body).await })
}

/// Your own errors come back typed.
#[derive(Debug)]
struct OutOfStock;

impl std::fmt::Display for OutOfStock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("out of stock")
    }
}

impl std::error::Error for OutOfStock {}

fn application_errors(db: Database) -> tokio::task::JoinHandle<bool> {
    tokio::spawn(async move {
        let result: spanner_queues::Result<()> = db
            .transaction()
            .run(|_tx| async { Err(Error::application(OutOfStock)) })
            .await;
        matches!(
            result.map_err(Error::downcast_application::<OutOfStock>),
            Err(Ok(OutOfStock))
        )
    })
}

#[test]
fn the_runner_future_is_send_and_static_where_handlers_need_it() {
    // The functions above compile: that is the test. This one checks that the names used in
    // them are what users import.
    static_assertions::assert_impl_all!(TransactionBuilder<'static>: Send, Sync);
    static_assertions::assert_impl_all!(Guarded<()>: Send);
    static_assertions::assert_impl_all!(Database: Send, Sync, Clone);
    static_assertions::assert_impl_all!(spanner_queues::Transaction: Send, Sync, Clone);
}
