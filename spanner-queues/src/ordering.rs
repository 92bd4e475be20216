//! Per-key ordering: at most one message per ordering key in flight, in send order.
//!
//! # What Spanner guarantees, and what this crate adds
//!
//! Spanner queues document no delivery order: any due message may be delivered, to any
//! consumer, at least once. What Spanner does guarantee is serializable transactions, and that
//! is what this crate builds ordering on.
//!
//! In an **ordered** queue (a message type marked `#[queue(ordered)]`, see
//! [`QueueMessage::ORDERED`]) the key columns of the type's key fields are the **ordering
//! key**, and the SDK adds one more key column, last: the message's [`Sequence`]. Every send
//! assigns the next sequence of its ordering key from a counter row ([`tables::sequences`](crate::tables::sequences)) that
//! it reads and updates in the send's own transaction, so two senders of one ordering key are
//! serialized by Spanner's locks and sequence order is commit order.
//! [`Sent::sequence`](crate::Sent::sequence) returns the sequence a send assigned;
//! [`Delivery::sequence`](crate::Delivery::sequence) and
//! [`HandlerContext::sequence`](crate::HandlerContext::sequence) read it back.
//!
//! A [`Worker`](crate::Worker) runs the handler of a message only once nothing of the same
//! ordering key with a lower sequence is left in the queue (leased, scheduled, waiting for a
//! retry or parked: all of them are rows of the queue) and, under
//! [`DeadLetterOrdering::Block`](crate::worker::DeadLetterOrdering::Block) (the default), none
//! in the dead-letter table. Once true, that stays true: lower sequences are never sent again,
//! a release puts a message back in the transaction that acks it, and only a dead letter comes
//! back (a replay), of which there was none. So the worker may learn it before the handler's
//! transaction, in a read-only look, or from having acked the previous sequence itself, and the
//! effects of one ordering key still commit in send order, each exactly once (the ack in the
//! handler's transaction still asserts that the message is there). An external handler's calls
//! happen in send order, except that a call whose lease was lost may still be running when the
//! next message's call starts (delivery is at least once).
//!
//! A transactional batch handler may get a key's consecutive sequences in one batch, in order:
//! they are one transaction, whose effects commit together or not at all, and when one of them
//! fails none after it commits in that attempt (they wait for it); see
//! [`WorkerBuilder::transactional_batch`](crate::worker::WorkerBuilder::transactional_batch).
//!
//! Under [`DeadLetterOrdering::Skip`](crate::worker::DeadLetterOrdering::Skip) a
//! dead-lettered message no longer holds its key back; a replayed dead letter goes back to its
//! old place (the later messages not yet handled wait for it), under either policy: a message
//! with a dead letter before it is checked again inside its handler's transaction. A message
//! removed with [`Transaction::cancel_sequenced`](crate::Transaction::cancel_sequenced) is gone like a handled
//! one: the later messages stop waiting for it. Different ordering keys do not wait for each
//! other.
//!
//! # Waiting
//!
//! A worker keeps the messages that must wait leased in memory, by ordering key and in
//! sequence order; the receiver renews their leases with its others, in one `RENEWLEASE` call
//! per round for up to 500 leases. A key's lowest message runs as soon as the worker knows that
//! nothing earlier of the key is left: the first sequence (0) at once, the next one right
//! after the worker acked the one before it, any other after a **look**. Every
//! [`recheck_delay`](crate::worker::OrderingPolicy::with_recheck_delay) (100 ms) while messages
//! wait, the worker looks at the earlier messages of all its waiting keys: two single-use
//! reads at one timestamp a moment ago (the key ranges up to the waiting sequences, and the
//! queue's dead letters; a read that does not see the waiting message itself may predate the
//! sends of the earlier ones and tells nothing). It holds at most
//! [`max_held`](crate::worker::OrderingPolicy::with_max_held) (100) waiting messages beyond
//! its handlers and prefetch; when they fill its receiver, none of them may run and its looks
//! see nothing of their keys go for a while (fifty recheck delays, at least 10 s), the
//! messages they wait for cannot reach it, and it releases (acks and re-sends in one
//! transaction, not an attempt) the quarter furthest behind
//! their keys' heads. It also releases a key's waiting messages when a dead letter blocks the
//! key (they come back after
//! [`blocked_delay`](crate::worker::OrderingPolicy::with_blocked_delay), 30 s), or when the
//! earlier message is scheduled more than a minute ahead (they come back when it is due).
//!
//! # Costs
//!
//! - A send reads and writes one counter row per ordering key, in its transaction.
//! - A handled message costs one read-write transaction, the one that applies its effects and
//!   acks it, with no ordering reads in it; a message behind a non-blocking dead letter
//!   (`Skip`) also reads one key range of the queue and the queue's dead letters in it.
//! - Waiting costs no read-write transaction: one look per worker per `recheck_delay` at
//!   most, while any message waits, whatever the number of keys or the depth of their
//!   backlogs. A look is two reads (of the earlier messages' rows only, and of the queue's dead
//!   letters: keep them few, they expire after 30 days). Holding costs a lease renewal per
//!   message per round (one `RENEWLEASE` call per 500) and the message's payload in memory.
//!   A backlog the workers cannot hold, when the messages they hold are not the ones their keys
//!   wait for (received out of order), costs one read-write transaction per release, and a
//!   released message comes back later.
//!
//! Measured on the emulator (three workers of four handlers, 40 keys with 50 messages each
//! queued before the workers start), see `docs/ordering.md`.
//!
//! Two sends of one ordering key in one transaction get consecutive sequences when they run
//! inside [`Database::transaction`](crate::Database::transaction) (or in one
//! [`send_many`](crate::Transaction::send_many)); in another runner the second fails with
//! [`Error::AlreadyQueued`] and nothing is written.

