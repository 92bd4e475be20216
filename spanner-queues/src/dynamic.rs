//! Queues known by name only: [`DynQueue`] and [`RawMessage`], for tools that have no message
//! type for a queue (an operator's console, the CLI, a migration script).

use google_cloud_spanner::statement::Statement;

use crate::codec::{CodecError, Payload};
use crate::database::Database;
use crate::ddl::{QueueColumn, read_columns};
use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::ident::{ColumnName, QueueName};
use crate::key::{KeyColumn, KeyError, KeyType, KeyValue, MessageKey};
use crate::query::query_rows;
use crate::queue::{SendOptions, Target};
use crate::schema::SystemColumn;
use crate::transaction::Transaction;
use crate::types::SpannerType;

/// A queue of the database known by its name only: its key columns and payload type, read
/// from `INFORMATION_SCHEMA` by [`Database::queue_by_name`].
///
/// ```no_run
/// use spanner_queues::codec::Payload;
/// use spanner_queues::{Database, RawMessage};
///
/// async fn resend(db: &Database) -> spanner_queues::Result<()> {
///     let queue = db.queue_by_name("OrderEmails").await?;
///     // One text per key column, in key order.
///     let message = RawMessage::new(["42"], Payload::Json(r#"{"subject":"Hi"}"#.into()));
///     db.send_raw(&queue, &message).await
/// }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DynQueue {
    name: QueueName,
    key_columns: Vec<KeyColumn>,
    payload_type: SpannerType,
    dialect: Dialect,
}

impl DynQueue {
    /// The queue's name, as the database spells it.
    pub fn name(&self) -> &QueueName {
        &self.name
    }

    /// The key columns in primary-key order, each with the kind of value it holds (a
    /// `STRING` column holds [`KeyType::String`], never [`KeyType::Uuid`]).
    pub fn key_columns(&self) -> &[KeyColumn] {
        &self.key_columns
    }

    /// The type of the queue's `Payload` column.
    pub fn payload_type(&self) -> &SpannerType {
        &self.payload_type
    }

    /// The key of one message from one text per key column, in key order: numbers, booleans
    /// and dates as written, strings as they are, timestamps in RFC 3339, bytes in standard
    /// base64.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for the wrong number of texts or a text that is not a value of
    /// its column.
    pub fn parse_key<S: AsRef<str>>(&self, texts: &[S]) -> Result<MessageKey> {
        let invalid = |source| Error::InvalidKey {
            queue: self.name.clone(),
            source,
        };
        if texts.len() != self.key_columns.len() {
            return Err(invalid(KeyError::Arity {
                expected: self.key_columns.len(),
                found: texts.len(),
            }));
        }
        self.key_columns
            .iter()
            .zip(texts)
            .enumerate()
            .map(|(position, (column, text))| {
                KeyValue::parse_text(column.key_type(), text.as_ref())
                    .map_err(|e| invalid(e.at_position(position)))
            })
            .collect()
    }

