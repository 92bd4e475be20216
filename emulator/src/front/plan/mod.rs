//! What a statement becomes. Pure: no I/O.

use std::sync::Arc;

use tonic::Status;

use super::deferred;
use super::limits;
use super::proto::spanner::mutation::{Operation, Write};
use super::proto::spanner::{ExecuteBatchDmlRequest, ExecuteSqlRequest, Mutation};
use super::proto::{Kind, ListValue, string_value};
use super::rpc::sql_status;
use crate::ddl::Catalog;
use crate::sql::{self, Classified, DmlKind};
use spanner_queues_sql::Dialect;

pub(crate) use self::keyed::{InsertValue, KeyedDelete, KeyedInsert, keyed_delete, keyed_insert};

mod keyed;

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

/// Reads a SQL request: what kind of statement it is, with the checks that need no schema (the
/// size of a DML statement's parameters).
pub(crate) fn classify(
    message: &ExecuteSqlRequest,
    dialect: Dialect,
) -> Result<Classified, Status> {
    let classified = sql::classify(&message.sql, dialect).map_err(sql_status)?;
    if let Classified::Dml { kind, table } = &classified
        && *kind != DmlKind::Delete
    {
        limits::check_dml_params(table, message.params.as_ref(), &message.param_types)?;
    }
    Ok(classified)
}

/// Whether [`statement`] needs the catalog for `classified` (a queue function or DML).
pub(crate) fn needs_catalog(classified: &Classified) -> bool {
    !matches!(classified, Classified::Other)
}

/// What a classified SQL request becomes. `catalog` is the database's, required when
/// [`needs_catalog`] says so.
pub(crate) fn statement(
    classified: Classified,
    message: &ExecuteSqlRequest,
    dialect: Dialect,
    catalog: Option<Arc<Catalog>>,
) -> Result<Plan, Status> {
    let sql_text = &message.sql;
    let assert_rows = match &classified {
        Classified::Dml { .. } => sql::strip_assert_rows_modified(sql_text, dialect),
        _ => None,
    };
    let catalog =
        || catalog.ok_or_else(|| Status::internal("a statement was planned without the catalog"));
    match classified {
        Classified::Other => Ok(Plan::Forward {
            sends: false,
            assert_rows: None,
        }),
        Classified::Receive(query) => Ok(Plan::Receive(query, catalog()?)),
        Classified::RenewLease(query) => Ok(Plan::Renew(query, catalog()?)),
        Classified::Dml { kind, table } => {
            let catalog = catalog()?;
            check_dml(&catalog, sql_text, dialect)?;
            Ok(Plan::Forward {
                sends: kind != DmlKind::Delete && catalog.is_queue(&table),
                assert_rows,
            })
        }
    }
}

/// A keyed delete of a queue row (an ack by DML) that the front can hold until commit (see
/// `deferred`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HeldDelete {
    /// The queue, as the catalog names it.
    pub(crate) queue: String,
    /// The queue's first key column (what a keyed read of the row asks for).
    pub(crate) key_column: String,
    /// The key, in key column order.
    pub(crate) key: ListValue,
    /// The statement's `ASSERT_ROWS_MODIFIED` count, if any.
    pub(crate) assert_rows: Option<i64>,
}

/// `delete` as a [`HeldDelete`]: it names a queue's whole key, each column compared with a
/// parameter that names the key exactly as the SQL comparison would; `None` otherwise.
pub(crate) fn held_delete(
    catalog: &Catalog,
    delete: &KeyedDelete,
    message: &ExecuteSqlRequest,
) -> Option<HeldDelete> {
    let queue = catalog.queue(&delete.table)?;
    // A queue with an empty primary key has no key column to name.
    let key_column = queue.key_columns.first()?.column.name.clone();
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
    Some(HeldDelete {
        queue: queue.name.clone(),
        key_column,
        key,
        assert_rows: delete.assert_rows,
    })
}

