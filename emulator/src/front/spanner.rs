//! The `google.spanner.v1.Spanner` methods the front rewrites.

use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt as _;
use tonic::{Request, Response, Status};

use super::admission::{Admitted, Displaced, Permit, is_read_write, selected_id};
use super::grpc::{BoxStream, forward};
use super::limits;
use super::mutations;
use super::proto::spanner::{
    BatchWriteRequest, BatchWriteResponse, BeginTransactionRequest, CommitRequest, CommitResponse,
    ExecuteBatchDmlRequest, ExecuteBatchDmlResponse, ExecuteSqlRequest, PartialResultSet,
    ReadRequest, ResultSet, RollbackRequest, Transaction, commit_request,
};
use super::receive;
use super::server::Shared;
use super::state::{DbState, database_of};
use crate::ddl::Catalog;
use crate::lexer::Dialect;
use crate::sql::{self, Classified, DmlKind, SqlError, SqlErrorCode};

fn db(shared: &Shared, session: &str) -> Result<Arc<DbState>, Status> {
    Ok(shared.databases.get(database_of(session)?))
}

pub(crate) async fn commit(
    shared: Arc<Shared>,
    request: Request<CommitRequest>,
) -> Result<Response<CommitResponse>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    let state = db(&shared, &message.session)?;
    let mut strict_acks = Vec::new();
    let mut sends = false;
    // Any mutation may touch a queue table (a Send, or a direct Insert/Update/Delete).
    if !message.mutations.is_empty() {
        let catalog = state.catalog(&shared).await?;
        // A Send/Ack naming a queue in a database without queues must still get NOT_FOUND
        // (the backend would call the mutation empty).
        if has_queues(&catalog) || has_queue_mutation(&message.mutations) {
            let rewritten = mutations::rewrite(
                &catalog,
                std::mem::take(&mut message.mutations),
                SystemTime::now(),
            )?;
            if rewritten.queue_ops > 0 {
                tracing::debug!(
                    database = %state.name,
                    queue_ops = rewritten.queue_ops,
                    "commit with queue operations"
                );
            }
            strict_acks = rewritten.strict_acks;
            message.mutations = rewritten.mutations;
        }
        limits::check_mutations(&catalog, &message.mutations)?;
        sends = sends_to_queue(&catalog, &message.mutations);
    }
    let admitted = match &message.transaction {
        Some(commit_request::Transaction::TransactionId(id)) => {
            Admitted::Call(state.admission.call(id)?)
        }
        Some(commit_request::Transaction::SingleUseTransaction(options))
            if is_read_write(options) =>
        {
            Admitted::Begin(acquire(&shared, &state, &message.session).await)
        }
        _ => Admitted::Nothing,
    };
    let sent_by_dml = match &message.transaction {
        Some(commit_request::Transaction::TransactionId(id)) => state.ended(id),
        _ => false,
    };
    let sends = sent_by_dml || sends;
    let result = shared.spanner().commit(forward(&metadata, message)).await;
    admitted.end();
    match result {
        Ok(response) => {
            state.notify_settled();
            if sends {
                state.notify_change();
            }
            Ok(response)
        }
        Err(status) => Err(mutations::ack_not_found(displaced(status), &strict_acks)),
    }
}

/// Awaits a streaming call forwarded under `admitted`. When the backend refuses it, the
/// admission ends with that (displaced-aware) status, as a finished transaction would.
async fn opened<T>(
    admitted: Admitted,
    call: impl std::future::Future<Output = Result<Response<T>, Status>>,
) -> Result<(T, Admitted), Status> {
    match call.await {
        Ok(response) => Ok((response.into_inner(), admitted)),
        Err(status) => {
            let status = displaced(status);
            admitted.done(None, Some(&status));
            Err(status)
        }
    }
}

/// The official emulator runs one read-write transaction per database at a time: a newer
/// transaction displaces (rolls back) an older one, whose next call then fails with
/// `NOT_FOUND` "Transaction not found", or `FAILED_PRECONDITION` "Invalid transaction ID" or
/// "Cannot read or query using a transaction after it has been committed or rolledback". Cloud
/// Spanner aborts a transaction that loses a conflict, and clients retry `ABORTED`; report it
/// that way. Nothing of the displaced transaction was applied.
fn displaced(status: Status) -> Status {
    let message = status.message();
    let lost = match status.code() {
        tonic::Code::NotFound => message.starts_with("Transaction not found"),
        tonic::Code::FailedPrecondition => {
            message.starts_with("Invalid transaction ID")
                || message.starts_with("Cannot read or query using a transaction after")
        }
        _ => false,
    };
    if lost {
        Status::aborted(format!(
            "Transaction was aborted: a concurrent transaction displaced it in the emulator \
             (the emulator runs one read-write transaction per database at a time; original \
             error: {message})"
        ))
    } else {
        status
    }
}

