//! The worker's own tables: attempt counts and dead letters.

use std::fmt;
use std::time::{Duration, SystemTime};

use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient};
use google_cloud_spanner::key::{Key, KeyRange, KeySet};
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::read::ReadRequest;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::transaction::ReadWriteTransaction;
use google_cloud_spanner::value::Value;

use std::borrow::Cow;

use crate::codec::{Payload, PayloadKind};
use crate::database::Database;
use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::query::query_rows;
use crate::queue::Params;
use crate::queue::{DeliverAt, Queue};
use crate::transaction::TransactionSettings;

/// The table counting attempts per message.
pub const ATTEMPTS_TABLE: &str = "SpannerQueuesAttempts";
/// The dead-letter table.
pub const DEAD_LETTER_TABLE: &str = "SpannerQueuesDeadLetters";
/// The table counting attempts per message, in PostgreSQL-dialect databases.
pub const ATTEMPTS_TABLE_POSTGRESQL: &str = "spanner_queues_attempts";
/// The dead-letter table, in PostgreSQL-dialect databases.
pub const DEAD_LETTER_TABLE_POSTGRESQL: &str = "spanner_queues_dead_letters";
/// Longest error text stored (in bytes); longer texts are cut at a character boundary.
pub const MAX_ERROR_TEXT: usize = 4096;

