//! Receiving: `RECEIVE_<Q>` over `ExecuteStreamingSql` in a strong single-use read-only
//! transaction (reference §3), leases (§6), `disable_delivery` (§1.2).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::transaction::TimestampBound;
use google_cloud_spanner::types::TypeCode;

use crate::support::*;

const GUARD: Duration = Duration::from_secs(60);

/// The queue of the documentation's examples (reference §1.2, §3.2).
const USERS: &str = "CREATE TABLE Users (UserId INT64 NOT NULL) PRIMARY KEY (UserId)";
const USER_TASKS: &str = "CREATE QUEUE UserTasks (
  UserId     INT64 NOT NULL,
  MessageId  STRING(36) NOT NULL, -- UUID recommended
  Payload    BYTES(MAX) NOT NULL  -- Also: Proto, JSON, String are possible.
) PRIMARY KEY (UserId, MessageId),
INTERLEAVE IN PARENT Users ON DELETE CASCADE";

async fn send_user_tasks(db: &spanner_queues_testing::TestDatabase, n: usize) {
    let mut statements =
        vec![Statement::builder("INSERT INTO Users (UserId) VALUES (123)").build()];
    for i in 0..n {
        statements.push(
            Statement::builder(
                "INSERT INTO UserTasks (UserId, MessageId, Payload) VALUES (123, @id, @payload)",
            )
            .add_param("id", format!("m-{i}"))
            .add_param("payload", format!("task {i}").into_bytes())
            .build(),
        );
    }
    dml(db, statements).await.expect("send the user tasks");
}

/// `SELECT *` returns the key columns, Payload, DeliverTime, then the three Spanner* columns,
/// including `SpannerLastBatchMessage` without `max_batch_size` [I from the Go sample, S2].
#[tokio::test]
async fn select_star_returns_keys_payload_deliver_time_and_lease_columns_in_order() {
    let db = database(&[USERS, USER_TASKS]).await;
    send_user_tasks(&db, 1).await;
    let mut receiver = Receiver::open(&db, "SELECT * FROM RECEIVE_UserTasks(max_duration=>'20m')")
        .await
        .expect("the documented RECEIVE");
    assert_eq!(
        receiver.columns(),
        [
            "UserId",
            "MessageId",
            "Payload",
            "DeliverTime",
            "SpannerLeaseExpirationTimestamp",
            "SpannerLeaseToken",
            "SpannerLastBatchMessage"
        ]
    );
    let types = receiver.types();
    assert_eq!(
        types[..5],
        [
            TypeCode::Int64,
            TypeCode::String,
            TypeCode::Bytes,
            TypeCode::Timestamp,
            TypeCode::Timestamp
        ]
    );
    // [?] STRING per the GoogleSQL docs, BYTES per a pre-GA C++ test.
    assert!(
        matches!(types[5], TypeCode::String | TypeCode::Bytes),
        "{:?}",
        types[5]
    );
    assert_eq!(types[6], TypeCode::Bool);

    let d = receiver.expect_next(GUARD, "the message").await;
    assert_eq!(d.row.get::<i64>("UserId").expect("UserId"), 123);
    assert_eq!(d.row.get::<String>("MessageId").expect("MessageId"), "m-0");
    assert_eq!(
        d.row.get::<Vec<u8>>("Payload").expect("Payload"),
        b"task 0".to_vec()
    );
    assert!(!d.token.is_empty());
    assert_eq!(
        d.last_in_batch,
        Some(true),
        "a batch of one is its own last message"
    );
}

