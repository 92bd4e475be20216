//! The [`QueueMessage`] trait: one Rust type per queue.

use crate::codec::{CodecError, Payload, PayloadSpec};
use crate::error::Error;
use crate::ident::QueueName;
use crate::key::{KeyColumn, MessageKey, TypedKey};
use crate::schema::QueueSchema;

/// Spanner's guidance for payload size: keep payloads under 4 KB and store larger data
/// out of band (a key into a table). Larger payloads work but are slower.
pub const RECOMMENDED_MAX_PAYLOAD_BYTES: usize = 4 * 1024;

/// The default hard limit on an encoded payload, 1 MiB: this crate's choice, well under
/// Spanner's 10 MiB cell limit, so that a runaway payload fails fast with
/// [`Error::PayloadTooLarge`] instead of bloating commits. Spanner documents no queue-specific
/// maximum.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// A message type: the Rust side of one queue.
///
/// A queue holds only its key columns and one `Payload` column (plus Spanner's `DeliverTime`).
/// A message type maps its key fields to the key columns, in primary-key order, and every other
/// field into the payload through a [`Codec`](crate::codec::Codec). The queue name is the type's stable
/// identity: renaming the Rust type does not change it.
///
/// Implement it with `#[derive(QueueMessage)]` (feature `derive`, on by default):
///
/// ```
/// use spanner_queues::QueueMessage;
///
/// #[derive(QueueMessage, Debug, Clone, PartialEq)]
/// #[queue(name = "OrderEmails")]
/// struct OrderEmail {
///     #[queue(key)]
///     order_id: i64,
///     #[queue(key, column = "EmailId")]
///     id: uuid::Uuid,
///     subject: String,
///     body: String,
/// }
///
/// let email = OrderEmail { order_id: 42, id: uuid::Uuid::nil(), subject: "Hi".into(), body: "…".into() };
/// assert_eq!(OrderEmail::QUEUE, "OrderEmails");
/// assert_eq!(email.key(), (42, uuid::Uuid::nil()));
/// ```
///
/// # Derive attributes
///
/// On the struct, `#[queue(...)]`:
///
/// | Attribute | Meaning |
/// |---|---|
/// | `name = "Queue"` | **Required.** The queue name, checked at compile time against Spanner's naming rules. |
/// | `payload = "json"` | The codec: `"json"` (default), `"bytes"`, `"string"` or `"proto"` (feature `protobuf`). |
/// | `payload_type = "JSON"` | JSON codec only: the `Payload` column type, `"JSON"` (default), `"STRING"` or `"BYTES"` (JSON text stored as a string or as UTF-8 bytes). |
/// | `ordered` | The queue is **ordered** per key (see [`ORDERED`](Self::ORDERED)): the key fields are the ordering key, and the derive adds a sequence key column after them, which sends assign. |
/// | `sequence_column = "Name"` | With `ordered`: the name of the sequence column (default `Sequence`). |
/// | `crate = "path"` | Where to find this crate, for code that re-exports it (default `::spanner_queues`). |
///
/// On fields, `#[queue(...)]`:
///
/// | Attribute | Meaning |
/// |---|---|
/// | `key` | A key column. Key fields, in declaration order, form the primary key; at least one is required. |
/// | `column = "Name"` | Key fields only: the column name. Default: the field name in UpperCamelCase (`order_id` → `OrderId`). |
/// | `desc` | Key fields only: `DESC` order in the primary key. |
///
/// Key field types must implement [`KeyPart`](crate::key::KeyPart). The key type
/// ([`Key`](Self::Key)) is the single key field's type, or a tuple of the key field types.
///
/// Payload fields by codec:
/// - `json`: any number of fields (zero gives `{}`), each `Serialize + DeserializeOwned`; the user
///   needs no serde dependency. `Option` fields may be missing from a payload written by another
///   client; unknown JSON fields are ignored. On payload fields, `#[serde(rename = "…")]`,
///   `#[serde(alias = "…")]` and `#[serde(default)]` / `#[serde(default = "path")]` are honoured;
///   other field-level serde attributes are rejected, because the payload is always written by
///   the derive's own serde code, never by the type's `Serialize` impl. On the struct,
///   `#[serde(rename_all = "…")]` is honoured and other serde attributes are rejected.
/// - `bytes`: exactly one `Vec<u8>` field (`BYTES(MAX)`).
/// - `string`: exactly one `String` field (`STRING(MAX)`).
/// - `proto`: exactly one field implementing `prost::Message + Default` (`BYTES(MAX)`).
///
/// Generic structs, enums, tuple and unit structs are rejected.
///
/// # Implementing by hand
///
/// Use [`QueueName::from_static`] and [`ColumnName::from_static`](crate::ident::ColumnName::from_static)
/// for the constants (an invalid name is then a compile error), and keep
/// [`KEY_COLUMNS`](Self::KEY_COLUMNS) in the same order and with the same kinds as
/// [`Key`](Self::Key) (an ordered type: plus its ascending `INT64` sequence column, last).
pub trait QueueMessage: Sized + Send + Sync + 'static {
    /// The typed primary key: one key part, or a tuple of key parts in primary-key order.
    type Key: TypedKey;

    /// The queue this type is sent to and received from.
    const QUEUE: QueueName;

    /// The key columns in primary-key order.
    const KEY_COLUMNS: &'static [KeyColumn];

    /// The payload codec and column type.
    const PAYLOAD: PayloadSpec;

    /// Whether the queue is ordered per key (default `false`; the derive sets it for a type
    /// marked `#[queue(ordered)]`).
    ///
    /// In an ordered queue the key columns of the type's key fields are the **ordering key**,
    /// and one more key column, last, holds the message's [`Sequence`](crate::ordering::Sequence)
    /// (an ascending `INT64`, named `Sequence` unless `sequence_column` says otherwise). The type
    /// declares no field for it: every send assigns it, from a counter row per ordering key
    /// read and updated in the send's own transaction, so sequence order is commit order for
    /// each ordering key. [`Key`](Self::Key) is the ordering key alone;
    /// [`KEY_COLUMNS`](Self::KEY_COLUMNS) ends with the sequence column. A
    /// [`Worker`](crate::Worker) then handles a message only when no message of its ordering
    /// key with a lower sequence is left; see [the `ordering` module](crate::ordering) for the
    /// guarantee and what it costs. Create the counter table with
    /// [`SchemaSetup::with_queue`](crate::admin::SchemaSetup::with_queue), which adds it for
    /// ordered types.
    ///
    /// ```
    /// use spanner_queues::{Dialect, QueueMessage};
    ///
    /// #[derive(QueueMessage)]
    /// #[queue(name = "ConversationTurns", ordered)]
    /// struct Turn {
    ///     #[queue(key)]
    ///     conversation_id: String, // the ordering key
    ///     text: String,
    /// }
    ///
    /// assert!(Turn::ORDERED);
    /// assert_eq!(
    ///     Turn::schema().create_statement(Dialect::GoogleSql)?,
    ///     "CREATE QUEUE ConversationTurns (ConversationId STRING(MAX) NOT NULL, \
    ///      Sequence INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (ConversationId, Sequence)"
    /// );
    /// # Ok::<(), spanner_queues::Error>(())
    /// ```
    const ORDERED: bool = false;

    /// This message's key (of an ordered type: its ordering key, without the sequence).
    fn key(&self) -> Self::Key;

    /// Encodes the payload (every non-key field).
    ///
    /// # Errors
    /// [`CodecError`] if a field cannot be encoded.
    fn encode_payload(&self) -> Result<Payload, CodecError>;

    /// Rebuilds a message from its key and payload.
    ///
    /// # Errors
    /// [`CodecError`] if the payload does not match this type.
    fn decode(key: Self::Key, payload: Payload) -> Result<Self, CodecError>;

    /// This message's key in dynamic form, for errors and tracing (of an ordered type: its
    /// ordering key, without the sequence, which only a send assigns).
    fn message_key(&self) -> MessageKey {
        self.key().to_message_key()
    }

    /// The DDL description of this type's queue.
    ///
    /// ```
    /// use spanner_queues::{Dialect, QueueMessage};
    ///
    /// #[derive(QueueMessage)]
    /// #[queue(name = "Pings", payload = "string")]
    /// struct Ping {
    ///     #[queue(key)]
    ///     id: String,
    ///     text: String,
    /// }
    ///
    /// assert_eq!(
    ///     Ping::schema().create_statement(Dialect::GoogleSql)?,
    ///     "CREATE QUEUE Pings (Id STRING(MAX) NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)"
    /// );
    /// # Ok::<(), spanner_queues::Error>(())
    /// ```
    fn schema() -> QueueSchema {
        Self::KEY_COLUMNS.iter().fold(
            QueueSchema::new(Self::QUEUE, Self::PAYLOAD.column().clone()),
            |schema, column| schema.with_key_column(column.clone()),
        )
    }

    /// Encodes the payload, with the queue and key in the error.
    ///
    /// # Errors
    /// [`Error::Encode`]; nothing was written.
    fn encode(&self) -> Result<Payload, Error> {
        self.encode_payload().map_err(|source| Error::Encode {
            queue: Self::QUEUE,
            key: self.message_key(),
            source,
        })
    }

    /// Rebuilds a message from a key and payload read from the queue (by a receive, or a plain
    /// read), with the queue and key in the error.
    ///
    /// The key is the full key, as read: for an ordered type, the ordering key followed by the
    /// sequence, which the message does not keep.
    ///
    /// # Errors
    /// [`Error::Decode`] if the key does not fit [`Key`](Self::Key) or the payload does not match
    /// this type (a poison message: nothing is acked).
    fn decode_parts(key: MessageKey, payload: Payload) -> Result<Self, Error> {
        let typed_part = if Self::ORDERED && key.len() == Self::KEY_COLUMNS.len() {
            let mut parts = key.parts().to_vec();
            parts.pop();
            MessageKey::new(parts)
        } else {
            key.clone()
        };
        let typed = match Self::Key::from_message_key(typed_part) {
            Ok(typed) => typed,
            Err(e) => {
                return Err(Error::Decode {
                    queue: Self::QUEUE,
                    key,
                    source: CodecError::Key(e),
                });
            }
        };
        Self::decode(typed, payload).map_err(|source| Error::Decode {
            queue: Self::QUEUE,
            key,
            source,
        })
    }
}
