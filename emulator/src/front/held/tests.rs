//! The executor against a stand-in backend: what it holds, what it sends, what it answers.

use std::sync::Mutex;

use tonic::metadata::MetadataMap;

use super::*;
use crate::front::config::FrontConfig;
use crate::front::proto::spanner::mutation::Operation;
use crate::front::proto::spanner::result_set_stats::RowCount;
use crate::front::proto::spanner::transaction_options::{Mode, ReadWrite};
use crate::front::proto::spanner::transaction_selector::Selector;
use crate::front::proto::spanner::{TransactionOptions, Type, TypeCode};
use crate::front::proto::{ListValue, Value, string_value};

const SESSION: &str = "projects/p/instances/i/databases/d/sessions/s";
/// The transaction the stand-in backend begins for a statement that asks for one.
const BEGUN: &[u8] = b"t1";

/// A backend that finds `found` rows for every keyed read, answers statements with one row
/// modified, and records what it was asked.
#[derive(Default)]
struct Stand {
    found: usize,
    reads: Mutex<Vec<ReadRequest>>,
    statements: Mutex<Vec<ExecuteSqlRequest>>,
    batches: Mutex<Vec<ExecuteBatchDmlRequest>>,
}

fn began(selector: Option<&TransactionSelector>) -> Option<Transaction> {
    matches!(
        selector.and_then(|s| s.selector.as_ref()),
        Some(Selector::Begin(_))
    )
    .then(|| Transaction {
        id: BEGUN.to_vec().into(),
        ..Transaction::default()
    })
}

fn one_row_modified() -> ResultSet {
    dml_result(None, 1)
}

impl Backend for Stand {
    fn read(
        &self,
        request: tonic::Request<ReadRequest>,
    ) -> impl Future<Output = Result<tonic::Response<ResultSet>, Status>> + Send {
        let request = request.into_inner();
        let result = ResultSet {
            metadata: Some(ResultSetMetadata {
                transaction: began(request.transaction.as_ref()),
                ..ResultSetMetadata::default()
            }),
            rows: vec![ListValue::default(); self.found],
            ..ResultSet::default()
        };
        lock(&self.reads).push(request);
        std::future::ready(Ok(tonic::Response::new(result)))
    }

    fn execute_sql(
        &self,
        request: tonic::Request<ExecuteSqlRequest>,
    ) -> impl Future<Output = Result<tonic::Response<ResultSet>, Status>> + Send {
        lock(&self.statements).push(request.into_inner());
        std::future::ready(Ok(tonic::Response::new(one_row_modified())))
    }

    fn execute_batch_dml(
        &self,
        request: tonic::Request<ExecuteBatchDmlRequest>,
    ) -> impl Future<Output = Result<tonic::Response<ExecuteBatchDmlResponse>, Status>> + Send {
        let request = request.into_inner();
        let response = ExecuteBatchDmlResponse {
            result_sets: vec![one_row_modified(); request.statements.len()],
            status: Some(googleapis_tonic_google_spanner_v1::google::rpc::Status::default()),
            ..ExecuteBatchDmlResponse::default()
        };
        lock(&self.batches).push(request);
        std::future::ready(Ok(tonic::Response::new(response)))
    }
}

/// The front's state with a database whose dialect and catalog are known (no backend call),
/// and admission on. The backend address is never dialled.
fn front() -> (Shared, std::sync::Arc<DbState>) {
    let config = FrontConfig::new("127.0.0.1:9".parse().expect("address"));
    let shared = Shared::new(config).expect("front state");
    let state = shared.databases.get("projects/p/instances/i/databases/d");
    {
        let mut slot = lock(&state.catalog);
        slot.catalog = Some(plan::tests::catalog());
        slot.dialect = Some(Dialect::GoogleSql);
    }
    (shared, state)
}

fn begin() -> Option<TransactionSelector> {
    Some(TransactionSelector {
        selector: Some(Selector::Begin(TransactionOptions {
            mode: Some(Mode::ReadWrite(ReadWrite::default())),
            ..TransactionOptions::default()
        })),
    })
}

fn in_begun() -> Option<TransactionSelector> {
    Some(TransactionSelector {
        selector: Some(Selector::Id(BEGUN.to_vec().into())),
    })
}

