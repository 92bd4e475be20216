//! Message keys: the typed primary key of a queue row.
//!
//! A message is identified by its queue's primary key. Each key column holds one [`KeyPart`]
//! (a Rust value of a supported type); a message type's whole key is a [`TypedKey`] (the single
//! part, or a tuple of parts in primary-key order). [`MessageKey`] is the dynamic, owned form used
//! in errors, tracing and when reading rows back.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use google_cloud_spanner::value::{FromValue, Type, Value};
use time::format_description::well_known::Rfc3339;
use time::{Date, Month, OffsetDateTime, UtcOffset};
use uuid::Uuid;

use crate::ident::ColumnName;
use crate::types::{Length, SortOrder, SpannerType};

/// The kind of a key column value, and the Spanner type it is stored as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyType {
    /// `bool`, stored as `BOOL`.
    Bool,
    /// `i64`, stored as `INT64`.
    Int64,
    /// `String`, stored as `STRING(MAX)`.
    String,
    /// `Vec<u8>`, stored as `BYTES(MAX)`.
    Bytes,
    /// [`uuid::Uuid`], stored as `STRING(36)` in its lower-case hyphenated form.
    Uuid,
    /// [`time::OffsetDateTime`], stored as `TIMESTAMP` (UTC, nanosecond precision).
    Timestamp,
    /// [`time::Date`], stored as `DATE`.
    Date,
    /// [`Decimal`](google_cloud_spanner::Decimal), stored as `NUMERIC`.
    Numeric,
}

impl KeyType {
    /// The column type a key of this kind is stored in.
    pub fn spanner_type(self) -> SpannerType {
        match self {
            Self::Bool => SpannerType::Bool,
            Self::Int64 => SpannerType::Int64,
            Self::String => SpannerType::String(Length::Max),
            Self::Bytes => SpannerType::Bytes(Length::Max),
            Self::Uuid => SpannerType::String(Length::Fixed(36)),
            Self::Timestamp => SpannerType::Timestamp,
            Self::Date => SpannerType::Date,
            Self::Numeric => SpannerType::Numeric,
        }
    }

    /// The official client's type for binding a value of this kind as a typed query parameter
    /// (`Statement::builder(..).add_typed_param(name, value, key_type.param_type())`).
    pub fn param_type(self) -> Type {
        use google_cloud_spanner::types;
        match self {
            Self::Bool => types::bool(),
            Self::Int64 => types::int64(),
            Self::String | Self::Uuid => types::string(),
            Self::Bytes => types::bytes(),
            Self::Timestamp => types::timestamp(),
            Self::Date => types::date(),
            Self::Numeric => types::numeric(),
        }
    }

    /// The kind a column of type `column_type` holds as it is (`STRING` as [`String`](Self::String),
    /// never [`Uuid`](Self::Uuid)), or `None` for a type that cannot be a key.
    pub(crate) fn of_column(column_type: &Type) -> Option<Self> {
        use google_cloud_spanner::value::TypeCode;
        Some(match column_type.code() {
            TypeCode::Bool => Self::Bool,
            TypeCode::Int64 => Self::Int64,
            TypeCode::String => Self::String,
            TypeCode::Bytes => Self::Bytes,
            TypeCode::Timestamp => Self::Timestamp,
            TypeCode::Date => Self::Date,
            TypeCode::Numeric => Self::Numeric,
            _ => return None,
        })
    }