/// The DDL of the worker's tables in `dialect` (`CREATE TABLE IF NOT EXISTS`), to apply once per
/// database,
/// for instance with [`admin::apply_ddl`](crate::admin::apply_ddl) or [`ensure_tables`].
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
/// use spanner_queues::Dialect;
///
/// let ddl = spanner_queues::worker::schema_statements(Dialect::GoogleSql);
/// assert!(ddl[0].starts_with("CREATE TABLE IF NOT EXISTS SpannerQueuesAttempts"));
/// assert!(ddl[1].contains("ROW DELETION POLICY"));
/// let pg = spanner_queues::worker::schema_statements(Dialect::PostgreSql);
/// assert!(pg[0].starts_with("CREATE TABLE IF NOT EXISTS spanner_queues_attempts"));
/// ```
pub fn schema_statements(dialect: Dialect) -> Vec<String> {
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

/// Creates the worker's tables if they do not exist, in the database's dialect, and waits for
/// the schema change.
///
/// # Errors
/// Spanner's error if the DDL is refused.
pub async fn ensure_tables(admin: &DatabaseAdmin, database: &str) -> Result<()> {
    let dialect = crate::ddl::database_dialect(admin, database).await?;
    crate::ddl::apply_ddl(admin, database, schema_statements(dialect)).await
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

/// Checks that the worker's tables exist and have this version's layout.
///
/// # Errors
/// [`Error::InvalidSchema`] naming the fix when a table is missing; [`Error::SchemaDrift`]
/// (about `queue`, the queue the worker serves) when a table has another layout, such as the
/// one of earlier versions keyed by the key's text. Other Spanner errors are logged and
/// ignored (the worker retries its own transactions anyway).
pub(crate) async fn check_tables(
    db: &DatabaseClient,
    dialect: Dialect,
    queue: &QueueName,
) -> Result<()> {
    let (attempts_table, dead_table) = table_names(dialect);
    let columns = match read_layout(db, dialect).await {
        Ok(columns) => columns,
        Err(error) => {
            tracing::warn!(error = %crate::telemetry::ErrorChain(&error), "could not check the worker tables");
            return Ok(());
        }
    };
    let missing: Vec<&str> = [attempts_table, dead_table]
        .into_iter()
        .filter(|table| !columns.iter().any(|c| c.table == *table))
        .collect();
    if !missing.is_empty() {
        return Err(Error::invalid_schema(
            None,
            format!(
                "the worker tables {} are missing: apply spanner_queues::worker::schema_statements(Dialect::{dialect:?})",
                missing.join(" and ")
            ),
        ));
    }
    let mut differences = layout_differences(dialect, ATTEMPTS_TABLE, ATTEMPTS_LAYOUT, &columns);
    differences.extend(layout_differences(
        dialect,
        DEAD_LETTER_TABLE,
        DEAD_LETTER_LAYOUT,
        &columns,
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

async fn read_layout(db: &DatabaseClient, dialect: Dialect) -> Result<Vec<ActualColumn>> {
    let (attempts, dead) = table_names(dialect);
    let statement = match dialect {
        Dialect::GoogleSql => Statement::builder(
            "SELECT c.TABLE_NAME, c.COLUMN_NAME, c.SPANNER_TYPE, k.ORDINAL_POSITION \
             FROM INFORMATION_SCHEMA.COLUMNS AS c \
             LEFT JOIN INFORMATION_SCHEMA.INDEX_COLUMNS AS k \
               ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME \
              AND k.COLUMN_NAME = c.COLUMN_NAME AND k.INDEX_NAME = 'PRIMARY_KEY' \
             WHERE c.TABLE_SCHEMA = '' AND (c.TABLE_NAME = @attempts OR c.TABLE_NAME = @dead) \
             ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION",
        )
        .add_param("attempts", attempts)
        .add_param("dead", dead)
        .build(),
        Dialect::PostgreSql => Statement::builder(
            "SELECT c.table_name, c.column_name, c.spanner_type, k.ordinal_position \
             FROM information_schema.columns AS c \
             LEFT JOIN information_schema.index_columns AS k \
               ON k.table_schema = c.table_schema AND k.table_name = c.table_name \
              AND k.column_name = c.column_name AND k.index_name = 'PRIMARY_KEY' \
             WHERE c.table_schema = 'public' AND (c.table_name = $1 OR c.table_name = $2) \
             ORDER BY c.table_name, c.ordinal_position",
        )
        .add_param("p1", attempts)
        .add_param("p2", dead)
        .build(),
    };
    query_rows(db, statement, |row| {
        let spanner_type: String = row.get(2)?;
        Ok(ActualColumn {
            table: row.get(0)?,
            name: row.get(1)?,
            spanner_type: match dialect {
                Dialect::GoogleSql => spanner_type,
                Dialect::PostgreSql => crate::types::google_sql_type(&spanner_type),
            },
            key_position: row.get(3)?,
        })
    })
    .await
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
                 apply spanner_queues::worker::schema_statements(Dialect::{dialect:?}) (counts start again)"
            )
        } else {
            format!(
                "replay or copy its rows first (DeadLetters), then `DROP TABLE {table}` and \
                 apply spanner_queues::worker::schema_statements(Dialect::{dialect:?})"
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

fn row_key(queue: &QueueName, key: &MessageKey) -> KeySet {
    KeySet::from(message_key(queue, key))
}

fn message_key(queue: &QueueName, key: &MessageKey) -> Key {
    Key::new(vec![
        Value::from(queue.as_str().to_owned()),
        Value::from(key_digest(key)),
    ])
}

/// Every attempt row of a message (a key prefix).
fn all_attempts(queue: &QueueName, key: &MessageKey) -> KeySet {
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

/// Counts the attempt rows of a message inside `tx`.
async fn count_attempts(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
) -> google_cloud_spanner::Result<i64> {
    let mut params = Params::new(dialect);
    let (queue_param, queue_at) = params.next("queue");
    let (key_param, key_at) = params.next("key");
    let statement = Statement::builder(format!(
        "SELECT COUNT(*) FROM {} WHERE {} = {queue_at} AND {} = {key_at}",
        table_names(dialect).0,
        column(dialect, "QueueName"),
        column(dialect, "KeyDigest"),
    ))
    .add_param(queue_param, queue.as_str().to_owned())
    .add_typed_param(
        key_param,
        key_digest(key),
        google_cloud_spanner::types::bytes(),
    )
    .build();
    let mut rows = tx.execute_query(statement).await?;
    match rows.next().await {
        Some(row) => row?.get::<i64>(0),
        None => Ok(0),
    }
}

/// An attempt that has been counted.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    /// 1-based: the number of attempt rows of the message, this one included.
    pub(crate) number: u32,
    pub(crate) id: String,
    pub(crate) started_at: SystemTime,
    /// The error of the most recent earlier attempt that recorded one.
    pub(crate) previous_error: Option<String>,
}

/// An attempt row as read back: its id, start time and error.
type AttemptRow = (String, SystemTime, Option<String>);

/// One message whose attempt is starting, in a batch of [`start_attempts`].
#[derive(Debug, Clone)]
pub(crate) struct StartRequest {
    pub(crate) key: MessageKey,
    /// Write the attempt's row now (an external handler: a crash or lost lease must count),
    /// or only read the count (a transactional handler: the attempt is recorded with its
    /// failure, and its success deletes the rows with the ack).
    pub(crate) write: bool,
}

/// Starts the attempts of a batch of messages: one blind write of the rows to write (one
/// commit that cannot conflict with other transactions, however many messages), then one
/// strong read of every message's attempt rows. Returns one [`Attempt`] per request, in order.
pub(crate) async fn start_attempts(
    db: &DatabaseClient,
    dialect: Dialect,
    queue: &QueueName,
    requests: &[StartRequest],
) -> Result<Vec<Attempt>> {
    let started_at = SystemTime::now();
    let ids: Vec<String> = requests
        .iter()
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let digests: Vec<Vec<u8>> = requests.iter().map(|r| key_digest(&r.key)).collect();
    let rows: Vec<Mutation> = requests
        .iter()
        .zip(&ids)
        .zip(&digests)
        .filter(|((request, _), _)| request.write)
        .map(|((request, id), digest)| {
            let c = |name| column(dialect, name);
            Mutation::new_insert_or_update_builder(table_names(dialect).0)
                .set(c("QueueName"))
                .to(queue.as_str().to_owned())
                .set(c("KeyDigest"))
                .to(digest.clone())
                .set(c("AttemptId"))
                .to(id.clone())
                .set(c("MessageKey"))
                .to(request.key.to_wire())
                .set(c("StartedAt"))
                .to(started_at)
                .build()
        })
        .collect();
    if !rows.is_empty() {
        // At least once is enough: the write is idempotent (same rows, same values).
        db.write_only_transaction()
            .build()
            .write_at_least_once(rows)
            .await?;
    }
    let mut unique = digests.clone();
    unique.sort();
    unique.dedup();
    // A keyed read (each message's rows are a key prefix), not a query: the same rows, without
    // a statement to compile, and the same in both dialects.
    let keys = unique
        .into_iter()
        .fold(KeySet::builder(), |keys, digest| {
            let prefix = Key::new(vec![
                Value::from(queue.as_str().to_owned()),
                Value::from(digest),
            ]);
            keys.add_range(KeyRange::closed_closed(prefix.clone(), prefix))
        })
        .build();
    let c = |name| column(dialect, name).into_owned();
    let read = ReadRequest::builder(
        table_names(dialect).0,
        vec![
            c("KeyDigest"),
            c("AttemptId"),
            c("StartedAt"),
            c("ErrorText"),
        ],
    )
    .with_keys(keys)
    .build();
    let mut result = db.single_use().build().execute_read(read).await?;
    let mut found: std::collections::HashMap<Vec<u8>, Vec<AttemptRow>> =
        std::collections::HashMap::new();
    while let Some(row) = result.next().await {
        let row = row?;
        let digest: Vec<u8> = row.get(0)?;
        found
            .entry(digest)
            .or_default()
            .push((row.get(1)?, row.get(2)?, row.get(3)?));
    }
    let none = Vec::new();
    Ok(requests
        .iter()
        .zip(ids)
        .zip(&digests)
        .map(|((_, id), digest)| {
            let rows = found.get(digest).unwrap_or(&none);
            attempt_from(rows, id, started_at)
        })
        .collect())
}

/// The attempt `id` of a message whose attempt rows are `rows` (its own among them if it was
/// written): one more than the others.
fn attempt_from(rows: &[AttemptRow], id: String, started_at: SystemTime) -> Attempt {
    let others = rows.iter().filter(|(other, _, _)| *other != id);
    let earlier = u32::try_from(others.clone().count()).unwrap_or(u32::MAX);
    let previous = others
        .filter_map(|(_, at, error)| error.as_ref().map(|e| (*at, e)))
        .max_by_key(|(at, _)| *at)
        .map(|(_, error)| error.clone());
    Attempt {
        number: earlier.saturating_add(1),
        id,
        started_at,
        previous_error: previous,
    }
}

fn attempt_row(
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
    attempt: &Attempt,
    error: Option<&str>,
) -> Mutation {
    let c = |name| column(dialect, name);
    let builder = Mutation::new_insert_or_update_builder(table_names(dialect).0)
        .set(c("QueueName"))
        .to(queue.as_str().to_owned())
        .set(c("KeyDigest"))
        .to(key_digest(key))
        .set(c("AttemptId"))
        .to(attempt.id.clone())
        .set(c("MessageKey"))
        .to(key.to_wire())
        .set(c("StartedAt"))
        .to(attempt.started_at);
    match error {
        Some(error) => builder.set(c("ErrorText")).to(truncate(error)).build(),
        None => builder.build(),
    }
}

/// Buffers the deletion of every attempt row of a message (it was acked or dead-lettered).
pub(crate) fn forget_attempts(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
) -> google_cloud_spanner::Result<()> {
    tx.buffer([Mutation::delete(
        table_names(dialect).0,
        all_attempts(queue, key),
    )])
}

/// Buffers the error of a failed attempt into its row.
pub(crate) fn record_failure(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
    attempt: &Attempt,
    error: &str,
) -> google_cloud_spanner::Result<()> {
    tx.buffer([attempt_row(dialect, queue, key, attempt, Some(error))])
}

/// Buffers the deletion of one attempt's row (an attempt interrupted by shutdown).
pub(crate) fn drop_attempt(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
    attempt: &Attempt,
) -> google_cloud_spanner::Result<()> {
    let mut parts = vec![
        Value::from(queue.as_str().to_owned()),
        Value::from(key_digest(key)),
    ];
    parts.push(Value::from(attempt.id.clone()));
    tx.buffer([Mutation::delete(
        table_names(dialect).0,
        KeySet::from(Key::new(parts)),
    )])
}

/// A message on its way to the dead-letter table.
pub(crate) struct Letter<'a> {
    pub(crate) key: &'a MessageKey,
    pub(crate) payload: &'a Payload,
    /// `None` counts the attempt rows (a message dead-lettered before any attempt, such as an
    /// undecodable one, counts the attempt it was received for).
    pub(crate) attempts: Option<u32>,
    pub(crate) error: &'a str,
    /// Delete the message's attempt rows in the same transaction (not when they are what
    /// failed).
    pub(crate) forget_attempts: bool,
}

/// Acks a message and records it in the dead-letter table, in one transaction.
pub(crate) async fn dead_letter<M: QueueMessage>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    queue: &Queue<M>,
    letter: Letter<'_>,
) -> Result<()> {
    let Letter {
        key,
        payload,
        attempts,
        error,
        forget_attempts,
    } = letter;
    let dialect = queue.dialect();
    let (queue, key, payload, error) =
        (queue.clone(), key.clone(), payload.clone(), truncate(error));
    crate::transaction::builder(db)
        .with_settings(settings.clone())
        .run(move |tx: ReadWriteTransaction| {
            let (queue, key, payload, error) =
                (queue.clone(), key.clone(), payload.clone(), error.clone());
            async move {
                let name = M::QUEUE;
                queue.ack_key(&tx, key.clone()).await?;
                let attempts = match attempts {
                    Some(n) => i64::from(n),
                    None => count_attempts(&tx, dialect, &name, &key)
                        .await?
                        .saturating_add(1),
                };
                let (attempts_table, dead_table) = table_names(dialect);
                if forget_attempts {
                    tx.buffer([Mutation::delete(attempts_table, all_attempts(&name, &key))])?;
                }
                let c = |name| column(dialect, name);
                tx.buffer([Mutation::new_insert_or_update_builder(dead_table)
                    .set(c("QueueName"))
                    .to(name.as_str().to_owned())
                    .set(c("KeyDigest"))
                    .to(key_digest(&key))
                    .set(c("MessageKey"))
                    .to(key.to_wire())
                    .set(c("KeyText"))
                    .to(key.to_string())
                    .set(c("Payload"))
                    .to(payload.as_bytes().to_vec())
                    .set(c("PayloadKind"))
                    .to(payload.kind().to_string())
                    .set(c("Attempts"))
                    .to(attempts)
                    .set(c("ErrorText"))
                    .to(error)
                    .set(c("DeadLetteredAt"))
                    .to(SystemTime::now())
                    .build()])?;
                Ok(())
            }
        })
        .await
}

/// A message in the dead-letter table.
#[derive(Clone)]
pub struct DeadLetter {
    queue: QueueName,
    key: MessageKey,
    payload: Payload,
    attempts: u32,
    error: String,
    dead_lettered_at: SystemTime,
}

impl DeadLetter {
    /// The queue the message came from.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// The message key.
    pub fn key(&self) -> &MessageKey {
        &self.key
    }

    /// The payload exactly as it was in the queue.
    pub fn payload(&self) -> &Payload {
        &self.payload
    }

    /// Attempts made (including the one that dead-lettered it).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The last error (handler error, panic message, timeout, or decode error).
    pub fn error(&self) -> &str {
        &self.error
    }

    /// When it was dead-lettered (this worker's clock).
    pub fn dead_lettered_at(&self) -> SystemTime {
        self.dead_lettered_at
    }

    /// Decodes the payload as `M`.
    ///
    /// # Errors
    /// [`Error::Decode`] if it does not match `M` (it may be why it was dead-lettered).
    pub fn decode<M: QueueMessage>(&self) -> Result<M> {
        M::decode_parts(self.key.clone(), self.payload.clone())
    }
}

impl fmt::Debug for DeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetter")
            .field("queue", &self.queue)
            .field("key", &self.key)
            .field("payload", &self.payload)
            .field("attempts", &self.attempts)
            .field("error", &self.error)
            .finish()
    }
}

/// Inspects, replays and discards dead letters.
///
/// ```no_run
/// # use spanner_queues::QueueMessage;
/// # #[derive(QueueMessage)]
/// # #[queue(name = "OrderEmails")]
/// # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
/// use spanner_queues::worker::DeadLetters;
///
/// async fn retry_all(db: google_cloud_spanner::client::DatabaseClient) -> spanner_queues::Result<()> {
///     let dead = DeadLetters::new(db);
///     for letter in dead.list::<OrderEmail>(100).await? {
///         eprintln!("{} failed {} times: {}", letter.key(), letter.attempts(), letter.error());
///         dead.replay::<OrderEmail>(letter.key()).await?;
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct DeadLetters {
    db: Database,
    settings: TransactionSettings,
}

impl DeadLetters {
    /// Dead letters of the database behind `db`, in its dialect (a bare `DatabaseClient` is
    /// taken to be GoogleSQL: see [`Database`]).
    pub fn new(db: impl Into<Database>) -> Self {
        Self {
            db: db.into(),
            settings: TransactionSettings::default(),
        }
    }

    /// Settings of the replay and delete transactions.
    pub fn with_transaction_settings(mut self, settings: TransactionSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Up to `limit` dead letters of the queue of `M`, oldest first.
    ///
    /// # Errors
    /// Spanner errors; [`Error::InvalidSchema`] for a row this crate cannot read back.
    pub async fn list<M: QueueMessage>(&self, limit: usize) -> Result<Vec<DeadLetter>> {
        self.list_by_name(&M::QUEUE, limit).await
    }

    /// Up to `limit` dead letters of `queue`, oldest first: [`list`](Self::list) for a queue
    /// known by name only (an operations tool, a queue of another service).
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn list_by_name(&self, queue: &QueueName, limit: usize) -> Result<Vec<DeadLetter>> {
        let dialect = self.db.dialect();
        let c = |name| column(dialect, name);
        let mut params = Params::new(dialect);
        let (queue_param, queue_at) = params.next("queue");
        let (limit_param, limit_at) = params.next("limit");
        let statement = Statement::builder(format!(
            "SELECT {} FROM {} WHERE {} = {queue_at} ORDER BY {}, {} LIMIT {limit_at}",
            letter_columns(dialect),
            table_names(dialect).1,
            c("QueueName"),
            c("DeadLetteredAt"),
            c("KeyDigest"),
        ))
        .add_param(queue_param, queue.as_str().to_owned())
        .add_param(limit_param, i64::try_from(limit).unwrap_or(i64::MAX))
        .build();
        query_rows(&self.db, statement, |row| read_dead_letter(queue, row)).await
    }

    /// The dead letter of `key` in `queue`, if any.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn get(&self, queue: &QueueName, key: &MessageKey) -> Result<Option<DeadLetter>> {
        let letters = query_rows(&self.db, select_one(self.db.dialect(), queue, key), |row| {
            read_dead_letter(queue, row)
        })
        .await?;
        Ok(letters.into_iter().next())
    }

    /// Sends the dead letter of `key` back to the queue of `M` (same payload, deliverable now)
    /// and deletes it from the dead-letter table, in one transaction. Its attempt count starts
    /// again from zero. Returns `false` if there was no such dead letter.
    ///
    /// # Errors
    /// [`Error::AlreadyQueued`] if a message with that key is in the queue again; Spanner
    /// errors; [`Error::OutcomeUnknown`] (then check with [`get`](Self::get)).
    pub async fn replay<M: QueueMessage>(&self, key: &MessageKey) -> Result<bool> {
        let key = key.clone();
        let dialect = self.db.dialect();
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let key = key.clone();
                async move {
                    let name = M::QUEUE;
                    let mut rows = tx.execute_query(select_one(dialect, &name, &key)).await?;
                    let letter = match rows.next().await {
                        Some(row) => read_dead_letter(&name, &row?)?,
                        None => return Ok(false),
                    };
                    Queue::<M>::in_dialect(dialect)
                        .send_raw(&tx, key.clone(), letter.payload, DeliverAt::Now)
                        .await?;
                    let (attempts_table, dead_table) = table_names(dialect);
                    tx.buffer([
                        Mutation::delete(dead_table, row_key(&name, &key)),
                        Mutation::delete(attempts_table, all_attempts(&name, &key)),
                    ])?;
                    Ok(true)
                }
            })
            .await
    }

    /// Deletes the dead letter of `key` in `queue` for good. Returns whether there was one.
    ///
    /// # Errors
    /// Spanner errors.
    pub async fn delete(&self, queue: &QueueName, key: &MessageKey) -> Result<bool> {
        let statement = delete_one(self.db.dialect(), queue, key, "");
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let statement = statement.clone();
                async move { Ok(tx.execute_update(statement).await? > 0) }
            })
            .await
    }

    /// Deletes the dead letter of `key` in `queue`, and any attempt rows of that key, inside
    /// the caller's read-write transaction: for a replay done by other means (a tool that sends
    /// the payload back by queue name), so that the send and the deletion commit together.
    ///
    /// # Errors
    /// Spanner's `OUT_OF_RANGE` (`ASSERT_ROWS_MODIFIED`) when there is no such dead letter: let
    /// it roll the transaction back. Other Spanner errors.
    pub async fn delete_in(
        &self,
        tx: &ReadWriteTransaction,
        queue: &QueueName,
        key: &MessageKey,
    ) -> Result<()> {
        let dialect = self.db.dialect();
        tx.execute_update(delete_one(dialect, queue, key, " ASSERT_ROWS_MODIFIED 1"))
            .await?;
        tx.buffer([Mutation::delete(
            table_names(dialect).0,
            all_attempts(queue, key),
        )])?;
        Ok(())
    }
}

