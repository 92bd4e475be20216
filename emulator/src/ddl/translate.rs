//! Translation.

use spanner_queues_sql::{Cursor, Dialect, Token, contains_ignore_case, quote_ident, tokenize};

use super::META_COLUMN;
use super::bodies::{parse_interleave, parse_row_deletion_policy, parse_table};
use super::catalog::{Catalog, check_interleave_parent, due_index_of};
use super::classify::{
    leading_words, not_a_queue_statement, queue_statement_tokens, reject_meta_column,
};
use super::error::DdlError;
use super::model::{Interleave, OnDelete, QueueOptions, fold};
use super::postgres::translate_postgres;
use super::queues::{QueueParts, apply_options, build_queue};
use super::tokens::{OptionItem, parse_options, path_written};

/// One client DDL statement and the backend statements it became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Translated {
    /// The statement as the client sent it.
    pub(crate) client_statement: String,
    /// What to send to the backend instead, in order (at least one statement).
    pub(crate) backend_statements: Vec<String>,
}

/// Translates a batch of client DDL statements (an `UpdateDatabaseDdl` batch, or the
/// `extra_statements` of `CreateDatabase` against an empty catalog) into backend statements.
///
/// Statements are processed in order against a working copy of `catalog`, so a batch can
/// create a queue and then alter it. Non-queue statements pass through unchanged, except those
/// that would break a queue (see the module docs). See the module docs for the mapping.
///
/// # Errors
/// The first statement that cannot be translated decides the error; nothing has been sent.
pub(crate) fn translate_batch(
    catalog: &Catalog,
    statements: &[String],
    dialect: Dialect,
) -> Result<Vec<Translated>, DdlError> {
    translate_batch_with_catalog(catalog, statements, dialect).map(|(translated, _)| translated)
}

/// Like [`translate_batch`], and also returns the catalog as it will be once the whole batch
/// has been applied by the backend.
pub(crate) fn translate_batch_with_catalog(
    catalog: &Catalog,
    statements: &[String],
    dialect: Dialect,
) -> Result<(Vec<Translated>, Catalog), DdlError> {
    let mut working = catalog.clone();
    let mut out = Vec::with_capacity(statements.len());
    for statement in statements {
        let backend_statements = match dialect {
            Dialect::GoogleSql => translate_google(&mut working, statement)?,
            Dialect::PostgreSql => translate_postgres(&mut working, statement)?,
        };
        out.push(Translated {
            client_statement: statement.clone(),
            backend_statements,
        });
    }
    Ok((out, working))
}