    /// A stable upper-case name (`INT64`, `UUID`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Bool => "BOOL",
            Self::Int64 => "INT64",
            Self::String => "STRING",
            Self::Bytes => "BYTES",
            Self::Uuid => "UUID",
            Self::Timestamp => "TIMESTAMP",
            Self::Date => "DATE",
            Self::Numeric => "NUMERIC",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [
            Self::Bool,
            Self::Int64,
            Self::String,
            Self::Bytes,
            Self::Uuid,
            Self::Timestamp,
            Self::Date,
            Self::Numeric,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key column value, owned and dynamically typed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyValue {
    /// A `BOOL` value.
    Bool(bool),
    /// An `INT64` value.
    Int64(i64),
    /// A `STRING` value.
    String(String),
    /// A `BYTES` value.
    Bytes(Vec<u8>),
    /// A UUID, stored as `STRING(36)`.
    Uuid(Uuid),
    /// A `TIMESTAMP` value.
    Timestamp(OffsetDateTime),
    /// A `DATE` value.
    Date(Date),
    /// A `NUMERIC` value.
    Numeric(google_cloud_spanner::Decimal),
}

/// Formats a timestamp the way Spanner accepts it: RFC 3339 in UTC with nanoseconds and `Z`.
/// Values whose UTC form leaves the representable range are formatted with their own offset
/// dropped; Spanner rejects them (its range is years 1 to 9999).
pub(crate) fn format_timestamp(t: OffsetDateTime) -> String {
    let utc = t.checked_to_offset(UtcOffset::UTC).unwrap_or(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        utc.year(),
        u8::from(utc.month()),
        utc.day(),
        utc.hour(),
        utc.minute(),
        utc.second(),
        utc.nanosecond()
    )
}

pub(crate) fn format_date(d: Date) -> String {
    format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
}

fn parse_date(s: &str) -> Result<Date, String> {
    let mut parts = s.splitn(3, '-');
    let (Some(y), Some(m), Some(d)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("`{s}` is not a YYYY-MM-DD date"));
    };
    let year: i32 = y.parse().map_err(|_| format!("bad year in `{s}`"))?;
    let month: u8 = m.parse().map_err(|_| format!("bad month in `{s}`"))?;
    let day: u8 = d.parse().map_err(|_| format!("bad day in `{s}`"))?;
    let month = Month::try_from(month).map_err(|e| e.to_string())?;
    Date::from_calendar_date(year, month, day).map_err(|e| e.to_string())
}

fn parse_timestamp(s: &str) -> Result<OffsetDateTime, String> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|e| e.to_string())
}

impl KeyValue {
    /// The kind of this value.
    pub fn key_type(&self) -> KeyType {
        match self {
            Self::Bool(_) => KeyType::Bool,
            Self::Int64(_) => KeyType::Int64,
            Self::String(_) => KeyType::String,
            Self::Bytes(_) => KeyType::Bytes,
            Self::Uuid(_) => KeyType::Uuid,
            Self::Timestamp(_) => KeyType::Timestamp,
            Self::Date(_) => KeyType::Date,
            Self::Numeric(_) => KeyType::Numeric,
        }
    }

