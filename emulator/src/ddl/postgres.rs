//! Queue DDL in PostgreSQL-dialect databases.
//!
//! # Client syntax
//!
//! ```text
//! CREATE QUEUE [IF NOT EXISTS] name (
//!   key_column type NOT NULL [GENERATED ALWAYS AS (expr) STORED] [, ...],
//!   payload { bytea | text | varchar[(n)] | jsonb } NOT NULL,
//!   PRIMARY KEY (key_column [, ...])
//! ) [INTERLEAVE IN PARENT table [ON DELETE { CASCADE | NO ACTION }]]
//!   [TTL INTERVAL 'n days' ON column]
//! ALTER QUEUE name { SET ON DELETE { CASCADE | NO ACTION }
//!                  | ADD TTL INTERVAL '...' ON column | ALTER TTL INTERVAL '...' ON column
//!                  | DROP TTL }
//! DROP QUEUE [IF EXISTS] name
//! ```
//!
//! # Backend representation
//!
//! As in GoogleSQL databases, a queue is a table of the official emulator:
//!
//! ```text
//! CREATE TABLE q (
//!   <each declared column>,
//!   deliver_time timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
//!   "DeliverTime" timestamptz GENERATED ALWAYS AS (deliver_time) STORED,
//!   "SpannerQueuesEmulatorMessageId" varchar(36) NOT NULL DEFAULT spanner.generate_uuid(),
//!   "SpannerQueuesEmulatorQueue" varchar DEFAULT 'sqe1:<base64url(JSON)>',
//!   PRIMARY KEY (<key>)
//! ) [INTERLEAVE IN PARENT p ON DELETE ...] [TTL ...]
//! ```
//!
//! # Choices where the platform is not documented
//!
//! - The PostgreSQL grammar of queue DDL is not published; the statements above follow the
//!   documented `CREATE QUEUE` examples and the PostgreSQL forms of the matching table
//!   statements (`TTL` for row deletion policies, `SET ON DELETE`).
//! - Queue options (`receive_mode`, `disable_send`, ...) have no documented PostgreSQL
//!   syntax: any options clause is refused as unsupported.
//! - `INTERLEAVE IN` without `PARENT` and `ALTER QUEUE ... SET INTERLEAVE IN` are refused as
//!   unsupported (the official emulator's PostgreSQL dialect lacks the table forms too).
//! - Cloud Spanner exposes both `deliver_time` and `DeliverTime` [C]; here `"DeliverTime"` is
//!   a stored generated column: it can be read, not written. PostgreSQL has no `HIDDEN`
//!   columns, so `SELECT * FROM q` also returns the emulator's two internal columns.
//! - The payload types are `bytea`, `text`, `varchar` / `character varying` (with or without
//!   a length) and `jsonb` [C]; the official emulator prints `text` back as
//!   `character varying`, and so does `GetDatabaseDdl`.

use std::borrow::Cow;

use super::bodies::{KeyPart, TableAst};
use super::error::DdlError;
use super::model::{
    Catalog, ColumnDef, Interleave, OnDelete, PayloadKind, QueueDef, QueueOptions, fold,
};
use super::queues::{QueueParts, build_queue};
use super::tokens::{OptionItem, OptionValue, Parser, parse_options, render_tokens, split_commas};
use super::translate::{
    leading_words, not_a_queue_statement, queue_statement_tokens, reject_meta_column,
};
use super::{DELIVER_TIME_COLUMN, MESSAGE_ID_COLUMN, META_COLUMN};
use crate::lexer::{Dialect, Token, TokenKind, tokenize};

/// The delivery time system column in PostgreSQL-dialect databases.
pub(crate) const PG_DELIVER_TIME_COLUMN: &str = "deliver_time";

/// Output columns of `spanner.receive_<q>` / `spanner.renewlease_<q>`, reserved in queues [I].
pub(super) const PG_TVF_OUTPUT_COLUMNS: [&str; 5] = [
    "spanner_lease_expiration_timestamp",
    "spanner_lease_token",
    "spanner_last_batch_message",
    "spanner_old_lease_token",
    "spanner_new_lease_token",
];

/// `name` as a PostgreSQL identifier: bare when it is a lower-case word that is not reserved,
/// else double-quoted.
pub(crate) fn pg_ident(name: &str) -> Cow<'_, str> {
    let plain = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !crate::lexer::is_reserved(name);
    if plain {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(format!("\"{}\"", name.replace('"', "\"\"")))
    }
}

