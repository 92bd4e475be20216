//! Cloud Spanner's size limits (quotas page, tables section): a column value (cell) holds at
//! most 10 MiB, a `STRING(MAX)` value at most 2,621,440 characters, and a row's key at most
//! 8 KiB. They hold for queues as for tables, on every write path (mutations, `Send`, DML).

use google_cloud_spanner::statement::Statement;
use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;

use crate::support::*;

/// 10 MiB: the largest value a cell holds.
const CELL_LIMIT: usize = 10 * 1024 * 1024;
/// The largest `STRING(MAX)` value, in characters.
const STRING_LIMIT: usize = 2_621_440;

const BYTES_QUEUE: &str =
    "CREATE QUEUE B (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)";
const BLOBS: &str = "CREATE TABLE Blobs (Id INT64 NOT NULL, Data BYTES(MAX)) PRIMARY KEY (Id)";
const KEYED_QUEUE: &str =
    "CREATE QUEUE K (Name STRING(MAX) NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Name)";

#[track_caller]
fn assert_too_large(result: Result<impl std::fmt::Debug, tonic::Status>, what: &str) {
    let message = expect_status(result, tonic::Code::FailedPrecondition);
    assert_mentions(&message, "exceeds the maximum size limit");
    assert!(message.contains(what), "{message:?} should name {what}");
}

#[tokio::test]
async fn a_value_over_10_mib_is_refused_in_sends_mutations_and_dml() {
    let db = database(&[BYTES_QUEUE, BLOBS]).await;
    let raw = Raw::connect(&db).await;
    let over = vec![b'x'; CELL_LIMIT + 1];

    let send = send("B", vec![int(1)], Some(bytes(&over)), None);
    assert_too_large(raw.commit(vec![send]).await, "B.Payload");
    let write = insert("Blobs", &["Id", "Data"], vec![int(1), bytes(&over)]);
    assert_too_large(raw.commit(vec![write]).await, "Blobs.Data");
    let dml = dml(
        &db,
        vec![
            Statement::builder("INSERT INTO B (Id, Payload) VALUES (1, @payload)")
                .add_param("payload", over.clone())
                .build(),
        ],
    )
    .await;
    let error = dml.expect_err("a DML send over 10 MiB");
    assert_eq!(
        code(&error),
        Some(google_cloud_gax::error::rpc::Code::FailedPrecondition)
    );
    assert_mentions(&message(&error), "exceeds the maximum size limit");
    assert!(ids(&db, "B").await.is_empty());
    assert!(ids(&db, "Blobs").await.is_empty());

    // Exactly 10 MiB is a valid value.
    let at_limit = vec![b'y'; CELL_LIMIT];
    commit_ok(&raw, vec![send_bytes(1, &at_limit)]).await;
    assert_eq!(ids(&db, "B").await, vec![1]);
}

fn send_bytes(id: i64, payload: &[u8]) -> Mutation {
    send("B", vec![int(id)], Some(bytes(payload)), None)
}

#[tokio::test]
async fn a_string_over_2621440_characters_is_refused() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    let over = "é".repeat(STRING_LIMIT + 1);
    assert_too_large(raw.commit(vec![send_now("Q", 1, &over)]).await, "Q.Payload");
    let at_limit = "a".repeat(STRING_LIMIT);
    commit_ok(&raw, vec![send_now("Q", 2, &at_limit)]).await;
    assert_eq!(ids(&db, "Q").await, vec![2]);
}

/// The official emulator stores JSON values of any size; the front holds them to the cell limit.
#[tokio::test]
async fn a_json_value_over_10_mib_is_refused_in_sends_mutations_and_dml() {
    let db = database(&[JSON_QUEUE, DOCS]).await;
    let raw = Raw::connect(&db).await;
    let over = json_string(CELL_LIMIT + 1);

    let send = send("J", vec![int(1)], Some(text(over.clone())), None);
    assert_too_large(raw.commit(vec![send]).await, "J.Payload");
    let write = insert("Docs", &["Id", "Doc"], vec![int(1), text(over.clone())]);
    assert_too_large(raw.commit(vec![write]).await, "Docs.Doc");
    let dml = raw_dml(
        &raw,
        "INSERT INTO J (Id, Payload) VALUES (1, @doc)",
        "doc",
        over,
    )
    .await;
    assert_too_large(dml, "J (parameter @doc)");
    assert!(ids(&db, "J").await.is_empty());
    assert!(ids(&db, "Docs").await.is_empty());

    let at_limit = json_string(CELL_LIMIT);
    commit_ok(&raw, vec![send_json(2, at_limit)]).await;
    assert_eq!(ids(&db, "J").await, vec![2]);
}