use std::collections::HashMap;
use std::time::SystemTime;

use google_cloud_spanner::key::{Key, KeyRange, KeySet};
use google_cloud_spanner::mutation::Mutation;
use google_cloud_spanner::read::ReadRequest;
use google_cloud_spanner::transaction::ReadWriteTransaction;
use google_cloud_spanner::value::{FromValue as _, Value};

use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::key::{KeyType, KeyValue, MessageKey};
use crate::message::QueueMessage;
use crate::outcome::{OperationKind, recorded};
use crate::schema::SystemColumn;
use crate::types::SortOrder;

/// The place of a message in its ordering key: the sequence an ordered queue's send assigns.
///
/// In an ordered queue ([`QueueMessage::ORDERED`], `#[queue(ordered)]`) the SDK adds the
/// sequence as the last key column and assigns it on send, from 0 up per ordering key, in
/// commit order. A message is the ordering key ([`QueueMessage::Key`]) plus its sequence: read
/// it from [`Delivery::sequence`](crate::Delivery::sequence) or
/// [`HandlerContext::sequence`](crate::HandlerContext::sequence), and use it to cancel that
/// one message ([`Transaction::cancel_sequenced`](crate::Transaction::cancel_sequenced)).
///
/// ```
/// use spanner_queues::ordering::Sequence;
///
/// let first = Sequence::new(0);
/// assert!(first < Sequence::new(1));
/// assert_eq!(first.get(), 0);
/// assert_eq!(Sequence::new(7).to_string(), "7");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sequence(i64);

impl Sequence {
    /// The sequence with this value (for example one the application stored).
    pub const fn new(value: i64) -> Self {
        Self(value)
    }

    /// The sequence's value, as stored in the queue's sequence column (`INT64`).
    pub const fn get(self) -> i64 {
        self.0
    }

