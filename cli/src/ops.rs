//! What each command does against the database.

use std::collections::BTreeMap;
use std::time::SystemTime;

use base64::Engine as _;
use google_cloud_lro::Poller as _;
use google_cloud_spanner::client::{DatabaseAdmin, DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::types::{self, Type};
use google_cloud_spanner::value::Value;
use spanner_queues::Dialect;
use spanner_queues::codec::Payload;
use spanner_queues::error::Code;
use spanner_queues::ident::{ColumnName, QueueName};
use spanner_queues::key::{KeyColumn, KeyType, KeyValue};
use spanner_queues::outcome::CommitMarkers;
use spanner_queues::schema::{
    AlterQueue, AlterQueueAction, Length, PayloadType, QueueOptions, QueueSchema, SpannerType,
    google_sql_type,
};
use spanner_queues::worker::{
    DEAD_LETTER_TABLE, DEAD_LETTER_TABLE_POSTGRESQL, DeadLetter, DeadLetters,
};

use crate::{EXIT_CONFLICT, EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE};

/// A failure with its exit status.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl CliError {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn usage(message: impl Into<String>) -> Self {
        Self::new(EXIT_USAGE, message)
    }

    fn not_found(message: impl Into<String>) -> Self {
        Self::new(EXIT_NOT_FOUND, message)
    }

    /// A Spanner or SDK error while `doing`, with its cause chain; NOT_FOUND and ALREADY_EXISTS
    /// keep their exit statuses.
    fn from_error(doing: &str, error: impl Into<spanner_queues::Error>) -> Self {
        let error: spanner_queues::Error = error.into();
        let code = match error.code() {
            Some(Code::NotFound) => EXIT_NOT_FOUND,
            Some(Code::AlreadyExists) => EXIT_CONFLICT,
            _ => EXIT_FAILED,
        };
        Self::new(code, format!("{doing}: {}", chain(&error)))
    }
}

/// An error and its sources on one line.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// A connection to one database.
#[derive(Debug)]
pub(crate) struct Session {
    path: String,
    db: DatabaseClient,
    /// The same client with the database's dialect, for the SDK's API.
    database: spanner_queues::Database,
    dialect: Dialect,
    admin: DatabaseAdmin,
}

/// One queue in the `queues` listing.
#[derive(Debug)]
pub(crate) struct QueueInfo {
    pub(crate) name: String,
    pub(crate) depth: i64,
    pub(crate) due: i64,
    pub(crate) scheduled: i64,
    /// Milliseconds since the oldest due message became deliverable.
    pub(crate) oldest_due_ms: Option<i64>,
    pub(crate) paused: bool,
    /// `None` when the database has no dead-letter table.
    pub(crate) dead_letters: Option<i64>,
}

/// One message shown by `peek`.
#[derive(Debug)]
pub(crate) struct Peeked {
    pub(crate) key: Vec<String>,
    pub(crate) deliver_time: String,
    pub(crate) due: bool,
    pub(crate) payload: String,
    pub(crate) truncated: bool,
}

/// One dead letter, ready to print.
#[derive(Debug)]
pub(crate) struct Letter {
    pub(crate) queue: String,
    /// The key as the SDK prints it, e.g. `(42, "abc")`.
    pub(crate) key: String,
    /// The key values as `--key` takes them.
    pub(crate) key_parts: Vec<String>,
    pub(crate) attempts: u32,
    pub(crate) error: String,
    pub(crate) dead_lettered_at: String,
    /// Text payloads as they are; binary ones as `base64:…`.
    pub(crate) payload: String,
    pub(crate) payload_kind: String,
}

/// A queue's columns.
#[derive(Debug)]
struct Columns {
    keys: Vec<(String, String)>,
    payload: String,
}

/// Payload characters shown by `peek` without `--full`.
const PREVIEW: usize = 80;
/// Dead letters read per queue when looking one up by key.
const LOOKUP_LIMIT: usize = 100_000;

fn queue_name(queue: &str) -> Result<QueueName, CliError> {
    QueueName::new(queue)
        .map_err(|e| CliError::usage(format!("`{queue}` is not a queue name: {e}")))
}