/// A batch of single-row keyed inserts into one table (the form `Queue::send_many` sends, in
/// GoogleSQL) as the one multi-row insert with the same effect, its parameters renamed apart
/// (`@b<i>_<name>`); `None` when the batch is not of that form.
pub(crate) fn batch_insert(message: &ExecuteBatchDmlRequest) -> Option<ExecuteSqlRequest> {
    fn quoted(name: &str) -> String {
        format!("`{name}`")
    }
    let count = message.statements.len();
    if count < 2 {
        return None;
    }
    let mut target: Option<(String, Vec<String>)> = None;
    let mut tuples = Vec::with_capacity(count);
    let mut params = prost_types::Struct::default();
    let mut param_types = std::collections::HashMap::new();
    for (i, statement) in message.statements.iter().enumerate() {
        let insert = keyed_insert(&statement.sql, Dialect::GoogleSql)?;
        let [row] = <[Vec<InsertValue>; 1]>::try_from(insert.rows).ok()?;
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
                InsertValue::Param(name) => {
                    let renamed = format!("b{i}_{name}");
                    let bound = statement.params.as_ref()?.fields.get(&name)?.clone();
                    params.fields.insert(renamed.clone(), bound);
                    if let Some(ty) = statement.param_types.get(&name) {
                        param_types.insert(renamed.clone(), ty.clone());
                    }
                    values.push(format!("@{renamed}"));
                }
                InsertValue::CurrentTimestamp => values.push("CURRENT_TIMESTAMP()".to_owned()),
                InsertValue::Text(_) => return None,
            }
        }
        tuples.push(format!("({})", values.join(", ")));
    }
    let (table, columns) = target?;
    let columns: Vec<String> = columns.iter().map(|c| quoted(c)).collect();
    Some(ExecuteSqlRequest {
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
    })
}

/// Longest key (in bytes of its values' text) held back: Cloud Spanner's key limit (8 KiB)
/// is checked by the backend at the statement, and a held insert would fail at commit.
const MAX_KEY_TEXT: usize = 4096;

/// A keyed insert (a send by DML, or an insert into an ordinary table) that the front can hold
/// until commit (see `deferred`): its rows as `Insert` mutations.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HeldInsert {
    /// The queue or table, as the catalog names it.
    pub(crate) table: String,
    /// Whether it is a queue (the insert sends messages).
    pub(crate) queue: bool,
    /// The key columns, in key order.
    pub(crate) key_columns: Vec<String>,
    /// Each row's key and `Insert` mutation, in statement order.
    pub(crate) rows: Vec<(ListValue, Mutation)>,
    /// Whether a row names its delivery time (any time, past ones included).
    pub(crate) explicit_deliver: bool,
}

/// `insert` as a [`HeldInsert`]: into a queue, or into a table whose rows a mutation inserts
/// with the same outcome; every column known and named once, the payload (or every required
/// column) and the whole key given, values that a mutation writes the same way, no key twice;
/// `None` otherwise.
pub(crate) fn held_insert(
    catalog: &Catalog,
    insert: &KeyedInsert,
    message: &ExecuteSqlRequest,
) -> Option<HeldInsert> {
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
    if key_names.is_empty() {
        // `PRIMARY KEY ()`: the table holds one row at most, so the backend's statement has
        // nothing to scan, and the executor's read of taken keys needs a key column.
        return None;
    }
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
    let mut explicit_deliver = false;
    let mut rows: Vec<(ListValue, Mutation)> = Vec::new();
    for row in &insert.rows {
        let mut columns = Vec::new();
        let mut values = Vec::new();
        for ((column, ty), value) in insert.columns.iter().zip(&types).zip(row) {
            match value {
                InsertValue::CurrentTimestamp => {
                    if !deliver.is_some_and(|d| column.eq_ignore_ascii_case(d)) {
                        return None;
                    }
                    // Left out: the column's default, CURRENT_TIMESTAMP() at the commit.
                }
                InsertValue::Text(text) => {
                    if !ty.to_ascii_uppercase().starts_with("STRING") {
                        return None;
                    }
                    columns.push(column.clone());
                    values.push(string_value(text.clone()));
                }
                InsertValue::Param(name) => {
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
                Some(Kind::StringValue(s)) => s.len(),
                _ => 8,
            })
            .sum();
        if key_text > MAX_KEY_TEXT || rows.iter().any(|(k, _)| *k == key) {
            return None;
        }
        rows.push((
            key,
            Mutation {
                operation: Some(Operation::Insert(Write {
                    table: target_name.clone(),
                    columns,
                    values: vec![ListValue { values }],
                })),
            },
        ));
    }
    Some(HeldInsert {
        table: target_name,
        queue: queue.is_some(),
        key_columns: key_names.iter().map(|k| (*k).to_owned()).collect(),
        rows,
        explicit_deliver,
    })
}

#[cfg(test)]
pub(crate) mod tests;
