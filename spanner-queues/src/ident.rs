//! Validated Spanner identifiers: queue, column and table names.
//!
//! Spanner's naming rules for schema objects: 1 to 128 characters, starting with an ASCII letter,
//! then ASCII letters, digits and underscores. A queue name must leave room for the table-valued
//! functions Spanner derives from it (`RECEIVE_<queue>`, `RENEWLEASE_<queue>`), so it is at most
//! 117 characters long.
//!
//! Reserved keywords (GoogleSQL's list, and PostgreSQL's for that dialect) are valid names: they
//! are always quoted when rendered (backticks in GoogleSQL, double quotes in PostgreSQL).
//!
//! The same rules run at compile time inside `#[derive(QueueMessage)]` (the macro crate keeps a
//! small copy of them; a test in this crate checks that both copies agree).

use std::borrow::Cow;
use std::fmt;

use crate::dialect::Dialect;

/// Longest identifier Spanner accepts (Spanner documents it in its naming rules).
pub const MAX_IDENTIFIER_LEN: usize = 128;

/// Prefix of the renew-lease table-valued function, the longer of the two derived names.
const RENEW_LEASE_PREFIX: &str = "RENEWLEASE_";

/// Longest queue name whose derived `RENEWLEASE_<queue>` function name still fits in
/// [`MAX_IDENTIFIER_LEN`]. Not documented; this crate assumes the function name follows the
/// table naming limit.
pub const MAX_QUEUE_NAME_LEN: usize = MAX_IDENTIFIER_LEN - RENEW_LEASE_PREFIX.len();

/// What an identifier names; it decides which extra rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdentifierKind {
    /// A queue name.
    Queue,
    /// A key column name of a queue.
    Column,
    /// A table name, such as the parent of an interleaved queue.
    Table,
    /// A locality group name.
    LocalityGroup,
}

impl IdentifierKind {
    /// A stable lower-case name, used in messages and error metadata.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::Column => "column",
            Self::Table => "table",
            Self::LocalityGroup => "locality group",
        }
    }
}

impl fmt::Display for IdentifierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an identifier was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdentifierProblem {
    /// The name is empty.
    Empty,
    /// The name is longer than Spanner allows (or, for a queue, leaves no room for the
    /// `RENEWLEASE_` prefix of its derived function name).
    TooLong,
    /// The first character is not an ASCII letter.
    InvalidStart,
    /// A character other than an ASCII letter, digit or `_`.
    InvalidCharacter,
    /// The name of a system column (`Payload`, `DeliverTime`, `deliver_time`), or a name
    /// starting with `Spanner`, which Spanner uses for the columns it adds to receive results.
    ReservedForSystem,
}

impl IdentifierProblem {
    /// A stable snake_case code, used in error metadata and by the drift test against the
    /// derive macro's copy of the rules.
    pub const fn code(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::TooLong => "too_long",
            Self::InvalidStart => "invalid_start",
            Self::InvalidCharacter => "invalid_character",
            Self::ReservedForSystem => "reserved_for_system",
        }
    }

    const fn describe(self) -> &'static str {
        match self {
            Self::Empty => "it is empty",
            Self::TooLong => "it is too long",
            Self::InvalidStart => "it must start with an ASCII letter",
            Self::InvalidCharacter => "it may contain only ASCII letters, digits and underscores",
            Self::ReservedForSystem => "the name is reserved for Spanner's system columns",
        }
    }
}

/// An identifier that breaks Spanner's naming rules.
///
/// Nothing was sent to Spanner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} name `{name}`: {}{}", problem.describe(), limit_hint(*kind, *problem))]
pub struct IdentifierError {
    kind: IdentifierKind,
    name: String,
    problem: IdentifierProblem,
}

fn limit_hint(kind: IdentifierKind, problem: IdentifierProblem) -> String {
    match (problem, kind) {
        (IdentifierProblem::TooLong, IdentifierKind::Queue) => format!(
            " (at most {MAX_QUEUE_NAME_LEN} characters, so that `{RENEW_LEASE_PREFIX}<queue>` fits)"
        ),
        (IdentifierProblem::TooLong, _) => format!(" (at most {MAX_IDENTIFIER_LEN} characters)"),
        _ => String::new(),
    }
}

impl IdentifierError {
    pub(crate) fn new(
        kind: IdentifierKind,
        name: impl Into<String>,
        problem: IdentifierProblem,
    ) -> Self {
        Self {
            kind,
            name: name.into(),
            problem,
        }
    }

    /// What the rejected name was for.
    pub fn kind(&self) -> IdentifierKind {
        self.kind
    }

    /// The rejected name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which rule the name breaks.
    pub fn problem(&self) -> IdentifierProblem {
        self.problem
    }
}

