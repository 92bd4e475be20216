//! Errors.

/// The gRPC status class of a [`DdlError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DdlErrorCode {
    /// `INVALID_ARGUMENT`: the statement is malformed or describes an invalid queue.
    InvalidArgument,
    /// `NOT_FOUND`: the statement names a queue or table that does not exist.
    NotFound,
    /// `ALREADY_EXISTS`: the statement creates something whose name is taken.
    AlreadyExists,
    /// `FAILED_PRECONDITION`: the statement is valid but not in the current schema state.
    FailedPrecondition,
    /// `UNIMPLEMENTED`: valid for Cloud Spanner, but not supported by the emulator.
    Unimplemented,
    /// `INTERNAL`: the backend schema holds a queue table this front cannot read.
    Internal,
}

/// Why a DDL statement cannot be translated, or a backend schema cannot be read.
///
/// Every message is meant for the end user, names the queue and the offending column or option,
/// and does not mention the backend representation (except [`DdlError::CorruptBackend`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum DdlError {
    /// The statement does not follow the grammar.
    #[error("Error parsing {statement} statement: {message}")]
    Syntax {
        /// The statement kind, e.g. `CREATE QUEUE`.
        statement: &'static str,
        /// What was expected and what was found.
        message: String,
    },
    /// A queue without a `Payload` column.
    #[error(
        "Queue {queue} has no Payload column: a queue must declare `Payload <type> NOT NULL` \
         after its key columns"
    )]
    MissingPayload {
        /// The queue.
        queue: String,
    },
    /// The payload column is nullable.
    #[error("Column {column} of queue {queue} must be declared NOT NULL")]
    PayloadNullable {
        /// The queue.
        queue: String,
        /// The payload column as spelled.
        column: String,
    },
    /// The payload column has a type a queue does not allow.
    #[error(
        "Column {column} of queue {queue} has type {found}; the payload of a queue must be \
         BYTES(n), STRING(n), JSON or a PROTO type"
    )]
    PayloadType {
        /// The queue.
        queue: String,
        /// The payload column as spelled.
        column: String,
        /// The declared type.
        found: String,
    },
    /// The payload column of a PostgreSQL-dialect queue has a type a queue does not allow.
    #[error(
        "Column {column} of queue {queue} has type {found}; the payload of a queue must be \
         bytea, text, varchar or jsonb"
    )]
    PgPayloadType {
        /// The queue.
        queue: String,
        /// The payload column as spelled.
        column: String,
        /// The declared type.
        found: String,
    },
    /// The payload column is part of the primary key.
    #[error(
        "Column {column} of queue {queue} is the payload and cannot be part of the primary key"
    )]
    PayloadInPrimaryKey {
        /// The queue.
        queue: String,
        /// The payload column as spelled.
        column: String,
    },
    /// `DeliverTime` is declared; it is a system column.
    #[error(
        "Queue {queue} declares column {column}, a system column that every queue gets \
         automatically; remove it from the statement"
    )]
    DeliverTimeDeclared {
        /// The queue.
        queue: String,
        /// The column as spelled.
        column: String,
    },
    /// A column that is neither a key column nor the payload.
    #[error(
        "Column {column} of queue {queue} is not part of the primary key: a queue holds only \
         its primary key columns and the Payload column"
    )]
    NonKeyColumn {
        /// The queue.
        queue: String,
        /// The column as spelled.
        column: String,
    },
    /// The primary key names a column that is not declared.
    #[error("The primary key of queue {queue} names column {column}, which is not declared")]
    UndeclaredKeyColumn {
        /// The queue.
        queue: String,
        /// The key column as spelled.
        column: String,
    },
    /// The same column is declared twice.
    #[error("Queue {queue} declares column {column} more than once")]
    DuplicateColumn {
        /// The queue.
        queue: String,
        /// The column as spelled.
        column: String,
    },
    /// A column uses a name reserved by the queue system or by the emulator.
    #[error("Column name {column} in {object} is reserved for queues' internal use")]
    ReservedColumn {
        /// The queue or table.
        object: String,
        /// The column as spelled.
        column: String,
    },
    /// An option a queue does not have.
    #[error(
        "Unknown option {option} for queue {queue}; the queue options are receive_mode, \
         disable_send, disable_delivery and locality_group"
    )]
    UnknownOption {
        /// The queue.
        queue: String,
        /// The option as spelled.
        option: String,
    },
    /// An option value of the wrong type or outside the allowed values.
    #[error("Invalid value {value} for option {option} of queue {queue}: expected {expected}")]
    InvalidOptionValue {
        /// The queue.
        queue: String,
        /// The option.
        option: String,
        /// The value as written.
        value: String,
        /// What the option accepts.
        expected: &'static str,
    },
    /// A queue name with a schema qualifier.
    #[error("Queue {queue} cannot be created: queues cannot be created in named schemas")]
    NamedSchema {
        /// The queue name as written, qualifier included.
        queue: String,
    },
    /// Any other rule of the queue grammar is broken.
    #[error("Invalid definition of queue {queue}: {reason}")]
    InvalidQueue {
        /// The queue.
        queue: String,
        /// The broken rule.
        reason: String,
    },
    /// `CREATE QUEUE` of a queue that exists.
    #[error("Duplicate name in schema: {queue}. Queue {queue} already exists")]
    QueueExists {
        /// The queue.
        queue: String,
    },
    /// `CREATE QUEUE` of a name that a table uses.
    #[error("Duplicate name in schema: {name}. A table named {name} already exists")]
    NameInUse {
        /// The name.
        name: String,
    },
    /// The statement names a queue that does not exist.
    #[error("Queue not found: {queue}")]
    QueueNotFound {
        /// The queue as written.
        queue: String,
    },
    /// The statement names a table that does not exist.
    #[error("Table not found: {table}")]
    TableNotFound {
        /// The table as written.
        table: String,
    },
    /// A table statement names a queue.
    #[error("{name} is a queue; use {statement} instead")]
    UseQueueStatement {
        /// The queue.
        name: String,
        /// The statement to use, e.g. `DROP QUEUE`.
        statement: &'static str,
    },
    /// A queue statement names a table.
    #[error("{name} is a table, not a queue; use {statement} instead")]
    NotAQueue {
        /// The table.
        name: String,
        /// The statement to use, e.g. `DROP TABLE`.
        statement: &'static str,
    },
    /// A table cannot be dropped or renamed while a queue is interleaved in it.
    #[error("Cannot {action} table {table}: queue {queue} is interleaved in it")]
    InterleavedQueue {
        /// `drop` or `rename`.
        action: &'static str,
        /// The table.
        table: String,
        /// The interleaved queue.
        queue: String,
    },
    /// A valid `ALTER QUEUE` that the queue's current state does not allow.
    #[error("Cannot alter queue {queue}: {reason}")]
    AlterRejected {
        /// The queue.
        queue: String,
        /// Why.
        reason: String,
    },
    /// A change stream names a queue.
    #[error(
        "Change stream {stream} cannot track queue {queue}: change streams cannot track queues"
    )]
    ChangeStreamOnQueue {
        /// The change stream.
        stream: String,
        /// The queue.
        queue: String,
    },
    /// A statement that starts like a queue statement but is none of the supported ones.
    #[error("Unsupported queue statement: {reason}")]
    UnsupportedStatement {
        /// What is wrong, and what is supported.
        reason: String,
    },
    /// Valid for Cloud Spanner, not supported by the emulator.
    #[error("{what} is not supported by the spanner-queues emulator")]
    Unsupported {
        /// The unsupported feature.
        what: String,
    },
    /// The backend holds a queue table that this front cannot read.
    #[error("The emulator's stored schema for queue {queue} is not valid: {reason}")]
    CorruptBackend {
        /// The queue (table) name.
        queue: String,
        /// What is wrong.
        reason: String,
    },
}

impl DdlError {
    /// The gRPC status class to report this error with.
    pub(crate) fn code(&self) -> DdlErrorCode {
        match self {
            DdlError::QueueNotFound { .. } | DdlError::TableNotFound { .. } => {
                DdlErrorCode::NotFound
            }
            DdlError::QueueExists { .. } | DdlError::NameInUse { .. } => {
                DdlErrorCode::AlreadyExists
            }
            DdlError::UseQueueStatement { .. }
            | DdlError::NotAQueue { .. }
            | DdlError::InterleavedQueue { .. }
            | DdlError::AlterRejected { .. } => DdlErrorCode::FailedPrecondition,
            DdlError::Unsupported { .. } => DdlErrorCode::Unimplemented,
            DdlError::CorruptBackend { .. } => DdlErrorCode::Internal,
            _ => DdlErrorCode::InvalidArgument,
        }
    }
}

impl From<spanner_queues_sql::SyntaxError> for DdlError {
    fn from(error: spanner_queues_sql::SyntaxError) -> Self {
        DdlError::Syntax {
            statement: error.statement,
            message: error.message,
        }
    }
}