/// `value` as a PostgreSQL string literal.
pub(crate) fn pg_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// The payload kind of a PostgreSQL payload type, or `None` if a queue cannot hold it.
pub(super) fn pg_payload_kind(data_type: &str) -> Option<PayloadKind> {
    let lower = data_type.to_ascii_lowercase();
    let base = match lower.split_once('(') {
        Some((base, rest)) => {
            let len = rest.strip_suffix(')')?.trim();
            if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            base.trim()
        }
        None => lower.trim(),
    };
    match base {
        "bytea" if !lower.contains('(') => Some(PayloadKind::Bytes),
        "text" if !lower.contains('(') => Some(PayloadKind::String),
        "varchar" | "character varying" => Some(PayloadKind::String),
        "jsonb" if !lower.contains('(') => Some(PayloadKind::Json),
        _ => None,
    }
}

/// Consumes an identifier, folding an unquoted one to lower case as PostgreSQL does.
fn pg_name(p: &mut Parser<'_, '_>, what: &str) -> Result<String, DdlError> {
    match p.peek() {
        Some(t) if t.kind == TokenKind::Word => {
            p.pos += 1;
            Ok(t.text.to_ascii_lowercase())
        }
        Some(t) if t.is_ident() => {
            p.pos += 1;
            Ok(t.value.clone().into_owned())
        }
        _ => Err(p.error(what)),
    }
}

/// Consumes a dotted name, each part folded as [`pg_name`].
fn pg_path(p: &mut Parser<'_, '_>, what: &str) -> Result<Vec<String>, DdlError> {
    let mut parts = vec![pg_name(p, what)?];
    while p.eat_punct(".") {
        parts.push(pg_name(p, what)?);
    }
    Ok(parts)
}

/// Renders a PostgreSQL type from its tokens: lower-case words separated by one space,
/// punctuation glued (`character varying(36)`, `bigint[]`).
fn pg_render_type(toks: &[Token<'_>]) -> String {
    let mut out = String::new();
    for (i, t) in toks.iter().enumerate() {
        let wordish = |t: &Token<'_>| matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent);
        if i > 0 && wordish(t) && wordish(&toks[i - 1]) {
            out.push(' ');
        }
        if t.kind == TokenKind::Word {
            out.push_str(&t.text.to_ascii_lowercase());
        } else {
            out.push_str(t.text);
        }
    }
    out
}

/// Words that end a column type or a `DEFAULT` expression in a PostgreSQL column definition.
const PG_ATTRIBUTES: [&str; 10] = [
    "NOT",
    "NULL",
    "DEFAULT",
    "GENERATED",
    "PRIMARY",
    "REFERENCES",
    "CONSTRAINT",
    "CHECK",
    "UNIQUE",
    "HIDDEN",
];

/// Consumes tokens up to a column attribute, `,` or `)` at depth 0; returns them.
fn until_attribute<'t, 's>(p: &mut Parser<'t, 's>) -> &'t [Token<'s>] {
    // `bigint[]` and array literals nest in square brackets.
    p.until_attribute(&PG_ATTRIBUTES, ("[", "]"))
}

/// Parses a PostgreSQL column definition: `name type [DEFAULT e] [NOT NULL | NULL]
/// [GENERATED ALWAYS AS (e) STORED] [PRIMARY KEY]`. Returns the column and whether it was
/// declared `PRIMARY KEY` inline.
fn parse_pg_column(p: &mut Parser<'_, '_>) -> Result<(ColumnDef, bool), DdlError> {
    let name = pg_name(p, "a column name")?;
    let type_toks = until_attribute(p);
    if type_toks.is_empty() {
        return Err(p.error(&format!("a type for column {name}")));
    }
    let mut column = ColumnDef {
        name,
        data_type: pg_render_type(type_toks),
        not_null: false,
        generated: None,
        stored: false,
        default: None,
        hidden: false,
        options: Vec::new(),
    };
    let mut primary_key = false;
    loop {
        if p.eat_words(&["NOT", "NULL"]) {
            column.not_null = true;
        } else if p.eat_word("NULL") {
        } else if p.eat_word("DEFAULT") {
            let expr = until_attribute(p);
            if expr.is_empty() {
                return Err(p.error("a DEFAULT expression"));
            }
            column.default = Some(render_tokens(expr));
        } else if p.eat_words(&["GENERATED", "ALWAYS", "AS"]) {
            column.generated = Some(render_tokens(p.group()?));
            column.stored = p.eat_word("STORED");
            if !column.stored {
                p.eat_word("VIRTUAL");
            }
        } else if p.eat_words(&["PRIMARY", "KEY"]) {
            primary_key = true;
        } else {
            return Ok((column, primary_key));
        }
    }
}

