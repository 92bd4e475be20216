//! Building and validating queues.

use spanner_queues_sql::{Dialect, TokenKind, tokenize};

use super::bodies::{KeyPart, TableAst};
use super::error::DdlError;
use super::metadata::decode_meta;
use super::model::{
    ColumnDef, Interleave, KeyColumn, PayloadColumn, PayloadKind, QueueDef, QueueOptions,
    ReceiveMode, fold, generated_name,
};
use super::tokens::{OptionItem, OptionValue};
use super::{
    DELIVER_TIME_COLUMN, MESSAGE_ID_COLUMN, META_COLUMN, PAYLOAD_COLUMN, PG_DELIVER_TIME_COLUMN,
    PG_TVF_OUTPUT_COLUMNS, TVF_OUTPUT_COLUMNS,
};

/// The payload kind of a declared payload type, or `None` if a queue cannot hold it.
pub(super) fn payload_kind(data_type: &str) -> Option<PayloadKind> {
    let upper = data_type.to_ascii_uppercase();
    let sized = |prefix: &str| {
        upper
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('('))
            .and_then(|rest| rest.strip_suffix(')'))
            .is_some_and(|len| {
                let len = len.trim();
                len == "MAX"
                    || len.starts_with("0X") && len.len() > 2
                    || !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit())
            })
    };
    if sized("BYTES") {
        return Some(PayloadKind::Bytes);
    }
    if sized("STRING") {
        return Some(PayloadKind::String);
    }
    if upper == "JSON" {
        return Some(PayloadKind::Json);
    }
    /// Built-in types and type keywords that are not proto message names.
    const NOT_PROTO: [&str; 14] = [
        "ARRAY",
        "BOOL",
        "BYTES",
        "DATE",
        "FLOAT32",
        "FLOAT64",
        "INT64",
        "INTERVAL",
        "NUMERIC",
        "STRING",
        "TIMESTAMP",
        "TOKENLIST",
        "UUID",
        "JSON",
    ];
    // A proto type name: identifiers separated by dots, or one backquoted path.
    let toks = tokenize(data_type, Dialect::GoogleSql).ok()?;
    let mut expect_ident = true;
    for t in &toks {
        let ok = if expect_ident {
            t.is_ident()
        } else {
            t.is_punct(".")
        };
        if !ok {
            return None;
        }
        expect_ident = !expect_ident;
    }
    let single_builtin = toks.len() == 1
        && toks[0].kind == TokenKind::Word
        && NOT_PROTO
            .iter()
            .any(|w| toks[0].text.eq_ignore_ascii_case(w));
    (!toks.is_empty() && !expect_ident && !single_builtin).then_some(PayloadKind::Proto)
}

/// The payload kind of a PostgreSQL payload type, or `None` if a queue cannot hold it.
pub(super) fn pg_payload_kind(data_type: &str) -> Option<PayloadKind> {
    let lower = data_type.to_ascii_lowercase();
    let base = match lower.split_once('(') {
        Some((base, rest)) => {
            let len = rest.strip_suffix(')')?.trim();
            if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            base.trim()
        }
        None => lower.trim(),
    };
    match base {
        "bytea" if !lower.contains('(') => Some(PayloadKind::Bytes),
        "text" if !lower.contains('(') => Some(PayloadKind::String),
        "varchar" | "character varying" => Some(PayloadKind::String),
        "jsonb" if !lower.contains('(') => Some(PayloadKind::Json),
        _ => None,
    }
}

/// Applies `items` (an `OPTIONS` list) on top of `base`. `NULL` resets an option.
pub(super) fn apply_options(
    queue: &str,
    base: &QueueOptions,
    items: &[OptionItem],
) -> Result<QueueOptions, DdlError> {
    let mut options = base.clone();
    let mut seen: Vec<String> = Vec::new();
    for item in items {
        let key = item.name.to_ascii_lowercase();
        if seen.contains(&key) {
            return Err(DdlError::InvalidQueue {
                queue: queue.to_owned(),
                reason: format!("option {} is set more than once", item.name),
            });
        }
        seen.push(key.clone());
        let invalid = |expected: &'static str| DdlError::InvalidOptionValue {
            queue: queue.to_owned(),
            option: item.name.clone(),
            value: item.text.clone(),
            expected,
        };
        match key.as_str() {
            "receive_mode" => {
                options.receive_mode = match &item.value {
                    OptionValue::Null => None,
                    OptionValue::Str(s) if s.eq_ignore_ascii_case("PULL") => {
                        Some(ReceiveMode::Pull)
                    }
                    _ => return Err(invalid("'PULL'")),
                }
            }
            "disable_send" | "disable_delivery" => {
                let value = match item.value {
                    OptionValue::Null => None,
                    OptionValue::Bool(b) => Some(b),
                    _ => return Err(invalid("true, false or NULL")),
                };
                if key == "disable_send" {
                    options.disable_send = value;
                } else {
                    options.disable_delivery = value;
                }
            }
            "locality_group" => {
                options.locality_group = match &item.value {
                    OptionValue::Null => None,
                    OptionValue::Str(s) if !s.is_empty() => Some(s.clone()),
                    _ => return Err(invalid("a locality group name as a string literal")),
                }
            }
            _ => {
                return Err(DdlError::UnknownOption {
                    queue: queue.to_owned(),
                    option: item.name.clone(),
                });
            }
        }
    }
    Ok(options)
}