const fn eq_ignore_ascii_case(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if !a[i].eq_ignore_ascii_case(&b[i]) {
            return false;
        }
        i += 1;
    }
    true
}

const fn starts_with_ignore_ascii_case(s: &[u8], prefix: &[u8]) -> bool {
    if s.len() < prefix.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if !s[i].eq_ignore_ascii_case(&prefix[i]) {
            return false;
        }
        i += 1;
    }
    true
}

/// Checks `name` against the rules for `kind`. Usable in constant expressions.
///
/// This is the single source of the runtime rules; `spanner-queues-macros` keeps a copy for
/// compile-time checks, and `tests/derive.rs` checks the two agree.
pub const fn check_identifier(kind: IdentifierKind, name: &str) -> Result<(), IdentifierProblem> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Err(IdentifierProblem::Empty);
    }
    let max = match kind {
        IdentifierKind::Queue => MAX_QUEUE_NAME_LEN,
        _ => MAX_IDENTIFIER_LEN,
    };
    if bytes.len() > max {
        return Err(IdentifierProblem::TooLong);
    }
    if !bytes[0].is_ascii_alphabetic() {
        return Err(IdentifierProblem::InvalidStart);
    }
    let mut i = 1;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_alphanumeric() || b == b'_') {
            return Err(IdentifierProblem::InvalidCharacter);
        }
        i += 1;
    }
    if let IdentifierKind::Column = kind {
        // [C] `Payload`/`DeliverTime` (PG: `payload`, `deliver_time`) are the queue's own
        // columns. [I] Receive and renew results add columns named `Spanner…`
        // (`SpannerLeaseToken`, PG `spanner_lease_token`, …): a key column with such a name
        // would clash there, so the whole prefix is kept for Spanner.
        if eq_ignore_ascii_case(bytes, b"Payload")
            || eq_ignore_ascii_case(bytes, b"DeliverTime")
            || eq_ignore_ascii_case(bytes, b"deliver_time")
            || starts_with_ignore_ascii_case(bytes, b"spanner")
        {
            return Err(IdentifierProblem::ReservedForSystem);
        }
    }
    Ok(())
}

/// Validates `name`, returning a typed error.
pub fn validate_identifier(kind: IdentifierKind, name: &str) -> Result<(), IdentifierError> {
    check_identifier(kind, name).map_err(|problem| IdentifierError::new(kind, name, problem))
}

const fn checked_static(kind: IdentifierKind, name: &'static str) -> Cow<'static, str> {
    match check_identifier(kind, name) {
        Ok(()) => Cow::Borrowed(name),
        // These panics only ever run during constant evaluation in practice (see the
        // `from_static` docs), where they are compile errors.
        Err(IdentifierProblem::Empty) => panic!("invalid Spanner identifier: it is empty"),
        Err(IdentifierProblem::TooLong) => panic!("invalid Spanner identifier: it is too long"),
        Err(IdentifierProblem::InvalidStart) => {
            panic!("invalid Spanner identifier: it must start with an ASCII letter")
        }
        Err(IdentifierProblem::InvalidCharacter) => panic!(
            "invalid Spanner identifier: it may contain only ASCII letters, digits and underscores"
        ),
        Err(IdentifierProblem::ReservedForSystem) => {
            panic!("invalid Spanner identifier: the name is reserved for Spanner's system columns")
        }
    }
}

macro_rules! identifier_type {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Cow<'static, str>);

        impl $name {
            /// Validates and wraps a name.
            ///
            /// # Errors
            /// [`IdentifierError`] if the name breaks Spanner's naming rules (see the
            /// [module docs](crate::ident)). Nothing is sent to Spanner.
            pub fn new(name: impl Into<String>) -> Result<Self, IdentifierError> {
                let name = name.into();
                validate_identifier($kind, &name)?;
                Ok(Self(Cow::Owned(name)))
            }

            /// The name as written.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The name as it appears in SQL for `dialect`: reserved keywords are quoted, and
            /// PostgreSQL names are folded to lower case (what PostgreSQL does with unquoted
            /// names anyway, so quoted and unquoted uses agree).
            pub fn to_sql(&self, dialect: Dialect) -> String {
                quote_identifier(&self.0, dialect)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdentifierError;
            fn try_from(value: &str) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdentifierError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                *self.0 == *other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                *self.0 == **other
            }
        }
    };
}

identifier_type!(
    /// The name of a queue: the stable identity of a message type.
    ///
    /// ```
    /// use spanner_queues::{Dialect, ident::QueueName};
    ///
    /// let queue = QueueName::new("UserTasks")?;
    /// assert_eq!(queue.receive_function(Dialect::GoogleSql), "RECEIVE_UserTasks");
    /// assert_eq!(queue.renew_lease_function(Dialect::PostgreSql), "spanner.renewlease_usertasks");
    /// assert!(QueueName::new("user-tasks").is_err());
    /// # Ok::<(), spanner_queues::ident::IdentifierError>(())
    /// ```
    QueueName,
    IdentifierKind::Queue
);