fn statement(
    sql: &str,
    transaction: Option<TransactionSelector>,
    params: &[(&str, Value)],
    seqno: i64,
) -> ExecuteSqlRequest {
    let string = Type {
        code: TypeCode::String as i32,
        ..Type::default()
    };
    ExecuteSqlRequest {
        session: SESSION.to_owned(),
        transaction,
        sql: sql.to_owned(),
        params: Some(prost_types::Struct {
            fields: params
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.clone()))
                .collect(),
        }),
        param_types: params
            .iter()
            .map(|(n, _)| ((*n).to_owned(), string.clone()))
            .collect(),
        seqno,
        ..ExecuteSqlRequest::default()
    }
}

fn send(id: &str, transaction: Option<TransactionSelector>) -> ExecuteSqlRequest {
    statement(
        "INSERT INTO Jobs (Id, Payload) VALUES (@id, @payload)",
        transaction,
        &[("id", string_value(id)), ("payload", string_value("work"))],
        1,
    )
}

fn ack(id: &str, transaction: Option<TransactionSelector>, seqno: i64) -> ExecuteSqlRequest {
    statement(
        "DELETE FROM Jobs WHERE Id = @id",
        transaction,
        &[("id", string_value(id))],
        seqno,
    )
}

fn rows_modified(result: &ResultSet) -> Option<i64> {
    match result.stats.as_ref().and_then(|s| s.row_count.as_ref()) {
        Some(RowCount::RowCountExact(n)) => Some(*n),
        _ => None,
    }
}

fn begun_by(result: &ResultSet) -> Option<Vec<u8>> {
    result
        .metadata
        .as_ref()
        .and_then(|m| m.transaction.as_ref())
        .map(|t| t.id.to_vec())
}

#[tokio::test]
async fn a_send_by_dml_is_held_and_becomes_an_insert_of_the_commit() {
    let (shared, state) = front();
    let backend = Stand::default();
    let message = send("a", begin());
    let result = deferred_insert(&shared, &backend, &state, &MetadataMap::new(), &message)
        .await
        .expect("the send is held")
        .expect("the send is answered");
    assert_eq!(rows_modified(&result), Some(1));
    assert_eq!(
        begun_by(&result).as_deref(),
        Some(BEGUN),
        "the inline begin"
    );
    // One keyed read checked that the key is free; nothing ran as DML.
    let reads = lock(&backend.reads);
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0].table, "Jobs");
    assert_eq!(
        reads[0].key_set.as_ref().map(|k| k.keys.clone()),
        Some(vec![ListValue {
            values: vec![string_value("a")]
        }])
    );
    assert!(lock(&backend.statements).is_empty());
    assert!(
        state.admission.holds(BEGUN),
        "the begun transaction holds the slot"
    );
    // At commit, the held row is an Insert mutation, and the commit wakes receivers.
    let mutations = lock(&state.deferred).take(BEGUN);
    assert_eq!(mutations.len(), 1);
    let Some(Operation::Insert(write)) = &mutations[0].operation else {
        panic!("not an insert: {mutations:?}");
    };
    assert_eq!(write.table, "Jobs");
    assert_eq!(write.columns, ["Id", "Payload"]);
    assert!(
        state.ended(BEGUN).is_some(),
        "the transaction is marked as sending"
    );
}

#[tokio::test]
async fn a_taken_key_is_answered_by_the_backend_in_the_same_transaction() {
    let (shared, state) = front();
    let backend = Stand {
        found: 1,
        ..Stand::default()
    };
    let message = send("a", begin());
    let result = deferred_insert(&shared, &backend, &state, &MetadataMap::new(), &message)
        .await
        .expect("the send is handled")
        .expect("the backend's answer");
    assert_eq!(begun_by(&result).as_deref(), Some(BEGUN));
    let statements = lock(&backend.statements);
    assert_eq!(statements.len(), 1, "the statement ran on the backend");
    assert_eq!(statements[0].sql, message.sql);
    assert_eq!(
        statements[0]
            .transaction
            .as_ref()
            .and_then(|t| t.selector.clone()),
        Some(Selector::Id(BEGUN.to_vec().into())),
        "in the transaction the front's read began"
    );
    assert!(lock(&state.deferred).take(BEGUN).is_empty(), "nothing held");
}

