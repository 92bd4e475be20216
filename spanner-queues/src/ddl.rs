//! Applying DDL and reading a queue's columns back from `INFORMATION_SCHEMA`: what the
//! receiver and the worker check at start-up, what [`SchemaSetup`](crate::SchemaSetup) applies
//! and checks, and what [`DynQueue`](crate::DynQueue) reads.

use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient};
use google_cloud_spanner::statement::Statement;

use tracing::Instrument as _;

use crate::codec::Codec;
use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::message::QueueMessage;
use crate::query::query_rows;
use crate::schema::SystemColumn;
use crate::types::{PayloadType, SortOrder, SpannerType};

/// Applies DDL statements to `database` (`projects/P/instances/I/databases/D`) and waits until
/// the schema change has finished.
///
/// # Errors
/// [`Error::Spanner`] with Spanner's error if any statement is refused.
pub(crate) async fn apply_ddl<I, S>(
    admin: &DatabaseAdmin,
    database: &str,
    statements: I,
) -> Result<()>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let statements: Vec<String> = statements.into_iter().map(Into::into).collect();
    if statements.is_empty() {
        return Ok(());
    }
    let span = tracing::info_span!(
        "spanner_queues.apply_ddl",
        database,
        statements = statements.len()
    );
    admin
        .update_database_ddl()
        .set_database(database)
        .set_statements(statements)
        .poller()
        .until_done()
        .instrument(span)
        .await
        .map(|_| ())
        .map_err(Error::from)
}

/// One column of a queue as the database describes it (`INFORMATION_SCHEMA`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueColumn {
    name: String,
    spanner_type: String,
    key_position: Option<i64>,
    descending: bool,
}

impl QueueColumn {
    /// The column's name, as the database spells it.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The column's type in GoogleSQL's spelling (`INT64`, `STRING(MAX)`, `JSON`), whatever the
    /// database's dialect: PostgreSQL's names (`bigint`, `jsonb`) are translated. Parse it with
    /// [`SpannerType`](crate::schema::SpannerType)'s `FromStr` for a typed view.
    pub(crate) fn spanner_type(&self) -> &str {
        &self.spanner_type
    }

    /// The column's place in the primary key, from 1, or `None` for a column outside it.
    pub(crate) fn key_position(&self) -> Option<i64> {
        self.key_position
    }

    /// Whether the column is a key column sorted in descending order.
    pub(crate) fn is_descending(&self) -> bool {
        self.descending
    }
}

/// The columns of `queue` in table order, its system columns (`Payload`, `DeliverTime`)
/// included; empty when the database has no queue or table of that name.
pub(crate) async fn read_columns(
    db: &DatabaseClient,
    dialect: Dialect,
    queue: &QueueName,
) -> Result<Vec<QueueColumn>> {
    let rows = read_table_columns(db, dialect, &[queue.as_str()]).await?;
    Ok(rows.into_iter().map(|(_, column)| column).collect())
}

