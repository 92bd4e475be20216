//! The `google.spanner.admin.database.v1.DatabaseAdmin` methods the front rewrites: queue DDL
//! in, queue DDL out.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::proto::admin::{
    CreateDatabaseRequest, Database, DropDatabaseRequest, GetDatabaseDdlRequest,
    GetDatabaseDdlResponse, GetDatabaseRequest, UpdateDatabaseDdlRequest,
};
use super::proto::longrunning::{GetOperationRequest, Operation};
use super::rpc::forward;
use super::shared::Shared;
use super::state::{DbState, database_of};
use crate::ddl::{self, Catalog, DdlError, DdlErrorCode};
use spanner_queues_sql::Dialect;

pub(crate) fn ddl_status(error: DdlError) -> Status {
    let message = error.to_string();
    match error.code() {
        DdlErrorCode::InvalidArgument => Status::invalid_argument(message),
        DdlErrorCode::NotFound => Status::not_found(message),
        DdlErrorCode::AlreadyExists => Status::already_exists(message),
        DdlErrorCode::FailedPrecondition => Status::failed_precondition(message),
        DdlErrorCode::Unimplemented => Status::unimplemented(message),
        DdlErrorCode::Internal => Status::internal(message),
    }
}

fn translate(
    catalog: &Catalog,
    statements: &[String],
    dialect: Dialect,
) -> Result<Vec<String>, Status> {
    let translated = ddl::translate_batch(catalog, statements, dialect).map_err(ddl_status)?;
    Ok(translated
        .into_iter()
        .flat_map(|t| t.backend_statements)
        .collect())
}

pub(crate) async fn update_database_ddl(
    shared: Arc<Shared>,
    request: Request<UpdateDatabaseDdlRequest>,
) -> Result<Response<Operation>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    let state = shared.databases.get(database_of(&message.database)?);
    let dialect = state.dialect(&shared).await?;
    let catalog = state.catalog(&shared).await?;
    message.statements = translate(&catalog, &message.statements, dialect)?;
    tracing::debug!(database = %state.name, statements = message.statements.len(), "schema change");
    state.ddl_started();
    match shared
        .admin()
        .update_database_ddl(forward(&metadata, message))
        .await
    {
        Ok(response) => {
            watch_operation(Arc::clone(&shared), state, response.get_ref());
            Ok(response)
        }
        Err(status) => {
            state.ddl_finished();
            Err(status)
        }
    }
}

pub(crate) async fn create_database(
    shared: Arc<Shared>,
    request: Request<CreateDatabaseRequest>,
) -> Result<Response<Operation>, Status> {
    let metadata = request.metadata().clone();
    let mut message = request.into_inner();
    // google.spanner.admin.database.v1.DatabaseDialect: 2 = POSTGRESQL.
    let dialect = if message.database_dialect == 2 {
        Dialect::PostgreSql
    } else {
        Dialect::GoogleSql
    };
    if !message.extra_statements.is_empty() {
        let empty = Catalog::from_backend_ddl(&[]).map_err(ddl_status)?;
        message.extra_statements = translate(&empty, &message.extra_statements, dialect)?;
    }
    let name = database_name(&message.parent, &message.create_statement);
    let response = shared
        .admin()
        .create_database(forward(&metadata, message))
        .await?;
    if let Some(name) = name {
        // A database of that name may have existed before (dropped since): start afresh.
        shared.databases.remove(&name);
        let state = shared.databases.get(&name);
        state.set_dialect(dialect);
        state.ddl_started();
        watch_operation(Arc::clone(&shared), state, response.get_ref());
    }
    Ok(response)
}

/// `parent/databases/<id>` from `CREATE DATABASE <id>` (the id may be quoted).
fn database_name(parent: &str, create_statement: &str) -> Option<String> {
    let id = create_statement
        .split_whitespace()
        .nth(2)?
        .trim_matches(|c| c == '`' || c == '"');
    (!id.is_empty()).then(|| format!("{parent}/databases/{id}"))
}

pub(crate) async fn get_database_ddl(
    shared: Arc<Shared>,
    request: Request<GetDatabaseDdlRequest>,
) -> Result<Response<GetDatabaseDdlResponse>, Status> {
    let metadata = request.metadata().clone();
    let message = request.into_inner();
    let state = shared.databases.get(database_of(&message.database)?);
    let dialect = state.dialect(&shared).await?;
    let mut response = shared
        .admin()
        .get_database_ddl(forward(&metadata, message))
        .await?;
    let rendered =
        ddl::render_client_ddl_in(&response.get_ref().statements, dialect).map_err(ddl_status)?;
    response.get_mut().statements = rendered;
    Ok(response)
}

/// `GetDatabase`, with the database's dialect: the official emulator does not report
/// PostgreSQL-dialect databases as such, so clients that learn the dialect from the database's
/// metadata (Python's client, the SDK's admin helpers) would write the wrong SQL.
pub(crate) async fn get_database(
    shared: Arc<Shared>,
    request: Request<GetDatabaseRequest>,
) -> Result<Response<Database>, Status> {
    let metadata = request.metadata().clone();
    let message = request.into_inner();
    let state = shared.databases.get(database_of(&message.name)?);
    let mut response = shared
        .admin()
        .get_database(forward(&metadata, message))
        .await?;
    // google.spanner.admin.database.v1.DatabaseDialect: 1 = GOOGLE_STANDARD_SQL, 2 = POSTGRESQL.
    response.get_mut().database_dialect = match state.dialect(&shared).await? {
        Dialect::GoogleSql => 1,
        Dialect::PostgreSql => 2,
    };
    Ok(response)
}

pub(crate) async fn drop_database(
    shared: Arc<Shared>,
    request: Request<DropDatabaseRequest>,
) -> Result<Response<()>, Status> {
    let metadata = request.metadata().clone();
    let message = request.into_inner();
    let name = database_of(&message.database)?.to_owned();
    let response = shared
        .admin()
        .drop_database(forward(&metadata, message))
        .await?;
    shared.databases.remove(&name);
    Ok(response)
}

/// Waits (in the background) for a forwarded schema change to finish, then lets the catalog be
/// cached again and wakes receivers (a queue option such as `disable_delivery` may have changed).
fn watch_operation(shared: Arc<Shared>, state: Arc<DbState>, operation: &Operation) {
    if operation.done {
        state.ddl_finished();
        return;
    }
    let name = operation.name.clone();
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(10);
        for _ in 0..2000 {
            match shared
                .operations()
                .get_operation(GetOperationRequest { name: name.clone() })
                .await
            {
                Ok(op) if op.get_ref().done => break,
                Ok(_) => {}
                Err(_) => break,
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
        state.ddl_finished();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_name_from_create_statement() {
        assert_eq!(
            database_name("projects/p/instances/i", "CREATE DATABASE `db1`").as_deref(),
            Some("projects/p/instances/i/databases/db1")
        );
        assert_eq!(
            database_name("projects/p/instances/i", "CREATE DATABASE db2").as_deref(),
            Some("projects/p/instances/i/databases/db2")
        );
        assert_eq!(database_name("projects/p/instances/i", "CREATE"), None);
    }
}
