//! The DML the front may hold until commit: keyed deletes (acks) and inserts (sends, business
//! writes) in GoogleSQL, recognised from their tokens.

use spanner_queues_sql::{Dialect, Token, TokenKind, is_google_sql_reserved, tokenize};

/// A GoogleSQL `DELETE [FROM] T WHERE k1 = @p1 AND k2 = @p2 … [ASSERT_ROWS_MODIFIED n]`: a
/// delete of at most one row, named by equalities between columns and parameters (the form
/// acks take). Anything else (literals, `OR`, `THEN RETURN`, hints, paths) is not one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyedDelete {
    /// The table, as written (unquoted).
    pub(crate) table: String,
    /// `(column, parameter name)` pairs, in the order written.
    pub(crate) columns: Vec<(String, String)>,
    /// The `ASSERT_ROWS_MODIFIED` count, if any.
    pub(crate) assert_rows: Option<i64>,
}

/// The tokens of a GoogleSQL statement whose first word is `keyword`, without a final `;`;
/// `None` for any other statement (checked on the text before tokenizing, the costly part).
fn statement_tokens<'s>(sql: &'s str, dialect: Dialect, keyword: &str) -> Option<Vec<Token<'s>>> {
    let starts_with_keyword = sql
        .trim_start()
        .get(..keyword.len())
        .is_some_and(|w| w.eq_ignore_ascii_case(keyword));
    if dialect != Dialect::GoogleSql || !starts_with_keyword {
        return None;
    }
    let mut toks = tokenize(sql, dialect).ok()?;
    if !toks.first()?.is_word(keyword) {
        return None;
    }
    if toks.last().is_some_and(|t| t.is_punct(";")) {
        toks.pop();
    }
    Some(toks)
}

/// The table a `DELETE`/`INSERT` statement names after its first word and an optional
/// `optional` keyword (`FROM`, `INTO`), and the index of the token after it; `None` when it is
/// not a plain identifier.
fn target_table(toks: &[Token<'_>], optional: &str) -> Option<(String, usize)> {
    let mut i = 1;
    if toks.get(i)?.is_word(optional) {
        i += 1;
    }
    let table = toks.get(i).filter(|t| t.is_ident())?;
    if table.kind == TokenKind::Word && is_google_sql_reserved(table.text) {
        return None;
    }
    Some((table.value.to_string(), i + 1))
}

/// Recognises a [`KeyedDelete`] (GoogleSQL only).
pub(crate) fn keyed_delete(sql: &str, dialect: Dialect) -> Option<KeyedDelete> {
    let toks = statement_tokens(sql, dialect, "DELETE")?;
    let toks = toks.as_slice();
    let (table, mut i) = target_table(toks, "FROM")?;
    if !toks.get(i)?.is_word("WHERE") {
        return None;
    }
    i += 1;
    let mut columns = Vec::new();
    loop {
        let (column, eq, param) = (toks.get(i)?, toks.get(i + 1)?, toks.get(i + 2)?);
        if !column.is_ident()
            || column.kind == TokenKind::Word && is_google_sql_reserved(column.text)
            || !eq.is_punct("=")
            || param.kind != TokenKind::Param
        {
            return None;
        }
        columns.push((column.value.to_string(), param.value.to_string()));
        i += 3;
        match toks.get(i) {
            None => break,
            Some(t) if t.is_word("AND") => i += 1,
            Some(_) => break,
        }
    }
    let assert_rows = match &toks[i..] {
        [] => None,
        [clause, count]
            if clause.is_word("ASSERT_ROWS_MODIFIED") && count.kind == TokenKind::Number =>
        {
            Some(count.text.parse::<i64>().ok()?)
        }
        _ => return None,
    };
    Some(KeyedDelete {
        table,
        columns,
        assert_rows,
    })
}

/// A value of a [`KeyedInsert`] row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InsertValue {
    /// `@name`.
    Param(String),
    /// `CURRENT_TIMESTAMP()`.
    CurrentTimestamp,
    /// A string literal (its decoded text).
    Text(String),
}

/// A GoogleSQL `INSERT [INTO] T (c1, …) VALUES (v1, …)[, (…)]` whose values are parameters,
/// string literals or `CURRENT_TIMESTAMP()` (the form sends take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyedInsert {
    pub(crate) table: String,
    pub(crate) columns: Vec<String>,
    pub(crate) rows: Vec<Vec<InsertValue>>,
}

