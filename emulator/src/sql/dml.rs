//! DML statements: their verb and target table, PostgreSQL's trailing `ASSERT_ROWS_MODIFIED`,
//! and whether a statement names an identifier.

use spanner_queues_sql::{Dialect, Token, TokenKind, contains_ignore_case, tokenize};

use super::{Classified, DmlKind};

/// The verb of a DML statement and the index of the first token of its target table.
pub(super) fn dml_verb_and_target(
    toks: &[Token<'_>],
    dialect: Dialect,
) -> Option<(DmlKind, usize)> {
    let mut i = 1;
    let at = |i: usize, w: &str| toks.get(i).is_some_and(|t| t.is_word(w));
    let verb = toks.first()?;
    let mut kind = if verb.is_word("INSERT") {
        DmlKind::Insert
    } else if verb.is_word("UPDATE") {
        DmlKind::Update
    } else if verb.is_word("DELETE") {
        DmlKind::Delete
    } else {
        return None;
    };
    match (dialect, kind) {
        (Dialect::GoogleSql, DmlKind::Insert) => {
            if at(i, "OR") && at(i + 1, "UPDATE") {
                kind = DmlKind::InsertOrUpdate;
                i += 2;
            } else if at(i, "OR") && at(i + 1, "IGNORE") {
                kind = DmlKind::InsertOrIgnore;
                i += 2;
            }
            if at(i, "INTO") {
                i += 1;
            }
        }
        (Dialect::GoogleSql, DmlKind::Delete) if at(i, "FROM") => i += 1,
        (Dialect::PostgreSql, DmlKind::Insert) => {
            if !at(i, "INTO") {
                return None;
            }
            i += 1;
        }
        (Dialect::PostgreSql, DmlKind::Delete) => {
            if !at(i, "FROM") {
                return None;
            }
            i += 1;
            if at(i, "ONLY") {
                i += 1;
            }
        }
        (Dialect::PostgreSql, DmlKind::Update) if at(i, "ONLY") => i += 1,
        _ => {}
    }
    Some((kind, i))
}

/// Classifies a DML statement by its verb and first target table; `None` if it does not look
/// like one.
pub(super) fn classify_dml(toks: &[Token<'_>], dialect: Dialect) -> Option<Classified> {
    let (mut kind, mut i) = dml_verb_and_target(toks, dialect)?;
    let mut parts = vec![
        toks.get(i)
            .filter(|t| t.is_ident())?
            .name(dialect)
            .into_owned(),
    ];
    i += 1;
    while toks.get(i).is_some_and(|t| t.is_punct(".")) {
        parts.push(
            toks.get(i + 1)
                .filter(|t| t.is_ident())?
                .name(dialect)
                .into_owned(),
        );
        i += 2;
    }
    if dialect == Dialect::PostgreSql && kind == DmlKind::Insert {
        kind = postgres_conflict_kind(&toks[i..]);
    }
    Some(Classified::Dml {
        kind,
        table: parts.join("."),
    })
}

/// The kind of a PostgreSQL `INSERT` from its `ON CONFLICT ... DO {UPDATE | NOTHING}` clause.
fn postgres_conflict_kind(toks: &[Token<'_>]) -> DmlKind {
    let mut depth = 0i32;
    let mut conflict = false;
    for (i, t) in toks.iter().enumerate() {
        if t.is_punct("(") {
            depth += 1;
        } else if t.is_punct(")") {
            depth -= 1;
        } else if depth == 0 && t.is_word("CONFLICT") && i > 0 && toks[i - 1].is_word("ON") {
            conflict = true;
        } else if depth == 0 && conflict && t.is_word("DO") {
            return match toks.get(i + 1) {
                Some(n) if n.is_word("UPDATE") => DmlKind::InsertOrUpdate,
                Some(n) if n.is_word("NOTHING") => DmlKind::InsertOrIgnore,
                _ => DmlKind::Insert,
            };
        }
    }
    DmlKind::Insert
}

/// A trailing `ASSERT_ROWS_MODIFIED n` of a PostgreSQL DML statement: the statement without
/// it, and `n`. The official emulator's PostgreSQL parser lacks the clause (Cloud Spanner
/// documents it for PostgreSQL [C]), so the front strips it and checks the row count itself.
pub(crate) fn strip_assert_rows_modified(sql: &str, dialect: Dialect) -> Option<(String, i64)> {
    if dialect != Dialect::PostgreSql || !contains_ignore_case(sql, "ASSERT_ROWS_MODIFIED") {
        return None;
    }
    let toks = tokenize(sql, dialect).ok()?;
    let mut end = toks.len();
    if toks.last().is_some_and(|t| t.is_punct(";")) {
        end -= 1;
    }
    let [.., clause, count] = &toks[..end] else {
        return None;
    };
    if !clause.is_word("ASSERT_ROWS_MODIFIED") || count.kind != TokenKind::Number {
        return None;
    }
    let n = count.text.parse::<i64>().ok()?;
    Some((sql[..clause.start].trim_end().to_owned(), n))
}

/// Whether `sql` names `name` (an identifier, compared case-insensitively) anywhere; a
/// statement that does not tokenize counts as naming it.
pub(crate) fn names_identifier(sql: &str, dialect: Dialect, name: &str) -> bool {
    if !contains_ignore_case(sql, name) {
        return false;
    }
    let Ok(toks) = tokenize(sql, dialect) else {
        return true;
    };
    toks.iter()
        .any(|t| t.is_ident() && t.value.eq_ignore_ascii_case(name))
}
