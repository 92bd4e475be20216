//! Parsing PostgreSQL `CREATE TABLE` / `CREATE QUEUE` bodies.

use spanner_queues_sql::{Cursor, Dialect, Token, TokenKind, quote_string};

use super::bodies::{KeyPart, TableAst, table_constraint};
use super::error::DdlError;
use super::model::{ColumnDef, Interleave, OnDelete};
use super::tokens::{
    OptionItem, OptionValue, ident_written, parse_options, path_written, render_tokens,
    split_commas,
};

/// Consumes a dotted name, each part folded as PostgreSQL does; returns the parts' names.
pub(super) fn pg_path(p: &mut Cursor<'_, '_>, what: &str) -> Result<Vec<String>, DdlError> {
    Ok(p.path(Dialect::PostgreSql, what)?)
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
fn until_attribute<'t, 's>(p: &mut Cursor<'t, 's>) -> &'t [Token<'s>] {
    // `bigint[]` and array literals nest in square brackets.
    p.until_attribute(&PG_ATTRIBUTES, ("[", "]"))
}

/// Parses a PostgreSQL column definition: `name type [DEFAULT e] [NOT NULL | NULL]
/// [GENERATED ALWAYS AS (e) STORED] [PRIMARY KEY]`. Returns the column and whether it was
/// declared `PRIMARY KEY` inline.
fn parse_pg_column(p: &mut Cursor<'_, '_>) -> Result<(ColumnDef, bool), DdlError> {
    let (name, written) = ident_written(p, Dialect::PostgreSql, "a column name")?;
    let type_toks = until_attribute(p);
    if type_toks.is_empty() {
        return Err(p.error(&format!("a type for column {name}")).into());
    }
    let mut column = ColumnDef {
        name,
        written,
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
                return Err(p.error("a DEFAULT expression").into());
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
pub(super) fn parse_pg_table(p: &mut Cursor<'_, '_>, queue: bool) -> Result<TableAst, DdlError> {
    let if_not_exists = p.eat_words(&["IF", "NOT", "EXISTS"]);
    let what = if queue {
        "a queue name"
    } else {
        "a table name"
    };
    let (name, written_name) = path_written(p, Dialect::PostgreSql, what)?;
    let mut ast = TableAst {
        if_not_exists,
        name,
        written_name,
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
                return Err(p.error("a single PRIMARY KEY").into());
            }
            primary_key_seen = true;
            for part in split_commas(p.group()?) {
                let mut kp = Cursor::new(part, p.statement());
                let (name, written) =
                    ident_written(&mut kp, Dialect::PostgreSql, "a primary key column")?;
                let descending = if kp.eat_word("DESC") {
                    true
                } else {
                    kp.eat_word("ASC");
                    false
                };
                kp.expect_end()?;
                ast.primary_key.push(KeyPart {
                    name,
                    written,
                    descending,
                });
            }
        } else if let Some(word) = table_constraint(p) {
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
                p.advance(1);
            }
        } else {
            let (column, inline_key) = parse_pg_column(p)?;
            if inline_key {
                if primary_key_seen {
                    return Err(p.error("a single PRIMARY KEY").into());
                }
                primary_key_seen = true;
                ast.primary_key.push(KeyPart {
                    name: column.name.clone(),
                    written: column.written.clone(),
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
        return Err(p.error("PRIMARY KEY (...) inside the parentheses").into());
    }
    while !p.at_end() {
        if p.at_words(&["INTERLEAVE", "IN"]) {
            if ast.interleave.is_some() {
                return Err(p.error("a single INTERLEAVE clause").into());
            }
            p.advance(2);
            let in_parent = p.eat_word("PARENT");
            let (parent, parent_written) =
                path_written(p, Dialect::PostgreSql, "a parent table name")?;
            let parent = parent.join(".");
            let on_delete = if p.eat_words(&["ON", "DELETE"]) {
                if p.eat_word("CASCADE") {
                    Some(OnDelete::Cascade)
                } else if p.eat_words(&["NO", "ACTION"]) {
                    Some(OnDelete::NoAction)
                } else {
                    return Err(p.error("CASCADE or NO ACTION").into());
                }
            } else {
                None
            };
            ast.interleave = Some(Interleave {
                parent,
                parent_written,
                in_parent,
                on_delete,
            });
        } else if p.eat_word("TTL") {
            if ast.row_deletion_policy.is_some() {
                return Err(p.error("a single TTL clause").into());
            }
            ast.row_deletion_policy = Some(parse_pg_ttl(p)?);
        } else if p.at_word("WITH") || p.at_word("OPTIONS") {
            p.advance(1);
            let inner = p.group()?;
            ast.options = parse_options(inner, p.statement())?;
            if ast.options.is_empty() {
                ast.options.push(OptionItem {
                    name: String::new(),
                    text: String::new(),
                    value: OptionValue::Other,
                });
            }
        } else {
            return Err(p
                .error("INTERLEAVE IN PARENT, TTL or the end of the statement")
                .into());
        }
    }
    p.expect_end()?;
    Ok(ast)
}

/// Parses `INTERVAL '<n> days' ON column` (after `TTL`) and renders it back.
pub(super) fn parse_pg_ttl(p: &mut Cursor<'_, '_>) -> Result<String, DdlError> {
    p.expect_word("INTERVAL")?;
    let interval = match p.peek() {
        Some(t) if t.kind == TokenKind::String => {
            p.advance(1);
            t.value.clone().into_owned()
        }
        _ => return Err(p.error("an interval string such as '7 days'").into()),
    };
    p.expect_word("ON")?;
    let (_, column) = ident_written(p, Dialect::PostgreSql, "a timestamp column")?;
    Ok(format!(
        "INTERVAL {} ON {column}",
        quote_string(Dialect::PostgreSql, &interval)
    ))
}