/// The documentation's explicit column lists (reference §3.2), and another order.
#[tokio::test]
async fn explicit_column_lists_return_those_columns_in_that_order() {
    let db = database(&[USERS, USER_TASKS]).await;
    send_user_tasks(&db, 1).await;
    // A stream may take every due message at once; each form gets a message of its own.
    let replace_message = |i: usize| {
        dml(
            &db,
            vec![
                Statement::builder("DELETE FROM UserTasks WHERE TRUE").build(),
                Statement::builder(
                    "INSERT INTO UserTasks (UserId, MessageId, Payload) VALUES (123, @id, b'x')",
                )
                .add_param("id", format!("m-{i}"))
                .build(),
            ],
        )
    };

    let mut first = Receiver::open(
        &db,
        "SELECT UserId, MessageId, Payload, DeliverTime,
                SpannerLeaseExpirationTimestamp, SpannerLeaseToken
         FROM RECEIVE_UserTasks(max_duration=>'20m')",
    )
    .await
    .expect("first documented form");
    assert_eq!(
        first.columns(),
        [
            "UserId",
            "MessageId",
            "Payload",
            "DeliverTime",
            "SpannerLeaseExpirationTimestamp",
            "SpannerLeaseToken"
        ]
    );
    let d = first.expect_next(GUARD, "first form").await;
    assert_eq!(d.row.raw_values().len(), 6);
    drop(first);
    replace_message(1).await.expect("a fresh message");

    let mut second = Receiver::open(
        &db,
        "SELECT UserId, MessageId, Payload, DeliverTime,
                SpannerLeaseExpirationTimestamp, SpannerLeaseToken,
                SpannerLastBatchMessage -- Special boolean column returns TRUE if the
                                        -- last message is in a batch.
         FROM RECEIVE_UserTasks(max_duration=>'20m', max_batch_size=>20)",
    )
    .await
    .expect("second documented form");
    assert_eq!(second.columns().len(), 7);
    let d = second.expect_next(GUARD, "second form").await;
    assert!(d.last_in_batch.is_some());
    drop(second);
    replace_message(2).await.expect("a fresh message");

    let mut third = Receiver::open(
        &db,
        "SELECT SpannerLeaseToken, Payload, MessageId FROM RECEIVE_UserTasks(max_duration => '20m')",
    )
    .await
    .expect("a reordered list");
    assert_eq!(
        third.columns(),
        ["SpannerLeaseToken", "Payload", "MessageId"]
    );
    let d = third.expect_next(GUARD, "third form").await;
    assert_eq!(d.row.raw_values().len(), 3);
    assert!(!d.token.is_empty());

    // A column the function does not return.
    let error = match Receiver::open(
        &db,
        "SELECT Nope FROM RECEIVE_UserTasks(max_duration => '1s')",
    )
    .await
    {
        Ok(mut r) => r.try_next().await.and_then(Result::err),
        Err(e) => Some(e),
    }
    .expect("an unknown column is an error");
    assert_eq!(
        code(&error),
        Some(Code::InvalidArgument),
        "{}",
        chain(&error)
    );
    assert_mentions(&message(&error), "Nope");
}

/// `max_batch_size` bounds each batch; `SpannerLastBatchMessage` is TRUE on the last message of
/// a batch [C, S2].
#[tokio::test]
async fn max_batch_size_bounds_batches_and_marks_their_last_message() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        (1..=7).map(|id| send_now("Q", id, "batched")).collect(),
    )
    .await;

    for batch in [3, 1] {
        let mut receiver = Receiver::open(&db, &receive_sql("Q", "60s", Some(batch)))
            .await
            .expect("RECEIVE with max_batch_size");
        let mut flags = Vec::new();
        let mut seen = HashSet::new();
        while seen.len() < 7 {
            let d = receiver
                .expect_next(GUARD, &format!("max_batch_size {batch}"))
                .await;
            seen.insert(d.id);
            flags.push(d.last_in_batch.expect("SpannerLastBatchMessage"));
        }
        assert_eq!(
            flags.last(),
            Some(&true),
            "the last message closes its batch"
        );
        let mut run = 0;
        for flag in &flags {
            run += 1;
            assert!(
                run <= batch,
                "a batch larger than max_batch_size {batch}: {flags:?}"
            );
            if *flag {
                run = 0;
            }
        }
        drop(receiver);
        // Give the messages back for the next round: ack and send them again.
        let mut mutations: Vec<Mutation> =
            (1..=7).map(|id| ack("Q", vec![int(id)], false)).collect();
        mutations.extend((1..=7).map(|id| send_now("Q", id, "batched")));
        commit_ok(&raw, mutations).await;
    }
}

