//! The held-DML executor: keyed inserts and deletes the front answers itself and applies at
//! commit (what a transaction holds lives in `deferred`).

use std::future::Future;

use tonic::Status;

use super::admission::{Displaced, begins_read_write, selected_id};
use super::calls::{admit, fail_statement, plan, roll_back};
use super::deferred::{self, Earlier};
use super::plan::{self, HeldDelete, HeldInsert, Plan};
use super::proto::spanner::{
    ExecuteBatchDmlRequest, ExecuteBatchDmlResponse, ExecuteSqlRequest, KeySet, ReadRequest,
    ResultSet, ResultSetMetadata, ResultSetStats, StructType, Transaction, TransactionSelector,
};
use super::rpc::{displaced, forward};
use super::shared::Shared;
use super::state::DbState;
use super::sync::lock;
use crate::lexer::Dialect;
use crate::sql::{self, Classified};

/// What the executor asks of the backend: the official emulator (through [`Shared`]), or a
/// stand-in in unit tests.
pub(crate) trait Backend: Sync {
    /// `Read`.
    fn read(
        &self,
        request: tonic::Request<ReadRequest>,
    ) -> impl Future<Output = Result<tonic::Response<ResultSet>, Status>> + Send;
    /// `ExecuteSql`.
    fn execute_sql(
        &self,
        request: tonic::Request<ExecuteSqlRequest>,
    ) -> impl Future<Output = Result<tonic::Response<ResultSet>, Status>> + Send;
    /// `ExecuteBatchDml`.
    fn execute_batch_dml(
        &self,
        request: tonic::Request<ExecuteBatchDmlRequest>,
    ) -> impl Future<Output = Result<tonic::Response<ExecuteBatchDmlResponse>, Status>> + Send;
}

impl Backend for Shared {
    fn read(
        &self,
        request: tonic::Request<ReadRequest>,
    ) -> impl Future<Output = Result<tonic::Response<ResultSet>, Status>> + Send {
        let mut spanner = self.spanner();
        async move { spanner.read(request).await }
    }

    fn execute_sql(
        &self,
        request: tonic::Request<ExecuteSqlRequest>,
    ) -> impl Future<Output = Result<tonic::Response<ResultSet>, Status>> + Send {
        let mut spanner = self.spanner();
        async move { spanner.execute_sql(request).await }
    }

    fn execute_batch_dml(
        &self,
        request: tonic::Request<ExecuteBatchDmlRequest>,
    ) -> impl Future<Output = Result<tonic::Response<ExecuteBatchDmlResponse>, Status>> + Send {
        let mut spanner = self.spanner();
        async move { spanner.execute_batch_dml(request).await }
    }
}

/// Answers a keyed delete of a queue row (an ack by DML) without running it, when it is one
/// the front can hold back until commit (see `deferred`); `None` otherwise (the statement is
/// forwarded as usual).
pub(crate) async fn deferred_delete(
    shared: &Shared,
    backend: &impl Backend,
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteSqlRequest,
) -> Option<Result<ResultSet, Status>> {
    if !state.admission.enabled() {
        return None;
    }
    let dialect = state.dialect(shared).await.ok()?;
    let delete = sql::keyed_delete(&message.sql, dialect)?;
    let catalog = state.catalog(shared).await.ok()?;
    let delete = plan::held_delete(&catalog, &delete, message)?;
    let key = delete.key.clone();
    let selector = message.transaction.as_ref();
    let selected = selected_id(selector);
    match selected {
        // A read-write transaction holding the slot: nothing else writes the database now.
        Some(id) if state.admission.holds(id) => {}
        None if begins_read_write(selector) => {}
        _ => return None,
    }
    let earlier = {
        let held = lock(&state.deferred);
        if !held.accepting(selected.unwrap_or_default()) {
            return None;
        }
        selected.map_or(Earlier::None, |id| {
            held.earlier(id, &delete.queue, &key, message.seqno)
        })
    };
    if earlier == Earlier::Inserted {
        // Runs as DML after the held-back insert (see `after_held_deletes`).
        return None;
    }
    Some(hold_delete(shared, backend, state, metadata, message, delete, earlier).await)
}

