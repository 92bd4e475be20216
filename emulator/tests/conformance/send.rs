//! Sending: `Mutation.Send` (reference §2.2) and DML `INSERT` (§2.1), delayed delivery (§2.3),
//! duplicate keys (§2.5), and the queue options that refuse sends (§1.2).

use std::time::{Duration, SystemTime};

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::statement::Statement;

use crate::support::*;

const GUARD: Duration = Duration::from_secs(60);

#[tokio::test]
async fn send_mutation_in_single_use_commit_is_received() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    let response = commit_ok(&raw, vec![send_now("Q", 1, "hello")]).await;
    let committed = commit_time(&response);

    let got = receive_n(&db, "Q", 1, GUARD).await;
    assert_eq!(got[0].id, Some(1));
    assert_eq!(got[0].payload_text(), "hello");
    // deliver_time absent → delivered "immediately" [C]: DeliverTime is about the commit.
    let deliver_time = got[0].deliver_time.expect("DeliverTime");
    assert!(
        distance(deliver_time, committed) < Duration::from_secs(5),
        "DeliverTime {deliver_time:?} vs commit {committed:?}"
    );
}

#[tokio::test]
async fn send_mutation_in_read_write_transaction_commits_with_a_business_write() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    raw.begin_and_commit(
        vec![
            insert("Orders", &["Id", "Note"], vec![int(7), text("paid")]),
            send_now("Q", 7, "order 7 paid"),
        ],
        false,
    )
    .await
    .expect("BeginTransaction + Commit with Send");
    assert_eq!(ids(&db, "Orders").await, vec![7]);
    assert_eq!(ids(&db, "Q").await, vec![7]);
    let got = receive_n(&db, "Q", 1, GUARD).await;
    assert_eq!(got[0].payload_text(), "order 7 paid");
}

/// Multiplexed-session clients give one mutation of a mutation-only transaction to
/// `BeginTransaction` as `mutation_key`; it can be a `Send` or an `Ack` (reference §2.2).
#[tokio::test]
async fn send_and_ack_as_begin_transaction_mutation_key_on_a_multiplexed_session() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect_multiplexed(&db).await;
    raw.begin_and_commit(vec![send_now("Q", 1, "one"), send_now("Q", 2, "two")], true)
        .await
        .expect("Send as mutation_key");
    assert_eq!(ids(&db, "Q").await, vec![1, 2]);
    raw.begin_and_commit(vec![ack("Q", vec![int(1)], false)], true)
        .await
        .expect("Ack as mutation_key");
    assert_eq!(ids(&db, "Q").await, vec![2]);
    // The Ack's NOT_FOUND still fails the commit when the Ack is the mutation key.
    let status = raw
        .begin_and_commit(vec![ack("Q", vec![int(1)], false)], true)
        .await
        .expect_err("ack of a missing message");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
}

#[tokio::test]
async fn deliver_time_in_the_past_is_replaced_by_now() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    let day_ago = SystemTime::now() - Duration::from_secs(86_400);
    let response = commit_ok(&raw, vec![send_at("Q", 1, "late", day_ago)]).await;
    let committed = commit_time(&response);

    let rows = query(
        db.client(),
        Statement::builder("SELECT DeliverTime FROM Q WHERE Id = 1").build(),
    )
    .await
    .expect("read the queue");
    let deliver_time: SystemTime = rows[0].get("DeliverTime").expect("DeliverTime");
    // "replaced with a value closer to the current time" [C, S1].
    assert!(
        distance(deliver_time, committed) < Duration::from_secs(5),
        "a past deliver_time must be moved to about now: {deliver_time:?}, commit {committed:?}"
    );
    let got = receive_n(&db, "Q", 1, GUARD).await;
    assert_eq!(got[0].id, Some(1));
}