    /// The sequence of a full key of an ordered queue of `M` (its last part); `None` for a type
    /// that is not ordered or a key that is not one of its keys.
    pub(crate) fn of<M: QueueMessage>(key: &MessageKey) -> Option<Self> {
        if !M::ORDERED || key.len() != M::KEY_COLUMNS.len() {
            return None;
        }
        split(key).map(|(_, sequence)| Self(sequence))
    }
}

impl std::fmt::Display for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Sequence> for i64 {
    fn from(sequence: Sequence) -> Self {
        sequence.0
    }
}

/// The full key of the message of ordering key `key` with `sequence`.
pub(crate) fn full_key<M: QueueMessage>(key: &M::Key, sequence: Sequence) -> MessageKey {
    let mut parts = crate::key::TypedKey::to_message_key(key).into_parts();
    parts.push(KeyValue::Int64(sequence.0));
    MessageKey::new(parts)
}

/// The table of per-ordering-key sequence counters.
pub(crate) const SEQUENCES_TABLE: &str = "SpannerQueuesSequences";
/// The table of per-ordering-key sequence counters, in PostgreSQL-dialect databases.
pub(crate) const SEQUENCES_TABLE_POSTGRESQL: &str = "spanner_queues_sequences";

/// The DDL of the sequence counter table in `dialect` (`CREATE TABLE IF NOT EXISTS`): one row
/// per queue and ordering key, `(QueueName, OrderingKeyDigest)`, with the ordering key's
/// [`KeyEncoding::V1`](crate::key::KeyEncoding::V1) text and the next sequence to assign.
/// [`SchemaSetup::with_queue`](crate::SchemaSetup::with_queue) adds it for ordered
/// message types.
pub(crate) fn schema_statements(dialect: Dialect) -> Vec<String> {
    match dialect {
        Dialect::GoogleSql => vec![format!(
            "CREATE TABLE IF NOT EXISTS {SEQUENCES_TABLE} (\
             QueueName STRING(128) NOT NULL, \
             OrderingKeyDigest BYTES({DIGEST_LEN}) NOT NULL, \
             OrderingKey STRING(MAX) NOT NULL, \
             NextSequence INT64 NOT NULL\
             ) PRIMARY KEY (QueueName, OrderingKeyDigest)"
        )],
        Dialect::PostgreSql => vec![format!(
            "CREATE TABLE IF NOT EXISTS {SEQUENCES_TABLE_POSTGRESQL} (\
             queue_name varchar(128) NOT NULL, \
             ordering_key_digest bytea NOT NULL, \
             ordering_key text NOT NULL, \
             next_sequence bigint NOT NULL, \
             PRIMARY KEY (queue_name, ordering_key_digest)\
             )"
        )],
    }
}

/// The counter table and its columns in `dialect`.
fn names(dialect: Dialect) -> (&'static str, [&'static str; 4]) {
    match dialect {
        Dialect::GoogleSql => (
            SEQUENCES_TABLE,
            [
                "QueueName",
                "OrderingKeyDigest",
                "OrderingKey",
                "NextSequence",
            ],
        ),
        Dialect::PostgreSql => (
            SEQUENCES_TABLE_POSTGRESQL,
            [
                "queue_name",
                "ordering_key_digest",
                "ordering_key",
                "next_sequence",
            ],
        ),
    }
}

/// Version byte of the ordering key digest (SHA-256 of `KeyEncoding::V1`), as for the
/// worker's tables.
const DIGEST_V1: u8 = 1;
const DIGEST_LEN: usize = 33;

fn digest(ordering_key: &MessageKey) -> Vec<u8> {
    use sha2::Digest as _;
    let mut digest = Vec::with_capacity(DIGEST_LEN);
    digest.push(DIGEST_V1);
    digest.extend_from_slice(&sha2::Sha256::digest(ordering_key.to_wire().as_bytes()));
    digest
}

