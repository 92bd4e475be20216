//! Acks by DML with the key in parameters (`DELETE FROM Q WHERE Id = @id [ASSERT_ROWS_MODIFIED
//! 1]`), the form the SDK uses. The front answers these with a keyed read and applies the
//! delete at commit, so that an ack costs the same however many messages the queue held
//! before; these tests pin down that nothing observable changes: row counts, the assertion,
//! the transaction's other writes, rollbacks, and a transaction that uses the queue again
//! after deleting from it (which then sees the row gone, as in Cloud Spanner).

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::statement::Statement;

use crate::support::*;

fn delete(id: i64, assert: bool) -> Statement {
    let sql = if assert {
        "DELETE FROM Q WHERE Id = @id ASSERT_ROWS_MODIFIED 1"
    } else {
        "DELETE FROM Q WHERE Id = @id"
    };
    Statement::builder(sql).add_param("id", id).build()
}

fn order(id: i64) -> Statement {
    Statement::builder("INSERT INTO Orders (Id, Note) VALUES (@id, 'done')")
        .add_param("id", id)
        .build()
}

#[tokio::test]
async fn keyed_deletes_count_rows_and_commit_with_the_transaction() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, (1..=4).map(|id| send_now("Q", id, "m")).collect()).await;

    // An ack and a business write in one transaction (the delete begins it).
    let counts = dml(&db, vec![delete(1, true), order(1)])
        .await
        .expect("ack and write");
    assert_eq!(counts, vec![1, 1]);
    // A missing key counts 0; a key deleted earlier in the transaction counts 0 the second time.
    let counts = dml(
        &db,
        vec![delete(99, false), delete(2, false), delete(2, false)],
    )
    .await
    .expect("deletes");
    assert_eq!(counts, vec![0, 1, 0]);
    assert_eq!(ids(&db, "Q").await, vec![3, 4]);
    assert_eq!(ids(&db, "Orders").await, vec![1]);

    // ASSERT_ROWS_MODIFIED on a missing key fails the statement, not the transaction: the
    // client may catch it and commit its other writes (as in Cloud Spanner).
    let caught = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(order(2)).await?;
            let failed = tx.execute_update(delete(1, true)).await;
            tx.execute_update(delete(3, true)).await?;
            Ok(failed.err().and_then(|e| code(&e)))
        })
        .await
        .expect("the transaction commits")
        .result;
    assert_eq!(caught, Some(Code::OutOfRange));
    assert_eq!(ids(&db, "Q").await, vec![4]);
    assert_eq!(ids(&db, "Orders").await, vec![1, 2]);

    // Alone (it begins the transaction), the failing statement fails the transaction.
    let message = expect_code(dml(&db, vec![delete(3, true)]).await, Code::OutOfRange);
    assert_mentions(&message, "ASSERT_ROWS_MODIFIED");
    assert_eq!(ids(&db, "Q").await, vec![4]);
}

#[tokio::test]
async fn a_rolled_back_keyed_delete_leaves_the_message() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "m")]).await;
    let result = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(delete(1, true)).await?;
            tx.execute_update(order(1)).await?;
            // A duplicate key: the transaction fails and rolls back.
            tx.execute_update(order(1)).await?;
            Ok(())
        })
        .await;
    expect_code(result, Code::AlreadyExists);
    assert_eq!(ids(&db, "Q").await, vec![1]);
    assert!(ids(&db, "Orders").await.is_empty());
}

#[tokio::test]
async fn a_transaction_that_reads_or_sends_after_a_keyed_delete_sees_it() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "v1"), send_now("Q", 2, "v1")]).await;

    // Delete, then query the queue in the same transaction: the row is gone. (The front
    // aborts the first attempt, which it answered without running the delete; the client
    // retries.)
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let seen = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tx.execute_update(delete(1, true)).await?;
            let mut rows = tx
                .execute_query(Statement::builder("SELECT Id FROM Q ORDER BY Id").build())
                .await?;
            let mut seen = Vec::new();
            while let Some(row) = rows.next().await {
                seen.push(row?.get::<i64>(0usize)?);
            }
            Ok(seen)
        })
        .await
        .expect("delete and query")
        .result;
    assert_eq!(seen, vec![2]);
    assert_eq!(
        attempts.load(std::sync::atomic::Ordering::Relaxed),
        2,
        "the delete was held until commit, so the query needed a second attempt"
    );

    // Ack and send the same key in one transaction: a new message under the old key.
    let counts = dml(
        &db,
        vec![
            delete(2, true),
            Statement::builder("INSERT INTO Q (Id, Payload) VALUES (@id, 'v2')")
                .add_param("id", 2_i64)
                .build(),
        ],
    )
    .await
    .expect("ack and send one key");
    assert_eq!(counts, vec![1, 1]);
    let rows = query(
        db.client(),
        Statement::builder("SELECT Id, Payload FROM Q ORDER BY Id").build(),
    )
    .await
    .expect("read the queue");
    let rows: Vec<(i64, String)> = rows
        .iter()
        .map(|r| (r.get("Id").expect("Id"), r.get("Payload").expect("Payload")))
        .collect();
    assert_eq!(rows, vec![(2, "v2".to_owned())]);
}