/// Each delivery carries a fresh lease of about 10 s [C] and an opaque token, distinct per
/// delivery. A message comes again only once its lease has run out (a loaded machine can take
/// longer than a lease to read twenty rows; the redelivery is then correct, not a failure).
#[tokio::test]
async fn leases_last_about_10_seconds_with_distinct_opaque_tokens() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        (1..=20).map(|id| send_now("Q", id, "lease me")).collect(),
    )
    .await;
    let before = SystemTime::now();
    let mut receiver = Receiver::open(&db, &receive_sql("Q", "60s", Some(20)))
        .await
        .unwrap_or_else(|e| panic!("RECEIVE_Q: {}", chain(&e)));
    let mut tokens = HashSet::new();
    let mut last_lease: HashMap<i64, SystemTime> = HashMap::new();
    while last_lease.len() < 20 {
        let d = receiver
            .expect_next(GUARD, &format!("message {} of 20", last_lease.len() + 1))
            .await;
        assert_lease_about_10s(d.expires, before, d.received_at);
        assert!(
            d.token.len() >= 16,
            "a lease token should be unguessable, got {:?}",
            d.token
        );
        let id = d.id.expect("Id");
        assert_ne!(d.token, id.to_string(), "the token must not be the key");
        assert!(tokens.insert(d.token.clone()), "token reused: {}", d.token);
        if let Some(earlier) = last_lease.insert(id, d.expires) {
            assert!(
                d.received_at >= earlier,
                "message {id} delivered again at {:?} while its lease ran until {:?}",
                time::OffsetDateTime::from(d.received_at),
                time::OffsetDateTime::from(earlier),
            );
        }
    }
}

/// However many streams are open, a message is never leased to two receivers at once [C].
#[tokio::test]
async fn concurrent_receivers_never_hold_live_leases_on_one_message() {
    const MESSAGES: i64 = 60;
    const STREAMS: usize = 8;
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    let deliveries: Arc<Mutex<Vec<(usize, Delivery)>>> = Arc::default();
    let all_seen = Arc::new(tokio::sync::Notify::new());

    let mut tasks = tokio::task::JoinSet::new();
    for receiver_id in 0..STREAMS {
        // Half the receivers use clients of their own, as separate processes would.
        let client = if receiver_id % 2 == 0 {
            db.client().clone()
        } else {
            db.spanner()
                .database_client(db.path())
                .build()
                .await
                .expect("another client")
        };
        let deliveries = Arc::clone(&deliveries);
        let all_seen = Arc::clone(&all_seen);
        tasks.spawn(async move {
            loop {
                let mut receiver = Receiver::open_with(
                    &client,
                    Statement::builder(receive_sql("Q", "20s", Some(3))).build(),
                )
                .await
                .expect("RECEIVE");
                while let Some(d) = receiver.next().await {
                    let mut all = deliveries.lock().expect("lock");
                    all.push((receiver_id, d));
                    let distinct: HashSet<Option<i64>> = all.iter().map(|(_, d)| d.id).collect();
                    if distinct.len() == MESSAGES as usize {
                        all_seen.notify_one();
                    }
                }
            }
        });
    }
    // Send while the receivers run, in a few commits.
    for chunk in (1..=MESSAGES).collect::<Vec<_>>().chunks(15) {
        commit_ok(
            &raw,
            chunk.iter().map(|id| send_now("Q", *id, "x")).collect(),
        )
        .await;
    }
    tokio::time::timeout(GUARD, async {
        tokio::select! {
            () = all_seen.notified() => {}
            Some(ended) = tasks.join_next() => panic!("a receiver ended early: {ended:?}"),
        }
    })
    .await
    .expect("every message delivered");
    tasks.abort_all();

    let all = deliveries.lock().expect("lock");
    let per_receiver = all.iter().fold(HashMap::new(), |mut m, (r, _)| {
        *m.entry(*r).or_insert(0) += 1;
        m
    });
    println!(
        "concurrent receivers: {} deliveries of {MESSAGES} messages; per receiver {per_receiver:?}",
        all.len()
    );
    assert_no_overlapping_leases(all.iter().map(|(r, d)| (*r, d)));
}

