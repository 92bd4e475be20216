//! The queues and tables of one database, read from the backend schema and kept current by
//! the translation of each statement.

use std::collections::BTreeMap;

use spanner_queues_sql::{Cursor, Dialect, contains_ignore_case, starts_with_words, tokenize};

use super::bodies::parse_table;
use super::error::DdlError;
use super::model::{Insertable, PayloadKind, QueueDef, TableInfo, fold};
use super::pg_bodies::parse_pg_table;
use super::queues::queue_from_backend;
use super::tokens::first_table_name;
use super::{DUE_INDEX_PREFIX, META_COLUMN};

/// The queues of one database (and the key shapes of its other tables).
///
/// Names are looked up case-insensitively, as Spanner does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Catalog {
    /// Queues by lower-case name.
    pub(super) queues: BTreeMap<String, QueueDef>,
    /// Other tables by lower-case name.
    pub(super) tables: BTreeMap<String, TableInfo>,
}

impl Catalog {
    /// Builds the catalog from the backend's `GetDatabaseDdl` statements: every
    /// `CREATE TABLE` with a [`META_COLUMN`] column is a queue.
    ///
    /// # Errors
    /// [`DdlError::CorruptBackend`] when a queue table cannot be read back. Statements that are
    /// not `CREATE TABLE`, and tables that cannot be parsed but are not queues, are skipped.
    pub(crate) fn from_backend_ddl(statements: &[String]) -> Result<Catalog, DdlError> {
        Self::from_backend_ddl_in(statements, Dialect::GoogleSql)
    }

    /// Like [`Catalog::from_backend_ddl`], for a database of `dialect`.
    ///
    /// # Errors
    /// As [`Catalog::from_backend_ddl`].
    pub(crate) fn from_backend_ddl_in(
        statements: &[String],
        dialect: Dialect,
    ) -> Result<Catalog, DdlError> {
        let mut catalog = Catalog::default();
        let mut due_indexes = Vec::new();
        for statement in statements {
            if let Some(index) = due_index_of(statement) {
                due_indexes.push(index);
                continue;
            }
            let mentions_meta = contains_ignore_case(statement, META_COLUMN);
            let parsed = tokenize(statement, dialect)
                .map_err(|err| err.to_string())
                .and_then(|toks| {
                    if !starts_with_words(&toks, &["CREATE", "TABLE"]) {
                        return Ok(None);
                    }
                    let mut p = Cursor::new(&toks, "CREATE TABLE");
                    p.set_pos(2);
                    match dialect {
                        Dialect::GoogleSql => parse_table(&mut p, false),
                        Dialect::PostgreSql => parse_pg_table(&mut p, false),
                    }
                    .map(Some)
                    .map_err(|err| err.to_string())
                });
            match parsed {
                Ok(Some(table)) => {
                    if table.column(META_COLUMN).is_some() {
                        let queue = queue_from_backend(&table, dialect)?;
                        catalog.queues.insert(fold(&queue.name), queue);
                    } else if let Some(info) = table.info() {
                        catalog.tables.insert(fold(&info.name), info);
                    }
                }
                Ok(None) => {}
                Err(reason) if mentions_meta => {
                    return Err(DdlError::CorruptBackend {
                        queue: first_table_name(statement).unwrap_or_default(),
                        reason,
                    });
                }
                Err(_) => {}
            }
        }
        for queue in catalog.queues.values_mut() {
            queue.has_due_index = queue
                .due_index()
                .is_some_and(|name| due_indexes.iter().any(|i| i.eq_ignore_ascii_case(&name)));
        }
        Ok(catalog)
    }

    /// The queue called `name` (case-insensitive).
    pub(crate) fn queue(&self, name: &str) -> Option<&QueueDef> {
        self.queues.get(&fold(name))
    }

