//! Issue 5: the leased receive stream and lease renewal.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use google_cloud_spanner::statement::Statement;
use spanner_queues::{
    Database, Delivery, Error, QueueMessage, ReceiveSettings, Receiver, codec::Payload,
};
use spanner_queues_tests::{count, db_or_skip, eventually, setup};

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Jobs")]
struct Job {
    #[queue(key)]
    id: i64,
    name: String,
}

/// JSON carried in a STRING column, so a test can write a payload that is not JSON.
#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Notes", payload_type = "STRING")]
struct Note {
    #[queue(key)]
    id: String,
    text: String,
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Blobs", payload = "bytes")]
struct Blob {
    #[queue(key)]
    id: String,
    data: Vec<u8>,
}

fn job(id: i64) -> Job {
    Job {
        id,
        name: format!("job {id}"),
    }
}

/// The next delivery, failing the test after `within`.
async fn next<M: QueueMessage>(receiver: &mut Receiver<M>, within: Duration) -> Delivery<M> {
    tokio::time::timeout(within, receiver.next())
        .await
        .unwrap_or_else(|_| panic!("no delivery within {within:?}"))
        .expect("the stream ended")
        .expect("a delivery, not an error")
}

#[tokio::test]
async fn receives_decodes_and_acks() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Job>());
    let jobs: Vec<Job> = (1..=5).map(job).collect();
    db.send_many(&jobs).await.expect("send");

    let mut receiver = Receiver::<Job>::builder(&db)
        .with_receive_settings(ReceiveSettings::default().with_max_duration(Duration::from_secs(5)))
        .build()
        .expect("receiver");
    let mut seen = Vec::new();
    for _ in 0..5 {
        let delivery = next(&mut receiver, Duration::from_secs(20)).await;
        let message = delivery.message().expect("decodes").clone();
        assert_eq!(delivery.key().to_string(), format!("({})", message.id));
        assert!(delivery.lease_expiry() > std::time::SystemTime::now());
        assert!(!delivery.is_lease_lost());
        assert!(delivery.deliver_time().is_some());
        db.ack(&delivery).await.expect("ack");
        seen.push(message);
    }
    seen.sort_by_key(|j| j.id);
    assert_eq!(seen, jobs);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Jobs").await, 0);
    let stats = receiver.stats();
    assert_eq!(stats.received, 5);
    assert_eq!(stats.in_flight, 0, "acked deliveries were dropped");
}

#[tokio::test]
async fn a_payload_that_does_not_decode_is_a_delivery_with_its_key() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Note>());
    db.client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(Statement::builder(
                "INSERT INTO Notes (Id, Payload) VALUES ('poison', 'this is not JSON')",
            ))
            .await
        })
        .await
        .expect("raw insert");
    let mut receiver = Receiver::<Note>::builder(&db).build().expect("receiver");
    let delivery = next(&mut receiver, Duration::from_secs(20)).await;
    assert_eq!(delivery.key().to_string(), r#"("poison")"#);
    match delivery.message() {
        Err(Error::Decode { key, .. }) => assert_eq!(key.to_string(), r#"("poison")"#),
        other => panic!("expected a decode error, got {other:?}"),
    }
    assert_eq!(
        delivery.payload(),
        &Payload::String("this is not JSON".into())
    );
}

#[tokio::test]
async fn release_sends_the_same_payload_back_byte_for_byte() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Blob>());
    // Written by "another client": raw SQL with bytes that are not UTF-8.
    db.client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(Statement::builder(
                "INSERT INTO Blobs (Id, Payload) VALUES ('b1', b'\\x00\\xff\\xfe raw')",
            ))
            .await
        })
        .await
        .expect("raw insert");
    let mut receiver = Receiver::<Blob>::builder(&db).build().expect("receiver");
    let first = next(&mut receiver, Duration::from_secs(20)).await;
    let original = first.payload().clone();
    assert_eq!(original.as_bytes(), b"\x00\xff\xfe raw");
    let first_deliver_time = first.deliver_time().expect("deliver time");
    let released_at = Instant::now();
    db.release(&first, Duration::from_millis(1500))
        .await
        .expect("release");
    drop(first);

    let again = next(&mut receiver, Duration::from_secs(20)).await;
    assert!(
        released_at.elapsed() >= Duration::from_millis(1400),
        "delivered again before its new DeliverTime ({:?})",
        released_at.elapsed()
    );
    assert_eq!(again.payload(), &original, "payload unchanged");
    assert_eq!(again.message().expect("decodes").data, b"\x00\xff\xfe raw");
    assert!(again.deliver_time().expect("deliver time") > first_deliver_time);
    db.ack(&again).await.expect("ack");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Blobs").await, 0);
}

