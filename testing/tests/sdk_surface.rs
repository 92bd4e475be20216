//! The SDK's new entry points against a real backend: sends in the caller's and in their own
//! transaction, acks through the transaction and the database, a queue by name, dead letters by
//! name (replay and purge), and the dialect check on connect.

use std::time::Duration;

use futures::StreamExt as _;
use spanner_queues::codec::Payload;
use spanner_queues::worker::Purge;
use spanner_queues::{
    Database, Dialect, Error, HandlerError, QueueMessage, RawMessage, Receiver, SendOptions, Worker,
};

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Jobs")]
struct Job {
    #[queue(key)]
    id: i64,
    action: String,
}

fn job(id: i64, action: &str) -> Job {
    Job {
        id,
        action: action.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_acks_queues_by_name_and_dead_letters_by_name() {
    let Some(db) = spanner_queues_testing::setup()
        .with_queue::<Job>()
        .create()
        .await
    else {
        return;
    };

    // In the caller's transaction and in its own: the same names.
    let (first, second) = (job(1, "print"), job(2, "scan"));
    let sent = db
        .transaction()
        .run(move |tx| async move { tx.send_many([&first, &second]).await })
        .await
        .expect("send in a transaction");
    assert_eq!(sent.len(), 2);
    let later = db
        .send_with(
            &job(3, "later"),
            SendOptions::new().deliver_after(Duration::from_secs(3600)),
        )
        .await
        .expect("send on its own");
    assert!(later.deliver_at().is_some());
    assert!(db.cancel::<Job>(&3).await.expect("cancel"));
    db.assert_queued_keys::<Job>(&[1, 2]).await;

    // A queue by name: a key typed as text and a JSON payload, as the CLI sends them.
    let queue = db.queue_by_name("Jobs").await.expect("queue by name");
    assert_eq!(queue.key_columns().len(), 1);
    db.send_raw(
        &queue,
        &RawMessage::new(["4"], Payload::Json(r#"{"action":"fail"}"#.into())),
    )
    .await
    .expect("send raw");
    let bad_key = db
        .send_raw(
            &queue,
            &RawMessage::new(["four"], Payload::Json("{}".into())),
        )
        .await;
    assert!(
        matches!(bad_key, Err(Error::InvalidKey { .. })),
        "{bad_key:?}"
    );
    let folded = db
        .queue_by_name("jobs")
        .await
        .expect("any case in GoogleSQL");
    assert_eq!(folded.name().as_str(), "Jobs");
    let missing = db.queue_by_name("NoSuchQueue").await;
    assert!(
        matches!(missing, Err(Error::NotAQueue { .. })),
        "{missing:?}"
    );

    // Receive two, ack one in a transaction and release the other on its own.
    let mut receiver = Receiver::<Job>::builder(&db).build().expect("receiver");
    let mut acked = 0;
    while acked < 2 {
        let delivery = receiver
            .next()
            .await
            .expect("a delivery")
            .expect("no receive error");
        let delivery = &delivery;
        if delivery.message().expect("decodes").action == "fail" {
            db.release(delivery, Duration::ZERO).await.expect("release");
            continue;
        }
        db.transaction()
            .run(move |tx| async move { tx.ack(delivery).await })
            .await
            .expect("ack in a transaction");
        acked += 1;
    }
    drop(receiver);

    // The worker dead-letters the failing job; replay it by name, then purge it.
    let worker = Worker::<Job>::builder(&db)
        .with_max_attempts(1)
        .external(|job, _ctx| async move {
            if job.action == "fail" {
                Err(HandlerError::msg("cannot"))
            } else {
                Ok(())
            }
        })
        .build()
        .expect("worker");
    db.drain(&worker).await.expect("drain");
    let dead = db.dead_letters();
    assert_eq!(dead.count(&Job::QUEUE).await.expect("count"), 1);
    assert_eq!(dead.queues().await.expect("queues"), [Job::QUEUE]);
    let letter = dead
        .list(&Job::QUEUE, 10)
        .await
        .expect("list")
        .pop()
        .expect("one letter");
    assert!(
        dead.replay(&Job::QUEUE, letter.key())
            .await
            .expect("replay")
    );
    assert_eq!(dead.count(&Job::QUEUE).await.expect("count"), 0);
    db.assert_queued_keys::<Job>(&[4]).await;
    db.drain(&worker).await.expect("drain");
    assert_eq!(dead.purge(&Job::QUEUE, Purge::All).await.expect("purge"), 1);
    assert!(dead.counts().await.expect("counts").is_empty());
    db.assert_queue_empty::<Job>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stated_dialect_is_checked_on_connect() {
    let Some(db) = spanner_queues_testing::setup()
        .without_sdk_tables()
        .create()
        .await
    else {
        return;
    };
    let connect = |dialect| {
        Database::builder(db.path())
            .with_client(db.client().clone())
            .with_admin(db.admin().clone())
            .with_dialect(dialect)
            .connect()
    };
    let same = connect(Dialect::GoogleSql).await.expect("same dialect");
    assert_eq!(same.dialect(), Dialect::GoogleSql);
    match connect(Dialect::PostgreSql).await {
        Err(Error::DialectMismatch { stated, actual, .. }) => {
            assert_eq!((stated, actual), (Dialect::PostgreSql, Dialect::GoogleSql));
        }
        other => panic!("expected DialectMismatch, got {other:?}"),
    }
}