    /// The `JSON` columns of table or queue `table` (case-insensitive), as declared.
    pub(crate) fn json_columns(&self, table: &str) -> Vec<&str> {
        if let Some(queue) = self.queue(table) {
            return match queue.payload.kind {
                PayloadKind::Json => vec![queue.payload.column.name.as_str()],
                _ => Vec::new(),
            };
        }
        self.tables
            .get(&fold(table))
            .map(|t| t.json_columns.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// Whether `table` names a queue (case-insensitive).
    pub(crate) fn is_queue(&self, table: &str) -> bool {
        self.queues.contains_key(&fold(table))
    }

    /// All queues, ordered by lower-case name.
    pub(crate) fn queues(&self) -> impl Iterator<Item = &QueueDef> {
        self.queues.values()
    }

    /// The queue interleaved (without PARENT) in `table`, if any.
    pub(super) fn child_queue_of(&self, table: &str) -> Option<&QueueDef> {
        self.queues.values().find(|q| {
            q.interleave
                .as_ref()
                .is_some_and(|i| !i.in_parent && i.parent.eq_ignore_ascii_case(table))
        })
    }

    /// The primary key (names and types) of a known table or queue.
    /// The table `name` (not a queue), when a keyed DML `INSERT` into it may be run as an
    /// `Insert` mutation at commit: it has no constraints, no parent and no generated columns.
    /// A unique index is not looked at: its violation would then be reported at commit.
    pub(crate) fn insertable(&self, name: &str) -> Option<Insertable<'_>> {
        let table = self.tables.get(&fold(name))?;
        Some(Insertable {
            name: &table.name,
            key: &table.key,
            columns: table.insertable.as_deref()?,
        })
    }

    pub(super) fn key_of(&self, name: &str) -> Option<Vec<(String, String)>> {
        if let Some(queue) = self.queue(name) {
            return Some(
                queue
                    .key_columns
                    .iter()
                    .map(|k| (k.column.name.clone(), k.column.data_type.clone()))
                    .collect(),
            );
        }
        self.tables.get(&fold(name)).map(|t| t.key.clone())
    }
}

/// The name of a queue's due index that a backend `CREATE INDEX` statement creates, if it is
/// one (see [`QueueDef::due_index`](super::QueueDef::due_index)).
pub(crate) fn due_index_of(statement: &str) -> Option<String> {
    if !contains_ignore_case(statement, DUE_INDEX_PREFIX) {
        return None;
    }
    let toks = tokenize(statement, Dialect::GoogleSql).ok()?;
    let mut i = 0;
    if !(toks.first()?.is_word("CREATE")) {
        return None;
    }
    i += 1;
    if toks.get(i)?.is_word("UNIQUE") || toks.get(i)?.is_word("NULL_FILTERED") {
        return None;
    }
    if !toks.get(i)?.is_word("INDEX") {
        return None;
    }
    i += 1;
    if toks.get(i)?.is_word("IF") {
        i += 3;
    }
    let name = toks.get(i).filter(|t| t.is_ident())?;
    name.value
        .starts_with(DUE_INDEX_PREFIX)
        .then(|| name.value.to_string())
}

/// Checks a non-PARENT interleave against the catalog: the parent exists and its primary key
/// is a prefix of the queue's.
pub(super) fn check_interleave_parent(catalog: &Catalog, queue: &QueueDef) -> Result<(), DdlError> {
    let Some(interleave) = queue.interleave.as_ref().filter(|i| !i.in_parent) else {
        return Ok(());
    };
    let parent_key = catalog
        .key_of(&interleave.parent)
        .ok_or_else(|| DdlError::TableNotFound {
            table: interleave.parent.clone(),
        })?;
    let matches = parent_key.len() <= queue.key_columns.len()
        && parent_key
            .iter()
            .zip(&queue.key_columns)
            .all(|((name, ty), k)| {
                name.eq_ignore_ascii_case(&k.column.name)
                    && ty.eq_ignore_ascii_case(&k.column.data_type)
            });
    if matches {
        Ok(())
    } else {
        let names: Vec<&str> = parent_key.iter().map(|(n, _)| n.as_str()).collect();
        Err(DdlError::InvalidQueue {
            queue: queue.name.clone(),
            reason: format!(
                "to be interleaved in {}, the queue's primary key must start with the key \
                 columns of {} ({}), with the same types",
                interleave.parent,
                interleave.parent,
                names.join(", ")
            ),
        })
    }
}