/// Applies [`displaced`] to the status inside a Batch DML response (a failing statement is
/// reported there, not as an RPC error).
fn displaced_in_batch(mut response: ExecuteBatchDmlResponse) -> ExecuteBatchDmlResponse {
    if let Some(status) = response.status.take() {
        let code = tonic::Code::from_i32(status.code);
        let mapped = displaced(Status::new(code, status.message.clone()));
        response.status = Some(if mapped.code() == code {
            status
        } else {
            googleapis_tonic_google_spanner_v1::google::rpc::Status {
                code: mapped.code() as i32,
                message: mapped.message().to_owned(),
                details: Vec::new(),
            }
        });
    }
    response
}

/// Whether rewritten mutations insert into a queue table (a `Send` became an `Insert`), which
/// may make messages deliverable.
fn sends_to_queue(catalog: &Catalog, mutations: &[super::proto::spanner::Mutation]) -> bool {
    use super::proto::spanner::mutation::Operation;
    mutations.iter().any(|m| match &m.operation {
        Some(Operation::Insert(w) | Operation::InsertOrUpdate(w) | Operation::Replace(w)) => {
            catalog.is_queue(&w.table)
        }
        Some(Operation::Send(_)) => true,
        _ => false,
    })
}

fn has_queues(catalog: &Catalog) -> bool {
    catalog.queues().next().is_some()
}

fn has_queue_mutation(mutations: &[super::proto::spanner::Mutation]) -> bool {
    use super::proto::spanner::mutation::Operation;
    mutations
        .iter()
        .any(|m| matches!(m.operation, Some(Operation::Send(_) | Operation::Ack(_))))
}

pub(crate) async fn begin_transaction(
    shared: Arc<Shared>,
    request: Request<BeginTransactionRequest>,
) -> Result<Response<Transaction>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    if let Some(key) = message.mutation_key.take() {
        if has_queue_mutation(std::slice::from_ref(&key)) {
            let state = db(&shared, &message.session)?;
            let catalog = state.catalog(&shared).await?;
            message.mutation_key = Some(mutations::rewrite_mutation_key(
                &catalog,
                key,
                SystemTime::now(),
            )?);
        } else {
            message.mutation_key = Some(key);
        }
    }
    let permit = match &message.options {
        Some(options) if is_read_write(options) => {
            let state = db(&shared, &message.session)?;
            Some(acquire(&shared, &state, &message.session).await)
        }
        _ => None,
    };
    let response = shared
        .spanner()
        .begin_transaction(forward(&metadata, message))
        .await
        .map_err(displaced)?;
    if let Some(permit) = permit {
        permit.bind(&response.get_ref().id);
    }
    Ok(response)
}

/// Waits for the database's read-write slot (see `admission`); rolls back the transaction it
/// took the slot from, if any.
async fn acquire(shared: &Shared, state: &DbState, session: &str) -> Permit {
    let mut permit = state.admission.acquire(session).await;
    if let Some(old) = permit.take_displaced() {
        roll_back(shared, old).await;
    }
    permit
}

/// [`Admitted::selector`], rolling back the transaction a begin took the slot from.
async fn admit(
    shared: &Shared,
    state: &DbState,
    session: &str,
    selector: Option<&super::proto::spanner::TransactionSelector>,
) -> Result<Admitted, Status> {
    let mut admitted = Admitted::selector(&state.admission, session, selector).await?;
    if let Admitted::Begin(permit) = &mut admitted
        && let Some(old) = permit.take_displaced()
    {
        roll_back(shared, old).await;
    }
    Ok(admitted)
}

/// Rolls back a transaction that lost its slot (it was idle while others waited): the official
/// emulator aborts newcomers while an older transaction holds locks.
async fn roll_back(shared: &Shared, old: Displaced) {
    let request = RollbackRequest {
        session: old.session,
        transaction_id: old.transaction.into(),
    };
    if let Err(status) = shared.spanner().rollback(request).await {
        tracing::debug!(%status, "rolling back an idle transaction failed (it may be gone)");
    }
}