/// Whether `name` is reserved in queues (internal columns and TVF output columns).
pub(super) fn is_reserved_column(name: &str, dialect: Dialect) -> bool {
    let outputs: &[&str] = match dialect {
        Dialect::GoogleSql => &TVF_OUTPUT_COLUMNS,
        Dialect::PostgreSql => &PG_TVF_OUTPUT_COLUMNS,
    };
    name.eq_ignore_ascii_case(MESSAGE_ID_COLUMN)
        || name.eq_ignore_ascii_case(META_COLUMN)
        || outputs.iter().any(|c| name.eq_ignore_ascii_case(c))
}

/// The parts of a queue, before validation.
pub(super) struct QueueParts {
    /// The queue name.
    pub(super) name: String,
    /// The name as the statement that declares the queue writes it.
    pub(super) written_name: String,
    /// The user columns in declaration order.
    pub(super) columns: Vec<ColumnDef>,
    /// The primary key.
    pub(super) primary_key: Vec<KeyPart>,
    /// The interleave clause.
    pub(super) interleave: Option<Interleave>,
    /// The row deletion policy.
    pub(super) row_deletion_policy: Option<String>,
    /// The options.
    pub(super) options: QueueOptions,
    /// The database dialect.
    pub(super) dialect: Dialect,
}

/// Validates the shape of a queue and builds its definition.
pub(super) fn build_queue(parts: QueueParts) -> Result<QueueDef, DdlError> {
    let queue = parts.name;
    let err_queue = || queue.clone();
    let mut seen: Vec<String> = Vec::new();
    for column in &parts.columns {
        let key = fold(&column.name);
        if seen.contains(&key) {
            return Err(DdlError::DuplicateColumn {
                queue: err_queue(),
                column: column.name.clone(),
            });
        }
        seen.push(key);
        // PostgreSQL databases have both names [C]: neither may be declared.
        if column.name.eq_ignore_ascii_case(DELIVER_TIME_COLUMN)
            || parts.dialect == Dialect::PostgreSql
                && column.name.eq_ignore_ascii_case(PG_DELIVER_TIME_COLUMN)
        {
            return Err(DdlError::DeliverTimeDeclared {
                queue: err_queue(),
                column: column.name.clone(),
            });
        }
        if is_reserved_column(&column.name, parts.dialect) {
            return Err(DdlError::ReservedColumn {
                object: format!("queue {queue}"),
                column: column.name.clone(),
            });
        }
        if column.default.is_some() {
            return Err(DdlError::InvalidQueue {
                queue: err_queue(),
                reason: format!("column {} cannot have a DEFAULT value", column.name),
            });
        }
    }
    let payload_column = parts
        .columns
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(PAYLOAD_COLUMN))
        .ok_or_else(|| DdlError::MissingPayload { queue: err_queue() })?;
    let kind = match parts.dialect {
        Dialect::GoogleSql => {
            payload_kind(&payload_column.data_type).ok_or_else(|| DdlError::PayloadType {
                queue: err_queue(),
                column: payload_column.name.clone(),
                found: payload_column.data_type.clone(),
            })?
        }
        Dialect::PostgreSql => {
            pg_payload_kind(&payload_column.data_type).ok_or_else(|| DdlError::PgPayloadType {
                queue: err_queue(),
                column: payload_column.name.clone(),
                found: payload_column.data_type.clone(),
            })?
        }
    };
    if !payload_column.not_null {
        return Err(DdlError::PayloadNullable {
            queue: err_queue(),
            column: payload_column.name.clone(),
        });
    }
    if payload_column.generated.is_some() {
        return Err(DdlError::InvalidQueue {
            queue: err_queue(),
            reason: format!(
                "column {} cannot be a generated column",
                payload_column.name
            ),
        });
    }
    let mut key_columns: Vec<KeyColumn> = Vec::with_capacity(parts.primary_key.len());
    for part in &parts.primary_key {
        if part.name.eq_ignore_ascii_case(&payload_column.name) {
            return Err(DdlError::PayloadInPrimaryKey {
                queue: err_queue(),
                column: part.name.clone(),
            });
        }
        let column = parts
            .columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(&part.name))
            .ok_or_else(|| DdlError::UndeclaredKeyColumn {
                queue: err_queue(),
                column: part.name.clone(),
            })?;
        if key_columns
            .iter()
            .any(|k| k.column.name.eq_ignore_ascii_case(&part.name))
        {
            return Err(DdlError::InvalidQueue {
                queue: err_queue(),
                reason: format!("the primary key names column {} twice", part.name),
            });
        }
        key_columns.push(KeyColumn {
            column: column.clone(),
            written: part.written.clone(),
            descending: part.descending,
        });
    }
    for column in &parts.columns {
        let in_key = key_columns
            .iter()
            .any(|k| k.column.name.eq_ignore_ascii_case(&column.name));
        if !in_key && !column.name.eq_ignore_ascii_case(&payload_column.name) {
            return Err(DdlError::NonKeyColumn {
                queue: err_queue(),
                column: column.name.clone(),
            });
        }
    }
    if let Some(interleave) = &parts.interleave
        && !interleave.in_parent
        && interleave.on_delete.is_some()
    {
        return Err(DdlError::InvalidQueue {
            queue: err_queue(),
            reason: "ON DELETE is only allowed with INTERLEAVE IN PARENT".to_owned(),
        });
    }
    Ok(QueueDef {
        column_order: parts.columns.iter().map(|c| c.name.clone()).collect(),
        payload: PayloadColumn {
            column: payload_column.clone(),
            kind,
        },
        name: queue,
        written_name: parts.written_name,
        key_columns,
        interleave: parts.interleave,
        row_deletion_policy: parts.row_deletion_policy,
        options: parts.options,
        dialect: parts.dialect,
        has_due_index: false,
    })
}

