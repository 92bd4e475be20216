//! Keyed deletes of queue rows (acks by DML), held back until commit.
//!
//! The official emulator runs every DML statement as a scan of its table, and it keeps the
//! versions of deleted rows for as long as it runs, so a `DELETE FROM Q WHERE key = @k` costs
//! more with every message ever acked in `Q`: on a long run the acks alone saturate a core. The
//! front therefore answers such a statement itself, in a read-write transaction that holds
//! the database's admission slot: it reads the row by key in the client's transaction (a
//! point lookup, whatever the table's history), reports the row count (and checks
//! `ASSERT_ROWS_MODIFIED`) as the statement would, and adds a `Delete` mutation of that key
//! to the transaction's commit. DML runs before a commit's mutations, so the commit applies
//! the same changes in the same order.
//!
//! Until the commit, the row is still visible inside the transaction. A later DML statement of
//! the same transaction that names the queue (an ack and a re-send of the same key) runs in
//! one batch after the held-back deletes, as DML, so it sees them. A query or read that names
//! the queue would see the difference: the front aborts the transaction instead (`ABORTED`,
//! which clients retry) and runs keyed deletes as plain DML for a while, so the retry behaves
//! exactly as the backend.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::proto::spanner::mutation::{Delete, Operation};
use super::proto::spanner::{KeySet, Mutation, Type, TypeCode};
use super::proto::{Kind, ListValue, Value};

/// Transactions with held-back deletes remembered at most (one that never commits nor rolls
/// back stays until then); beyond it, deletes run as plain DML.
const MAX_TRANSACTIONS: usize = 1024;
/// How long keyed deletes run as plain DML after a transaction was aborted because of one.
const PAUSE_AFTER_ABORT: Duration = Duration::from_secs(10);

/// The held-back deletes of each open transaction.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    by_transaction: HashMap<Vec<u8>, Vec<Held>>,
    paused_until: Option<Instant>,
}

/// One held-back delete.
#[derive(Debug, Clone)]
struct Held {
    /// The queue (its backend table), as named in the catalog.
    table: String,
    key: ListValue,
    /// The request's sequence number: a replay of the same request gets the same answer.
    seqno: i64,
    /// The statement, to run it as DML after all (see [`Deferred::statements`]); on the first
    /// row of a statement only.
    statement: Option<Statement>,
    /// For a held-back insert, its `Insert` mutation (`None`: a delete of `key`).
    insert: Option<Mutation>,
}

/// A held-back DML statement, as the client sent it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Statement {
    pub(crate) sql: String,
    pub(crate) params: Option<prost_types::Struct>,
    pub(crate) param_types: HashMap<String, Type>,
}

/// What an earlier delete of the same transaction says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Earlier {
    /// No earlier delete of this key in the transaction.
    None,
    /// This very request (same sequence number) was answered already: one row.
    Replay,
    /// Another statement of the transaction deleted the key: no row is left.
    Deleted,
    /// The transaction inserted the key by a held-back statement: run as DML.
    Inserted,
}

impl Deferred {
    /// Whether new deletes may be held back now.
    pub(crate) fn accepting(&self, transaction: &[u8]) -> bool {
        self.paused_until.is_none_or(|t| Instant::now() >= t)
            && (self.by_transaction.len() < MAX_TRANSACTIONS
                || self.by_transaction.contains_key(transaction))
    }

    /// What the transaction already did to `key` of `table`.
    pub(crate) fn earlier(
        &self,
        transaction: &[u8],
        table: &str,
        key: &ListValue,
        seqno: i64,
    ) -> Earlier {
        let Some(held) = self.by_transaction.get(transaction) else {
            return Earlier::None;
        };
        match held
            .iter()
            .find(|h| h.table.eq_ignore_ascii_case(table) && h.key == *key)
        {
            None => Earlier::None,
            Some(h) if h.insert.is_some() => Earlier::Inserted,
            Some(h) if h.seqno == seqno => Earlier::Replay,
            Some(_) => Earlier::Deleted,
        }
    }

