//! Behaviour shared by both dialects, proven on each: every test body here takes the dialect
//! of the database it runs on, and runs once on a GoogleSQL database and once on a
//! PostgreSQL-dialect one. Only the test's own SQL (its business table) differs; the SDK
//! learns the dialect from the database handle.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use google_cloud_spanner::statement::Statement;
use spanner_queues::outcome::MarkerId;
use spanner_queues::transaction::Guarded;
use spanner_queues::worker::Purge;
use spanner_queues::{
    Database, Delivery, Dialect, Error, HandlerError, QueueMessage, ReceiveSettings, Receiver,
    RedeliveryPolicy, SchemaSetup, SendOptions, Transaction, TransactionSettings, Worker,
};
use spanner_queues_testing::{Drain, TestDatabase};
use spanner_queues_tests::{count, eventually};

/// A confirmation e-mail for an order (the demo's message).
#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "OrderMails")]
struct OrderMail {
    #[queue(key)]
    order_id: i64,
    to: String,
}

/// The same queue read with another key type: drift.
#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "OrderMails")]
struct OrderMailByName {
    #[queue(key)]
    name: String,
    to: String,
}

/// A queue no database has.
#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "NeverMade")]
struct NeverMade {
    #[queue(key)]
    id: i64,
}

fn mail(order_id: i64) -> OrderMail {
    OrderMail {
        order_id,
        to: format!("customer{order_id}@example.com"),
    }
}

/// The test's own table and statements, in each dialect.
#[derive(Debug, Clone, Copy)]
struct Orders(Dialect);

impl Orders {
    fn ddl(&self) -> &'static str {
        match self.0 {
            Dialect::PostgreSql => {
                "CREATE TABLE orders (order_id bigint NOT NULL, status varchar(20) NOT NULL, \
                 PRIMARY KEY (order_id))"
            }
            _ => {
                "CREATE TABLE Orders (OrderId INT64 NOT NULL, Status STRING(20) NOT NULL) \
                 PRIMARY KEY (OrderId)"
            }
        }
    }

    fn insert(&self, order_id: i64) -> Statement {
        match self.0 {
            Dialect::PostgreSql => {
                Statement::builder("INSERT INTO orders (order_id, status) VALUES ($1, 'placed')")
                    .add_param("p1", order_id)
                    .build()
            }
            _ => Statement::builder("INSERT INTO Orders (OrderId, Status) VALUES (@id, 'placed')")
                .add_param("id", order_id)
                .build(),
        }
    }

    fn mark_emailed(&self, order_id: i64) -> Statement {
        match self.0 {
            Dialect::PostgreSql => Statement::builder(
                "UPDATE orders SET status = 'emailed' WHERE order_id = $1 AND status = 'placed'",
            )
            .add_param("p1", order_id)
            .build(),
            _ => Statement::builder(
                "UPDATE Orders SET Status = 'emailed' WHERE OrderId = @id AND Status = 'placed'",
            )
            .add_param("id", order_id)
            .build(),
        }
    }

    fn count_with_status(&self, status: &str) -> String {
        match self.0 {
            Dialect::PostgreSql => format!("SELECT COUNT(*) FROM orders WHERE status = '{status}'"),
            _ => format!("SELECT COUNT(*) FROM Orders WHERE Status = '{status}'"),
        }
    }

    fn count_queued(&self) -> &'static str {
        match self.0 {
            Dialect::PostgreSql => "SELECT COUNT(*) FROM ordermails",
            _ => "SELECT COUNT(*) FROM OrderMails",
        }
    }
}

/// A fresh database of `dialect` with the queue, the orders table, the worker's tables and the
/// commit markers, created from the SDK's DDL for that dialect.
async fn database(dialect: Dialect) -> Option<TestDatabase> {
    spanner_queues_testing::setup()
        .with_dialect(dialect)
        .with_queue::<OrderMail>()
        .with_ddl([Orders(dialect).ddl()])
        .create()
        .await
}

/// The emulator runs one read-write transaction per database at a time: be patient.
fn patient() -> TransactionSettings {
    TransactionSettings::default()
        .with_max_attempts(200)
        .with_total_timeout(Duration::from_secs(120))
}