/// Translates one statement of a GoogleSQL database, updating `catalog`.
pub(super) fn translate_google(
    catalog: &mut Catalog,
    statement: &str,
) -> Result<Vec<String>, DdlError> {
    let words = leading_words(statement, Dialect::GoogleSql, 4);
    let word = |i: usize| words.get(i).map(String::as_str);
    if let Some((_, toks)) = queue_statement_tokens(statement, &words, Dialect::GoogleSql)? {
        return match (word(0), word(1)) {
            (Some("CREATE"), Some("QUEUE")) => create_queue(catalog, &toks),
            (Some("ALTER"), Some("QUEUE")) => alter_queue(catalog, &toks),
            (Some("DROP"), Some("QUEUE")) => drop_queue(catalog, &toks),
            _ => Err(not_a_queue_statement(&words)),
        };
    }
    let pass = Ok(vec![statement.to_owned()]);
    // Table statements are checked against the queues; if they cannot be tokenized, the backend
    // reports the syntax error.
    let Ok(toks) = tokenize(statement, Dialect::GoogleSql) else {
        return pass;
    };
    match (word(0), word(1)) {
        (Some("CREATE"), Some("TABLE")) => {
            reject_meta_column(&toks, "table")?;
            let mut p = Cursor::new(&toks, "CREATE TABLE");
            p.set_pos(2);
            if let Ok(table) = parse_table(&mut p, false) {
                let name = table.full_name();
                if !catalog.is_queue(&name)
                    && !catalog.tables.contains_key(&fold(&name))
                    && let Some(info) = table.info()
                {
                    catalog.tables.insert(fold(&name), info);
                }
            }
        }
        (Some("DROP"), Some("TABLE")) => {
            let mut p = Cursor::new(&toks, "DROP TABLE");
            p.set_pos(2);
            p.eat_words(&["IF", "EXISTS"]);
            if let Ok(path) = p.path(Dialect::GoogleSql, "a table name") {
                let name = path.join(".");
                if catalog.is_queue(&name) {
                    return Err(DdlError::UseQueueStatement {
                        name,
                        statement: "DROP QUEUE",
                    });
                }
                if let Some(child) = catalog.child_queue_of(&name) {
                    return Err(DdlError::InterleavedQueue {
                        action: "drop",
                        table: name,
                        queue: child.name.clone(),
                    });
                }
                catalog.tables.remove(&fold(&name));
            }
        }
        (Some("ALTER"), Some("TABLE")) => {
            let mut p = Cursor::new(&toks, "ALTER TABLE");
            p.set_pos(2);
            if let Ok(path) = p.path(Dialect::GoogleSql, "a table name") {
                let name = path.join(".");
                if catalog.is_queue(&name) {
                    return Err(DdlError::UseQueueStatement {
                        name,
                        statement: "ALTER QUEUE",
                    });
                }
                reject_meta_column(&toks, &format!("table {name}"))?;
                if p.eat_words(&["RENAME", "TO"])
                    && let Ok(new_path) = p.path(Dialect::GoogleSql, "a table name")
                {
                    rename_table(catalog, &name, &new_path.join("."))?;
                }
            }
        }
        (Some("RENAME"), Some("TABLE")) => {
            let mut p = Cursor::new(&toks, "RENAME TABLE");
            p.set_pos(2);
            while let (Ok(from), true, Ok(to)) = (
                p.path(Dialect::GoogleSql, "a table name"),
                p.eat_word("TO"),
                p.path(Dialect::GoogleSql, "a table name"),
            ) {
                let from = from.join(".");
                if catalog.is_queue(&from) {
                    return Err(DdlError::UseQueueStatement {
                        name: from,
                        statement: "DROP QUEUE and CREATE QUEUE (queues cannot be renamed)",
                    });
                }
                rename_table(catalog, &from, &to.join("."))?;
                if !p.eat_punct(",") {
                    break;
                }
            }
        }
        (Some("CREATE" | "ALTER"), Some("CHANGE")) => check_change_stream(catalog, &toks)?,
        _ => {}
    }
    pass
}

/// Renames a tracked table, refusing when a queue is interleaved in it without PARENT.
pub(super) fn rename_table(catalog: &mut Catalog, from: &str, to: &str) -> Result<(), DdlError> {
    if let Some(child) = catalog.child_queue_of(from) {
        return Err(DdlError::InterleavedQueue {
            action: "rename",
            table: from.to_owned(),
            queue: child.name.clone(),
        });
    }
    if let Some(mut info) = catalog.tables.remove(&fold(from)) {
        info.name = to.to_owned();
        catalog.tables.insert(fold(to), info);
    }
    Ok(())
}

