//! The `google.spanner.v1.Spanner` methods the front rewrites.

use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt as _;
use tonic::{Request, Response, Status};

use super::admission::{
    Admitted, Displaced, Permit, begins_read_write, is_read_write, selected_id,
};
use super::deferred::{self, Earlier};
use super::intervals;
use super::limits;
use super::mutations;
use super::proto::ListValue;
use super::proto::spanner::{
    BatchWriteRequest, BatchWriteResponse, BeginTransactionRequest, CommitRequest, CommitResponse,
    ExecuteBatchDmlRequest, ExecuteBatchDmlResponse, ExecuteSqlRequest, KeySet, PartialResultSet,
    ReadRequest, ResultSet, ResultSetMetadata, ResultSetStats, RollbackRequest, StructType,
    Transaction, TransactionSelector, commit_request,
};
use super::reads::{FrontRead, begin_read_write, locking_turn, with_front_session};
use super::receive;
use super::rpc::{BoxStream, displaced, displaced_in_batch, forward, sql_status};
use super::shared::Shared;
use super::state::{DbState, database_of};
use super::sync::lock;
use crate::ddl::Catalog;
use crate::lexer::Dialect;
use crate::sql::{self, Classified, DmlKind};

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
    // Keyed deletes held back from the transaction's DML (see `deferred`): they ran before
    // the commit's own mutations.
    let held = match &message.transaction {
        Some(commit_request::Transaction::TransactionId(id)) => lock(&state.deferred).take(id),
        _ => Vec::new(),
    };
    let mut strict_acks = Vec::new();
    let mut sends = false;
    // Where the messages this commit may add are delivered from (see `floor`): from now on
    // for sends (a past delivery time becomes now), at any time for a direct insert that
    // names the delivery time.
    let mut sends_from = Some(SystemTime::now());
    // Any mutation may touch a queue table (a Send, or a direct Insert/Update/Delete).
    if !message.mutations.is_empty() {
        let catalog = state.catalog(&shared).await?;
        if inserts_deliver_time(&catalog, &message.mutations) {
            sends_from = None;
        }
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
    if !held.is_empty() {
        message.mutations.splice(0..0, held);
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
        _ => None,
    };
    if let Some(first) = sent_by_dml {
        sends_from = sends_from.map(|t| t.min(first));
    }
    let sends = sent_by_dml.is_some() || sends;
    if sends {
        lock(&state.floors).lower(sends_from);
    }
    let result = shared.spanner().commit(forward(&metadata, message)).await;
    if sends {
        // Again: a receiver's read that began before the commit became visible must not
        // raise a floor past its messages.
        lock(&state.floors).lower(sends_from);
    }
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

/// Whether a client mutation inserts into a queue table naming its delivery time (any time,
/// past ones included, unlike a `Send`).
fn inserts_deliver_time(catalog: &Catalog, mutations: &[super::proto::spanner::Mutation]) -> bool {
    use super::proto::spanner::mutation::Operation;
    mutations.iter().any(|m| match &m.operation {
        Some(Operation::Insert(w) | Operation::InsertOrUpdate(w) | Operation::Replace(w)) => {
            catalog.queue(&w.table).is_some_and(|q| {
                w.columns
                    .iter()
                    .any(|c| c.eq_ignore_ascii_case(q.deliver_time_column()))
            })
        }
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
    lock(&state.deferred).forget(&message.transaction_id);
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

pub(crate) async fn batch_write(
    shared: Arc<Shared>,
    request: Request<BatchWriteRequest>,
) -> Result<Response<BoxStream<BatchWriteResponse>>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    let state = db(&shared, &message.session)?;
    let catalog = state.catalog(&shared).await?;
    let sends_from = (!message
        .mutation_groups
        .iter()
        .any(|g| inserts_deliver_time(&catalog, &g.mutations)))
    .then(SystemTime::now);
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
    if sends {
        lock(&state.floors).lower(sends_from);
    }
    let stream = shared
        .spanner()
        .batch_write(forward(&metadata, message))
        .await?
        .into_inner();
    let stream = stream.map(move |item| {
        if item.is_ok() {
            state.notify_settled();
            if sends {
                lock(&state.floors).lower(sends_from);
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
    intervals::prepare(&shared, &state, &mut message.sql, &mut message.param_types).await?;
    if let Some(result) = deferred_delete(&shared, &state, &metadata, &message).await {
        return result.map(Response::new);
    }
    if let Some(result) = deferred_insert(&shared, &state, &metadata, &message).await {
        return result.map(Response::new);
    }
    if let Some(result) = after_held_deletes(&shared, &state, &metadata, &message).await {
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
    intervals::prepare(&shared, &state, &mut message.sql, &mut message.param_types).await?;
    let held = match deferred_delete(&shared, &state, &metadata, &message).await {
        Some(result) => Some(result),
        None => deferred_insert(&shared, &state, &metadata, &message).await,
    };
    if let Some(result) = held {
        return Ok(one_part(result?));
    }
    if let Some(result) = after_held_deletes(&shared, &state, &metadata, &message).await {
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
    for statement in &mut message.statements {
        intervals::prepare(
            &shared,
            &state,
            &mut statement.sql,
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
    match held_batch_insert(&shared, &state, &metadata, &message).await {
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

/// Answers a keyed delete of a queue row (an ack by DML) without running it, when it is one
/// the front can hold back until commit (see `deferred`); `None` otherwise (the statement is
/// forwarded as usual).
async fn deferred_delete(
    shared: &Shared,
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
    let queue = catalog.queue(&delete.table)?;
    if delete.columns.len() != queue.key_columns.len() {
        return None;
    }
    let params = message.params.as_ref()?;
    let mut key = ListValue::default();
    for column in &queue.key_columns {
        let (_, param) = delete
            .columns
            .iter()
            .find(|(c, _)| c.eq_ignore_ascii_case(&column.column.name))?;
        let value = params.fields.get(param)?;
        let usable = match message.param_types.get(param) {
            Some(ty) => {
                deferred::usable_value(value) && deferred::same_type(ty, &column.column.data_type)
            }
            None => deferred::untyped_key(value, &column.column.data_type),
        };
        if !usable {
            return None;
        }
        key.values.push(value.clone());
    }
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
            held.earlier(id, &queue.name, &key, message.seqno)
        })
    };
    if earlier == Earlier::Inserted {
        // Runs as DML after the held-back insert (see `after_held_deletes`).
        return None;
    }
    Some(
        hold_delete(
            shared,
            state,
            metadata,
            message,
            &queue.name,
            &queue.key_columns[0].column.name,
            key,
            delete.assert_rows,
            earlier,
        )
        .await,
    )
}

/// Serves a keyed delete held back until commit: a keyed read in the client's transaction
/// tells whether the row exists (unless an earlier delete of the transaction decided it).
#[allow(clippy::too_many_arguments)]
async fn hold_delete(
    shared: &Shared,
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteSqlRequest,
    table: &str,
    key_column: &str,
    key: ListValue,
    assert_rows: Option<i64>,
    earlier: Earlier,
) -> Result<ResultSet, Status> {
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
        match shared
            .spanner()
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
        lock(&state.deferred).hold(id, table, key, message.seqno, statement);
        tracing::debug!(database = %state.name, queue = %table, "keyed delete held until commit");
    }
    admitted.done(began_id.as_deref(), None);
    Ok(dml_result(transaction, found))
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
async fn guard_statements(
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
async fn guard_deferred(
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
async fn after_held_deletes(
    shared: &Shared,
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
    let response = shared
        .spanner()
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
async fn deferred_insert(
    shared: &Shared,
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteSqlRequest,
) -> Option<Result<ResultSet, Status>> {
    Some(
        deferred_insert_as(shared, state, metadata, message, false)
            .await?
            .and_then(|insertion| match insertion {
                Insertion::Answer(result) => Ok(*result),
                Insertion::Taken(_) => Err(Status::internal("a taken key was not answered")),
            }),
    )
}

/// Rolls back a transaction the front began for a client that will never learn of it, and
/// frees its slot.
async fn roll_back_begun(shared: &Shared, state: &DbState, session: &str, id: &[u8]) {
    state.ended(id);
    lock(&state.deferred).forget(id);
    if let Ok(call) = state.admission.call(id) {
        roll_back(
            shared,
            Displaced {
                session: session.to_owned(),
                transaction: id.to_vec(),
            },
        )
        .await;
        call.end_transaction();
    }
}

/// What [`held_batch_insert`] did with a batch.
enum BatchHold {
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
async fn held_batch_insert(
    shared: &Shared,
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteBatchDmlRequest,
) -> Option<Result<BatchHold, Status>> {
    fn quoted(name: &str) -> String {
        format!("`{name}`")
    }
    let count = message.statements.len();
    if count < 2 || state.dialect(shared).await.ok()? != Dialect::GoogleSql {
        return None;
    }
    let mut target: Option<(String, Vec<String>)> = None;
    let mut tuples = Vec::with_capacity(count);
    let mut params = prost_types::Struct::default();
    let mut param_types = std::collections::HashMap::new();
    for (i, statement) in message.statements.iter().enumerate() {
        let insert = sql::keyed_insert(&statement.sql, Dialect::GoogleSql)?;
        let [row] = <[Vec<sql::InsertValue>; 1]>::try_from(insert.rows).ok()?;
        match &target {
            None => target = Some((insert.table.clone(), insert.columns.clone())),
            Some((table, columns)) => {
                let same = table.eq_ignore_ascii_case(&insert.table)
                    && columns.len() == insert.columns.len()
                    && columns
                        .iter()
                        .zip(&insert.columns)
                        .all(|(a, b)| a.eq_ignore_ascii_case(b));
                if !same {
                    return None;
                }
            }
        }
        let mut values = Vec::with_capacity(row.len());
        for value in row {
            match value {
                sql::InsertValue::Param(name) => {
                    let renamed = format!("b{i}_{name}");
                    let bound = statement.params.as_ref()?.fields.get(&name)?.clone();
                    params.fields.insert(renamed.clone(), bound);
                    if let Some(ty) = statement.param_types.get(&name) {
                        param_types.insert(renamed.clone(), ty.clone());
                    }
                    values.push(format!("@{renamed}"));
                }
                sql::InsertValue::CurrentTimestamp => values.push("CURRENT_TIMESTAMP()".to_owned()),
                sql::InsertValue::Text(_) => return None,
            }
        }
        tuples.push(format!("({})", values.join(", ")));
    }
    let (table, columns) = target?;
    let columns: Vec<String> = columns.iter().map(|c| quoted(c)).collect();
    let combined = ExecuteSqlRequest {
        session: message.session.clone(),
        transaction: message.transaction.clone(),
        sql: format!(
            "INSERT INTO {} ({}) VALUES {}",
            quoted(&table),
            columns.join(", "),
            tuples.join(", ")
        ),
        params: Some(params),
        param_types,
        seqno: message.seqno,
        ..ExecuteSqlRequest::default()
    };
    Some(
        match deferred_insert_as(shared, state, metadata, &combined, true).await? {
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
    state: &DbState,
    metadata: &tonic::metadata::MetadataMap,
    message: &ExecuteSqlRequest,
    report_taken: bool,
) -> Option<Result<Insertion, Status>> {
    use super::proto::spanner::mutation::{Operation, Write};
    use super::proto::spanner::transaction_selector::Selector;
    /// Longest key (in bytes of its values' text) held back: Cloud Spanner's key limit (8 KiB)
    /// is checked by the backend at the statement, and a held insert would fail at commit.
    const MAX_KEY_TEXT: usize = 4096;
    if !state.admission.enabled() {
        return None;
    }
    let dialect = state.dialect(shared).await.ok()?;
    let insert = sql::keyed_insert(&message.sql, dialect)?;
    let catalog = state.catalog(shared).await.ok()?;
    // A send to a queue, or an insert into a table whose rows a mutation inserts with the same
    // outcome (the official emulator runs both DML statements as a scan of the table).
    let queue = catalog.queue(&insert.table);
    let table = match queue {
        Some(_) => None,
        None => Some(catalog.insertable(&insert.table)?),
    };
    let target_name = queue
        .map_or_else(
            || table.map(|t| t.name).unwrap_or_default(),
            |q| q.name.as_str(),
        )
        .to_owned();
    let deliver = queue.map(|q| q.deliver_time_column());
    let key_names: Vec<&str> = match (queue, table) {
        (Some(q), _) => q
            .key_columns
            .iter()
            .map(|k| k.column.name.as_str())
            .collect(),
        (None, Some(t)) => t.key.iter().map(|(name, _)| name.as_str()).collect(),
        (None, None) => return None,
    };
    let mut types = Vec::with_capacity(insert.columns.len());
    for (i, column) in insert.columns.iter().enumerate() {
        if insert.columns[..i]
            .iter()
            .any(|c| c.eq_ignore_ascii_case(column))
        {
            return None;
        }
        let ty = match (queue, table) {
            (Some(queue), _) => {
                if let Some(key) = queue
                    .key_columns
                    .iter()
                    .find(|k| k.column.name.eq_ignore_ascii_case(column))
                {
                    key.column.data_type.clone()
                } else if queue.payload.column.name.eq_ignore_ascii_case(column) {
                    queue.payload.column.data_type.clone()
                } else if deliver.is_some_and(|d| column.eq_ignore_ascii_case(d)) {
                    "TIMESTAMP".to_owned()
                } else {
                    return None;
                }
            }
            (None, Some(table)) => table
                .columns
                .iter()
                .find(|c| c.name.eq_ignore_ascii_case(column))?
                .data_type
                .clone(),
            (None, None) => return None,
        };
        types.push(ty);
    }
    let named = |name: &str| insert.columns.iter().any(|c| c.eq_ignore_ascii_case(name));
    let complete = match (queue, table) {
        (Some(queue), _) => named(&queue.payload.column.name),
        (None, Some(table)) => table
            .columns
            .iter()
            .filter(|c| c.required)
            .all(|c| named(&c.name)),
        (None, None) => false,
    };
    if !complete || !key_names.iter().all(|k| named(k)) {
        return None;
    }
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
            || selected.is_some_and(|id| held.holds_table(id, &target_name))
        {
            return None;
        }
    }
    let mut explicit_deliver = false;
    let mut rows: Vec<(ListValue, super::proto::spanner::Mutation)> = Vec::new();
    for row in &insert.rows {
        let mut columns = Vec::new();
        let mut values = Vec::new();
        for ((column, ty), value) in insert.columns.iter().zip(&types).zip(row) {
            match value {
                sql::InsertValue::CurrentTimestamp => {
                    if !deliver.is_some_and(|d| column.eq_ignore_ascii_case(d)) {
                        return None;
                    }
                    // Left out: the column's default, CURRENT_TIMESTAMP() at the commit.
                }
                sql::InsertValue::Text(text) => {
                    if !ty.to_ascii_uppercase().starts_with("STRING") {
                        return None;
                    }
                    columns.push(column.clone());
                    values.push(super::proto::string_value(text.clone()));
                }
                sql::InsertValue::Param(name) => {
                    let value = message.params.as_ref()?.fields.get(name)?;
                    let usable = match message.param_types.get(name) {
                        Some(t) => deferred::usable_value(value) && deferred::same_type(t, ty),
                        None => deferred::untyped_key(value, ty),
                    };
                    if !usable {
                        return None;
                    }
                    explicit_deliver |= deliver.is_some_and(|d| column.eq_ignore_ascii_case(d));
                    columns.push(column.clone());
                    values.push(value.clone());
                }
            }
        }
        let mut key = ListValue::default();
        for k in &key_names {
            let i = columns.iter().position(|c| c.eq_ignore_ascii_case(k))?;
            key.values.push(values[i].clone());
        }
        let key_text: usize = key
            .values
            .iter()
            .map(|v| match &v.kind {
                Some(super::proto::Kind::StringValue(s)) => s.len(),
                _ => 8,
            })
            .sum();
        if key_text > MAX_KEY_TEXT || rows.iter().any(|(k, _)| *k == key) {
            return None;
        }
        rows.push((
            key,
            super::proto::spanner::Mutation {
                operation: Some(Operation::Insert(Write {
                    table: target_name.clone(),
                    columns,
                    values: vec![ListValue { values }],
                })),
            },
        ));
    }
    // The checks the statement would get (payload limits, disabled sends).
    match plan(shared, state, message).await {
        Ok(Plan::Forward {
            sends,
            assert_rows: None,
        }) if sends == queue.is_some() => {}
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
    let (found, transaction) = match shared
        .spanner()
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
        let response = shared
            .spanner()
            .execute_sql(forward(metadata, forwarded))
            .await
            .map_err(displaced);
        return Some(match response {
            Ok(response) => {
                let mut result = response.into_inner();
                if transaction.is_some() {
                    result.metadata.get_or_insert_default().transaction = transaction;
                }
                if queue.is_some() {
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
    if queue.is_none() {
        tracing::debug!(database = %state.name, table = %target_name, rows = count, "insert by DML held until commit");
    } else if explicit_deliver {
        // Any delivery time, past ones included.
        state.sending_from(&id, std::time::UNIX_EPOCH);
    } else {
        state.sending(&id);
    }
    if queue.is_some() {
        tracing::debug!(database = %state.name, queue = %target_name, rows = count, "send by DML held until commit");
    }
    admitted.done(began_id.as_deref(), None);
    Some(Ok(Insertion::Answer(Box::new(dml_result(
        transaction,
        count,
    )))))
}
