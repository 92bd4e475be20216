//! What the user typed, checked: database paths, queue names, intervals, key values.

use base64::Engine as _;
use google_cloud_spanner::value::Value;
use spanner_queues::ident::QueueName;
use spanner_queues::key::KeyValue;
use spanner_queues::schema::SpannerType;

use crate::error::CliError;

/// A queue name, or a usage error.
pub(crate) fn queue_name(queue: &str) -> Result<QueueName, CliError> {
    QueueName::new(queue)
        .map_err(|e| CliError::usage(format!("`{queue}` is not a queue name: {e}")))
}

/// Validates `projects/P/instances/I/databases/D`.
pub(crate) fn database_path(path: &str) -> Result<(), CliError> {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "instances", i, "databases", d]
            if !p.is_empty() && !i.is_empty() && !d.is_empty() =>
        {
            Ok(())
        }
        _ => Err(CliError::usage(format!(
            "`{path}` is not a database path: use projects/P/instances/I/databases/D"
        ))),
    }
}

/// `--interval`: seconds from 0.1 to a day (clap's value parser).
pub(crate) fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.1..=86_400.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "`{text}` is not a number of seconds from 0.1 to 86400"
        )),
    }
}

/// A key value typed on the command line, checked against its column type.
pub(crate) fn key_value(column: &str, ty: &str, text: &str) -> Result<Value, CliError> {
    let bad = |what: &str| {
        CliError::usage(format!(
            "key column {column} is {ty}: `{text}` is not {what}"
        ))
    };
    let parsed: SpannerType = ty
        .parse()
        .map_err(|_| CliError::failed(format!("unsupported key column type {ty}")))?;
    Ok(match parsed {
        SpannerType::Int64 => Value::from(text.parse::<i64>().map_err(|_| bad("an integer"))?),
        SpannerType::Bool => Value::from(text.parse::<bool>().map_err(|_| bad("true or false"))?),
        SpannerType::Float64 => Value::from(text.parse::<f64>().map_err(|_| bad("a number"))?),
        SpannerType::Bytes(_) => Value::from(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| bad("base64"))?,
        ),
        // STRING, and the types Spanner takes as text on the wire (TIMESTAMP, DATE, NUMERIC):
        // Spanner checks their form.
        _ => Value::from(text.to_owned()),
    })
}

/// Each key value as `--key` takes it.
pub(crate) fn key_texts(parts: &[KeyValue]) -> Vec<String> {
    parts
        .iter()
        .map(|part| match part {
            KeyValue::String(s) => s.clone(),
            KeyValue::Uuid(u) => u.hyphenated().to_string(),
            KeyValue::Bytes(b) => base64::engine::general_purpose::STANDARD.encode(b),
            other => other.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EXIT_USAGE;

    #[test]
    fn key_values_are_checked_against_their_column_type() {
        assert!(key_value("Id", "INT64", "42").is_ok());
        let error = key_value("Id", "INT64", "forty-two").expect_err("not an integer");
        assert_eq!(error.code, EXIT_USAGE);
        assert!(error.message.contains("Id is INT64"), "{}", error.message);
        assert!(key_value("Blob", "BYTES(MAX)", "not base64!").is_err());
        assert!(key_value("Flag", "BOOL", "yes").is_err());
    }

    #[test]
    fn intervals_are_checked() {
        assert_eq!(positive_seconds("0.5"), Ok(0.5));
        assert_eq!(positive_seconds("86400"), Ok(86_400.0));
        for bad in ["0", "0.05", "-1", "86401", "NaN", "inf", "soon", ""] {
            let error = positive_seconds(bad).expect_err(bad);
            assert!(error.contains("0.1 to 86400"), "{bad}: {error}");
        }
    }

    #[test]
    fn database_paths_have_three_named_parts() {
        assert!(database_path("projects/p/instances/i/databases/d").is_ok());
        for bad in [
            "",
            "d",
            "projects/p/instances/i/databases/",
            "projects//instances/i/databases/d",
            "projects/p/instances/i/databases/d/extra",
            "project/p/instances/i/databases/d",
        ] {
            let error = database_path(bad).expect_err(bad);
            assert_eq!(error.code, EXIT_USAGE, "{bad}");
            assert!(error.message.contains("projects/P/instances/I/databases/D"));
        }
    }

    #[test]
    fn queue_names_are_identifiers() {
        assert_eq!(queue_name("Tickets").expect("valid").as_str(), "Tickets");
        let error = queue_name("no-dashes").expect_err("a dash");
        assert_eq!(error.code, EXIT_USAGE);
        assert!(error.message.contains("`no-dashes` is not a queue name"));
    }

    #[test]
    fn key_values_print_as_key_takes_them() {
        let parts = [
            KeyValue::Int64(42),
            KeyValue::String("a b".to_owned()),
            KeyValue::Bytes(vec![0, 1]),
        ];
        assert_eq!(key_texts(&parts), ["42", "a b", "AAE="]);
        // And they read back.
        assert!(key_value("Blob", "BYTES(MAX)", "AAE=").is_ok());
    }
}