/// Validates `projects/P/instances/I/databases/D`.
fn database_path(path: &str) -> Result<(), CliError> {
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

impl Session {
    /// Connects (honouring `SPANNER_EMULATOR_HOST`) and checks that the database exists.
    pub(crate) async fn connect(database: Option<&str>) -> Result<Self, CliError> {
        let path = database.filter(|d| !d.is_empty()).ok_or_else(|| {
            CliError::usage(
                "no database: pass --database projects/P/instances/I/databases/D or set \
                 SPANNER_QUEUES_DATABASE",
            )
        })?;
        database_path(path)?;
        let spanner = Spanner::builder().build().await.map_err(|e| {
            CliError::new(
                EXIT_FAILED,
                format!("cannot build a Spanner client: {}", chain(&e)),
            )
        })?;
        let admin = spanner
            .database_admin_builder()
            .build()
            .await
            .map_err(|e| {
                CliError::new(
                    EXIT_FAILED,
                    format!("cannot build a Spanner admin client: {}", chain(&e)),
                )
            })?;
        let db = spanner
            .database_client(path)
            .build()
            .await
            .map_err(|e| CliError::from_error(&format!("opening database {path}"), e))?;
        // Checked on the data plane: the emulator's REST gateway answers GetDatabase for a
        // missing database with INTERNAL ("failed to marshal error message"), not NOT_FOUND.
        // The same read learns the database's dialect.
        let database = spanner_queues::Database::connect(db.clone())
            .await
            .map_err(|e| {
                let error = CliError::from_error(&format!("opening database {path}"), e);
                if error.code == EXIT_NOT_FOUND {
                    CliError::not_found(format!("database {path} not found"))
                } else {
                    error
                }
            })?;
        // Statements below are written for GoogleSQL or, in the other arm, PostgreSQL.
        if !matches!(database.dialect(), Dialect::GoogleSql | Dialect::PostgreSql) {
            return Err(CliError::usage(format!(
                "database {path} has a SQL dialect this command line does not know: {:?}",
                database.dialect()
            )));
        }
        Ok(Self {
            path: path.to_owned(),
            db,
            dialect: database.dialect(),
            database,
            admin,
        })
    }

    fn postgres(&self) -> bool {
        self.dialect == Dialect::PostgreSql
    }

    /// The worker's dead-letter table in this database's dialect.
    fn dead_letter_table(&self) -> &'static str {
        match self.dialect {
            Dialect::GoogleSql => DEAD_LETTER_TABLE,
            _ => DEAD_LETTER_TABLE_POSTGRESQL,
        }
    }

    /// The dead-letter table's queue-name column.
    fn queue_name_column(&self) -> &'static str {
        match self.dialect {
            Dialect::GoogleSql => "QueueName",
            _ => "queue_name",
        }
    }

    /// A column name as written in this dialect's SQL (PostgreSQL: quoted, as
    /// `information_schema` spells it).
    fn column_sql(&self, name: &str) -> String {
        match self.dialect {
            Dialect::GoogleSql => name.to_owned(),
            _ => format!("\"{}\"", name.replace('"', "\"\"")),
        }
    }

    /// The `deliver_time` / `DeliverTime` column.
    fn deliver_time(&self) -> &'static str {
        match self.dialect {
            Dialect::GoogleSql => "DeliverTime",
            _ => "deliver_time",
        }
    }

    /// The `payload` / `Payload` column.
    fn payload_column(&self) -> &'static str {
        match self.dialect {
            Dialect::GoogleSql => "Payload",
            _ => "payload",
        }
    }

    /// Refuses what PostgreSQL-dialect databases cannot do.
    fn require_google_sql(&self, what: &str, why: &str) -> Result<(), CliError> {
        if self.postgres() {
            return Err(CliError::usage(format!(
                "{what} is not available on the PostgreSQL-dialect database {}: {why}",
                self.path
            )));
        }
        Ok(())
    }

    async fn rows(&self, statement: Statement, doing: &str) -> Result<Vec<Vec<Value>>, CliError> {
        let read = async {
            let mut rows = self
                .db
                .single_use()
                .build()
                .execute_query(statement)
                .await?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().await {
                out.push(row?.into_values());
            }
            Ok::<_, google_cloud_spanner::Error>(out)
        };
        read.await.map_err(|e| CliError::from_error(doing, e))
    }

    async fn query<T: google_cloud_spanner::result::FromRow>(
        &self,
        statement: Statement,
        doing: &str,
    ) -> Result<Vec<T>, CliError> {
        let read = async {
            let mut rows = self
                .db
                .single_use()
                .build()
                .execute_query(statement)
                .await?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().await {
                out.push(row?.try_into_record::<T>()?);
            }
            Ok::<_, google_cloud_spanner::Error>(out)
        };
        read.await.map_err(|e| CliError::from_error(doing, e))
    }

    /// The database's DDL.
    async fn ddl(&self) -> Result<Vec<String>, CliError> {
        self.admin
            .get_database_ddl()
            .set_database(&self.path)
            .send()
            .await
            .map(|r| r.statements)
            .map_err(|e| CliError::from_error(&format!("reading the schema of {}", self.path), e))
    }

    /// The queues in the DDL, with whether delivery is disabled.
    async fn queue_names(&self) -> Result<Vec<(String, bool)>, CliError> {
        Ok(self
            .ddl()
            .await?
            .iter()
            .filter_map(|s| parse_queue(s))
            .collect())
    }

    async fn table_exists(&self, table: &str) -> Result<bool, CliError> {
        let statement = match self.dialect {
            Dialect::GoogleSql => Statement::builder(
                "SELECT COUNT(*) FROM INFORMATION_SCHEMA.TABLES \
                 WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table",
            )
            .add_param("table", table.to_owned()),
            _ => Statement::builder(
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = 'public' AND table_name = $1",
            )
            .add_param("p1", table.to_owned()),
        };
        let found: Vec<(i64,)> = self.query(statement.build(), "looking up a table").await?;
        Ok(found.first().is_some_and(|(n,)| *n > 0))
    }

    /// The key columns (primary-key order) and payload type of `queue`.
    async fn columns(&self, queue: &QueueName) -> Result<Columns, CliError> {
        let statement = match self.dialect {
            Dialect::GoogleSql => Statement::builder(
                "SELECT c.COLUMN_NAME, c.SPANNER_TYPE, k.ORDINAL_POSITION \
                 FROM INFORMATION_SCHEMA.COLUMNS AS c \
                 LEFT JOIN INFORMATION_SCHEMA.INDEX_COLUMNS AS k \
                   ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME \
                  AND k.COLUMN_NAME = c.COLUMN_NAME AND k.INDEX_NAME = 'PRIMARY_KEY' \
                 WHERE c.TABLE_SCHEMA = '' AND c.TABLE_NAME = @queue \
                 ORDER BY c.ORDINAL_POSITION",
            )
            .add_param("queue", queue.as_str().to_owned()),
            // [I] Queues are listed under their lower-case names in schema `public`, with
            // PostgreSQL type names (as on the emulator).
            _ => Statement::builder(
                "SELECT c.column_name, c.spanner_type, k.ordinal_position \
                 FROM information_schema.columns AS c \
                 LEFT JOIN information_schema.index_columns AS k \
                   ON k.table_schema = c.table_schema AND k.table_name = c.table_name \
                  AND k.column_name = c.column_name AND k.index_name = 'PRIMARY_KEY' \
                 WHERE c.table_schema = 'public' AND c.table_name = $1 \
                 ORDER BY c.ordinal_position",
            )
            .add_param("p1", queue.as_str().to_ascii_lowercase()),
        };
        let rows: Vec<(String, String, Option<i64>)> = self
            .query(
                statement.build(),
                &format!("reading the columns of {queue}"),
            )
            .await?;
        let rows: Vec<(String, String, Option<i64>)> = match self.dialect {
            Dialect::GoogleSql => rows,
            _ => rows
                .into_iter()
                .map(|(name, ty, position)| (name, google_sql_type(&ty), position))
                .collect(),
        };
        if rows.is_empty() {
            let known: Vec<String> = self
                .queue_names()
                .await?
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            return Err(CliError::not_found(format!(
                "queue {queue} not found in {} (queues: {})",
                self.path,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            )));
        }
        // [I] A queue shows its system column DeliverTime in INFORMATION_SCHEMA.COLUMNS (as on
        // the emulator); Spanner does not document how queues appear there.
        let deliver_time = self.deliver_time();
        if !rows
            .iter()
            .any(|(name, _, _)| name.eq_ignore_ascii_case(deliver_time))
        {
            return Err(CliError::not_found(format!(
                "{queue} is a table, not a queue, in {}",
                self.path
            )));
        }
        let mut keys: Vec<(i64, String, String)> = rows
            .iter()
            .filter_map(|(name, ty, position)| position.map(|p| (p, name.clone(), ty.clone())))
            .collect();
        keys.sort();
        let payload = rows
            .iter()
            .find(|(name, _, _)| name.eq_ignore_ascii_case(self.payload_column()))
            .map(|(_, ty, _)| ty.clone())
            .ok_or_else(|| {
                CliError::new(EXIT_FAILED, format!("queue {queue} has no Payload column"))
            })?;
        Ok(Columns {
            keys: keys.into_iter().map(|(_, n, t)| (n, t)).collect(),
            payload,
        })
    }

    /// Every queue with its counts.
    pub(crate) async fn queues(&self) -> Result<Vec<QueueInfo>, CliError> {
        let names = self.queue_names().await?;
        let table = self.dead_letter_table();
        let column = self.queue_name_column();
        // Keyed by lower-case name: a queue's name is case-insensitive (PostgreSQL lists it in
        // lower case; the worker records the name its message type spells).
        let dead: Option<BTreeMap<String, i64>> = if self.table_exists(table).await? {
            let rows: Vec<(String, i64)> = self
                .query(
                    Statement::builder(format!(
                        "SELECT {column}, COUNT(*) FROM {table} GROUP BY {column}"
                    ))
                    .build(),
                    "counting dead letters",
                )
                .await?;
            let mut counts = BTreeMap::new();
            for (name, n) in rows {
                *counts.entry(name.to_ascii_lowercase()).or_insert(0) += n;
            }
            Some(counts)
        } else {
            None
        };
        let mut out = Vec::new();
        for (name, paused) in names {
            let queue = queue_name(&name)?;
            // [?] Whether a message's DeliverTime changes while it is leased or redelivered is
            // not documented: "due" counts messages whose DeliverTime has passed, leased ones
            // included, and the oldest age is measured from that DeliverTime. Spanner exposes
            // no lease state to SQL, so leased messages are not counted separately.
            let doing = format!("counting the messages of {queue}");
            let (depth, due, oldest) = match self.dialect {
                Dialect::GoogleSql => {
                    let counts: Vec<(i64, i64, Option<i64>)> = self
                        .query(
                            Statement::builder(format!(
                                "SELECT COUNT(*), COUNTIF(DeliverTime <= CURRENT_TIMESTAMP()), \
                                 TIMESTAMP_DIFF(CURRENT_TIMESTAMP(), \
                                   MIN(IF(DeliverTime <= CURRENT_TIMESTAMP(), DeliverTime, NULL)), \
                                   MILLISECOND) \
                                 FROM {queue}"
                            ))
                            .build(),
                            &doing,
                        )
                        .await?;
                    counts.first().cloned().unwrap_or((0, 0, None))
                }
                _ => {
                    // The age is the difference of two of Spanner's timestamps, read as
                    // RFC 3339 text: the clock is the database's, as in GoogleSQL.
                    let rows = self
                        .rows(
                            Statement::builder(format!(
                                "SELECT COUNT(*), \
                                 COUNT(CASE WHEN deliver_time <= CURRENT_TIMESTAMP THEN 1 END), \
                                 MIN(CASE WHEN deliver_time <= CURRENT_TIMESTAMP \
                                     THEN deliver_time END), \
                                 CURRENT_TIMESTAMP \
                                 FROM {}",
                                queue.to_sql(Dialect::PostgreSql)
                            ))
                            .build(),
                            &doing,
                        )
                        .await?;
                    let row = rows.first().ok_or_else(|| {
                        CliError::new(EXIT_FAILED, format!("no counts from {queue}"))
                    })?;
                    let int = |i: usize| -> Result<i64, CliError> {
                        row.get(i)
                            .and_then(Value::as_str)
                            .and_then(|t| t.parse().ok())
                            .ok_or_else(|| {
                                CliError::new(EXIT_FAILED, format!("unreadable counts of {queue}"))
                            })
                    };
                    let micros =
                        |i: usize| row.get(i).and_then(Value::as_str).and_then(unix_micros);
                    let oldest = match (micros(2), micros(3)) {
                        (Some(oldest), Some(now)) => Some((now - oldest).div_euclid(1000)),
                        _ => None,
                    };
                    (int(0)?, int(1)?, oldest)
                }
            };
            out.push(QueueInfo {
                dead_letters: dead
                    .as_ref()
                    .map(|d| d.get(&name.to_ascii_lowercase()).copied().unwrap_or(0)),
                name,
                depth,
                due,
                scheduled: depth - due,
                oldest_due_ms: oldest,
                paused,
            });
        }
        Ok(out)
    }

    /// The first `limit` messages of `queue` by deliver time.
    pub(crate) async fn peek(
        &self,
        queue: &str,
        limit: u32,
        full: bool,
    ) -> Result<Vec<Peeked>, CliError> {
        let queue = queue_name(queue)?;
        let columns = self.columns(&queue).await?;
        let postgres = self.postgres();
        let statement = if postgres {
            // The values come as they are and are turned into text here: their wire forms
            // (RFC 3339 timestamps, base64 bytes, decimal integers) are the text.
            let mut select: Vec<String> = columns
                .keys
                .iter()
                .map(|(name, _)| self.column_sql(name))
                .collect();
            select.push("payload".to_owned());
            let order: Vec<String> = columns
                .keys
                .iter()
                .map(|(name, _)| self.column_sql(name))
                .collect();
            Statement::builder(format!(
                "SELECT {}, deliver_time, deliver_time <= CURRENT_TIMESTAMP \
                 FROM {} ORDER BY deliver_time, {} LIMIT $1",
                select.join(", "),
                queue.to_sql(Dialect::PostgreSql),
                order.join(", ")
            ))
            .add_param("p1", i64::from(limit))
            .build()
        } else {
            let mut select: Vec<String> = columns
                .keys
                .iter()
                .map(|(name, ty)| as_text(name, ty))
                .collect();
            select.push(as_text("Payload", &columns.payload));
            let order: Vec<&str> = columns.keys.iter().map(|(n, _)| n.as_str()).collect();
            Statement::builder(format!(
                "SELECT {}, FORMAT_TIMESTAMP('%Y-%m-%dT%H:%M:%E3SZ', DeliverTime, 'UTC'), \
                 DeliverTime <= CURRENT_TIMESTAMP() \
                 FROM {queue} ORDER BY DeliverTime, {} LIMIT @limit",
                select.join(", "),
                order.join(", ")
            ))
            .add_param("limit", i64::from(limit))
            .build()
        };
        let rows = self.rows(statement, &format!("reading {queue}")).await?;
        let n = columns.keys.len();
        let types: Vec<&str> = columns
            .keys
            .iter()
            .map(|(_, ty)| ty.as_str())
            .chain([columns.payload.as_str(), "TIMESTAMP"])
            .collect();
        rows.into_iter()
            .map(|values| {
                let text = |i: usize| -> Result<String, CliError> {
                    let value = values.get(i);
                    let text = if postgres {
                        value.and_then(|v| value_text(v, types.get(i).copied().unwrap_or("")))
                    } else {
                        value.and_then(|v| v.as_str().map(str::to_owned))
                    };
                    text.ok_or_else(|| {
                        CliError::new(EXIT_FAILED, format!("unreadable row of {queue}"))
                    })
                };
                let key = (0..n).map(text).collect::<Result<Vec<_>, _>>()?;
                let payload = text(n)?;
                let (payload, truncated) = if full {
                    (payload, false)
                } else {
                    shorten(&payload)
                };
                Ok(Peeked {
                    key,
                    payload,
                    truncated,
                    deliver_time: text(n + 1)?,
                    due: values.get(n + 2).and_then(Value::as_bool).unwrap_or(false),
                })
            })
            .collect()
    }

    async fn letters_of(
        &self,
        queue: &QueueName,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, CliError> {
        DeadLetters::new(self.database.clone())
            .list_by_name(queue, limit)
            .await
            .map_err(|e| CliError::from_error(&format!("reading the dead letters of {queue}"), e))
    }

    async fn require_dead_letter_table(&self) -> Result<(), CliError> {
        let table = self.dead_letter_table();
        if self.table_exists(table).await? {
            Ok(())
        } else {
            Err(CliError::not_found(format!(
                "{} has no dead-letter table {table}: no worker was set up there \
                 (`spanner-queues schema` prints its DDL)",
                self.path
            )))
        }
    }

    /// The queue names the dead-letter table holds (as the workers spelled them), all or
    /// those equal to `queue` ignoring case (queue names are case-insensitive).
    async fn dead_letter_queues(&self, queue: Option<&str>) -> Result<Vec<QueueName>, CliError> {
        let (table, column) = (self.dead_letter_table(), self.queue_name_column());
        let names: Vec<(String,)> = self
            .query(
                Statement::builder(format!(
                    "SELECT DISTINCT {column} FROM {table} ORDER BY {column}"
                ))
                .build(),
                "listing the queues with dead letters",
            )
            .await?;
        names
            .into_iter()
            .filter(|(n,)| queue.is_none_or(|q| q.eq_ignore_ascii_case(n)))
            .map(|(n,)| queue_name(&n))
            .collect()
    }

    /// Dead letters, oldest first, of one queue or all.
    pub(crate) async fn dead_letters(
        &self,
        queue: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Letter>, CliError> {
        self.require_dead_letter_table().await?;
        let limit = limit as usize;
        if let Some(queue) = queue {
            queue_name(queue)?;
        }
        let queues = self.dead_letter_queues(queue).await?;
        let mut letters = Vec::new();
        for queue in &queues {
            letters.extend(self.letters_of(queue, limit).await?);
        }
        letters.sort_by_key(DeadLetter::dead_lettered_at);
        letters.truncate(limit);
        Ok(letters.iter().map(letter).collect())
    }

    /// The dead letter of `queue` whose key values print as `keys`.
    async fn find_letter(
        &self,
        queue: &QueueName,
        keys: &[String],
    ) -> Result<DeadLetter, CliError> {
        self.require_dead_letter_table().await?;
        // The SDK looks dead letters up by typed key; the command line has only text, so it
        // compares the text of each key value (as `dead-letters list` prints them).
        let mut found = None;
        for stored in self.dead_letter_queues(Some(queue.as_str())).await? {
            found = self
                .letters_of(&stored, LOOKUP_LIMIT)
                .await?
                .into_iter()
                .find(|l| key_texts(l.key().parts()) == keys);
            if found.is_some() {
                break;
            }
        }
        found.ok_or_else(|| {
            CliError::not_found(format!(
                "no dead letter of {queue} with key ({}); `spanner-queues dead-letters list \
                 --queue {queue}` shows them",
                keys.join(", ")
            ))
        })
    }

    /// One dead letter.
    pub(crate) async fn dead_letter(
        &self,
        queue: &str,
        keys: &[String],
    ) -> Result<Letter, CliError> {
        let queue = queue_name(queue)?;
        Ok(letter(&self.find_letter(&queue, keys).await?))
    }

    /// Sends a dead letter back to its queue, then deletes it.
    pub(crate) async fn replay(&self, queue: &str, keys: &[String]) -> Result<Letter, CliError> {
        let name = queue_name(queue)?;
        let dead = self.find_letter(&name, keys).await?;
        let columns = self.columns(&name).await?;
        if columns.keys.len() != dead.key().len() {
            return Err(CliError::new(
                EXIT_FAILED,
                format!(
                    "the dead letter's key has {} values, the queue {name} now has {} key columns",
                    dead.key().len(),
                    columns.keys.len()
                ),
            ));
        }
        let mut params = Vec::new();
        for ((column, ty), part) in columns.keys.iter().zip(dead.key().parts()) {
            params.push((
                column.clone(),
                part.to_value(),
                param_type(ty, self.dialect)?,
            ));
        }
        let payload = payload_value(
            dead.payload().as_bytes().to_vec(),
            &columns.payload,
            self.dialect,
        )?;
        let statement = insert(self.dialect, &name, params, payload);
        let shown = dead.key().to_string();
        // The send and the deletion commit together: `DeadLetters::replay` does the same but
        // needs the message type, which a command line does not have.
        let letters = DeadLetters::new(self.database.clone());
        let (letters, statement, name_ref, key) = (&letters, &statement, dead.queue(), dead.key());
        let replayed = spanner_queues::transaction::builder(&self.db)
            .run(move |tx| async move {
                tx.execute_update(statement.clone()).await?;
                letters.delete_in(&tx, name_ref, key).await
            })
            .await;
        match replayed {
            Ok(()) => Ok(letter(&dead)),
            // ASSERT_ROWS_MODIFIED: the dead letter was removed meanwhile (replayed or purged by
            // someone else), and the send rolled back with it.
            Err(e) if e.code() == Some(Code::OutOfRange) => Err(CliError::not_found(format!(
                "the dead letter {shown} of {name} was removed meanwhile; nothing was sent"
            ))),
            Err(e) => {
                let error = CliError::from_error(&format!("replaying {shown} to {name}"), e);
                Err(if error.code == EXIT_CONFLICT {
                    CliError::new(
                        EXIT_CONFLICT,
                        format!(
                            "a message with key {shown} is already in {name}; the dead letter stays"
                        ),
                    )
                } else {
                    error
                })
            }
        }
    }

    /// Deletes one dead letter (`keys`) or every one of `queue`; returns how many.
    pub(crate) async fn purge(
        &self,
        queue: &str,
        keys: Option<&[String]>,
    ) -> Result<usize, CliError> {
        let name = queue_name(queue)?;
        let letters = match keys {
            Some(keys) => vec![self.find_letter(&name, keys).await?],
            None => {
                self.require_dead_letter_table().await?;
                let mut letters = Vec::new();
                for stored in self.dead_letter_queues(Some(name.as_str())).await? {
                    letters.extend(self.letters_of(&stored, LOOKUP_LIMIT).await?);
                }
                letters
            }
        };
        let dead = DeadLetters::new(self.database.clone());
        let mut purged = 0;
        for l in &letters {
            if dead.delete(l.queue(), l.key()).await.map_err(|e| {
                CliError::from_error(&format!("deleting the dead letter {}", l.key()), e)
            })? {
                purged += 1;
            }
        }
        Ok(purged)
    }

    /// Sets `disable_delivery` on `queue`.
    pub(crate) async fn set_paused(&self, queue: &str, paused: bool) -> Result<(), CliError> {
        let name = queue_name(queue)?;
        // [?] Spanner documents no PostgreSQL syntax for queue options (`disable_delivery`),
        // and the emulator refuses an options clause there.
        self.require_google_sql(
            if paused { "pause" } else { "resume" },
            "Spanner documents no PostgreSQL syntax for the disable_delivery queue option",
        )?;
        self.columns(&name).await?;
        let sql = AlterQueue::new(
            name.clone(),
            AlterQueueAction::SetOptions(QueueOptions::new().with_disable_delivery(paused)),
        )
        .to_sql(Dialect::GoogleSql)
        .map_err(|e| CliError::from_error("rendering ALTER QUEUE", e))?;
        self.admin
            .update_database_ddl()
            .set_database(&self.path)
            .set_statements([sql])
            .poller()
            .until_done()
            .await
            .map(|_| ())
            .map_err(|e| CliError::from_error(&format!("altering {name}"), e))
    }

    /// Sends one message with key values `keys` (text) and JSON `payload`.
    pub(crate) async fn send(
        &self,
        queue: &str,
        keys: &[String],
        payload: &str,
    ) -> Result<(), CliError> {
        let name = queue_name(queue)?;
        if let Err(e) = serde_json::from_str::<serde_json::Value>(payload) {
            return Err(CliError::usage(format!("--json is not valid JSON: {e}")));
        }
        let columns = self.columns(&name).await?;
        if keys.len() != columns.keys.len() {
            let wanted: Vec<String> = columns
                .keys
                .iter()
                .map(|(n, t)| format!("{n} {t}"))
                .collect();
            return Err(CliError::usage(format!(
                "{name} has {} key column(s) ({}): pass --key once for each, in that order",
                columns.keys.len(),
                wanted.join(", ")
            )));
        }
        let mut params = Vec::new();
        for ((column, ty), text) in columns.keys.iter().zip(keys) {
            params.push((
                column.clone(),
                key_value(column, ty, text)?,
                param_type(ty, self.dialect)?,
            ));
        }
        let payload = payload_value(payload.as_bytes().to_vec(), &columns.payload, self.dialect)?;
        let statement = insert(self.dialect, &name, params, payload);
        self.commit(statement).await.map_err(|e| {
            if e.code == EXIT_CONFLICT {
                CliError::new(
                    EXIT_CONFLICT,
                    format!(
                        "a message with key ({}) is already in {name}",
                        keys.join(", ")
                    ),
                )
            } else {
                e
            }
        })
    }

    /// Runs one DML statement in a read-write transaction of its own.
    async fn commit(&self, statement: Statement) -> Result<(), CliError> {
        let statement = &statement;
        spanner_queues::transaction::builder(&self.db)
            .run(move |tx| async move {
                tx.execute_update(statement.clone()).await?;
                Ok(())
            })
            .await
            .map_err(|e| CliError::from_error("sending", e))
    }
}

/// `INSERT INTO queue (keys…, Payload, DeliverTime) VALUES (…, CURRENT_TIMESTAMP())`, in
/// `dialect` (PostgreSQL: `payload`, `deliver_time`, `$n` parameters sent as `pn`).
fn insert(
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
fn param_type(ty: &str, dialect: Dialect) -> Result<Type, CliError> {
    let parsed: SpannerType = ty
        .parse()
        .map_err(|_| CliError::new(EXIT_FAILED, format!("unsupported column type {ty}")))?;
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
            return Err(CliError::new(
                EXIT_FAILED,
                format!("unsupported column type {ty}"),
            ));
        }
    })
}

