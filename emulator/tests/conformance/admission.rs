//! Read-write transaction admission (the emulator's own behaviour, not Cloud Spanner's: Cloud
//! Spanner runs concurrent read-write transactions; the official emulator runs one per database
//! and aborts the others, so the front makes newcomers wait their turn instead).
//!
//! Each waiting transaction is checked to be still pending while the holder works, and to
//! commit afterwards; without admission the official emulator aborts one of the two.

use std::time::SystemTime;

use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;

use crate::support::*;

fn read_write() -> pb::TransactionOptions {
    pb::TransactionOptions {
        mode: Some(pb::transaction_options::Mode::ReadWrite(
            pb::transaction_options::ReadWrite::default(),
        )),
        ..pb::TransactionOptions::default()
    }
}

/// A read-write transaction driven call by call on its own session.
struct Txn {
    raw: Raw,
    id: Vec<u8>,
    seqno: i64,
}

impl Txn {
    /// Begins with an explicit `BeginTransaction`.
    async fn begin(raw: Raw) -> Result<Self, tonic::Status> {
        let id = raw
            .client()
            .begin_transaction(pb::BeginTransactionRequest {
                session: raw.session().to_owned(),
                options: Some(read_write()),
                ..pb::BeginTransactionRequest::default()
            })
            .await?
            .into_inner()
            .id
            .to_vec();
        Ok(Self { raw, id, seqno: 0 })
    }

    /// Begins inline, with the first statement (as current official clients do).
    async fn begin_with(raw: Raw, sql: &str) -> Result<Self, tonic::Status> {
        let result = raw
            .client()
            .execute_sql(pb::ExecuteSqlRequest {
                session: raw.session().to_owned(),
                transaction: Some(pb::TransactionSelector {
                    selector: Some(pb::transaction_selector::Selector::Begin(read_write())),
                }),
                sql: sql.to_owned(),
                seqno: 1,
                ..pb::ExecuteSqlRequest::default()
            })
            .await?
            .into_inner();
        let id = result
            .metadata
            .and_then(|m| m.transaction)
            .map(|t| t.id.to_vec())
            .expect("an inline begin returns the transaction id");
        Ok(Self { raw, id, seqno: 1 })
    }

    async fn execute(&mut self, sql: &str) -> Result<pb::ResultSet, tonic::Status> {
        self.seqno += 1;
        self.raw
            .client()
            .execute_sql(pb::ExecuteSqlRequest {
                session: self.raw.session().to_owned(),
                transaction: Some(pb::TransactionSelector {
                    selector: Some(pb::transaction_selector::Selector::Id(
                        self.id.clone().into(),
                    )),
                }),
                sql: sql.to_owned(),
                seqno: self.seqno,
                ..pb::ExecuteSqlRequest::default()
            })
            .await
            .map(tonic::Response::into_inner)
    }

    async fn commit(self) -> Result<SystemTime, tonic::Status> {
        let response = self
            .raw
            .client()
            .commit(pb::CommitRequest {
                session: self.raw.session().to_owned(),
                transaction: Some(pb::commit_request::Transaction::TransactionId(
                    self.id.into(),
                )),
                ..pb::CommitRequest::default()
            })
            .await?
            .into_inner();
        Ok(commit_time(&response))
    }
}

/// A few round trips of work in `txn` (gives a concurrently started client time to reach the
/// front and queue; the assertions do not depend on how long it takes).
async fn work(txn: &mut Txn, rounds: usize) {
    for _ in 0..rounds {
        txn.execute("SELECT COUNT(*) FROM Orders")
            .await
            .expect("a query in the holder's transaction");
    }
}

/// A client that begins a transaction inline, inserts order `id` and commits.
fn insert_order(raw: Raw, id: i64) -> tokio::task::JoinHandle<Result<SystemTime, tonic::Status>> {
    tokio::spawn(async move {
        let txn = Txn::begin_with(
            raw,
            &format!("INSERT INTO Orders (Id, Note) VALUES ({id}, 'waited')"),
        )
        .await?;
        txn.commit().await
    })
}

#[tokio::test]
async fn a_second_read_write_transaction_waits_instead_of_aborting_the_first() {
    let db = database(&[ORDERS]).await;
    let mut holder = Txn::begin(Raw::connect(&db).await).await.unwrap();
    holder
        .execute("INSERT INTO Orders (Id, Note) VALUES (1, 'holder')")
        .await
        .unwrap();
    let newcomer = insert_order(Raw::connect(&db).await, 2);
    work(&mut holder, 10).await;
    assert!(
        !newcomer.is_finished(),
        "the newcomer must wait while the holder's transaction is open"
    );
    let held = holder
        .commit()
        .await
        .expect("the holder commits: the newcomer waited instead of displacing it");
    let waited = newcomer
        .await
        .unwrap()
        .expect("the newcomer commits after the holder, without ABORTED");
    assert!(waited > held, "the newcomer committed after the holder");
    assert_eq!(ids(&db, "Orders").await, vec![1, 2]);
}