/// A handle on `test`'s database whose transactions (its own, its sends and acks, its
/// receivers' and its dead-letter replays) are [`patient`]; connecting also reads the
/// database's dialect.
async fn patient_handle(test: &TestDatabase) -> Database {
    Database::builder(test.path())
        .with_client(test.client().clone())
        .with_admin(test.admin().clone())
        .with_transaction_settings(patient())
        .connect()
        .await
        .expect("a patient handle")
}

/// Places `n` orders, each with its e-mail in the same transaction.
async fn place_orders(db: &Database, n: i64) {
    let orders = Orders(db.dialect());
    for order_id in 1..=n {
        db.transaction()
            .run(move |tx| async move {
                tx.execute_update(orders.insert(order_id)).await?;
                tx.send(&mail(order_id)).await?;
                Ok(())
            })
            .await
            .expect("an order and its e-mail commit together");
    }
}

macro_rules! both_dialects {
    ($body:ident: $google:ident, $postgres:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $google() {
            $body(Dialect::GoogleSql).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            $body(Dialect::PostgreSql).await;
        }
    };
}

both_dialects!(demo_flow: demo_flow_googlesql, demo_flow_postgresql);
both_dialects!(dead_letters_and_replay: dead_letters_googlesql, dead_letters_postgresql);
both_dialects!(guarded_transactions: guarded_googlesql, guarded_postgresql);
both_dialects!(receiver_acks_and_releases: receiver_googlesql, receiver_postgresql);
both_dialects!(schema_checks: schema_checks_googlesql, schema_checks_postgresql);
both_dialects!(sends_and_lease_renewal: sends_googlesql, sends_postgresql);
both_dialects!(batch_send_and_external_worker: external_googlesql, external_postgresql);

/// The demo's flow: orders placed with their e-mails, a transactional worker that marks each
/// order e-mailed in the transaction that acks its message; one attempt fails and is retried.
async fn demo_flow(dialect: Dialect) {
    let Some(test) = database(dialect).await else {
        return;
    };
    let db = patient_handle(&test).await;
    assert_eq!(db.dialect(), dialect);
    const N: i64 = 12;
    place_orders(&db, N).await;
    let orders = Orders(dialect);
    assert_eq!(count(&db, orders.count_queued()).await, N);

    let flaked = Arc::new(AtomicBool::new(false));
    let worker = {
        let flaked = Arc::clone(&flaked);
        Worker::<OrderMail>::builder(&db)
            .with_concurrency(2)
            .with_transaction_settings(patient())
            .with_redelivery_policy(
                RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(200)),
            )
            .transactional(move |tx: Transaction, message, _ctx| {
                let flaked = Arc::clone(&flaked);
                async move {
                    if message.order_id == 7 && !flaked.swap(true, Ordering::SeqCst) {
                        return Err(HandlerError::msg("mail server busy"));
                    }
                    let updated = tx
                        .execute_update(Orders(dialect).mark_emailed(message.order_id))
                        .await?;
                    if updated != 1 {
                        return Err(HandlerError::dead_letter(format!(
                            "order {} was e-mailed before",
                            message.order_id
                        )));
                    }
                    Ok(())
                }
            })
            .build()
            .expect("worker")
    };
    let stats = test
        .drain_with(&worker, Drain::new().including_scheduled())
        .await
        .expect("the worker empties the queue");
    assert!(flaked.load(Ordering::SeqCst), "order 7 failed once");
    assert_eq!(stats.acked, N as u64, "{stats:?}");
    assert!(stats.retried >= 1, "{stats:?}");
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    assert_eq!(count(&db, &orders.count_with_status("emailed")).await, N);
    test.assert_queue_empty::<OrderMail>().await;
    test.assert_no_dead_letters::<OrderMail>().await;
}

