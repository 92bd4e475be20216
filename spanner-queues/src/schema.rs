//! Queue DDL: `CREATE QUEUE`, `ALTER QUEUE` and `DROP QUEUE`, rendered for a SQL dialect.
//!
//! A [`QueueSchema`] describes one queue: its key columns (in primary-key order), its `Payload`
//! type, and optionally interleaving, a row deletion policy and queue options. Every message type
//! has one ([`QueueMessage::schema`](crate::QueueMessage::schema)), so DDL is never written by
//! hand; a schema can also be built directly:
//!
//! ```
//! use spanner_queues::Dialect;
//! use spanner_queues::ident::{ColumnName, QueueName, TableName};
//! use spanner_queues::key::{KeyColumn, KeyType};
//! use spanner_queues::schema::{Interleave, Length, OnDelete, PayloadType, QueueSchema};
//!
//! // Names are validated when they are made: a schema only holds valid ones.
//! let schema = QueueSchema::new(QueueName::new("UserTasks")?, PayloadType::Bytes(Length::Max))
//!     .with_key_column(KeyColumn::new(ColumnName::new("UserId")?, KeyType::Int64))
//!     .with_key_column(KeyColumn::new(ColumnName::new("MessageId")?, KeyType::Uuid))
//!     .with_interleave(Interleave::in_parent(TableName::new("Users")?).on_delete(OnDelete::Cascade));
//! assert_eq!(
//!     schema.create_statement(Dialect::GoogleSql)?,
//!     "CREATE QUEUE UserTasks (UserId INT64 NOT NULL, MessageId STRING(36) NOT NULL, \
//!      Payload BYTES(MAX) NOT NULL) PRIMARY KEY (UserId, MessageId), \
//!      INTERLEAVE IN PARENT Users ON DELETE CASCADE"
//! );
//! assert_eq!(
//!     schema.create_statement(Dialect::PostgreSql)?,
//!     "CREATE QUEUE usertasks (userid bigint NOT NULL, messageid varchar(36) NOT NULL, \
//!      payload bytea NOT NULL, PRIMARY KEY (userid, messageid)) \
//!      INTERLEAVE IN PARENT users ON DELETE CASCADE"
//! );
//! # Ok::<(), spanner_queues::Error>(())
//! ```
//!
//! Statements are returned without a trailing `;`, ready for `UpdateDatabaseDdl`.
//!
//! GoogleSQL is fully supported. For PostgreSQL only the documented `CREATE QUEUE` form is
//! rendered, with `IF NOT EXISTS` as for PostgreSQL tables; queue options, row deletion
//! policies, `DESC` keys and every `ALTER QUEUE` form are not documented there and return
//! [`SchemaError::Unsupported`].

use std::fmt;

pub use crate::dialect::Dialect;
pub use crate::types::{
    Length, MAX_BYTES_LENGTH, MAX_STRING_LENGTH, PayloadType, SchemaError, SortOrder, SpannerType,
    google_sql_type,
};

use crate::ident::{LocalityGroupName, QueueName, TableName};
use crate::key::KeyColumn;

/// Most key columns Spanner allows in a primary key (Spanner documents it in its quotas and
/// limits).
pub const MAX_KEY_COLUMNS: usize = 16;

/// Columns Spanner adds to every queue or to its receive and renew results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SystemColumn {
    /// The message payload (declared in `CREATE QUEUE`).
    Payload,
    /// When Spanner starts delivering the message (`TIMESTAMP`, automatic).
    DeliverTime,
    /// Receive/renew output: when the current lease expires.
    LeaseExpirationTimestamp,
    /// Receive output: the opaque lease token.
    LeaseToken,
    /// Receive output: `TRUE` on the last message of a delivered batch.
    LastBatchMessage,
    /// Renew output: the token that was renewed.
    OldLeaseToken,
    /// Renew output: its replacement (`NULL` if the lease cannot be renewed).
    NewLeaseToken,
}

