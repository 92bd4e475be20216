//! Issue 4: send / cancel / ack inside the caller's transaction, schema, drift, codecs.

use std::time::Duration;

use futures::StreamExt as _;
use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, Error, QueueMessage, Receiver, SchemaSetup, SendOptions};
use spanner_queues_tests::{count, db_or_skip, queue_ddl, setup};

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
    #[queue(key)]
    email_id: uuid::Uuid,
    subject: String,
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "RawBlobs", payload = "bytes")]
struct RawBlob {
    #[queue(key)]
    id: String,
    data: Vec<u8>,
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Notes", payload = "string")]
struct Note {
    #[queue(key)]
    id: i64,
    text: String,
}

const ORDERS: &str =
    "CREATE TABLE Orders (OrderId INT64 NOT NULL, Status STRING(MAX)) PRIMARY KEY (OrderId)";

fn email(order_id: i64) -> OrderEmail {
    OrderEmail {
        order_id,
        email_id: uuid::Uuid::new_v4(),
        subject: format!("order {order_id}"),
    }
}

/// Messages currently deliverable, read through `RECEIVE` for `max_duration`.
async fn receive_keys(db: &Database, queue: &str, max_duration: &str) -> Vec<i64> {
    let sql = format!("SELECT * FROM RECEIVE_{queue}(max_duration => '{max_duration}')");
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(sql))
        .await
        .expect("receive");
    let mut keys = Vec::new();
    while let Some(row) = rows.next().await {
        let row = row.expect("row");
        keys.push(row.get::<i64>(0).expect("first key column"));
    }
    keys
}

#[tokio::test]
async fn business_write_and_send_commit_together_or_not_at_all() {
    let db = db_or_skip!(
        setup()
            .without_sdk_tables()
            .with_ddl([ORDERS])
            .with_queue::<OrderEmail>()
    );

    let sent = email(1);
    let email_id = sent.email_id;
    let receipt = db
        .transaction()
        .run(move |tx| async move {
            tx.execute_update(Statement::builder(
                "INSERT INTO Orders (OrderId, Status) VALUES (1, 'placed')",
            ))
            .await?;
            tx.send(&sent).await
        })
        .await
        .expect("commit");
    assert_eq!(receipt.key(), &(1_i64, email_id).to_message_key());
    assert_eq!(receipt.deliver_at(), None, "deliverable at commit");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Orders").await, 1);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM OrderEmails").await, 1);

    // The closure fails after both writes: the runner rolls back, no message exists.
    let result = db
        .transaction()
        .run(move |tx| async move {
            tx.execute_update(Statement::builder(
                "INSERT INTO Orders (OrderId, Status) VALUES (2, 'placed')",
            ))
            .await?;
            tx.send(&email(2)).await?;
            Err::<(), _>(Error::application("business rule failed"))
        })
        .await;
    let error = result.expect_err("the closure failed");
    assert!(matches!(error, Error::Application(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "business rule failed",
        "returned as it was"
    );
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Orders").await, 1);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM OrderEmails").await,
        1,
        "rolled back"
    );

    // The message that was committed can be received; its payload decodes.
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT OrderId, EmailId, Payload FROM RECEIVE_OrderEmails(max_duration => '1s')",
        ))
        .await
        .expect("receive");
    let row = rows.next().await.expect("one message").expect("row");
    assert_eq!(row.get::<i64>(0).unwrap(), 1);
    assert_eq!(row.get::<String>(1).unwrap(), email_id.to_string());
}