/// Recognises a [`KeyedInsert`] (GoogleSQL only).
pub(crate) fn keyed_insert(sql: &str, dialect: Dialect) -> Option<KeyedInsert> {
    let toks = statement_tokens(sql, dialect, "INSERT")?;
    let toks = toks.as_slice();
    let (table, mut i) = target_table(toks, "INTO")?;
    if !toks.get(i)?.is_punct("(") {
        return None;
    }
    i += 1;
    let mut columns = Vec::new();
    loop {
        let column = toks.get(i).filter(|t| t.is_ident())?;
        if column.kind == TokenKind::Word && is_google_sql_reserved(column.text) {
            return None;
        }
        columns.push(column.value.to_string());
        i += 1;
        let next = toks.get(i)?;
        i += 1;
        if next.is_punct(")") {
            break;
        }
        if !next.is_punct(",") {
            return None;
        }
    }
    if !toks.get(i)?.is_word("VALUES") {
        return None;
    }
    i += 1;
    let mut rows = Vec::new();
    loop {
        if !toks.get(i)?.is_punct("(") {
            return None;
        }
        i += 1;
        let mut row = Vec::new();
        loop {
            let t = toks.get(i)?;
            let value = if t.kind == TokenKind::Param {
                i += 1;
                InsertValue::Param(t.value.to_string())
            } else if t.kind == TokenKind::String {
                i += 1;
                InsertValue::Text(t.value.to_string())
            } else if t.is_word("CURRENT_TIMESTAMP")
                && toks.get(i + 1)?.is_punct("(")
                && toks.get(i + 2)?.is_punct(")")
            {
                i += 3;
                InsertValue::CurrentTimestamp
            } else {
                return None;
            };
            row.push(value);
            let next = toks.get(i)?;
            i += 1;
            if next.is_punct(")") {
                break;
            }
            if !next.is_punct(",") {
                return None;
            }
        }
        if row.len() != columns.len() {
            return None;
        }
        rows.push(row);
        match toks.get(i) {
            None => break,
            Some(t) if t.is_punct(",") => i += 1,
            Some(_) => return None,
        }
    }
    Some(KeyedInsert {
        table,
        columns,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_deletes_are_recognised_and_nothing_else() {
        let g = Dialect::GoogleSql;
        assert_eq!(
            keyed_delete(
                "DELETE FROM UserTasks WHERE UserId = @k0 AND `MessageId` = @k1 ASSERT_ROWS_MODIFIED 1;",
                g
            ),
            Some(KeyedDelete {
                table: "UserTasks".to_owned(),
                columns: vec![
                    ("UserId".to_owned(), "k0".to_owned()),
                    ("MessageId".to_owned(), "k1".to_owned())
                ],
                assert_rows: Some(1),
            })
        );
        assert_eq!(
            keyed_delete("delete Jobs where Id = @id", g).map(|d| d.assert_rows),
            Some(None)
        );
        for other in [
            "DELETE FROM Jobs WHERE Id = 1",
            "DELETE FROM Jobs WHERE Id = @id OR Id = @other",
            "DELETE FROM Jobs WHERE Id > @id",
            "DELETE FROM Jobs WHERE Id = @id THEN RETURN Id",
            "DELETE FROM s.Jobs WHERE Id = @id",
            "DELETE FROM Jobs WHERE TRUE",
            "@{LOCK_SCANNED_RANGES=exclusive} DELETE FROM Jobs WHERE Id = @id",
            "SELECT 1",
        ] {
            assert_eq!(keyed_delete(other, g), None, "{other}");
        }
        assert_eq!(
            keyed_delete("DELETE FROM q WHERE id = $1", Dialect::PostgreSql),
            None
        );
    }

    #[test]
    fn keyed_inserts_are_recognised_and_nothing_else() {
        let g = Dialect::GoogleSql;
        assert_eq!(
            keyed_insert(
                "INSERT INTO Q (Id, Payload, DeliverTime) VALUES (@k0, @p0, CURRENT_TIMESTAMP()), (@k1, 'x', @at)",
                g
            ),
            Some(KeyedInsert {
                table: "Q".to_owned(),
                columns: vec![
                    "Id".to_owned(),
                    "Payload".to_owned(),
                    "DeliverTime".to_owned()
                ],
                rows: vec![
                    vec![
                        InsertValue::Param("k0".to_owned()),
                        InsertValue::Param("p0".to_owned()),
                        InsertValue::CurrentTimestamp
                    ],
                    vec![
                        InsertValue::Param("k1".to_owned()),
                        InsertValue::Text("x".to_owned()),
                        InsertValue::Param("at".to_owned())
                    ],
                ],
            })
        );
        for other in [
            "INSERT INTO Q (Id, Payload) VALUES (1, 'x')",
            "INSERT INTO Q (Id, Payload) VALUES (@id, 'x') THEN RETURN Id",
            "INSERT INTO Q (Id, Payload) SELECT Id, Payload FROM T",
            "INSERT OR IGNORE INTO Q (Id, Payload) VALUES (@id, 'x')",
            "INSERT INTO Q (Id, Payload) VALUES (@id)",
            "INSERT INTO Q (Id, Payload, DeliverTime) VALUES (@id, 'x', TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL @d MICROSECOND))",
        ] {
            assert_eq!(keyed_insert(other, g), None, "{other}");
        }
    }
}
