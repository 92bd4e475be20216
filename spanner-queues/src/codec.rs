//! Payload codecs: how a message's non-key fields become the queue's `Payload` column value.
//!
//! | Codec | Rust side | Column types written | Column types read |
//! |---|---|---|---|
//! | [`Codec::Json`] (default) | the non-key fields, as a JSON object via serde | `JSON` (default), `STRING(MAX)` or `BYTES(MAX)` (UTF-8 text) | `JSON`, `STRING`, `BYTES` |
//! | [`Codec::Bytes`] | one `Vec<u8>` field | `BYTES(MAX)` | `BYTES`, `STRING` (its UTF-8 bytes) |
//! | [`Codec::String`] | one `String` field | `STRING(MAX)` | `STRING`, `JSON` (the text), `BYTES` (if UTF-8) |
//! | [`Codec::Proto`] (feature `protobuf`) | one `prost::Message` field | `BYTES(MAX)` | `BYTES`, `PROTO` |
//!
//! Reading is deliberately lenient about the column type, so that a payload written by another
//! client (raw SQL, another language) decodes as long as its content matches the message type.

use std::fmt;

use google_cloud_spanner::value::{FromValue, Type, TypeCode, Value};

use crate::key::KeyError;
use crate::types::{Length, PayloadType};
use crate::util::BoxError;

/// How a message type's payload is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Codec {
    /// The non-key fields as a JSON object (serde).
    Json,
    /// One `Vec<u8>` field, stored as is.
    Bytes,
    /// One `String` field, stored as is.
    String,
    /// One protocol buffer message field (`prost`), stored as its binary encoding.
    Proto,
}

impl Codec {
    /// A stable lower-case name (`json`, `bytes`, `string`, `proto`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Bytes => "bytes",
            Self::String => "string",
            Self::Proto => "proto",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A message type's payload: its codec and the `Payload` column type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PayloadSpec {
    codec: Codec,
    column: PayloadType,
}

impl PayloadSpec {
    /// A codec writing to a column of type `column`.
    pub const fn new(codec: Codec, column: PayloadType) -> Self {
        Self { codec, column }
    }

    /// JSON in a `JSON` column (the derive's default).
    pub const fn json() -> Self {
        Self::new(Codec::Json, PayloadType::Json)
    }

    /// Raw bytes in a `BYTES(MAX)` column.
    pub const fn bytes() -> Self {
        Self::new(Codec::Bytes, PayloadType::Bytes(Length::Max))
    }

    /// Text in a `STRING(MAX)` column.
    pub const fn string() -> Self {
        Self::new(Codec::String, PayloadType::String(Length::Max))
    }

    /// A protocol buffer message in a `BYTES(MAX)` column.
    pub const fn proto() -> Self {
        Self::new(Codec::Proto, PayloadType::Bytes(Length::Max))
    }

    /// The codec.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// The `Payload` column type.
    pub fn column(&self) -> &PayloadType {
        &self.column
    }
}

/// The kind of value a `Payload` column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PayloadKind {
    /// A `BYTES` (or `PROTO`) column value.
    Bytes,
    /// A `STRING` column value.
    String,
    /// A `JSON` column value (its text).
    Json,
}

impl fmt::Display for PayloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Bytes => "BYTES",
            Self::String => "STRING",
            Self::Json => "JSON",
        })
    }
}

/// An encoded payload: the value of a queue's `Payload` column.
#[derive(Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Payload {
    /// For a `BYTES` or `PROTO` column.
    Bytes(Vec<u8>),
    /// For a `STRING` column.
    String(String),
    /// JSON text, for a `JSON` column.
    Json(String),
}

impl fmt::Debug for Payload {
    /// Shows the kind and size only: payloads are user data and must not end up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({}, {} bytes)", self.kind(), self.len())
    }
}