identifier_type!(
    /// The name of a key column of a queue.
    ///
    /// `Payload` and `DeliverTime` (any case), and names starting with `Spanner`, are rejected:
    /// Spanner uses them for its own columns.
    ColumnName,
    IdentifierKind::Column
);

identifier_type!(
    /// The name of a table, such as the parent of an interleaved queue.
    TableName,
    IdentifierKind::Table
);

identifier_type!(
    /// The name of a locality group (the `locality_group` queue option).
    LocalityGroupName,
    IdentifierKind::LocalityGroup
);

impl QueueName {
    /// Wraps a `'static` queue name, checking it during constant evaluation: in a `const` item
    /// an invalid name is a compile error.
    ///
    /// # Panics
    /// If the name is invalid and the call is evaluated at run time. Use [`new`](Self::new)
    /// for names that are not compile-time constants.
    pub const fn from_static(name: &'static str) -> Self {
        Self(checked_static(IdentifierKind::Queue, name))
    }

    /// The name as a `Cow`: borrowed, without a copy, for a `'static` name.
    pub(crate) fn to_cow(&self) -> Cow<'static, str> {
        self.0.clone()
    }
}

impl ColumnName {
    /// Wraps a `'static` column name, checking it during constant evaluation: in a `const`
    /// item an invalid name is a compile error.
    ///
    /// # Panics
    /// If the name is invalid and the call is evaluated at run time. Use [`new`](Self::new)
    /// for names that are not compile-time constants.
    pub const fn from_static(name: &'static str) -> Self {
        Self(checked_static(IdentifierKind::Column, name))
    }
}

impl TableName {
    /// Wraps a `'static` table name, checking it during constant evaluation: in a `const` item
    /// an invalid name is a compile error.
    ///
    /// # Panics
    /// If the name is invalid and the call is evaluated at run time. Use [`new`](Self::new)
    /// for names that are not compile-time constants.
    pub const fn from_static(name: &'static str) -> Self {
        Self(checked_static(IdentifierKind::Table, name))
    }
}

impl LocalityGroupName {
    /// Wraps a `'static` locality group name, checking it during constant evaluation: in a
    /// `const` item an invalid name is a compile error.
    ///
    /// # Panics
    /// If the name is invalid and the call is evaluated at run time. Use [`new`](Self::new)
    /// for names that are not compile-time constants.
    pub const fn from_static(name: &'static str) -> Self {
        Self(checked_static(IdentifierKind::LocalityGroup, name))
    }
}

impl QueueName {
    /// The receive table-valued function of this queue: `RECEIVE_<Queue>` in GoogleSQL,
    /// `spanner.receive_<queue>` in PostgreSQL, as Spanner documents.
    pub fn receive_function(&self, dialect: Dialect) -> String {
        match dialect {
            Dialect::GoogleSql => format!("RECEIVE_{}", self.0),
            Dialect::PostgreSql => format!("spanner.receive_{}", self.0.to_ascii_lowercase()),
        }
    }

    /// The renew-lease table-valued function of this queue: `RENEWLEASE_<Queue>` in GoogleSQL,
    /// `spanner.renewlease_<queue>` in PostgreSQL, as Spanner documents.
    pub fn renew_lease_function(&self, dialect: Dialect) -> String {
        match dialect {
            Dialect::GoogleSql => format!("RENEWLEASE_{}", self.0),
            Dialect::PostgreSql => format!("spanner.renewlease_{}", self.0.to_ascii_lowercase()),
        }
    }
}

/// Renders an already validated identifier for `dialect`.
pub(crate) fn quote_identifier(name: &str, dialect: Dialect) -> String {
    let mut sql = String::with_capacity(name.len() + 2);
    push_identifier(&mut sql, name, dialect);
    sql
}

/// Appends an already validated identifier, rendered for `dialect`, to `sql`: reserved keywords
/// are quoted, and PostgreSQL names are folded to lower case.
pub(crate) fn push_identifier(sql: &mut String, name: &str, dialect: Dialect) {
    let quote = match dialect {
        Dialect::GoogleSql => '`',
        Dialect::PostgreSql => '"',
    };
    let quoted = is_reserved_keyword(name, dialect);
    if quoted {
        sql.push(quote);
    }
    match dialect {
        Dialect::GoogleSql => sql.push_str(name),
        Dialect::PostgreSql => sql.extend(name.chars().map(|c| c.to_ascii_lowercase())),
    }
    if quoted {
        sql.push(quote);
    }
}