/// Reads a queue back from its backend `CREATE TABLE`.
pub(super) fn queue_from_backend(table: &TableAst, dialect: Dialect) -> Result<QueueDef, DdlError> {
    let name = table.full_name();
    let corrupt = |reason: String| DdlError::CorruptBackend {
        queue: name.clone(),
        reason,
    };
    let meta_default = table
        .column(META_COLUMN)
        .and_then(|c| c.default.as_deref())
        .ok_or_else(|| corrupt(format!("column {META_COLUMN} has no DEFAULT")))?;
    let literal = tokenize(meta_default, dialect)
        .ok()
        .and_then(|toks| match toks.as_slice() {
            [t] if t.kind == TokenKind::String => Some(t.value.clone().into_owned()),
            // PostgreSQL renders the literal with a cast: `'sqe1:...'::text`.
            [t, cast, _] if t.kind == TokenKind::String && cast.is_punct("::") => {
                Some(t.value.clone().into_owned())
            }
            _ => None,
        })
        .ok_or_else(|| {
            corrupt(format!(
                "the DEFAULT of {META_COLUMN} is not a string literal"
            ))
        })?;
    let meta = decode_meta(&name, &literal)?;
    let deliver_time = match dialect {
        Dialect::GoogleSql => DELIVER_TIME_COLUMN,
        Dialect::PostgreSql => PG_DELIVER_TIME_COLUMN,
    };
    if table.column(deliver_time).is_none() {
        return Err(corrupt(format!("column {deliver_time} is missing")));
    }
    let columns: Vec<ColumnDef> = table
        .columns
        .iter()
        .filter(|c| {
            // In PostgreSQL, `DeliverTime` is the generated alias of `deliver_time`.
            ![
                deliver_time,
                DELIVER_TIME_COLUMN,
                MESSAGE_ID_COLUMN,
                META_COLUMN,
            ]
            .iter()
            .any(|internal| c.name.eq_ignore_ascii_case(internal))
        })
        .map(|c| {
            let mut c = c.clone();
            c.hidden = c.hidden || meta.hidden.iter().any(|h| h.eq_ignore_ascii_case(&c.name));
            c
        })
        .collect();
    let options = QueueOptions {
        receive_mode: match meta.receive_mode.as_deref() {
            None => None,
            Some(m) if m.eq_ignore_ascii_case("PULL") => Some(ReceiveMode::Pull),
            Some(other) => return Err(corrupt(format!("unknown receive_mode {other:?}"))),
        },
        disable_send: meta.disable_send,
        disable_delivery: meta.disable_delivery,
        locality_group: meta.locality_group.clone(),
    };
    let interleave = match (&table.interleave, &meta.interleave_in) {
        (Some(backend), _) => Some(backend.clone()),
        (None, Some(parent)) => Some(Interleave {
            parent: parent.clone(),
            parent_written: generated_name(dialect, parent).into_owned(),
            in_parent: false,
            on_delete: None,
        }),
        (None, None) => None,
    };
    build_queue(QueueParts {
        name: name.clone(),
        written_name: table.written_name.clone(),
        columns,
        primary_key: table.primary_key.clone(),
        interleave,
        row_deletion_policy: table.row_deletion_policy.clone(),
        options,
        dialect,
    })
    .map_err(|err| corrupt(err.to_string()))
}