/// A key value typed on the command line, checked against its column type.
fn key_value(column: &str, ty: &str, text: &str) -> Result<Value, CliError> {
    let bad = |what: &str| {
        CliError::usage(format!(
            "key column {column} is {ty}: `{text}` is not {what}"
        ))
    };
    let parsed: SpannerType = ty
        .parse()
        .map_err(|_| CliError::new(EXIT_FAILED, format!("unsupported key column type {ty}")))?;
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

/// A payload for a column of type `ty`: JSON and STRING columns take text, BYTES and PROTO
/// the bytes.
fn payload_value(bytes: Vec<u8>, ty: &str, dialect: Dialect) -> Result<(Value, Type), CliError> {
    let upper = ty.to_ascii_uppercase();
    if upper == "JSON" || upper.starts_with("STRING") {
        let text = String::from_utf8(bytes).map_err(|_| {
            CliError::new(
                EXIT_FAILED,
                format!("the payload is not text, the {ty} column needs text"),
            )
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
fn as_text(name: &str, ty: &str) -> String {
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
fn value_text(value: &Value, ty: &str) -> Option<String> {
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

/// An RFC 3339 UTC timestamp (`…T03:04:05.123456Z`, `…T03:04:05Z`) with exactly three
/// fraction digits, as GoogleSQL's peek prints them.
fn millis(text: &str) -> String {
    let Some(body) = text.strip_suffix('Z') else {
        return text.to_owned();
    };
    let (whole, fraction) = body.split_once('.').unwrap_or((body, ""));
    let mut digits: String = fraction.chars().take(3).collect();
    while digits.len() < 3 {
        digits.push('0');
    }
    format!("{whole}.{digits}Z")
}

/// Microseconds since 1970 of an RFC 3339 UTC timestamp as Spanner sends them
/// (`2026-12-02T03:04:05.123456789Z`).
fn unix_micros(text: &str) -> Option<i64> {
    let body = text.strip_suffix('Z')?;
    let (date, time) = body.split_once('T')?;
    let mut date_parts = date.split('-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: i64 = date_parts.next()?.parse().ok()?;
    let day: i64 = date_parts.next()?.parse().ok()?;
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut time_parts = hms.split(':');
    let hour: i64 = time_parts.next()?.parse().ok()?;
    let minute: i64 = time_parts.next()?.parse().ok()?;
    let second: i64 = time_parts.next()?.parse().ok()?;
    let mut micros_text: String = fraction.chars().take(6).collect();
    while micros_text.len() < 6 {
        micros_text.push('0');
    }
    let micros: i64 = micros_text.parse().ok()?;
    let days = days_from_civil(year, month, day);
    Some(((days * 86_400 + hour * 3600 + minute * 60 + second) * 1_000_000) + micros)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn shorten(text: &str) -> (String, bool) {
    if text.chars().count() <= PREVIEW {
        return (text.to_owned(), false);
    }
    let mut short: String = text.chars().take(PREVIEW).collect();
    short.push('…');
    (short, true)
}

/// Each key value as `--key` takes it.
fn key_texts(parts: &[KeyValue]) -> Vec<String> {
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

fn letter(dead: &DeadLetter) -> Letter {
    let (payload, payload_kind) = match dead.payload() {
        Payload::Json(text) => (text.clone(), "JSON"),
        Payload::String(text) => (text.clone(), "STRING"),
        other => (
            format!(
                "base64:{}",
                base64::engine::general_purpose::STANDARD.encode(other.as_bytes())
            ),
            "BYTES",
        ),
    };
    Letter {
        queue: dead.queue().to_string(),
        key: dead.key().to_string(),
        key_parts: key_texts(dead.key().parts()),
        attempts: dead.attempts(),
        error: dead.error().to_owned(),
        dead_lettered_at: rfc3339(dead.dead_lettered_at()),
        payload,
        payload_kind: payload_kind.to_owned(),
    }
}

/// `SystemTime` as RFC 3339 UTC with milliseconds.
fn rfc3339(at: SystemTime) -> String {
    let Ok(since) = at.duration_since(SystemTime::UNIX_EPOCH) else {
        return "before 1970".to_owned();
    };
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `CREATE QUEUE [IF NOT EXISTS] name …` → (name, whether `disable_delivery = true`).
fn parse_queue(statement: &str) -> Option<(String, bool)> {
    let words: Vec<&str> = statement.split_whitespace().collect();
    if words.len() < 3
        || !words[0].eq_ignore_ascii_case("CREATE")
        || !words[1].eq_ignore_ascii_case("QUEUE")
    {
        return None;
    }
    let mut rest = &words[2..];
    if rest.len() >= 3
        && rest[0].eq_ignore_ascii_case("IF")
        && rest[1].eq_ignore_ascii_case("NOT")
        && rest[2].eq_ignore_ascii_case("EXISTS")
    {
        rest = &rest[3..];
    }
    let name = rest
        .first()?
        .split('(')
        .next()?
        .trim_matches('`')
        .to_owned();
    if name.is_empty() {
        return None;
    }
    // [I] The DDL Spanner returns spells options as `disable_delivery = true`; spacing and case
    // are ignored here.
    let compact: String = statement
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    Some((name, compact.contains("disable_delivery=true")))
}

/// The kinds of key the SDK can send and read back.
const KEY_TYPES: [KeyType; 8] = [
    KeyType::Bool,
    KeyType::Int64,
    KeyType::String,
    KeyType::Bytes,
    KeyType::Uuid,
    KeyType::Timestamp,
    KeyType::Date,
    KeyType::Numeric,
];

/// The DDL the SDK needs in `dialect`: an optional queue, the worker's tables and the commit
/// markers. Types are GoogleSQL names (`INT64`, `STRING(64)`, `JSON`); for PostgreSQL their
/// PostgreSQL names (`bigint`, `varchar(64)`, `jsonb`) are taken too.
pub(crate) fn schema(
    dialect: Dialect,
    queue: Option<&str>,
    key_columns: &[String],
    payload: &str,
) -> Result<Vec<String>, CliError> {
    let spelled = |ty: &str| match dialect {
        Dialect::GoogleSql => ty.to_owned(),
        _ => google_sql_type(ty),
    };
    let mut statements = Vec::new();
    if let Some(queue) = queue {
        let queue = queue_name(queue)?;
        let payload_type = match spelled(payload).parse::<SpannerType>() {
            Ok(SpannerType::Json) => PayloadType::Json,
            Ok(SpannerType::String(len)) => PayloadType::String(len),
            Ok(SpannerType::Bytes(len)) => PayloadType::Bytes(len),
            Ok(SpannerType::Proto(name)) => PayloadType::Proto(name),
            _ => {
                return Err(CliError::usage(format!(
                    "--payload {payload}: a payload is JSON, STRING(n|MAX), BYTES(n|MAX) or a proto type"
                )));
            }
        };
        let mut schema = QueueSchema::new(queue.clone(), payload_type);
        for column in key_columns {
            let (name, ty) = column.split_once(':').ok_or_else(|| {
                CliError::usage(format!(
                    "--key {column}: use NAME:TYPE, e.g. TicketId:INT64"
                ))
            })?;
            let ty: SpannerType = spelled(ty)
                .parse()
                .map_err(|e| CliError::usage(format!("--key {column}: {e}")))?;
            // A key column holds what the SDK can key a message by: the column type of a
            // `KeyType` (STRING(36) is a UUID's), or STRING(n)/BYTES(n) with another length.
            let sized = match ty {
                SpannerType::String(Length::Fixed(n)) => Some((KeyType::String, n)),
                SpannerType::Bytes(Length::Fixed(n)) => Some((KeyType::Bytes, n)),
                _ => None,
            };
            let exact = KEY_TYPES.into_iter().find(|k| k.spanner_type() == ty);
            let (key_type, max_length) = exact
                .map(|k| (k, None))
                .or(sized.map(|(k, n)| (k, Some(n))))
                .ok_or_else(|| {
                    let allowed: Vec<String> = KEY_TYPES
                        .iter()
                        .map(|k| k.spanner_type().to_string())
                        .chain(["STRING(n)".to_owned(), "BYTES(n)".to_owned()])
                        .collect();
                    CliError::usage(format!(
                        "--key {column}: a key column is one of {}",
                        allowed.join(", ")
                    ))
                })?;
            let name = ColumnName::new(name)
                .map_err(|e| CliError::usage(format!("--key {column}: {e}")))?;
            let mut key_column = KeyColumn::new(name, key_type);
            if let Some(n) = max_length {
                key_column = key_column.with_max_length(n);
            }
            schema = schema.with_key_column(key_column);
        }
        statements.push(
            schema
                .create_if_not_exists_statement(dialect)
                .map_err(|e| CliError::usage(format!("queue {queue}: {}", chain(&e))))?,
        );
    }
    statements.extend(spanner_queues::worker::schema_statements(dialect));
    statements.push(CommitMarkers::new().create_if_not_exists_statement(dialect));
    Ok(statements)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_statements_are_recognised_with_their_pause_state() {
        assert_eq!(
            parse_queue(
                "CREATE QUEUE Tickets (\n  Id INT64 NOT NULL,\n  Payload JSON NOT NULL,\n) PRIMARY KEY(Id)"
            ),
            Some(("Tickets".to_owned(), false))
        );
        assert_eq!(
            parse_queue(
                "create queue if not exists `Jobs`(Id INT64 NOT NULL, Payload JSON NOT NULL) \
                 PRIMARY KEY (Id), OPTIONS (disable_delivery = true)"
            ),
            Some(("Jobs".to_owned(), true))
        );
        assert_eq!(
            parse_queue(
                "CREATE QUEUE J (Id INT64, Payload JSON) PRIMARY KEY (Id), OPTIONS (disable_delivery=false)"
            ),
            Some(("J".to_owned(), false))
        );
        assert_eq!(
            parse_queue("CREATE TABLE Tickets (Id INT64) PRIMARY KEY (Id)"),
            None
        );
    }

    #[test]
    fn times_print_as_rfc3339() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_796_166_245_123);
        assert_eq!(rfc3339(at), "2026-12-01T23:04:05.123Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // A leap day.
        let leap = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

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
    fn postgresql_values_read_as_text() {
        assert_eq!(google_sql_type("bigint"), "INT64");
        assert_eq!(google_sql_type("character varying(64)"), "STRING(64)");
        assert_eq!(google_sql_type("jsonb"), "JSON");
        assert_eq!(google_sql_type("bytea"), "BYTES(MAX)");
        assert_eq!(
            millis("2026-12-02T03:04:05.123456789Z"),
            "2026-12-02T03:04:05.123Z"
        );
        assert_eq!(millis("2026-12-02T03:04:05Z"), "2026-12-02T03:04:05.000Z");
        assert_eq!(millis("2026-12-02T03:04:05.5Z"), "2026-12-02T03:04:05.500Z");
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_796_166_245_123_456);
        let micros = unix_micros("2026-12-01T23:04:05.123456789Z").expect("parses");
        assert_eq!(
            micros,
            i64::try_from(
                at.duration_since(SystemTime::UNIX_EPOCH)
                    .expect("after")
                    .as_micros()
            )
            .expect("fits")
        );
        assert_eq!(
            unix_micros("2000-02-29T00:00:00Z"),
            Some(951_782_400_000_000)
        );
        assert_eq!(unix_micros("yesterday"), None);
        assert_eq!(
            value_text(&Value::from("AAE=".to_owned()), "BYTES(MAX)").as_deref(),
            Some("base64:AAE=")
        );
    }

    #[test]
    fn payload_previews_are_cut() {
        let long = "x".repeat(200);
        let (short, cut) = shorten(&long);
        assert!(cut);
        assert_eq!(short.chars().count(), PREVIEW + 1);
        assert_eq!(shorten("{}"), ("{}".to_owned(), false));
    }
}
