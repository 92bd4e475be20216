//! `Commit`, `BeginTransaction` and `Rollback`: the calls that begin and end transactions and
//! apply mutations (`Send` and `Ack` rewritten, see `mutations`).

use std::sync::Arc;
use std::time::SystemTime;

use tonic::{Request, Response, Status};

use super::admission::{Admitted, is_read_write};
use super::calls::{acquire, db};
use super::limits;
use super::mutations;
use super::proto::spanner::{
    BeginTransactionRequest, CommitRequest, CommitResponse, RollbackRequest, Transaction,
    commit_request,
};
use super::rpc::{displaced, forward};
use super::shared::Shared;
use super::sync::lock;
use crate::ddl::Catalog;

pub(crate) async fn commit(
    shared: Arc<Shared>,
    request: Request<CommitRequest>,
) -> Result<Response<CommitResponse>, Status> {
    let metadata = request.metadata().clone();
    commit_request(&shared, &metadata, request.into_inner()).await
}

/// A commit: queue mutations rewritten, the read-write slot taken for a single-use one,
/// receivers' floors lowered and open streams woken when it sends. Also each mutation group of
/// a `BatchWrite` (see `batch_write`).
pub(crate) async fn commit_request(
    shared: &Shared,
    metadata: &tonic::metadata::MetadataMap,
    mut message: CommitRequest,
) -> Result<Response<CommitResponse>, Status> {
    let state = db(shared, &message.session)?;
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
        let catalog = state.catalog(shared).await?;
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
            Admitted::Begin(acquire(shared, &state, &message.session).await)
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
    let result = shared.spanner().commit(forward(metadata, message)).await;
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