#[tokio::test]
async fn delayed_send_is_invisible_until_due() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Note>());
    db.transaction()
        .run(|tx| async move {
            tx.send_with(
                &Note {
                    id: 1,
                    text: "later".into(),
                },
                SendOptions::new().deliver_after(Duration::from_secs(3)),
            )
            .await?;
            tx.send(&Note {
                id: 2,
                text: "now".into(),
            })
            .await?;
            Ok(())
        })
        .await
        .expect("commit");
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM Notes").await,
        2,
        "both queued"
    );
    // A receive that ends before the delay sees only the immediate message.
    assert_eq!(receive_keys(&db, "Notes", "1s").await, vec![2]);
    // Keep receiving until the scheduled one is delivered (the stream wakes at its DeliverTime).
    let delivered = receive_keys(&db, "Notes", "5s").await;
    assert_eq!(
        delivered,
        vec![1],
        "the delayed message becomes deliverable"
    );
}

#[tokio::test]
async fn cancel_removes_a_scheduled_message() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Note>());
    let note = Note {
        id: 9,
        text: "reminder".into(),
    };
    let at = std::time::SystemTime::now() + Duration::from_secs(3600);
    let scheduled = db
        .transaction()
        .run(move |tx| async move { tx.send_with(&note, SendOptions::new().deliver_at(at)).await })
        .await
        .expect("schedule");
    assert_eq!(scheduled.deliver_at(), Some(at));
    let removed = db
        .transaction()
        .run(|tx| async move { tx.cancel::<Note>(&9).await })
        .await
        .expect("cancel");
    assert!(removed);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Notes").await, 0);
    let again = db
        .transaction()
        .run(|tx| async move { tx.cancel::<Note>(&9).await })
        .await
        .expect("cancel again");
    assert!(
        !again,
        "cancelling a missing message reports false, not an error"
    );
}

/// There is no ack by key any more: the message is received (a `Delivery`), then acked in the
/// business transaction.
#[tokio::test]
async fn ack_inside_the_business_transaction_and_a_second_ack_rolls_back() {
    let db = db_or_skip!(
        setup()
            .without_sdk_tables()
            .with_ddl([ORDERS])
            .with_queue::<OrderEmail>()
    );
    let message = email(5);
    db.send(&message).await.expect("standalone send");
    let mut receiver = Receiver::<OrderEmail>::builder(&db)
        .build()
        .expect("receiver");
    let delivery = &tokio::time::timeout(Duration::from_secs(20), receiver.next())
        .await
        .expect("a delivery in time")
        .expect("the stream goes on")
        .expect("a delivery");
    assert_eq!(delivery.key(), &message.message_key());

    db.transaction()
        .run(move |tx| async move {
            tx.execute_update(Statement::builder(
                "INSERT INTO Orders (OrderId, Status) VALUES (5, 'emailed')",
            ))
            .await?;
            tx.ack(delivery).await?;
            Ok(())
        })
        .await
        .expect("ack with business write");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM OrderEmails").await, 0);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Orders").await, 1);

    // A second ack fails with a typed error and the transaction's other write is rolled back.
    let result = db
        .transaction()
        .run(move |tx| async move {
            tx.execute_update(Statement::builder(
                "INSERT INTO Orders (OrderId, Status) VALUES (6, 'must not commit')",
            ))
            .await?;
            tx.ack(delivery).await?;
            Ok(())
        })
        .await;
    match result {
        Err(Error::AlreadyAcked {
            queue, key: acked, ..
        }) => {
            assert_eq!(queue.as_str(), "OrderEmails");
            assert_eq!(acked, message.message_key());
        }
        other => panic!("expected AlreadyAcked, got {other:?}"),
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Orders").await, 1);

    // Catching the error and committing anyway cannot apply the other writes: the fuse fails
    // the commit.
    let swallowed = db
        .transaction()
        .run(move |tx| async move {
            tx.execute_update(Statement::builder(
                "INSERT INTO Orders (OrderId, Status) VALUES (7, 'must not commit either')",
            ))
            .await?;
            let ack = tx.ack(delivery).await;
            assert!(matches!(ack, Err(Error::AlreadyAcked { .. })));
            Ok(()) // the bug this fuse guards against
        })
        .await;
    assert!(swallowed.is_err(), "the commit must fail");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Orders").await, 1);
}

