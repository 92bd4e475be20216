//! Per-key ordering: at most one message per ordering key in flight, in send order.
//!
//! # What Spanner guarantees, and what this crate adds
//!
//! Spanner queues document no delivery order: any due message may be delivered, to any
//! consumer, at least once. What Spanner does guarantee is serializable read-write
//! transactions, and that is what this crate builds ordering on. In an **ordered** queue
//! (a message type with a `#[queue(key, sequence)]` field, see
//! [`QueueMessage::ORDERED`]) the last key column is a sequence and the key columns before it
//! are the **ordering key**. Every send assigns the next sequence of its ordering key from a
//! counter row ([`tables::sequences`](crate::tables::sequences)) that it reads and updates in the send's own transaction,
//! so two senders of one ordering key are serialized by Spanner's locks and sequence order is
//! commit order. A [`Worker`](crate::Worker) runs the handler of a message only after it has
//! found, in a consistent read, no message of the same ordering key with a lower sequence
//! still in the queue (leased, scheduled, waiting for a retry or parked: all of them are rows
//! of the queue) and, under [`DeadLetterOrdering::Block`](crate::worker::DeadLetterOrdering::Block)
//! (the default), none in the dead-letter table. For a transactional handler that read is in
//! the transaction that applies the effects and acks the message (or no read is needed: see
//! the costs below), so the effects of one ordering key commit in send order, each exactly
//! once. An external handler's read comes
//! before it runs: its calls happen in send order, except that a call whose lease was lost
//! may still be running when the next message's call starts (delivery is at least once).
//! Under [`DeadLetterOrdering::Skip`](crate::worker::DeadLetterOrdering::Skip) a dead-lettered
//! message no longer holds its key back; a replayed dead letter goes back to its old place
//! (the later messages not yet handled wait for it), under either policy. A message removed
//! with [`Transaction::cancel`](crate::Transaction::cancel) is gone like a handled one: the later messages
//! stop waiting for it. Different ordering keys do not wait for each other.
//!
//! A message that must wait is released (acked and sent again with the same key and payload
//! in one transaction, not counted as an attempt) to come back shortly after the earlier
//! message is due, or after a short delay when that one is being handled now (longer the
//! further behind it is); see
//! [`OrderingPolicy`](crate::worker::OrderingPolicy). Inside one worker, messages of one
//! ordering key wait for each other in memory, in sequence order, without a transaction.
//!
//! Costs: a send reads and writes one counter row per ordering key. A handled message reads
//! one key range of the queue and the queue's dead letters (keep them few: they expire after
//! 30 days), except when the same worker has just handled the previous sequence of its
//! ordering key at a time when nothing earlier of that key was left in the queue or the
//! dead-letter table: nothing earlier can come back then (lower sequences are never sent
//! again, and there was no dead letter to replay), so that message needs no reads.
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
use google_cloud_spanner::value::Value;

use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::key::{KeyType, KeyValue, MessageKey};
use crate::message::QueueMessage;
use crate::outcome::{OperationKind, recorded};
use crate::schema::SystemColumn;
use crate::types::SortOrder;

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

/// Assigns the sequences of `keys` (messages of `M` about to be sent in `tx`, in send order):
/// reads the counter row of each ordering key, numbers the messages of each ordering key from
/// there (after any sent earlier in the same transaction of [`transaction::builder`]), and
/// buffers the counters' new values.
pub(crate) async fn assign<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    dialect: Dialect,
    keys: &mut [MessageKey],
) -> Result<()> {
    check_layout::<M>()?;
    let (table, columns) = names(dialect);
    let mut order: Vec<MessageKey> = Vec::new();
    let mut next: HashMap<MessageKey, i64> = HashMap::new();
    for key in keys.iter() {
        let Some((ordering_key, _)) = split(key) else {
            return Err(Error::InvalidSchema {
                queue: Some(M::QUEUE.to_string()),
                reason: "an ordered queue needs an INT64 sequence as its last key column".into(),
            });
        };
        if !next.contains_key(&ordering_key) {
            next.insert(ordering_key.clone(), 0);
            order.push(ordering_key);
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
        let Some((ordering_key, _)) = split(key) else {
            continue;
        };
        let n = next
            .get_mut(&ordering_key)
            .expect("every ordering key is counted");
        let mut parts = ordering_key.into_parts();
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

/// The start of the [`KeyEncoding::V1`](crate::key::KeyEncoding::V1) text of every key with
/// `ordering_key` as its prefix (the text is a JSON array of strings, one per part).
pub(crate) fn wire_prefix(ordering_key: &MessageKey) -> String {
    let mut text = ordering_key.to_wire();
    text.pop(); // the closing `]`
    text.push(',');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::TypedKey as _;

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
    fn the_wire_prefix_starts_every_key_of_the_ordering_key_and_no_other() {
        let ordering_key = ("a".to_owned(), 1_i64).to_message_key();
        let prefix = wire_prefix(&ordering_key);
        let own = ("a".to_owned(), 1_i64, 5_i64).to_message_key();
        assert!(
            own.to_wire().starts_with(&prefix),
            "{prefix} {}",
            own.to_wire()
        );
        for other in [
            ("a".to_owned(), 10_i64, 5_i64).to_message_key(),
            ("ab".to_owned(), 1_i64, 5_i64).to_message_key(),
        ] {
            assert!(!other.to_wire().starts_with(&prefix), "{}", other.to_wire());
        }
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