/// The columns of every table in `tables`, read in one query of `INFORMATION_SCHEMA`: each with
/// its table's name as the database spells it, ordered by table and then as in the table. A
/// table the database does not have has no rows. `dialect` must be the database's: a query
/// written for the other dialect fails (its parameters are `@name` in GoogleSQL and `$n` in
/// PostgreSQL), which [`dialect_mismatch`] then explains.
pub(crate) async fn read_table_columns(
    db: &DatabaseClient,
    dialect: Dialect,
    tables: &[&str],
) -> Result<Vec<(String, QueueColumn)>> {
    // One text for both dialects: PostgreSQL folds the unquoted names to the lower-case ones
    // it has, keeps user objects in the `public` schema, and has the tables under the names
    // they were created with, unquoted (so folded to lower case too).
    let (schema, fold): (&str, fn(&str) -> String) = match dialect {
        Dialect::GoogleSql => ("", str::to_owned),
        Dialect::PostgreSql => ("public", str::to_ascii_lowercase),
    };
    let mut params = crate::queue::Params::new(dialect);
    let mut placeholders = Vec::with_capacity(tables.len());
    let mut values = Vec::with_capacity(tables.len());
    for (i, table) in tables.iter().enumerate() {
        let (name, placeholder) = params.next(&format!("t{i}"));
        placeholders.push(placeholder);
        values.push((name, fold(table)));
    }
    let mut builder = Statement::builder(format!(
        "SELECT c.TABLE_NAME, c.COLUMN_NAME, c.SPANNER_TYPE, k.ORDINAL_POSITION, \
                k.COLUMN_ORDERING \
         FROM INFORMATION_SCHEMA.COLUMNS AS c \
         LEFT JOIN INFORMATION_SCHEMA.INDEX_COLUMNS AS k \
           ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME \
          AND k.COLUMN_NAME = c.COLUMN_NAME AND k.INDEX_NAME = 'PRIMARY_KEY' \
         WHERE c.TABLE_SCHEMA = '{schema}' AND c.TABLE_NAME IN ({}) \
         ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION",
        placeholders.join(", ")
    ));
    for (name, value) in values {
        builder = builder.add_param(name, value);
    }
    let statement = builder.build();
    query_rows(db, statement, |row| {
        let ordering: Option<String> = row.get(4)?;
        let spanner_type: String = row.get(2)?;
        let column = QueueColumn {
            name: row.get(1)?,
            spanner_type: match dialect {
                Dialect::GoogleSql => spanner_type,
                Dialect::PostgreSql => crate::types::google_sql_type(&spanner_type),
            },
            key_position: row.get(3)?,
            descending: ordering.is_some_and(|o| o.eq_ignore_ascii_case("DESC")),
        };
        Ok((row.get::<String>(0)?, column))
    })
    .await
}

/// Same type family (lengths may differ: a longer STRING column holds every value).
fn same_family(a: &SpannerType, b: &SpannerType) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