#[tokio::test]
async fn never_more_than_max_in_flight() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Job>());
    let jobs: Vec<Job> = (1..=12).map(job).collect();
    db.send_many(&jobs).await.expect("send");
    let mut receiver = Receiver::<Job>::builder(&db)
        .with_receive_settings(
            ReceiveSettings::default()
                .with_max_in_flight(3)
                .with_parallel_calls(2),
        )
        .build()
        .expect("receiver");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next(&mut receiver, Duration::from_secs(20)).await);
    }
    // Full: nothing more comes while the three are held.
    let more = tokio::time::timeout(Duration::from_secs(2), receiver.next()).await;
    assert!(
        more.is_err(),
        "a fourth delivery arrived while three were held"
    );
    assert_eq!(receiver.stats().in_flight, 3);
    // Each ack frees a slot for exactly one more.
    let mut acked = 0;
    while acked < 12 {
        let delivery = held.remove(0);
        db.ack(&delivery).await.expect("ack");
        drop(delivery);
        acked += 1;
        if acked + held.len() < 12 {
            held.push(next(&mut receiver, Duration::from_secs(30)).await);
        }
        assert!(receiver.stats().in_flight <= 3);
    }
    let stats = receiver.stats();
    println!("max_in_flight 3, 12 messages: {stats:?}");
    assert_eq!(stats.max_in_flight, 3, "{stats:?}");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Jobs").await, 0);
}

#[tokio::test]
async fn renewal_calls_per_round_do_not_grow_with_deliveries() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Job>());
    let jobs: Vec<Job> = (1..=41).map(job).collect();
    db.send_many(&jobs).await.expect("send");
    let mut receiver = Receiver::<Job>::builder(&db)
        .with_receive_settings(
            ReceiveSettings::default()
                .with_max_in_flight(64)
                .with_renew_interval(Duration::from_millis(500)),
        )
        .build()
        .expect("receiver");

    // Phase 1: one delivery held through several renewal rounds.
    let one = next(&mut receiver, Duration::from_secs(20)).await;
    let before = receiver.stats();
    let rounds = before.renew_rounds + 4;
    eventually(Duration::from_secs(20), "4 rounds with one lease", || {
        let done = receiver.stats().renew_rounds >= rounds;
        async move { done }
    })
    .await;
    let after_one = receiver.stats();
    let rounds_one = after_one.renew_rounds - before.renew_rounds;
    let calls_one = after_one.renew_requests - before.renew_requests;

    // Phase 2: forty-one deliveries held.
    let mut held = vec![one];
    for _ in 0..40 {
        held.push(next(&mut receiver, Duration::from_secs(20)).await);
    }
    let before = receiver.stats();
    let rounds = before.renew_rounds + 4;
    eventually(Duration::from_secs(20), "4 rounds with 41 leases", || {
        let done = receiver.stats().renew_rounds >= rounds;
        async move { done }
    })
    .await;
    let after_many = receiver.stats();
    let rounds_many = after_many.renew_rounds - before.renew_rounds;
    let calls_many = after_many.renew_requests - before.renew_requests;
    println!(
        "renewal: 1 lease -> {calls_one} calls in {rounds_one} rounds; \
         41 leases -> {calls_many} calls in {rounds_many} rounds \
         ({} leases renewed in total)",
        after_many.renewed
    );
    assert_eq!(calls_one, rounds_one, "one call per round with one lease");
    assert_eq!(calls_many, rounds_many, "one call per round with 41 leases");
    assert!(
        after_many.renewed - before.renewed >= 41 * (rounds_many - 1),
        "every lease renewed in each round: {after_many:?}"
    );
    assert_eq!(after_many.lease_lost, 0);
    assert!(held.iter().all(|d| !d.is_lease_lost()));
    for delivery in held {
        db.ack(&delivery).await.expect("ack");
    }
}

