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
use crate::sql::{self, Classified};
use spanner_queues_sql::Dialect;

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
    let delete = plan::keyed_delete(&message.sql, dialect)?;
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
    let insert = plan::keyed_insert(&message.sql, dialect)?;
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
    // The planner holds no insert into a table without key columns; the read below names one.
    let key_column = key_names.first()?.clone();
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
        columns: vec![key_column],
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
mod tests;
