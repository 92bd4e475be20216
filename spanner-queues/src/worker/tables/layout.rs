//! The layout of the worker's tables: their names, columns and DDL, the digest that keys them,
//! and the start-up check that the database has this layout.

use std::borrow::Cow;

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::key::{Key, KeyRange, KeySet};
use google_cloud_spanner::value::Value;

use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::message::QueueMessage;

/// The table counting attempts per message.
pub(crate) const ATTEMPTS_TABLE: &str = "SpannerQueuesAttempts";
/// The dead-letter table.
pub(crate) const DEAD_LETTER_TABLE: &str = "SpannerQueuesDeadLetters";
/// The table counting attempts per message, in PostgreSQL-dialect databases.
pub(crate) const ATTEMPTS_TABLE_POSTGRESQL: &str = "spanner_queues_attempts";
/// The dead-letter table, in PostgreSQL-dialect databases.
pub(crate) const DEAD_LETTER_TABLE_POSTGRESQL: &str = "spanner_queues_dead_letters";
/// Longest error text stored (in bytes); longer texts are cut at a character boundary.
pub const MAX_ERROR_TEXT: usize = 4096;

/// The DDL of the worker's tables in `dialect` (`CREATE TABLE IF NOT EXISTS`), applied by
/// [`SchemaSetup::with_worker_tables`](crate::SchemaSetup::with_worker_tables).
///
/// - `SpannerQueuesAttempts (QueueName, KeyDigest, AttemptId)`: one row per counted attempt; a
///   failed attempt records its error in its row. A message's rows are deleted in the
///   transaction that acks or dead-letters it. Rows left behind (a message acked by another
///   program) expire after 30 days.
/// - `SpannerQueuesDeadLetters (QueueName, KeyDigest)`: messages that failed too often or could
///   not be decoded, with the raw payload (`Payload` bytes and `PayloadKind`), the attempt count
///   and the error text. Rows expire after 30 days (change the row deletion policy with
///   `ALTER TABLE … REPLACE ROW DELETION POLICY`).
///
/// Both tables are keyed by `KeyDigest`, a fixed-size digest of the message key (33 bytes: a
/// version byte, then the SHA-256 of the key in [`KeyEncoding::V1`](crate::key::KeyEncoding::V1)),
/// so that every key a queue accepts fits Spanner's limit on key size. The key itself is in
/// `MessageKey` (its `KeyEncoding::V1` text) and, in the dead-letter table, `KeyText` (the
/// human-readable form).
///
/// Tables created by earlier versions of this crate, keyed by the key's text, are reported by
/// the worker's start-up check ([`Error::SchemaDrift`]); see there for the migration.
///
/// In PostgreSQL-dialect databases the same tables and columns have snake_case names
/// (`spanner_queues_attempts`, `key_digest`, …) and PostgreSQL types.
///
/// ```
/// use spanner_queues::{Dialect, SchemaSetup};
///
/// let ddl = SchemaSetup::new().with_worker_tables().statements(Dialect::GoogleSql)?;
/// assert!(ddl[0].starts_with("CREATE TABLE IF NOT EXISTS SpannerQueuesAttempts"));
/// assert!(ddl[1].contains("ROW DELETION POLICY"));
/// let pg = SchemaSetup::new().with_worker_tables().statements(Dialect::PostgreSql)?;
/// assert!(pg[0].starts_with("CREATE TABLE IF NOT EXISTS spanner_queues_attempts"));
/// # Ok::<(), spanner_queues::Error>(())
/// ```
pub(crate) fn schema_statements(dialect: Dialect) -> Vec<String> {
    match dialect {
        Dialect::GoogleSql => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {ATTEMPTS_TABLE} (\
                 QueueName STRING(128) NOT NULL, \
                 KeyDigest BYTES({DIGEST_LEN}) NOT NULL, \
                 AttemptId STRING(36) NOT NULL, \
                 MessageKey STRING(MAX) NOT NULL, \
                 StartedAt TIMESTAMP NOT NULL, \
                 ErrorText STRING(MAX)\
                 ) PRIMARY KEY (QueueName, KeyDigest, AttemptId), \
                 ROW DELETION POLICY (OLDER_THAN(StartedAt, INTERVAL 30 DAY))"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {DEAD_LETTER_TABLE} (\
                 QueueName STRING(128) NOT NULL, \
                 KeyDigest BYTES({DIGEST_LEN}) NOT NULL, \
                 MessageKey STRING(MAX) NOT NULL, \
                 KeyText STRING(MAX) NOT NULL, \
                 Payload BYTES(MAX) NOT NULL, \
                 PayloadKind STRING(16) NOT NULL, \
                 Attempts INT64 NOT NULL, \
                 ErrorText STRING(MAX) NOT NULL, \
                 DeadLetteredAt TIMESTAMP NOT NULL\
                 ) PRIMARY KEY (QueueName, KeyDigest), \
                 ROW DELETION POLICY (OLDER_THAN(DeadLetteredAt, INTERVAL 30 DAY))"
            ),
        ],
        // `bytea` has no length: the digest's fixed size is the SDK's to keep.
        Dialect::PostgreSql => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {ATTEMPTS_TABLE_POSTGRESQL} (\
                 queue_name varchar(128) NOT NULL, \
                 key_digest bytea NOT NULL, \
                 attempt_id varchar(36) NOT NULL, \
                 message_key text NOT NULL, \
                 started_at timestamptz NOT NULL, \
                 error_text text, \
                 PRIMARY KEY (queue_name, key_digest, attempt_id)\
                 ) TTL INTERVAL '30 days' ON started_at"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {DEAD_LETTER_TABLE_POSTGRESQL} (\
                 queue_name varchar(128) NOT NULL, \
                 key_digest bytea NOT NULL, \
                 message_key text NOT NULL, \
                 key_text text NOT NULL, \
                 payload bytea NOT NULL, \
                 payload_kind varchar(16) NOT NULL, \
                 attempts bigint NOT NULL, \
                 error_text text NOT NULL, \
                 dead_lettered_at timestamptz NOT NULL, \
                 PRIMARY KEY (queue_name, key_digest)\
                 ) TTL INTERVAL '30 days' ON dead_lettered_at"
            ),
        ],
    }
}