/// Whether `name` is a reserved keyword of `dialect` (case-insensitive).
pub fn is_reserved_keyword(name: &str, dialect: Dialect) -> bool {
    // One list for the SDK and the emulator's parser, so that both quote the same names.
    match dialect {
        Dialect::GoogleSql => spanner_queues_sql::is_google_sql_reserved(name),
        Dialect::PostgreSql => spanner_queues_sql::is_postgres_reserved(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for name in ["UserTasks", "Q1", "a", "order_emails", "A_1_b"] {
            assert_eq!(
                check_identifier(IdentifierKind::Queue, name),
                Ok(()),
                "{name}"
            );
            assert_eq!(
                check_identifier(IdentifierKind::Column, name),
                Ok(()),
                "{name}"
            );
        }
    }

    #[test]
    fn rejects_by_rule() {
        use IdentifierProblem::*;
        let cases = [
            ("", Empty),
            ("1abc", InvalidStart),
            ("_abc", InvalidStart),
            ("user-tasks", InvalidCharacter),
            ("user tasks", InvalidCharacter),
            ("Ünïcode", InvalidStart),
            ("abcé", InvalidCharacter),
        ];
        for (name, problem) in cases {
            assert_eq!(
                check_identifier(IdentifierKind::Queue, name),
                Err(problem),
                "{name:?}"
            );
        }
    }

    #[test]
    fn length_limits_differ_for_queues() {
        let at_queue_limit = "q".repeat(MAX_QUEUE_NAME_LEN);
        let over_queue_limit = "q".repeat(MAX_QUEUE_NAME_LEN + 1);
        let at_limit = "c".repeat(MAX_IDENTIFIER_LEN);
        let over_limit = "c".repeat(MAX_IDENTIFIER_LEN + 1);
        assert_eq!(
            check_identifier(IdentifierKind::Queue, &at_queue_limit),
            Ok(())
        );
        assert_eq!(
            check_identifier(IdentifierKind::Queue, &over_queue_limit),
            Err(IdentifierProblem::TooLong)
        );
        assert_eq!(check_identifier(IdentifierKind::Column, &at_limit), Ok(()));
        assert_eq!(
            check_identifier(IdentifierKind::Column, &over_limit),
            Err(IdentifierProblem::TooLong)
        );
        let q = QueueName::new(at_queue_limit).expect("valid");
        assert_eq!(
            q.renew_lease_function(Dialect::GoogleSql).len(),
            MAX_IDENTIFIER_LEN
        );
    }

    #[test]
    fn system_names_rejected_for_columns_only() {
        for name in [
            "Payload",
            "payload",
            "DeliverTime",
            "DELIVERTIME",
            "deliver_time",
            "SpannerLeaseToken",
            "spanner_x",
        ] {
            assert_eq!(
                check_identifier(IdentifierKind::Column, name),
                Err(IdentifierProblem::ReservedForSystem),
                "{name}"
            );
            assert_eq!(
                check_identifier(IdentifierKind::Queue, name),
                Ok(()),
                "{name}"
            );
        }
    }

    #[test]
    fn reserved_keywords_are_quoted() {
        let order = ColumnName::new("Order").expect("reserved words are valid names");
        assert_eq!(order.to_sql(Dialect::GoogleSql), "`Order`");
        assert_eq!(order.to_sql(Dialect::PostgreSql), "\"order\"");
        let id = ColumnName::new("UserId").expect("valid");
        assert_eq!(id.to_sql(Dialect::GoogleSql), "UserId");
        assert_eq!(id.to_sql(Dialect::PostgreSql), "userid");
        // Reserved in PostgreSQL only.
        let user = TableName::new("User").expect("valid");
        assert_eq!(user.to_sql(Dialect::GoogleSql), "User");
        assert_eq!(user.to_sql(Dialect::PostgreSql), "\"user\"");
    }

    #[test]
    fn error_message_names_the_rule() {
        let err = QueueName::new("user-tasks").expect_err("invalid");
        assert_eq!(err.kind(), IdentifierKind::Queue);
        assert_eq!(err.problem(), IdentifierProblem::InvalidCharacter);
        assert_eq!(
            err.to_string(),
            "invalid queue name `user-tasks`: it may contain only ASCII letters, digits and underscores"
        );
        let long = QueueName::new("q".repeat(200)).expect_err("too long");
        assert!(
            long.to_string().contains("at most 117 characters"),
            "{long}"
        );
    }

    #[test]
    fn const_construction() {
        const Q: QueueName = QueueName::from_static("OrderEmails");
        assert_eq!(Q.as_str(), "OrderEmails");
        assert_eq!(Q, "OrderEmails");
    }
}
