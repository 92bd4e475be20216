//! What a statement becomes. Pure: no I/O.

use std::sync::Arc;

use tonic::Status;

use super::rpc::sql_status;
use crate::ddl::Catalog;
use crate::lexer::Dialect;
use crate::sql::{self, Classified, DmlKind};

/// Rejects DML that Spanner does not allow on a queue.
pub(crate) fn check_dml(catalog: &Catalog, sql_text: &str, dialect: Dialect) -> Result<(), Status> {
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
pub(crate) enum Plan {
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