/// Serves a keyed delete held back until commit: a keyed read in the client's transaction
/// tells whether the row exists (unless an earlier delete of the transaction decided it).
async fn hold_delete(
    shared: &Shared,
    backend: &impl Backend,
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteSqlRequest,
    delete: HeldDelete,
    earlier: Earlier,
) -> Result<ResultSet, Status> {
    let HeldDelete {
        queue: table,
        key_column,
        key,
        assert_rows,
    } = delete;
    let admitted = admit(
        shared,
        state,
        &message.session,
        message.transaction.as_ref(),
    )
    .await?;
    let (found, transaction) = if earlier == Earlier::None {
        let read = ReadRequest {
            session: message.session.clone(),
            transaction: message.transaction.clone(),
            table: table.to_owned(),
            columns: vec![key_column.to_owned()],
            key_set: Some(KeySet {
                keys: vec![key.clone()],
                ..KeySet::default()
            }),
            ..ReadRequest::default()
        };
        match backend
            .read(forward(metadata, read))
            .await
            .map_err(displaced)
        {
            Ok(response) => {
                let result = response.into_inner();
                (
                    i64::try_from(result.rows.len()).unwrap_or(i64::MAX),
                    result.metadata.and_then(|m| m.transaction),
                )
            }
            Err(status) => {
                admitted.done(None, Some(&status));
                return Err(status);
            }
        }
    } else {
        (i64::from(earlier == Earlier::Replay), None)
    };
    let began_id = transaction.as_ref().map(|t| t.id.to_vec());
    if let Some(expected) = assert_rows
        && expected != found
    {
        let status = Status::out_of_range(format!(
            "ASSERT_ROWS_MODIFIED expected {expected} rows modified, but found {found}"
        ));
        fail_statement(shared, message.session.clone(), began_id, admitted, &status).await;
        return Err(status);
    }
    if earlier == Earlier::None && found > 0 {
        let Some(id) = began_id
            .as_deref()
            .or(selected_id(message.transaction.as_ref()))
        else {
            let status = Status::internal("a keyed delete began no transaction");
            admitted.done(None, Some(&status));
            return Err(status);
        };
        let statement = deferred::Statement {
            sql: message.sql.clone(),
            params: message.params.clone(),
            param_types: message.param_types.clone(),
        };
        lock(&state.deferred).hold(id, &table, key, message.seqno, statement);
        tracing::debug!(database = %state.name, queue = %table, "keyed delete held until commit");
    }
    admitted.done(began_id.as_deref(), None);
    Ok(dml_result(transaction, found))
}

/// The answer to a DML statement the front ran itself: `row_count` rows, and the transaction
/// begun inline, if any.
fn dml_result(transaction: Option<Transaction>, row_count: i64) -> ResultSet {
    ResultSet {
        metadata: Some(ResultSetMetadata {
            row_type: Some(StructType::default()),
            transaction,
            ..ResultSetMetadata::default()
        }),
        rows: Vec::new(),
        stats: Some(ResultSetStats {
            row_count: Some(
                super::proto::spanner::result_set_stats::RowCount::RowCountExact(row_count),
            ),
            ..ResultSetStats::default()
        }),
        ..ResultSet::default()
    }
}

/// [`guard_deferred`] for SQL statements: a statement naming a queue with held-back deletes.
pub(crate) async fn guard_statements(
    shared: &Shared,
    state: &DbState,
    session: &str,
    selector: Option<&TransactionSelector>,
    statements: &[&str],
) -> Result<(), Status> {
    let Some(id) = selected_id(selector) else {
        return Ok(());
    };
    if lock(&state.deferred).tables(id).is_empty() {
        return Ok(());
    }
    let dialect = state.dialect(shared).await?;
    guard_deferred(shared, state, session, selector, |table| {
        statements
            .iter()
            .any(|sql| sql::names_identifier(sql, dialect, table))
    })
    .await
}

