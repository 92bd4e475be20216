//! What the database says about its queues: their names and pause state (from its DDL), and
//! each queue's key columns and payload type (from `INFORMATION_SCHEMA`, through the SDK).

use spanner_queues::Dialect;
use spanner_queues::admin::queue_columns;
use spanner_queues::ident::QueueName;
use spanner_queues::schema::SystemColumn;

use crate::ddl::{QueueDdl, parse_create_queue};
use crate::error::CliError;
use crate::session::Session;

/// A queue's columns.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Columns {
    /// (name, GoogleSQL type) of each key column, in primary-key order.
    pub(crate) keys: Vec<(String, String)>,
    /// The payload column's GoogleSQL type.
    pub(crate) payload: String,
}

/// Why a table's columns are not a queue's.
#[derive(Debug, PartialEq, Eq)]
enum NotAQueue {
    /// It has no `DeliverTime` column: a table.
    Table,
    /// It has no `Payload` column.
    NoPayload,
}

/// The queues in the DDL, with whether delivery is disabled.
pub(crate) async fn queues(session: &Session) -> Result<Vec<QueueDdl>, CliError> {
    Ok(session
        .ddl()
        .await?
        .iter()
        .filter_map(|s| parse_create_queue(s, session.dialect()))
        .collect())
}

/// The key columns (primary-key order) and payload type of `queue`.
pub(crate) async fn columns(session: &Session, queue: &QueueName) -> Result<Columns, CliError> {
    let read = queue_columns(session.database(), queue)
        .await
        .map_err(|e| CliError::from_error(&format!("reading the columns of {queue}"), e))?;
    if read.is_empty() {
        let known: Vec<String> = queues(session).await?.into_iter().map(|q| q.name).collect();
        return Err(CliError::not_found(format!(
            "queue {queue} not found in {} (queues: {})",
            session.path(),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    }
    let read = read.iter().map(|c| {
        (
            c.name().to_owned(),
            c.spanner_type().to_owned(),
            c.key_position(),
        )
    });
    layout(read, session.dialect()).map_err(|problem| match problem {
        NotAQueue::Table => CliError::not_found(format!(
            "{queue} is a table, not a queue, in {}",
            session.path()
        )),
        NotAQueue::NoPayload => CliError::failed(format!("queue {queue} has no Payload column")),
    })
}

/// The key columns and payload type among a queue's columns: (name, GoogleSQL type, place in
/// the primary key).
fn layout(
    columns: impl IntoIterator<Item = (String, String, Option<i64>)>,
    dialect: Dialect,
) -> Result<Columns, NotAQueue> {
    let columns: Vec<(String, String, Option<i64>)> = columns.into_iter().collect();
    let named = |name: &str| {
        columns
            .iter()
            .find(|(column, _, _)| column.eq_ignore_ascii_case(name))
    };
    // [I] A queue shows its system column DeliverTime in INFORMATION_SCHEMA.COLUMNS (as on the
    // emulator); Spanner does not document how queues appear there.
    let (deliver_time, payload) = (
        SystemColumn::DeliverTime.name(dialect),
        SystemColumn::Payload.name(dialect),
    );
    if named(deliver_time).is_none() {
        return Err(NotAQueue::Table);
    }
    let payload = named(payload).ok_or(NotAQueue::NoPayload)?.1.clone();
    let mut keys: Vec<(i64, String, String)> = columns
        .into_iter()
        .filter_map(|(name, ty, position)| position.map(|p| (p, name, ty)))
        .collect();
    keys.sort();
    Ok(Columns {
        keys: keys.into_iter().map(|(_, name, ty)| (name, ty)).collect(),
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, ty: &str, key: Option<i64>) -> (String, String, Option<i64>) {
        (name.to_owned(), ty.to_owned(), key)
    }

    #[test]
    fn keys_come_in_primary_key_order_whatever_the_table_order() {
        let read = [
            column("Region", "STRING(16)", Some(2)),
            column("Payload", "JSON", None),
            column("Id", "INT64", Some(1)),
            column("DeliverTime", "TIMESTAMP", None),
        ];
        assert_eq!(
            layout(read, Dialect::GoogleSql),
            Ok(Columns {
                keys: vec![
                    ("Id".to_owned(), "INT64".to_owned()),
                    ("Region".to_owned(), "STRING(16)".to_owned()),
                ],
                payload: "JSON".to_owned(),
            })
        );
    }

    #[test]
    fn postgresql_system_columns_are_lower_case() {
        let read = [
            column("id", "INT64", Some(1)),
            column("payload", "BYTES(MAX)", None),
            column("deliver_time", "TIMESTAMP", None),
        ];
        let columns = layout(read.clone(), Dialect::PostgreSql).expect("a queue");
        assert_eq!(columns.payload, "BYTES(MAX)");
        // The GoogleSQL names are not PostgreSQL's.
        assert_eq!(layout(read, Dialect::GoogleSql), Err(NotAQueue::Table));
    }

    #[test]
    fn a_table_is_not_a_queue() {
        let table = [
            column("Id", "INT64", Some(1)),
            column("Payload", "JSON", None),
        ];
        assert_eq!(layout(table, Dialect::GoogleSql), Err(NotAQueue::Table));
        let no_payload = [
            column("Id", "INT64", Some(1)),
            column("DeliverTime", "TIMESTAMP", None),
        ];
        assert_eq!(
            layout(no_payload, Dialect::GoogleSql),
            Err(NotAQueue::NoPayload)
        );
    }
}