/// Checks that an ordered message type has the layout ordering needs: at least two key
/// columns, the last an ascending `INT64`. The derive checks this at compile time; this
/// catches hand-written implementations.
///
/// # Errors
/// [`Error::InvalidSchema`] naming the queue and what is wrong.
pub(crate) fn check_layout<M: QueueMessage>() -> Result<()> {
    if !M::ORDERED {
        return Ok(());
    }
    let invalid = |reason: &str| Error::InvalidSchema {
        queue: Some(M::QUEUE.to_string()),
        reason: format!("an ordered queue {reason}"),
    };
    match M::KEY_COLUMNS {
        [] | [_] => Err(invalid(
            "needs an ordering key column before its sequence column",
        )),
        [.., last] if last.key_type() != KeyType::Int64 => {
            Err(invalid("needs an INT64 sequence as its last key column"))
        }
        [.., last] if last.order() != SortOrder::Asc => {
            Err(invalid("needs an ascending sequence column"))
        }
        _ => Ok(()),
    }
}

/// A key of an ordered queue split into its ordering key and its sequence.
pub(crate) fn split(key: &MessageKey) -> Option<(MessageKey, i64)> {
    match key.parts() {
        [prefix @ .., KeyValue::Int64(sequence)] if !prefix.is_empty() => {
            Some((MessageKey::new(prefix.to_vec()), *sequence))
        }
        _ => None,
    }
}

/// Assigns the sequences of messages of `M` about to be sent in `tx`, in send order: `keys`
/// are their ordering keys, each of which gets its sequence appended. Reads the counter row of
/// each ordering key, numbers the messages of each ordering key from there (after any sent
/// earlier in the same transaction of [`transaction::builder`](crate::transaction::builder)),
/// and buffers the counters' new values.
pub(crate) async fn assign<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    keys: &mut [MessageKey],
) -> Result<()> {
    check_layout::<M>()?;
    let (table, columns) = names(dialect);
    let mut order: Vec<MessageKey> = Vec::new();
    let mut next: HashMap<MessageKey, i64> = HashMap::new();
    for ordering_key in keys.iter() {
        if ordering_key.len() + 1 != M::KEY_COLUMNS.len() {
            return Err(Error::InvalidKey {
                queue: M::QUEUE,
                source: crate::key::KeyError::Arity {
                    expected: M::KEY_COLUMNS.len() - 1,
                    found: ordering_key.len(),
                },
            });
        }
        if !next.contains_key(ordering_key) {
            next.insert(ordering_key.clone(), 0);
            order.push(ordering_key.clone());
        }
    }
    let by_digest: HashMap<Vec<u8>, MessageKey> =
        order.iter().map(|k| (digest(k), k.clone())).collect();
    let mut wanted = KeySet::builder();
    for ordering_key in &order {
        wanted = wanted.add_key(counter_key(&M::QUEUE, ordering_key));
    }
    let read = ReadRequest::builder(table, vec![columns[1], columns[3]])
        .with_keys(wanted.build())
        .build();
    let mut rows = tx.execute_read(read).await?;
    while let Some(row) = rows.next().await {
        let row = row?;
        let found: Vec<u8> = row.get(0)?;
        let value: i64 = row.get(1)?;
        if let Some(ordering_key) = by_digest.get(&found) {
            next.insert(ordering_key.clone(), value);
        }
    }
    // Messages of this queue sent earlier in this transaction: the counter's buffered value is
    // not visible to the read above.
    for sent in recorded(OperationKind::Send, &M::QUEUE) {
        if let Some((ordering_key, sequence)) = split(&sent)
            && let Some(n) = next.get_mut(&ordering_key)
        {
            *n = (*n).max(sequence + 1);
        }
    }
    for key in keys.iter_mut() {
        let n = next.get_mut(&*key).expect("every ordering key is counted");
        let mut parts = std::mem::take(key).into_parts();
        parts.push(KeyValue::Int64(*n));
        *key = MessageKey::new(parts);
        *n += 1;
    }
    let mutations: Vec<Mutation> = order
        .iter()
        .map(|ordering_key| {
            Mutation::new_insert_or_update_builder(table)
                .set(columns[0])
                .to(M::QUEUE.as_str().to_owned())
                .set(columns[1])
                .to(digest(ordering_key))
                .set(columns[2])
                .to(ordering_key.to_wire())
                .set(columns[3])
                .to(next[ordering_key])
                .build()
        })
        .collect();
    tx.buffer(mutations)?;
    Ok(())
}

