//! `Read`, `StreamingRead`, `ExecuteSql`, `ExecuteStreamingSql` and `ExecuteBatchDml`: reads and
//! statements, with the queue functions (see `receive`) and DML held until commit (see `held`).

use std::sync::Arc;

use futures::StreamExt as _;
use tonic::{Request, Response, Status};

use super::admission::{Admitted, Displaced, Permit, selected_id};
use super::calls::{
    admit, began, db, fail_statement, opened, plan, roll_back, roll_back_begun, rows_mismatch,
};
use super::held::{
    BatchHold, after_held_deletes, deferred_delete, deferred_insert, guard_deferred,
    guard_statements, held_batch_insert,
};
use super::intervals;
use super::limits;
use super::plan::{Plan, check_dml};
use super::proto::spanner::{
    ExecuteBatchDmlRequest, ExecuteBatchDmlResponse, ExecuteSqlRequest, PartialResultSet,
    ReadRequest, ResultSet, RollbackRequest, TransactionSelector,
};
use super::reads::{FrontRead, begin_read_write, locking_turn, with_front_session};
use super::receive;
use super::rpc::{BoxStream, displaced, displaced_in_batch, forward, sql_status};
use super::shared::Shared;
use super::state::DbState;
use crate::sql::{self, Classified, DmlKind};

pub(crate) async fn read(
    shared: Arc<Shared>,
    request: Request<ReadRequest>,
) -> Result<Response<ResultSet>, Status> {
    let metadata = request.metadata().clone();
    let message = request.into_inner();
    let state = db(&shared, &message.session)?;
    if reads_as_locking(&state, message.transaction.as_ref()) {
        let mut result = with_front_session(
            &shared,
            &state,
            FrontRead::Locking,
            |session, transaction| {
                let read = ReadRequest {
                    session,
                    transaction: Some(transaction),
                    ..message.clone()
                };
                let mut spanner = shared.spanner();
                let request = forward(&metadata, read);
                async move { spanner.read(request).await }
            },
        )
        .await?;
        if let Some(m) = result.metadata.as_mut() {
            m.transaction = None;
        }
        return Ok(Response::new(result));
    }
    guard_deferred(
        &shared,
        &state,
        &message.session,
        message.transaction.as_ref(),
        |t| message.table.eq_ignore_ascii_case(t),
    )
    .await?;
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
    let turn = if reads_as_locking(&state, message.transaction.as_ref()) {
        locking_turn(&shared, &state).await?
    } else {
        None
    };
    // Held until the read is rolled back (see `LockingRead`).
    if let Some((session, permit)) = turn {
        let read = ReadRequest {
            session: session.clone(),
            transaction: Some(begin_read_write()),
            ..message.clone()
        };
        let mut locking = LockingRead {
            shared: Arc::clone(&shared),
            session: session.clone(),
            transaction: None,
            permit: Some(permit),
        };
        match shared
            .spanner()
            .streaming_read(forward(&metadata, read))
            .await
        {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                // The first part names the transaction begun: take it before anything can
                // drop the stream, so that the read is always rolled back.
                let first = stream.message().await;
                let first = match first {
                    Ok(Some(mut partial)) => {
                        if let Some(transaction) =
                            partial.metadata.as_mut().and_then(|m| m.transaction.take())
                        {
                            locking.began(transaction.id.to_vec());
                        }
                        Some(Ok(partial))
                    }
                    Ok(None) => None,
                    Err(status) => Some(Err(status)),
                };
                let rest = stream.map(move |item| {
                    // Keeps the transaction until the stream ends or is dropped.
                    let _kept = &locking;
                    item
                });
                return Ok(Response::new(Box::pin(
                    futures::stream::iter(first).chain(rest),
                )));
            }
            Err(status) => {
                drop(locking);
                if status.code() == tonic::Code::NotFound && status.message().contains("Session") {
                    // Forwarded as it came, below.
                    state.drop_session(&session);
                } else {
                    return Err(status);
                }
            }
        }
    }
    guard_deferred(
        &shared,
        &state,
        &message.session,
        message.transaction.as_ref(),
        |t| message.table.eq_ignore_ascii_case(t),
    )
    .await?;
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

/// Whether a client's read is a strong single-use read the front runs as a locking read of its
/// own instead (see `receive::FrontRead`): a strong read in the official emulator waits for its
/// clock, which runs further ahead of the wall clock with every request it serves. Reads that
/// ask for their read timestamp, and stale reads, are forwarded as they are. SQL queries are
/// forwarded as well: some (change stream queries) run in read-only transactions only.
fn reads_as_locking(state: &DbState, selector: Option<&TransactionSelector>) -> bool {
    use super::proto::spanner::transaction_options::Mode;
    use super::proto::spanner::transaction_options::read_only::TimestampBound;
    use super::proto::spanner::transaction_selector::Selector;
    if !state.admission.enabled() {
        return false;
    }
    let Some(Selector::SingleUse(options)) = selector.and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    match &options.mode {
        Some(Mode::ReadOnly(read_only)) => {
            !read_only.return_read_timestamp
                && matches!(
                    read_only.timestamp_bound,
                    None | Some(TimestampBound::Strong(true))
                )
        }
        _ => false,
    }
}

