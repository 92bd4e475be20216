//! What the database says about its queues: their names and pause state (from its DDL), and
//! one queue's key columns and payload type (through the SDK's [`Database::queue_by_name`]).
//!
//! [`Database::queue_by_name`]: spanner_queues::Database::queue_by_name

use spanner_queues::{DynQueue, Error};

use crate::ddl::{QueueDdl, parse_create_queue};
use crate::error::CliError;
use crate::session::Session;

/// The queues in the DDL, with whether delivery is disabled.
pub(crate) async fn queues(session: &Session) -> Result<Vec<QueueDdl>, CliError> {
    Ok(session
        .ddl()
        .await?
        .iter()
        .filter_map(|s| parse_create_queue(s, session.dialect()))
        .collect())
}

/// The queue named `queue`: its key columns (primary-key order) and payload type.
pub(crate) async fn queue(session: &Session, queue: &str) -> Result<DynQueue, CliError> {
    match session.database().queue_by_name(queue).await {
        Ok(found) => Ok(found),
        Err(error) => Err(queue_error(
            session,
            queue,
            &format!("reading the columns of {queue}"),
            error,
        )
        .await),
    }
}

/// The error to print for `error`, which `doing` something with `queue` returned: a name that
/// is no queue of the database (missing, a table) says so and lists the queues there are.
pub(crate) async fn queue_error(
    session: &Session,
    queue: &str,
    doing: &str,
    error: Error,
) -> CliError {
    let Error::NotAQueue { reason, .. } = &error else {
        return CliError::from_error(doing, error);
    };
    let known = match queues(session).await {
        Ok(known) if known.is_empty() => "none".to_owned(),
        Ok(known) => known
            .into_iter()
            .map(|q| q.name)
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("cannot list them: {}", e.message),
    };
    CliError::not_found(format!(
        "queue {queue} not found in {}: {reason} (queues: {known})",
        session.path()
    ))
}