#[tokio::test]
async fn future_deliver_time_is_invisible_until_due() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    let soon = SystemTime::now() + Duration::from_secs(3);
    let later = SystemTime::now() + Duration::from_secs(3600);
    commit_ok(
        &raw,
        vec![
            send_at("Q", 1, "soon", soon),
            send_at("Q", 2, "later", later),
        ],
    )
    .await;

    // The row exists (queues are queryable) with the requested DeliverTime.
    let rows = query(
        db.client(),
        Statement::builder("SELECT Id, DeliverTime FROM Q ORDER BY Id").build(),
    )
    .await
    .expect("read the queue");
    assert_eq!(rows.len(), 2);
    let stored: SystemTime = rows[1].get("DeliverTime").expect("DeliverTime");
    assert!(
        distance(stored, later) < Duration::from_millis(1),
        "{stored:?} vs {later:?}"
    );

    let mut receiver = Receiver::open(&db, &receive_sql("Q", "8s", None))
        .await
        .expect("RECEIVE");
    let first = receiver.expect_next(GUARD, "the message due in 3 s").await;
    assert_eq!(first.id, Some(1), "the message due in an hour came first");
    assert!(
        first.received_at >= soon,
        "delivered before its DeliverTime: received {:?}, due {soon:?}",
        first.received_at
    );
    let rest = receiver.drain().await;
    assert!(
        rest.iter().all(|d| d.id != Some(2)),
        "a message due in an hour was delivered: {rest:?}"
    );
}

#[tokio::test]
async fn send_without_payload_is_refused() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    let status = raw
        .commit(vec![
            insert("Orders", &["Id"], vec![int(1)]),
            send("Q", vec![int(1)], None, None),
        ])
        .await
        .expect_err("a Send without payload");
    // The payload is required ([C] Java rejects it; the column is NOT NULL [I]). The code is
    // not documented: INVALID_ARGUMENT or FAILED_PRECONDITION are both plausible.
    assert!(
        matches!(
            status.code(),
            tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
        ),
        "{status:?}"
    );
    assert!(ids(&db, "Q").await.is_empty());
    assert!(
        ids(&db, "Orders").await.is_empty(),
        "the commit must not apply"
    );

    // A NULL payload is no payload either.
    let status = raw
        .commit(vec![send("Q", vec![int(1)], Some(null()), None)])
        .await
        .expect_err("a Send with a NULL payload");
    assert!(
        matches!(
            status.code(),
            tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
        ),
        "{status:?}"
    );
    assert!(ids(&db, "Q").await.is_empty());
}

/// [I] reference §2.5: a second send to a key that is still queued fails like an insert.
#[tokio::test]
async fn second_send_to_a_queued_key_is_already_exists() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "first")]).await;

    // Mutation.
    expect_status(
        raw.commit(vec![
            insert("Orders", &["Id"], vec![int(1)]),
            send_now("Q", 1, "second"),
        ])
        .await,
        tonic::Code::AlreadyExists,
    );
    assert!(
        ids(&db, "Orders").await.is_empty(),
        "the commit must not apply"
    );
    // DML.
    expect_code(
        dml1(&db, "INSERT INTO Q (Id, Payload) VALUES (1, 'second')").await,
        Code::AlreadyExists,
    );
    // Two sends of one key in one commit.
    expect_status(
        raw.commit(vec![send_now("Q", 2, "a"), send_now("Q", 2, "b")])
            .await,
        tonic::Code::AlreadyExists,
    );
    let rows = query(
        db.client(),
        Statement::builder("SELECT Id, Payload FROM Q ORDER BY Id").build(),
    )
    .await
    .expect("read the queue");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<String>("Payload").expect("Payload"), "first");

    // Once acked, the key can be used again.
    commit_ok(&raw, vec![ack("Q", vec![int(1)], false)]).await;
    commit_ok(&raw, vec![send_now("Q", 1, "again")]).await;
    let got = receive_n(&db, "Q", 1, GUARD).await;
    assert_eq!(got[0].payload_text(), "again");
}

#[tokio::test]
async fn send_and_ack_to_an_unknown_queue_are_not_found() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    expect_status(
        raw.commit(vec![
            insert("Orders", &["Id"], vec![int(1)]),
            send_now("Nope", 1, "x"),
        ])
        .await,
        tonic::Code::NotFound,
    );
    expect_status(
        raw.commit(vec![ack("Nope", vec![int(1)], true)]).await,
        tonic::Code::NotFound,
    );
    // A table is not a queue either: Send to it is refused, and nothing is written.
    let status = raw
        .commit(vec![send_now("Orders", 2, "x")])
        .await
        .expect_err("Send to a table");
    assert!(
        matches!(
            status.code(),
            tonic::Code::NotFound | tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
        ),
        "{status:?}"
    );
    assert!(ids(&db, "Orders").await.is_empty());

    // Also in a database that has no queue at all.
    let plain = database(&[ORDERS]).await;
    let raw = Raw::connect(&plain).await;
    expect_status(
        raw.commit(vec![send_now("Nope", 1, "x")]).await,
        tonic::Code::NotFound,
    );
    expect_status(
        raw.commit(vec![ack("Nope", vec![int(1)], false)]).await,
        tonic::Code::NotFound,
    );
}

