//! Spanner column types used in queue schemas.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use crate::dialect::Dialect;

/// Why a schema or a column type cannot be rendered: the error of the pure DDL layer
/// ([`schema`](crate::schema) and its types), which sends nothing to Spanner.
///
/// It converts into the crate's [`Error`](crate::Error) (the variant of the same name), so `?`
/// works in functions returning [`spanner_queues::Result`](crate::Result).
// Defined here rather than in `schema` because column types render too, and `types` sits below
// `schema` (keys use column types, schemas use keys).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The schema is inconsistent (no key column, duplicate columns, a type that cannot be a
    /// key, a length out of range, …). The reason names the offending column or clause.
    #[error("invalid queue schema{}: {reason}", queue_suffix(queue.as_deref()))]
    #[non_exhaustive]
    InvalidSchema {
        /// The queue, if the schema got that far.
        queue: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// A form this crate cannot render (for instance a PostgreSQL form that is not documented
    /// yet): use GoogleSQL, or write that statement by hand.
    #[error("not supported: {feature}")]
    #[non_exhaustive]
    Unsupported {
        /// What is not supported.
        feature: String,
    },
}

impl SchemaError {
    pub(crate) fn unsupported(feature: impl Into<String>) -> Self {
        Self::Unsupported {
            feature: feature.into(),
        }
    }

    pub(crate) fn invalid_schema(queue: Option<&str>, reason: impl Into<String>) -> Self {
        Self::InvalidSchema {
            queue: queue.map(str::to_owned),
            reason: reason.into(),
        }
    }
}

pub(crate) fn queue_suffix(queue: Option<&str>) -> String {
    queue
        .map(|q| format!(" for queue `{q}`"))
        .unwrap_or_default()
}

/// Largest `n` in `STRING(n)`: 2,621,440 characters, as Spanner documents.
pub const MAX_STRING_LENGTH: u32 = 2_621_440;
/// Largest `n` in `BYTES(n)`: 10 MiB, as Spanner documents.
pub const MAX_BYTES_LENGTH: u32 = 10_485_760;

/// The length of a `STRING` or `BYTES` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Length {
    /// `MAX`.
    Max,
    /// A fixed maximum length (characters for `STRING`, bytes for `BYTES`).
    Fixed(u32),
}

impl fmt::Display for Length {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Max => f.write_str("MAX"),
            Self::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// A Spanner column type, as far as queue key columns and payloads need.
///
/// [`Display`](fmt::Display) and [`FromStr`] use GoogleSQL spelling, the form of
/// `INFORMATION_SCHEMA.COLUMNS.SPANNER_TYPE` (`INT64`, `STRING(36)`, `BYTES(MAX)`, …), so a
/// schema check can compare a live column with the expected type.
///
/// ```
/// use spanner_queues::schema::{Length, SpannerType};
///
/// let ty: SpannerType = "STRING(36)".parse()?;
/// assert_eq!(ty, SpannerType::String(Length::Fixed(36)));
/// assert_eq!(SpannerType::Bytes(Length::Max).to_string(), "BYTES(MAX)");
/// # Ok::<(), spanner_queues::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpannerType {
    /// `BOOL`.
    Bool,
    /// `INT64`.
    Int64,
    /// `FLOAT64`.
    Float64,
    /// `STRING(n)` or `STRING(MAX)`.
    String(Length),
    /// `BYTES(n)` or `BYTES(MAX)`.
    Bytes(Length),
    /// `TIMESTAMP`.
    Timestamp,
    /// `DATE`.
    Date,
    /// `NUMERIC`.
    Numeric,
    /// `JSON`.
    Json,
    /// A protocol buffer message type, by fully qualified name.
    Proto(Cow<'static, str>),
}

impl SpannerType {
    /// Renders the type for `dialect`.
    ///
    /// # Errors
    /// [`SchemaError::Unsupported`] for a type that has no PostgreSQL spelling (`PROTO`) or a form
    /// that is not confirmed there (`bytea` has no length).
    pub fn to_sql(&self, dialect: Dialect) -> Result<String, SchemaError> {
        match dialect {
            Dialect::GoogleSql => Ok(self.to_string()),
            Dialect::PostgreSql => Ok(match self {
                Self::Bool => "boolean".to_owned(),
                Self::Int64 => "bigint".to_owned(),
                Self::Float64 => "double precision".to_owned(),
                Self::String(Length::Max) => "text".to_owned(),
                Self::String(Length::Fixed(n)) => format!("varchar({n})"),
                Self::Bytes(Length::Max) => "bytea".to_owned(),
                Self::Bytes(Length::Fixed(_)) => {
                    return Err(SchemaError::unsupported(
                        "BYTES(n) with a fixed length in PostgreSQL (bytea has no length)",
                    ));
                }
                Self::Timestamp => "timestamptz".to_owned(),
                Self::Date => "date".to_owned(),
                Self::Numeric => "numeric".to_owned(),
                Self::Json => "jsonb".to_owned(),
                Self::Proto(_) => {
                    return Err(SchemaError::unsupported("PROTO columns in PostgreSQL"));
                }
            }),
        }
    }