    /// The value in the official client's representation, for statement parameters and
    /// mutations. Bind it with [`KeyType::param_type`] where the SQL does not fix the type.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Bool(b) => Value::from(*b),
            Self::Int64(i) => Value::from(*i),
            Self::String(s) => Value::from(s.clone()),
            Self::Bytes(b) => Value::from(b.clone()),
            Self::Uuid(u) => Value::from(u.hyphenated().to_string()),
            Self::Timestamp(t) => Value::from(format_timestamp(*t)),
            Self::Date(d) => Value::from(format_date(*d)),
            Self::Numeric(n) => Value::from(*n),
        }
    }

    /// Reads a key value of kind `key_type` from a result-set value and its column type.
    ///
    /// # Errors
    /// [`KeyError::InvalidValue`] (with position 0; callers reading several columns fix it up
    /// with [`KeyError::at_position`]) if the value is `NULL`, has the wrong column type, or
    /// does not parse.
    pub fn from_value(
        key_type: KeyType,
        value: &Value,
        column_type: &Type,
    ) -> Result<Self, KeyError> {
        fn get<T: FromValue>(key_type: KeyType, value: &Value, ty: &Type) -> Result<T, KeyError> {
            T::from_value(value, ty).map_err(|e| KeyError::invalid(0, key_type, e.to_string()))
        }
        Ok(match key_type {
            KeyType::Bool => Self::Bool(get(key_type, value, column_type)?),
            KeyType::Int64 => Self::Int64(get(key_type, value, column_type)?),
            KeyType::String => Self::String(get(key_type, value, column_type)?),
            KeyType::Bytes => Self::Bytes(get(key_type, value, column_type)?),
            KeyType::Numeric => Self::Numeric(get(key_type, value, column_type)?),
            KeyType::Uuid => {
                let s: String = get(key_type, value, column_type)?;
                Self::Uuid(
                    Uuid::parse_str(&s)
                        .map_err(|e| KeyError::invalid(0, key_type, e.to_string()))?,
                )
            }
            KeyType::Timestamp => {
                let s: String = get(key_type, value, column_type)?;
                Self::Timestamp(parse_timestamp(&s).map_err(|e| KeyError::invalid(0, key_type, e))?)
            }
            KeyType::Date => {
                let s: String = get(key_type, value, column_type)?;
                Self::Date(parse_date(&s).map_err(|e| KeyError::invalid(0, key_type, e))?)
            }
        })
    }

    /// One part of [`KeyEncoding::V1`]: `TYPE:value`, bytes in base64.
    pub(crate) fn to_wire(&self) -> String {
        let text = match self {
            Self::Bool(b) => b.to_string(),
            Self::Int64(i) => i.to_string(),
            Self::String(s) => s.clone(),
            Self::Bytes(b) => base64::engine::general_purpose::STANDARD.encode(b),
            Self::Uuid(u) => u.hyphenated().to_string(),
            Self::Timestamp(t) => format_timestamp(*t),
            Self::Date(d) => format_date(*d),
            Self::Numeric(n) => n.to_string(),
        };
        format!("{}:{text}", self.key_type())
    }

    /// A value of kind `key_type` typed as text: as [`Display`](fmt::Display) shows it for
    /// numbers, booleans and dates, the text itself for strings, the hyphenated form for
    /// UUIDs, RFC 3339 for timestamps and standard base64 for bytes.
    pub(crate) fn parse_text(key_type: KeyType, text: &str) -> Result<Self, KeyError> {
        Self::from_wire(&format!("{key_type}:{text}")).ok_or_else(|| {
            KeyError::invalid(0, key_type, format!("`{text}` is not a {key_type} value"))
        })
    }

    pub(crate) fn from_wire(s: &str) -> Option<Self> {
        let (ty, text) = s.split_once(':')?;
        Some(match KeyType::parse(ty)? {
            KeyType::Bool => Self::Bool(text.parse().ok()?),
            KeyType::Int64 => Self::Int64(text.parse().ok()?),
            KeyType::String => Self::String(text.to_owned()),
            KeyType::Bytes => Self::Bytes(
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .ok()?,
            ),
            KeyType::Uuid => Self::Uuid(Uuid::parse_str(text).ok()?),
            KeyType::Timestamp => Self::Timestamp(parse_timestamp(text).ok()?),
            KeyType::Date => Self::Date(parse_date(text).ok()?),
            KeyType::Numeric => Self::Numeric(google_cloud_spanner::Decimal::from_str(text).ok()?),
        })
    }
}

impl fmt::Display for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bool(b) => write!(f, "{b}"),
            Self::Int64(i) => write!(f, "{i}"),
            Self::String(s) => write!(f, "{s:?}"),
            Self::Bytes(b) => write!(f, "b\"{}\"", b.escape_ascii()),
            Self::Uuid(u) => write!(f, "\"{}\"", u.hyphenated()),
            Self::Timestamp(t) => f.write_str(&format_timestamp(*t)),
            Self::Date(d) => f.write_str(&format_date(*d)),
            Self::Numeric(n) => write!(f, "{n}"),
        }
    }
}

