//! Issue 10, finding 1: the worker's own tables take every key the queue accepts, and nothing
//! that fails permanently loops forever.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use google_cloud_spanner::statement::Statement;
use spanner_queues::worker::Purge;
use spanner_queues::{
    Database, Error, HandlerError, MessageKey, QueueMessage, RedeliveryPolicy, TransactionSettings,
    Worker, key::KeyValue,
};
use spanner_queues_tests::{Setup, count, db_or_skip, eventually, setup};

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "LongKeys")]
struct LongKey {
    #[queue(key)]
    id: String,
    note: String,
}

/// Keys the queue accepts whose text form (`KeyEncoding::V1`) is past Spanner's 8 KiB key
/// limit: plain ASCII, control characters (JSON-escaped to six bytes each) and quotes (two).
fn long_keys() -> Vec<String> {
    vec!["k".repeat(8180), "\u{1}".repeat(1500), "\"".repeat(4100)]
}

fn key_of(id: &str) -> MessageKey {
    MessageKey::new(vec![KeyValue::String(id.to_owned())])
}

/// The queue, an effects table and the worker's tables (and the commit markers).
fn ddl() -> Setup {
    setup().with_queue::<LongKey>().with_ddl([
        "CREATE TABLE Effects (Id STRING(MAX) NOT NULL, Attempt INT64 NOT NULL) PRIMARY KEY (Id)",
    ])
}

fn patient() -> TransactionSettings {
    TransactionSettings::default()
        .with_max_attempts(200)
        .with_total_timeout(Duration::from_secs(120))
}

async fn send(db: &Database, ids: &[String]) {
    let messages: Vec<LongKey> = ids
        .iter()
        .map(|id| LongKey {
            id: id.clone(),
            note: format!("{} bytes", id.len()),
        })
        .collect();
    db.transaction()
        .with_transaction_settings(patient())
        .run(move |tx| async move { tx.send_many(&messages).await })
        .await
        .expect("the queue accepts these keys");
}

#[tokio::test]
async fn long_keys_are_retried_dead_lettered_replayed_and_acked() {
    let db = db_or_skip!(ddl());
    let ids = long_keys();
    send(&db, &ids).await;
    // Attempt 1 fails (an attempt row with its error), attempt 2 asks for the dead-letter table.
    let worker = Worker::<LongKey>::builder(&db)
        .with_concurrency(3)
        .with_max_attempts(5)
        .with_transaction_settings(patient())
        .with_redelivery_policy(
            RedeliveryPolicy::default()
                .with_initial_delay(Duration::from_millis(100))
                .with_jitter(0.0),
        )
        .transactional(|_tx, _message, ctx| async move {
            if ctx.attempt() == 1 {
                Err(HandlerError::msg("first attempt fails"))
            } else {
                assert_eq!(ctx.previous_error(), Some("first attempt fails"));
                Err(HandlerError::dead_letter("second attempt gives up"))
            }
        })
        .build()
        .expect("worker")
        .spawn();
    let dead = db.dead_letters();
    eventually(Duration::from_secs(60), "three dead letters", || async {
        dead.list(&LongKey::QUEUE, 10).await.expect("list").len() == 3
    })
    .await;
    let stats = worker.shutdown().await.expect("shutdown");
    assert_eq!((stats.retried, stats.dead_lettered), (3, 3), "{stats:?}");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM LongKeys").await, 0);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM SpannerQueuesAttempts").await,
        0,
        "attempt rows go with the dead letter"
    );

    // The dead-letter API finds each by its full key.
    let queue = LongKey::QUEUE;
    for id in &ids {
        let letter = dead
            .get(&queue, &key_of(id))
            .await
            .expect("get")
            .expect("a dead letter for this key");
        assert_eq!(letter.key(), &key_of(id));
        assert_eq!(letter.attempts(), 2);
        assert!(letter.error().contains("second attempt gives up"));
        assert_eq!(letter.decode::<LongKey>().expect("payload").id, *id);
    }
    assert_eq!(
        dead.purge(&queue, Purge::Keys(vec![key_of(&ids[0])]))
            .await
            .expect("purge"),
        1
    );
    assert!(
        dead.get(&queue, &key_of(&ids[0]))
            .await
            .expect("get")
            .is_none()
    );
    for id in &ids[1..] {
        assert!(dead.replay(&queue, &key_of(id)).await.expect("replay"));
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM LongKeys").await, 2);

    // Replayed: handled from a fresh count, effect and ack in one transaction.
    let fixed = Worker::<LongKey>::builder(&db)
        .with_transaction_settings(patient())
        .transactional(|tx, message, ctx| async move {
            tx.execute_update(
                Statement::builder("INSERT INTO Effects (Id, Attempt) VALUES (@id, @attempt)")
                    .add_param("id", message.id.clone())
                    .add_param("attempt", i64::from(ctx.attempt()))
                    .build(),
            )
            .await?;
            Ok(())
        })
        .build()
        .expect("worker")
        .spawn();
    eventually(Duration::from_secs(60), "the replays handled", || async {
        count(&db, "SELECT COUNT(*) FROM LongKeys").await == 0
    })
    .await;
    let stats = fixed.shutdown().await.expect("shutdown");
    assert_eq!(stats.acked, 2, "{stats:?}");
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM Effects WHERE Attempt = 1").await,
        2
    );
    assert!(
        dead.list(&LongKey::QUEUE, 10)
            .await
            .expect("list")
            .is_empty()
    );
}