pub(crate) fn differences<M: QueueMessage>(
    columns: &[QueueColumn],
    dialect: Dialect,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut keys: Vec<&QueueColumn> = columns
        .iter()
        .filter(|c| c.key_position.is_some())
        .collect();
    keys.sort_by_key(|c| c.key_position);
    if keys.len() != M::KEY_COLUMNS.len() {
        out.push(format!(
            "the primary key has {} columns ({}), the message type {} ({})",
            keys.len(),
            keys.iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            M::KEY_COLUMNS.len(),
            M::KEY_COLUMNS
                .iter()
                .map(|c| c.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for (i, (expected, actual)) in M::KEY_COLUMNS.iter().zip(&keys).enumerate() {
        if !expected.name().as_str().eq_ignore_ascii_case(&actual.name) {
            out.push(format!(
                "key column {} is `{}` in the database, `{}` in the message type",
                i + 1,
                actual.name,
                expected.name()
            ));
            continue;
        }
        let want = expected.spanner_type();
        match actual.spanner_type.parse::<SpannerType>() {
            Ok(have) if same_family(&have, &want) => {}
            _ => out.push(format!(
                "key column `{}` is {} in the database, the message type needs {want}",
                actual.name, actual.spanner_type
            )),
        }
        let want_desc = expected.order() == SortOrder::Desc;
        if want_desc != actual.descending {
            out.push(format!(
                "key column `{}` is {} in the database, {} in the message type",
                actual.name,
                if actual.descending { "DESC" } else { "ASC" },
                if want_desc { "DESC" } else { "ASC" }
            ));
        }
    }
    let payload_name = SystemColumn::Payload.name(dialect);
    match columns
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(payload_name))
    {
        None => out.push("the queue has no Payload column".to_owned()),
        Some(payload) => {
            let readable = match payload.spanner_type.parse::<SpannerType>() {
                Ok(SpannerType::Json | SpannerType::String(_) | SpannerType::Bytes(_)) => {
                    match M::PAYLOAD.codec() {
                        Codec::Json => true,
                        Codec::Bytes | Codec::Proto => payload
                            .spanner_type
                            .to_ascii_uppercase()
                            .starts_with("BYTES"),
                        Codec::String => payload
                            .spanner_type
                            .to_ascii_uppercase()
                            .starts_with("STRING"),
                    }
                }
                Ok(SpannerType::Proto(_)) => M::PAYLOAD.codec() == Codec::Proto,
                _ => false,
            };
            if !readable {
                out.push(format!(
                    "the Payload column is {}, which the {} codec of the message type cannot read",
                    payload.spanner_type,
                    M::PAYLOAD.codec().as_str()
                ));
            }
            // Sends bind the payload as the type the message type declares for its column; the
            // column must accept that type, or every send fails.
            let spec = M::PAYLOAD;
            let written = spec.column();
            let writable = match (payload.spanner_type.parse::<SpannerType>(), written) {
                (Ok(SpannerType::Json), PayloadType::Json) => true,
                (Ok(SpannerType::String(_)), PayloadType::String(_)) => true,
                // [I] Spanner accepts BYTES values for PROTO columns, as for BYTES ones.
                (
                    Ok(SpannerType::Bytes(_) | SpannerType::Proto(_)),
                    PayloadType::Bytes(_) | PayloadType::Proto(_),
                ) => true,
                _ => false,
            };
            if !writable {
                out.push(format!(
                    "the Payload column is {}, but the message type sends {} values: declare \
                     the column's type on the type (payload_type) or alter the queue",
                    payload.spanner_type,
                    payload_type_name(written)
                ));
            }
        }
    }
    let deliver = SystemColumn::DeliverTime.name(dialect);
    if !columns.iter().any(|c| c.name.eq_ignore_ascii_case(deliver)) {
        out.push(
            "the queue has no DeliverTime column: is it a table rather than a queue?".to_owned(),
        );
    }
    out
}

fn payload_type_name(column: &PayloadType) -> &'static str {
    match column {
        PayloadType::Json => "JSON",
        PayloadType::String(_) => "STRING",
        PayloadType::Bytes(_) => "BYTES",
        PayloadType::Proto(_) => "PROTO",
    }
}

pub(crate) async fn check_columns(
    db: &DatabaseClient,
    dialect: Dialect,
    queue: &QueueName,
    differences: fn(&[QueueColumn], Dialect) -> Vec<String>,
) -> Result<()> {
    // One read in the common case: a query in the handle's dialect that succeeds shows that
    // the database speaks it. Only a failed or empty read asks the database for its dialect,
    // to tell a handle of the wrong dialect (say so at start-up rather than at the first send)
    // from a missing queue or a transient error.
    let columns = match read_columns(db, dialect, queue).await {
        Ok(columns) => columns,
        Err(error) => return Err(dialect_mismatch(db, dialect).await.unwrap_or(error)),
    };
    if columns.is_empty()
        && let Some(mismatch) = dialect_mismatch(db, dialect).await
    {
        return Err(mismatch);
    }
    judge_queue(queue, &columns, dialect, differences)
}

/// The verdict on a queue's columns: [`Error::QueueNotFound`] when there are none,
/// [`Error::SchemaDrift`] listing what `differences` finds.
pub(crate) fn judge_queue(
    queue: &QueueName,
    columns: &[QueueColumn],
    dialect: Dialect,
    differences: fn(&[QueueColumn], Dialect) -> Vec<String>,
) -> Result<()> {
    if columns.is_empty() {
        return Err(Error::QueueNotFound {
            queue: queue.clone(),
        });
    }
    let differences = differences(columns, dialect);
    if differences.is_empty() {
        Ok(())
    } else {
        Err(Error::SchemaDrift {
            queue: queue.clone(),
            differences,
        })
    }
}

/// [`Error::Precondition`] when the database's dialect is not `dialect` (a handle that writes
/// SQL the database rejects); `None` when it is, or when the dialect cannot be read.
pub(crate) async fn dialect_mismatch(db: &DatabaseClient, dialect: Dialect) -> Option<Error> {
    let actual = crate::database::detect_dialect(db).await.ok()?;
    (actual != dialect).then(|| Error::Precondition {
        reason: format!(
            "the database is a {actual:?}-dialect database, but this handle writes \
             {dialect:?}"
        ),
    })
}