/// The primary key of one message: its key values in primary-key order.
///
/// `Display` prints a tuple, e.g. `(42, "6f1c2a9e-…")`; it never includes the payload.
///
/// ```
/// use spanner_queues::{MessageKey, key::{KeyValue, TypedKey}};
///
/// let key = (42_i64, "abc".to_string()).to_message_key();
/// assert_eq!(key.to_string(), r#"(42, "abc")"#);
/// assert_eq!(key.parts()[0], KeyValue::Int64(42));
/// let back = <(i64, String)>::from_message_key(key)?;
/// assert_eq!(back, (42, "abc".to_string()));
/// # Ok::<(), spanner_queues::key::KeyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct MessageKey(Vec<KeyValue>);

impl MessageKey {
    /// A key made of `parts`, in primary-key order.
    pub fn new(parts: Vec<KeyValue>) -> Self {
        Self(parts)
    }

    /// The key values in primary-key order.
    pub fn parts(&self) -> &[KeyValue] {
        &self.0
    }

    /// Takes the key values.
    pub fn into_parts(self) -> Vec<KeyValue> {
        self.0
    }

    /// The number of key values.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the key has no values.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The key values in the official client's representation (see [`KeyValue::to_value`]).
    pub fn to_values(&self) -> Vec<Value> {
        self.0.iter().map(KeyValue::to_value).collect()
    }

    /// The key in [`KeyEncoding::V1`].
    pub(crate) fn to_wire(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(KeyValue::to_wire).collect();
        serde_json::Value::from(parts).to_string()
    }

    /// A key read back from [`KeyEncoding::V1`].
    pub(crate) fn from_wire(s: &str) -> Option<Self> {
        let parts: Vec<String> = serde_json::from_str(s).ok()?;
        parts
            .iter()
            .map(|p| KeyValue::from_wire(p))
            .collect::<Option<Vec<_>>>()
            .map(Self)
    }
}

impl fmt::Display for MessageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, part) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            fmt::Display::fmt(part, f)?;
        }
        f.write_str(")")
    }
}

/// A stable text encoding of message keys, versioned.
///
/// It is stored: it is the `MessageKey` column of the worker's tables
/// ([`tables::attempts`](crate::tables::attempts) and
/// [`tables::dead_letters`](crate::tables::dead_letters), part of their primary keys), and the
/// input of [`idempotency_key`](crate::worker::idempotency_key). A version never changes once
/// released: a change would orphan stored rows and change idempotency keys, so a new form
/// would be a new version.
///
/// [`V1`](Self::V1) is a JSON array of strings, one per key part in primary-key order, each
/// `TYPE:value`: `BOOL:true`, `INT64:-42`, `STRING:text` (as is), `BYTES:` and standard base64,
/// `UUID:` and the hyphenated lower-case form, `TIMESTAMP:` and RFC 3339 in UTC,
/// `DATE:YYYY-MM-DD`, `NUMERIC:` and the decimal text.
///
/// ```
/// use spanner_queues::{MessageKey, key::{KeyEncoding, KeyValue}};
///
/// let key = MessageKey::new(vec![KeyValue::Int64(42), KeyValue::String("a".into())]);
/// let text = KeyEncoding::V1.encode(&key);
/// assert_eq!(text, r#"["INT64:42","STRING:a"]"#);
/// assert_eq!(KeyEncoding::V1.decode(&text), Some(key));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyEncoding {
    /// The first (and current) version; see the type's docs.
    V1,
}

impl KeyEncoding {
    /// `key` in this encoding.
    pub fn encode(self, key: &MessageKey) -> String {
        match self {
            Self::V1 => key.to_wire(),
        }
    }

    /// The key `text` encodes, or `None` if it is not in this encoding.
    pub fn decode(self, text: &str) -> Option<MessageKey> {
        match self {
            Self::V1 => MessageKey::from_wire(text),
        }
    }
}

impl MessageKey {
    /// The key as displayed, cut after 64 characters (with `…`): for error messages and logs,
    /// which must stay readable whatever the key holds.
    pub(crate) fn short(&self) -> ShortKey<'_> {
        ShortKey(self)
    }
}

/// See [`MessageKey::short`].
pub(crate) struct ShortKey<'a>(&'a MessageKey);

