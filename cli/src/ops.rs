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
};
use spanner_queues::worker::{DEAD_LETTER_TABLE, DeadLetter, DeadLetters};

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
        if database.dialect() != Dialect::GoogleSql {
            // Its statements are GoogleSQL: refuse before any of them is sent.
            return Err(CliError::usage(format!(
                "database {path} is a {:?}-dialect database; this command line serves \
                 GoogleSQL databases only (the SDK serves both)",
                database.dialect()
            )));
        }
        Ok(Self {
            path: path.to_owned(),
            db,
            admin,
        })
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
        let found: Vec<(i64,)> = self
            .query(
                Statement::builder(
                    "SELECT COUNT(*) FROM INFORMATION_SCHEMA.TABLES \
                     WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table",
                )
                .add_param("table", table.to_owned())
                .build(),
                "looking up a table",
            )
            .await?;
        Ok(found.first().is_some_and(|(n,)| *n > 0))
    }

    /// The key columns (primary-key order) and payload type of `queue`.
    async fn columns(&self, queue: &QueueName) -> Result<Columns, CliError> {
        let rows: Vec<(String, String, Option<i64>)> = self
            .query(
                Statement::builder(
                    "SELECT c.COLUMN_NAME, c.SPANNER_TYPE, k.ORDINAL_POSITION \
                     FROM INFORMATION_SCHEMA.COLUMNS AS c \
                     LEFT JOIN INFORMATION_SCHEMA.INDEX_COLUMNS AS k \
                       ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME \
                      AND k.COLUMN_NAME = c.COLUMN_NAME AND k.INDEX_NAME = 'PRIMARY_KEY' \
                     WHERE c.TABLE_SCHEMA = '' AND c.TABLE_NAME = @queue \
                     ORDER BY c.ORDINAL_POSITION",
                )
                .add_param("queue", queue.as_str().to_owned())
                .build(),
                &format!("reading the columns of {queue}"),
            )
            .await?;
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
        if !rows
            .iter()
            .any(|(name, _, _)| name.eq_ignore_ascii_case("DeliverTime"))
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
            .find(|(name, _, _)| name.eq_ignore_ascii_case("Payload"))
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
        let dead: Option<BTreeMap<String, i64>> = if self.table_exists(DEAD_LETTER_TABLE).await? {
            let rows: Vec<(String, i64)> = self
                .query(
                    Statement::builder(format!(
                        "SELECT QueueName, COUNT(*) FROM {DEAD_LETTER_TABLE} GROUP BY QueueName"
                    ))
                    .build(),
                    "counting dead letters",
                )
                .await?;
            Some(rows.into_iter().collect())
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
                    &format!("counting the messages of {queue}"),
                )
                .await?;
            let (depth, due, oldest) = counts.first().cloned().unwrap_or((0, 0, None));
            out.push(QueueInfo {
                dead_letters: dead.as_ref().map(|d| d.get(&name).copied().unwrap_or(0)),
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
        let mut select: Vec<String> = columns
            .keys
            .iter()
            .map(|(name, ty)| as_text(name, ty))
            .collect();
        select.push(as_text("Payload", &columns.payload));
        let order: Vec<&str> = columns.keys.iter().map(|(n, _)| n.as_str()).collect();
        let sql = format!(
            "SELECT {}, FORMAT_TIMESTAMP('%Y-%m-%dT%H:%M:%E3SZ', DeliverTime, 'UTC'), \
             DeliverTime <= CURRENT_TIMESTAMP() \
             FROM {queue} ORDER BY DeliverTime, {} LIMIT @limit",
            select.join(", "),
            order.join(", ")
        );
        let rows = self
            .rows(
                Statement::builder(sql)
                    .add_param("limit", i64::from(limit))
                    .build(),
                &format!("reading {queue}"),
            )
            .await?;
        let n = columns.keys.len();
        rows.into_iter()
            .map(|values| {
                let text = |i: usize| -> Result<String, CliError> {
                    values
                        .get(i)
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .ok_or_else(|| {
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
        DeadLetters::new(self.db.clone())
            .list_by_name(queue, limit)
            .await
            .map_err(|e| CliError::from_error(&format!("reading the dead letters of {queue}"), e))
    }

    async fn require_dead_letter_table(&self) -> Result<(), CliError> {
        if self.table_exists(DEAD_LETTER_TABLE).await? {
            Ok(())
        } else {
            Err(CliError::not_found(format!(
                "{} has no dead-letter table {DEAD_LETTER_TABLE}: no worker was set up there \
                 (`spanner-queues schema` prints its DDL)",
                self.path
            )))
        }
    }

    /// Dead letters, oldest first, of one queue or all.
    pub(crate) async fn dead_letters(
        &self,
        queue: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Letter>, CliError> {
        self.require_dead_letter_table().await?;
        let limit = limit as usize;
        let queues: Vec<QueueName> = match queue {
            Some(queue) => vec![queue_name(queue)?],
            None => {
                let names: Vec<(String,)> = self
                    .query(
                        Statement::builder(format!(
                            "SELECT DISTINCT QueueName FROM {DEAD_LETTER_TABLE} ORDER BY QueueName"
                        ))
                        .build(),
                        "listing the queues with dead letters",
                    )
                    .await?;
                names
                    .into_iter()
                    .map(|(n,)| queue_name(&n))
                    .collect::<Result<_, _>>()?
            }
        };
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
        let found = self
            .letters_of(queue, LOOKUP_LIMIT)
            .await?
            .into_iter()
            .find(|l| key_texts(l.key().parts()) == keys);
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
            params.push((column.clone(), part.to_value(), param_type(ty)?));
        }
        let payload = payload_value(dead.payload().as_bytes().to_vec(), &columns.payload)?;
        let statement = insert(&name, params, payload);
        let shown = dead.key().to_string();
        // The send and the deletion commit together: `DeadLetters::replay` does the same but
        // needs the message type, which a command line does not have.
        let letters = DeadLetters::new(self.db.clone());
        let (letters, statement, name_ref, key) = (&letters, &statement, &name, dead.key());
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
                self.letters_of(&name, LOOKUP_LIMIT).await?
            }
        };
        let dead = DeadLetters::new(self.db.clone());
        let mut purged = 0;
        for l in &letters {
            if dead.delete(&name, l.key()).await.map_err(|e| {
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
                param_type(ty)?,
            ));
        }
        let payload = payload_value(payload.as_bytes().to_vec(), &columns.payload)?;
        let statement = insert(&name, params, payload);
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

/// `INSERT INTO queue (keys…, Payload, DeliverTime) VALUES (…, CURRENT_TIMESTAMP())`.
fn insert(
    queue: &QueueName,
    keys: Vec<(String, Value, Type)>,
    payload: (Value, Type),
) -> Statement {
    let names: Vec<String> = keys.iter().map(|(n, _, _)| n.clone()).collect();
    let params: Vec<String> = (0..keys.len()).map(|i| format!("@k{i}")).collect();
    let mut builder = Statement::builder(format!(
        "INSERT INTO {queue} ({}, Payload, DeliverTime) VALUES ({}, @payload, CURRENT_TIMESTAMP())",
        names.join(", "),
        params.join(", ")
    ));
    for (i, (_, value, ty)) in keys.into_iter().enumerate() {
        builder = builder.add_typed_param(format!("k{i}"), value, ty);
    }
    builder
        .add_typed_param("payload", payload.0, payload.1)
        .build()
}

/// The client type to bind a value of column type `ty` (an `INFORMATION_SCHEMA` spelling).
fn param_type(ty: &str) -> Result<Type, CliError> {
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
        SpannerType::Numeric => types::numeric(),
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
fn payload_value(bytes: Vec<u8>, ty: &str) -> Result<(Value, Type), CliError> {
    let upper = ty.to_ascii_uppercase();
    if upper == "JSON" || upper.starts_with("STRING") {
        let text = String::from_utf8(bytes).map_err(|_| {
            CliError::new(
                EXIT_FAILED,
                format!("the payload is not text, the {ty} column needs text"),
            )
        })?;
        let ty = if upper == "JSON" {
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

/// The DDL the SDK needs: an optional queue, the worker's tables and the commit markers.
pub(crate) fn schema(
    queue: Option<&str>,
    key_columns: &[String],
    payload: &str,
) -> Result<Vec<String>, CliError> {
    let mut statements = Vec::new();
    if let Some(queue) = queue {
        let queue = queue_name(queue)?;
        let payload_type = match payload.parse::<SpannerType>() {
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
            let ty: SpannerType = ty
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
                .create_if_not_exists_statement(Dialect::GoogleSql)
                .map_err(|e| CliError::usage(format!("queue {queue}: {}", chain(&e))))?,
        );
    }
    statements.extend(spanner_queues::worker::schema_statements(
        Dialect::GoogleSql,
    ));
    statements.push(CommitMarkers::new().create_if_not_exists_statement(Dialect::GoogleSql));
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
    fn payload_previews_are_cut() {
        let long = "x".repeat(200);
        let (short, cut) = shorten(&long);
        assert!(cut);
        assert_eq!(short.chars().count(), PREVIEW + 1);
        assert_eq!(shorten("{}"), ("{}".to_owned(), false));
    }
}