/// A call of a transaction with held-back deletes that concerns one of their queues (`names`)
/// would see the rows still there: the transaction is rolled back and the call answered
/// `ABORTED`, which clients retry (see `deferred`).
pub(crate) async fn guard_deferred(
    shared: &Shared,
    state: &DbState,
    session: &str,
    selector: Option<&TransactionSelector>,
    names: impl Fn(&str) -> bool,
) -> Result<(), Status> {
    let Some(id) = selected_id(selector) else {
        return Ok(());
    };
    let tables = lock(&state.deferred).tables(id);
    let Some(table) = tables.iter().find(|t| names(t)) else {
        return Ok(());
    };
    lock(&state.deferred).abort(id);
    roll_back(
        shared,
        Displaced {
            session: session.to_owned(),
            transaction: id.to_vec(),
        },
    )
    .await;
    if let Ok(call) = state.admission.call(id) {
        call.end_transaction();
    }
    tracing::debug!(database = %state.name, queue = %table, "aborted a transaction that used a queue after a held-back delete");
    Err(Status::aborted(format!(
        "Transaction was aborted: it used queue {table} after deleting one of its messages by \
         key, which the emulator applies at commit; retry the transaction"
    )))
}

/// A DML statement (without `THEN RETURN`) of a transaction with held-back deletes of a queue
/// it names: the deletes run as DML first, in one batch with the statement (under its
/// sequence number), and are no longer held. `None` when this does not apply.
pub(crate) async fn after_held_deletes(
    shared: &Shared,
    backend: &impl Backend,
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteSqlRequest,
) -> Option<Result<ResultSet, Status>> {
    use super::proto::spanner::execute_batch_dml_request::Statement as BatchStatement;
    let id = selected_id(message.transaction.as_ref())?;
    let tables = lock(&state.deferred).tables(id);
    if tables.is_empty() {
        return None;
    }
    let dialect = state.dialect(shared).await.ok()?;
    if !tables
        .iter()
        .any(|t| sql::names_identifier(&message.sql, dialect, t))
        || sql::names_identifier(&message.sql, dialect, "RETURN")
    {
        return None;
    }
    let sends = match plan(shared, state, message).await {
        Ok(Plan::Forward {
            sends,
            assert_rows: None,
        }) if matches!(
            sql::classify(&message.sql, dialect),
            Ok(Classified::Dml { .. })
        ) =>
        {
            sends
        }
        Ok(_) => return None,
        Err(status) => return Some(Err(status)),
    };
    let held = lock(&state.deferred).statements(id);
    let count = held.len();
    let mut statements: Vec<BatchStatement> = held
        .into_iter()
        .map(|h| BatchStatement {
            sql: h.sql,
            params: h.params,
            param_types: h.param_types,
        })
        .collect();
    statements.push(BatchStatement {
        sql: message.sql.clone(),
        params: message.params.clone(),
        param_types: message.param_types.clone(),
    });
    let admitted = match admit(
        shared,
        state,
        &message.session,
        message.transaction.as_ref(),
    )
    .await
    {
        Ok(admitted) => admitted,
        Err(status) => return Some(Err(status)),
    };
    let request = ExecuteBatchDmlRequest {
        session: message.session.clone(),
        transaction: message.transaction.clone(),
        statements,
        seqno: message.seqno,
        request_options: message.request_options.clone(),
        ..ExecuteBatchDmlRequest::default()
    };
    let response = backend
        .execute_batch_dml(forward(metadata, request))
        .await
        .map_err(displaced);
    let result = match response {
        Ok(response) => {
            let mut batch = response.into_inner();
            // The held-back deletes that ran are held no longer (a commit-time delete would
            // remove a message the statement sent again under the same key).
            if batch.result_sets.len() >= count {
                lock(&state.deferred).forget(id);
            }
            let failed = batch
                .status
                .as_ref()
                .filter(|s| s.code != tonic::Code::Ok as i32)
                .map(|s| Status::new(tonic::Code::from_i32(s.code), s.message.clone()));
            match (failed, batch.result_sets.len() > count) {
                (None, true) | (Some(_), true) => Ok(batch.result_sets.swap_remove(count)),
                (Some(status), false) => Err(status),
                (None, false) => Err(Status::internal(
                    "a batch of held deletes and a statement returned too few results",
                )),
            }
        }
        Err(status) => Err(status),
    };
    match &result {
        Ok(_) => {
            if sends {
                state.sending(id);
            }
            admitted.done(None, None);
        }
        Err(status) => admitted.done(None, Some(status)),
    }
    Some(result)
}