#[tokio::test]
async fn send_to_a_key_still_queued_is_a_typed_error() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Note>());
    let note = Note {
        id: 3,
        text: "first".into(),
    };
    db.send(&note).await.expect("first send");
    match db.send(&note).await {
        Err(Error::AlreadyQueued { queue, key, .. }) => {
            assert_eq!(queue.as_str(), "Notes");
            assert_eq!(key, note.message_key());
        }
        other => panic!("expected AlreadyQueued, got {other:?}"),
    }
    // In a batch, the error names the key that is still queued.
    let batch = [
        Note {
            id: 10,
            text: "a".into(),
        },
        note.clone(),
    ];
    match db.send_many(&batch).await {
        Err(Error::AlreadyQueued { key, .. }) => assert_eq!(key, note.message_key()),
        other => panic!("expected AlreadyQueued, got {other:?}"),
    }
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM Notes").await,
        1,
        "batch rolled back"
    );
}

#[tokio::test]
async fn send_many_in_one_round_trip() {
    let db = db_or_skip!(setup().without_sdk_tables().with_queue::<Note>());
    let notes: Vec<Note> = (0..250)
        .map(|id| Note {
            id,
            text: format!("note {id}"),
        })
        .collect();
    let sent = db.send_many(&notes).await.expect("send many");
    assert_eq!(sent.len(), 250);
    assert_eq!(
        sent.iter().map(|s| s.key().clone()).collect::<Vec<_>>(),
        notes
            .iter()
            .map(QueueMessage::message_key)
            .collect::<Vec<_>>(),
        "a receipt per message, in order"
    );
    assert_eq!(count(&db, "SELECT COUNT(*) FROM Notes").await, 250);
}

#[tokio::test]
async fn schema_is_applied_from_the_type_and_drift_is_detected() {
    let db = db_or_skip!();
    let emails = SchemaSetup::new().with_queue::<OrderEmail>();
    emails.apply(&db).await.expect("create queue");
    emails.apply(&db).await.expect("idempotent");
    emails.check(&db).await.expect("matches its type");
    let statements = db.ddl().await.expect("ddl");
    assert!(
        statements
            .iter()
            .any(|s| s.starts_with("CREATE QUEUE OrderEmails")),
        "{statements:?}"
    );

    // A queue with the same name but other key columns.
    #[derive(QueueMessage, Debug)]
    #[queue(name = "Notes")]
    struct DriftedNote {
        #[queue(key)]
        id: String,
        text: String,
    }
    let drifted = SchemaSetup::new().with_queue::<DriftedNote>();
    match drifted.check(&db).await {
        Err(Error::QueueNotFound { queue, .. }) => assert_eq!(queue.as_str(), "Notes"),
        other => panic!("expected QueueNotFound, got {other:?}"),
    }
    db.apply_ddl([queue_ddl::<Note>()]).await.expect("Notes");
    match drifted.check(&db).await {
        Err(Error::SchemaDrift { differences, .. }) => {
            // The JSON codec reads a STRING payload, but sends JSON values, which a STRING
            // column refuses: the key and the payload differ.
            assert_eq!(differences.len(), 2, "{differences:?}");
            assert!(
                differences[0].contains("key column `Id` is INT64"),
                "{differences:?}"
            );
            assert!(
                differences[1].contains("sends JSON values"),
                "{differences:?}"
            );
        }
        other => panic!("expected SchemaDrift, got {other:?}"),
    }
}

