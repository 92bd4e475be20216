//! Acknowledging and cancelling: `Mutation.Ack` (reference §5.2), DML `DELETE … ASSERT_ROWS_MODIFIED
//! 1` (§5.1), re-scheduling by ack + send of one key in one commit (§2.5), and cancelling a
//! scheduled message (§2.4).

use std::time::{Duration, SystemTime};

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::statement::Statement;

use crate::support::*;

const GUARD: Duration = Duration::from_secs(60);

#[tokio::test]
async fn ack_mutation_removes_a_received_message() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        vec![
            send_now("Q", 1, "a"),
            send_now("Q", 2, "b"),
            send_now("Q", 3, "c"),
        ],
    )
    .await;
    let got = receive_n(&db, "Q", 3, GUARD).await;
    let mut received: Vec<i64> = got.iter().filter_map(|d| d.id).collect();
    received.sort_unstable();
    assert_eq!(received, vec![1, 2, 3]);

    // Single-use commit.
    commit_ok(&raw, vec![ack("Q", vec![int(1)], false)]).await;
    // Read-write transaction.
    raw.begin_and_commit(vec![ack("Q", vec![int(2)], false)], false)
        .await
        .expect("Ack in BeginTransaction + Commit");
    assert_eq!(ids(&db, "Q").await, vec![3]);
}

/// "NOT_FOUND: Message not found" and the whole commit fails [C, S7, S12].
#[tokio::test]
async fn ack_of_a_missing_message_fails_the_whole_commit_with_not_found() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "present")]).await;

    for mutations in [
        // The missing ack last, first, and between other writes.
        vec![
            insert("Orders", &["Id"], vec![int(1)]),
            send_now("Q", 2, "new"),
            ack("Q", vec![int(1)], false),
            ack("Q", vec![int(99)], false),
        ],
        vec![
            ack("Q", vec![int(99)], false),
            insert("Orders", &["Id"], vec![int(1)]),
            ack("Q", vec![int(1)], false),
        ],
    ] {
        let message = expect_status(raw.commit(mutations.clone()).await, tonic::Code::NotFound);
        assert_mentions(&message, "Message not found");
        let message = expect_status(
            raw.begin_and_commit(mutations, false).await,
            tonic::Code::NotFound,
        );
        assert_mentions(&message, "Message not found");
    }
    assert!(
        ids(&db, "Orders").await.is_empty(),
        "no write of the commit applies"
    );
    assert_eq!(
        ids(&db, "Q").await,
        vec![1],
        "neither the send nor the other ack applies"
    );

    // A message acked twice in one commit: the second ack finds nothing.
    expect_status(
        raw.commit(vec![
            ack("Q", vec![int(1)], false),
            ack("Q", vec![int(1)], false),
        ])
        .await,
        tonic::Code::NotFound,
    );
    assert_eq!(ids(&db, "Q").await, vec![1]);

    // Ack, send again and ack again in one commit: the last ack finds the new message.
    commit_ok(
        &raw,
        vec![
            ack("Q", vec![int(1)], false),
            send_now("Q", 1, "again"),
            ack("Q", vec![int(1)], false),
        ],
    )
    .await;
    assert!(ids(&db, "Q").await.is_empty());
}

#[tokio::test]
async fn ack_with_ignore_not_found_succeeds_on_a_missing_message() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "present")]).await;
    commit_ok(
        &raw,
        vec![
            insert("Orders", &["Id"], vec![int(1)]),
            ack("Q", vec![int(99)], true),
            ack("Q", vec![int(1)], true),
        ],
    )
    .await;
    assert_eq!(ids(&db, "Orders").await, vec![1]);
    assert!(
        ids(&db, "Q").await.is_empty(),
        "ignore_not_found still acks what exists"
    );
    // Acking again, unconditionally.
    commit_ok(&raw, vec![ack("Q", vec![int(1)], true)]).await;
}

/// An Ack names one whole primary key [C, S11: "Ack must include exactly one key"].
#[tokio::test]
async fn ack_with_an_incomplete_key_is_refused() {
    let db = database(&[
        "CREATE QUEUE Q2 (A INT64 NOT NULL, B STRING(10) NOT NULL, Payload STRING(MAX) NOT NULL) \
         PRIMARY KEY (A, B)",
    ])
    .await;
    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        vec![send("Q2", vec![int(1), text("x")], Some(text("p")), None)],
    )
    .await;
    let status = raw
        .commit(vec![ack("Q2", vec![int(1)], false)])
        .await
        .expect_err("an Ack with one of two key columns");
    assert!(
        matches!(
            status.code(),
            tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
        ),
        "{status:?}"
    );
    commit_ok(&raw, vec![ack("Q2", vec![int(1), text("x")], false)]).await;
    assert_eq!(scalar_i64(&db, "SELECT COUNT(*) FROM Q2").await, 0);
}