fn counter_key(queue: &QueueName, ordering_key: &MessageKey) -> Key {
    Key::new(vec![
        Value::from(queue.as_str().to_owned()),
        Value::from(digest(ordering_key)),
    ])
}

/// The earliest message of an ordering key still in the queue, before the one being checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Earlier {
    /// How many sequences it is ahead of the message being checked (at least 1).
    pub(crate) ahead: i64,
    /// Its `DeliverTime` (`None` if that could not be read).
    pub(crate) due: Option<SystemTime>,
}

/// A table or column name as the Read API takes it in `dialect`: PostgreSQL folds unquoted
/// names to lower case (as [`QueueName::to_sql`] does for statements), GoogleSQL keeps them.
fn read_name(name: &str, dialect: Dialect) -> String {
    match dialect {
        Dialect::PostgreSql => name.to_lowercase(),
        _ => name.to_owned(),
    }
}

/// The earliest message of `key`'s ordering key with a lower sequence still in the queue,
/// read in `tx`, or `None` when there is none.
pub(crate) async fn earlier_in_queue<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    key: &MessageKey,
) -> Result<Option<Earlier>> {
    let Some((ordering_key, sequence)) = split(key) else {
        return Ok(None);
    };
    let Some(sequence_column) = M::KEY_COLUMNS.last() else {
        return Ok(None);
    };
    let prefix: Vec<Value> = ordering_key
        .parts()
        .iter()
        .map(KeyValue::to_value)
        .collect();
    let mut end = prefix.clone();
    end.push(Value::from(sequence));
    let range = KeyRange::closed_open(Key::new(prefix), Key::new(end));
    let read = ReadRequest::builder(
        read_name(M::QUEUE.as_str(), dialect),
        vec![
            read_name(sequence_column.name().as_str(), dialect),
            SystemColumn::DeliverTime.name(dialect).to_owned(),
        ],
    )
    .with_keys(KeySet::from(range))
    .set_limit(1)
    .build();
    let mut rows = tx.execute_read(read).await?;
    match rows.next().await {
        Some(row) => {
            let row = row?;
            let ahead = row
                .get::<i64>(0)
                .map_or(1, |earliest| sequence.saturating_sub(earliest).max(1));
            Ok(Some(Earlier {
                ahead,
                due: row.get::<SystemTime>(1).ok(),
            }))
        }
        None => Ok(None),
    }
}

/// What a read-only look found of the earlier messages of one ordering key in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct EarlierLeft {
    /// The lowest sequence left before the one looked from, if any.
    pub(crate) lowest: Option<i64>,
    /// The latest `DeliverTime` among them (`None` when none is left or it could not be read).
    pub(crate) latest_due: Option<SystemTime>,
    /// Whether the read saw the message looked from itself. Only then does it say what is left
    /// before it: sequences are assigned in commit order, so a read at a timestamp that sees a
    /// message sees every earlier one of its ordering key that was not yet handled, where a
    /// read at an earlier timestamp (a look reads a moment in the past) may predate their sends.
    pub(crate) seen: bool,
}