/// The read-write transaction a client's strong read runs in (see [`reads_as_locking`]): it
/// holds the admission slot until it is rolled back, which happens when the stream ends or is
/// dropped. The rollback runs in a task of its own, so a client that goes away mid-read leaves
/// no locks behind.
struct LockingRead {
    shared: Arc<Shared>,
    session: String,
    transaction: Option<Vec<u8>>,
    permit: Option<Permit>,
}

impl LockingRead {
    /// The backend began `transaction` for the read.
    fn began(&mut self, transaction: Vec<u8>) {
        self.transaction = Some(transaction);
    }
}

impl Drop for LockingRead {
    fn drop(&mut self) {
        let permit = self.permit.take();
        let Some(transaction) = self.transaction.take() else {
            drop(permit);
            return;
        };
        let shared = Arc::clone(&self.shared);
        let request = RollbackRequest {
            session: std::mem::take(&mut self.session),
            transaction_id: transaction.into(),
        };
        let rollback = async move {
            if let Err(status) = shared.spanner().rollback(request).await {
                tracing::debug!(%status, "rolling back a strong read failed");
            }
            drop(permit);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(rollback);
            }
            Err(_) => drop(rollback),
        }
    }
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

pub(crate) async fn execute_sql(
    shared: Arc<Shared>,
    request: Request<ExecuteSqlRequest>,
) -> Result<Response<ResultSet>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    let state = db(&shared, &message.session)?;
    intervals::prepare(
        &shared,
        &state,
        &mut message.sql,
        message.params.as_ref(),
        &mut message.param_types,
    )
    .await?;
    if let Some(result) =
        deferred_delete(&shared, shared.as_ref(), &state, &metadata, &message).await
    {
        return result.map(Response::new);
    }
    if let Some(result) =
        deferred_insert(&shared, shared.as_ref(), &state, &metadata, &message).await
    {
        return result.map(Response::new);
    }
    if let Some(result) =
        after_held_deletes(&shared, shared.as_ref(), &state, &metadata, &message).await
    {
        return result.map(Response::new);
    }
    guard_statements(
        &shared,
        &state,
        &message.session,
        message.transaction.as_ref(),
        &[&message.sql],
    )
    .await?;
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
    intervals::prepare(
        &shared,
        &state,
        &mut message.sql,
        message.params.as_ref(),
        &mut message.param_types,
    )
    .await?;
    let held = match deferred_delete(&shared, shared.as_ref(), &state, &metadata, &message).await {
        Some(result) => Some(result),
        None => deferred_insert(&shared, shared.as_ref(), &state, &metadata, &message).await,
    };
    if let Some(result) = held {
        return Ok(one_part(result?));
    }
    if let Some(result) =
        after_held_deletes(&shared, shared.as_ref(), &state, &metadata, &message).await
    {
        return Ok(one_part(result?));
    }
    guard_statements(
        &shared,
        &state,
        &message.session,
        message.transaction.as_ref(),
        &[&message.sql],
    )
    .await?;
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

pub(crate) async fn execute_batch_dml(
    shared: Arc<Shared>,
    request: Request<ExecuteBatchDmlRequest>,
) -> Result<Response<ExecuteBatchDmlResponse>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    let state = db(&shared, &message.session)?;
    for statement in &mut message.statements {
        intervals::prepare(
            &shared,
            &state,
            &mut statement.sql,
            statement.params.as_ref(),
            &mut statement.param_types,
        )
        .await?;
    }
    let texts: Vec<&str> = message.statements.iter().map(|s| s.sql.as_str()).collect();
    guard_statements(
        &shared,
        &state,
        &message.session,
        message.transaction.as_ref(),
        &texts,
    )
    .await?;
    // Taken keys: the backend answers the batch, in the transaction the front's read began.
    let mut began_by_front = None;
    match held_batch_insert(&shared, shared.as_ref(), &state, &metadata, &message).await {
        Some(Ok(BatchHold::Answered(response))) => return Ok(Response::new(*response)),
        Some(Ok(BatchHold::Forward(Some(transaction)))) => {
            message.transaction = Some(TransactionSelector {
                selector: Some(super::proto::spanner::transaction_selector::Selector::Id(
                    transaction.id.clone(),
                )),
            });
            began_by_front = Some(transaction);
        }
        Some(Err(status)) => return Err(status),
        Some(Ok(BatchHold::Forward(None))) | None => {}
    }
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
    if let Some(transaction) = began_by_front {
        match &mut response {
            Ok(batch) if !batch.get_ref().result_sets.is_empty() => {
                batch.get_mut().result_sets[0]
                    .metadata
                    .get_or_insert_default()
                    .transaction = Some(transaction);
            }
            // The first statement failed: the client never learns of the transaction.
            _ => roll_back_begun(&shared, &state, &session, &transaction.id).await,
        }
    }
    response
}

/// A statement's answer, which has no rows, as the single part of a streamed result.
fn one_part(result: ResultSet) -> Response<BoxStream<PartialResultSet>> {
    let partial = PartialResultSet {
        metadata: result.metadata,
        stats: result.stats,
        last: true,
        ..PartialResultSet::default()
    };
    Response::new(Box::pin(futures::stream::iter([Ok(partial)])))
}