impl SystemColumn {
    /// The column name in `dialect`, as Spanner documents it.
    pub const fn name(self, dialect: Dialect) -> &'static str {
        match (self, dialect) {
            (Self::Payload, Dialect::GoogleSql) => "Payload",
            (Self::Payload, Dialect::PostgreSql) => "payload",
            (Self::DeliverTime, Dialect::GoogleSql) => "DeliverTime",
            (Self::DeliverTime, Dialect::PostgreSql) => "deliver_time",
            (Self::LeaseExpirationTimestamp, Dialect::GoogleSql) => {
                "SpannerLeaseExpirationTimestamp"
            }
            (Self::LeaseExpirationTimestamp, Dialect::PostgreSql) => {
                "spanner_lease_expiration_timestamp"
            }
            (Self::LeaseToken, Dialect::GoogleSql) => "SpannerLeaseToken",
            (Self::LeaseToken, Dialect::PostgreSql) => "spanner_lease_token",
            (Self::LastBatchMessage, Dialect::GoogleSql) => "SpannerLastBatchMessage",
            (Self::LastBatchMessage, Dialect::PostgreSql) => "spanner_last_batch_message",
            (Self::OldLeaseToken, Dialect::GoogleSql) => "SpannerOldLeaseToken",
            (Self::OldLeaseToken, Dialect::PostgreSql) => "spanner_old_lease_token",
            (Self::NewLeaseToken, Dialect::GoogleSql) => "SpannerNewLeaseToken",
            (Self::NewLeaseToken, Dialect::PostgreSql) => "spanner_new_lease_token",
        }
    }
}

/// What happens to a queue's messages when their parent row is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnDelete {
    /// `ON DELETE CASCADE`: the messages are deleted with the parent row.
    Cascade,
    /// `ON DELETE NO ACTION`: deleting a parent row that still has messages fails.
    NoAction,
}

impl fmt::Display for OnDelete {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cascade => "ON DELETE CASCADE",
            Self::NoAction => "ON DELETE NO ACTION",
        })
    }
}

/// `INTERLEAVE IN [PARENT] table [ON DELETE …]`.
///
/// Interleaving a queue in the table written in the same transaction keeps both together
/// (Spanner documents it); the queue's primary key must start with the parent's key columns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Interleave {
    parent: TableName,
    in_parent: bool,
    on_delete: Option<OnDelete>,
}

impl Interleave {
    /// `INTERLEAVE IN PARENT table`: a parent row must exist for every message.
    pub fn in_parent(table: TableName) -> Self {
        Self {
            parent: table,
            in_parent: true,
            on_delete: None,
        }
    }

    /// `INTERLEAVE IN table`: co-located with the table, without a parent-row requirement.
    pub fn in_table(table: TableName) -> Self {
        Self {
            parent: table,
            in_parent: false,
            on_delete: None,
        }
    }

    /// Adds `ON DELETE …` (only with [`in_parent`](Self::in_parent)).
    pub fn on_delete(mut self, on_delete: OnDelete) -> Self {
        self.on_delete = Some(on_delete);
        self
    }

    /// The parent table.
    pub fn parent(&self) -> &TableName {
        &self.parent
    }

    /// Whether this is `INTERLEAVE IN PARENT`.
    pub fn is_in_parent(&self) -> bool {
        self.in_parent
    }

    /// The `ON DELETE` action, if set.
    pub fn on_delete_action(&self) -> Option<OnDelete> {
        self.on_delete
    }

    fn validate(&self, queue: &QueueName) -> Result<(), SchemaError> {
        if !self.in_parent && self.on_delete.is_some() {
            // [I] By analogy with tables: ON DELETE needs a parent-row relationship.
            return Err(SchemaError::invalid_schema(
                Some(queue.as_str()),
                "ON DELETE requires INTERLEAVE IN PARENT",
            ));
        }
        Ok(())
    }

    fn render(&self, dialect: Dialect) -> Result<String, SchemaError> {
        if dialect == Dialect::PostgreSql && !self.in_parent {
            return Err(SchemaError::unsupported(
                "INTERLEAVE IN without PARENT in PostgreSQL",
            ));
        }
        let mut out = String::from("INTERLEAVE IN ");
        if self.in_parent {
            out.push_str("PARENT ");
        }
        out.push_str(&self.parent.to_sql(dialect));
        if let Some(on_delete) = self.on_delete {
            out.push(' ');
            out.push_str(&on_delete.to_string());
        }
        Ok(out)
    }
}

/// `ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL n DAY))`: deletes messages `n` days
/// after their delivery time, acked or not.
///
/// Spanner documents that queues take row deletion policies but not on which column; this
/// crate assumes `DeliverTime`, the only timestamp a queue has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RowDeletionPolicy {
    days: u32,
}

impl RowDeletionPolicy {
    /// Deletes messages `days` days after their `DeliverTime`.
    pub const fn older_than_days(days: u32) -> Self {
        Self { days }
    }

    /// The number of days.
    pub fn days(&self) -> u32 {
        self.days
    }

    fn render(&self, dialect: Dialect) -> Result<String, SchemaError> {
        match dialect {
            Dialect::GoogleSql => Ok(format!(
                "(OLDER_THAN({}, INTERVAL {} DAY))",
                SystemColumn::DeliverTime.name(dialect),
                self.days
            )),
            Dialect::PostgreSql => Err(SchemaError::unsupported(
                "row deletion policies on queues in PostgreSQL",
            )),
        }
    }
}