#[tokio::test]
async fn waiting_transactions_are_admitted_in_arrival_order() {
    let db = database(&[ORDERS]).await;
    let mut holder = Txn::begin(Raw::connect(&db).await).await.unwrap();
    let mut waiting = Vec::new();
    for id in 1..=4 {
        let raw = Raw::connect(&db).await; // session ready before the clock of the race starts
        waiting.push(insert_order(raw, id));
        work(&mut holder, 5).await;
    }
    assert!(waiting.iter().all(|t| !t.is_finished()));
    holder.commit().await.expect("the holder commits");
    let mut times = Vec::new();
    for task in waiting {
        times.push(task.await.unwrap().expect("every waiter commits"));
    }
    assert!(
        times.windows(2).all(|w| w[0] < w[1]),
        "commits in arrival order: {times:?}"
    );
    assert_eq!(ids(&db, "Orders").await, vec![1, 2, 3, 4]);
}

#[tokio::test]
async fn an_abandoned_transaction_blocks_others_only_for_the_admission_wait() {
    let db = database(&[ORDERS]).await;
    let mut abandoned = Txn::begin(Raw::connect(&db).await).await.unwrap();
    abandoned
        .execute("INSERT INTO Orders (Id, Note) VALUES (1, 'abandoned')")
        .await
        .unwrap();
    // Nobody commits or rolls back `abandoned`: the next transaction is admitted once it has
    // been idle for the admission wait (5 s by default), and commits.
    let next = insert_order(Raw::connect(&db).await, 2);
    next.await
        .unwrap()
        .expect("the next transaction is admitted after the wait and commits");
    let error = abandoned
        .commit()
        .await
        .expect_err("the abandoned transaction lost its slot");
    assert_eq!(error.code(), tonic::Code::Aborted, "{error:?}");
    assert_eq!(ids(&db, "Orders").await, vec![2]);
}

#[tokio::test]
async fn a_rollback_admits_the_next_transaction() {
    let db = database(&[ORDERS]).await;
    let mut holder = Txn::begin(Raw::connect(&db).await).await.unwrap();
    let next = insert_order(Raw::connect(&db).await, 2);
    work(&mut holder, 5).await;
    assert!(!next.is_finished());
    holder
        .raw
        .client()
        .rollback(pb::RollbackRequest {
            session: holder.raw.session().to_owned(),
            transaction_id: holder.id.clone().into(),
        })
        .await
        .expect("rollback");
    next.await.unwrap().expect("admitted after the rollback");
    assert_eq!(ids(&db, "Orders").await, vec![2]);
}

#[tokio::test]
async fn reads_receive_and_renew_never_wait_for_a_read_write_transaction() {
    let db = database(&[ORDERS, SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "one")]).await;
    let mut holder = Txn::begin(Raw::connect(&db).await).await.unwrap();
    holder
        .execute("INSERT INTO Orders (Id, Note) VALUES (1, 'holder')")
        .await
        .unwrap();

    // While the holder's transaction is open: a single-use read, a read-only transaction, a
    // RECEIVE and a RENEWLEASE. Had any of them waited for the slot, it would have waited until
    // the holder was idle for the admission wait and then displaced it (its commit would fail).
    assert_eq!(scalar_i64(&db, "SELECT COUNT(*) FROM Q").await, 1);
    let snapshot = db.client().read_only_transaction().build().await.unwrap();
    let mut rows = snapshot
        .execute_query(google_cloud_spanner::statement::Statement::builder(
            "SELECT COUNT(*) FROM Orders",
        ))
        .await
        .unwrap();
    assert!(rows.next().await.is_some());
    let mut receiver = Receiver::open(&db, &receive_sql("Q", "30s", None))
        .await
        .unwrap();
    let delivery = receiver
        .expect_next(std::time::Duration::from_secs(20), "delivery of message 1")
        .await;
    assert_eq!(delivery.id, Some(1));
    let renewed = renew(&db, "Q", std::slice::from_ref(&delivery.token))
        .await
        .unwrap();
    assert!(renewed.contains_key(&delivery.token));

    holder
        .commit()
        .await
        .expect("the holder commits: no read displaced it");
}