/// Refuses `CREATE CHANGE STREAM s FOR ...` / `ALTER CHANGE STREAM s SET FOR ...` naming a queue.
pub(super) fn check_change_stream(catalog: &Catalog, toks: &[Token<'_>]) -> Result<(), DdlError> {
    let mut p = Cursor::new(toks, "CHANGE STREAM");
    p.set_pos(1);
    if !p.eat_words(&["CHANGE", "STREAM"]) {
        return Ok(());
    }
    let Ok(stream) = p.path(Dialect::GoogleSql, "a change stream name") else {
        return Ok(());
    };
    p.eat_word("SET");
    if !p.eat_word("FOR") || p.at_word("ALL") {
        return Ok(());
    }
    loop {
        let Ok(table) = p.path(Dialect::GoogleSql, "a table name") else {
            return Ok(());
        };
        let table = table.join(".");
        if let Some(queue) = catalog.queue(&table) {
            return Err(DdlError::ChangeStreamOnQueue {
                stream: stream.join("."),
                queue: queue.name.clone(),
            });
        }
        if p.at_punct("(") && p.group().is_err() {
            return Ok(());
        }
        if !p.eat_punct(",") {
            return Ok(());
        }
    }
}

/// `CREATE QUEUE`.
pub(super) fn create_queue(
    catalog: &mut Catalog,
    toks: &[Token<'_>],
) -> Result<Vec<String>, DdlError> {
    let mut p = Cursor::new(toks, "CREATE QUEUE");
    p.set_pos(2);
    let ast = parse_table(&mut p, true)?;
    let name = ast.full_name();
    if ast.name.len() > 1 {
        return Err(DdlError::NamedSchema { queue: name });
    }
    if let Some(word) = &ast.constraint {
        return Err(DdlError::InvalidQueue {
            queue: name,
            reason: format!(
                "{word} clauses are not allowed: a queue holds only its primary key columns \
                 and the Payload column"
            ),
        });
    }
    let options = apply_options(&name, &QueueOptions::default(), &ast.options)?;
    let def = build_queue(QueueParts {
        name: name.clone(),
        written_name: ast.written_name.clone(),
        columns: ast.columns,
        primary_key: ast.primary_key,
        interleave: ast.interleave,
        row_deletion_policy: ast.row_deletion_policy,
        options,
        dialect: Dialect::GoogleSql,
    })?;
    if catalog.tables.contains_key(&fold(&name)) {
        return Err(DdlError::NameInUse { name });
    }
    if catalog.is_queue(&name) {
        if ast.if_not_exists {
            // The backend leaves the existing table alone (and adds its due index if a queue
            // created by an older front lacks it).
            return Ok([
                Some(def.backend_create_table(true)),
                def.backend_create_due_index(true),
            ]
            .into_iter()
            .flatten()
            .collect());
        }
        return Err(DdlError::QueueExists { queue: name });
    }
    check_interleave_parent(catalog, &def)?;
    let mut backend = vec![def.backend_create_table(ast.if_not_exists)];
    backend.extend(def.backend_create_due_index(ast.if_not_exists));
    let mut def = def;
    def.has_due_index = def.due_index().is_some();
    catalog.queues.insert(fold(&name), def);
    Ok(backend)
}

/// The action of an `ALTER QUEUE` statement.
pub(super) enum AlterAction {
    /// `SET OPTIONS ( ... )`.
    SetOptions(Vec<OptionItem>),
    /// `SET ON DELETE ...`.
    SetOnDelete(OnDelete),
    /// `SET INTERLEAVE IN [PARENT] t [ON DELETE ...]`.
    SetInterleave(Interleave),
    /// `ADD ROW DELETION POLICY ( ... )`.
    AddPolicy(String),
    /// `REPLACE ROW DELETION POLICY ( ... )`.
    ReplacePolicy(String),
    /// `DROP ROW DELETION POLICY`.
    DropPolicy,
}

/// Parses the action of `ALTER QUEUE name action`.
pub(super) fn parse_alter_action(p: &mut Cursor<'_, '_>) -> Result<AlterAction, DdlError> {
    let action = if p.eat_words(&["SET", "OPTIONS"]) {
        let inner = p.group()?;
        AlterAction::SetOptions(parse_options(inner, p.statement())?)
    } else if p.eat_words(&["SET", "ON", "DELETE"]) {
        if p.eat_word("CASCADE") {
            AlterAction::SetOnDelete(OnDelete::Cascade)
        } else if p.eat_words(&["NO", "ACTION"]) {
            AlterAction::SetOnDelete(OnDelete::NoAction)
        } else {
            return Err(p.error("CASCADE or NO ACTION").into());
        }
    } else if p.at_words(&["SET", "INTERLEAVE"]) {
        p.advance(1);
        AlterAction::SetInterleave(parse_interleave(p)?)
    } else if p.eat_words(&["ADD", "ROW", "DELETION", "POLICY"]) {
        AlterAction::AddPolicy(parse_row_deletion_policy(p)?)
    } else if p.eat_words(&["REPLACE", "ROW", "DELETION", "POLICY"]) {
        AlterAction::ReplacePolicy(parse_row_deletion_policy(p)?)
    } else if p.eat_words(&["DROP", "ROW", "DELETION", "POLICY"]) {
        AlterAction::DropPolicy
    } else {
        return Err(p
            .error(
                "SET OPTIONS, SET ON DELETE, SET INTERLEAVE IN, ADD ROW DELETION POLICY, \
             REPLACE ROW DELETION POLICY or DROP ROW DELETION POLICY",
            )
            .into());
    };
    p.expect_end()?;
    Ok(action)
}

/// `ALTER QUEUE`.
pub(super) fn alter_queue(
    catalog: &mut Catalog,
    toks: &[Token<'_>],
) -> Result<Vec<String>, DdlError> {
    let mut p = Cursor::new(toks, "ALTER QUEUE");
    p.set_pos(2);
    let (name, table) = path_written(&mut p, Dialect::GoogleSql, "a queue name")?;
    let name = name.join(".");
    let action = parse_alter_action(&mut p)?;
    let Some(queue) = catalog.queues.get_mut(&fold(&name)) else {
        if catalog.tables.contains_key(&fold(&name)) {
            return Err(DdlError::NotAQueue {
                name,
                statement: "ALTER TABLE",
            });
        }
        return Err(DdlError::QueueNotFound { queue: name });
    };
    let rejected = |reason: &str| DdlError::AlterRejected {
        queue: name.clone(),
        reason: reason.to_owned(),
    };
    let backend = match action {
        AlterAction::SetOptions(items) => {
            queue.options = apply_options(&queue.name, &queue.options, &items)?;
            queue.backend_set_meta(&table)
        }
        AlterAction::SetOnDelete(action) => {
            match queue.interleave.as_mut().filter(|i| i.in_parent) {
                Some(interleave) => interleave.on_delete = Some(action),
                None => {
                    return Err(rejected(
                        "ON DELETE applies only to a queue created with INTERLEAVE IN PARENT",
                    ));
                }
            }
            format!("ALTER TABLE {table} SET ON DELETE {}", action.sql())
        }
        AlterAction::SetInterleave(new) => {
            let Some(current) = queue.interleave.clone() else {
                return Err(rejected(
                    "the queue is not interleaved; SET INTERLEAVE IN can only change how an \
                     interleaved queue is interleaved in its parent",
                ));
            };
            if !current.parent.eq_ignore_ascii_case(&new.parent) {
                return Err(rejected(&format!(
                    "the queue is interleaved in {}; SET INTERLEAVE IN cannot change the parent",
                    current.parent
                )));
            }
            match (current.in_parent, new.in_parent) {
                (true, true) => {
                    let action = new.on_delete.unwrap_or(OnDelete::NoAction);
                    queue.interleave = Some(Interleave {
                        on_delete: Some(action),
                        ..current
                    });
                    format!("ALTER TABLE {table} SET ON DELETE {}", action.sql())
                }
                (false, false) => {
                    if new.on_delete.is_some() {
                        return Err(DdlError::InvalidQueue {
                            queue: name.clone(),
                            reason: "ON DELETE is only allowed with INTERLEAVE IN PARENT"
                                .to_owned(),
                        });
                    }
                    queue.backend_set_meta(&table)
                }
                _ => {
                    return Err(DdlError::Unsupported {
                        what: "Changing a queue between INTERLEAVE IN and INTERLEAVE IN PARENT \
                               (drop and re-create the queue instead)"
                            .to_owned(),
                    });
                }
            }
        }
        AlterAction::AddPolicy(policy) => {
            if queue.row_deletion_policy.is_some() {
                return Err(rejected(
                    "it already has a row deletion policy; use REPLACE ROW DELETION POLICY",
                ));
            }
            let stmt = format!("ALTER TABLE {table} ADD ROW DELETION POLICY ({policy})");
            queue.row_deletion_policy = Some(policy);
            stmt
        }
        AlterAction::ReplacePolicy(policy) => {
            if queue.row_deletion_policy.is_none() {
                return Err(rejected(
                    "it has no row deletion policy; use ADD ROW DELETION POLICY",
                ));
            }
            let stmt = format!("ALTER TABLE {table} REPLACE ROW DELETION POLICY ({policy})");
            queue.row_deletion_policy = Some(policy);
            stmt
        }
        AlterAction::DropPolicy => {
            if queue.row_deletion_policy.take().is_none() {
                return Err(rejected("it has no row deletion policy"));
            }
            format!("ALTER TABLE {table} DROP ROW DELETION POLICY")
        }
    };
    Ok(vec![backend])
}

/// `DROP QUEUE`.
pub(super) fn drop_queue(
    catalog: &mut Catalog,
    toks: &[Token<'_>],
) -> Result<Vec<String>, DdlError> {
    let mut p = Cursor::new(toks, "DROP QUEUE");
    p.set_pos(2);
    let if_exists = p.eat_words(&["IF", "EXISTS"]);
    let (name, written) = path_written(&mut p, Dialect::GoogleSql, "a queue name")?;
    let name = name.join(".");
    p.expect_end()?;
    if catalog.tables.contains_key(&fold(&name)) {
        return Err(DdlError::NotAQueue {
            name,
            statement: "DROP TABLE",
        });
    }
    let Some(queue) = catalog.queue(&name) else {
        if if_exists {
            // Nothing by that name exists: the backend accepts this as a no-op.
            return Ok(vec![format!("DROP TABLE IF EXISTS {written}")]);
        }
        return Err(DdlError::QueueNotFound { queue: name });
    };
    if let Some(child) = catalog.child_queue_of(&queue.name) {
        return Err(DdlError::InterleavedQueue {
            action: "drop",
            table: queue.name.clone(),
            queue: child.name.clone(),
        });
    }
    let mut backend = Vec::new();
    if queue.has_due_index
        && let Some(index) = queue.due_index()
    {
        backend.push(format!(
            "DROP INDEX {}",
            quote_ident(Dialect::GoogleSql, &index)
        ));
    }
    backend.push(format!("DROP TABLE {written}"));
    catalog.queues.remove(&fold(&name));
    Ok(backend)
}

/// Renders the backend's `GetDatabaseDdl` statements for clients: queue tables become
/// `CREATE QUEUE` statements without their internal columns; everything else is unchanged.
///
/// # Errors
/// [`DdlError::CorruptBackend`] when a queue table cannot be read back.
#[cfg(test)]
pub(crate) fn render_client_ddl(backend_statements: &[String]) -> Result<Vec<String>, DdlError> {
    render_client_ddl_in(backend_statements, Dialect::GoogleSql)
}

/// Like [`render_client_ddl`], for a database of `dialect`.
///
/// # Errors
/// As [`render_client_ddl`].
pub(crate) fn render_client_ddl_in(
    backend_statements: &[String],
    dialect: Dialect,
) -> Result<Vec<String>, DdlError> {
    backend_statements
        .iter()
        .filter(|statement| due_index_of(statement).is_none())
        .map(|statement| {
            if !contains_ignore_case(statement, META_COLUMN) {
                return Ok(statement.clone());
            }
            let catalog = Catalog::from_backend_ddl_in(std::slice::from_ref(statement), dialect)?;
            Ok(match catalog.queues().next() {
                Some(queue) => queue.client_create_queue(),
                None => statement.clone(),
            })
        })
        .collect()
}
