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
use crate::lexer::Dialect;
use crate::sql::{self, Classified, DmlKind, KeyedDelete, KeyedInsert};

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
        key_column: queue.key_columns[0].column.name.clone(),
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
        let insert = sql::keyed_insert(&statement.sql, Dialect::GoogleSql)?;
        let [row] = <[Vec<sql::InsertValue>; 1]>::try_from(insert.rows).ok()?;
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
                sql::InsertValue::Param(name) => {
                    let renamed = format!("b{i}_{name}");
                    let bound = statement.params.as_ref()?.fields.get(&name)?.clone();
                    params.fields.insert(renamed.clone(), bound);
                    if let Some(ty) = statement.param_types.get(&name) {
                        param_types.insert(renamed.clone(), ty.clone());
                    }
                    values.push(format!("@{renamed}"));
                }
                sql::InsertValue::CurrentTimestamp => values.push("CURRENT_TIMESTAMP()".to_owned()),
                sql::InsertValue::Text(_) => return None,
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
                sql::InsertValue::CurrentTimestamp => {
                    if !deliver.is_some_and(|d| column.eq_ignore_ascii_case(d)) {
                        return None;
                    }
                    // Left out: the column's default, CURRENT_TIMESTAMP() at the commit.
                }
                sql::InsertValue::Text(text) => {
                    if !ty.to_ascii_uppercase().starts_with("STRING") {
                        return None;
                    }
                    columns.push(column.clone());
                    values.push(string_value(text.clone()));
                }
                sql::InsertValue::Param(name) => {
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
pub(crate) mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::front::proto::spanner::execute_batch_dml_request::Statement;
    use crate::front::proto::spanner::{Type, TypeCode};
    use crate::front::proto::{Value, null_value};

    /// A database with queue `Jobs` (key `Id STRING(36)`), a send-disabled queue `Closed`, an
    /// ordinary table `Notes` (`Id INT64`, a required `Body`, an optional `Tag`) and a table with a
    /// generated column, which a mutation cannot insert the same way.
    pub(crate) fn catalog() -> Arc<Catalog> {
        let client = [
            "CREATE QUEUE Jobs (Id STRING(36) NOT NULL, Payload STRING(MAX) NOT NULL) \
             PRIMARY KEY (Id)",
            "CREATE QUEUE Closed (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) \
             PRIMARY KEY (Id), OPTIONS (disable_send = true)",
            "CREATE TABLE Notes (Id INT64 NOT NULL, Body STRING(MAX) NOT NULL, Tag STRING(10)) \
             PRIMARY KEY (Id)",
            "CREATE TABLE Sums (Id INT64 NOT NULL, A INT64, B INT64 AS (A * 2) STORED) \
             PRIMARY KEY (Id)",
        ]
        .map(str::to_owned);
        let translated =
            crate::ddl::translate_batch(&Catalog::default(), &client, Dialect::GoogleSql)
                .expect("the schema translates");
        let backend: Vec<String> = translated
            .into_iter()
            .flat_map(|t| t.backend_statements)
            .collect();
        Arc::new(Catalog::from_backend_ddl(&backend).expect("the backend schema reads back"))
    }

    fn typed(code: TypeCode) -> Type {
        Type {
            code: code as i32,
            ..Type::default()
        }
    }

    /// A request for `sql` with parameters `(name, value, type)` (no type: untyped).
    fn request(sql: &str, params: &[(&str, Value, Option<TypeCode>)]) -> ExecuteSqlRequest {
        let mut fields = prost_types::Struct::default();
        let mut param_types = HashMap::new();
        for (name, value, ty) in params {
            fields.fields.insert((*name).to_owned(), value.clone());
            if let Some(ty) = ty {
                param_types.insert((*name).to_owned(), typed(*ty));
            }
        }
        ExecuteSqlRequest {
            sql: sql.to_owned(),
            params: Some(fields),
            param_types,
            seqno: 7,
            ..ExecuteSqlRequest::default()
        }
    }

    fn plan_of(message: &ExecuteSqlRequest) -> Result<Plan, Status> {
        let classified = classify(message, Dialect::GoogleSql)?;
        let catalog = needs_catalog(&classified).then(catalog);
        statement(classified, message, Dialect::GoogleSql, catalog)
    }

    fn held_insert_of(sql: &str, params: &[(&str, Value, Option<TypeCode>)]) -> Option<HeldInsert> {
        let message = request(sql, params);
        let insert = sql::keyed_insert(&message.sql, Dialect::GoogleSql)?;
        held_insert(&catalog(), &insert, &message)
    }

    fn insert_of(mutation: &Mutation) -> &Write {
        match &mutation.operation {
            Some(Operation::Insert(write)) => write,
            other => panic!("not an insert: {other:?}"),
        }
    }

    fn key(values: &[Value]) -> ListValue {
        ListValue {
            values: values.to_vec(),
        }
    }

    const SEND: &str = "INSERT INTO Jobs (Id, Payload) VALUES (@id, @payload)";

    fn send_params(id: &str) -> Vec<(&'static str, Value, Option<TypeCode>)> {
        vec![
            ("id", string_value(id), Some(TypeCode::String)),
            ("payload", string_value("work"), Some(TypeCode::String)),
        ]
    }

    #[test]
    fn queue_functions_become_receive_and_renew_plans() {
        let receive = request("SELECT * FROM RECEIVE_Jobs(max_duration=>'20m')", &[]);
        let Ok(Plan::Receive(query, _)) = plan_of(&receive) else {
            panic!("RECEIVE_Jobs is not a receive plan");
        };
        assert_eq!(query.queue, "Jobs");
        let renew = request(
            "SELECT * FROM RENEWLEASE_Jobs(lease_tokens=>@tokens)",
            &[("tokens", string_value("t"), None)],
        );
        assert!(matches!(plan_of(&renew), Ok(Plan::Renew(query, _)) if query.queue == "Jobs"));
    }

    #[test]
    fn other_statements_are_forwarded_as_they_are_without_the_catalog() {
        let select = request("SELECT Id FROM Notes", &[]);
        let classified = classify(&select, Dialect::GoogleSql).unwrap();
        assert!(!needs_catalog(&classified));
        assert!(matches!(
            statement(classified, &select, Dialect::GoogleSql, None),
            Ok(Plan::Forward {
                sends: false,
                assert_rows: None
            })
        ));
    }

    #[test]
    fn dml_is_forwarded_and_an_insert_into_a_queue_sends() {
        let send = request(SEND, &send_params("a"));
        assert!(matches!(
            plan_of(&send),
            Ok(Plan::Forward {
                sends: true,
                assert_rows: None
            })
        ));
        let ack = request(
            "DELETE FROM Jobs WHERE Id = @id",
            &[("id", string_value("a"), None)],
        );
        assert!(matches!(
            plan_of(&ack),
            Ok(Plan::Forward { sends: false, .. })
        ));
        let note = request(
            "INSERT INTO Notes (Id, Body) VALUES (@id, 'x')",
            &[("id", string_value("1"), None)],
        );
        assert!(matches!(
            plan_of(&note),
            Ok(Plan::Forward { sends: false, .. })
        ));
    }

    #[test]
    fn dml_a_queue_refuses_is_refused_before_it_is_forwarded() {
        let update = request("UPDATE Jobs SET Payload = 'x' WHERE Id = 'a'", &[]);
        let status = plan_of(&update)
            .err()
            .expect("UPDATE of a queue is refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        let closed = request("INSERT INTO Closed (Id, Payload) VALUES (1, 'x')", &[]);
        let status = plan_of(&closed)
            .err()
            .expect("a send-disabled queue refuses sends");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    }

    #[test]
    fn a_keyed_insert_into_a_queue_is_held_as_insert_mutations() {
        let held = held_insert_of(SEND, &send_params("a")).expect("a send is held");
        assert_eq!(held.table, "Jobs");
        assert!(held.queue);
        assert_eq!(held.key_columns, ["Id"]);
        assert!(!held.explicit_deliver);
        assert_eq!(held.rows.len(), 1);
        let (row_key, mutation) = &held.rows[0];
        assert_eq!(*row_key, key(&[string_value("a")]));
        let write = insert_of(mutation);
        assert_eq!(write.table, "Jobs");
        assert_eq!(write.columns, ["Id", "Payload"]);
        assert_eq!(
            write.values,
            [key(&[string_value("a"), string_value("work")])]
        );
    }

    #[test]
    fn the_delivery_time_is_left_to_the_commit_or_taken_from_a_parameter() {
        let now = held_insert_of(
            "INSERT INTO Jobs (Id, Payload, DeliverTime) VALUES \
             (@id, @payload, CURRENT_TIMESTAMP()), ('b', 'more', CURRENT_TIMESTAMP())",
            &send_params("a"),
        )
        .expect("a send delivered now is held");
        assert_eq!(now.rows.len(), 2);
        assert!(!now.explicit_deliver);
        for (_, mutation) in &now.rows {
            assert_eq!(insert_of(mutation).columns, ["Id", "Payload"]);
        }
        assert_eq!(now.rows[1].0, key(&[string_value("b")]));
        let mut params = send_params("a");
        params.push((
            "at",
            string_value("2020-01-01T00:00:00Z"),
            Some(TypeCode::Timestamp),
        ));
        let later = held_insert_of(
            "INSERT INTO Jobs (Id, Payload, DeliverTime) VALUES (@id, @payload, @at)",
            &params,
        )
        .expect("a send with a delivery time is held");
        assert!(later.explicit_deliver);
        assert_eq!(
            insert_of(&later.rows[0].1).columns,
            ["Id", "Payload", "DeliverTime"]
        );
    }

    #[test]
    fn a_keyed_insert_into_an_ordinary_table_is_held() {
        let held = held_insert_of(
            "INSERT INTO Notes (Id, Body) VALUES (@id, 'text')",
            &[("id", string_value("5"), Some(TypeCode::Int64))],
        )
        .expect("an insert into a plain table is held");
        assert_eq!(held.table, "Notes");
        assert!(!held.queue);
        assert_eq!(held.key_columns, ["Id"]);
        assert_eq!(held.rows[0].0, key(&[string_value("5")]));
        assert_eq!(
            insert_of(&held.rows[0].1).values,
            [key(&[string_value("5"), string_value("text")])]
        );
    }

    #[test]
    fn inserts_a_mutation_would_not_reproduce_are_not_held() {
        let id = || ("id", string_value("a"), Some(TypeCode::String));
        let payload = || ("payload", string_value("x"), Some(TypeCode::String));
        let not_held = [
            // A column named twice, an unknown column, no payload.
            (
                "INSERT INTO Jobs (Id, Payload, Id) VALUES (@id, @payload, @id)",
                vec![id(), payload()],
            ),
            (
                "INSERT INTO Jobs (Id, Payload, Extra) VALUES (@id, @payload, @id)",
                vec![id(), payload()],
            ),
            ("INSERT INTO Jobs (Id) VALUES (@id)", vec![id()]),
            // No key.
            (
                "INSERT INTO Jobs (Payload) VALUES (@payload)",
                vec![payload()],
            ),
            // A key parameter that is NULL, of another type, or missing.
            (
                SEND,
                vec![("id", null_value(), Some(TypeCode::String)), payload()],
            ),
            (
                SEND,
                vec![("id", string_value("1"), Some(TypeCode::Int64)), payload()],
            ),
            (SEND, vec![payload()]),
            // CURRENT_TIMESTAMP() for a column other than the delivery time.
            (
                "INSERT INTO Jobs (Id, Payload) VALUES (@id, CURRENT_TIMESTAMP())",
                vec![id()],
            ),
            // The same key twice.
            (
                "INSERT INTO Jobs (Id, Payload) VALUES ('k', 'x'), ('k', 'y')",
                vec![],
            ),
            // A required column of a table left out; a table with a generated column.
            (
                "INSERT INTO Notes (Id) VALUES (@n)",
                vec![("n", string_value("1"), None)],
            ),
            (
                "INSERT INTO Sums (Id, A) VALUES (@n, @n)",
                vec![("n", string_value("1"), None)],
            ),
            // A string literal into a column that is not a string.
            ("INSERT INTO Notes (Id, Body) VALUES ('1', 'x')", vec![]),
            // Not a table of the database.
            ("INSERT INTO Nowhere (Id) VALUES (@id)", vec![id()]),
        ];
        for (sql, params) in not_held {
            let message = request(sql, &params);
            // Each is a keyed insert: it is the planner that refuses it.
            let insert = sql::keyed_insert(sql, Dialect::GoogleSql).expect("a keyed insert");
            assert_eq!(
                held_insert(&catalog(), &insert, &message),
                None,
                "held: {sql}"
            );
        }
        let long = "k".repeat(MAX_KEY_TEXT + 1);
        assert_eq!(
            held_insert_of(SEND, &send_params(&long)),
            None,
            "a key too long to check at commit"
        );
    }

    #[test]
    fn a_keyed_delete_of_a_queue_row_is_held_by_its_key() {
        let message = request(
            "DELETE FROM Jobs WHERE Id = @id",
            &[("id", string_value("a"), Some(TypeCode::String))],
        );
        let delete = sql::keyed_delete(&message.sql, Dialect::GoogleSql).expect("a keyed delete");
        assert_eq!(
            held_delete(&catalog(), &delete, &message),
            Some(HeldDelete {
                queue: "Jobs".to_owned(),
                key_column: "Id".to_owned(),
                key: key(&[string_value("a")]),
                assert_rows: None,
            })
        );
        for (sql, value, ty) in [
            // Another type, NULL, an ordinary table.
            (
                "DELETE FROM Jobs WHERE Id = @id",
                string_value("1"),
                Some(TypeCode::Int64),
            ),
            (
                "DELETE FROM Jobs WHERE Id = @id",
                null_value(),
                Some(TypeCode::String),
            ),
            (
                "DELETE FROM Notes WHERE Id = @id",
                string_value("1"),
                Some(TypeCode::Int64),
            ),
        ] {
            let message = request(sql, &[("id", value, ty)]);
            let delete = sql::keyed_delete(&message.sql, Dialect::GoogleSql).expect("keyed");
            assert_eq!(
                held_delete(&catalog(), &delete, &message),
                None,
                "held: {sql}"
            );
        }
    }

    fn batch(statements: &[(&str, &str)]) -> ExecuteBatchDmlRequest {
        ExecuteBatchDmlRequest {
            statements: statements
                .iter()
                .map(|(sql, id)| Statement {
                    sql: (*sql).to_owned(),
                    params: Some(prost_types::Struct {
                        fields: [
                            ("id".to_owned(), string_value(*id)),
                            ("payload".to_owned(), string_value("p")),
                        ]
                        .into(),
                    }),
                    param_types: HashMap::new(),
                })
                .collect(),
            seqno: 3,
            ..ExecuteBatchDmlRequest::default()
        }
    }

    #[test]
    fn a_batch_of_single_row_inserts_becomes_one_insert() {
        let combined = batch_insert(&batch(&[(SEND, "a"), (SEND, "b")])).expect("combined");
        assert_eq!(
            combined.sql,
            "INSERT INTO `Jobs` (`Id`, `Payload`) VALUES (@b0_id, @b0_payload), \
             (@b1_id, @b1_payload)"
        );
        let params = combined.params.as_ref().expect("parameters");
        assert_eq!(params.fields.get("b1_id"), Some(&string_value("b")));
        assert_eq!(combined.seqno, 3);
        let held = held_insert(
            &catalog(),
            &sql::keyed_insert(&combined.sql, Dialect::GoogleSql).expect("keyed"),
            &combined,
        )
        .expect("the combined insert is held");
        assert_eq!(held.rows.len(), 2);
        assert_eq!(held.rows[1].0, key(&[string_value("b")]));
    }

    #[test]
    fn batches_of_another_form_are_not_combined() {
        assert!(
            batch_insert(&batch(&[(SEND, "a")])).is_none(),
            "one statement"
        );
        let other = "INSERT INTO Notes (Id, Body) VALUES (@id, @payload)";
        assert!(batch_insert(&batch(&[(SEND, "a"), (other, "1")])).is_none());
        let literal = "INSERT INTO Jobs (Id, Payload) VALUES (@id, 'x')";
        assert!(batch_insert(&batch(&[(SEND, "a"), (literal, "b")])).is_none());
        let delete = "DELETE FROM Jobs WHERE Id = @id";
        assert!(batch_insert(&batch(&[(SEND, "a"), (delete, "b")])).is_none());
    }
}