impl Payload {
    /// What kind of column value this is.
    pub fn kind(&self) -> PayloadKind {
        match self {
            Self::Bytes(_) => PayloadKind::Bytes,
            Self::String(_) => PayloadKind::String,
            Self::Json(_) => PayloadKind::Json,
        }
    }

    /// The size in bytes (UTF-8 bytes for text), as used for payload size limits.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The raw bytes (UTF-8 for text).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Bytes(b) => b,
            Self::String(s) | Self::Json(s) => s.as_bytes(),
        }
    }

    /// Builds a payload for a column of type `column` from encoded bytes. Text columns need
    /// UTF-8.
    ///
    /// # Errors
    /// [`CodecError::Utf8`] if `column` is a text type and `bytes` are not UTF-8.
    pub fn for_column(column: &PayloadType, bytes: Vec<u8>) -> Result<Self, CodecError> {
        Ok(match column {
            PayloadType::Bytes(_) | PayloadType::Proto(_) => Self::Bytes(bytes),
            PayloadType::String(_) => Self::String(into_utf8(bytes)?),
            PayloadType::Json => Self::Json(into_utf8(bytes)?),
        })
    }

    /// The value in the official client's representation, for a statement parameter or a
    /// mutation. Bind it with [`param_type`](Self::param_type).
    pub fn to_value(&self) -> Value {
        match self {
            Self::Bytes(b) => Value::from(b.clone()),
            Self::String(s) | Self::Json(s) => Value::from(s.clone()),
        }
    }

    /// Like [`to_value`](Self::to_value), without copying.
    pub fn into_value(self) -> Value {
        match self {
            Self::Bytes(b) => Value::from(b),
            Self::String(s) | Self::Json(s) => Value::from(s),
        }
    }

    /// The official client's parameter type for this payload (`BYTES`, `STRING` or `JSON`).
    pub fn param_type(&self) -> Type {
        use google_cloud_spanner::types;
        match self {
            Self::Bytes(_) => types::bytes(),
            Self::String(_) => types::string(),
            Self::Json(_) => types::json(),
        }
    }

    /// Reads a `Payload` column value from a result set, given its column type.
    ///
    /// # Errors
    /// [`CodecError::ColumnType`] for a `NULL` value or a column type a payload cannot have.
    pub fn from_value(value: Value, column_type: &Type) -> Result<Self, CodecError> {
        let column_error = |e: google_cloud_spanner::error::ConvertError| CodecError::ColumnType {
            detail: e.to_string(),
        };
        match column_type.code() {
            TypeCode::Bytes | TypeCode::Proto => Vec::<u8>::from_owned_value(value, column_type)
                .map(Self::Bytes)
                .map_err(column_error),
            TypeCode::String => String::from_owned_value(value, column_type)
                .map(Self::String)
                .map_err(column_error),
            TypeCode::Json => String::from_owned_value(value, column_type)
                .map(Self::Json)
                .map_err(column_error),
            other => Err(CodecError::ColumnType {
                detail: format!("a payload cannot be read from a {other:?} column"),
            }),
        }
    }
}

fn into_utf8(bytes: Vec<u8>) -> Result<String, CodecError> {
    String::from_utf8(bytes).map_err(|e| CodecError::Utf8(e.utf8_error()))
}

