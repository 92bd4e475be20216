//! The planner on a catalog with queues and tables: what each statement becomes.

use std::collections::HashMap;

use super::*;
use crate::front::proto::spanner::execute_batch_dml_request::Statement;
use crate::front::proto::spanner::{Type, TypeCode};
use crate::front::proto::{Value, null_value};

/// A database with queue `Jobs` (key `Id STRING(36)`), a send-disabled queue `Closed`, an
/// ordinary table `Notes` (`Id INT64`, a required `Body`, an optional `Tag`) and a table with a
/// generated column, which a mutation cannot insert the same way; a table `Singleton` and a
/// queue `Lonely` with an empty primary key.
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
        "CREATE TABLE Singleton (Body STRING(MAX) NOT NULL) PRIMARY KEY ()",
        "CREATE QUEUE Lonely (Payload STRING(MAX) NOT NULL) PRIMARY KEY ()",
    ]
    .map(str::to_owned);
    let translated = crate::ddl::translate_batch(&Catalog::default(), &client, Dialect::GoogleSql)
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
    let insert = keyed_insert(&message.sql, Dialect::GoogleSql)?;
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
        // A table or queue with an empty primary key (one row at most: nothing to scan).
        ("INSERT INTO Singleton (Body) VALUES ('x')", vec![]),
        (
            "INSERT INTO Lonely (Payload) VALUES (@payload)",
            vec![payload()],
        ),
    ];
    for (sql, params) in not_held {
        let message = request(sql, &params);
        // Each is a keyed insert: it is the planner that refuses it.
        let insert = keyed_insert(sql, Dialect::GoogleSql).expect("a keyed insert");
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
    let delete = keyed_delete(&message.sql, Dialect::GoogleSql).expect("a keyed delete");
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
        let delete = keyed_delete(&message.sql, Dialect::GoogleSql).expect("keyed");
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
        &keyed_insert(&combined.sql, Dialect::GoogleSql).expect("keyed"),
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