/// Reference §5.1: the documented DELETE, and `OUT_OF_RANGE` when the row is gone [C, S5]; the
/// error propagates out of the transaction runner, so nothing of the transaction commits.
#[tokio::test]
async fn dml_delete_with_assert_rows_modified_acks_and_fails_out_of_range_when_gone() {
    let db = database(&[
        "CREATE TABLE Users (UserId INT64 NOT NULL) PRIMARY KEY (UserId)",
        "CREATE QUEUE UserTasks (
           UserId     INT64 NOT NULL,
           MessageId  STRING(36) NOT NULL,
           Payload    BYTES(MAX) NOT NULL,
         ) PRIMARY KEY (UserId, MessageId),
         INTERLEAVE IN PARENT Users ON DELETE CASCADE",
        ORDERS,
    ])
    .await;
    dml(
        &db,
        vec![
            Statement::builder("INSERT INTO Users (UserId) VALUES (123)").build(),
            Statement::builder(
                "INSERT INTO UserTasks (UserId, MessageId, Payload) VALUES (123, 'm-1', b'x')",
            )
            .build(),
        ],
    )
    .await
    .expect("send");
    let ack_statement = || {
        Statement::builder(
            "DELETE FROM UserTasks WHERE UserId = @userId AND MessageId = @messageId \
             ASSERT_ROWS_MODIFIED 1",
        )
        .add_param("userId", 123i64)
        .add_param("messageId", "m-1")
        .build()
    };
    let counts = dml(
        &db,
        vec![
            Statement::builder("INSERT INTO Orders (Id) VALUES (1)").build(),
            ack_statement(),
        ],
    )
    .await
    .expect("ack by DELETE");
    assert_eq!(counts, vec![1, 1]);
    assert_eq!(scalar_i64(&db, "SELECT COUNT(*) FROM UserTasks").await, 0);

    // Already gone: OUT_OF_RANGE, and the transaction's other write does not commit.
    expect_code(
        dml(
            &db,
            vec![
                Statement::builder("INSERT INTO Orders (Id) VALUES (2)").build(),
                ack_statement(),
            ],
        )
        .await,
        Code::OutOfRange,
    );
    assert_eq!(ids(&db, "Orders").await, vec![1]);
}

/// Ack then Send of one key in one commit re-schedules it [C, S4]; with DML, delete and insert
/// again in one transaction [C, S4].
#[tokio::test]
async fn ack_then_send_of_the_same_key_in_one_commit_reschedules_it() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "v1"), send_now("Q", 2, "v1")]).await;
    let got = receive_n(&db, "Q", 2, GUARD).await;
    assert_eq!(got.len(), 2);

    let later = SystemTime::now() + Duration::from_secs(3600);
    commit_ok(
        &raw,
        vec![ack("Q", vec![int(1)], false), send_at("Q", 1, "v2", later)],
    )
    .await;
    dml(
        &db,
        vec![
            Statement::builder("DELETE FROM Q WHERE Id = 2 ASSERT_ROWS_MODIFIED 1").build(),
            Statement::builder(
                "INSERT INTO Q (Id, Payload, DeliverTime) \
                 VALUES (2, 'v2', TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR))",
            )
            .build(),
        ],
    )
    .await
    .expect("DELETE + INSERT of one key in one transaction");

    let rows = query(
        db.client(),
        Statement::builder("SELECT Id, Payload, DeliverTime FROM Q ORDER BY Id").build(),
    )
    .await
    .expect("read the queue");
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row.get::<String>("Payload").expect("Payload"), "v2");
        let at: SystemTime = row.get("DeliverTime").expect("DeliverTime");
        assert!(
            distance(at, later) < Duration::from_secs(60),
            "re-scheduled DeliverTime {at:?}"
        );
    }
    let redelivered = receive_all(&db, &receive_sql("Q", "2s", None)).await;
    assert!(
        redelivered.is_empty(),
        "re-scheduled messages are due in an hour: {redelivered:?}"
    );
}

/// A pending message is cancelled by deleting its row: DML DELETE, Mutation Ack or Delete
/// [C, S6].
#[tokio::test]
async fn cancel_a_scheduled_message() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    let later = SystemTime::now() + Duration::from_secs(3600);
    commit_ok(
        &raw,
        (1..=4)
            .map(|id| send_at("Q", id, "scheduled", later))
            .collect(),
    )
    .await;
    assert_eq!(
        dml1(&db, "DELETE FROM Q WHERE Id = 1")
            .await
            .expect("DELETE"),
        1
    );
    assert_eq!(
        dml1(&db, "DELETE FROM Q WHERE Id = 2 ASSERT_ROWS_MODIFIED 1")
            .await
            .expect("DELETE ASSERT_ROWS_MODIFIED"),
        1
    );
    commit_ok(&raw, vec![ack("Q", vec![int(3)], false)]).await;
    commit_ok(&raw, vec![delete("Q", vec![int(4)])]).await;
    assert!(ids(&db, "Q").await.is_empty());
}