    /// Whether Spanner allows the type in a primary key.
    pub fn is_valid_key_type(&self) -> bool {
        !matches!(self, Self::Json)
    }

    pub(crate) fn check_length(&self) -> Result<(), String> {
        match self {
            Self::String(Length::Fixed(n)) if *n == 0 || *n > MAX_STRING_LENGTH => Err(format!(
                "STRING({n}) is out of range (1 to {MAX_STRING_LENGTH}, or MAX)"
            )),
            Self::Bytes(Length::Fixed(n)) if *n == 0 || *n > MAX_BYTES_LENGTH => Err(format!(
                "BYTES({n}) is out of range (1 to {MAX_BYTES_LENGTH}, or MAX)"
            )),
            Self::Proto(fqn) if !is_proto_name(fqn) => Err(format!(
                "`{fqn}` is not a fully qualified protocol buffer type name"
            )),
            _ => Ok(()),
        }
    }
}

fn is_proto_name(fqn: &str) -> bool {
    !fqn.is_empty()
        && fqn.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

impl fmt::Display for SpannerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bool => f.write_str("BOOL"),
            Self::Int64 => f.write_str("INT64"),
            Self::Float64 => f.write_str("FLOAT64"),
            Self::String(len) => write!(f, "STRING({len})"),
            Self::Bytes(len) => write!(f, "BYTES({len})"),
            Self::Timestamp => f.write_str("TIMESTAMP"),
            Self::Date => f.write_str("DATE"),
            Self::Numeric => f.write_str("NUMERIC"),
            Self::Json => f.write_str("JSON"),
            Self::Proto(fqn) => f.write_str(fqn),
        }
    }
}

fn parse_length(s: &str) -> Option<Length> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("MAX") {
        return Some(Length::Max);
    }
    s.parse().ok().map(Length::Fixed)
}

impl FromStr for SpannerType {
    type Err = SchemaError;

    /// Parses the GoogleSQL spelling. Anything that is not a built-in type name and looks like a
    /// dotted name is taken as a `PROTO` type (that is how `INFORMATION_SCHEMA` reports them).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let upper = t.to_ascii_uppercase();
        let parsed = match upper.as_str() {
            "BOOL" => Some(Self::Bool),
            "INT64" => Some(Self::Int64),
            "FLOAT64" => Some(Self::Float64),
            "TIMESTAMP" => Some(Self::Timestamp),
            "DATE" => Some(Self::Date),
            "NUMERIC" => Some(Self::Numeric),
            "JSON" => Some(Self::Json),
            _ => {
                if let Some(inner) = upper
                    .strip_prefix("STRING(")
                    .and_then(|r| r.strip_suffix(')'))
                {
                    parse_length(inner).map(Self::String)
                } else if let Some(inner) = upper
                    .strip_prefix("BYTES(")
                    .and_then(|r| r.strip_suffix(')'))
                {
                    parse_length(inner).map(Self::Bytes)
                } else if let Some(inner) =
                    t.strip_prefix("PROTO<").and_then(|r| r.strip_suffix('>'))
                {
                    is_proto_name(inner).then(|| Self::Proto(Cow::Owned(inner.to_owned())))
                } else if is_proto_name(t) && t.contains('.') {
                    Some(Self::Proto(Cow::Owned(t.to_owned())))
                } else {
                    None
                }
            }
        };
        parsed
            .ok_or_else(|| SchemaError::invalid_schema(None, format!("unknown Spanner type `{s}`")))
    }
}

/// The type of a queue's `Payload` column (Spanner's `payload_type`).
///
/// ```
/// use spanner_queues::{Dialect, schema::{Length, PayloadType}};
///
/// assert_eq!(PayloadType::Bytes(Length::Max).to_sql(Dialect::GoogleSql)?, "BYTES(MAX)");
/// assert_eq!(PayloadType::Json.to_sql(Dialect::PostgreSql)?, "jsonb");
/// # Ok::<(), spanner_queues::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PayloadType {
    /// `BYTES(n)` / `BYTES(MAX)` (PostgreSQL `bytea`).
    Bytes(Length),
    /// `STRING(n)` / `STRING(MAX)` (PostgreSQL `varchar(n)` / `text`).
    String(Length),
    /// `JSON` (PostgreSQL `jsonb`).
    Json,
    /// A protocol buffer message type, by fully qualified name (GoogleSQL only).
    Proto(Cow<'static, str>),
}

impl PayloadType {
    /// The payload type as a general column type.
    pub fn spanner_type(&self) -> SpannerType {
        match self {
            Self::Bytes(len) => SpannerType::Bytes(*len),
            Self::String(len) => SpannerType::String(*len),
            Self::Json => SpannerType::Json,
            Self::Proto(fqn) => SpannerType::Proto(fqn.clone()),
        }
    }