/// The id of the transaction a result set's metadata reports (an inline begin).
fn began(metadata: Option<&super::proto::spanner::ResultSetMetadata>) -> Option<&[u8]> {
    metadata
        .and_then(|m| m.transaction.as_ref())
        .map(|t| &t.id[..])
}

pub(crate) async fn rollback(
    shared: Arc<Shared>,
    request: Request<RollbackRequest>,
) -> Result<Response<()>, Status> {
    let metadata = request.metadata().clone();
    let message = request.into_inner();
    let state = db(&shared, &message.session)?;
    state.ended(&message.transaction_id);
    let Ok(call) = state.admission.call(&message.transaction_id) else {
        // The transaction lost its slot and was aborted: nothing is left to roll back.
        return Ok(Response::new(()));
    };
    let result = shared.spanner().rollback(forward(&metadata, message)).await;
    call.end_transaction();
    result
}

pub(crate) async fn read(
    shared: Arc<Shared>,
    request: Request<ReadRequest>,
) -> Result<Response<ResultSet>, Status> {
    let metadata = request.metadata().clone();
    let message = request.into_inner();
    let state = db(&shared, &message.session)?;
    let admitted = admit(
        &shared,
        &state,
        &message.session,
        message.transaction.as_ref(),
    )
    .await?;
    let response = shared
        .spanner()
        .read(forward(&metadata, message))
        .await
        .map_err(displaced);
    admitted.done(
        response
            .as_ref()
            .ok()
            .and_then(|r| began(r.get_ref().metadata.as_ref())),
        response.as_ref().err(),
    );
    response
}

pub(crate) async fn streaming_read(
    shared: Arc<Shared>,
    request: Request<ReadRequest>,
) -> Result<Response<BoxStream<PartialResultSet>>, Status> {
    let metadata = request.metadata().clone();
    let message = request.into_inner();
    let state = db(&shared, &message.session)?;
    let admitted = admit(
        &shared,
        &state,
        &message.session,
        message.transaction.as_ref(),
    )
    .await?;
    let (stream, admitted) = opened(
        admitted,
        shared.spanner().streaming_read(forward(&metadata, message)),
    )
    .await?;
    Ok(Response::new(admitted_stream(stream, admitted, None)))
}

/// Maps a backend result stream: reports a displaced transaction as `ABORTED`, binds an inline
/// begin to the slot on the first metadata and ends the admitted call with the stream. With
/// `sending` (an INSERT into a queue), a transaction begun by the stream is marked as sending.
fn admitted_stream(
    stream: tonic::Streaming<PartialResultSet>,
    admitted: Admitted,
    sending: Option<Arc<DbState>>,
) -> BoxStream<PartialResultSet> {
    let mut admitted = Some(admitted);
    Box::pin(stream.map(move |item| {
        let item = item.map_err(displaced);
        match &item {
            Ok(partial) => {
                if let Some(id) = began(partial.metadata.as_ref()) {
                    if let Some(state) = &sending {
                        state.sending(id);
                    }
                    if admitted.as_ref().is_some_and(Admitted::is_begin)
                        && let Some(begin) = admitted.take()
                    {
                        begin.done(Some(id), None);
                    }
                }
            }
            Err(status) => {
                if let Some(call) = admitted.take() {
                    call.done(None, Some(status));
                }
            }
        }
        item
    }))
}

pub(crate) async fn batch_write(
    shared: Arc<Shared>,
    request: Request<BatchWriteRequest>,
) -> Result<Response<BoxStream<BatchWriteResponse>>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    let state = db(&shared, &message.session)?;
    let catalog = state.catalog(&shared).await?;
    if has_queues(&catalog) {
        for group in &mut message.mutation_groups {
            let rewritten = mutations::rewrite(
                &catalog,
                std::mem::take(&mut group.mutations),
                SystemTime::now(),
            )?;
            group.mutations = rewritten.mutations;
        }
    }
    for group in &message.mutation_groups {
        limits::check_mutations(&catalog, &group.mutations)?;
    }
    let sends = message
        .mutation_groups
        .iter()
        .any(|g| sends_to_queue(&catalog, &g.mutations));
    let stream = shared
        .spanner()
        .batch_write(forward(&metadata, message))
        .await?
        .into_inner();
    let stream = stream.map(move |item| {
        if item.is_ok() {
            state.notify_settled();
            if sends {
                state.notify_change();
            }
        }
        item
    });
    Ok(Response::new(Box::pin(stream)))
}