/// The attempts table and the dead-letter table in `dialect`.
pub(crate) const fn table_names(dialect: Dialect) -> (&'static str, &'static str) {
    match dialect {
        Dialect::GoogleSql => (ATTEMPTS_TABLE, DEAD_LETTER_TABLE),
        Dialect::PostgreSql => (ATTEMPTS_TABLE_POSTGRESQL, DEAD_LETTER_TABLE_POSTGRESQL),
    }
}

/// A worker-table column in `dialect`: `name` (GoogleSQL's) in snake_case for PostgreSQL.
pub(crate) fn column(dialect: Dialect, name: &'static str) -> Cow<'static, str> {
    match dialect {
        Dialect::GoogleSql => Cow::Borrowed(name),
        Dialect::PostgreSql => {
            let mut out = String::with_capacity(name.len() + 4);
            for (i, c) in name.chars().enumerate() {
                if c.is_ascii_uppercase() {
                    if i > 0 {
                        out.push('_');
                    }
                    out.push(c.to_ascii_lowercase());
                } else {
                    out.push(c);
                }
            }
            Cow::Owned(out)
        }
    }
}

/// Version byte of [`key_digest`]: 1 = SHA-256 of `KeyEncoding::V1`. A new digest would be a
/// new version byte, so that rows of both versions can be told apart.
const DIGEST_V1: u8 = 1;
/// Length of [`key_digest`] in bytes: the version byte and a SHA-256.
const DIGEST_LEN: usize = 33;

/// The primary-key form of a message key in the worker's tables: fixed size whatever the key.
pub(crate) fn key_digest(key: &MessageKey) -> Vec<u8> {
    use sha2::Digest as _;
    let mut digest = Vec::with_capacity(DIGEST_LEN);
    digest.push(DIGEST_V1);
    digest.extend_from_slice(&sha2::Sha256::digest(key.to_wire().as_bytes()));
    digest
}

/// One expected column of a worker table: name, type family, primary-key position (from 1).
type Expected = (&'static str, &'static str, Option<i64>);

const ATTEMPTS_LAYOUT: &[Expected] = &[
    ("QueueName", "STRING", Some(1)),
    ("KeyDigest", "BYTES", Some(2)),
    ("AttemptId", "STRING", Some(3)),
    ("MessageKey", "STRING", None),
    ("StartedAt", "TIMESTAMP", None),
    ("ErrorText", "STRING", None),
];

const DEAD_LETTER_LAYOUT: &[Expected] = &[
    ("QueueName", "STRING", Some(1)),
    ("KeyDigest", "BYTES", Some(2)),
    ("MessageKey", "STRING", None),
    ("KeyText", "STRING", None),
    ("Payload", "BYTES", None),
    ("PayloadKind", "STRING", None),
    ("Attempts", "INT64", None),
    ("ErrorText", "STRING", None),
    ("DeadLetteredAt", "TIMESTAMP", None),
];

/// A column of a worker table as the database has it.
#[derive(Debug, Clone)]
struct ActualColumn {
    table: String,
    name: String,
    spanner_type: String,
    key_position: Option<i64>,
}

/// Checks, in one read of `INFORMATION_SCHEMA`, that the worker's tables exist and have this
/// version's layout and that the queue of `M` exists and fits `M` (as
/// [`SchemaSetup::check`](crate::SchemaSetup::check) does). Returns whether the queue was checked:
/// `false` when the read failed for another reason than a handle of the wrong dialect (logged;
/// the worker tries once more before its handlers start).
///
/// # Errors
/// [`Error::InvalidSchema`] naming the fix when a worker table is missing; [`Error::SchemaDrift`]
/// (about the queue the worker serves) when a table has another layout, such as the one of
/// earlier versions keyed by the key's text, or when the queue does not fit `M`;
/// [`Error::QueueNotFound`]; [`Error::Precondition`] when `dialect` is not the database's.
pub(crate) async fn check_start<M: QueueMessage>(
    db: &DatabaseClient,
    dialect: Dialect,
) -> Result<bool> {
    let queue = M::QUEUE;
    let (attempts_table, dead_table) = table_names(dialect);
    let rows = match crate::ddl::read_table_columns(
        db,
        dialect,
        &[queue.as_str(), attempts_table, dead_table],
    )
    .await
    {
        Ok(rows) => rows,
        Err(error) => {
            if let Some(mismatch) = crate::ddl::dialect_mismatch(db, dialect).await {
                return Err(mismatch);
            }
            tracing::warn!(
                queue = %queue,
                error = %crate::telemetry::ErrorChain(&error),
                "could not check the worker tables and the queue"
            );
            return Ok(false);
        }
    };
    let mut tables = Vec::new();
    let mut queue_columns = Vec::new();
    for (table, column) in rows {
        if table.eq_ignore_ascii_case(attempts_table) || table.eq_ignore_ascii_case(dead_table) {
            tables.push(ActualColumn {
                table,
                name: column.name().to_owned(),
                spanner_type: column.spanner_type().to_owned(),
                key_position: column.key_position(),
            });
        } else {
            queue_columns.push(column);
        }
    }
    if queue_columns.is_empty()
        && let Some(mismatch) = crate::ddl::dialect_mismatch(db, dialect).await
    {
        return Err(mismatch);
    }
    check_layout(dialect, &queue, &tables)?;
    crate::ddl::judge_queue(
        &queue,
        &queue_columns,
        dialect,
        crate::ddl::differences::<M>,
    )?;
    Ok(true)
}

/// The verdict on the worker's tables from their columns (see [`check_start`]).
fn check_layout(dialect: Dialect, queue: &QueueName, columns: &[ActualColumn]) -> Result<()> {
    let (attempts_table, dead_table) = table_names(dialect);
    let missing: Vec<&str> = [attempts_table, dead_table]
        .into_iter()
        .filter(|table| !columns.iter().any(|c| c.table == *table))
        .collect();
    if !missing.is_empty() {
        return Err(Error::invalid_schema(
            None,
            format!(
                "the worker tables {} are missing: apply SchemaSetup::new().with_worker_tables()",
                missing.join(" and ")
            ),
        ));
    }
    let mut differences = layout_differences(dialect, ATTEMPTS_TABLE, ATTEMPTS_LAYOUT, columns);
    differences.extend(layout_differences(
        dialect,
        DEAD_LETTER_TABLE,
        DEAD_LETTER_LAYOUT,
        columns,
    ));
    if differences.is_empty() {
        Ok(())
    } else {
        Err(Error::SchemaDrift {
            queue: queue.clone(),
            differences,
        })
    }
}

/// What differs between `table` as the database has it and `expected`; empty when it fits.
/// `table` is the GoogleSQL name; the comparison is made with `dialect`'s names.
fn layout_differences(
    dialect: Dialect,
    table: &str,
    expected: &[Expected],
    columns: &[ActualColumn],
) -> Vec<String> {
    let (attempts_table, dead_table) = table_names(dialect);
    let table = if table == ATTEMPTS_TABLE {
        attempts_table
    } else {
        dead_table
    };
    let expected: Vec<(Cow<'static, str>, &str, Option<i64>)> = expected
        .iter()
        .map(|(name, family, position)| (column(dialect, name), *family, *position))
        .collect();
    let actual: Vec<&ActualColumn> = columns.iter().filter(|c| c.table == table).collect();
    let mut key: Vec<&ActualColumn> = actual
        .iter()
        .copied()
        .filter(|c| c.key_position.is_some())
        .collect();
    key.sort_by_key(|c| c.key_position);
    let key_names: Vec<&str> = key.iter().map(|c| c.name.as_str()).collect();
    let expected_key: Vec<&str> = expected
        .iter()
        .filter(|(_, _, position)| position.is_some())
        .map(|(name, _, _)| name.as_ref())
        .collect();
    if key_names.contains(&column(dialect, "MessageKey").as_ref()) {
        // The layout of versions before key digests: keys longer than about 8 KiB in their
        // text form did not fit Spanner's key size limit there.
        let fix = if table == attempts_table {
            format!(
                "its rows only count attempts of messages in flight: `DROP TABLE {table}`, then \
                 apply SchemaSetup::new().with_worker_tables() (counts start again)"
            )
        } else {
            format!(
                "replay or copy its rows first (DeadLetters), then `DROP TABLE {table}` and \
                 apply SchemaSetup::new().with_worker_tables()"
            )
        };
        return vec![format!(
            "the worker table {table} has the layout of an earlier version, keyed by the \
             message key's text ({}), which cannot hold long keys; this version keys it by \
             KeyDigest ({}). To migrate: {fix}",
            key_names.join(", "),
            expected_key.join(", ")
        )];
    }
    let mut out = Vec::new();
    if key_names != expected_key {
        out.push(format!(
            "the worker table {table} has the primary key ({}), expected ({})",
            key_names.join(", "),
            expected_key.join(", ")
        ));
    }
    for (name, family, _) in &expected {
        match actual.iter().find(|c| c.name.eq_ignore_ascii_case(name)) {
            None => out.push(format!("the worker table {table} has no column {name}")),
            Some(column) => {
                let actual_family = column
                    .spanner_type
                    .split('(')
                    .next()
                    .unwrap_or_default()
                    .trim();
                if !actual_family.eq_ignore_ascii_case(family) {
                    out.push(format!(
                        "column {table}.{name} is {}, expected {family}",
                        column.spanner_type
                    ));
                }
            }
        }
    }
    out
}

pub(super) fn row_key(queue: &QueueName, key: &MessageKey) -> KeySet {
    KeySet::from(message_key(queue, key))
}

fn message_key(queue: &QueueName, key: &MessageKey) -> Key {
    Key::new(vec![
        Value::from(queue.as_str().to_owned()),
        Value::from(key_digest(key)),
    ])
}

/// Every attempt row of a message (a key prefix).
pub(super) fn all_attempts(queue: &QueueName, key: &MessageKey) -> KeySet {
    KeySet::from(KeyRange::closed_closed(
        message_key(queue, key),
        message_key(queue, key),
    ))
}

pub(crate) fn truncate(text: &str) -> String {
    if text.len() <= MAX_ERROR_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_digests_are_fixed_size_versioned_and_pinned() {
        use crate::key::KeyValue;
        let short = MessageKey::new(vec![KeyValue::Int64(42)]);
        let digest = key_digest(&short);
        assert_eq!(digest.len(), DIGEST_LEN);
        assert_eq!(digest[0], DIGEST_V1);
        // Pinned: a change would orphan stored attempt rows and dead letters.
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "014894e72845e1b4e92ced5f8d3314b36a6067d28f8fd2a6ba9c0ebdf91ec49e58"
        );
        // Keys whose text form alone fills Spanner's 8 KiB key limit.
        for key in [
            MessageKey::new(vec![KeyValue::String("a".repeat(8180))]),
            MessageKey::new(vec![KeyValue::String("\u{1}".repeat(1500))]),
            MessageKey::new(vec![KeyValue::String("\"".repeat(4100))]),
            MessageKey::new(vec![KeyValue::Bytes(vec![0xff; 8000])]),
        ] {
            assert!(key.to_wire().len() > 8180, "{}", key.to_wire().len());
            assert_eq!(key_digest(&key).len(), DIGEST_LEN);
            assert_ne!(key_digest(&key), digest);
        }
    }

    fn column(table: &str, name: &str, ty: &str, key: Option<i64>) -> ActualColumn {
        ActualColumn {
            table: table.into(),
            name: name.into(),
            spanner_type: ty.into(),
            key_position: key,
        }
    }

    #[test]
    fn the_layout_check_names_the_old_layout_and_other_differences() {
        let current: Vec<ActualColumn> = ATTEMPTS_LAYOUT
            .iter()
            .map(|(name, ty, key)| column(ATTEMPTS_TABLE, name, &format!("{ty}(MAX)"), *key))
            .collect();
        assert!(
            layout_differences(
                Dialect::GoogleSql,
                ATTEMPTS_TABLE,
                ATTEMPTS_LAYOUT,
                &current
            )
            .is_empty()
        );

        let old = vec![
            column(ATTEMPTS_TABLE, "QueueName", "STRING(128)", Some(1)),
            column(ATTEMPTS_TABLE, "MessageKey", "STRING(MAX)", Some(2)),
            column(ATTEMPTS_TABLE, "AttemptId", "STRING(36)", Some(3)),
            column(ATTEMPTS_TABLE, "StartedAt", "TIMESTAMP", None),
            column(ATTEMPTS_TABLE, "ErrorText", "STRING(MAX)", None),
        ];
        let found = layout_differences(Dialect::GoogleSql, ATTEMPTS_TABLE, ATTEMPTS_LAYOUT, &old);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("earlier version"), "{}", found[0]);
        assert!(
            found[0].contains("DROP TABLE SpannerQueuesAttempts"),
            "{}",
            found[0]
        );

        let mut drifted = current.clone();
        drifted.retain(|c| c.name != "ErrorText");
        drifted[4].spanner_type = "INT64".into(); // StartedAt
        let found = layout_differences(
            Dialect::GoogleSql,
            ATTEMPTS_TABLE,
            ATTEMPTS_LAYOUT,
            &drifted,
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().any(|d| d.contains("no column ErrorText")));
        assert!(found.iter().any(|d| d.contains("StartedAt is INT64")));
    }

    #[test]
    fn postgresql_tables_have_snake_case_names_and_the_same_layout() {
        let pg = Dialect::PostgreSql;
        assert_eq!(super::column(pg, "DeadLetteredAt"), "dead_lettered_at");
        assert_eq!(super::column(pg, "KeyDigest"), "key_digest");
        assert_eq!(super::column(Dialect::GoogleSql, "KeyDigest"), "KeyDigest");
        // The layout as a PostgreSQL database reports it, types already mapped back.
        let types = [
            "character varying(128)",
            "bytea",
            "character varying(36)",
            "character varying",
            "timestamp with time zone",
            "character varying",
        ];
        let current: Vec<ActualColumn> = ATTEMPTS_LAYOUT
            .iter()
            .zip(types)
            .map(|((name, _, key), ty)| {
                column(
                    ATTEMPTS_TABLE_POSTGRESQL,
                    &super::column(pg, name),
                    &crate::types::google_sql_type(ty),
                    *key,
                )
            })
            .collect();
        assert!(
            layout_differences(pg, ATTEMPTS_TABLE, ATTEMPTS_LAYOUT, &current).is_empty(),
            "{:?}",
            layout_differences(pg, ATTEMPTS_TABLE, ATTEMPTS_LAYOUT, &current)
        );
        let mut drifted = current;
        drifted[4].spanner_type = crate::types::google_sql_type("bigint");
        let found = layout_differences(pg, ATTEMPTS_TABLE, ATTEMPTS_LAYOUT, &drifted);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("started_at is INT64"), "{}", found[0]);
        let ddl = schema_statements(pg);
        assert!(
            ddl[1].contains("PRIMARY KEY (queue_name, key_digest)"),
            "{}",
            ddl[1]
        );
        assert!(
            ddl[1].ends_with("TTL INTERVAL '30 days' ON dead_lettered_at"),
            "{}",
            ddl[1]
        );
    }

    #[test]
    fn long_errors_are_cut_at_a_character_boundary() {
        let text = "é".repeat(MAX_ERROR_TEXT);
        let cut = truncate(&text);
        assert!(cut.len() <= MAX_ERROR_TEXT && cut.len() >= MAX_ERROR_TEXT - 1);
        assert!(text.starts_with(&cut));
        assert_eq!(truncate("short"), "short");
    }
}