#[tokio::test]
async fn an_ack_after_a_lost_lease_still_deletes_and_exactly_one_transaction_commits() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Job>().with_ddl([
        "CREATE TABLE Effects (Worker STRING(10) NOT NULL, JobId INT64 NOT NULL) \
                 PRIMARY KEY (Worker, JobId)"
    ]));
    db.send(&job(7)).await.expect("send");
    // Consumer A never renews: its lease lapses after Spanner's initial lease.
    let mut a = Receiver::<Job>::builder(&db)
        .with_receive_settings(ReceiveSettings::default().with_max_lease_duration(Duration::ZERO))
        .build()
        .expect("receiver a");
    let stale = &next(&mut a, Duration::from_secs(20)).await;
    a.close(); // A keeps its delivery but receives nothing more
    tokio::time::timeout(Duration::from_secs(30), stale.lease_lost())
        .await
        .expect("the lease lapses");
    assert!(stale.is_lease_lost());

    // Consumer B receives the message again.
    let mut b = Receiver::<Job>::builder(&db).build().expect("receiver b");
    let fresh = &next(&mut b, Duration::from_secs(30)).await;
    assert_eq!(fresh.key(), stale.key());

    // A acks after losing its lease: acks go by key, so it still deletes the message.
    db.transaction()
        .run(move |tx| async move {
            tx.execute_update(Statement::builder(
                "INSERT INTO Effects (Worker, JobId) VALUES ('a', 7)",
            ))
            .await?;
            tx.ack(stale).await?;
            Ok(())
        })
        .await
        .expect("A's transaction commits");
    // B's ack then finds nothing: its transaction, effect included, rolls back.
    let error = db
        .transaction()
        .run(move |tx| async move {
            tx.execute_update(Statement::builder(
                "INSERT INTO Effects (Worker, JobId) VALUES ('b', 7)",
            ))
            .await?;
            tx.ack(fresh).await?;
            Ok(())
        })
        .await
        .expect_err("B's ack must fail");
    assert!(
        matches!(error, Error::AlreadyAcked { .. }),
        "unexpected error {error:?}"
    );
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Effects").await, 1);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM Effects WHERE Worker = 'a'").await,
        1
    );
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Jobs").await, 0);
}

#[tokio::test]
async fn a_missing_queue_is_reported_on_the_stream() {
    let db = db_or_skip!();
    let mut receiver = Receiver::<Job>::builder(&db).build().expect("receiver");
    let item = tokio::time::timeout(Duration::from_secs(20), receiver.next())
        .await
        .expect("an item")
        .expect("an error before the stream ends");
    let error = item.expect_err("no such queue");
    assert!(
        matches!(&error, Error::QueueNotFound { queue, .. } if queue.as_str() == "Jobs"),
        "{error:?}"
    );
    assert_eq!(
        error.classification(),
        spanner_queues::error::Classification::Permanent,
        "{error:?}"
    );
    // Fail fast: the stream ends instead of retrying a queue that is not there.
    let end = tokio::time::timeout(Duration::from_secs(20), receiver.next())
        .await
        .expect("the stream ends");
    assert!(end.is_none(), "{end:?}");
    assert_eq!(receiver.stats().receive_calls, 0);
}

