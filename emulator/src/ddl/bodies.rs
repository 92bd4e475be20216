//! CREATE TABLE / CREATE QUEUE bodies.

use spanner_queues_sql::{Cursor, Dialect};

use super::error::DdlError;
use super::model::{ColumnDef, InsertColumn, Interleave, OnDelete, TableInfo};
use super::tokens::{
    OptionItem, ident_written, parse_options, path_written, render_tokens, render_type,
    split_commas,
};

/// One part of a `PRIMARY KEY ( ... )` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyPart {
    /// The column name, unquoted.
    pub(super) name: String,
    /// The name as written (quoted, or bare).
    pub(super) written: String,
    /// Whether it is `DESC`.
    pub(super) descending: bool,
}

/// A parsed `CREATE TABLE` or `CREATE QUEUE` statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TableAst {
    /// `IF NOT EXISTS` was written.
    pub(super) if_not_exists: bool,
    /// The name, as a dotted path.
    pub(super) name: Vec<String>,
    /// The name as written (each part quoted, or bare).
    pub(super) written_name: String,
    /// The column definitions in declaration order.
    pub(super) columns: Vec<ColumnDef>,
    /// A table element that is not a column (a constraint), as its first word.
    pub(super) constraint: Option<String>,
    /// The primary key.
    pub(super) primary_key: Vec<KeyPart>,
    /// The interleave clause.
    pub(super) interleave: Option<Interleave>,
    /// The row deletion policy, without its parentheses.
    pub(super) row_deletion_policy: Option<String>,
    /// `OPTIONS ( ... )` after the primary key.
    pub(super) options: Vec<OptionItem>,
}

impl TableAst {
    /// The name as one string (`a.b` for a qualified name).
    pub(super) fn full_name(&self) -> String {
        self.name.join(".")
    }