/// A poison message goes to the dead-letter table after its attempts; it can be listed,
/// replayed (sent back with the same payload) and deleted.
async fn dead_letters_and_replay(dialect: Dialect) {
    let Some(test) = database(dialect).await else {
        return;
    };
    let db = patient_handle(&test).await;
    place_orders(&db, 2).await;
    let worker = Worker::<OrderMail>::builder(&db)
        .with_concurrency(1)
        .with_max_attempts(2)
        .with_transaction_settings(patient())
        .with_redelivery_policy(
            RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(100)),
        )
        .transactional(move |tx: Transaction, message, _ctx| async move {
            if message.order_id == 2 {
                return Err(HandlerError::msg("no such mailbox"));
            }
            tx.execute_update(Orders(dialect).mark_emailed(message.order_id))
                .await?;
            Ok(())
        })
        .build()
        .expect("worker");
    let stats = test
        .drain_with(&worker, Drain::new().including_scheduled())
        .await
        .expect("drained");
    assert_eq!((stats.acked, stats.dead_lettered), (1, 1), "{stats:?}");
    test.assert_queue_empty::<OrderMail>().await;

    let dead = db.dead_letters();
    let letters = dead.list(&OrderMail::QUEUE, 10).await.expect("list");
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(letter.attempts(), 2);
    assert!(
        letter.error().contains("no such mailbox"),
        "{}",
        letter.error()
    );
    assert_eq!(letter.decode::<OrderMail>().expect("decodes"), mail(2));
    let got = dead
        .get(&OrderMail::QUEUE, letter.key())
        .await
        .expect("get")
        .expect("the dead letter is there");
    assert_eq!(got.key(), letter.key());

    assert!(
        dead.replay(&OrderMail::QUEUE, letter.key())
            .await
            .expect("replay")
    );
    test.assert_queued(&[mail(2)]).await;
    assert!(
        dead.list(&OrderMail::QUEUE, 10)
            .await
            .expect("list")
            .is_empty()
    );
    assert!(
        !dead
            .replay(&OrderMail::QUEUE, letter.key())
            .await
            .expect("replay"),
        "a replayed dead letter is gone"
    );
    assert_eq!(
        dead.purge(&OrderMail::QUEUE, Purge::Keys(vec![letter.key().clone()]))
            .await
            .expect("purge"),
        0
    );
}

/// A guarded transaction writes its commit marker with its effects; running it again with the
/// same marker commits nothing and reports the earlier commit.
async fn guarded_transactions(dialect: Dialect) {
    let Some(test) = database(dialect).await else {
        return;
    };
    let db = patient_handle(&test).await;
    let orders = Orders(dialect);
    let marker = MarkerId::new();
    let run = || {
        db.transaction()
            .guarded_as(marker)
            .run(move |tx| async move {
                tx.execute_update(orders.insert(1)).await?;
                tx.send(&mail(1)).await?;
                Ok(1)
            })
    };
    assert_eq!(run().await.expect("first run"), Guarded::Committed(1));
    let markers = format!(
        "SELECT COUNT(*) FROM {}",
        spanner_queues::tables::commit_markers(dialect)
    );
    assert_eq!(count(&db, &markers).await, 1, "the marker committed");
    assert_eq!(run().await.expect("second run"), Guarded::CommittedEarlier);
    assert_eq!(count(&db, &orders.count_with_status("placed")).await, 1);
    assert_eq!(count(&db, orders.count_queued()).await, 1);

    let unguarded = db
        .transaction()
        .run(|tx| async move {
            tx.execute_update(Orders(dialect).insert(2)).await?;
            Ok(())
        })
        .await;
    assert!(unguarded.is_ok(), "{unguarded:?}");
    assert_eq!(count(&db, &markers).await, 1, "no marker without a guard");
}

/// The receiver: deliveries decode, an ack in the caller's transaction applies once (a second
/// ack is refused and rolls its transaction back), a release brings the message back.
async fn receiver_acks_and_releases(dialect: Dialect) {
    let Some(test) = database(dialect).await else {
        return;
    };
    let db = patient_handle(&test).await;
    place_orders(&db, 2).await;
    let mut receiver = Receiver::<OrderMail>::builder(&db)
        .with_receive_settings(
            ReceiveSettings::default().with_max_duration(Duration::from_secs(10)),
        )
        .build()
        .expect("receiver");
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(60), receiver.next())
            .await
            .expect("a delivery within a minute")
            .expect("the stream goes on")
            .expect("a delivery")
    };
    let first = next().await;
    let second = next().await;
    let (acked, released) = if first.message().expect("decodes").order_id == 1 {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(acked.message().expect("decodes"), &mail(1));
    let orders = Orders(dialect);
    async fn ack(db: &Database, delivery: &Delivery<OrderMail>) -> Result<(), Error> {
        let orders = Orders(db.dialect());
        db.transaction()
            .run(move |tx| async move {
                tx.execute_update(orders.mark_emailed(1)).await?;
                tx.ack(delivery).await?;
                Ok(())
            })
            .await
    }
    ack(&db, &acked).await.expect("ack with the effect");
    let again = ack(&db, &acked).await.expect_err("the message is gone");
    assert!(matches!(again, Error::AlreadyAcked { .. }), "{again:?}");
    assert_eq!(
        count(&db, &orders.count_with_status("emailed")).await,
        1,
        "the refused ack rolled its effect back"
    );

    db.release(&released, Duration::ZERO)
        .await
        .expect("release");
    drop(released);
    let back = next().await;
    assert_eq!(back.message().expect("decodes"), &mail(2));
    db.ack(&back).await.expect("ack");
    eventually(Duration::from_secs(30), "the queue to empty", || async {
        count(&db, orders.count_queued()).await == 0
    })
    .await;
    receiver.close();
}