#[tokio::test]
async fn an_ack_and_a_send_of_the_same_key_run_in_one_attempt() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "v1")]).await;
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let counts = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let deleted = tx.execute_update(delete(1, true)).await?;
            let sent = tx
                .execute_update(
                    Statement::builder("INSERT INTO Q (Id, Payload) VALUES (@id, 'v2')")
                        .add_param("id", 1_i64)
                        .build(),
                )
                .await?;
            Ok((deleted, sent))
        })
        .await
        .expect("release: ack and send one key")
        .result;
    assert_eq!(counts, (1, 1));
    assert_eq!(
        attempts.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "DML after a held delete runs after it, without a retry"
    );
    let rows = query(
        db.client(),
        Statement::builder("SELECT Id, Payload FROM Q").build(),
    )
    .await
    .expect("read the queue");
    let rows: Vec<(i64, String)> = rows
        .iter()
        .map(|r| (r.get("Id").expect("Id"), r.get("Payload").expect("Payload")))
        .collect();
    assert_eq!(
        rows,
        vec![(1, "v2".to_owned())],
        "the new message survives the commit"
    );
}

/// Sends by DML with parameters (the SDK's form) are held until commit as well: the row count,
/// a taken key's error, the transaction's other writes and the wake-up of a waiting receiver
/// are as before, also for an explicit delivery time in the past.
#[tokio::test]
async fn sends_by_dml_with_parameters_commit_with_the_transaction() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "taken")]).await;
    let send = |first: i64| {
        Statement::builder(
            "INSERT INTO Q (Id, Payload, DeliverTime) VALUES \
             (@a, @p, CURRENT_TIMESTAMP()), (@b, 'literal', CURRENT_TIMESTAMP())",
        )
        .add_param("a", first)
        .add_param("b", first + 1)
        .add_param("p", "param")
        .build()
    };
    // A receiver open before the sends commit gets them.
    let mut receiver = Receiver::open(&db, &receive_sql("Q", "60s", Some(4)))
        .await
        .expect("RECEIVE");
    let counts = dml(&db, vec![send(10), order(10)])
        .await
        .expect("send and write");
    assert_eq!(counts, vec![2, 1]);
    // A taken key: ALREADY_EXISTS, and nothing of the transaction applies.
    let taken = dml(&db, vec![order(11), send(1)]).await;
    expect_code(taken, Code::AlreadyExists);
    assert_eq!(ids(&db, "Orders").await, vec![10]);
    // An explicit delivery time in the past: delivered at once.
    let past = (time::OffsetDateTime::now_utc() - time::Duration::hours(1))
        .format(&time::format_description::well_known::Rfc3339)
        .expect("a timestamp");
    dml(
        &db,
        vec![
            Statement::builder("INSERT INTO Q (Id, Payload, DeliverTime) VALUES (@id, 'old', @at)")
                .add_param("id", 20_i64)
                .add_param("at", past)
                .build(),
        ],
    )
    .await
    .expect("send with a past delivery time");
    assert_eq!(ids(&db, "Q").await, vec![1, 10, 11, 20]);
    let rows = query(
        db.client(),
        Statement::builder("SELECT Payload FROM Q WHERE Id IN (10, 11) ORDER BY Id").build(),
    )
    .await
    .expect("payloads");
    let payloads: Vec<String> = rows
        .iter()
        .map(|r| r.get(0usize).expect("Payload"))
        .collect();
    assert_eq!(payloads, vec!["param".to_owned(), "literal".to_owned()]);
    let mut received = Vec::new();
    while received.len() < 4 {
        let delivery = receiver
            .expect_next(std::time::Duration::from_secs(60), "a sent message")
            .await;
        received.extend(delivery.id);
    }
    received.sort_unstable();
    assert_eq!(received, vec![1, 10, 11, 20]);
}