/// `DELETE` of one dead letter; `assert` is appended (`" ASSERT_ROWS_MODIFIED 1"` or `""`).
fn delete_one(dialect: Dialect, queue: &QueueName, key: &MessageKey, assert: &str) -> Statement {
    let (condition, builder) = one_letter(dialect, queue, key);
    builder(format!(
        "DELETE FROM {} WHERE {condition}{assert}",
        table_names(dialect).1
    ))
}

fn select_one(dialect: Dialect, queue: &QueueName, key: &MessageKey) -> Statement {
    let (condition, builder) = one_letter(dialect, queue, key);
    builder(format!(
        "SELECT {} FROM {} WHERE {condition}",
        letter_columns(dialect),
        table_names(dialect).1
    ))
}

/// The columns [`read_dead_letter`] reads, in its order.
fn letter_columns(dialect: Dialect) -> String {
    [
        "MessageKey",
        "Payload",
        "PayloadKind",
        "Attempts",
        "ErrorText",
        "DeadLetteredAt",
    ]
    .map(|name| column(dialect, name))
    .join(", ")
}

/// The condition selecting one dead letter, and what binds its parameters to a statement.
fn one_letter(
    dialect: Dialect,
    queue: &QueueName,
    key: &MessageKey,
) -> (String, impl FnOnce(String) -> Statement) {
    let mut params = Params::new(dialect);
    let (queue_param, queue_at) = params.next("queue");
    let (key_param, key_at) = params.next("key");
    let condition = format!(
        "{} = {queue_at} AND {} = {key_at}",
        column(dialect, "QueueName"),
        column(dialect, "KeyDigest")
    );
    let (queue, digest) = (queue.as_str().to_owned(), key_digest(key));
    (condition, move |sql: String| {
        Statement::builder(sql)
            .add_param(queue_param, queue)
            .add_typed_param(key_param, digest, google_cloud_spanner::types::bytes())
            .build()
    })
}