/// Checks that, per message, each delivery's lease started after the previous one expired:
/// by the client's clock (received after the previous expiry) and by the server's (the
/// expirations are at least one lease apart).
pub(crate) fn assert_no_overlapping_leases<'a>(
    deliveries: impl Iterator<Item = (usize, &'a Delivery)>,
) {
    let mut by_message: HashMap<Option<i64>, Vec<(usize, &Delivery)>> = HashMap::new();
    for (receiver, d) in deliveries {
        by_message.entry(d.id).or_default().push((receiver, d));
    }
    for (id, mut list) in by_message {
        list.sort_by_key(|(_, d)| d.expires);
        for pair in list.windows(2) {
            let ((r1, a), (r2, b)) = (pair[0], pair[1]);
            assert!(
                b.received_at >= a.expires,
                "message {id:?}: receiver {r2} got it at {:?} while receiver {r1}'s lease ran \
                 until {:?}",
                b.received_at,
                a.expires
            );
            let apart = b.expires.duration_since(a.expires).unwrap_or_default();
            assert!(
                apart >= LEASE,
                "message {id:?}: lease expirations only {apart:?} apart (receivers {r1}, {r2})"
            );
        }
    }
}

/// An expired lease makes the message deliverable again, with a new token, after a back-off
/// [C, S2]; the old token can no longer be renewed [C].
#[tokio::test]
async fn an_expired_lease_is_redelivered_with_a_new_token() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "retry me")]).await;
    let mut receiver = Receiver::open(&db, &receive_sql("Q", "60s", None))
        .await
        .expect("RECEIVE");
    let first = receiver.expect_next(GUARD, "first delivery").await;
    let second = receiver.expect_next(GUARD, "redelivery").await;
    assert_eq!(second.id, Some(1));
    assert_ne!(second.token, first.token, "a redelivery has a new token");
    assert!(
        second.received_at >= first.expires,
        "redelivered at {:?}, before the first lease expired at {:?}",
        second.received_at,
        first.expires
    );
    let gap = second
        .expires
        .duration_since(first.expires)
        .unwrap_or_default();
    assert!(gap >= LEASE, "leases overlap: expirations {gap:?} apart");
    println!(
        "redelivery: back-off after expiry about {:?}",
        gap.saturating_sub(LEASE)
    );
    assert_eq!(second.payload_text(), "retry me");

    let renewed = renew(&db, "Q", &[first.token.clone(), second.token.clone()])
        .await
        .expect("RENEWLEASE");
    assert!(
        !renewed.contains_key(&first.token),
        "an expired token has no row"
    );
    assert!(
        renewed
            .get(&second.token)
            .is_some_and(|(new, _)| new.is_some()),
        "the live token renews: {renewed:?}"
    );
}