/// How many characters of a key [`MessageKey::short`] shows.
const SHORT_KEY_CHARS: usize = 64;

impl fmt::Display for ShortKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string();
        match text.char_indices().nth(SHORT_KEY_CHARS) {
            None => f.write_str(&text),
            Some((cut, _)) => write!(f, "{}…", &text[..cut]),
        }
    }
}

impl From<Vec<KeyValue>> for MessageKey {
    fn from(parts: Vec<KeyValue>) -> Self {
        Self(parts)
    }
}

impl FromIterator<KeyValue> for MessageKey {
    fn from_iter<I: IntoIterator<Item = KeyValue>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// A key that does not fit a message type's key columns.
///
/// Nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Wrong number of key values.
    #[error("expected {expected} key values, found {found}")]
    #[non_exhaustive]
    Arity {
        /// The number of key columns.
        expected: usize,
        /// The number of values given.
        found: usize,
    },
    /// A key value of the wrong kind.
    #[error("key value {position} should be {expected}, found {found}")]
    #[non_exhaustive]
    TypeMismatch {
        /// Zero-based position in the primary key.
        position: usize,
        /// The kind the key column holds.
        expected: KeyType,
        /// The kind given.
        found: KeyType,
    },
    /// A key value that could not be read or is out of range.
    #[error("key value {position} ({key_type}) is invalid: {reason}")]
    #[non_exhaustive]
    InvalidValue {
        /// Zero-based position in the primary key.
        position: usize,
        /// The kind the key column holds.
        key_type: KeyType,
        /// What is wrong with it.
        reason: String,
    },
}

impl KeyError {
    fn invalid(position: usize, key_type: KeyType, reason: impl Into<String>) -> Self {
        Self::InvalidValue {
            position,
            key_type,
            reason: reason.into(),
        }
    }

    /// The same error, reported for the key column at `position`.
    pub fn at_position(self, position: usize) -> Self {
        match self {
            Self::TypeMismatch {
                expected, found, ..
            } => Self::TypeMismatch {
                position,
                expected,
                found,
            },
            Self::InvalidValue {
                key_type, reason, ..
            } => Self::InvalidValue {
                position,
                key_type,
                reason,
            },
            other => other,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that can be one key column of a queue.
///
/// Implemented for `String`, `i64`, `bool`, `Vec<u8>`, [`uuid::Uuid`] (stored as `STRING(36)`),
/// [`time::OffsetDateTime`] (`TIMESTAMP`), [`time::Date`] (`DATE`) and
/// [`Decimal`](google_cloud_spanner::Decimal) (`NUMERIC`). The set is closed: each type maps to
/// exactly one Spanner column type.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a queue key column",
    label = "unsupported key type",
    note = "key columns can be `String`, `i64`, `bool`, `Vec<u8>`, `uuid::Uuid`, `time::OffsetDateTime`, `time::Date` or `google_cloud_spanner::Decimal`"
)]
pub trait KeyPart: Clone + fmt::Debug + Send + Sync + 'static + sealed::Sealed {
    /// The kind of value and its column type.
    const KEY_TYPE: KeyType;

    /// This value as a dynamic key value.
    fn to_key_value(&self) -> KeyValue;

    /// Takes the value back; on a kind mismatch returns the value unchanged as the error.
    fn from_key_value(value: KeyValue) -> Result<Self, KeyValue>;
}