#[tokio::test]
async fn payloads_round_trip_and_raw_sql_payloads_decode() {
    let db = db_or_skip!(
        setup()
            .without_sdk_tables()
            .with_queue::<RawBlob>()
            .with_queue::<OrderEmail>()
    );
    let client = db.client();
    let blob = RawBlob {
        id: "b1".into(),
        data: vec![0, 159, 146, 150, 255],
    };
    db.send(&blob).await.expect("send bytes");
    // Another client writes a JSON payload with plain SQL.
    db.transaction()
        .run(|tx| async move {
            tx.execute_update(Statement::builder(
                "INSERT INTO OrderEmails (OrderId, EmailId, Payload) \
                 VALUES (77, '00000000-0000-0000-0000-000000000077', JSON '{\"subject\": \"from SQL\"}')",
            ))
            .await?;
            Ok(())
        })
        .await
        .expect("raw insert");

    let mut rows = client
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT Payload FROM RECEIVE_RawBlobs(max_duration => '1s')",
        ))
        .await
        .expect("receive");
    let row = rows.next().await.expect("a message").expect("row");
    let value: google_cloud_spanner::value::Value = row.get(0).unwrap();
    let ty = google_cloud_spanner::types::bytes();
    let payload = spanner_queues::codec::Payload::from_value(value, &ty).expect("payload");
    let decoded = RawBlob::decode_parts(blob.message_key(), payload).expect("decode");
    assert_eq!(decoded, blob);

    let mut rows = client
        .single_use()
        .build()
        .execute_query(Statement::builder(
            "SELECT OrderId, EmailId, Payload FROM RECEIVE_OrderEmails(max_duration => '1s')",
        ))
        .await
        .expect("receive");
    let row = rows.next().await.expect("a message").expect("row");
    let value: google_cloud_spanner::value::Value = row.get(2).unwrap();
    let payload =
        spanner_queues::codec::Payload::from_value(value, &google_cloud_spanner::types::json())
            .unwrap();
    let key = (77i64, uuid::Uuid::from_u128(77)).to_message_key();
    let decoded = OrderEmail::decode_parts(key, payload).expect("decode SQL-written JSON");
    assert_eq!(decoded.subject, "from SQL");
    assert_eq!(decoded.order_id, 77);
}

use spanner_queues::key::TypedKey as _;

#[tokio::test]
async fn a_payload_column_that_refuses_what_the_type_sends_is_drift() {
    // The case: a JSON payload against a BYTES(MAX) column. The codec could read it,
    // but every send would fail.
    #[derive(QueueMessage, Debug)]
    #[queue(name = "Parcels")]
    struct Parcel {
        #[queue(key)]
        id: i64,
        weight: u32,
    }
    let db = db_or_skip!(setup().without_sdk_tables().with_ddl([
        "CREATE QUEUE Parcels (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)"
    ]));
    match SchemaSetup::new().with_queue::<Parcel>().check(&db).await {
        Err(Error::SchemaDrift { differences, .. }) => {
            assert_eq!(differences.len(), 1, "{differences:?}");
            assert!(
                differences[0].contains("BYTES(MAX), but the message type sends JSON values"),
                "{differences:?}"
            );
        }
        other => panic!("expected SchemaDrift, got {other:?}"),
    }
    // What the check prevents: the send fails.
    let sent = db.send(&Parcel { id: 1, weight: 3 }).await;
    assert!(sent.is_err(), "{sent:?}");
}

/// Acks need a delivery, which a missing queue cannot give (the receiver reports
/// `QueueNotFound` on its stream, see receive.rs): the by-key operation left is `cancel`.
#[tokio::test]
async fn send_and_cancel_on_a_missing_queue_are_queue_not_found() {
    let db = db_or_skip!();
    let sent = db.send(&email(1)).await;
    assert!(
        matches!(&sent, Err(Error::QueueNotFound { queue, .. }) if queue.as_str() == "OrderEmails"),
        "{sent:?}"
    );
    let key = email(2).key();
    let cancelled = db
        .transaction()
        .run(move |tx| async move { tx.cancel::<OrderEmail>(&key).await })
        .await;
    assert!(
        matches!(&cancelled, Err(Error::QueueNotFound { .. })),
        "{cancelled:?}"
    );
}
