//! What the database says about its queues: their names and pause state, and each queue's key
//! columns and payload type.

use google_cloud_spanner::statement::Statement;
use spanner_queues::Dialect;
use spanner_queues::ident::QueueName;
use spanner_queues::schema::google_sql_type;

use crate::error::CliError;
use crate::session::Session;

/// A queue's columns.
#[derive(Debug)]
pub(crate) struct Columns {
    /// (name, GoogleSQL type) of each key column, in primary-key order.
    pub(crate) keys: Vec<(String, String)>,
    /// The payload column's GoogleSQL type.
    pub(crate) payload: String,
}

/// The queues in the DDL, with whether delivery is disabled.
pub(crate) async fn queue_names(session: &Session) -> Result<Vec<(String, bool)>, CliError> {
    Ok(session
        .ddl()
        .await?
        .iter()
        .filter_map(|s| parse_queue(s))
        .collect())
}

/// The key columns (primary-key order) and payload type of `queue`.
pub(crate) async fn columns(session: &Session, queue: &QueueName) -> Result<Columns, CliError> {
    let statement = match session.dialect() {
        Dialect::GoogleSql => Statement::builder(
            "SELECT c.COLUMN_NAME, c.SPANNER_TYPE, k.ORDINAL_POSITION \
             FROM INFORMATION_SCHEMA.COLUMNS AS c \
             LEFT JOIN INFORMATION_SCHEMA.INDEX_COLUMNS AS k \
               ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME \
              AND k.COLUMN_NAME = c.COLUMN_NAME AND k.INDEX_NAME = 'PRIMARY_KEY' \
             WHERE c.TABLE_SCHEMA = '' AND c.TABLE_NAME = @queue \
             ORDER BY c.ORDINAL_POSITION",
        )
        .add_param("queue", queue.as_str().to_owned()),
        // [I] Queues are listed under their lower-case names in schema `public`, with
        // PostgreSQL type names (as on the emulator).
        _ => Statement::builder(
            "SELECT c.column_name, c.spanner_type, k.ordinal_position \
             FROM information_schema.columns AS c \
             LEFT JOIN information_schema.index_columns AS k \
               ON k.table_schema = c.table_schema AND k.table_name = c.table_name \
              AND k.column_name = c.column_name AND k.index_name = 'PRIMARY_KEY' \
             WHERE c.table_schema = 'public' AND c.table_name = $1 \
             ORDER BY c.ordinal_position",
        )
        .add_param("p1", queue.as_str().to_ascii_lowercase()),
    };
    let rows: Vec<(String, String, Option<i64>)> = session
        .query(
            statement.build(),
            &format!("reading the columns of {queue}"),
        )
        .await?;
    let rows: Vec<(String, String, Option<i64>)> = match session.dialect() {
        Dialect::GoogleSql => rows,
        _ => rows
            .into_iter()
            .map(|(name, ty, position)| (name, google_sql_type(&ty), position))
            .collect(),
    };
    if rows.is_empty() {
        let known: Vec<String> = queue_names(session)
            .await?
            .into_iter()
            .map(|(n, _)| n)
            .collect();
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
    // [I] A queue shows its system column DeliverTime in INFORMATION_SCHEMA.COLUMNS (as on
    // the emulator); Spanner does not document how queues appear there.
    let deliver_time = session.deliver_time();
    if !rows
        .iter()
        .any(|(name, _, _)| name.eq_ignore_ascii_case(deliver_time))
    {
        return Err(CliError::not_found(format!(
            "{queue} is a table, not a queue, in {}",
            session.path()
        )));
    }
    let mut keys: Vec<(i64, String, String)> = rows
        .iter()
        .filter_map(|(name, ty, position)| position.map(|p| (p, name.clone(), ty.clone())))
        .collect();
    keys.sort();
    let payload = rows
        .iter()
        .find(|(name, _, _)| name.eq_ignore_ascii_case(session.payload_column()))
        .map(|(_, ty, _)| ty.clone())
        .ok_or_else(|| CliError::failed(format!("queue {queue} has no Payload column")))?;
    Ok(Columns {
        keys: keys.into_iter().map(|(_, n, t)| (n, t)).collect(),
        payload,
    })
}

/// `CREATE QUEUE [IF NOT EXISTS] name …` → (name, whether `disable_delivery = true`).
fn parse_queue(statement: &str) -> Option<(String, bool)> {
    let words: Vec<&str> = statement.split_whitespace().collect();
    if words.len() < 3
        || !words[0].eq_ignore_ascii_case("CREATE")
        || !words[1].eq_ignore_ascii_case("QUEUE")
    {
        return None;
    }
    let mut rest = &words[2..];
    if rest.len() >= 3
        && rest[0].eq_ignore_ascii_case("IF")
        && rest[1].eq_ignore_ascii_case("NOT")
        && rest[2].eq_ignore_ascii_case("EXISTS")
    {
        rest = &rest[3..];
    }
    let name = rest
        .first()?
        .split('(')
        .next()?
        .trim_matches('`')
        .to_owned();
    if name.is_empty() {
        return None;
    }
    // [I] The DDL Spanner returns spells options as `disable_delivery = true`; spacing and case
    // are ignored here.
    let compact: String = statement
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    Some((name, compact.contains("disable_delivery=true")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_statements_are_recognised_with_their_pause_state() {
        assert_eq!(
            parse_queue(
                "CREATE QUEUE Tickets (\n  Id INT64 NOT NULL,\n  Payload JSON NOT NULL,\n) PRIMARY KEY(Id)"
            ),
            Some(("Tickets".to_owned(), false))
        );
        assert_eq!(
            parse_queue(
                "create queue if not exists `Jobs`(Id INT64 NOT NULL, Payload JSON NOT NULL) \
                 PRIMARY KEY (Id), OPTIONS (disable_delivery = true)"
            ),
            Some(("Jobs".to_owned(), true))
        );
        assert_eq!(
            parse_queue(
                "CREATE QUEUE J (Id INT64, Payload JSON) PRIMARY KEY (Id), OPTIONS (disable_delivery=false)"
            ),
            Some(("J".to_owned(), false))
        );
        assert_eq!(
            parse_queue("CREATE TABLE Tickets (Id INT64) PRIMARY KEY (Id)"),
            None
        );
    }
}