#[tokio::test]
async fn a_drifted_queue_ends_the_stream_with_schema_drift() {
    // `Jobs` with a STRING key: the type's INT64 key cannot be read from it.
    let db = db_or_skip!(setup().without_sdk_tables().with_ddl([
        "CREATE QUEUE Jobs (Id STRING(MAX) NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id)"
    ]));
    let mut receiver = Receiver::<Job>::builder(&db).build().expect("receiver");
    let first = tokio::time::timeout(Duration::from_secs(20), receiver.next())
        .await
        .expect("an item")
        .expect("an error before the stream ends");
    match first {
        Err(Error::SchemaDrift { differences, .. }) => assert!(
            differences.iter().any(|d| d.contains("key column `Id`")),
            "{differences:?}"
        ),
        other => panic!("expected SchemaDrift, got {other:?}"),
    }
    let end = tokio::time::timeout(Duration::from_secs(20), receiver.next())
        .await
        .expect("the stream ends");
    assert!(end.is_none(), "{end:?}");
}

/// Keys a fresh `RECEIVE` call gets within `max_duration`: the messages nobody holds a lease on.
async fn unleased_keys(db: &Database) -> Vec<i64> {
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT Id FROM RECEIVE_Jobs(max_duration => '2s', max_batch_size => 100)",
        ))
        .await
        .expect("receive");
    let mut keys = Vec::new();
    while let Some(row) = rows.next().await {
        keys.push(row.expect("row").get::<i64>(0).expect("id"));
    }
    keys.sort_unstable();
    keys
}

#[tokio::test]
async fn a_closed_receiver_releases_every_row_it_read_so_a_restart_gets_them_at_once() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Job>());
    // Fewer messages than a call drains when it ends (16), so that none can be left in transit.
    let jobs: Vec<Job> = (1..=14).map(job).collect();
    db.send_many(&jobs).await.expect("send");
    let mut receiver = Receiver::<Job>::builder(&db)
        .with_receive_settings(ReceiveSettings::default().with_max_in_flight(2))
        .build()
        .expect("receiver");
    // A busy consumer: both slots taken, so whatever Spanner streams now is read ahead.
    let mut taken = vec![
        next(&mut receiver, Duration::from_secs(20)).await,
        next(&mut receiver, Duration::from_secs(20)).await,
    ];
    eventually(
        Duration::from_secs(20),
        "rows read ahead of a free slot",
        || {
            let read_ahead = receiver.stats().read_ahead;
            async move { read_ahead > 0 }
        },
    )
    .await;
    let read_ahead = receiver.stats().read_ahead;
    // Graceful shutdown: close, give back what the consumer holds, drain the stream.
    let closed = Instant::now();
    receiver.close();
    for delivery in taken.drain(..) {
        db.release(&delivery, Duration::ZERO)
            .await
            .expect("release");
    }
    while let Some(item) = receiver.next().await {
        db.release(&item.expect("delivery"), Duration::ZERO)
            .await
            .expect("release");
    }
    let stats = receiver.stats();
    // Restart: a fresh receive gets all 14 at once, none still leased to the closed receiver
    // (a lease lasts 10 s; this call lasts 2 s).
    let keys = unleased_keys(&db).await;
    println!(
        "closed receiver: {stats:?}; fresh RECEIVE got {} of 14 messages {:?} after close",
        keys.len(),
        closed.elapsed()
    );
    assert_eq!(keys, (1..=14).collect::<Vec<_>>(), "{stats:?}");
    assert_eq!(stats.expired_on_receipt, 0, "{stats:?}");
    assert!(stats.released_unread >= read_ahead as u64, "{stats:?}");
    assert_eq!((stats.in_flight, stats.read_ahead), (0, 0), "{stats:?}");
}
