//! PostgreSQL interval arithmetic in SQL requests (see [`crate::interval`]): rewritten before the
//! front looks at a statement, so everything after it (classification, held inserts, the
//! backend) sees what the official emulator can run.

use std::collections::HashMap;

use tonic::Status;

use super::proto::spanner::{Type, TypeCode};
use super::shared::Shared;
use super::state::DbState;
use crate::interval;
use spanner_queues_sql::Dialect;

/// Rewrites one statement of a PostgreSQL-dialect database in place: its interval arithmetic
/// becomes `spanner.timestamptz_add` / `_subtract` calls, and its `INTERVAL` parameters are
/// sent as text (their wire form is already the text those functions read).
///
/// # Errors
/// `INVALID_ARGUMENT` naming an interval construct the official emulator cannot run.
pub(crate) async fn prepare(
    shared: &Shared,
    state: &DbState,
    sql: &mut String,
    params: Option<&prost_types::Struct>,
    param_types: &mut HashMap<String, Type>,
) -> Result<(), Status> {
    // Cheap pre-check before asking for the dialect: an interval is spelled out, passed as a
    // parameter, or written as a bare string (`now() + '5 minutes'`).
    let may_hold_interval = contains_interval_word(sql)
        || sql.contains('\'')
        || sql.contains("timestamptz_")
        || param_types
            .values()
            .any(|t| t.code == TypeCode::Interval as i32);
    if !may_hold_interval || state.dialect(shared).await? != Dialect::PostgreSql {
        return Ok(());
    }
    rewrite(sql, params, param_types)
}

/// Whether `sql` mentions `interval` in any letter case.
fn contains_interval_word(sql: &str) -> bool {
    sql.as_bytes()
        .windows(8)
        .any(|w| w.eq_ignore_ascii_case(b"interval"))
}

/// The synchronous part of [`prepare`].
fn rewrite(
    sql: &mut String,
    params: Option<&prost_types::Struct>,
    param_types: &mut HashMap<String, Type>,
) -> Result<(), Status> {
    // Parameters with a value: arithmetic on them needs no NULL guard.
    let non_null: Vec<&str> = params
        .map(|p| {
            p.fields
                .iter()
                .filter(|(_, v)| {
                    !matches!(v.kind, None | Some(prost_types::value::Kind::NullValue(_)))
                })
                .map(|(name, _)| name.as_str())
                .collect()
        })
        .unwrap_or_default();
    let interval_params: Vec<String> = param_types
        .iter()
        .filter(|(_, t)| t.code == TypeCode::Interval as i32)
        .map(|(name, _)| name.clone())
        .collect();
    let names: Vec<&str> = interval_params.iter().map(String::as_str).collect();
    let translated = interval::translate(sql, &names, &non_null)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let Some(translated) = translated else {
        return Ok(());
    };
    for name in &translated.text_params {
        if let Some(t) = param_types.get_mut(name) {
            t.code = TypeCode::String as i32;
        }
    }
    tracing::debug!(
        text_params = translated.text_params.len(),
        "interval arithmetic rewritten for the official emulator"
    );
    *sql = translated.sql;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_parameters_are_retyped_as_strings() {
        let mut sql = "SELECT now() + $1".to_owned();
        let mut types = HashMap::from([
            (
                "p1".to_owned(),
                Type {
                    code: TypeCode::Interval as i32,
                    ..Type::default()
                },
            ),
            (
                "p2".to_owned(),
                Type {
                    code: TypeCode::Int64 as i32,
                    ..Type::default()
                },
            ),
        ]);
        rewrite(&mut sql, None, &mut types).expect("rewritten");
        assert!(sql.contains("spanner.timestamptz_add(now(), $1)"), "{sql}");
        assert!(
            sql.starts_with("SELECT CASE WHEN"),
            "no value: guarded: {sql}"
        );
        assert_eq!(types["p1"].code, TypeCode::String as i32);
        assert_eq!(types["p2"].code, TypeCode::Int64 as i32);
    }

    #[test]
    fn parameters_with_values_are_not_guarded() {
        let mut sql = "SELECT $1::timestamptz + interval '1 hour', $2::timestamptz + interval \
                       '1 hour'"
            .to_owned();
        let params = prost_types::Struct {
            fields: [
                (
                    "p1".to_owned(),
                    prost_types::Value {
                        kind: Some(prost_types::value::Kind::StringValue(
                            "2026-01-01T00:00:00Z".to_owned(),
                        )),
                    },
                ),
                (
                    "p2".to_owned(),
                    prost_types::Value {
                        kind: Some(prost_types::value::Kind::NullValue(0)),
                    },
                ),
            ]
            .into_iter()
            .collect(),
        };
        rewrite(&mut sql, Some(&params), &mut HashMap::new()).expect("rewritten");
        assert_eq!(
            sql,
            "SELECT spanner.timestamptz_add($1::TIMESTAMPTZ, '1 hour'), CASE WHEN \
             ($2::TIMESTAMPTZ) IS NULL THEN NULL ELSE spanner.timestamptz_add($2::TIMESTAMPTZ, \
             '1 hour') END"
        );
    }

    #[test]
    fn unsupported_forms_are_invalid_argument() {
        let mut sql = "SELECT interval '1 hour'".to_owned();
        let status = rewrite(&mut sql, None, &mut HashMap::new()).expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("INTERVAL '1 hour'"), "{status:?}");
    }

    #[test]
    fn the_pre_check_sees_the_word_in_any_case() {
        assert!(contains_interval_word("select now() + INTERVAL"));
        assert!(contains_interval_word("make_Interval(1)"));
        assert!(!contains_interval_word("SELECT 1"));
    }
}