/// The read of a look ([`read_earlier`]): for each `(ordering key, sequence)` of `wanted`, the
/// key range of that ordering key's messages up to that sequence (the earlier messages and the
/// one looked from, which tells that the read is recent enough: see [`EarlierLeft::seen`]), in
/// one request (a key range read walks only those rows, where a query would scan the queue);
/// the key columns, the sequence and `DeliverTime` of each.
pub(crate) fn earlier_read<M: QueueMessage>(
    dialect: Dialect,
    wanted: &[(MessageKey, i64)],
) -> Result<ReadRequest> {
    let Some((_, key_columns)) = M::KEY_COLUMNS.split_last() else {
        return Err(Error::InvalidSchema {
            queue: Some(M::QUEUE.to_string()),
            reason: "an ordered queue needs key columns".into(),
        });
    };
    let mut ranges = KeySet::builder();
    for (ordering_key, before) in wanted {
        if ordering_key.len() != key_columns.len() {
            return Err(Error::InvalidKey {
                queue: M::QUEUE,
                source: crate::key::KeyError::Arity {
                    expected: key_columns.len(),
                    found: ordering_key.len(),
                },
            });
        }
        let prefix: Vec<Value> = ordering_key
            .parts()
            .iter()
            .map(KeyValue::to_value)
            .collect();
        let mut end = prefix.clone();
        end.push(Value::from(*before));
        ranges = ranges.add_range(KeyRange::closed_closed(Key::new(prefix), Key::new(end)));
    }
    let mut columns: Vec<String> = M::KEY_COLUMNS
        .iter()
        .map(|c| read_name(c.name().as_str(), dialect))
        .collect();
    columns.push(SystemColumn::DeliverTime.name(dialect).to_owned());
    Ok(
        ReadRequest::builder(read_name(M::QUEUE.as_str(), dialect), columns)
            .with_keys(ranges.build())
            .build(),
    )
}