/// Rejects DML that Spanner does not allow on a queue.
fn check_dml(catalog: &Catalog, sql_text: &str, dialect: Dialect) -> Result<(), Status> {
    let Classified::Dml { kind, table } = sql::classify(sql_text, dialect).map_err(sql_status)?
    else {
        return Ok(());
    };
    let Some(queue) = catalog.queue(&table) else {
        return Ok(());
    };
    match kind {
        DmlKind::Update | DmlKind::InsertOrUpdate => Err(Status::invalid_argument(format!(
            "Queue {} does not support UPDATE statements: to change a message, delete it and \
             insert it again in the same transaction",
            queue.name
        ))),
        DmlKind::Insert | DmlKind::InsertOrIgnore if queue.options.send_disabled() => {
            Err(Status::failed_precondition(format!(
                "Queue {} does not accept messages: its disable_send option is true",
                queue.name
            )))
        }
        _ => Ok(()),
    }
}

pub(crate) fn sql_status(error: SqlError) -> Status {
    match error.code() {
        SqlErrorCode::InvalidArgument => Status::invalid_argument(error.to_string()),
        SqlErrorCode::Unimplemented => Status::unimplemented(error.to_string()),
    }
}

/// What a SQL request is, with the catalog it was judged against.
enum Plan {
    Receive(sql::ReceiveQuery, Arc<Catalog>),
    Renew(sql::RenewQuery, Arc<Catalog>),
    /// Forwarded; `sends` when it is an INSERT into a queue. `assert_rows` holds the
    /// PostgreSQL statement without its `ASSERT_ROWS_MODIFIED n` and `n`: the front checks
    /// the row count (see [`sql::strip_assert_rows_modified`]).
    Forward {
        sends: bool,
        assert_rows: Option<(String, i64)>,
    },
}

async fn plan(
    shared: &Shared,
    state: &DbState,
    message: &ExecuteSqlRequest,
) -> Result<Plan, Status> {
    let sql_text = &message.sql;
    // Cheap pre-check: most statements never mention a queue function or a DML verb.
    let dialect = state.dialect(shared).await?;
    let classified = sql::classify(sql_text, dialect).map_err(sql_status)?;
    if let Classified::Dml { kind, table } = &classified
        && *kind != DmlKind::Delete
    {
        limits::check_dml_params(table, message.params.as_ref(), &message.param_types)?;
    }
    let assert_rows = match &classified {
        Classified::Dml { .. } => sql::strip_assert_rows_modified(sql_text, dialect),
        _ => None,
    };
    match classified {
        Classified::Other => Ok(Plan::Forward {
            sends: false,
            assert_rows: None,
        }),
        Classified::Receive(query) => Ok(Plan::Receive(query, state.catalog(shared).await?)),
        Classified::RenewLease(query) => Ok(Plan::Renew(query, state.catalog(shared).await?)),
        Classified::Dml { kind, table } => {
            let catalog = state.catalog(shared).await?;
            check_dml(&catalog, sql_text, dialect)?;
            Ok(Plan::Forward {
                sends: kind != DmlKind::Delete && catalog.is_queue(&table),
                assert_rows,
            })
        }
    }
}

pub(crate) async fn execute_sql(
    shared: Arc<Shared>,
    request: Request<ExecuteSqlRequest>,
) -> Result<Response<ResultSet>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    let state = db(&shared, &message.session)?;
    match plan(&shared, &state, &message).await? {
        Plan::Forward { sends, assert_rows } => {
            let admitted = admit(
                &shared,
                &state,
                &message.session,
                message.transaction.as_ref(),
            )
            .await?;
            let selected = selected_id(message.transaction.as_ref()).map(<[u8]>::to_vec);
            let session = message.session.clone();
            let expected = assert_rows.map(|(stripped, n)| {
                message.sql = stripped;
                n
            });
            let response = shared
                .spanner()
                .execute_sql(forward(&metadata, message))
                .await
                .map_err(displaced);
            let began_id = response
                .as_ref()
                .ok()
                .and_then(|r| began(r.get_ref().metadata.as_ref()))
                .map(<[u8]>::to_vec);
            if let (Some(n), Ok(r)) = (expected, &response)
                && let Some(status) = rows_mismatch(n, r.get_ref().stats.as_ref())
            {
                fail_statement(&shared, session, began_id, admitted, &status).await;
                return Err(status);
            }
            if sends && let Some(id) = began_id.as_deref().or(selected.as_deref()) {
                state.sending(id);
            }
            admitted.done(began_id.as_deref(), response.as_ref().err());
            response
        }
        Plan::Receive(query, _) => Err(Status::invalid_argument(format!(
            "RECEIVE_{} is a long-running streaming call: execute it with ExecuteStreamingSql \
             (a streaming query), not ExecuteSql",
            query.queue
        ))),
        Plan::Renew(query, catalog) => {
            let result = receive::renew(&shared, &state, &catalog, &query, &message).await?;
            Ok(Response::new(result))
        }
    }
}