/// Parses the rest of a PostgreSQL `CREATE TABLE` / `CREATE QUEUE` after its leading words.
///
/// A row deletion policy (`TTL INTERVAL '...' ON column`) is kept as the text after `TTL`.
/// Table constraints are remembered as [`TableAst::constraint`]; a `WITH (...)` or `OPTIONS`
/// clause as options (queues refuse them).
pub(super) fn parse_pg_table(p: &mut Parser<'_, '_>, queue: bool) -> Result<TableAst, DdlError> {
    let if_not_exists = p.eat_words(&["IF", "NOT", "EXISTS"]);
    let name = pg_path(
        p,
        if queue {
            "a queue name"
        } else {
            "a table name"
        },
    )?;
    let mut ast = TableAst {
        if_not_exists,
        name,
        columns: Vec::new(),
        constraint: None,
        primary_key: Vec::new(),
        interleave: None,
        row_deletion_policy: None,
        options: Vec::new(),
    };
    let mut primary_key_seen = false;
    p.expect_punct("(")?;
    loop {
        if p.eat_punct(")") {
            break;
        }
        if p.eat_words(&["PRIMARY", "KEY"]) {
            if primary_key_seen {
                return Err(p.error("a single PRIMARY KEY"));
            }
            primary_key_seen = true;
            for part in split_commas(p.group()?) {
                let mut kp = Parser::new(part, p.statement);
                let name = pg_name(&mut kp, "a primary key column")?;
                let descending = if kp.eat_word("DESC") {
                    true
                } else {
                    kp.eat_word("ASC");
                    false
                };
                kp.expect_end()?;
                ast.primary_key.push(KeyPart { name, descending });
            }
        } else if let Some(word) = ["CONSTRAINT", "FOREIGN", "CHECK", "UNIQUE"]
            .into_iter()
            .find(|w| p.at_word(w))
        {
            ast.constraint.get_or_insert_with(|| word.to_owned());
            let mut depth = 0i32;
            while let Some(t) = p.peek() {
                if depth == 0 && (t.is_punct(",") || t.is_punct(")")) {
                    break;
                }
                if t.is_punct("(") {
                    depth += 1;
                } else if t.is_punct(")") {
                    depth -= 1;
                }
                p.pos += 1;
            }
        } else {
            let (column, inline_key) = parse_pg_column(p)?;
            if inline_key {
                if primary_key_seen {
                    return Err(p.error("a single PRIMARY KEY"));
                }
                primary_key_seen = true;
                ast.primary_key.push(KeyPart {
                    name: column.name.clone(),
                    descending: false,
                });
            }
            ast.columns.push(column);
        }
        if !p.eat_punct(",") {
            p.expect_punct(")")?;
            break;
        }
    }
    if !primary_key_seen {
        return Err(p.error("PRIMARY KEY (...) inside the parentheses"));
    }
    while !p.at_end() {
        if p.at_words(&["INTERLEAVE", "IN"]) {
            if ast.interleave.is_some() {
                return Err(p.error("a single INTERLEAVE clause"));
            }
            p.pos += 2;
            let in_parent = p.eat_word("PARENT");
            let parent = pg_path(p, "a parent table name")?.join(".");
            let on_delete = if p.eat_words(&["ON", "DELETE"]) {
                if p.eat_word("CASCADE") {
                    Some(OnDelete::Cascade)
                } else if p.eat_words(&["NO", "ACTION"]) {
                    Some(OnDelete::NoAction)
                } else {
                    return Err(p.error("CASCADE or NO ACTION"));
                }
            } else {
                None
            };
            ast.interleave = Some(Interleave {
                parent,
                in_parent,
                on_delete,
            });
        } else if p.eat_word("TTL") {
            if ast.row_deletion_policy.is_some() {
                return Err(p.error("a single TTL clause"));
            }
            ast.row_deletion_policy = Some(parse_pg_ttl(p)?);
        } else if p.at_word("WITH") || p.at_word("OPTIONS") {
            p.pos += 1;
            let inner = p.group()?;
            ast.options = parse_options(inner, p.statement)?;
            if ast.options.is_empty() {
                ast.options.push(OptionItem {
                    name: String::new(),
                    text: String::new(),
                    value: OptionValue::Other,
                });
            }
        } else {
            return Err(p.error("INTERLEAVE IN PARENT, TTL or the end of the statement"));
        }
    }
    p.expect_end()?;
    Ok(ast)
}