/// The layout of the worker tables before key digests (keyed by the key's text).
fn old_layout() -> [&'static str; 2] {
    [
        "CREATE TABLE SpannerQueuesAttempts (QueueName STRING(128) NOT NULL, \
         MessageKey STRING(MAX) NOT NULL, AttemptId STRING(36) NOT NULL, \
         StartedAt TIMESTAMP NOT NULL, ErrorText STRING(MAX)) \
         PRIMARY KEY (QueueName, MessageKey, AttemptId)",
        "CREATE TABLE SpannerQueuesDeadLetters (QueueName STRING(128) NOT NULL, \
         MessageKey STRING(MAX) NOT NULL, KeyText STRING(MAX) NOT NULL, \
         Payload BYTES(MAX) NOT NULL, PayloadKind STRING(16) NOT NULL, Attempts INT64 NOT NULL, \
         ErrorText STRING(MAX) NOT NULL, DeadLetteredAt TIMESTAMP NOT NULL) \
         PRIMARY KEY (QueueName, MessageKey)",
    ]
}

#[tokio::test]
async fn a_worker_on_the_old_table_layout_refuses_to_start_and_says_how_to_migrate() {
    let db = db_or_skip!(
        setup()
            .without_sdk_tables()
            .with_queue::<LongKey>()
            .with_ddl(old_layout())
    );
    let worker = Worker::<LongKey>::builder(&db)
        .transactional(|_tx, _message, _ctx| async move { Ok(()) })
        .build()
        .expect("worker");
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        worker.run(std::future::pending::<()>()),
    )
    .await
    .expect("returns instead of running on the old layout")
    .expect_err("old layout");
    let Error::SchemaDrift { differences, .. } = &error else {
        panic!("expected SchemaDrift, got {error:?}");
    };
    assert_eq!(differences.len(), 2, "{differences:?}");
    let text = error.to_string();
    for expected in [
        "SpannerQueuesAttempts has the layout of an earlier version",
        "SpannerQueuesDeadLetters has the layout of an earlier version",
        "DROP TABLE SpannerQueuesAttempts",
        "KeyDigest",
    ] {
        assert!(text.contains(expected), "{expected:?} in {text}");
    }
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Refunds")]
struct Refund {
    #[queue(key)]
    id: uuid::Uuid,
    cents: i64,
}