/// The `receive_mode` queue option (Spanner documents only `'PULL'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ReceiveMode {
    /// `'PULL'`: consumers call the `RECEIVE_<queue>` function.
    #[default]
    Pull,
}

/// Queue options (`OPTIONS (…)`). Unset options are left out of the statement.
///
/// What `disable_send` and `disable_delivery` do exactly is not documented; this crate assumes
/// what their names say: they stop sends and deliveries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct QueueOptions {
    /// `receive_mode`.
    pub receive_mode: Option<ReceiveMode>,
    /// `disable_send`.
    pub disable_send: Option<bool>,
    /// `disable_delivery`.
    pub disable_delivery: Option<bool>,
    /// `locality_group`.
    pub locality_group: Option<LocalityGroupName>,
}

impl QueueOptions {
    /// No options set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `receive_mode`.
    pub fn with_receive_mode(mut self, mode: ReceiveMode) -> Self {
        self.receive_mode = Some(mode);
        self
    }

    /// Sets `disable_send`.
    pub fn with_disable_send(mut self, disable: bool) -> Self {
        self.disable_send = Some(disable);
        self
    }

    /// Sets `disable_delivery`.
    pub fn with_disable_delivery(mut self, disable: bool) -> Self {
        self.disable_delivery = Some(disable);
        self
    }

    /// Sets `locality_group`.
    pub fn with_locality_group(mut self, group: LocalityGroupName) -> Self {
        self.locality_group = Some(group);
        self
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    fn render(&self, dialect: Dialect) -> Result<String, SchemaError> {
        if dialect == Dialect::PostgreSql {
            return Err(SchemaError::unsupported("queue options in PostgreSQL"));
        }
        let mut parts = Vec::new();
        if let Some(ReceiveMode::Pull) = self.receive_mode {
            parts.push("receive_mode = 'PULL'".to_owned());
        }
        if let Some(v) = self.disable_send {
            parts.push(format!("disable_send = {v}"));
        }
        if let Some(v) = self.disable_delivery {
            parts.push(format!("disable_delivery = {v}"));
        }
        if let Some(group) = &self.locality_group {
            parts.push(format!("locality_group = '{group}'"));
        }
        Ok(format!("OPTIONS ({})", parts.join(", ")))
    }
}

/// The definition of one queue; renders its DDL.
///
/// Names are validated when they are made ([`QueueName`], [`ColumnName`](crate::ident::ColumnName),
/// [`TableName`], [`LocalityGroupName`]); the rest is checked when the schema is validated or
/// rendered, so every problem surfaces as a typed [`SchemaError`] before anything is sent to
/// Spanner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueSchema {
    queue: QueueName,
    key_columns: Vec<KeyColumn>,
    payload: PayloadType,
    interleave: Option<Interleave>,
    row_deletion_policy: Option<RowDeletionPolicy>,
    options: QueueOptions,
}

impl QueueSchema {
    /// A queue named `queue` with a payload of type `payload` and no key columns yet.
    pub fn new(queue: QueueName, payload: PayloadType) -> Self {
        Self {
            queue,
            key_columns: Vec::new(),
            payload,
            interleave: None,
            row_deletion_policy: None,
            options: QueueOptions::default(),
        }
    }

    /// Appends a key column (primary-key order is the order of the calls); its type is the
    /// one its [`KeyType`](crate::key::KeyType) is stored as.
    pub fn with_key_column(mut self, column: KeyColumn) -> Self {
        self.key_columns.push(column);
        self
    }

    /// Sets the payload column type.
    pub fn with_payload(mut self, payload: PayloadType) -> Self {
        self.payload = payload;
        self
    }

    /// Interleaves the queue in a table.
    pub fn with_interleave(mut self, interleave: Interleave) -> Self {
        self.interleave = Some(interleave);
        self
    }

    /// Sets a row deletion policy.
    pub fn with_row_deletion_policy(mut self, policy: RowDeletionPolicy) -> Self {
        self.row_deletion_policy = Some(policy);
        self
    }

    /// Sets the queue options.
    pub fn with_options(mut self, options: QueueOptions) -> Self {
        self.options = options;
        self
    }

    /// The queue name.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// The key columns in primary-key order.
    pub fn key_columns(&self) -> &[KeyColumn] {
        &self.key_columns
    }

    /// The payload column type.
    pub fn payload(&self) -> &PayloadType {
        &self.payload
    }