/// Parses `INTERVAL '<n> days' ON column` (after `TTL`) and renders it back.
fn parse_pg_ttl(p: &mut Parser<'_, '_>) -> Result<String, DdlError> {
    p.expect_word("INTERVAL")?;
    let interval = match p.peek() {
        Some(t) if t.kind == TokenKind::String => {
            p.pos += 1;
            t.value.clone().into_owned()
        }
        _ => return Err(p.error("an interval string such as '7 days'")),
    };
    p.expect_word("ON")?;
    let column = pg_name(p, "a timestamp column")?;
    Ok(format!(
        "INTERVAL {} ON {}",
        pg_string(&interval),
        pg_ident(&column)
    ))
}

impl ColumnDef {
    /// The definition as one line of PostgreSQL DDL, in the order the official emulator prints
    /// (`name type [DEFAULT e] [NOT NULL] [GENERATED ALWAYS AS (e) STORED]`).
    pub(super) fn pg_definition(&self) -> String {
        let mut out = format!("{} {}", pg_ident(&self.name), self.data_type);
        if let Some(default) = &self.default {
            out.push_str(&format!(" DEFAULT {default}"));
        }
        if self.not_null {
            out.push_str(" NOT NULL");
        }
        if let Some(expr) = &self.generated {
            out.push_str(&format!(" GENERATED ALWAYS AS ({expr})"));
            if self.stored {
                out.push_str(" STORED");
            }
        }
        out
    }
}

impl QueueDef {
    /// The clauses after the closing parenthesis (interleave, TTL), each on its own line
    /// prefixed by a space.
    fn pg_trailer(&self, default_on_delete: bool) -> String {
        let mut out = String::new();
        if let Some(interleave) = &self.interleave {
            out.push_str(" INTERLEAVE IN ");
            if interleave.in_parent {
                out.push_str("PARENT ");
            }
            out.push_str(&pg_ident(&interleave.parent));
            let action = interleave
                .on_delete
                .or((default_on_delete && interleave.in_parent).then_some(OnDelete::NoAction));
            if let Some(action) = action {
                out.push_str(" ON DELETE ");
                out.push_str(action.sql());
            }
        }
        if let Some(policy) = &self.row_deletion_policy {
            out.push_str(" TTL ");
            out.push_str(policy);
        }
        out
    }

    /// The backend `CREATE TABLE` of a PostgreSQL-dialect queue.
    pub(super) fn pg_backend_create_table(&self, if_not_exists: bool) -> String {
        let mut out = String::from("CREATE TABLE ");
        if if_not_exists {
            out.push_str("IF NOT EXISTS ");
        }
        out.push_str(&self.quoted_name());
        out.push_str(" (\n");
        for column in self.declared_columns() {
            out.push_str(&format!("  {},\n", column.pg_definition()));
        }
        out.push_str(&format!(
            "  {PG_DELIVER_TIME_COLUMN} timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,\n"
        ));
        out.push_str(&format!(
            "  {} timestamptz GENERATED ALWAYS AS ({PG_DELIVER_TIME_COLUMN}) STORED,\n",
            pg_ident(DELIVER_TIME_COLUMN)
        ));
        out.push_str(&format!(
            "  {} varchar(36) NOT NULL DEFAULT spanner.generate_uuid(),\n",
            pg_ident(MESSAGE_ID_COLUMN)
        ));
        out.push_str(&format!(
            "  {} varchar DEFAULT {},\n",
            pg_ident(META_COLUMN),
            self.meta_literal()
        ));
        out.push_str(&format!("  PRIMARY KEY ({})\n)", self.key_list()));
        out.push_str(&self.pg_trailer(false));
        out
    }