/// `disable_delivery` [C option, ? semantics]: by its name it stops deliveries; altering it
/// back resumes them on open streams.
#[tokio::test]
async fn disable_delivery_stops_deliveries_until_altered() {
    let db = database(&[
        "CREATE QUEUE Q (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), \
         OPTIONS (disable_delivery = true)",
    ])
    .await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "held")]).await;
    let got = receive_all(&db, &receive_sql("Q", "2s", None)).await;
    assert!(got.is_empty(), "delivered with disable_delivery: {got:?}");

    let mut receiver = Receiver::open(&db, &receive_sql("Q", "60s", None))
        .await
        .expect("RECEIVE");
    db.apply_ddl(["ALTER QUEUE Q SET OPTIONS (disable_delivery = false)"])
        .await
        .expect("ALTER QUEUE SET OPTIONS");
    let d = receiver
        .expect_next(GUARD, "delivery after disable_delivery = false")
        .await;
    assert_eq!(d.id, Some(1));
    drop(receiver);

    db.apply_ddl(["ALTER QUEUE Q SET OPTIONS (disable_delivery = true)"])
        .await
        .expect("ALTER QUEUE SET OPTIONS");
    commit_ok(&raw, vec![send_now("Q", 2, "held again")]).await;
    let got = receive_all(&db, &receive_sql("Q", "2s", None)).await;
    assert!(got.is_empty(), "delivered with disable_delivery: {got:?}");
    // Sending still works.
    assert_eq!(ids(&db, "Q").await, vec![1, 2]);
}

async fn receive_error(
    client: &google_cloud_spanner::client::DatabaseClient,
    sql: &str,
    stale: bool,
) -> google_cloud_spanner::Error {
    let mut builder = client.single_use();
    if stale {
        builder =
            builder.set_timestamp_bound(TimestampBound::exact_staleness(Duration::from_secs(10)));
    }
    let result = builder
        .build()
        .execute_query(Statement::builder(sql).build())
        .await;
    match result {
        Err(e) => e,
        Ok(mut rs) => match rs.next().await {
            Some(Err(e)) => e,
            other => panic!("{sql}: expected an error, got {other:?}"),
        },
    }
}

/// "Spanner rejects stale reads" [C, S2]; RECEIVE is a strong single-use read-only streaming
/// query [C]. Read-write transactions and non-streaming `ExecuteSql` are [?] in the reference:
/// the emulator refuses them with a clear error, so that code written against it works on
/// Spanner.
#[tokio::test]
async fn stale_reads_read_write_transactions_and_execute_sql_are_refused() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "x")]).await;
    let sql = receive_sql("Q", "2s", None);

    let error = receive_error(db.client(), &sql, true).await;
    assert_eq!(
        code(&error),
        Some(Code::InvalidArgument),
        "{}",
        chain(&error)
    );
    assert_mentions(&message(&error), "stale");

    let result = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            let mut rs = tx.execute_query(Statement::builder(&sql).build()).await?;
            while let Some(row) = rs.next().await {
                row?;
            }
            Ok(())
        })
        .await;
    let message = expect_code(result, Code::InvalidArgument);
    assert_mentions(&message, "read-only");

    let status = raw
        .execute_sql(&sql)
        .await
        .expect_err("RECEIVE through ExecuteSql");
    assert!(
        matches!(
            status.code(),
            tonic::Code::InvalidArgument
                | tonic::Code::Unimplemented
                | tonic::Code::FailedPrecondition
        ),
        "{status:?}"
    );
    assert_mentions(status.message(), "ExecuteStreamingSql");

    // None of this leased the message: a proper receive gets it at once.
    let got = receive_n(&db, "Q", 1, GUARD).await;
    assert_eq!(got[0].id, Some(1));
}