macro_rules! key_part {
    ($ty:ty, $variant:ident, |$v:ident| $to:expr) => {
        impl sealed::Sealed for $ty {}
        impl KeyPart for $ty {
            const KEY_TYPE: KeyType = KeyType::$variant;
            fn to_key_value(&self) -> KeyValue {
                let $v = self;
                KeyValue::$variant($to)
            }
            fn from_key_value(value: KeyValue) -> Result<Self, KeyValue> {
                match value {
                    KeyValue::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
        }
    };
}

key_part!(bool, Bool, |v| *v);
key_part!(i64, Int64, |v| *v);
key_part!(String, String, |v| v.clone());
key_part!(Vec<u8>, Bytes, |v| v.clone());
key_part!(Uuid, Uuid, |v| *v);
key_part!(OffsetDateTime, Timestamp, |v| *v);
key_part!(Date, Date, |v| *v);
key_part!(google_cloud_spanner::Decimal, Numeric, |v| *v);

/// The typed primary key of a message type: one [`KeyPart`], or a tuple of them (up to 8) in
/// primary-key order.
///
/// This is [`QueueMessage::Key`](crate::QueueMessage::Key); use it to cancel or ack by key.
pub trait TypedKey: Clone + fmt::Debug + Send + Sync + 'static {
    /// The number of key columns.
    const ARITY: usize;

    /// The dynamic form of this key.
    fn to_message_key(&self) -> MessageKey;

    /// Reads a typed key back from its dynamic form.
    ///
    /// # Errors
    /// [`KeyError::Arity`] or [`KeyError::TypeMismatch`] if `key` does not have this type's
    /// shape.
    fn from_message_key(key: MessageKey) -> Result<Self, KeyError>;
}

impl<T: KeyPart> TypedKey for T {
    const ARITY: usize = 1;

    fn to_message_key(&self) -> MessageKey {
        MessageKey(vec![self.to_key_value()])
    }

    fn from_message_key(key: MessageKey) -> Result<Self, KeyError> {
        let found = key.len();
        let mut parts = key.0.into_iter();
        match (parts.next(), found) {
            (Some(v), 1) => T::from_key_value(v).map_err(|v| KeyError::TypeMismatch {
                position: 0,
                expected: T::KEY_TYPE,
                found: v.key_type(),
            }),
            _ => Err(KeyError::Arity { expected: 1, found }),
        }
    }
}

macro_rules! tuple_key {
    ($n:expr; $($name:ident : $idx:tt),+) => {
        impl<$($name: KeyPart),+> TypedKey for ($($name,)+) {
            const ARITY: usize = $n;

            fn to_message_key(&self) -> MessageKey {
                MessageKey(vec![$(self.$idx.to_key_value()),+])
            }

            fn from_message_key(key: MessageKey) -> Result<Self, KeyError> {
                if key.len() != $n {
                    return Err(KeyError::Arity { expected: $n, found: key.len() });
                }
                let mut parts = key.0.into_iter();
                Ok(($(
                    {
                        let v = parts.next().ok_or(KeyError::Arity { expected: $n, found: $idx })?;
                        $name::from_key_value(v).map_err(|v| KeyError::TypeMismatch {
                            position: $idx,
                            expected: $name::KEY_TYPE,
                            found: v.key_type(),
                        })?
                    },
                )+))
            }
        }
    };
}

tuple_key!(2; A: 0, B: 1);
tuple_key!(3; A: 0, B: 1, C: 2);
tuple_key!(4; A: 0, B: 1, C: 2, D: 3);
tuple_key!(5; A: 0, B: 1, C: 2, D: 3, E: 4);
tuple_key!(6; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5);
tuple_key!(7; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6);
tuple_key!(8; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7);

/// One key column of a message type's queue: its name, kind and order.
///
/// Built in constant context by the derive:
///
/// ```
/// use spanner_queues::{ident::ColumnName, key::{KeyColumn, KeyType}, schema::SortOrder};
///
/// const COLUMNS: &[KeyColumn] = &[
///     KeyColumn::new(ColumnName::from_static("UserId"), KeyType::Int64),
///     KeyColumn::new(ColumnName::from_static("CreatedAt"), KeyType::Timestamp)
///         .with_order(SortOrder::Desc),
/// ];
/// assert_eq!(COLUMNS[1].order(), SortOrder::Desc);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyColumn {
    name: ColumnName,
    key_type: KeyType,
    order: SortOrder,
    max_length: Option<u32>,
}

