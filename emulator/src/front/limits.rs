//! Cloud Spanner's size limits that the official emulator does not enforce.
//!
//! The official emulator already refuses a `BYTES` value over 10 MiB and a `STRING(MAX)` value
//! over 2,621,440 characters (`FAILED_PRECONDITION` "New value exceeds the maximum size limit
//! for this column: T.C, size: N, limit: M."), and a key over 8 KiB (`INVALID_ARGUMENT`
//! "Number of bytes for key of table T is N which exceeds the maximum of 8192."), on queues as
//! on tables, since queues are tables there. It accepts `JSON` values of any size; Cloud
//! Spanner holds them to the 10 MiB cell limit. The front refuses them: in write mutations
//! (including `Send`) by column type, and in DML writes by the size of each parameter value
//! (a DML statement's literals are not measured).

use std::collections::HashMap;

use tonic::Status;

use super::proto::Kind;
use super::proto::spanner::mutation::Operation;
use super::proto::spanner::{Mutation, Type, TypeCode};
use crate::ddl::Catalog;

/// The most data one cell (column value) holds: 10 MiB.
pub(crate) const CELL_LIMIT: usize = 10 * 1024 * 1024;

/// Cloud Spanner's error for a value over its column's limit. The wording follows Cloud
/// Spanner's message ("... in this database: T.C, size: N, limit: M.") [I: seen in client
/// reports; the official emulator leaves out "in this database"].
fn too_large(place: &str, size: usize) -> Status {
    Status::failed_precondition(format!(
        "New value exceeds the maximum size limit for this column in this database: {place}, \
         size: {size}, limit: {CELL_LIMIT}."
    ))
}

/// Refuses `JSON` values over [`CELL_LIMIT`] in write mutations (after `Send` became an
/// `Insert` of the queue table, or before: both are checked by table and column).
pub(crate) fn check_mutations(catalog: &Catalog, mutations: &[Mutation]) -> Result<(), Status> {
    for mutation in mutations {
        match &mutation.operation {
            Some(
                Operation::Insert(write)
                | Operation::Update(write)
                | Operation::InsertOrUpdate(write)
                | Operation::Replace(write),
            ) => {
                let json = catalog.json_columns(&write.table);
                if json.is_empty() {
                    continue;
                }
                for (index, column) in write.columns.iter().enumerate() {
                    let Some(name) = json.iter().find(|c| c.eq_ignore_ascii_case(column)) else {
                        continue;
                    };
                    for row in &write.values {
                        if let Some(size) = row.values.get(index).and_then(text_len)
                            && size > CELL_LIMIT
                        {
                            return Err(too_large(&format!("{}.{name}", write.table), size));
                        }
                    }
                }
            }
            Some(Operation::Send(send)) => {
                let json = catalog.json_columns(&send.queue);
                if let (Some(name), Some(size)) =
                    (json.first(), send.payload.as_ref().and_then(text_len))
                    && size > CELL_LIMIT
                {
                    return Err(too_large(&format!("{}.{name}", send.queue), size));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Refuses a DML write whose parameter holds a value over [`CELL_LIMIT`] (no column can store
/// it); `table` is the statement's target, named in the error with the parameter.
pub(crate) fn check_dml_params(
    table: &str,
    params: Option<&prost_types::Struct>,
    param_types: &HashMap<String, Type>,
) -> Result<(), Status> {
    let Some(params) = params else {
        return Ok(());
    };
    for (name, value) in &params.fields {
        let Some(len) = text_len(value) else {
            continue;
        };
        let is_bytes = param_types
            .get(name)
            .is_some_and(|t| t.code == TypeCode::Bytes as i32);
        // BYTES travel as base64: four characters carry three bytes.
        let size = if is_bytes { len / 4 * 3 } else { len };
        if size > CELL_LIMIT {
            return Err(too_large(&format!("{table} (parameter @{name})"), size));
        }
    }
    Ok(())
}

/// The length of a string value, in bytes.
fn text_len(value: &prost_types::Value) -> Option<usize> {
    match &value.kind {
        Some(Kind::StringValue(s)) => Some(s.len()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::proto::spanner::mutation::Write;
    use crate::front::proto::{ListValue, string_value};

    fn catalog() -> Catalog {
        Catalog::from_backend_ddl(&[
            "CREATE TABLE Docs (Id INT64 NOT NULL, Doc JSON, Note STRING(MAX)) PRIMARY KEY (Id)"
                .to_owned(),
        ])
        .unwrap()
    }

    fn insert(column: &str, value: String) -> Mutation {
        Mutation {
            operation: Some(Operation::Insert(Write {
                table: "docs".to_owned(),
                columns: vec!["Id".to_owned(), column.to_owned()],
                values: vec![ListValue {
                    values: vec![string_value("1"), string_value(value)],
                }],
            })),
        }
    }

    #[test]
    fn json_values_over_10_mib_are_refused_other_columns_are_left_to_the_backend() {
        let catalog = catalog();
        let over = "x".repeat(CELL_LIMIT + 1);
        let error = check_mutations(&catalog, &[insert("doc", over.clone())]).unwrap_err();
        assert_eq!(error.code(), tonic::Code::FailedPrecondition);
        assert!(
            error
                .message()
                .contains("docs.Doc, size: 10485761, limit: 10485760")
        );
        check_mutations(&catalog, &[insert("Note", over)]).unwrap();
        check_mutations(&catalog, &[insert("Doc", "x".repeat(CELL_LIMIT))]).unwrap();
    }

    #[test]
    fn dml_parameters_are_measured_by_type() {
        let value = |s: String| prost_types::Value {
            kind: Some(Kind::StringValue(s)),
        };
        let params = prost_types::Struct {
            fields: [("p".to_owned(), value("x".repeat(CELL_LIMIT + 4)))].into(),
        };
        let error = check_dml_params("Docs", Some(&params), &HashMap::new()).unwrap_err();
        assert!(error.message().contains("Docs (parameter @p)"));
        // As BYTES (base64), the same text is 7.5 MiB.
        let types = [(
            "p".to_owned(),
            Type {
                code: TypeCode::Bytes as i32,
                ..Type::default()
            },
        )]
        .into();
        check_dml_params("Docs", Some(&params), &types).unwrap();
    }
}