    fn target(&self) -> Target<'_> {
        Target {
            queue: self.name.clone(),
            columns: &self.key_columns,
            dialect: self.dialect,
        }
    }

    /// The message's key, checked against the key columns, and its payload, checked against
    /// the payload column.
    fn prepare(&self, message: &RawMessage) -> Result<(MessageKey, Payload)> {
        let key = match &message.key {
            RawKey::Texts(texts) => self.parse_key(texts)?,
            RawKey::Values(key) => {
                self.check_key(key)?;
                key.clone()
            }
        };
        let fits = matches!(
            (&self.payload_type, &message.payload),
            (SpannerType::Json, Payload::Json(_))
                | (
                    SpannerType::String(_),
                    Payload::String(_) | Payload::Json(_)
                )
                | (
                    SpannerType::Bytes(_) | SpannerType::Proto(_),
                    Payload::Bytes(_)
                )
        );
        if !fits {
            return Err(Error::Encode {
                queue: self.name.clone(),
                key,
                source: CodecError::ColumnType {
                    detail: format!(
                        "a {} payload for a {} Payload column",
                        message.payload.kind(),
                        self.payload_type
                    ),
                },
            });
        }
        let payload = match (&self.payload_type, &message.payload) {
            // JSON text sent to a STRING column is text.
            (SpannerType::String(_), Payload::Json(text)) => Payload::String(text.clone()),
            (_, payload) => payload.clone(),
        };
        Ok((key, payload))
    }

    fn check_key(&self, key: &MessageKey) -> Result<()> {
        let invalid = |source| Error::InvalidKey {
            queue: self.name.clone(),
            source,
        };
        if key.len() != self.key_columns.len() {
            return Err(invalid(KeyError::Arity {
                expected: self.key_columns.len(),
                found: key.len(),
            }));
        }
        for (position, (column, value)) in self.key_columns.iter().zip(key.parts()).enumerate() {
            let expected = column.key_type();
            let found = value.key_type();
            // A UUID is stored as a string: either kind fits a STRING column.
            let fits = found == expected || (expected == KeyType::String && found == KeyType::Uuid);
            if !fits {
                return Err(invalid(KeyError::TypeMismatch {
                    position,
                    expected,
                    found,
                }));
            }
        }
        Ok(())
    }
}

/// A message for a [`DynQueue`]: its key (one text per key column, or typed values) and its
/// payload, already encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct RawMessage {
    key: RawKey,
    payload: Payload,
    options: SendOptions,
}

#[derive(Debug, Clone, PartialEq)]
enum RawKey {
    Texts(Vec<String>),
    Values(MessageKey),
}

impl RawMessage {
    /// A message whose key is given as one text per key column, in key order (parsed as
    /// [`DynQueue::parse_key`] does), with `payload` (`Payload::Json` for a `JSON` column,
    /// `Payload::String` or `Payload::Json` for a `STRING` one, `Payload::Bytes` for `BYTES`
    /// and `PROTO`).
    pub fn new<I, S>(key: I, payload: Payload) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            key: RawKey::Texts(key.into_iter().map(Into::into).collect()),
            payload,
            options: SendOptions::new(),
        }
    }

    /// A message whose key is given as typed values.
    pub fn with_key(key: MessageKey, payload: Payload) -> Self {
        Self {
            key: RawKey::Values(key),
            payload,
            options: SendOptions::new(),
        }
    }

    /// Sends it with `options` (a delivery time).
    pub fn with_options(mut self, options: SendOptions) -> Self {
        self.options = options;
        self
    }

    /// The payload.
    pub fn payload(&self) -> &Payload {
        &self.payload
    }
}

impl Database {
    /// The queue named `name`, read from `INFORMATION_SCHEMA`: its key columns and payload
    /// type. The name is matched as the database matches names in SQL: in any case in
    /// GoogleSQL, folded to lower case in PostgreSQL. [`DynQueue::name`] is the database's
    /// spelling.
    ///
    /// # Errors
    /// [`Error::NotAQueue`] when the name is not a valid queue name, names nothing, or names a
    /// table; [`Error::InvalidSchema`] for a queue whose key columns this crate cannot bind;
    /// Spanner errors.
    pub async fn queue_by_name(&self, name: &str) -> Result<DynQueue> {
        let not_a_queue = |reason: &str| Error::NotAQueue {
            name: name.to_owned(),
            reason: reason.to_owned(),
        };
        let mut queue = QueueName::new(name).map_err(|e| not_a_queue(&e.to_string()))?;
        let mut columns = read_columns(self.client(), self.dialect(), &queue).await?;
        if columns.is_empty()
            && self.dialect() == Dialect::GoogleSql
            && let Some(spelled) = spelled_as(self, name).await?
        {
            // GoogleSQL names are case-insensitive: read the queue as the database spells it.
            queue = QueueName::new(spelled).map_err(|e| not_a_queue(&e.to_string()))?;
            columns = read_columns(self.client(), self.dialect(), &queue).await?;
        }
        if columns.is_empty() {
            return Err(not_a_queue("the database has no queue of that name"));
        }
        let has = |column: SystemColumn| {
            let wanted = column.name(self.dialect());
            columns
                .iter()
                .find(|c| c.name().eq_ignore_ascii_case(wanted))
        };
        if has(SystemColumn::DeliverTime).is_none() {
            return Err(not_a_queue("it is a table, not a queue"));
        }
        let payload =
            has(SystemColumn::Payload).ok_or_else(|| not_a_queue("it has no Payload column"))?;
        let payload_type = parse_type(&queue, payload)?;
        let mut keys: Vec<&QueueColumn> = columns
            .iter()
            .filter(|c| c.key_position().is_some())
            .collect();
        keys.sort_by_key(|c| c.key_position());
        let key_columns = keys
            .into_iter()
            .map(|column| key_column(&queue, column))
            .collect::<Result<Vec<_>>>()?;
        Ok(DynQueue {
            name: queue,
            key_columns,
            payload_type,
            dialect: self.dialect(),
        })
    }