impl KeyColumn {
    /// An ascending key column.
    pub const fn new(name: ColumnName, key_type: KeyType) -> Self {
        Self {
            name,
            key_type,
            order: SortOrder::Asc,
            max_length: None,
        }
    }

    /// Sets the key order.
    pub const fn with_order(mut self, order: SortOrder) -> Self {
        self.order = order;
        self
    }

    /// Declares a [`String`](KeyType::String) column as `STRING(n)` or a
    /// [`Bytes`](KeyType::Bytes) column as `BYTES(n)` instead of `MAX`.
    ///
    /// The schema builder refuses the length on any other kind, and a length outside Spanner's
    /// range, with [`SchemaError::InvalidSchema`](crate::schema::SchemaError::InvalidSchema).
    ///
    /// ```
    /// use spanner_queues::{ident::ColumnName, key::{KeyColumn, KeyType}};
    ///
    /// let column = KeyColumn::new(ColumnName::from_static("Sku"), KeyType::String).with_max_length(64);
    /// assert_eq!(column.spanner_type().to_string(), "STRING(64)");
    /// ```
    pub const fn with_max_length(mut self, length: u32) -> Self {
        self.max_length = Some(length);
        self
    }

    /// The column name.
    pub fn name(&self) -> &ColumnName {
        &self.name
    }

    /// The kind of value the column holds.
    pub fn key_type(&self) -> KeyType {
        self.key_type
    }

    /// The key order.
    pub fn order(&self) -> SortOrder {
        self.order
    }

    /// The length given to [`with_max_length`](Self::with_max_length), if any.
    pub fn max_length(&self) -> Option<u32> {
        self.max_length
    }

    /// The column's type: the kind's [`spanner_type`](KeyType::spanner_type), with the declared
    /// length for `STRING`/`BYTES`.
    pub fn spanner_type(&self) -> SpannerType {
        match (self.key_type.spanner_type(), self.max_length) {
            (SpannerType::String(_), Some(n)) if self.key_type == KeyType::String => {
                SpannerType::String(Length::Fixed(n))
            }
            (SpannerType::Bytes(_), Some(n)) => SpannerType::Bytes(Length::Fixed(n)),
            (other, _) => other,
        }
    }