    /// Whether the transaction holds anything back for `table`.
    pub(crate) fn holds_table(&self, transaction: &[u8], table: &str) -> bool {
        self.by_transaction
            .get(transaction)
            .is_some_and(|held| held.iter().any(|h| h.table.eq_ignore_ascii_case(table)))
    }

    /// Holds back the insert of `rows` (key and `Insert` mutation) into `table` until
    /// `transaction` commits.
    pub(crate) fn hold_insert(
        &mut self,
        transaction: &[u8],
        table: &str,
        rows: Vec<(ListValue, Mutation)>,
        seqno: i64,
        statement: Statement,
    ) {
        let held = self.by_transaction.entry(transaction.to_vec()).or_default();
        let mut statement = Some(statement);
        for (key, mutation) in rows {
            held.push(Held {
                table: table.to_owned(),
                key,
                seqno,
                statement: statement.take(),
                insert: Some(mutation),
            });
        }
    }

    /// Holds back the delete of `key` of `table` until `transaction` commits.
    pub(crate) fn hold(
        &mut self,
        transaction: &[u8],
        table: &str,
        key: ListValue,
        seqno: i64,
        statement: Statement,
    ) {
        self.by_transaction
            .entry(transaction.to_vec())
            .or_default()
            .push(Held {
                table: table.to_owned(),
                key,
                seqno,
                statement: Some(statement),
                insert: None,
            });
    }

    /// The held-back statements of `transaction`, in order (to run them as DML ahead of a
    /// statement that needs their effect).
    pub(crate) fn statements(&self, transaction: &[u8]) -> Vec<Statement> {
        self.by_transaction
            .get(transaction)
            .map(|held| held.iter().filter_map(|h| h.statement.clone()).collect())
            .unwrap_or_default()
    }

    /// The queues with held-back deletes in `transaction`.
    pub(crate) fn tables(&self, transaction: &[u8]) -> Vec<String> {
        let mut tables: Vec<String> = self
            .by_transaction
            .get(transaction)
            .map(|held| held.iter().map(|h| h.table.clone()).collect())
            .unwrap_or_default();
        tables.dedup();
        tables
    }

    /// The transaction commits: what it held back, as mutations (`Delete`, `Insert`), in order.
    pub(crate) fn take(&mut self, transaction: &[u8]) -> Vec<Mutation> {
        self.by_transaction
            .remove(transaction)
            .unwrap_or_default()
            .into_iter()
            .map(|h| {
                h.insert.unwrap_or_else(|| Mutation {
                    operation: Some(Operation::Delete(Delete {
                        table: h.table,
                        key_set: Some(KeySet {
                            keys: vec![h.key],
                            ..KeySet::default()
                        }),
                    })),
                })
            })
            .collect()
    }

    /// The transaction rolled back.
    pub(crate) fn forget(&mut self, transaction: &[u8]) {
        self.by_transaction.remove(transaction);
    }

    /// The transaction was aborted because a later call needed the held-back rows gone:
    /// forgets it and runs keyed deletes as plain DML for a while.
    pub(crate) fn abort(&mut self, transaction: &[u8]) {
        self.by_transaction.remove(transaction);
        self.paused_until = Some(Instant::now() + PAUSE_AFTER_ABORT);
    }
}

/// Whether a parameter of type `ty` looks up a key column of `column_type` by key exactly as
/// the SQL comparison would (same type; no coercion).
pub(crate) fn same_type(ty: &Type, column_type: &str) -> bool {
    let column = column_type.to_ascii_uppercase();
    match TypeCode::try_from(ty.code) {
        Ok(TypeCode::Int64) => column == "INT64",
        Ok(TypeCode::String) => column.starts_with("STRING"),
        Ok(TypeCode::Bytes) => column.starts_with("BYTES"),
        Ok(TypeCode::Bool) => column == "BOOL",
        Ok(TypeCode::Timestamp) => column == "TIMESTAMP",
        Ok(TypeCode::Date) => column == "DATE",
        Ok(TypeCode::Numeric) => column == "NUMERIC",
        Ok(TypeCode::Json) => column == "JSON",
        _ => false,
    }
}