#[tokio::test]
async fn a_keyed_delete_is_held_and_a_later_statement_on_the_queue_runs_after_it() {
    let (shared, state) = front();
    let backend = Stand {
        found: 1,
        ..Stand::default()
    };
    let metadata = MetadataMap::new();
    let first = ack("a", begin(), 1);
    let result = deferred_delete(&shared, &backend, &state, &metadata, &first)
        .await
        .expect("the ack is held")
        .expect("the ack is answered");
    assert_eq!(rows_modified(&result), Some(1), "the row was there");
    assert_eq!(lock(&state.deferred).tables(BEGUN), ["Jobs"]);
    // The same request again (a replay) gets the same answer without another read.
    let replay = ack("a", in_begun(), 1);
    let again = deferred_delete(&shared, &backend, &state, &metadata, &replay)
        .await
        .expect("held")
        .expect("answered");
    assert_eq!(rows_modified(&again), Some(1));
    assert_eq!(lock(&backend.reads).len(), 1);
    // Another delete of the same key finds it gone.
    let second = ack("a", in_begun(), 2);
    let gone = deferred_delete(&shared, &backend, &state, &metadata, &second)
        .await
        .expect("held")
        .expect("answered");
    assert_eq!(rows_modified(&gone), Some(0));
    // A send to the queue in the same transaction sees the held delete: both run as DML,
    // the held statement first, and nothing is held any more.
    let resend = send("a", in_begun());
    let result = after_held_deletes(&shared, &backend, &state, &metadata, &resend)
        .await
        .expect("runs after the held deletes")
        .expect("answered");
    assert_eq!(rows_modified(&result), Some(1));
    let batches = lock(&backend.batches);
    assert_eq!(batches.len(), 1);
    let sqls: Vec<&str> = batches[0]
        .statements
        .iter()
        .map(|s| s.sql.as_str())
        .collect();
    assert_eq!(sqls, [first.sql.as_str(), resend.sql.as_str()]);
    assert!(lock(&state.deferred).take(BEGUN).is_empty());
}

#[tokio::test]
async fn a_read_of_a_queue_with_a_held_delete_aborts_the_transaction() {
    let (shared, state) = front();
    let backend = Stand {
        found: 1,
        ..Stand::default()
    };
    deferred_delete(
        &shared,
        &backend,
        &state,
        &MetadataMap::new(),
        &ack("a", begin(), 1),
    )
    .await
    .expect("held")
    .expect("answered");
    let status = guard_statements(
        &shared,
        &state,
        SESSION,
        in_begun().as_ref(),
        &["SELECT Id FROM Jobs"],
    )
    .await
    .expect_err("the read would still see the row");
    assert_eq!(status.code(), tonic::Code::Aborted);
    assert!(lock(&state.deferred).tables(BEGUN).is_empty(), "forgotten");
    assert!(!state.admission.holds(BEGUN), "the slot is free");
    // For a while, keyed deletes run as plain DML.
    assert!(
        deferred_delete(
            &shared,
            &backend,
            &state,
            &MetadataMap::new(),
            &ack("b", begin(), 1)
        )
        .await
        .is_none()
    );
}

#[tokio::test]
async fn a_delete_of_a_key_the_transaction_inserted_runs_as_dml() {
    let (shared, state) = front();
    let backend = Stand::default();
    let metadata = MetadataMap::new();
    deferred_insert(&shared, &backend, &state, &metadata, &send("a", begin()))
        .await
        .expect("held")
        .expect("answered");
    assert!(
        deferred_delete(
            &shared,
            &backend,
            &state,
            &metadata,
            &ack("a", in_begun(), 2)
        )
        .await
        .is_none(),
        "the insert is only held: the delete must see it"
    );
}

#[tokio::test]
async fn nothing_is_held_outside_a_read_write_transaction_holding_the_slot() {
    let (shared, state) = front();
    let backend = Stand::default();
    let metadata = MetadataMap::new();
    // No transaction (a single-use statement), and a transaction the front never admitted.
    for transaction in [None, in_begun()] {
        let message = send("a", transaction);
        assert!(
            deferred_insert(&shared, &backend, &state, &metadata, &message)
                .await
                .is_none()
        );
    }
    assert!(lock(&backend.reads).is_empty());
}