    /// Renders the type for `dialect`.
    ///
    /// # Errors
    /// [`SchemaError::Unsupported`] where `dialect` has no confirmed spelling (see
    /// [`SpannerType::to_sql`]).
    pub fn to_sql(&self, dialect: Dialect) -> Result<String, SchemaError> {
        self.spanner_type().to_sql(dialect)
    }
}

impl fmt::Display for PayloadType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.spanner_type(), f)
    }
}

/// Key order of a primary key column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SortOrder {
    /// Ascending (the default; rendered without a keyword).
    #[default]
    Asc,
    /// Descending (`DESC`).
    Desc,
}

/// The GoogleSQL spelling of a PostgreSQL column type as `INFORMATION_SCHEMA` reports it
/// (`character varying(36)`, `bigint`, `jsonb`, …), so that one comparison serves both
/// dialects; a type without one is returned as it is.
///
/// ```
/// use spanner_queues::schema::google_sql_type;
///
/// assert_eq!(google_sql_type("character varying(36)"), "STRING(36)");
/// assert_eq!(google_sql_type("jsonb"), "JSON");
/// assert_eq!(google_sql_type("tsvector"), "tsvector");
/// ```
pub fn google_sql_type(postgres: &str) -> String {
    let t = postgres.trim().to_ascii_lowercase();
    let sized = |prefix: &str| {
        t.strip_prefix(prefix)
            .and_then(|rest| rest.trim_start().strip_prefix('('))
            .and_then(|rest| rest.strip_suffix(')'))
            .map(|n| n.trim().to_owned())
    };
    if let Some(n) = sized("character varying").or_else(|| sized("varchar")) {
        return format!("STRING({n})");
    }
    match t.as_str() {
        "character varying" | "varchar" | "text" => "STRING(MAX)",
        "bigint" | "int8" => "INT64",
        "bytea" => "BYTES(MAX)",
        "jsonb" => "JSON",
        "timestamp with time zone" | "timestamptz" | "spanner.commit_timestamp" => "TIMESTAMP",
        "boolean" | "bool" => "BOOL",
        "double precision" | "float8" => "FLOAT64",
        "numeric" => "NUMERIC",
        "date" => "DATE",
        _ => return postgres.to_owned(),
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let types = [
            SpannerType::Bool,
            SpannerType::Int64,
            SpannerType::Float64,
            SpannerType::String(Length::Max),
            SpannerType::String(Length::Fixed(36)),
            SpannerType::Bytes(Length::Max),
            SpannerType::Bytes(Length::Fixed(16)),
            SpannerType::Timestamp,
            SpannerType::Date,
            SpannerType::Numeric,
            SpannerType::Json,
            SpannerType::Proto(Cow::Borrowed("my.pkg.Message")),
        ];
        for ty in types {
            let text = ty.to_string();
            let back: SpannerType = text.parse().expect("parses");
            assert_eq!(back, ty, "{text}");
        }
        assert_eq!(
            "string(max)"
                .parse::<SpannerType>()
                .expect("case-insensitive"),
            SpannerType::String(Length::Max)
        );
        assert_eq!(
            "PROTO<a.B>".parse::<SpannerType>().expect("proto"),
            SpannerType::Proto(Cow::Borrowed("a.B"))
        );
        assert!("INT32".parse::<SpannerType>().is_err());
        assert!("STRING(x)".parse::<SpannerType>().is_err());
    }

    #[test]
    fn postgres_spelling() {
        let pg = |t: SpannerType| t.to_sql(Dialect::PostgreSql);
        assert_eq!(pg(SpannerType::Int64).expect("ok"), "bigint");
        assert_eq!(
            pg(SpannerType::String(Length::Fixed(36))).expect("ok"),
            "varchar(36)"
        );
        assert_eq!(pg(SpannerType::String(Length::Max)).expect("ok"), "text");
        assert_eq!(pg(SpannerType::Bytes(Length::Max)).expect("ok"), "bytea");
        assert_eq!(pg(SpannerType::Json).expect("ok"), "jsonb");
        assert!(matches!(
            pg(SpannerType::Proto(Cow::Borrowed("a.B"))),
            Err(SchemaError::Unsupported { .. })
        ));
        assert!(matches!(
            pg(SpannerType::Bytes(Length::Fixed(3))),
            Err(SchemaError::Unsupported { .. })
        ));
    }

    #[test]
    fn length_checks() {
        assert!(
            SpannerType::String(Length::Fixed(0))
                .check_length()
                .is_err()
        );
        assert!(
            SpannerType::String(Length::Fixed(MAX_STRING_LENGTH))
                .check_length()
                .is_ok()
        );
        assert!(
            SpannerType::String(Length::Fixed(MAX_STRING_LENGTH + 1))
                .check_length()
                .is_err()
        );
        assert!(
            SpannerType::Bytes(Length::Fixed(MAX_BYTES_LENGTH + 1))
                .check_length()
                .is_err()
        );
        assert!(
            SpannerType::Proto(Cow::Borrowed("not a name"))
                .check_length()
                .is_err()
        );
    }
}