    /// The interleaving, if any.
    pub fn interleave(&self) -> Option<&Interleave> {
        self.interleave.as_ref()
    }

    /// The row deletion policy, if any.
    pub fn row_deletion_policy(&self) -> Option<RowDeletionPolicy> {
        self.row_deletion_policy
    }

    /// The queue options.
    pub fn options(&self) -> &QueueOptions {
        &self.options
    }

    /// Checks the schema against Spanner's rules (names were checked when they were made).
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`]: no key column, too many, a column declared twice, an
    /// `ON DELETE` without `PARENT`, a payload length out of range. Nothing is sent to Spanner.
    pub fn validate(&self) -> Result<(), SchemaError> {
        let q = Some(self.queue.as_str());
        if self.key_columns.is_empty() {
            return Err(SchemaError::invalid_schema(
                q,
                "a queue needs at least one key column",
            ));
        }
        if self.key_columns.len() > MAX_KEY_COLUMNS {
            return Err(SchemaError::invalid_schema(
                q,
                format!(
                    "{} key columns, more than Spanner's limit of {MAX_KEY_COLUMNS}",
                    self.key_columns.len()
                ),
            ));
        }
        for (i, column) in self.key_columns.iter().enumerate() {
            let name = column.name().as_str();
            column.check_length().map_err(|reason| {
                SchemaError::invalid_schema(q, format!("key column `{name}`: {reason}"))
            })?;
            if self.key_columns[..i]
                .iter()
                .any(|c| c.name().as_str().eq_ignore_ascii_case(name))
            {
                return Err(SchemaError::invalid_schema(
                    q,
                    format!("key column `{name}` is declared twice"),
                ));
            }
        }
        self.payload
            .spanner_type()
            .check_length()
            .map_err(|reason| SchemaError::invalid_schema(q, format!("payload: {reason}")))?;
        if let Some(interleave) = &self.interleave {
            interleave.validate(&self.queue)?;
        }
        Ok(())
    }

    /// `CREATE QUEUE …` for `dialect`.
    ///
    /// # Errors
    /// Those of [`validate`](Self::validate), and [`SchemaError::Unsupported`] for parts that have no
    /// confirmed form in `dialect`.
    pub fn create_statement(&self, dialect: Dialect) -> Result<String, SchemaError> {
        self.render_create(dialect, false)
    }

    /// `CREATE QUEUE IF NOT EXISTS …` for `dialect`.
    ///
    /// # Errors
    /// As [`create_statement`](Self::create_statement); PostgreSQL's form is not documented, so it returns
    /// [`SchemaError::Unsupported`] there.
    pub fn create_if_not_exists_statement(&self, dialect: Dialect) -> Result<String, SchemaError> {
        self.render_create(dialect, true)
    }

    /// `DROP QUEUE …` for this queue (see [`DropQueue`]).
    pub fn drop_statement(&self, dialect: Dialect) -> String {
        DropQueue::new(self.queue.clone()).to_sql(dialect)
    }

    fn render_create(&self, dialect: Dialect, if_not_exists: bool) -> Result<String, SchemaError> {
        self.validate()?;
        let mut columns = Vec::with_capacity(self.key_columns.len() + 2);
        for column in &self.key_columns {
            columns.push(format!(
                "{} {} NOT NULL",
                column.name().to_sql(dialect),
                column.spanner_type().to_sql(dialect)?
            ));
        }
        columns.push(format!(
            "{} {} NOT NULL",
            SystemColumn::Payload.name(dialect),
            self.payload.to_sql(dialect)?
        ));
        let mut key = Vec::with_capacity(self.key_columns.len());
        for column in &self.key_columns {
            let name = column.name().to_sql(dialect);
            key.push(match (column.order(), dialect) {
                (SortOrder::Asc, _) => name,
                (SortOrder::Desc, Dialect::GoogleSql) => format!("{name} DESC"),
                (SortOrder::Desc, Dialect::PostgreSql) => {
                    return Err(SchemaError::unsupported("DESC key columns in PostgreSQL"));
                }
            });
        }
        let key = key.join(", ");
        let queue = self.queue.to_sql(dialect);
        let mut out = String::from("CREATE QUEUE ");
        if if_not_exists {
            // PostgreSQL: not documented for queues; Spanner's PostgreSQL DDL takes
            // `IF NOT EXISTS` for tables and indexes, and this crate assumes the same for
            // queues. Change it here if Spanner refuses it.
            out.push_str("IF NOT EXISTS ");
        }
        out.push_str(&queue);
        match dialect {
            Dialect::GoogleSql => {
                out.push_str(&format!(" ({}) PRIMARY KEY ({key})", columns.join(", ")));
                if let Some(interleave) = &self.interleave {
                    out.push_str(", ");
                    out.push_str(&interleave.render(dialect)?);
                }
                if let Some(policy) = &self.row_deletion_policy {
                    out.push_str(", ROW DELETION POLICY ");
                    out.push_str(&policy.render(dialect)?);
                }
                if !self.options.is_empty() {
                    out.push_str(", ");
                    out.push_str(&self.options.render(dialect)?);
                }
            }
            Dialect::PostgreSql => {
                out.push_str(&format!(" ({}, PRIMARY KEY ({key}))", columns.join(", ")));
                if let Some(interleave) = &self.interleave {
                    out.push(' ');
                    out.push_str(&interleave.render(dialect)?);
                }
                if let Some(policy) = &self.row_deletion_policy {
                    policy.render(dialect)?;
                }
                if !self.options.is_empty() {
                    self.options.render(dialect)?;
                }
            }
        }
        Ok(out)
    }
}

/// One `ALTER QUEUE` action. Spanner documents the first four; the rest are not documented,
/// and this crate assumes they follow `ALTER TABLE`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AlterQueueAction {
    /// `SET OPTIONS (…)`.
    SetOptions(QueueOptions),
    /// `SET ON DELETE {CASCADE | NO ACTION}`.
    SetOnDelete(OnDelete),
    /// `SET INTERLEAVE IN [PARENT] table [ON DELETE …]`.
    SetInterleave(Interleave),
    /// `ADD ROW DELETION POLICY (…)`.
    AddRowDeletionPolicy(RowDeletionPolicy),
    /// `REPLACE ROW DELETION POLICY (…)` (not documented; as for tables).
    ReplaceRowDeletionPolicy(RowDeletionPolicy),
    /// `DROP ROW DELETION POLICY` (not documented; as for tables).
    DropRowDeletionPolicy,
}

/// An `ALTER QUEUE` statement.
///
/// ```
/// use spanner_queues::{Dialect, schema::{AlterQueue, AlterQueueAction, QueueOptions}};
///
/// let alter = AlterQueue::new(
///     spanner_queues::ident::QueueName::new("UserTasks")?,
///     AlterQueueAction::SetOptions(QueueOptions::new().with_disable_delivery(true)),
/// );
/// assert_eq!(
///     alter.to_sql(Dialect::GoogleSql)?,
///     "ALTER QUEUE UserTasks SET OPTIONS (disable_delivery = true)"
/// );
/// # Ok::<(), spanner_queues::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AlterQueue {
    queue: QueueName,
    action: AlterQueueAction,
}