/// Answers a send by DML (`INSERT INTO Q (…) VALUES (…)` with parameters, string literals or
/// `CURRENT_TIMESTAMP()` for the delivery time) without running it: a keyed read in the
/// client's transaction checks that no row has one of its keys, and the rows become `Insert`
/// mutations of the commit (see `deferred`). A key that exists runs the statement as DML (for
/// the backend's own error). `None` when the statement is not one the front can hold back.
pub(crate) async fn deferred_insert(
    shared: &Shared,
    backend: &impl Backend,
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteSqlRequest,
) -> Option<Result<ResultSet, Status>> {
    Some(
        deferred_insert_as(shared, backend, state, metadata, message, false)
            .await?
            .and_then(|insertion| match insertion {
                Insertion::Answer(result) => Ok(*result),
                Insertion::Taken(_) => Err(Status::internal("a taken key was not answered")),
            }),
    )
}

/// What [`held_batch_insert`] did with a batch.
pub(crate) enum BatchHold {
    /// Held until commit, answered.
    Answered(Box<ExecuteBatchDmlResponse>),
    /// A key is taken: the batch goes to the backend, in the transaction the front's read
    /// began, if it began one.
    Forward(Option<Transaction>),
}

/// A batch of single-row keyed inserts into one table, the form `Queue::send_many` sends: held
/// until commit as one multi-row insert would be (see [`deferred_insert`]), because the
/// official emulator runs each statement as a scan of the table. `None` when the batch is not
/// of that form (GoogleSQL only) or cannot be held.
pub(crate) async fn held_batch_insert(
    shared: &Shared,
    backend: &impl Backend,
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteBatchDmlRequest,
) -> Option<Result<BatchHold, Status>> {
    let count = message.statements.len();
    if count < 2 || state.dialect(shared).await.ok()? != Dialect::GoogleSql {
        return None;
    }
    let combined = plan::batch_insert(message)?;
    Some(
        match deferred_insert_as(shared, backend, state, metadata, &combined, true).await? {
            Err(status) => Err(status),
            Ok(Insertion::Taken(transaction)) => Ok(BatchHold::Forward(transaction)),
            Ok(Insertion::Answer(result)) => {
                let mut began = result.metadata.and_then(|m| m.transaction);
                let result_sets = (0..count).map(|_| dml_result(began.take(), 1)).collect();
                Ok(BatchHold::Answered(Box::new(ExecuteBatchDmlResponse {
                    result_sets,
                    status: Some(googleapis_tonic_google_spanner_v1::google::rpc::Status {
                        code: tonic::Code::Ok as i32,
                        message: String::new(),
                        details: Vec::new(),
                    }),
                    ..ExecuteBatchDmlResponse::default()
                })))
            }
        },
    )
}

/// What [`deferred_insert_as`] did with an insert it could hold.
enum Insertion {
    /// The statement's answer (held until commit, or run by the backend for a taken key).
    Answer(Box<ResultSet>),
    /// A key is taken and the caller asked to be told (`report_taken`): nothing was held or
    /// run; the transaction the front's read began, if it began one, is bound to the slot.
    Taken(Option<Transaction>),
}