/// Reads the rows of [`earlier_read`] into `out` (indexed as its `wanted`): for each ordering
/// key, whether the message looked from was read, the lowest sequence read before it and the
/// latest `DeliverTime` among those. Returns `false` when a row's ordering key is none of
/// `wanted` (its key columns did not read back as sent): then nothing read may be trusted to be
/// complete.
pub(crate) async fn read_earlier<M: QueueMessage>(
    rows: &mut google_cloud_spanner::result::ResultSet,
    wanted: &[(MessageKey, i64)],
    out: &mut [EarlierLeft],
) -> Result<bool> {
    let index: HashMap<&MessageKey, usize> = wanted
        .iter()
        .enumerate()
        .map(|(i, (ordering_key, _))| (ordering_key, i))
        .collect();
    let types = rows.metadata().column_types().to_vec();
    let Some((_, key_columns)) = M::KEY_COLUMNS.split_last() else {
        return Ok(false);
    };
    let n = key_columns.len();
    let mut complete = true;
    while let Some(row) = rows.next().await {
        let row = row?;
        let values = row.raw_values();
        let (Some(sequence), Some(due), Some(sequence_type), Some(due_type)) = (
            values.get(n),
            values.get(n + 1),
            types.get(n),
            types.get(n + 1),
        ) else {
            complete = false;
            continue;
        };
        let parts: Option<Vec<KeyValue>> = key_columns
            .iter()
            .zip(values)
            .zip(&types)
            .map(|((column, value), ty)| KeyValue::from_value(column.key_type(), value, ty).ok())
            .collect();
        let found = parts
            .map(MessageKey::new)
            .and_then(|key| index.get(&key).copied())
            .and_then(|i| Some((out.get_mut(i)?, wanted[i].1)));
        let (Some((slot, from)), Ok(sequence)) = (found, i64::from_value(sequence, sequence_type))
        else {
            complete = false;
            continue;
        };
        if sequence >= from {
            slot.seen |= sequence == from;
            continue;
        }
        slot.lowest = Some(slot.lowest.map_or(sequence, |lowest| lowest.min(sequence)));
        if let Ok(Some(due)) = Option::<SystemTime>::from_value(due, due_type) {
            slot.latest_due = Some(slot.latest_due.map_or(due, |latest| latest.max(due)));
        }
    }
    Ok(complete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{CodecError, Payload, PayloadSpec};
    use crate::ident::ColumnName;
    use crate::key::{KeyColumn, TypedKey as _};

    /// An ordered message type, written by hand: ordering key `Conversation`, sequence `Seq`.
    #[derive(Debug, PartialEq)]
    struct Turn {
        conversation: String,
        text: String,
    }

    impl QueueMessage for Turn {
        type Key = String;
        const QUEUE: QueueName = QueueName::from_static("Turns");
        const KEY_COLUMNS: &'static [KeyColumn] = &[
            KeyColumn::new(ColumnName::from_static("Conversation"), KeyType::String),
            KeyColumn::new(ColumnName::from_static("Seq"), KeyType::Int64),
        ];
        const PAYLOAD: PayloadSpec = PayloadSpec::string();
        const ORDERED: bool = true;
        fn key(&self) -> String {
            self.conversation.clone()
        }
        fn encode_payload(&self) -> std::result::Result<Payload, CodecError> {
            Ok(crate::codec::encode_string(&self.text))
        }
        fn decode(conversation: String, payload: Payload) -> std::result::Result<Self, CodecError> {
            Ok(Turn {
                conversation,
                text: crate::codec::decode_string(payload)?,
            })
        }
    }

    #[test]
    fn an_ordered_message_is_its_ordering_key_plus_a_sequence() {
        let key = ("c".to_owned(), 3_i64).to_message_key();
        assert_eq!(Sequence::of::<Turn>(&key), Some(Sequence::new(3)));
        assert_eq!(full_key::<Turn>(&"c".to_owned(), Sequence::new(3)), key);
        // The message keeps its ordering key; the sequence is the queue's.
        let turn = Turn::decode_parts(key, Payload::String("hi".into())).expect("decodes");
        assert_eq!(
            turn,
            Turn {
                conversation: "c".into(),
                text: "hi".into()
            }
        );
        assert_eq!(turn.message_key(), "c".to_owned().to_message_key());
        assert_eq!(Sequence::of::<Turn>(&"c".to_owned().to_message_key()), None);
        assert_eq!(i64::from(Sequence::new(9)), 9);
    }

    #[test]
    fn a_look_reads_the_key_range_before_each_sequence() {
        let wanted = [
            ("a".to_owned().to_message_key(), 5),
            ("b".to_owned().to_message_key(), 2),
        ];
        let read = earlier_read::<Turn>(Dialect::PostgreSql, &wanted).expect("read");
        let shown = format!("{read:?}");
        assert!(shown.contains("\"turns\""), "{shown}");
        for column in ["conversation", "seq", "deliver_time"] {
            assert!(
                shown.contains(&format!("\"{column}\"")),
                "{column}: {shown}"
            );
        }
        let wrong = [(("a".to_owned(), 1_i64).to_message_key(), 5)];
        assert!(matches!(
            earlier_read::<Turn>(Dialect::GoogleSql, &wrong),
            Err(Error::InvalidKey { .. })
        ));
    }

    #[test]
    fn keys_split_into_ordering_key_and_sequence() {
        let key = ("conv-1".to_owned(), 7_i64).to_message_key();
        let (ordering_key, sequence) = split(&key).expect("splits");
        assert_eq!(ordering_key, "conv-1".to_owned().to_message_key());
        assert_eq!(sequence, 7);
        assert_eq!(split(&7_i64.to_message_key()), None);
        assert_eq!(split(&(7_i64, "x".to_owned()).to_message_key()), None);
    }

    #[test]
    fn the_counter_table_is_rendered_in_both_dialects() {
        let google = schema_statements(Dialect::GoogleSql);
        assert!(google[0].contains("PRIMARY KEY (QueueName, OrderingKeyDigest)"));
        let pg = schema_statements(Dialect::PostgreSql);
        assert!(pg[0].starts_with("CREATE TABLE IF NOT EXISTS spanner_queues_sequences"));
        assert!(pg[0].contains("PRIMARY KEY (queue_name, ordering_key_digest)"));
        assert_eq!(digest(&1_i64.to_message_key()).len(), DIGEST_LEN);
    }
}