/// `disable_send` [C option, ? semantics]: by its name it refuses sends, by mutation and DML.
#[tokio::test]
async fn disable_send_refuses_sends_until_altered() {
    let db = database(&[
        "CREATE QUEUE Q (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), \
         OPTIONS (disable_send = true)",
        ORDERS,
    ])
    .await;
    let raw = Raw::connect(&db).await;
    let status = raw
        .commit(vec![
            insert("Orders", &["Id"], vec![int(1)]),
            send_now("Q", 1, "x"),
        ])
        .await
        .expect_err("Send to a queue with disable_send");
    assert_mentions(status.message(), "disable_send");
    let error = dml(
        &db,
        vec![
            Statement::builder("INSERT INTO Orders (Id) VALUES (2)").build(),
            Statement::builder("INSERT INTO Q (Id, Payload) VALUES (2, 'x')").build(),
        ],
    )
    .await
    .expect_err("INSERT into a queue with disable_send");
    assert_mentions(&message(&error), "disable_send");
    assert!(ids(&db, "Q").await.is_empty());
    assert!(
        ids(&db, "Orders").await.is_empty(),
        "nothing of either commit applies"
    );

    db.apply_ddl(["ALTER QUEUE Q SET OPTIONS (disable_send = false)"])
        .await
        .expect("ALTER QUEUE SET OPTIONS");
    commit_ok(&raw, vec![send_now("Q", 1, "x")]).await;
    dml1(&db, "INSERT INTO Q (Id, Payload) VALUES (2, 'y')")
        .await
        .expect("INSERT after disable_send = false");
    assert_eq!(ids(&db, "Q").await, vec![1, 2]);
}

/// The documented DML examples (reference §2.1).
#[tokio::test]
async fn dml_insert_with_and_without_deliver_time() {
    let db = database(&[
        "CREATE TABLE Users (UserId INT64 NOT NULL) PRIMARY KEY (UserId)",
        "CREATE QUEUE UserTasks (
           UserId     INT64 NOT NULL,
           MessageId  STRING(36) NOT NULL, -- UUID recommended
           Payload    BYTES(MAX) NOT NULL  -- Also: Proto, JSON, String are possible.
         ) PRIMARY KEY (UserId, MessageId),
         INTERLEAVE IN PARENT Users ON DELETE CASCADE",
    ])
    .await;
    let before = SystemTime::now();
    dml(
        &db,
        vec![
            Statement::builder("INSERT INTO Users (UserId) VALUES (123)").build(),
            Statement::builder(
                "INSERT INTO UserTasks (UserId, MessageId, Payload, DeliverTime) \
                 VALUES (123, 'some-unique-id-1', b'Your task payload here', CURRENT_TIMESTAMP())",
            )
            .build(),
            Statement::builder(
                "INSERT INTO UserTasks (UserId, MessageId, Payload, DeliverTime) \
                 VALUES (123, 'some-unique-id-2', b'Scheduled task', \
                 TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR))",
            )
            .build(),
            // DeliverTime omitted: delivered immediately [C, S4].
            Statement::builder(
                "INSERT INTO UserTasks (UserId, MessageId, Payload) \
                 VALUES (123, 'some-unique-id-3', b'welcome')",
            )
            .build(),
        ],
    )
    .await
    .expect("the documented INSERTs");
    let after = SystemTime::now();

    let rows = query(
        db.client(),
        Statement::builder("SELECT MessageId, DeliverTime FROM UserTasks ORDER BY MessageId")
            .build(),
    )
    .await
    .expect("read the queue");
    let times: Vec<(String, SystemTime)> = rows
        .iter()
        .map(|r| {
            (
                r.get::<String>("MessageId").expect("MessageId"),
                r.get::<SystemTime>("DeliverTime").expect("DeliverTime"),
            )
        })
        .collect();
    assert_eq!(times.len(), 3);
    let slack = Duration::from_secs(5);
    for (id, t) in [&times[0], &times[2]] {
        assert!(
            *t >= before - slack && *t <= after + slack,
            "{id}: DeliverTime {t:?} is not about now"
        );
    }
    assert!(
        times[1].1 >= before + Duration::from_secs(3600) - slack
            && times[1].1 <= after + Duration::from_secs(3600) + slack,
        "scheduled message: DeliverTime {:?}",
        times[1].1
    );

    let got = receive_all(&db, &receive_sql("UserTasks", "3s", None)).await;
    let mut delivered: Vec<String> = got
        .iter()
        .map(|d| d.row.get::<String>("MessageId").expect("MessageId"))
        .collect();
    delivered.sort();
    assert_eq!(delivered, vec!["some-unique-id-1", "some-unique-id-3"]);
    let payload: Vec<u8> = got[0].row.get("Payload").expect("BYTES payload");
    assert!(payload == b"Your task payload here" || payload == b"welcome");
}