/// Whether an untyped parameter (its type inferred from the key column it is compared with)
/// holding `value` names the same key in a keyed read: a string holding an integer, text,
/// base64 bytes, a timestamp, a date or a numeric, or a bool. NULL (`k = NULL` matches no
/// row) and numbers (floating point) are left to the backend.
pub(crate) fn untyped_key(value: &Value, column_type: &str) -> bool {
    let column = column_type.to_ascii_uppercase();
    match &value.kind {
        Some(Kind::StringValue(_)) => {
            ["INT64", "TIMESTAMP", "DATE", "NUMERIC"].contains(&column.as_str())
                || column.starts_with("STRING")
                || column.starts_with("BYTES")
        }
        Some(Kind::BoolValue(_)) => column == "BOOL",
        _ => false,
    }
}

/// Whether a parameter value can name a key (not NULL: `k = NULL` matches no row).
pub(crate) fn usable_value(value: &Value) -> bool {
    !matches!(value.kind, None | Some(Kind::NullValue(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::proto::string_value;

    fn key(n: &str) -> ListValue {
        ListValue {
            values: vec![string_value(n)],
        }
    }

    #[test]
    fn held_deletes_become_mutations_of_their_transaction_only() {
        let mut d = Deferred::default();
        assert!(d.accepting(b"t1"));
        d.hold(b"t1", "Jobs", key("1"), 3, Statement::default());
        d.hold(b"t2", "Jobs", key("2"), 1, Statement::default());
        assert_eq!(d.statements(b"t1").len(), 1);
        assert_eq!(d.earlier(b"t1", "jobs", &key("1"), 3), Earlier::Replay);
        assert_eq!(d.earlier(b"t1", "Jobs", &key("1"), 4), Earlier::Deleted);
        assert_eq!(d.earlier(b"t1", "Jobs", &key("2"), 4), Earlier::None);
        assert_eq!(d.tables(b"t1"), vec!["Jobs".to_owned()]);
        let mutations = d.take(b"t1");
        assert_eq!(mutations.len(), 1);
        let Some(Operation::Delete(delete)) = &mutations[0].operation else {
            panic!("not a delete: {mutations:?}");
        };
        assert_eq!(delete.table, "Jobs");
        assert_eq!(
            delete.key_set.as_ref().map(|k| k.keys.clone()),
            Some(vec![key("1")])
        );
        assert!(d.take(b"t1").is_empty());
        d.abort(b"t2");
        assert!(d.tables(b"t2").is_empty());
        assert!(!d.accepting(b"t3"), "paused after an abort");
    }

    #[test]
    fn only_parameters_of_the_column_type_are_keys() {
        let int = Type {
            code: TypeCode::Int64 as i32,
            ..Type::default()
        };
        assert!(same_type(&int, "INT64"));
        assert!(!same_type(&int, "FLOAT64"));
        assert!(!same_type(&int, "STRING(MAX)"));
        let string = Type {
            code: TypeCode::String as i32,
            ..Type::default()
        };
        assert!(same_type(&string, "STRING(36)"));
        assert!(!usable_value(&Value {
            kind: Some(Kind::NullValue(0))
        }));
        assert!(usable_value(&string_value("x")));
        assert!(untyped_key(&string_value("7"), "INT64"));
        assert!(untyped_key(&string_value("x"), "STRING(MAX)"));
        assert!(!untyped_key(&string_value("1.5"), "FLOAT64"));
        assert!(!untyped_key(
            &Value {
                kind: Some(Kind::NullValue(0))
            },
            "INT64"
        ));
    }
}