pub(crate) async fn execute_streaming_sql(
    shared: Arc<Shared>,
    request: Request<ExecuteSqlRequest>,
) -> Result<Response<BoxStream<PartialResultSet>>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    let state = db(&shared, &message.session)?;
    match plan(&shared, &state, &message).await? {
        Plan::Forward {
            sends,
            assert_rows: Some((stripped, n)),
        } => {
            // A DML result is small: read it whole, check the row count, answer in one piece.
            if sends && let Some(id) = selected_id(message.transaction.as_ref()) {
                state.sending(id);
            }
            let admitted = admit(
                &shared,
                &state,
                &message.session,
                message.transaction.as_ref(),
            )
            .await?;
            let session = message.session.clone();
            message.sql = stripped;
            let (stream, admitted) = opened(
                admitted,
                shared
                    .spanner()
                    .execute_streaming_sql(forward(&metadata, message)),
            )
            .await?;
            let mut parts = Vec::new();
            let mut stream = stream;
            while let Some(item) = stream.next().await {
                match item.map_err(displaced) {
                    Ok(part) => parts.push(part),
                    Err(status) => {
                        admitted.done(None, Some(&status));
                        return Err(status);
                    }
                }
            }
            let began_id = parts
                .iter()
                .find_map(|p| began(p.metadata.as_ref()))
                .map(<[u8]>::to_vec);
            let stats = parts.iter().rev().find_map(|p| p.stats.as_ref());
            if let Some(status) = rows_mismatch(n, stats) {
                fail_statement(&shared, session, began_id, admitted, &status).await;
                return Err(status);
            }
            if sends && let Some(id) = &began_id {
                state.sending(id);
            }
            admitted.done(began_id.as_deref(), None);
            Ok(Response::new(Box::pin(futures::stream::iter(
                parts.into_iter().map(Ok),
            ))))
        }
        Plan::Forward { sends, .. } => {
            if sends && let Some(id) = selected_id(message.transaction.as_ref()) {
                state.sending(id);
            }
            let admitted = admit(
                &shared,
                &state,
                &message.session,
                message.transaction.as_ref(),
            )
            .await?;
            let (stream, admitted) = opened(
                admitted,
                shared
                    .spanner()
                    .execute_streaming_sql(forward(&metadata, message)),
            )
            .await?;
            Ok(Response::new(admitted_stream(
                stream,
                admitted,
                sends.then(|| Arc::clone(&state)),
            )))
        }
        Plan::Receive(query, catalog) => {
            let stream = receive::receive(shared, state, catalog, query, message).await?;
            Ok(Response::new(stream))
        }
        Plan::Renew(query, catalog) => {
            let result = receive::renew(&shared, &state, &catalog, &query, &message).await?;
            let partial = PartialResultSet {
                metadata: result.metadata,
                values: result.rows.into_iter().flat_map(|row| row.values).collect(),
                last: true,
                ..PartialResultSet::default()
            };
            Ok(Response::new(Box::pin(futures::stream::iter([Ok(
                partial,
            )]))))
        }
    }
}

/// `OUT_OF_RANGE` when a statement with `ASSERT_ROWS_MODIFIED n` modified another number of
/// rows (the official emulator's message for GoogleSQL).
fn rows_mismatch(
    expected: i64,
    stats: Option<&super::proto::spanner::ResultSetStats>,
) -> Option<Status> {
    use super::proto::spanner::result_set_stats::RowCount;
    let found = match stats.and_then(|s| s.row_count.as_ref()) {
        Some(RowCount::RowCountExact(n)) => *n,
        _ => return None,
    };
    (found != expected).then(|| {
        Status::out_of_range(format!(
            "ASSERT_ROWS_MODIFIED expected {expected} rows modified, but found {found}"
        ))
    })
}