fn read_dead_letter(
    queue: &QueueName,
    row: &google_cloud_spanner::result::Row,
) -> Result<DeadLetter> {
    let bad = |what: &str| Error::invalid_schema(Some(DEAD_LETTER_TABLE), what.to_owned());
    let wire: String = row.get(0)?;
    let key = MessageKey::from_wire(&wire).ok_or_else(|| bad("unreadable MessageKey"))?;
    let bytes: Vec<u8> = row.get(1)?;
    let kind: String = row.get(2)?;
    let payload = payload_from(&kind, bytes).ok_or_else(|| bad("unreadable payload"))?;
    let attempts: i64 = row.get(3)?;
    let error: String = row.get(4)?;
    let dead_lettered_at: SystemTime = row.get(5)?;
    Ok(DeadLetter {
        queue: queue.clone(),
        key,
        payload,
        attempts: u32::try_from(attempts).unwrap_or(0),
        error,
        dead_lettered_at,
    })
}

/// Rebuilds a payload stored as bytes plus its kind.
fn payload_from(kind: &str, bytes: Vec<u8>) -> Option<Payload> {
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).ok();
    match kind {
        k if k == PayloadKind::Bytes.to_string() => Some(Payload::Bytes(bytes)),
        k if k == PayloadKind::String.to_string() => text(bytes).map(Payload::String),
        k if k == PayloadKind::Json.to_string() => text(bytes).map(Payload::Json),
        _ => None,
    }
}

/// How long to wait at most for worker-table transactions at shutdown.
pub(crate) const SHUTDOWN_RELEASE_BUDGET: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_survive_the_dead_letter_round_trip() {
        for payload in [
            Payload::Bytes(vec![0, 159, 146, 150]),
            Payload::String("héllo".into()),
            Payload::Json(r#"{"a":1}"#.into()),
        ] {
            let kind = payload.kind().to_string();
            let back = payload_from(&kind, payload.as_bytes().to_vec());
            assert_eq!(back, Some(payload));
        }
        assert_eq!(payload_from("STRING", vec![0xff]), None);
        assert_eq!(payload_from("XML", vec![]), None);
    }

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