    /// Why the declared length does not fit the column, if it does not.
    pub(crate) fn check_length(&self) -> Result<(), String> {
        match (self.key_type, self.max_length) {
            (_, None) | (KeyType::String | KeyType::Bytes, Some(_)) => {
                self.spanner_type().check_length()
            }
            (other, Some(n)) => Err(format!(
                "a length ({n}) applies only to STRING and BYTES keys, not {other}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_spanner::types;
    use time::{PrimitiveDateTime, Time};

    fn date(y: i32, m: u8, d: u8) -> Date {
        Date::from_calendar_date(y, Month::try_from(m).expect("month"), d).expect("date")
    }

    fn all_values() -> Vec<KeyValue> {
        let local = PrimitiveDateTime::new(
            date(2026, 3, 4),
            Time::from_hms_nano(5, 6, 7, 123_456_789).expect("time"),
        );
        let offset = UtcOffset::from_hms(2, 0, 0).expect("offset");
        vec![
            KeyValue::Bool(true),
            KeyValue::Int64(-42),
            KeyValue::String("a \"quoted\" ключ".into()),
            KeyValue::Bytes(vec![0, 1, 254, b'a']),
            KeyValue::Uuid(Uuid::from_u128(0x6f1c_2a9e_0000_4000_8000_0000_0000_0001)),
            KeyValue::Timestamp(local.assume_offset(offset)),
            KeyValue::Date(date(2026, 12, 31)),
            KeyValue::Numeric("12345.6789".parse().expect("decimal")),
        ]
    }

    #[test]
    fn key_encoding_v1_is_pinned() {
        // Pinned: stored in the worker's tables and hashed into idempotency keys. Never change
        // this text; add a new version instead.
        let key = MessageKey::new(all_values());
        let text = KeyEncoding::V1.encode(&key);
        assert_eq!(
            text,
            r#"["BOOL:true","INT64:-42","STRING:a \"quoted\" ключ","BYTES:AAH+YQ==","#.to_owned()
                + r#""UUID:6f1c2a9e-0000-4000-8000-000000000001","#
                + r#""TIMESTAMP:2026-03-04T03:06:07.123456789Z","DATE:2026-12-31","#
                + r#""NUMERIC:12345.6789"]"#
        );
        assert_eq!(KeyEncoding::V1.decode(&text), Some(key));
    }

    #[test]
    fn wire_round_trip() {
        let key = MessageKey::new(all_values());
        let wire = key.to_wire();
        assert_eq!(MessageKey::from_wire(&wire), Some(key));
        assert_eq!(MessageKey::from_wire("not json"), None);
        assert_eq!(MessageKey::from_wire(r#"["INT64:x"]"#), None);
        assert_eq!(MessageKey::from_wire(r#"["NOPE:1"]"#), None);
    }

    #[test]
    fn display() {
        let key = MessageKey::new(all_values());
        assert_eq!(
            key.to_string(),
            "(true, -42, \"a \\\"quoted\\\" ключ\", b\"\\x00\\x01\\xfea\", \
             \"6f1c2a9e-0000-4000-8000-000000000001\", 2026-03-04T03:06:07.123456789Z, \
             2026-12-31, 12345.6789)"
        );
    }

    #[test]
    fn spanner_value_round_trip() {
        for v in all_values() {
            let ty = v.key_type();
            let param = ty.param_type();
            let column_type = match ty {
                KeyType::Uuid => types::string(),
                _ => param,
            };
            let back = KeyValue::from_value(ty, &v.to_value(), &column_type)
                .unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert_eq!(back, v);
        }
    }

    #[test]
    fn from_value_errors() {
        let err = KeyValue::from_value(KeyType::Int64, &Value::null(), &types::int64())
            .expect_err("null key");
        assert!(
            matches!(
                err,
                KeyError::InvalidValue {
                    key_type: KeyType::Int64,
                    ..
                }
            ),
            "{err:?}"
        );
        let err = KeyValue::from_value(KeyType::Uuid, &Value::from("nope"), &types::string())
            .expect_err("bad uuid")
            .at_position(2);
        assert!(
            matches!(err, KeyError::InvalidValue { position: 2, .. }),
            "{err:?}"
        );
        let err = KeyValue::from_value(KeyType::Int64, &Value::from("1"), &types::string())
            .expect_err("wrong column type");
        assert!(matches!(err, KeyError::InvalidValue { .. }), "{err:?}");
    }

    #[test]
    fn typed_keys() {
        let k = 7_i64.to_message_key();
        assert_eq!(i64::from_message_key(k.clone()).expect("same"), 7);
        assert!(matches!(
            String::from_message_key(k.clone()),
            Err(KeyError::TypeMismatch {
                position: 0,
                expected: KeyType::String,
                found: KeyType::Int64
            })
        ));
        assert!(matches!(
            <(i64, String)>::from_message_key(k),
            Err(KeyError::Arity {
                expected: 2,
                found: 1
            })
        ));
        let k3 = (1_i64, true, vec![1_u8]).to_message_key();
        assert!(matches!(
            <(i64, bool, String)>::from_message_key(k3),
            Err(KeyError::TypeMismatch { position: 2, .. })
        ));
        assert_eq!(<(i64, String)>::ARITY, 2);
        assert_eq!(<Uuid as TypedKey>::ARITY, 1);
    }

    #[test]
    fn spanner_types() {
        assert_eq!(KeyType::Uuid.spanner_type().to_string(), "STRING(36)");
        assert_eq!(KeyType::String.spanner_type().to_string(), "STRING(MAX)");
        assert_eq!(KeyType::Bytes.spanner_type().to_string(), "BYTES(MAX)");
        assert_eq!(KeyType::Numeric.spanner_type().to_string(), "NUMERIC");
    }
}