    /// Sends `message` to `queue` in its own transaction.
    ///
    /// # Errors
    /// As [`Transaction::send_raw`]; [`Error::OutcomeUnknown`] when the commit's outcome is
    /// unknown.
    pub async fn send_raw(&self, queue: &DynQueue, message: &RawMessage) -> Result<()> {
        self.transaction()
            .run(move |tx| async move { tx.send_raw(queue, message).await })
            .await
    }
}

impl Transaction {
    /// Sends `message` to `queue` in this transaction: the payload is written byte for byte
    /// (no size limit but Spanner's).
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for a key that does not fit the queue's key columns;
    /// [`Error::Encode`] for a payload the `Payload` column cannot take;
    /// [`Error::AlreadyQueued`]; Spanner errors.
    pub async fn send_raw(&self, queue: &DynQueue, message: &RawMessage) -> Result<()> {
        let (key, payload) = queue.prepare(message)?;
        queue
            .target()
            .send_raw(self.read_write(), key, payload, message.options.deliver())
            .await
    }
}

/// How a GoogleSQL database spells the table or queue named `name` in any case, if it has one.
async fn spelled_as(db: &Database, name: &str) -> Result<Option<String>> {
    let statement = Statement::builder(
        "SELECT DISTINCT TABLE_NAME FROM INFORMATION_SCHEMA.COLUMNS \
         WHERE TABLE_SCHEMA = '' AND UPPER(TABLE_NAME) = UPPER(@name)",
    )
    .add_param("name", name.to_owned())
    .build();
    let names = query_rows(db.client(), statement, |row| Ok(row.get::<String>(0)?)).await?;
    Ok(names.into_iter().next())
}

/// The type of `column`, which belongs to `queue`.
fn parse_type(queue: &QueueName, column: &QueueColumn) -> Result<SpannerType> {
    column.spanner_type().parse::<SpannerType>().map_err(|_| {
        Error::invalid_schema(
            Some(queue.as_str()),
            format!(
                "column `{}` has the type {}, which this crate does not know",
                column.name(),
                column.spanner_type()
            ),
        )
    })
}

/// A key column of `queue` as the database has it.
fn key_column(queue: &QueueName, column: &QueueColumn) -> Result<KeyColumn> {
    let key_type = match parse_type(queue, column)? {
        SpannerType::Bool => KeyType::Bool,
        SpannerType::Int64 => KeyType::Int64,
        SpannerType::String(_) => KeyType::String,
        SpannerType::Bytes(_) => KeyType::Bytes,
        SpannerType::Timestamp => KeyType::Timestamp,
        SpannerType::Date => KeyType::Date,
        SpannerType::Numeric => KeyType::Numeric,
        other => {
            return Err(Error::invalid_schema(
                Some(queue.as_str()),
                format!(
                    "key column `{}` is {other}, which this crate cannot bind",
                    column.name()
                ),
            ));
        }
    };
    let name = ColumnName::new(column.name())?;
    let mut key = KeyColumn::new(name, key_type);
    if column.is_descending() {
        key = key.with_order(crate::types::SortOrder::Desc);
    }
    Ok(key)
}