/// The drift check reads the queue's columns in the database's dialect; `connect` learns that
/// dialect from the database, and a stated dialect that is not the database's is refused there
/// (`Error::DialectMismatch`), so no handle of the wrong dialect can reach a check or a worker
/// (the old API let a bare client be taken for GoogleSQL, and the checks then refused it with
/// `Precondition`).
async fn schema_checks(dialect: Dialect) {
    let Some(test) = database(dialect).await else {
        return;
    };
    let connect = |stated: Option<Dialect>| {
        let builder = Database::builder(test.path())
            .with_client(test.client().clone())
            .with_admin(test.admin().clone());
        match stated {
            Some(stated) => builder.with_dialect(stated),
            None => builder,
        }
        .connect()
    };
    let learned = connect(None).await.expect("connect");
    assert_eq!(learned.dialect(), dialect);
    SchemaSetup::new()
        .with_queue::<OrderMail>()
        .check(&learned)
        .await
        .expect("the queue fits its type");
    let drift = SchemaSetup::new()
        .with_queue::<OrderMailByName>()
        .check(&learned)
        .await
        .expect_err("another key type");
    match &drift {
        Error::SchemaDrift { differences, .. } => assert!(
            differences
                .iter()
                .any(|d| d.to_ascii_lowercase().contains("name")),
            "{differences:?}"
        ),
        other => panic!("expected SchemaDrift, got {other:?}"),
    }
    let missing = SchemaSetup::new()
        .with_queue::<NeverMade>()
        .check(&learned)
        .await
        .expect_err("no such queue");
    assert!(
        matches!(missing, Error::QueueNotFound { .. }),
        "{missing:?}"
    );
    // The right dialect, stated, is accepted; the other one is refused on connect.
    let accepted = connect(Some(dialect))
        .await
        .expect("the database's own dialect");
    assert_eq!(accepted.dialect(), dialect);
    let other = match dialect {
        Dialect::PostgreSql => Dialect::GoogleSql,
        _ => Dialect::PostgreSql,
    };
    let wrong = connect(Some(other))
        .await
        .expect_err("a handle of the other dialect");
    assert!(
        matches!(&wrong, Error::DialectMismatch { stated, actual, .. } if *stated == other && *actual == dialect),
        "{wrong:?}"
    );
    assert_eq!(test.dialect(), dialect, "the harness's handle agrees");
    // Applying the set-up again is a no-op in either dialect (`IF NOT EXISTS`).
    SchemaSetup::new()
        .with_queue::<OrderMail>()
        .with_worker_tables()
        .with_commit_markers()
        .apply(&learned)
        .await
        .expect("apply on a database that has everything");
}