    /// The queue as a client-facing PostgreSQL `CREATE QUEUE`, in the layout of the official
    /// emulator's `GetDatabaseDdl` for tables.
    pub(super) fn pg_client_create_queue(&self) -> String {
        let mut out = format!("CREATE QUEUE {} (\n", self.quoted_name());
        for column in self.declared_columns() {
            out.push_str(&format!("  {},\n", column.pg_definition()));
        }
        out.push_str(&format!("  PRIMARY KEY({})\n)", self.key_list()));
        out.push_str(&self.pg_trailer(true));
        out
    }
}

/// The action of a PostgreSQL `ALTER QUEUE`.
enum PgAlter {
    /// `SET ON DELETE ...`.
    SetOnDelete(OnDelete),
    /// `ADD TTL ...`.
    AddTtl(String),
    /// `ALTER TTL ...`.
    AlterTtl(String),
    /// `DROP TTL`.
    DropTtl,
}

/// Translates one statement of a PostgreSQL-dialect database, updating `catalog`.
pub(super) fn translate_postgres(
    catalog: &mut Catalog,
    statement: &str,
) -> Result<Vec<String>, DdlError> {
    let words = leading_words(statement, Dialect::PostgreSql, 4);
    let word = |i: usize| words.get(i).map(String::as_str);
    if let Some((kind, toks)) = queue_statement_tokens(statement, &words, Dialect::PostgreSql)? {
        let mut p = Parser::new(&toks, kind);
        p.pos = 2;
        return match (word(0), word(1)) {
            (Some("CREATE"), Some("QUEUE")) => pg_create_queue(catalog, &mut p),
            (Some("ALTER"), Some("QUEUE")) => pg_alter_queue(catalog, &mut p),
            (Some("DROP"), Some("QUEUE")) => pg_drop_queue(catalog, &mut p),
            _ => Err(not_a_queue_statement(&words)),
        };
    }
    let pass = Ok(vec![statement.to_owned()]);
    let Ok(toks) = tokenize(statement, Dialect::PostgreSql) else {
        return pass;
    };
    let mut p = Parser::new(&toks, "TABLE");
    p.pos = 2;
    match (word(0), word(1)) {
        (Some("CREATE"), Some("TABLE")) => {
            reject_meta_column(&toks, "table")?;
            if let Ok(table) = parse_pg_table(&mut p, false) {
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
            p.eat_words(&["IF", "EXISTS"]);
            if let Ok(path) = pg_path(&mut p, "a table name") {
                let name = path.join(".");
                if catalog.is_queue(&name) {
                    return Err(DdlError::UseQueueStatement {
                        name,
                        statement: "DROP QUEUE",
                    });
                }
                catalog.tables.remove(&fold(&name));
            }
        }
        (Some("ALTER"), Some("TABLE")) => {
            if let Ok(path) = pg_path(&mut p, "a table name") {
                let name = path.join(".");
                if catalog.is_queue(&name) {
                    return Err(DdlError::UseQueueStatement {
                        name,
                        statement: "ALTER QUEUE",
                    });
                }
                reject_meta_column(&toks, &format!("table {name}"))?;
            }
        }
        _ => {}
    }
    pass
}

/// PostgreSQL `CREATE QUEUE`.
fn pg_create_queue(catalog: &mut Catalog, p: &mut Parser<'_, '_>) -> Result<Vec<String>, DdlError> {
    let ast = parse_pg_table(p, true)?;
    let name = ast.full_name();
    if ast.name.len() > 1 {
        return Err(DdlError::NamedSchema { queue: name });
    }
    if let Some(word) = &ast.constraint {
        return Err(DdlError::InvalidQueue {
            queue: name,
            reason: format!(
                "{word} clauses are not allowed: a queue holds only its primary key columns \
                 and the payload column"
            ),
        });
    }
    if !ast.options.is_empty() {
        return Err(DdlError::Unsupported {
            what: "Queue options in PostgreSQL-dialect databases (their syntax is not \
                   documented)"
                .to_owned(),
        });
    }
    if ast.interleave.as_ref().is_some_and(|i| !i.in_parent) {
        return Err(DdlError::Unsupported {
            what: "INTERLEAVE IN without PARENT in PostgreSQL-dialect databases".to_owned(),
        });
    }
    let def = build_queue(QueueParts {
        name: name.clone(),
        columns: ast.columns,
        primary_key: ast.primary_key,
        interleave: ast.interleave,
        row_deletion_policy: ast.row_deletion_policy,
        options: QueueOptions::default(),
        dialect: Dialect::PostgreSql,
    })?;
    if catalog.tables.contains_key(&fold(&name)) {
        return Err(DdlError::NameInUse { name });
    }
    if catalog.is_queue(&name) {
        if ast.if_not_exists {
            return Ok(vec![def.backend_create_table(true)]);
        }
        return Err(DdlError::QueueExists { queue: name });
    }
    let backend = def.backend_create_table(ast.if_not_exists);
    catalog.queues.insert(fold(&name), def);
    Ok(vec![backend])
}

/// PostgreSQL `ALTER QUEUE`.
fn pg_alter_queue(catalog: &mut Catalog, p: &mut Parser<'_, '_>) -> Result<Vec<String>, DdlError> {
    let name = pg_path(p, "a queue name")?.join(".");
    let action = if p.eat_words(&["SET", "ON", "DELETE"]) {
        if p.eat_word("CASCADE") {
            PgAlter::SetOnDelete(OnDelete::Cascade)
        } else if p.eat_words(&["NO", "ACTION"]) {
            PgAlter::SetOnDelete(OnDelete::NoAction)
        } else {
            return Err(p.error("CASCADE or NO ACTION"));
        }
    } else if p.eat_words(&["ADD", "TTL"]) {
        PgAlter::AddTtl(parse_pg_ttl(p)?)
    } else if p.eat_words(&["ALTER", "TTL"]) {
        PgAlter::AlterTtl(parse_pg_ttl(p)?)
    } else if p.eat_words(&["DROP", "TTL"]) {
        PgAlter::DropTtl
    } else if p.at_word("SET") {
        return Err(DdlError::Unsupported {
            what: "ALTER QUEUE ... SET other than SET ON DELETE in PostgreSQL-dialect databases"
                .to_owned(),
        });
    } else {
        return Err(p.error("SET ON DELETE, ADD TTL, ALTER TTL or DROP TTL"));
    };
    p.expect_end()?;
    let Some(queue) = catalog.queues.get_mut(&fold(&name)) else {
        if catalog.tables.contains_key(&fold(&name)) {
            return Err(DdlError::NotAQueue {
                name,
                statement: "ALTER TABLE",
            });
        }
        return Err(DdlError::QueueNotFound { queue: name });
    };
    let table = queue.quoted_name();
    let rejected = |reason: &str| DdlError::AlterRejected {
        queue: name.clone(),
        reason: reason.to_owned(),
    };
    let backend = match action {
        PgAlter::SetOnDelete(action) => {
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
        PgAlter::AddTtl(policy) => {
            if queue.row_deletion_policy.is_some() {
                return Err(rejected("it already has a TTL; use ALTER TTL"));
            }
            let stmt = format!("ALTER TABLE {table} ADD TTL {policy}");
            queue.row_deletion_policy = Some(policy);
            stmt
        }
        PgAlter::AlterTtl(policy) => {
            if queue.row_deletion_policy.is_none() {
                return Err(rejected("it has no TTL; use ADD TTL"));
            }
            let stmt = format!("ALTER TABLE {table} ALTER TTL {policy}");
            queue.row_deletion_policy = Some(policy);
            stmt
        }
        PgAlter::DropTtl => {
            if queue.row_deletion_policy.take().is_none() {
                return Err(rejected("it has no TTL"));
            }
            format!("ALTER TABLE {table} DROP TTL")
        }
    };
    Ok(vec![backend])
}

/// PostgreSQL `DROP QUEUE`.
fn pg_drop_queue(catalog: &mut Catalog, p: &mut Parser<'_, '_>) -> Result<Vec<String>, DdlError> {
    let if_exists = p.eat_words(&["IF", "EXISTS"]);
    let name = pg_path(p, "a queue name")?.join(".");
    p.expect_end()?;
    if catalog.tables.contains_key(&fold(&name)) {
        return Err(DdlError::NotAQueue {
            name,
            statement: "DROP TABLE",
        });
    }
    let Some(queue) = catalog.queue(&name) else {
        if if_exists {
            return Ok(vec![format!("DROP TABLE IF EXISTS {}", pg_ident(&name))]);
        }
        return Err(DdlError::QueueNotFound { queue: name });
    };
    let backend = format!("DROP TABLE {}", queue.quoted_name());
    catalog.queues.remove(&fold(&name));
    Ok(vec![backend])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddl::{render_client_ddl_in, translate_batch};

    const USERS: &str = "CREATE TABLE users (userid bigint NOT NULL, PRIMARY KEY (userid))";
    const USER_TASKS: &str = "CREATE QUEUE usertasks (
  userid     bigint NOT NULL,
  messageid  varchar(36) NOT NULL, -- UUID recommended
  payload    bytea NOT NULL, -- Also: text, varchar, jsonb are possible.
  PRIMARY KEY (userid, messageid)
) INTERLEAVE IN PARENT users ON DELETE CASCADE;";

    fn translate(catalog: &Catalog, statements: &[&str]) -> Result<Vec<String>, DdlError> {
        let statements: Vec<String> = statements.iter().map(|s| (*s).to_owned()).collect();
        translate_batch(catalog, &statements, Dialect::PostgreSql)
            .map(|t| t.into_iter().flat_map(|t| t.backend_statements).collect())
    }

    /// What the official emulator prints for the backend table of the documented example.
    const PRINTED: &str = "CREATE TABLE usertasks (
  userid bigint NOT NULL,
  messageid character varying(36) NOT NULL,
  payload bytea NOT NULL,
  deliver_time timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
  \"DeliverTime\" timestamp with time zone GENERATED ALWAYS AS (deliver_time) STORED,
  \"SpannerQueuesEmulatorMessageId\" character varying(36) DEFAULT spanner.generate_uuid() NOT NULL,
  \"SpannerQueuesEmulatorQueue\" character varying DEFAULT 'sqe1:e30'::text,
  PRIMARY KEY(userid, messageid)
) INTERLEAVE IN PARENT users ON DELETE CASCADE";

    #[test]
    fn the_documented_example_becomes_a_table_with_the_system_columns() {
        let out = translate(&Catalog::default(), &[USERS, USER_TASKS]).expect("translates");
        assert_eq!(out[0], USERS);
        let table = &out[1];
        assert!(table.starts_with("CREATE TABLE usertasks (\n  userid bigint NOT NULL,\n"));
        assert!(table.contains("  messageid varchar(36) NOT NULL,\n"));
        assert!(table.contains("  payload bytea NOT NULL,\n"));
        assert!(table.contains("deliver_time timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP"));
        assert!(table.contains("\"DeliverTime\" timestamptz GENERATED ALWAYS AS (deliver_time)"));
        assert!(table.contains("  PRIMARY KEY (userid, messageid)\n)"));
        assert!(table.ends_with(") INTERLEAVE IN PARENT users ON DELETE CASCADE"));
    }

    #[test]
    fn the_printed_backend_table_reads_back_as_the_queue() {
        let catalog = Catalog::from_backend_ddl_in(&[PRINTED.to_owned()], Dialect::PostgreSql)
            .expect("reads");
        let queue = catalog.queue("usertasks").expect("a queue");
        assert_eq!(queue.dialect, Dialect::PostgreSql);
        assert_eq!(queue.payload.kind, PayloadKind::Bytes);
        assert_eq!(queue.deliver_time_column(), "deliver_time");
        let keys: Vec<&str> = queue
            .key_columns
            .iter()
            .map(|k| k.column.name.as_str())
            .collect();
        assert_eq!(keys, ["userid", "messageid"]);
        let rendered =
            render_client_ddl_in(&[PRINTED.to_owned()], Dialect::PostgreSql).expect("renders");
        assert_eq!(
            rendered,
            ["CREATE QUEUE usertasks (
  userid bigint NOT NULL,
  messageid character varying(36) NOT NULL,
  payload bytea NOT NULL,
  PRIMARY KEY(userid, messageid)
) INTERLEAVE IN PARENT users ON DELETE CASCADE"]
        );
    }

    #[test]
    fn payload_types_follow_the_postgresql_list() {
        for (ty, kind) in [
            ("bytea", PayloadKind::Bytes),
            ("text", PayloadKind::String),
            ("varchar", PayloadKind::String),
            ("varchar(100)", PayloadKind::String),
            ("character varying(36)", PayloadKind::String),
            ("jsonb", PayloadKind::Json),
        ] {
            assert_eq!(pg_payload_kind(ty), Some(kind), "{ty}");
        }
        for ty in ["bigint", "json", "bytea(3)", "varchar(max)", "timestamptz"] {
            assert_eq!(pg_payload_kind(ty), None, "{ty}");
        }
        let err = translate(
            &Catalog::default(),
            &["CREATE QUEUE q (id bigint NOT NULL, payload bigint NOT NULL, PRIMARY KEY (id))"],
        )
        .expect_err("bigint payload");
        assert!(matches!(err, DdlError::PgPayloadType { .. }), "{err}");
        assert!(err.to_string().contains("bytea, text, varchar or jsonb"));
    }

    #[test]
    fn invalid_queues_are_refused_with_the_rule_they_break() {
        type Check = fn(&DdlError) -> bool;
        let cases: [(&str, Check); 7] = [
            (
                "CREATE QUEUE q (id bigint NOT NULL, payload bytea, PRIMARY KEY (id))",
                |e| matches!(e, DdlError::PayloadNullable { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, PRIMARY KEY (id))",
                |e| matches!(e, DdlError::MissingPayload { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, payload bytea NOT NULL, deliver_time \
                 timestamptz, PRIMARY KEY (id))",
                |e| matches!(e, DdlError::DeliverTimeDeclared { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, note text, payload bytea NOT NULL, \
                 PRIMARY KEY (id))",
                |e| matches!(e, DdlError::NonKeyColumn { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, payload bytea NOT NULL)",
                |e| matches!(e, DdlError::Syntax { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, payload bytea NOT NULL, PRIMARY KEY (id)) \
                 WITH (disable_send = true)",
                |e| matches!(e, DdlError::Unsupported { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, spanner_lease_token text NOT NULL, \
                 payload bytea NOT NULL, PRIMARY KEY (id, spanner_lease_token))",
                |e| matches!(e, DdlError::ReservedColumn { .. }),
            ),
        ];
        for (sql, check) in cases {
            let err = translate(&Catalog::default(), &[sql]).expect_err(sql);
            assert!(check(&err), "{sql}: {err:?}");
        }
    }

    #[test]
    fn alter_and_drop_map_to_table_statements() {
        let out = translate(
            &Catalog::default(),
            &[
                USERS,
                USER_TASKS,
                "ALTER QUEUE usertasks SET ON DELETE NO ACTION",
                "ALTER QUEUE usertasks ADD TTL INTERVAL '7 days' ON deliver_time",
                "ALTER QUEUE usertasks ALTER TTL INTERVAL '3 days' ON deliver_time",
                "ALTER QUEUE usertasks DROP TTL",
                "DROP QUEUE usertasks",
                "DROP QUEUE IF EXISTS usertasks",
            ],
        )
        .expect("translates");
        assert_eq!(
            &out[2..],
            [
                "ALTER TABLE usertasks SET ON DELETE NO ACTION",
                "ALTER TABLE usertasks ADD TTL INTERVAL '7 days' ON deliver_time",
                "ALTER TABLE usertasks ALTER TTL INTERVAL '3 days' ON deliver_time",
                "ALTER TABLE usertasks DROP TTL",
                "DROP TABLE usertasks",
                "DROP TABLE IF EXISTS usertasks",
            ]
        );
        let err = translate(&Catalog::default(), &["DROP QUEUE nope"]).expect_err("missing");
        assert!(matches!(err, DdlError::QueueNotFound { .. }), "{err:?}");
        let err = translate(
            &Catalog::default(),
            &[USERS, USER_TASKS, "DROP TABLE usertasks"],
        )
        .expect_err("a queue");
        assert!(matches!(err, DdlError::UseQueueStatement { .. }), "{err:?}");
        let err = translate(&Catalog::default(), &[USERS, "DROP QUEUE users"]).expect_err("table");
        assert!(matches!(err, DdlError::NotAQueue { .. }), "{err:?}");
    }

    #[test]
    fn identifiers_fold_and_quote_as_in_postgresql() {
        assert_eq!(pg_ident("usertasks"), "usertasks");
        assert_eq!(pg_ident("UserTasks"), "\"UserTasks\"");
        assert_eq!(pg_ident("select"), "\"select\"");
        assert_eq!(pg_ident("a\"b"), "\"a\"\"b\"");
        let out = translate(
            &Catalog::default(),
            &["CREATE QUEUE MyQ (Id bigint NOT NULL, \"Payload\" text NOT NULL, PRIMARY KEY (ID))"],
        )
        .expect("translates");
        assert!(
            out[0].starts_with("CREATE TABLE myq (\n  id bigint NOT NULL,\n  \"Payload\" text")
        );
    }
}
