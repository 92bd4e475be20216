//! SQL the commands share: reading any column as text, binding values by column type, and the
//! `INSERT` that sends a message.

use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::types::{self, Type};
use google_cloud_spanner::value::Value;
use spanner_queues::Dialect;
use spanner_queues::ident::QueueName;
use spanner_queues::schema::SpannerType;

use crate::error::CliError;
use crate::times::millis;

/// `INSERT INTO queue (keys…, Payload, DeliverTime) VALUES (…, CURRENT_TIMESTAMP())`, in
/// `dialect` (PostgreSQL: `payload`, `deliver_time`, `$n` parameters sent as `pn`).
pub(crate) fn insert(
    dialect: Dialect,
    queue: &QueueName,
    keys: Vec<(String, Value, Type)>,
    payload: (Value, Type),
) -> Statement {
    let n = keys.len();
    let mut builder = match dialect {
        Dialect::GoogleSql => {
            let names: Vec<String> = keys.iter().map(|(n, _, _)| n.clone()).collect();
            let params: Vec<String> = (0..n).map(|i| format!("@k{i}")).collect();
            Statement::builder(format!(
                "INSERT INTO {queue} ({}, Payload, DeliverTime) \
                 VALUES ({}, @payload, CURRENT_TIMESTAMP())",
                names.join(", "),
                params.join(", ")
            ))
        }
        _ => {
            let names: Vec<String> = keys
                .iter()
                .map(|(n, _, _)| format!("\"{}\"", n.replace('"', "\"\"")))
                .collect();
            let params: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
            Statement::builder(format!(
                "INSERT INTO {} ({}, payload, deliver_time) VALUES ({}, ${}, CURRENT_TIMESTAMP)",
                queue.to_sql(dialect),
                names.join(", "),
                params.join(", "),
                n + 1
            ))
        }
    };
    let name = |i: usize, google: String| match dialect {
        Dialect::GoogleSql => google,
        _ => format!("p{}", i + 1),
    };
    for (i, (_, value, ty)) in keys.into_iter().enumerate() {
        builder = builder.add_typed_param(name(i, format!("k{i}")), value, ty);
    }
    builder
        .add_typed_param(name(n, "payload".to_owned()), payload.0, payload.1)
        .build()
}

/// The client type to bind a value of column type `ty` (the GoogleSQL spelling) in `dialect`.
pub(crate) fn param_type(ty: &str, dialect: Dialect) -> Result<Type, CliError> {
    let parsed: SpannerType = ty
        .parse()
        .map_err(|_| CliError::failed(format!("unsupported column type {ty}")))?;
    Ok(match parsed {
        SpannerType::Bool => types::bool(),
        SpannerType::Int64 => types::int64(),
        SpannerType::Float64 => types::float64(),
        SpannerType::String(_) => types::string(),
        SpannerType::Bytes(_) | SpannerType::Proto(_) => types::bytes(),
        SpannerType::Timestamp => types::timestamp(),
        SpannerType::Date => types::date(),
        SpannerType::Numeric if dialect == Dialect::PostgreSql => types::pg_numeric(),
        SpannerType::Numeric => types::numeric(),
        SpannerType::Json if dialect == Dialect::PostgreSql => types::pg_jsonb(),
        SpannerType::Json => types::json(),
        _ => {
            return Err(CliError::failed(format!("unsupported column type {ty}")));
        }
    })
}

/// A payload for a column of type `ty`: JSON and STRING columns take text, BYTES and PROTO
/// the bytes.
pub(crate) fn payload_value(
    bytes: Vec<u8>,
    ty: &str,
    dialect: Dialect,
) -> Result<(Value, Type), CliError> {
    let upper = ty.to_ascii_uppercase();
    if upper == "JSON" || upper.starts_with("STRING") {
        let text = String::from_utf8(bytes).map_err(|_| {
            CliError::failed(format!(
                "the payload is not text, the {ty} column needs text"
            ))
        })?;
        let ty = if upper == "JSON" && dialect == Dialect::PostgreSql {
            // PostgreSQL's jsonb is JSON annotated as such on the wire.
            types::pg_jsonb()
        } else if upper == "JSON" {
            types::json()
        } else {
            types::string()
        };
        Ok((Value::from(text), ty))
    } else {
        Ok((Value::from(bytes), types::bytes()))
    }
}

/// A SQL expression giving column `name` of type `ty` as text.
pub(crate) fn as_text(name: &str, ty: &str) -> String {
    let upper = ty.to_ascii_uppercase();
    if upper.starts_with("STRING") {
        name.to_owned()
    } else if upper == "JSON" {
        format!("TO_JSON_STRING({name})")
    } else if upper.starts_with("BYTES") {
        format!("CONCAT('base64:', TO_BASE64({name}))")
    } else if upper == "TIMESTAMP" {
        format!("FORMAT_TIMESTAMP('%Y-%m-%dT%H:%M:%E*SZ', {name}, 'UTC')")
    } else if matches!(
        upper.as_str(),
        "INT64" | "BOOL" | "FLOAT64" | "NUMERIC" | "DATE"
    ) {
        format!("CAST({name} AS STRING)")
    } else {
        // PROTO and anything else: the bytes.
        format!("CONCAT('base64:', TO_BASE64(CAST({name} AS BYTES)))")
    }
}

/// A value read as it is, as text, for a column of (GoogleSQL) type `ty`: the wire form of
/// most types is their text already; bytes get a `base64:` prefix, as in GoogleSQL's peek.
pub(crate) fn value_text(value: &Value, ty: &str) -> Option<String> {
    if value.is_null() {
        return Some("NULL".to_owned());
    }
    let upper = ty.to_ascii_uppercase();
    if upper.starts_with("BYTES") {
        return value.as_str().map(|b| format!("base64:{b}"));
    }
    if upper == "TIMESTAMP" {
        return value.as_str().map(millis);
    }
    if let Some(text) = value.as_str() {
        return Some(text.to_owned());
    }
    if let Some(b) = value.as_bool() {
        return Some(b.to_string());
    }
    value.as_f64().map(|f| f.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_base64_text() {
        assert_eq!(
            value_text(&Value::from("AAE=".to_owned()), "BYTES(MAX)").as_deref(),
            Some("base64:AAE=")
        );
    }
}