/// "Spanner queues do not support UPDATE DML statements" [C, S4]; nor can mutations update.
#[tokio::test]
async fn update_of_a_queue_is_refused() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "original")]).await;

    let error = dml1(&db, "UPDATE Q SET Payload = 'changed' WHERE Id = 1")
        .await
        .expect_err("UPDATE on a queue");
    assert_mentions(&message(&error), "UPDATE");
    let error = dml1(
        &db,
        "UPDATE Q SET DeliverTime = TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR) WHERE Id = 1",
    )
    .await
    .expect_err("UPDATE of DeliverTime");
    assert_mentions(&message(&error), "UPDATE");
    for kind in [
        WriteKind::Update,
        WriteKind::InsertOrUpdate,
        WriteKind::Replace,
    ] {
        let status = raw
            .commit(vec![write(
                "Q",
                &["Id", "Payload"],
                vec![int(1), text("changed")],
                kind,
            )])
            .await
            .expect_err("an update mutation on a queue");
        assert_mentions(status.message(), "update");
    }
    let got = receive_n(&db, "Q", 1, GUARD).await;
    assert_eq!(got[0].payload_text(), "original");
}

/// "if the transaction fails, the enqueued message is rolled back and never becomes
/// deliverable" [C, S3].
#[tokio::test]
async fn business_write_and_send_commit_together_or_not_at_all() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    dml1(&db, "INSERT INTO Orders (Id) VALUES (1)")
        .await
        .expect("seed");

    // Committed together.
    dml(
        &db,
        vec![
            Statement::builder("INSERT INTO Orders (Id) VALUES (2)").build(),
            Statement::builder("INSERT INTO Q (Id, Payload) VALUES (2, 'order 2')").build(),
        ],
    )
    .await
    .expect("business write + send");

    // The transaction fails after the send (duplicate order): nothing applies.
    expect_code(
        dml(
            &db,
            vec![
                Statement::builder("INSERT INTO Q (Id, Payload) VALUES (3, 'order 3')").build(),
                Statement::builder("INSERT INTO Orders (Id) VALUES (1)").build(),
            ],
        )
        .await,
        Code::AlreadyExists,
    );
    // Same with mutations.
    let raw = Raw::connect(&db).await;
    expect_status(
        raw.commit(vec![
            send_now("Q", 4, "order 4"),
            insert("Orders", &["Id"], vec![int(1)]),
        ])
        .await,
        tonic::Code::AlreadyExists,
    );
    // The application gives up after sending: the runner rolls back.
    let result = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(Statement::builder("INSERT INTO Orders (Id) VALUES (5)").build())
                .await?;
            tx.execute_update(
                Statement::builder("INSERT INTO Q (Id, Payload) VALUES (5, 'order 5')").build(),
            )
            .await?;
            Err::<(), _>(google_cloud_spanner::Error::service(
                google_cloud_gax::error::rpc::Status::default()
                    .set_code(Code::FailedPrecondition)
                    .set_message("the application gave up"),
            ))
        })
        .await;
    expect_code(result, Code::FailedPrecondition);

    assert_eq!(ids(&db, "Orders").await, vec![1, 2]);
    assert_eq!(ids(&db, "Q").await, vec![2]);
    let got = receive_all(&db, &receive_sql("Q", "2s", None)).await;
    let delivered: Vec<Option<i64>> = got.iter().map(|d| d.id).collect();
    assert_eq!(delivered, vec![Some(2)]);
}

