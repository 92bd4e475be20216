//! The front's own reads of the backend (see [`FrontRead`]), and what the front asks the backend
//! about a database: its schema, its dialect, the front's sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::Status;

use super::admission::Permit;
use super::proto::admin::GetDatabaseDdlRequest;
use super::proto::spanner::transaction_options::read_only::TimestampBound;
use super::proto::spanner::transaction_options::{Mode, ReadOnly, ReadWrite};
use super::proto::spanner::transaction_selector::Selector;
use super::proto::spanner::{
    CreateSessionRequest, ExecuteSqlRequest, ReadRequest, ResultSet, RollbackRequest, Session,
    TransactionOptions, TransactionSelector, Type,
};
use super::shared::Shared;
use super::state::DbState;
use super::sync::lock;
use crate::ddl::Catalog;
use spanner_queues_sql::Dialect;

/// How long a locking read of the front waits for its turn before it settles for a strong read:
/// a few transactions' time under load, far less than the wait after which a client's begin
/// displaces an idle holder.
const LOCKING_PATIENCE: Duration = Duration::from_millis(250);

/// How the front reads the backend for itself.
///
/// The official emulator hands out timestamps from a clock that gains about a microsecond on
/// the wall clock with every request it serves (each request asks it twice within the same
/// microsecond, and it never gives the same value twice), and a strong read waits until the
/// wall clock reaches the timestamp it picked. Under steady load every strong read therefore
/// waits longer and longer (tens of milliseconds after a minute, seconds after an hour). A read
/// inside a read-write transaction reads the latest data under locks and never waits for the
/// clock, so the reads a receive stream makes over and over (candidates, acks, renewals) are
/// made that way, admitted one at a time with the clients' read-write transactions and rolled
/// back at once. Such a read waits its turn for a short while only, and never displaces a
/// transaction that is idle (a client doing its own work between two calls): past that, it is
/// made as a strong read after all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrontRead {
    /// A strong single-use read (for reads made once, outside the admission of transactions).
    Strong,
    /// A read in a read-write transaction of the front's own, admitted like the clients' and
    /// rolled back (a strong read when admission is off).
    Locking,
}

/// Runs a read of the front's own on the backend, with the front's own session.
pub(crate) async fn backend_read(
    shared: &Shared,
    state: &DbState,
    how: FrontRead,
    sql: String,
    params: prost_types::Struct,
    param_types: HashMap<String, Type>,
) -> Result<ResultSet, Status> {
    with_front_session(shared, state, how, |session, transaction| {
        let request = ExecuteSqlRequest {
            session,
            transaction: Some(transaction),
            sql: sql.clone(),
            params: Some(params.clone()),
            param_types: param_types.clone(),
            ..ExecuteSqlRequest::default()
        };
        let mut spanner = shared.spanner();
        async move { spanner.execute_sql(request).await }
    })
    .await
}

/// A read (`Read`) of the front's own on the backend (see [`FrontRead::Locking`]).
pub(crate) async fn backend_read_rows(
    shared: &Shared,
    state: &DbState,
    read: ReadRequest,
) -> Result<ResultSet, Status> {
    with_front_session(shared, state, FrontRead::Locking, |session, transaction| {
        let request = ReadRequest {
            session,
            transaction: Some(transaction),
            ..read.clone()
        };
        let mut spanner = shared.spanner();
        async move { spanner.read(request).await }
    })
    .await
}

/// The front's read-write session and the admission slot for a locking read, if the slot came
/// within [`LOCKING_PATIENCE`] (never taken from an idle holder); `None` when it did not.
pub(crate) async fn locking_turn(
    shared: &Shared,
    state: &DbState,
) -> Result<Option<(String, Permit)>, Status> {
    let session = state.rw_session(shared).await?;
    let admission = Arc::clone(&state.admission);
    Ok(
        tokio::time::timeout(LOCKING_PATIENCE, admission.acquire_patiently(&session))
            .await
            .ok()
            .map(|permit| (session, permit)),
    )
}

