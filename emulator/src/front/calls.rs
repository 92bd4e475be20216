//! Steps the rewritten calls share: finding the database, taking the admission slot (see
//! `admission`), binding an inline begin to it, rolling back, and reading a statement against the
//! database's schema.

use std::sync::Arc;

use tonic::{Response, Status};

use super::admission::{Admitted, Displaced, Permit};
use super::plan::{self, Plan};
use super::proto::spanner::{ExecuteSqlRequest, RollbackRequest};
use super::rpc::displaced;
use super::shared::Shared;
use super::state::{DbState, database_of};
use super::sync::lock;

pub(crate) fn db(shared: &Shared, session: &str) -> Result<Arc<DbState>, Status> {
    Ok(shared.databases.get(database_of(session)?))
}

/// Awaits a streaming call forwarded under `admitted`. When the backend refuses it, the
/// admission ends with that (displaced-aware) status, as a finished transaction would.
pub(crate) async fn opened<T>(
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

/// Waits for the database's read-write slot (see `admission`); rolls back the transaction it
/// took the slot from, if any.
pub(crate) async fn acquire(shared: &Shared, state: &DbState, session: &str) -> Permit {
    let mut permit = state.admission.acquire(session).await;
    if let Some(old) = permit.take_displaced() {
        roll_back(shared, old).await;
    }
    permit
}

/// [`Admitted::selector`], rolling back the transaction a begin took the slot from.
pub(crate) async fn admit(
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
pub(crate) async fn roll_back(shared: &Shared, old: Displaced) {
    let request = RollbackRequest {
        session: old.session,
        transaction_id: old.transaction.into(),
    };
    if let Err(status) = shared.spanner().rollback(request).await {
        tracing::debug!(%status, "rolling back an idle transaction failed (it may be gone)");
    }
}

/// The id of the transaction a result set's metadata reports (an inline begin).
pub(crate) fn began(metadata: Option<&super::proto::spanner::ResultSetMetadata>) -> Option<&[u8]> {
    metadata
        .and_then(|m| m.transaction.as_ref())
        .map(|t| &t.id[..])
}

/// `OUT_OF_RANGE` when a statement with `ASSERT_ROWS_MODIFIED n` modified another number of
/// rows (the official emulator's message for GoogleSQL).
pub(crate) fn rows_mismatch(
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
pub(crate) async fn fail_statement(
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

/// Rolls back a transaction the front began for a client that will never learn of it, and
/// frees its slot.
pub(crate) async fn roll_back_begun(shared: &Shared, state: &DbState, session: &str, id: &[u8]) {
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

/// What a SQL request is (see [`plan::statement`]), judged against the database's dialect and,
/// for statements that concern a table or a queue, its catalog.
pub(crate) async fn plan(
    shared: &Shared,
    state: &DbState,
    message: &ExecuteSqlRequest,
) -> Result<Plan, Status> {
    // Cheap pre-check: most statements never mention a queue function or a DML verb.
    let dialect = state.dialect(shared).await?;
    let classified = plan::classify(message, dialect)?;
    if !plan::needs_catalog(&classified) {
        return plan::statement(classified, message, dialect, None);
    }
    let catalog = state.catalog(shared).await?;
    plan::statement(classified, message, dialect, Some(catalog))
}