/// [`deferred_insert`]; with `report_taken`, a taken key is reported to the caller (who then
/// sends what it has to the backend) instead of being run as DML.
async fn deferred_insert_as(
    shared: &Shared,
    backend: &impl Backend,
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteSqlRequest,
    report_taken: bool,
) -> Option<Result<Insertion, Status>> {
    use super::proto::spanner::transaction_selector::Selector;
    if !state.admission.enabled() {
        return None;
    }
    let dialect = state.dialect(shared).await.ok()?;
    let insert = sql::keyed_insert(&message.sql, dialect)?;
    let catalog = state.catalog(shared).await.ok()?;
    let insertion = plan::held_insert(&catalog, &insert, message)?;
    let selector = message.transaction.as_ref();
    let selected = selected_id(selector);
    match selected {
        Some(id) if state.admission.holds(id) => {}
        None if begins_read_write(selector) => {}
        _ => return None,
    }
    {
        let held = lock(&state.deferred);
        if !held.accepting(selected.unwrap_or_default())
            || selected.is_some_and(|id| held.holds_table(id, &insertion.table))
        {
            return None;
        }
    }
    let HeldInsert {
        table: target_name,
        queue,
        key_columns: key_names,
        rows,
        explicit_deliver,
    } = insertion;
    // The checks the statement would get (payload limits, disabled sends).
    match plan(shared, state, message).await {
        Ok(Plan::Forward {
            sends,
            assert_rows: None,
        }) if sends == queue => {}
        Ok(_) => return None,
        Err(status) => return Some(Err(status)),
    }
    let admitted = match admit(shared, state, &message.session, selector).await {
        Ok(admitted) => admitted,
        Err(status) => return Some(Err(status)),
    };
    let read = ReadRequest {
        session: message.session.clone(),
        transaction: message.transaction.clone(),
        table: target_name.clone(),
        columns: vec![key_names[0].to_owned()],
        key_set: Some(KeySet {
            keys: rows.iter().map(|(k, _)| k.clone()).collect(),
            ..KeySet::default()
        }),
        ..ReadRequest::default()
    };
    let (found, transaction) = match backend
        .read(forward(metadata, read))
        .await
        .map_err(displaced)
    {
        Ok(response) => {
            let result = response.into_inner();
            (
                result.rows.len(),
                result.metadata.and_then(|m| m.transaction),
            )
        }
        Err(status) => {
            admitted.done(None, Some(&status));
            return Some(Err(status));
        }
    };
    let began_id = transaction.as_ref().map(|t| t.id.to_vec());
    let Some(id) = began_id.clone().or(selected.map(<[u8]>::to_vec)) else {
        let status = Status::internal("a held-back insert began no transaction");
        admitted.done(None, Some(&status));
        return Some(Err(status));
    };
    if found > 0 && report_taken {
        admitted.done(began_id.as_deref(), None);
        return Some(Ok(Insertion::Taken(transaction)));
    }
    if found > 0 {
        // A key is taken: the backend answers the statement (its ALREADY_EXISTS).
        let mut forwarded = message.clone();
        forwarded.transaction = Some(TransactionSelector {
            selector: Some(Selector::Id(id.clone().into())),
        });
        let response = backend
            .execute_sql(forward(metadata, forwarded))
            .await
            .map_err(displaced);
        return Some(match response {
            Ok(response) => {
                let mut result = response.into_inner();
                if transaction.is_some() {
                    result.metadata.get_or_insert_default().transaction = transaction;
                }
                if queue {
                    state.sending(&id);
                }
                admitted.done(began_id.as_deref(), None);
                Ok(Insertion::Answer(Box::new(result)))
            }
            Err(status) => {
                fail_statement(shared, message.session.clone(), began_id, admitted, &status).await;
                Err(status)
            }
        });
    }
    let count = i64::try_from(rows.len()).unwrap_or(i64::MAX);
    let statement = deferred::Statement {
        sql: message.sql.clone(),
        params: message.params.clone(),
        param_types: message.param_types.clone(),
    };
    lock(&state.deferred).hold_insert(&id, &target_name, rows, message.seqno, statement);
    if !queue {
        tracing::debug!(database = %state.name, table = %target_name, rows = count, "insert by DML held until commit");
    } else if explicit_deliver {
        // Any delivery time, past ones included.
        state.sending_from(&id, std::time::UNIX_EPOCH);
    } else {
        state.sending(&id);
    }
    if queue {
        tracing::debug!(database = %state.name, queue = %target_name, rows = count, "send by DML held until commit");
    }
    admitted.done(began_id.as_deref(), None);
    Some(Ok(Insertion::Answer(Box::new(dml_result(
        transaction,
        count,
    )))))
}

#[cfg(test)]
mod tests {
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
        ) -> impl Future<Output = Result<tonic::Response<ExecuteBatchDmlResponse>, Status>> + Send
        {
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
}