#[tokio::test]
async fn malformed_receive_arguments_are_invalid_argument() {
    let db = database(&[SIMPLE_QUEUE]).await;
    for (sql, mentions) in [
        (
            "SELECT * FROM RECEIVE_Q(max_duration => 'soon')",
            "max_duration",
        ),
        (
            "SELECT * FROM RECEIVE_Q(max_duration => '-5s')",
            "max_duration",
        ),
        (
            "SELECT * FROM RECEIVE_Q(max_duration => '0s')",
            "max_duration",
        ),
        (
            "SELECT * FROM RECEIVE_Q(max_duration => '1s', max_batch_size => 0)",
            "max_batch_size",
        ),
        (
            "SELECT * FROM RECEIVE_Q(max_duration => '1s', max_batch_size => -3)",
            "max_batch_size",
        ),
        (
            "SELECT * FROM RECEIVE_Q(max_duration => '1s', max_batch_size => 'ten')",
            "max_batch_size",
        ),
        (
            "SELECT * FROM RECEIVE_Q(max_duration => '1s', wait => 3)",
            "wait",
        ),
        (
            "SELECT * FROM RECEIVE_Nope(max_duration => '1s')",
            "RECEIVE_Nope",
        ),
    ] {
        let error = receive_error(db.client(), sql, false).await;
        assert_eq!(
            code(&error),
            Some(Code::InvalidArgument),
            "{sql}: {}",
            chain(&error)
        );
        assert_mentions(&message(&error), mentions);
    }
}

/// The front sees every commit, so a message sent while a stream waits reaches that stream
/// (issue 3), by a commit or by DML. The stream lasts 30 s, no longer than the front's longest
/// idle wait (`MAX_IDLE_WAIT` in the front's receive module), and leases at most half its batch
/// ahead of this reader, so between deliveries it idles; an idle stream that missed the commit
/// would not read the queue again before it ends, and the delivery would never come. No time is
/// asserted: the five sends only have to fit in the stream's 30 s. If the front's idle wait
/// ever drops below the stream's length, this test still passes but no longer tells a wake from
/// a re-read.
#[tokio::test]
async fn a_message_sent_while_a_stream_is_open_arrives_on_that_stream() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "first")]).await;
    let mut receiver = Receiver::open(&db, &receive_sql("Q", "30s", Some(10)))
        .await
        .expect("RECEIVE");
    // The stream is serving (and then idle) once the first message is through.
    receiver.expect_next(GUARD, "first message").await;

    let mut latencies = Vec::new();
    for id in 2..=4 {
        let sent = Instant::now();
        commit_ok(&raw, vec![send_now("Q", id, "later")]).await;
        let d = receiver.expect_next(GUARD, "message sent while open").await;
        assert_eq!(d.id, Some(id));
        latencies.push(sent.elapsed());
    }
    // A send by DML (the official client's read-write transaction) wakes the stream too.
    let sent = Instant::now();
    dml1(&db, "INSERT INTO Q (Id, Payload) VALUES (5, 'by DML')")
        .await
        .expect("INSERT");
    let d = receiver
        .expect_next(GUARD, "message sent by DML while open")
        .await;
    assert_eq!(d.id, Some(5));
    latencies.push(sent.elapsed());
    println!("send → open stream latencies: {latencies:?}");
}

/// A stream ends when its `max_duration` runs out, not at some fixed idle timeout: a 2 s stream
/// opened after a 60 s one ends while the 60 s one still serves (it receives a message sent
/// after the 2 s stream ended).
#[tokio::test]
async fn the_stream_ends_after_max_duration() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    let mut long = Receiver::open(&db, &receive_sql("Q", "60s", None))
        .await
        .expect("RECEIVE for 60 s");
    let started = Instant::now();
    let short = Receiver::open(&db, &receive_sql("Q", "2s", None))
        .await
        .expect("RECEIVE for 2 s");
    let got = tokio::time::timeout(GUARD, short.drain())
        .await
        .expect("the 2 s RECEIVE never ended");
    let elapsed = started.elapsed();
    assert!(got.is_empty());
    assert!(
        elapsed >= Duration::from_millis(1900),
        "ended after {elapsed:?}, before max_duration"
    );
    println!("2 s RECEIVE ended after {elapsed:?}");
    commit_ok(&raw, vec![send_now("Q", 1, "after the short stream")]).await;
    let d = long
        .expect_next(GUARD, "a message sent after the 2 s stream ended")
        .await;
    assert_eq!(d.id, Some(1));
}