/// send, send_after, send_at and cancel in the caller's transaction; the receiver renews the
/// lease of a message it holds (`RENEWLEASE`) and acks it on its own.
async fn sends_and_lease_renewal(dialect: Dialect) {
    let Some(test) = database(dialect).await else {
        return;
    };
    let db = patient_handle(&test).await;
    let hour = Duration::from_secs(3600);
    db.transaction()
        .run(|tx| async move {
            tx.send(&mail(1)).await?;
            tx.send(&mail(2)).await?;
            tx.send_with(&mail(3), SendOptions::new().deliver_after(hour))
                .await?;
            tx.send_with(
                &mail(4),
                SendOptions::new().deliver_at(std::time::SystemTime::now() + hour),
            )
            .await?;
            Ok(())
        })
        .await
        .expect("sends");
    let cancelled = db
        .transaction()
        .run(|tx| async move { tx.cancel::<OrderMail>(&4).await })
        .await
        .expect("cancel");
    assert!(cancelled, "the scheduled message was there to cancel");
    let queued = test.queued::<OrderMail>().await.expect("the queue reads");
    let due: Vec<i64> = queued
        .iter()
        .filter(|q| q.is_due())
        .map(|q| q.message.as_ref().expect("decodes").order_id)
        .collect();
    assert_eq!(due, [1, 2], "{queued:?}");
    assert_eq!(queued.len(), 3, "send_after scheduled one more: {queued:?}");

    let mut receiver = Receiver::<OrderMail>::builder(&db)
        .with_receive_settings(
            ReceiveSettings::default()
                .with_max_duration(Duration::from_secs(10))
                .with_renew_interval(Duration::from_millis(500)),
        )
        .build()
        .expect("receiver");
    let mut seen = Vec::new();
    for _ in 0..2 {
        let delivery = tokio::time::timeout(Duration::from_secs(60), receiver.next())
            .await
            .expect("a delivery within a minute")
            .expect("the stream goes on")
            .expect("a delivery");
        assert!(delivery.deliver_time().is_some());
        let renewed = receiver.stats().renewed;
        eventually(Duration::from_secs(30), "a lease renewal", || {
            let done = receiver.stats().renewed > renewed;
            async move { done }
        })
        .await;
        assert_eq!(receiver.stats().renew_errors, 0);
        seen.push(delivery.message().expect("decodes").order_id);
        db.ack(&delivery).await.expect("ack");
    }
    seen.sort_unstable();
    assert_eq!(seen, [1, 2]);
    assert_eq!(test.queue_len::<OrderMail>().await.expect("len"), 1);
    receiver.close();
}

/// The database's own batch send (was the producer's) and its typed error for a key still
/// queued; an external worker
/// (acks grouped in one transaction, attempts counted before the handler runs) with a retry
/// the handler asks for.
async fn batch_send_and_external_worker(dialect: Dialect) {
    let Some(test) = database(dialect).await else {
        return;
    };
    let db = patient_handle(&test).await;
    let mails: Vec<OrderMail> = (1..=6).map(mail).collect();
    assert_eq!(db.send_many(&mails).await.expect("send_many").len(), 6);
    let again = db.send(&mail(3)).await.expect_err("key 3 is queued");
    match &again {
        Error::AlreadyQueued { key, .. } => assert_eq!(key.to_string(), "(3)"),
        other => panic!("expected AlreadyQueued, got {other:?}"),
    }
    let handled = Arc::new(std::sync::Mutex::new(Vec::new()));
    let asked = Arc::new(AtomicBool::new(false));
    let worker = {
        let (handled, asked) = (Arc::clone(&handled), Arc::clone(&asked));
        Worker::<OrderMail>::builder(&db)
            .with_concurrency(3)
            .with_transaction_settings(patient())
            .external(move |message, ctx| {
                let (handled, asked) = (Arc::clone(&handled), Arc::clone(&asked));
                async move {
                    if message.order_id == 4 && !asked.swap(true, Ordering::SeqCst) {
                        return Err(HandlerError::retry_after(
                            Duration::from_millis(300),
                            "rate limited",
                        ));
                    }
                    handled
                        .lock()
                        .expect("lock")
                        .push((message.order_id, ctx.attempt()));
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .expect("worker")
    };
    let stats = test
        .drain_with(&worker, Drain::new().including_scheduled())
        .await
        .expect("drained");
    assert_eq!(stats.acked, 6, "{stats:?}");
    assert_eq!(stats.retried, 1, "{stats:?}");
    let mut handled = handled.lock().expect("lock").clone();
    handled.sort_unstable();
    // Attempts are counted in the worker's attempt table: order 4's second attempt knows it.
    assert_eq!(handled, [(1, 1), (2, 1), (3, 1), (4, 2), (5, 1), (6, 1)]);
    test.assert_queue_empty::<OrderMail>().await;
    test.assert_no_dead_letters::<OrderMail>().await;
}