impl AlterQueue {
    /// `ALTER QUEUE queue action`.
    pub fn new(queue: QueueName, action: AlterQueueAction) -> Self {
        Self { queue, action }
    }

    /// The statement for `dialect`.
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] for `SET OPTIONS` with no option or `ON DELETE` without
    /// `PARENT`, [`SchemaError::Unsupported`] for PostgreSQL (its `ALTER QUEUE` forms are not
    /// documented).
    pub fn to_sql(&self, dialect: Dialect) -> Result<String, SchemaError> {
        let queue = &self.queue;
        if dialect == Dialect::PostgreSql {
            return Err(SchemaError::unsupported("ALTER QUEUE in PostgreSQL"));
        }
        let action = match &self.action {
            AlterQueueAction::SetOptions(options) => {
                if options.is_empty() {
                    return Err(SchemaError::invalid_schema(
                        Some(queue.as_str()),
                        "SET OPTIONS needs at least one option",
                    ));
                }
                format!("SET {}", options.render(dialect)?)
            }
            AlterQueueAction::SetOnDelete(on_delete) => format!("SET {on_delete}"),
            AlterQueueAction::SetInterleave(interleave) => {
                interleave.validate(queue)?;
                format!("SET {}", interleave.render(dialect)?)
            }
            AlterQueueAction::AddRowDeletionPolicy(policy) => {
                format!("ADD ROW DELETION POLICY {}", policy.render(dialect)?)
            }
            AlterQueueAction::ReplaceRowDeletionPolicy(policy) => {
                format!("REPLACE ROW DELETION POLICY {}", policy.render(dialect)?)
            }
            AlterQueueAction::DropRowDeletionPolicy => "DROP ROW DELETION POLICY".to_owned(),
        };
        Ok(format!("ALTER QUEUE {} {action}", queue.to_sql(dialect)))
    }
}

/// A `DROP QUEUE` statement.
///
/// Spanner documents that dropping and re-creating a queue under the same name "isn't fully supported":
/// its receive function may take a while to work again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DropQueue {
    queue: QueueName,
}