/// A reader that works on each message before it acks it, slower than the queue could be
/// leased: the stream leases a message only when the reader has acted on the previous ones
/// (`max_batch_size` of them at a time), so no row reaches it with its lease run out, and the
/// messages it has not reached yet stay free for other receivers. Before, the stream leased the
/// whole queue at once and the later rows arrived expired.
#[tokio::test]
async fn a_slow_reader_never_receives_a_row_whose_lease_has_expired() {
    const MESSAGES: i64 = 10;
    // Simulated work per message: the reader is slow, not idle. Nine of them outlast a lease
    // by a third.
    const WORK: Duration = Duration::from_millis(1_500);
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        (1..=MESSAGES).map(|id| send_now("Q", id, "slow")).collect(),
    )
    .await;
    let mut receiver = Receiver::open(&db, &receive_sql("Q", "60s", Some(1)))
        .await
        .expect("RECEIVE");
    let mut late = Vec::new();
    let mut seen = HashSet::new();
    while seen.len() < usize::try_from(MESSAGES).unwrap_or(0) {
        let d = receiver.expect_next(GUARD, "the next message").await;
        let id = d.id.expect("Id");
        if d.expires <= SystemTime::now() {
            late.push(id);
            continue; // Go sample: skip a row whose lease ran out.
        }
        // While this reader holds one message, the rest are not leased to it: a second
        // receiver gets one at once.
        if seen.is_empty() {
            let mut other = Receiver::open(&db, &receive_sql("Q", "5s", Some(1)))
                .await
                .expect("second RECEIVE");
            let got = other
                .expect_next(GUARD, "a message for the second receiver")
                .await;
            assert_ne!(got.id, Some(id), "a message leased twice");
            drop(other);
            commit_ok(&raw, vec![ack("Q", vec![int(got.id.expect("Id"))], false)]).await;
            seen.insert(got.id.expect("Id"));
        }
        tokio::time::sleep(WORK).await;
        commit_ok(&raw, vec![ack("Q", vec![int(id)], false)]).await;
        assert!(seen.insert(id), "message {id} delivered after its ack");
    }
    assert!(
        late.is_empty(),
        "rows received with their lease already expired: {late:?}"
    );
}

/// A stream notices an ack: once its reader has acked a message, the stream holds further rows
/// back while the reader holds one with a live lease (rather than assuming, after a tenth of a
/// lease, that a reader which never acts will not act). Before the fix the ack went unnoticed,
/// so the third message came a second after the second while the second's lease still ran.
#[tokio::test]
async fn a_stream_notices_an_ack_and_then_waits_for_the_reader() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        (1..=3).map(|id| send_now("Q", id, "ack me")).collect(),
    )
    .await;
    let mut receiver = Receiver::open(&db, &receive_sql("Q", "60s", Some(1)))
        .await
        .expect("RECEIVE");
    let first = receiver.expect_next(GUARD, "the first message").await;
    commit_ok(
        &raw,
        vec![ack("Q", vec![int(first.id.expect("Id"))], false)],
    )
    .await;
    let second = receiver.expect_next(GUARD, "the second message").await;
    assert_ne!(second.id, first.id, "an acked message came again");
    // The second message's lease runs for about 10 s and the reader has shown it acts on its
    // leases: nothing more may come within 3 s (an absence, so a slow machine cannot fail it).
    let early = tokio::time::timeout(Duration::from_secs(3), receiver.next()).await;
    assert!(
        early.is_err(),
        "a third message arrived while the reader held the second under a live lease: {:?}",
        early.ok().flatten().map(|d| d.id)
    );
    commit_ok(
        &raw,
        vec![ack("Q", vec![int(second.id.expect("Id"))], false)],
    )
    .await;
    let third = receiver.expect_next(GUARD, "the third message").await;
    assert!(
        third.id != first.id && third.id != second.id,
        "the third delivery repeated an acked message: {:?}",
        third.id
    );
}
