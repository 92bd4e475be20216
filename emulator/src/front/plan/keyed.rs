//! The DML the front may hold until commit: keyed deletes (acks) and inserts (sends, business
//! writes) in GoogleSQL, recognised from their tokens.

use spanner_queues_sql::{
    Cursor, Dialect, Token, TokenKind, is_google_sql_reserved, split_commas, tokenize,
};

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

/// Consumes a table or column name: an identifier that is not a bare reserved word.
fn name(c: &mut Cursor<'_, '_>) -> Option<String> {
    let t = c.peek().filter(|t| {
        t.is_ident() && !(t.kind == TokenKind::Word && is_google_sql_reserved(t.text))
    })?;
    c.advance(1);
    Some(t.value.to_string())
}

/// Recognises a [`KeyedDelete`] (GoogleSQL only).
pub(crate) fn keyed_delete(sql: &str, dialect: Dialect) -> Option<KeyedDelete> {
    let toks = statement_tokens(sql, dialect, "DELETE")?;
    let mut c = Cursor::new(&toks, "DELETE");
    c.set_pos(1);
    c.eat_word("FROM");
    let table = name(&mut c)?;
    if !c.eat_word("WHERE") {
        return None;
    }
    let mut columns = Vec::new();
    loop {
        let column = name(&mut c)?;
        if !c.eat_punct("=") {
            return None;
        }
        let param = c.peek().filter(|t| t.kind == TokenKind::Param)?;
        c.advance(1);
        columns.push((column, param.value.to_string()));
        if !c.eat_word("AND") {
            break;
        }
    }
    let assert_rows = match c.rest() {
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
    let mut c = Cursor::new(&toks, "INSERT");
    c.set_pos(1);
    c.eat_word("INTO");
    let table = name(&mut c)?;
    let columns = split_commas(c.group().ok()?)
        .into_iter()
        .map(|part| name(&mut Cursor::new(part, "INSERT")).filter(|_| part.len() == 1))
        .collect::<Option<Vec<String>>>()
        .filter(|columns| !columns.is_empty())?;
    if !c.eat_word("VALUES") {
        return None;
    }
    let mut rows = Vec::new();
    loop {
        let row = split_commas(c.group().ok()?)
            .into_iter()
            .map(|value| match value {
                [t] if t.kind == TokenKind::Param => Some(InsertValue::Param(t.value.to_string())),
                [t] if t.kind == TokenKind::String => Some(InsertValue::Text(t.value.to_string())),
                [f, open, close]
                    if f.is_word("CURRENT_TIMESTAMP")
                        && open.is_punct("(")
                        && close.is_punct(")") =>
                {
                    Some(InsertValue::CurrentTimestamp)
                }
                _ => None,
            })
            .collect::<Option<Vec<InsertValue>>>()?;
        if row.len() != columns.len() {
            return None;
        }
        rows.push(row);
        if !c.eat_punct(",") {
            break;
        }
    }
    c.rest().is_empty().then_some(KeyedInsert {
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