/// Keys of several types and orders, encoded as in any mutation (reference §2.2).
#[tokio::test]
async fn send_and_ack_keys_of_several_types() {
    let db = database(&[
        "CREATE QUEUE Multi (Tenant STRING(10) NOT NULL, Stamp TIMESTAMP NOT NULL,          Tag BYTES(16) NOT NULL, N INT64 NOT NULL, Payload STRING(MAX) NOT NULL)          PRIMARY KEY (Tenant, Stamp DESC, Tag, N DESC)",
    ])
    .await;
    let raw = Raw::connect(&db).await;
    let key = |n: i64| {
        vec![
            text("acme"),
            text("2026-01-02T03:04:05.123456Z"),
            bytes(b"\x00tag"),
            int(n),
        ]
    };
    commit_ok(
        &raw,
        vec![
            send("Multi", key(1), Some(text("one")), None),
            send("Multi", key(2), Some(text("two")), None),
        ],
    )
    .await;
    let got = receive_n(&db, "Multi", 2, GUARD).await;
    let mut ns: Vec<i64> = got
        .iter()
        .map(|d| d.row.get::<i64>("N").expect("N"))
        .collect();
    ns.sort_unstable();
    assert_eq!(ns, [1, 2]);
    assert_eq!(
        got[0].row.get::<Vec<u8>>("Tag").expect("Tag"),
        b"\x00tag".to_vec()
    );
    commit_ok(&raw, vec![ack("Multi", key(1), false)]).await;
    expect_status(
        raw.commit(vec![ack("Multi", key(1), false)]).await,
        tonic::Code::NotFound,
    );
    expect_status(
        raw.commit(vec![send("Multi", key(2), Some(text("again")), None)])
            .await,
        tonic::Code::AlreadyExists,
    );
    assert_eq!(scalar_i64(&db, "SELECT COUNT(*) FROM Multi").await, 1);
}

/// Large payloads (the advice is under 4 KB, but no hard limit is documented [?]; Spanner
/// cells hold up to 10 MiB): several 1 MiB messages in one queue still reach a receiver.
#[tokio::test]
async fn large_payloads_are_delivered() {
    let db = database(&[
        "CREATE QUEUE Big (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)",
    ])
    .await;
    let raw = Raw::connect(&db).await;
    let blob = |id: i64| -> Vec<u8> {
        (0..1024 * 1024)
            .map(|i| u8::try_from((i as i64 + id) % 251).unwrap_or(0))
            .collect()
    };
    for id in 0..8 {
        commit_ok(
            &raw,
            vec![send("Big", vec![int(id)], Some(bytes(&blob(id))), None)],
        )
        .await;
    }
    let got = receive_n(&db, "Big", 8, GUARD).await;
    for d in got {
        let id = d.id.expect("Id");
        let payload: Vec<u8> = d.row.get("Payload").expect("Payload");
        assert!(payload == blob(id), "payload of message {id} differs");
    }
}

/// Batch DML goes through the same rules as single statements.
#[tokio::test]
async fn batch_dml_sends_and_is_refused_like_single_statements() {
    use google_cloud_spanner::batch::BatchDml;
    let db = database(&[
        SIMPLE_QUEUE,
        ORDERS,
        "CREATE QUEUE Closed (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), \
         OPTIONS (disable_send = true)",
    ])
    .await;
    let batch = |statements: &[&str]| {
        let mut builder = BatchDml::builder();
        for sql in statements {
            builder = builder.add_statement(Statement::builder(*sql).build());
        }
        builder.build()
    };
    let run = |b: BatchDml| {
        db.client()
            .read_write_transaction()
            .build()
            .run(async move |tx| tx.execute_batch_update(b.clone()).await)
    };
    let counts = run(batch(&[
        "INSERT INTO Orders (Id) VALUES (1)",
        "INSERT INTO Q (Id, Payload) VALUES (1, 'batched')",
    ]))
    .await
    .expect("batch DML with a send")
    .result;
    assert_eq!(counts, [1, 1]);
    for statements in [
        &[
            "INSERT INTO Orders (Id) VALUES (2)",
            "UPDATE Q SET Payload = 'x' WHERE Id = 1",
        ][..],
        &[
            "INSERT INTO Orders (Id) VALUES (3)",
            "INSERT INTO Closed (Id, Payload) VALUES (1, 'x')",
        ][..],
    ] {
        run(batch(statements))
            .await
            .expect_err("a refused statement in batch DML");
    }
    assert_eq!(ids(&db, "Orders").await, vec![1]);
    assert_eq!(
        receive_n(&db, "Q", 1, GUARD).await[0].payload_text(),
        "batched"
    );
}