const JSON_QUEUE: &str =
    "CREATE QUEUE J (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id)";
const DOCS: &str = "CREATE TABLE Docs (Id INT64 NOT NULL, Doc JSON) PRIMARY KEY (Id)";

/// A JSON string value of exactly `size` bytes (quotes included).
fn json_string(size: usize) -> String {
    format!("\"{}\"", "x".repeat(size - 2))
}

fn send_json(id: i64, json: String) -> Mutation {
    send("J", vec![int(id)], Some(text(json)), None)
}

/// One DML statement with a JSON parameter in its own read-write transaction (raw protos: the
/// official client is not needed to say what is sent).
async fn raw_dml(
    raw: &Raw,
    sql: &str,
    param: &str,
    json: String,
) -> Result<pb::CommitResponse, tonic::Status> {
    let mut client = raw.client();
    let transaction = client
        .begin_transaction(pb::BeginTransactionRequest {
            session: raw.session().to_owned(),
            options: Some(pb::TransactionOptions {
                mode: Some(pb::transaction_options::Mode::ReadWrite(
                    pb::transaction_options::ReadWrite::default(),
                )),
                ..pb::TransactionOptions::default()
            }),
            ..pb::BeginTransactionRequest::default()
        })
        .await?
        .into_inner();
    let selector = pb::TransactionSelector {
        selector: Some(pb::transaction_selector::Selector::Id(
            transaction.id.clone(),
        )),
    };
    let result = client
        .execute_sql(pb::ExecuteSqlRequest {
            session: raw.session().to_owned(),
            transaction: Some(selector),
            sql: sql.to_owned(),
            params: Some(prost_types::Struct {
                fields: [(param.to_owned(), text(json))].into(),
            }),
            param_types: [(
                param.to_owned(),
                pb::Type {
                    code: pb::TypeCode::Json as i32,
                    ..pb::Type::default()
                },
            )]
            .into(),
            seqno: 1,
            ..pb::ExecuteSqlRequest::default()
        })
        .await;
    if let Err(status) = result {
        let _ = client
            .rollback(pb::RollbackRequest {
                session: raw.session().to_owned(),
                transaction_id: transaction.id,
            })
            .await;
        return Err(status);
    }
    client
        .commit(pb::CommitRequest {
            session: raw.session().to_owned(),
            transaction: Some(pb::commit_request::Transaction::TransactionId(
                transaction.id,
            )),
            ..pb::CommitRequest::default()
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The key limit is the official emulator's own check (its message; the code Cloud Spanner
/// uses is not documented [?]); queues are tables there, so it holds for sends too.
#[tokio::test]
async fn a_key_over_8_kib_is_refused() {
    let db = database(&[KEYED_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    let long = "k".repeat(8 * 1024 + 1);
    let send = send("K", vec![text(long.clone())], Some(text("p")), None);
    let refused = expect_status(raw.commit(vec![send]).await, tonic::Code::InvalidArgument);
    assert_mentions(&refused, "exceeds the maximum of 8192");
    let error = dml(
        &db,
        vec![
            Statement::builder("INSERT INTO K (Name, Payload) VALUES (@name, 'p')")
                .add_param("name", long)
                .build(),
        ],
    )
    .await
    .expect_err("a DML send with a key over 8 KiB");
    assert_mentions(&message(&error), "exceeds the maximum of 8192");
    assert!(
        query(
            db.client(),
            Statement::builder("SELECT Name FROM K").build()
        )
        .await
        .unwrap()
        .is_empty()
    );
    commit_ok(&raw, vec![send_key("k".repeat(4 * 1024))]).await;
}

fn send_key(key: String) -> Mutation {
    send("K", vec![text(key)], Some(text("p")), None)
}
