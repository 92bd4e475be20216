//! What the user typed, checked: database paths, queue names, intervals; key values as typed.

use base64::Engine as _;
use spanner_queues::ident::QueueName;
use spanner_queues::key::KeyValue;

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
    }
}