/// A payload that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// JSON (de)serialization failed: the payload does not match the message type, or a field
    /// cannot be serialized.
    #[error("JSON payload does not match the message type")]
    Json(#[source] serde_json::Error),
    /// A text payload or text column value is not valid UTF-8.
    #[error("payload is not valid UTF-8")]
    Utf8(#[source] std::str::Utf8Error),
    /// The column value kind cannot be decoded by this codec (for instance a `STRING` value for
    /// the protobuf codec).
    #[error("the {codec} codec cannot decode a {found} payload")]
    #[non_exhaustive]
    PayloadKind {
        /// The message type's codec.
        codec: Codec,
        /// The kind of value read.
        found: PayloadKind,
    },
    /// The payload is not a valid protocol buffer message of the expected type.
    #[error("payload is not a valid protocol buffer message")]
    Protobuf(#[source] BoxError),
    /// The `Payload` column value is `NULL` or of a type a payload cannot have.
    #[error("unexpected payload column value: {detail}")]
    #[non_exhaustive]
    ColumnType {
        /// What was found.
        detail: String,
    },
    /// The key values do not fit the message type's key.
    #[error("key does not match the message type")]
    Key(#[source] KeyError),
}

impl From<KeyError> for CodecError {
    fn from(e: KeyError) -> Self {
        Self::Key(e)
    }
}

/// Encodes `value` as JSON for a `Payload` column of type `column`.
///
/// # Errors
/// [`CodecError::Json`] if serialization fails (a map with non-string keys, a failing
/// `Serialize` impl, …).
pub fn encode_json<T: serde::Serialize + ?Sized>(
    value: &T,
    column: &PayloadType,
) -> Result<Payload, CodecError> {
    let bytes = serde_json::to_vec(value).map_err(CodecError::Json)?;
    Payload::for_column(column, bytes)
}

/// Decodes a JSON payload, whatever column kind it arrived in.
///
/// # Errors
/// [`CodecError::Json`] if the text is not JSON or does not match `T`.
pub fn decode_json<T: serde::de::DeserializeOwned>(payload: &Payload) -> Result<T, CodecError> {
    serde_json::from_slice(payload.as_bytes()).map_err(CodecError::Json)
}

/// Encodes raw bytes for a `BYTES` payload column.
pub fn encode_bytes(bytes: &[u8]) -> Payload {
    Payload::Bytes(bytes.to_vec())
}

/// Decodes a raw-bytes payload: `BYTES` as is, text as its UTF-8 bytes.
pub fn decode_bytes(payload: Payload) -> Result<Vec<u8>, CodecError> {
    Ok(match payload {
        Payload::Bytes(b) => b,
        Payload::String(s) | Payload::Json(s) => s.into_bytes(),
    })
}

/// Encodes text for a `STRING` payload column.
pub fn encode_string(text: &str) -> Payload {
    Payload::String(text.to_owned())
}

/// Decodes a text payload: `STRING` and `JSON` as their text, `BYTES` if valid UTF-8.
///
/// # Errors
/// [`CodecError::Utf8`] for `BYTES` that are not UTF-8.
pub fn decode_string(payload: Payload) -> Result<String, CodecError> {
    match payload {
        Payload::String(s) | Payload::Json(s) => Ok(s),
        Payload::Bytes(b) => into_utf8(b),
    }
}

/// Encodes a protocol buffer message for a `BYTES` payload column.
#[cfg(feature = "protobuf")]
#[cfg_attr(docsrs, doc(cfg(feature = "protobuf")))]
pub fn encode_proto<M: prost::Message>(message: &M) -> Payload {
    Payload::Bytes(message.encode_to_vec())
}

/// Decodes a protocol buffer payload. Only `BYTES` (or `PROTO`) values qualify.
///
/// # Errors
/// [`CodecError::PayloadKind`] for a text value, [`CodecError::Protobuf`] if the bytes do not
/// decode as `M`.
#[cfg(feature = "protobuf")]
#[cfg_attr(docsrs, doc(cfg(feature = "protobuf")))]
pub fn decode_proto<M: prost::Message + Default>(payload: &Payload) -> Result<M, CodecError> {
    match payload {
        Payload::Bytes(b) => M::decode(b.as_slice()).map_err(|e| CodecError::Protobuf(Box::new(e))),
        other => Err(CodecError::PayloadKind {
            codec: Codec::Proto,
            found: other.kind(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_spanner::types;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Body {
        subject: String,
        n: u32,
    }

    #[test]
    fn json_into_each_column_kind() {
        let body = Body {
            subject: "hé".into(),
            n: 3,
        };
        let json = encode_json(&body, &PayloadType::Json).expect("encode");
        assert_eq!(json, Payload::Json(r#"{"subject":"hé","n":3}"#.into()));
        assert_eq!(json.len(), 23);
        let string = encode_json(&body, &PayloadType::String(Length::Max)).expect("encode");
        assert!(matches!(string, Payload::String(_)));
        let bytes = encode_json(&body, &PayloadType::Bytes(Length::Max)).expect("encode");
        assert!(matches!(bytes, Payload::Bytes(_)));
        for p in [json, string, bytes] {
            assert_eq!(decode_json::<Body>(&p).expect("decode"), body);
        }
    }

    #[test]
    fn json_garbage_is_an_error() {
        let err = decode_json::<Body>(&Payload::Bytes(vec![0xff, 0x00])).expect_err("garbage");
        assert!(matches!(err, CodecError::Json(_)));
        let err =
            decode_json::<Body>(&Payload::Json(r#"{"subject":1}"#.into())).expect_err("mismatch");
        assert!(matches!(err, CodecError::Json(_)));
    }

    #[test]
    fn bytes_and_string() {
        assert_eq!(
            decode_bytes(encode_bytes(&[1, 2])).expect("bytes"),
            vec![1, 2]
        );
        assert_eq!(
            decode_bytes(Payload::String("ab".into())).expect("text"),
            b"ab".to_vec()
        );
        assert_eq!(decode_string(encode_string("x")).expect("string"), "x");
        assert_eq!(
            decode_string(Payload::Json("{}".into())).expect("json text"),
            "{}"
        );
        assert!(matches!(
            decode_string(Payload::Bytes(vec![0xc3])),
            Err(CodecError::Utf8(_))
        ));
    }

    #[test]
    fn spanner_values() {
        let cases = [
            (Payload::Bytes(vec![0, 159, 146, 150]), types::bytes()),
            (Payload::String("text".into()), types::string()),
            (Payload::Json(r#"{"a":1}"#.into()), types::json()),
        ];
        for (payload, ty) in cases {
            assert_eq!(payload.param_type(), ty);
            let back = Payload::from_value(payload.to_value(), &ty).expect("read back");
            assert_eq!(back, payload);
        }
        let err = Payload::from_value(Value::null(), &types::bytes()).expect_err("null");
        assert!(matches!(err, CodecError::ColumnType { .. }));
        let err = Payload::from_value(Value::from(1_i64), &types::int64()).expect_err("int64");
        assert!(matches!(err, CodecError::ColumnType { .. }));
    }

    #[test]
    fn debug_hides_content() {
        let p = Payload::String("secret".into());
        assert_eq!(format!("{p:?}"), "Payload(STRING, 6 bytes)");
    }

    #[test]
    fn for_column_needs_utf8_for_text() {
        assert!(matches!(
            Payload::for_column(&PayloadType::Json, vec![0xff]),
            Err(CodecError::Utf8(_))
        ));
        assert!(Payload::for_column(&PayloadType::Bytes(Length::Max), vec![0xff]).is_ok());
    }

    #[cfg(feature = "protobuf")]
    #[test]
    fn proto_round_trip() {
        let ts = prost_types::Timestamp {
            seconds: 12,
            nanos: 34,
        };
        let p = encode_proto(&ts);
        assert_eq!(
            decode_proto::<prost_types::Timestamp>(&p).expect("decode"),
            ts
        );
        assert!(matches!(
            decode_proto::<prost_types::Timestamp>(&Payload::String("x".into())),
            Err(CodecError::PayloadKind {
                codec: Codec::Proto,
                found: PayloadKind::String
            })
        ));
        assert!(matches!(
            decode_proto::<prost_types::Timestamp>(&Payload::Bytes(vec![0xff; 3])),
            Err(CodecError::Protobuf(_))
        ));
    }
}