/// Ends a statement that failed its `ASSERT_ROWS_MODIFIED` check. In a transaction the client
/// began before, the transaction stays usable, as in Cloud Spanner (nothing was modified when
/// the count is short). A transaction begun by this very statement is rolled back: the client
/// got no transaction id, so it could never commit or roll it back itself.
async fn fail_statement(
    shared: &Shared,
    session: String,
    began_id: Option<Vec<u8>>,
    admitted: Admitted,
    status: &Status,
) {
    if let Some(transaction) = began_id {
        roll_back(
            shared,
            Displaced {
                session,
                transaction,
            },
        )
        .await;
    }
    admitted.done(None, Some(status));
}

pub(crate) async fn execute_batch_dml(
    shared: Arc<Shared>,
    request: Request<ExecuteBatchDmlRequest>,
) -> Result<Response<ExecuteBatchDmlResponse>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    let state = db(&shared, &message.session)?;
    let dialect = state.dialect(&shared).await?;
    let mut catalog = None;
    let mut sends = false;
    // PostgreSQL `ASSERT_ROWS_MODIFIED` (see `strip_assert_rows_modified`): supported on the
    // last statement of a batch only, where the front can check it before anything else runs.
    let mut expected_last = None;
    let count = message.statements.len();
    for (i, statement) in message.statements.iter_mut().enumerate() {
        if let Some((stripped, n)) = sql::strip_assert_rows_modified(&statement.sql, dialect) {
            if i + 1 != count {
                return Err(Status::unimplemented(
                    "ASSERT_ROWS_MODIFIED in a batch of DML in a PostgreSQL-dialect database is \
                     supported by the spanner-queues emulator on the last statement only",
                ));
            }
            statement.sql = stripped;
            expected_last = Some(n);
        }
    }
    for statement in &message.statements {
        if let Classified::Dml { kind, table } =
            sql::classify(&statement.sql, dialect).map_err(sql_status)?
        {
            if kind != DmlKind::Delete {
                limits::check_dml_params(
                    &table,
                    statement.params.as_ref(),
                    &statement.param_types,
                )?;
            }
            if catalog.is_none() {
                catalog = Some(state.catalog(&shared).await?);
            }
            if let Some(catalog) = &catalog {
                check_dml(catalog, &statement.sql, dialect)?;
                sends |= kind != DmlKind::Delete && catalog.is_queue(&table);
            }
        }
    }
    let admitted = admit(
        &shared,
        &state,
        &message.session,
        message.transaction.as_ref(),
    )
    .await?;
    let selected = selected_id(message.transaction.as_ref()).map(<[u8]>::to_vec);
    let session = message.session.clone();
    let mut response = shared
        .spanner()
        .execute_batch_dml(forward(&metadata, message))
        .await
        .map_err(displaced)
        .map(|r| r.map(displaced_in_batch));
    if let (Some(n), Ok(r)) = (expected_last, &mut response) {
        let batch = r.get_mut();
        let complete =
            batch.status.as_ref().is_none_or(|s| s.code == 0) && batch.result_sets.len() == count;
        if complete
            && let Some(status) =
                rows_mismatch(n, batch.result_sets.last().and_then(|r| r.stats.as_ref()))
        {
            // A failing first statement that began the transaction leaves the client without
            // its id: roll it back.
            if count == 1
                && let Some(transaction) = batch
                    .result_sets
                    .first()
                    .and_then(|r| began(r.metadata.as_ref()))
                    .map(<[u8]>::to_vec)
            {
                roll_back(
                    &shared,
                    Displaced {
                        session: session.clone(),
                        transaction,
                    },
                )
                .await;
            }
            batch.result_sets.pop();
            batch.status = Some(googleapis_tonic_google_spanner_v1::google::rpc::Status {
                code: status.code() as i32,
                message: status.message().to_owned(),
                details: Vec::new(),
            });
        }
    }
    match &response {
        Ok(response) => {
            let batch = response.get_ref();
            let failed = batch
                .status
                .as_ref()
                .filter(|s| s.code != tonic::Code::Ok as i32)
                .map(|s| Status::new(tonic::Code::from_i32(s.code), s.message.clone()));
            let id = batch
                .result_sets
                .first()
                .and_then(|r| began(r.metadata.as_ref()));
            if sends && let Some(id) = id.or(selected.as_deref()) {
                state.sending(id);
            }
            admitted.done(id, failed.as_ref());
        }
        Err(status) => admitted.done(None, Some(status)),
    }
    response
}
