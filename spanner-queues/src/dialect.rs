//! The SQL dialect of a database: a leaf that every layer may use.

/// The SQL dialect of a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Dialect {
    /// GoogleSQL (the default).
    #[default]
    GoogleSql,
    /// PostgreSQL.
    PostgreSql,
}