#[tokio::test]
async fn a_row_whose_key_does_not_decode_is_dead_lettered_and_the_worker_goes_on() {
    let db = db_or_skip!(setup().with_queue::<Refund>());
    // Written by another program: the STRING(36) key column holds no UUID.
    db.client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(Statement::builder(
                "INSERT INTO Refunds (Id, Payload) VALUES ('not-a-uuid', JSON '{\"cents\": 5}')",
            ))
            .await
        })
        .await
        .expect("raw insert");
    let good = Refund {
        id: uuid::Uuid::new_v4(),
        cents: 7,
    };
    db.send(&good).await.expect("send");
    let handled = Arc::new(AtomicUsize::new(0));
    let worker = {
        let handled = Arc::clone(&handled);
        Worker::<Refund>::builder(&db)
            .with_transaction_settings(patient())
            .transactional(move |_tx, _refund, _ctx| {
                let handled = Arc::clone(&handled);
                async move {
                    handled.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            })
            .build()
            .expect("worker")
            .spawn()
    };
    eventually(Duration::from_secs(60), "the queue drained", || async {
        count(&db, "SELECT COUNT(*) FROM Refunds").await == 0
    })
    .await;
    let stats = worker.shutdown().await.expect("shutdown");
    assert_eq!((stats.acked, stats.dead_lettered), (1, 1), "{stats:?}");
    assert_eq!(
        handled.load(Ordering::SeqCst),
        1,
        "only the good refund ran"
    );
    let letters = db
        .dead_letters()
        .list(&Refund::QUEUE, 10)
        .await
        .expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].key(), &key_of("not-a-uuid"));
    assert!(letters[0].error().contains("key"), "{}", letters[0].error());
    assert!(letters[0].decode::<Refund>().is_err());
}

#[tokio::test]
async fn a_permanent_error_while_counting_dead_letters_and_one_while_dead_lettering_parks() {
    let db = db_or_skip!(ddl());
    let calls = Arc::new(AtomicUsize::new(0));
    let worker = {
        let calls = Arc::clone(&calls);
        Worker::<LongKey>::builder(&db)
            .with_transaction_settings(patient())
            .external(move |_message, _ctx| {
                let calls = Arc::clone(&calls);
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            })
            .build()
            .expect("worker")
            .spawn()
    };
    send(&db, &["first".to_owned()]).await;
    eventually(
        Duration::from_secs(60),
        "the first message acked",
        || async { worker.stats().acked == 1 },
    )
    .await;

    // The attempts table goes away under the running worker: counting fails for good.
    db.apply_ddl(["DROP TABLE SpannerQueuesAttempts"])
        .await
        .expect("drop");
    send(&db, &["second".to_owned()]).await;
    let dead = db.dead_letters();
    eventually(
        Duration::from_secs(60),
        "the second message dead-lettered",
        || async {
            dead.get(&LongKey::QUEUE, &key_of("second"))
                .await
                .expect("get")
                .is_some()
        },
    )
    .await;
    let letter = dead
        .get(&LongKey::QUEUE, &key_of("second"))
        .await
        .expect("get")
        .expect("letter");
    assert!(
        letter.error().contains("cannot count the attempt"),
        "{}",
        letter.error()
    );

    // And the dead-letter table too: the message is parked, neither lost nor looping.
    db.apply_ddl(["DROP TABLE SpannerQueuesDeadLetters"])
        .await
        .expect("drop");
    send(&db, &["third".to_owned()]).await;
    eventually(
        Duration::from_secs(60),
        "the third message parked",
        || async { worker.stats().parked == 1 },
    )
    .await;
    let stats = worker.shutdown().await.expect("shutdown");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the first ran: {stats:?}"
    );
    assert_eq!((stats.acked, stats.dead_lettered), (1, 1), "{stats:?}");
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM LongKeys WHERE Id = 'third' \
             AND DeliverTime > TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 5 MINUTE)"
        )
        .await,
        1,
        "parked for the longest redelivery delay (10 minutes by default)"
    );
}