impl DropQueue {
    /// `DROP QUEUE queue`.
    pub fn new(queue: QueueName) -> Self {
        Self { queue }
    }

    /// The statement for `dialect`. The exact syntax is not documented; this crate assumes
    /// `DROP QUEUE name`, as `DROP TABLE`.
    pub fn to_sql(&self, dialect: Dialect) -> String {
        format!("DROP QUEUE {}", self.queue.to_sql(dialect))
    }
}

/// Helper for tests and docs: whether `name` would be quoted in `dialect`.
#[cfg(test)]
fn renders_quoted(name: &str, dialect: Dialect) -> bool {
    crate::ident::quote_identifier(name, dialect) != name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ident::ColumnName;
    use crate::key::KeyType;
    use crate::schema::Length;

    fn q(name: &str) -> QueueName {
        QueueName::new(name).expect("valid queue name")
    }

    fn col(name: &str, key_type: KeyType) -> KeyColumn {
        KeyColumn::new(ColumnName::new(name).expect("valid column name"), key_type)
    }

    fn table(name: &str) -> TableName {
        TableName::new(name).expect("valid table name")
    }

    /// Normalizes a spec example: strips `--` comments, collapses whitespace, drops the trailing
    /// `;` and the trailing comma allowed before `)`.
    fn normalize(sql: &str) -> String {
        let without_comments: Vec<&str> = sql
            .lines()
            .map(|l| l.split("--").next().unwrap_or_default())
            .collect();
        let mut s = without_comments.join(" ");
        s = s.split_whitespace().collect::<Vec<_>>().join(" ");
        s = s.replace("( ", "(").replace(" )", ")").replace(",)", ")");
        s.trim_end_matches(';').to_owned()
    }

    fn user_tasks() -> QueueSchema {
        QueueSchema::new(q("UserTasks"), PayloadType::Bytes(Length::Max))
            .with_key_column(col("UserId", KeyType::Int64))
            .with_key_column(col("MessageId", KeyType::Uuid))
            .with_interleave(Interleave::in_parent(table("Users")).on_delete(OnDelete::Cascade))
    }

    #[test]
    fn spec_example_user_tasks_googlesql() {
        let spec = "CREATE QUEUE UserTasks (
  UserId     INT64 NOT NULL,
  MessageId  STRING(36) NOT NULL, -- UUID recommended
  Payload    BYTES(MAX) NOT NULL  -- Also: Proto, JSON, String are possible.
) PRIMARY KEY (UserId, MessageId),
INTERLEAVE IN PARENT Users ON DELETE CASCADE;";
        assert_eq!(
            user_tasks()
                .create_statement(Dialect::GoogleSql)
                .expect("renders"),
            normalize(spec)
        );
    }

    #[test]
    fn spec_example_q1() {
        let spec = "CREATE QUEUE Q1 ( Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL, ) PRIMARY KEY (Id), OPTIONS (receive_mode = 'PULL')";
        let schema = QueueSchema::new(q("Q1"), PayloadType::Bytes(Length::Max))
            .with_key_column(col("Id", KeyType::Int64))
            .with_options(QueueOptions::new().with_receive_mode(ReceiveMode::Pull));
        assert_eq!(
            schema
                .create_statement(Dialect::GoogleSql)
                .expect("renders"),
            normalize(spec)
        );
    }

    #[test]
    fn spec_examples_postgresql() {
        let spec = "CREATE QUEUE usertasks (
  userid     bigint NOT NULL,
  messageid  varchar(36) NOT NULL, -- UUID recommended
  payload    bytea NOT NULL, -- Also: text, varchar, jsonb are possible.
  PRIMARY KEY (userid, messageid)
) INTERLEAVE IN PARENT users ON DELETE CASCADE;";
        assert_eq!(
            user_tasks()
                .create_statement(Dialect::PostgreSql)
                .expect("renders"),
            normalize(spec)
        );
        // The spec declares `tasktype varchar(50)`; key columns are typed by their `KeyType`, and a
        // string key is stored as `STRING(MAX)` (`text`), which holds every such value.
        let spec2 = "CREATE QUEUE applicationtasks ( tasktype text NOT NULL, taskid varchar(36) NOT NULL, payload bytea NOT NULL, PRIMARY KEY (tasktype, taskid) );";
        let schema = QueueSchema::new(q("ApplicationTasks"), PayloadType::Bytes(Length::Max))
            .with_key_column(col("TaskType", KeyType::String))
            .with_key_column(col("TaskId", KeyType::Uuid));
        assert_eq!(
            schema
                .create_statement(Dialect::PostgreSql)
                .expect("renders"),
            normalize(spec2)
        );
    }

    #[test]
    fn full_googlesql_create() {
        let schema = QueueSchema::new(q("Order"), PayloadType::Json)
            .with_key_column(col("Shard", KeyType::Int64))
            .with_key_column(col("At", KeyType::Timestamp).with_order(SortOrder::Desc))
            .with_key_column(col("Group", KeyType::String))
            .with_interleave(Interleave::in_table(table("Shards")))
            .with_row_deletion_policy(RowDeletionPolicy::older_than_days(30))
            .with_options(
                QueueOptions::new()
                    .with_receive_mode(ReceiveMode::Pull)
                    .with_disable_send(false)
                    .with_disable_delivery(true)
                    .with_locality_group(LocalityGroupName::new("hot").expect("valid")),
            );
        assert_eq!(
            schema
                .create_if_not_exists_statement(Dialect::GoogleSql)
                .expect("renders"),
            "CREATE QUEUE IF NOT EXISTS `Order` (Shard INT64 NOT NULL, `At` TIMESTAMP NOT NULL, \
             `Group` STRING(MAX) NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Shard, `At` DESC, `Group`), \
             INTERLEAVE IN Shards, ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 30 DAY)), \
             OPTIONS (receive_mode = 'PULL', disable_send = false, disable_delivery = true, locality_group = 'hot')"
        );
        assert!(renders_quoted("Order", Dialect::GoogleSql));
    }

    #[test]
    fn postgresql_unsupported_parts() {
        let base =
            QueueSchema::new(q("Q"), PayloadType::Json).with_key_column(col("Id", KeyType::Int64));
        assert_eq!(
            base.create_statement(Dialect::PostgreSql)
                .expect("plain create"),
            "CREATE QUEUE q (id bigint NOT NULL, payload jsonb NOT NULL, PRIMARY KEY (id))"
        );
        let unsupported = [
            base.clone()
                .with_options(QueueOptions::new().with_disable_send(true)),
            base.clone()
                .with_row_deletion_policy(RowDeletionPolicy::older_than_days(1)),
            base.clone()
                .with_interleave(Interleave::in_table(table("T"))),
            base.clone()
                .with_key_column(col("At", KeyType::Timestamp).with_order(SortOrder::Desc)),
            base.clone().with_payload(PayloadType::Proto("a.B".into())),
        ];
        for schema in unsupported {
            let err = schema
                .create_statement(Dialect::PostgreSql)
                .expect_err("unsupported");
            assert!(
                matches!(err, SchemaError::Unsupported { .. }),
                "{schema:?}: {err:?}"
            );
        }
        assert!(
            base.create_if_not_exists_statement(Dialect::PostgreSql)
                .expect("rendered")
                .starts_with("CREATE QUEUE IF NOT EXISTS q (")
        );
        assert!(matches!(
            AlterQueue::new(q("Q"), AlterQueueAction::DropRowDeletionPolicy)
                .to_sql(Dialect::PostgreSql),
            Err(SchemaError::Unsupported { .. })
        ));
        assert_eq!(base.drop_statement(Dialect::PostgreSql), "DROP QUEUE q");
    }

    #[test]
    fn key_columns_keep_a_declared_length() {
        let schema = QueueSchema::new(q("Q"), PayloadType::Json)
            .with_key_column(col("Sku", KeyType::String).with_max_length(64))
            .with_key_column(col("Tag", KeyType::Bytes).with_max_length(16))
            .with_key_column(col("Id", KeyType::Uuid));
        assert_eq!(
            schema.create_statement(Dialect::GoogleSql).expect("render"),
            "CREATE QUEUE Q (Sku STRING(64) NOT NULL, Tag BYTES(16) NOT NULL, \
             Id STRING(36) NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Sku, Tag, Id)"
        );
        let pg = QueueSchema::new(q("Q"), PayloadType::Json)
            .with_key_column(col("Sku", KeyType::String).with_max_length(64));
        assert!(
            pg.create_statement(Dialect::PostgreSql)
                .expect("render")
                .contains("sku varchar(64) NOT NULL")
        );
    }

    #[test]
    fn validation_errors() {
        let ok =
            QueueSchema::new(q("Q"), PayloadType::Json).with_key_column(col("Id", KeyType::Int64));
        assert!(ok.validate().is_ok());
        let invalid = [
            QueueSchema::new(q("Q"), PayloadType::Json),
            ok.clone().with_key_column(col("ID", KeyType::String)),
            ok.clone()
                .with_interleave(Interleave::in_table(table("P")).on_delete(OnDelete::Cascade)),
            ok.clone()
                .with_payload(PayloadType::Bytes(Length::Fixed(u32::MAX))),
            ok.clone()
                .with_key_column(col("Flag", KeyType::Int64).with_max_length(8)),
            ok.clone()
                .with_key_column(col("Name", KeyType::String).with_max_length(0)),
            ok.clone()
                .with_key_column(col("Blob", KeyType::Bytes).with_max_length(MAX_BYTES_LENGTH + 1)),
        ];
        for schema in invalid {
            let err = schema
                .create_statement(Dialect::GoogleSql)
                .expect_err("invalid");
            assert!(
                matches!(err, SchemaError::InvalidSchema { .. }),
                "{schema:?} gave {err:?}"
            );
        }
        let mut many = QueueSchema::new(q("Q"), PayloadType::Json);
        for i in 0..=MAX_KEY_COLUMNS {
            many = many.with_key_column(col(&format!("K{i}"), KeyType::Int64));
        }
        assert!(matches!(
            many.validate(),
            Err(SchemaError::InvalidSchema { .. })
        ));
    }

    #[test]
    fn bad_names_are_refused_before_a_schema_holds_them() {
        assert!(QueueName::new("bad name").is_err());
        assert!(ColumnName::new("Payload").is_err());
        assert!(TableName::new("9parent").is_err());
        assert!(LocalityGroupName::new("it's").is_err());
    }

    #[test]
    fn alter_statements() {
        let sql = |action| AlterQueue::new(q("UserTasks"), action).to_sql(Dialect::GoogleSql);
        assert_eq!(
            sql(AlterQueueAction::SetOnDelete(OnDelete::NoAction)).expect("ok"),
            "ALTER QUEUE UserTasks SET ON DELETE NO ACTION"
        );
        assert_eq!(
            sql(AlterQueueAction::SetInterleave(
                Interleave::in_parent(table("Users")).on_delete(OnDelete::Cascade)
            ))
            .expect("ok"),
            "ALTER QUEUE UserTasks SET INTERLEAVE IN PARENT Users ON DELETE CASCADE"
        );
        assert_eq!(
            sql(AlterQueueAction::AddRowDeletionPolicy(
                RowDeletionPolicy::older_than_days(7)
            ))
            .expect("ok"),
            "ALTER QUEUE UserTasks ADD ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY))"
        );
        assert_eq!(
            sql(AlterQueueAction::ReplaceRowDeletionPolicy(
                RowDeletionPolicy::older_than_days(3)
            ))
            .expect("ok"),
            "ALTER QUEUE UserTasks REPLACE ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 3 DAY))"
        );
        assert_eq!(
            sql(AlterQueueAction::DropRowDeletionPolicy).expect("ok"),
            "ALTER QUEUE UserTasks DROP ROW DELETION POLICY"
        );
        assert_eq!(
            sql(AlterQueueAction::SetOptions(
                QueueOptions::new()
                    .with_disable_send(true)
                    .with_receive_mode(ReceiveMode::Pull)
            ))
            .expect("ok"),
            "ALTER QUEUE UserTasks SET OPTIONS (receive_mode = 'PULL', disable_send = true)"
        );
        assert!(matches!(
            sql(AlterQueueAction::SetOptions(QueueOptions::new())),
            Err(SchemaError::InvalidSchema { .. })
        ));
        assert!(matches!(
            sql(AlterQueueAction::SetInterleave(
                Interleave::in_table(table("Users")).on_delete(OnDelete::Cascade)
            )),
            Err(SchemaError::InvalidSchema { .. })
        ));
        assert_eq!(
            DropQueue::new(q("Select")).to_sql(Dialect::GoogleSql),
            "DROP QUEUE `Select`"
        );
    }

    #[test]
    fn system_column_names() {
        assert_eq!(
            SystemColumn::LeaseToken.name(Dialect::GoogleSql),
            "SpannerLeaseToken"
        );
        assert_eq!(
            SystemColumn::DeliverTime.name(Dialect::PostgreSql),
            "deliver_time"
        );
        for c in [
            SystemColumn::LeaseExpirationTimestamp,
            SystemColumn::LeaseToken,
            SystemColumn::LastBatchMessage,
            SystemColumn::OldLeaseToken,
            SystemColumn::NewLeaseToken,
            SystemColumn::DeliverTime,
            SystemColumn::Payload,
        ] {
            // No key column may take a system column's name, in either dialect.
            for d in [Dialect::GoogleSql, Dialect::PostgreSql] {
                assert!(ColumnName::new(c.name(d)).is_err(), "{}", c.name(d));
            }
        }
    }
}