    /// The column called `name` (case-insensitive).
    pub(super) fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// What the catalog keeps about a non-queue table (`None` if its key names an unknown column).
    pub(super) fn info(&self) -> Option<TableInfo> {
        let key = self
            .primary_key
            .iter()
            .map(|k| {
                self.column(&k.name)
                    .map(|c| (c.name.clone(), c.data_type.clone()))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(TableInfo {
            name: self.full_name(),
            key,
            json_columns: self
                .columns
                .iter()
                .filter(|c| {
                    c.data_type.eq_ignore_ascii_case("JSON")
                        || c.data_type.eq_ignore_ascii_case("jsonb")
                })
                .map(|c| c.name.clone())
                .collect(),
            // Rows the front may insert by mutation at commit in place of a DML `INSERT`
            // give the same errors there only when nothing checks them at the statement:
            // no constraints (foreign keys, checks), no parent, no generated columns.
            insertable: (self.constraint.is_none()
                && self.interleave.is_none()
                && self.columns.iter().all(|c| c.generated.is_none()))
            .then(|| {
                self.columns
                    .iter()
                    .map(|c| InsertColumn {
                        name: c.name.clone(),
                        data_type: c.data_type.clone(),
                        required: c.not_null && c.default.is_none(),
                    })
                    .collect()
            }),
        })
    }
}

/// Parses a column definition: `name type [NOT NULL] [DEFAULT (e)] [AS (e) [STORED]] [HIDDEN]
/// [OPTIONS (...)]`.
pub(super) fn parse_column(p: &mut Cursor<'_, '_>) -> Result<ColumnDef, DdlError> {
    /// Words that end a column type.
    const ATTRIBUTES: [&str; 10] = [
        "NOT",
        "AS",
        "DEFAULT",
        "HIDDEN",
        "OPTIONS",
        "GENERATED",
        "PRIMARY",
        "REFERENCES",
        "CONSTRAINT",
        "CHECK",
    ];
    let (name, written) = ident_written(p, Dialect::GoogleSql, "a column name")?;
    // `ARRAY<STRUCT<…>>` nests in angle brackets.
    let type_toks = p.until_attribute(&ATTRIBUTES, ("<", ">"));
    if type_toks.is_empty() {
        return Err(p.error(&format!("a type for column {name}")).into());
    }
    let mut column = ColumnDef {
        name,
        written,
        data_type: render_type(type_toks),
        not_null: false,
        generated: None,
        stored: false,
        default: None,
        hidden: false,
        options: Vec::new(),
    };
    loop {
        if p.eat_words(&["NOT", "NULL"]) {
            column.not_null = true;
        } else if p.eat_word("DEFAULT") {
            column.default = Some(render_tokens(p.group()?));
        } else if p.eat_word("AS") {
            column.generated = Some(render_tokens(p.group()?));
            column.stored = p.eat_word("STORED");
        } else if p.eat_word("HIDDEN") {
            column.hidden = true;
        } else if p.eat_word("OPTIONS") {
            let inner = p.group()?;
            column.options = parse_options(inner, p.statement())?
                .into_iter()
                .map(|o| (o.name, o.text))
                .collect();
        } else {
            return Ok(column);
        }
    }
}

/// Parses the rest of a `CREATE TABLE` / `CREATE QUEUE` statement after its leading words.
///
/// With `queue`, table constraints are errors; without, they are skipped.
pub(super) fn parse_table(p: &mut Cursor<'_, '_>, queue: bool) -> Result<TableAst, DdlError> {
    let if_not_exists = p.eat_words(&["IF", "NOT", "EXISTS"]);
    let what = if queue {
        "a queue name"
    } else {
        "a table name"
    };
    let (name, written_name) = path_written(p, Dialect::GoogleSql, what)?;
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
    p.expect_punct("(")?;
    loop {
        if p.eat_punct(")") {
            break;
        }
        if let Some(word) = table_constraint(p) {
            ast.constraint.get_or_insert_with(|| word.to_owned());
            // Skip the element up to the next comma or the closing parenthesis.
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
            ast.columns.push(parse_column(p)?);
        }
        if !p.eat_punct(",") {
            p.expect_punct(")")?;
            break;
        }
    }
    p.expect_word("PRIMARY")?;
    p.expect_word("KEY")?;
    let key_toks = p.group()?;
    for part in split_commas(key_toks) {
        let mut kp = Cursor::new(part, p.statement());
        let (name, written) = ident_written(&mut kp, Dialect::GoogleSql, "a primary key column")?;
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
    while p.eat_punct(",") {
        if p.at_words(&["INTERLEAVE", "IN"]) {
            if ast.interleave.is_some() {
                return Err(p.error("a single INTERLEAVE clause").into());
            }
            ast.interleave = Some(parse_interleave(p)?);
        } else if p.eat_words(&["ROW", "DELETION", "POLICY"]) {
            if ast.row_deletion_policy.is_some() {
                return Err(p.error("a single ROW DELETION POLICY clause").into());
            }
            ast.row_deletion_policy = Some(parse_row_deletion_policy(p)?);
        } else if p.eat_word("OPTIONS") {
            if !ast.options.is_empty() {
                return Err(p.error("a single OPTIONS clause").into());
            }
            let inner = p.group()?;
            ast.options = parse_options(inner, p.statement())?;
        } else {
            return Err(p
                .error("INTERLEAVE IN, ROW DELETION POLICY or OPTIONS")
                .into());
        }
    }
    p.expect_end()?;
    Ok(ast)
}

/// The first word of the table element at the cursor when it is a constraint (or a synonym)
/// rather than a column: `CONSTRAINT name {FOREIGN KEY | CHECK | ...}`, `FOREIGN KEY`,
/// `PRIMARY KEY`, `CHECK (`, `UNIQUE (`, `SYNONYM (`. The words after the keyword decide, since
/// `constraint`, `foreign`, `check`, `primary` and `synonym` are all fine GoogleSQL column names
/// (the official emulator accepts them unquoted, and prints them so).
pub(super) fn table_constraint(p: &Cursor<'_, '_>) -> Option<&'static str> {
    let word = |ahead: usize, keyword: &str| p.peek_at(ahead).is_some_and(|t| t.is_word(keyword));
    let open = |ahead: usize| p.peek_at(ahead).is_some_and(|t| t.is_punct("("));
    if word(0, "CONSTRAINT")
        && p.peek_at(1).is_some_and(|t| t.is_ident())
        && ["FOREIGN", "CHECK", "PRIMARY", "UNIQUE"]
            .iter()
            .any(|k| word(2, k))
    {
        Some("CONSTRAINT")
    } else if word(0, "FOREIGN") && word(1, "KEY") {
        Some("FOREIGN")
    } else if word(0, "PRIMARY") && word(1, "KEY") {
        Some("PRIMARY")
    } else if word(0, "CHECK") && open(1) {
        Some("CHECK")
    } else if word(0, "UNIQUE") && open(1) {
        Some("UNIQUE")
    } else if word(0, "SYNONYM") && open(1) {
        Some("SYNONYM")
    } else {
        None
    }
}

/// Parses `INTERLEAVE IN [PARENT] name [ON DELETE {CASCADE | NO ACTION}]`.
pub(super) fn parse_interleave(p: &mut Cursor<'_, '_>) -> Result<Interleave, DdlError> {
    p.expect_word("INTERLEAVE")?;
    p.expect_word("IN")?;
    let in_parent = p.eat_word("PARENT");
    let (parent, parent_written) = path_written(p, Dialect::GoogleSql, "a parent table name")?;
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
    Ok(Interleave {
        parent,
        parent_written,
        in_parent,
        on_delete,
    })
}

/// Parses the `( ... )` of a row deletion policy (after `ROW DELETION POLICY`).
pub(super) fn parse_row_deletion_policy(p: &mut Cursor<'_, '_>) -> Result<String, DdlError> {
    let inner = p.group()?;
    if inner.is_empty() {
        return Err(p.error("OLDER_THAN(column, INTERVAL n DAY)").into());
    }
    Ok(render_tokens(inner))
}