/// Runs `call` with one of the front's own backend sessions and a transaction selector for
/// `how`; a session the backend no longer knows is dropped and the call made once more with a
/// new one.
pub(crate) async fn with_front_session<F, Fut>(
    shared: &Shared,
    state: &DbState,
    how: FrontRead,
    mut call: F,
) -> Result<ResultSet, Status>
where
    F: FnMut(String, TransactionSelector) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<ResultSet>, Status>>,
{
    let mut locking = how == FrontRead::Locking && state.admission.enabled();
    for attempt in 0..2 {
        // Waits its turn for a while, never displacing an idle holder (a client's transaction
        // that is doing its own work): past that, a strong read, whatever it waits for.
        let permit = if locking {
            let turn = locking_turn(shared, state).await?;
            locking = turn.is_some();
            turn
        } else {
            None
        };
        let (session, result) = if let Some((session, permit)) = permit {
            // Held from before the begin until after the rollback: the official emulator
            // aborts one of two read-write transactions that meet.
            let result = call(session.clone(), begin_read_write()).await;
            if let Some(transaction) = result
                .as_ref()
                .ok()
                .and_then(|r| r.get_ref().metadata.as_ref())
                .and_then(|m| m.transaction.as_ref())
            {
                let rollback = RollbackRequest {
                    session: session.clone(),
                    transaction_id: transaction.id.clone(),
                };
                if let Err(status) = shared.spanner().rollback(rollback).await {
                    tracing::debug!(%status, "rolling back a read of the front failed");
                }
            }
            drop(permit);
            (session, result)
        } else {
            let session = state.session(shared).await?;
            let result = call(session.clone(), strong_single_use()).await;
            (session, result)
        };
        match result {
            Ok(response) => return Ok(response.into_inner()),
            Err(status)
                if attempt == 0
                    && status.code() == tonic::Code::NotFound
                    && status.message().contains("Session") =>
            {
                state.drop_session(&session);
            }
            Err(status) => return Err(status),
        }
    }
    Err(Status::internal("unreachable: session retry loop"))
}

fn strong_single_use() -> TransactionSelector {
    TransactionSelector {
        selector: Some(Selector::SingleUse(TransactionOptions {
            mode: Some(Mode::ReadOnly(ReadOnly {
                return_read_timestamp: false,
                timestamp_bound: Some(TimestampBound::Strong(true)),
            })),
            ..TransactionOptions::default()
        })),
    }
}

pub(crate) fn begin_read_write() -> TransactionSelector {
    TransactionSelector {
        selector: Some(Selector::Begin(TransactionOptions {
            mode: Some(Mode::ReadWrite(ReadWrite::default())),
            ..TransactionOptions::default()
        })),
    }
}

/// What the front asks the backend about a database.
impl DbState {
    /// The queue catalog, from cache or from the backend's current schema.
    pub(crate) async fn catalog(&self, shared: &Shared) -> Result<Arc<Catalog>, Status> {
        {
            let slot = lock(&self.catalog);
            if let (Some(catalog), 0) = (&slot.catalog, slot.pending_ddl) {
                return Ok(Arc::clone(catalog));
            }
        }
        let dialect = self.dialect(shared).await?;
        let response = shared
            .admin()
            .get_database_ddl(GetDatabaseDdlRequest {
                database: self.name.clone(),
            })
            .await?
            .into_inner();
        let catalog = Arc::new(
            Catalog::from_backend_ddl_in(&response.statements, dialect).map_err(|e| {
                Status::internal(format!("cannot read the queues of {}: {e}", self.name))
            })?,
        );
        let mut slot = lock(&self.catalog);
        if slot.pending_ddl == 0 {
            slot.catalog = Some(Arc::clone(&catalog));
        }
        Ok(catalog)
    }

    /// The database dialect: known from the CreateDatabase request, or asked once from the
    /// backend's `INFORMATION_SCHEMA.DATABASE_OPTIONS` (a query both dialects accept). The
    /// backend's `GetDatabase` cannot tell: the official emulator does not report a
    /// PostgreSQL-dialect database as one.
    pub(crate) async fn dialect(&self, shared: &Shared) -> Result<Dialect, Status> {
        if let Some(dialect) = lock(&self.catalog).dialect {
            return Ok(dialect);
        }
        let sql = "SELECT option_value FROM information_schema.database_options \
                   WHERE option_name = 'database_dialect'";
        let rows = backend_read(
            shared,
            self,
            FrontRead::Strong,
            sql.to_owned(),
            prost_types::Struct::default(),
            std::collections::HashMap::new(),
        )
        .await?
        .rows;
        let value = rows
            .first()
            .and_then(|row| row.values.first())
            .and_then(|value| match &value.kind {
                Some(prost_types::value::Kind::StringValue(text)) => Some(text.as_str()),
                _ => None,
            });
        let dialect = if value == Some("POSTGRESQL") {
            Dialect::PostgreSql
        } else {
            Dialect::GoogleSql
        };
        lock(&self.catalog).dialect = Some(dialect);
        Ok(dialect)
    }

    /// A backend session for the front's own single-use reads.
    pub(crate) async fn session(&self, shared: &Shared) -> Result<String, Status> {
        self.session_in(&self.session, shared).await
    }

    /// A backend session for the front's own read-write reads.
    pub(crate) async fn rw_session(&self, shared: &Shared) -> Result<String, Status> {
        self.session_in(&self.rw_session, shared).await
    }

    async fn session_in(
        &self,
        slot: &Mutex<Option<String>>,
        shared: &Shared,
    ) -> Result<String, Status> {
        if let Some(session) = lock(slot).clone() {
            return Ok(session);
        }
        let session = shared
            .spanner()
            .create_session(CreateSessionRequest {
                database: self.name.clone(),
                session: Some(Session {
                    creator_role: String::new(),
                    ..Session::default()
                }),
            })
            .await?
            .into_inner()
            .name;
        *lock(slot) = Some(session.clone());
        Ok(session)
    }
}
