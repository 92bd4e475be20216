//! Compile-time checks: the public transaction runner works where services run their code,
//! inside `tokio::spawn` and in handlers that must be `Send + 'static`. Nothing here touches a
//! database: every function below only has to type-check.
#![allow(dead_code)]

use std::future::Future;

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;
use spanner_queues::transaction::{self, Guarded, TransactionSettings};
use spanner_queues::{Error, Queue, QueueMessage};

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
async fn write_and_send(db: &DatabaseClient, email: &Email) -> spanner_queues::Result<i64> {
    let queue = &Queue::<Email>::new(db);
    transaction::builder(db)
        .run(move |tx| async move {
            let rows = tx
                .execute_update(
                    Statement::builder("INSERT INTO Orders (Id) VALUES (@id)")
                        .add_param("id", email.id)
                        .build(),
                )
                .await?;
            queue.send(&tx, email).await?;
            Ok(rows)
        })
        .await
}

fn spawned(db: DatabaseClient) -> tokio::task::JoinHandle<spanner_queues::Result<i64>> {
    tokio::spawn(async move {
        let email = Email {
            id: 1,
            to: "ada@example.com".into(),
        };
        write_and_send(&db, &email).await
    })
}

fn spawned_guarded(db: DatabaseClient) -> tokio::task::JoinHandle<spanner_queues::Result<()>> {
    tokio::spawn(async move {
        let settings = TransactionSettings::default().with_unknown_outcome_retries(1);
        let outcome = transaction::builder(&db)
            .with_settings(settings)
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
    db: DatabaseClient,
    message: M,
) -> impl Future<Output = spanner_queues::Result<()>> + Send + 'static {
    handler_like(async move {
        let queue = &Queue::<M>::new(&db);
        let message = &message;
        transaction::builder(&db)
            .run(move |tx| async move { queue.send(&tx, message).await })
            .await
    })
}

/// Generic over the closure too: a helper that runs any transaction body for its callers.
fn generic_body<T, F, Fut>(
    db: DatabaseClient,
    body: F,
) -> tokio::task::JoinHandle<spanner_queues::Result<T>>
where
    T: Send + 'static,
    F: FnMut(google_cloud_spanner::transaction::ReadWriteTransaction) -> Fut + Send + 'static,
    Fut: Future<Output = spanner_queues::Result<T>> + Send + 'static,
{
    tokio::spawn(async move { transaction::builder(&db).run(body).await })
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

fn application_errors(db: DatabaseClient) -> tokio::task::JoinHandle<bool> {
    tokio::spawn(async move {
        let result: spanner_queues::Result<()> = transaction::builder(&db)
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
    static_assertions::assert_impl_all!(transaction::TransactionBuilder<'static>: Send, Sync);
    static_assertions::assert_impl_all!(Guarded<()>: Send);
}
