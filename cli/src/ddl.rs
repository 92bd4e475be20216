//! Reading the queues out of the database's DDL (`GetDatabaseDdl`): their names and whether
//! delivery is disabled. The DDL is the only place Spanner documents for queue options.
//!
//! Statements are tokenized first with `spanner_queues_sql` (comments, string literals and
//! quoted identifiers are single tokens), so that nothing inside a literal, a comment or a
//! column definition is mistaken for the statement's own words. `CREATE QUEUE` is in none of the
//! SQL grammars that parsing crates know; only its name and options are read here. Should
//! Spanner one day list queue options in `INFORMATION_SCHEMA` (it documents none today), reading
//! them there would replace this.

use spanner_queues::Dialect;
use spanner_queues_sql::{Cursor, Token, split_commas, tokenize};

/// A queue as its `CREATE QUEUE` statement declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueDdl {
    /// The name as written (quotes removed; PostgreSQL folds an unquoted name to lower case).
    pub(crate) name: String,
    /// Whether the options set `disable_delivery = true`.
    pub(crate) delivery_disabled: bool,
}

/// The queue `statement` creates, or `None` for any other statement (or one that does not
/// tokenize).
pub(crate) fn parse_create_queue(statement: &str, dialect: Dialect) -> Option<QueueDdl> {
    let dialect = match dialect {
        Dialect::PostgreSql => spanner_queues_sql::Dialect::PostgreSql,
        _ => spanner_queues_sql::Dialect::GoogleSql,
    };
    let tokens = tokenize(statement, dialect).ok()?;
    let mut cursor = Cursor::new(&tokens, "CREATE QUEUE");
    if !cursor.eat_words(&["CREATE", "QUEUE"]) {
        return None;
    }
    cursor.eat_words(&["IF", "NOT", "EXISTS"]);
    // The name, with its schema if it has one (`schema.Queue`).
    let name = cursor.path(dialect, "a queue name").ok()?.join(".");
    let delivery_disabled = options(cursor.rest()).iter().any(|(option, value)| {
        option.eq_ignore_ascii_case("disable_delivery") && value.is_word("true")
    });
    Some(QueueDdl {
        name,
        delivery_disabled,
    })
}

/// The `name = value` pairs of the statement's own `OPTIONS (…)` clause (outside every
/// parenthesis: column options are not the queue's). A value of more than one token is left
/// out.
fn options<'t, 's>(tokens: &'t [Token<'s>]) -> Vec<(String, &'t Token<'s>)> {
    let mut depth = 0usize;
    let mut cursor = Cursor::new(tokens, "CREATE QUEUE");
    while let Some(token) = cursor.peek() {
        if token.is_punct("(") {
            depth += 1;
        } else if token.is_punct(")") {
            depth = depth.saturating_sub(1);
        } else if depth == 0
            && token.is_word("OPTIONS")
            && cursor.peek_at(1).is_some_and(|t| t.is_punct("("))
        {
            cursor.advance(1);
            let Ok(inner) = cursor.group() else {
                return Vec::new();
            };
            return split_commas(inner)
                .into_iter()
                .filter_map(|item| match item {
                    [name, eq, value] if name.is_ident() && eq.is_punct("=") => {
                        Some((name.value.clone().into_owned(), value))
                    }
                    _ => None,
                })
                .collect();
        }
        cursor.advance(1);
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn google(statement: &str) -> Option<(String, bool)> {
        parse_create_queue(statement, Dialect::GoogleSql).map(|q| (q.name, q.delivery_disabled))
    }

    fn postgres(statement: &str) -> Option<(String, bool)> {
        parse_create_queue(statement, Dialect::PostgreSql).map(|q| (q.name, q.delivery_disabled))
    }

    #[test]
    fn queue_statements_are_recognised_with_their_pause_state() {
        assert_eq!(
            google(
                "CREATE QUEUE Tickets (\n  Id INT64 NOT NULL,\n  Payload JSON NOT NULL,\n) PRIMARY KEY(Id)"
            ),
            Some(("Tickets".to_owned(), false))
        );
        assert_eq!(
            google(
                "create queue if not exists `Jobs`(Id INT64 NOT NULL, Payload JSON NOT NULL) \
                 PRIMARY KEY (Id), OPTIONS (disable_delivery = true)"
            ),
            Some(("Jobs".to_owned(), true))
        );
        assert_eq!(
            google(
                "CREATE QUEUE J (Id INT64, Payload JSON) PRIMARY KEY (Id), OPTIONS (disable_delivery=false)"
            ),
            Some(("J".to_owned(), false))
        );
        assert_eq!(
            google(
                "CREATE QUEUE J (Id INT64, Payload JSON) PRIMARY KEY (Id), \
                 OPTIONS (receive_mode = 'PULL', DISABLE_DELIVERY = TRUE, disable_send = false)"
            ),
            Some(("J".to_owned(), true))
        );
        assert_eq!(
            google("CREATE TABLE Tickets (Id INT64) PRIMARY KEY (Id)"),
            None
        );
        assert_eq!(google("CREATE QUEUE"), None);
    }

    #[test]
    fn only_the_queues_own_options_count() {
        // A column option, a comment and a string literal that spell the option are not the
        // queue's.
        assert_eq!(
            google(
                "CREATE QUEUE Q (\n  Id INT64 NOT NULL OPTIONS (disable_delivery = true),\n  \
                 Payload STRING(MAX) NOT NULL DEFAULT ('OPTIONS (disable_delivery = true)'),\n) \
                 PRIMARY KEY (Id) -- OPTIONS (disable_delivery = true)\n"
            ),
            Some(("Q".to_owned(), false))
        );
        assert_eq!(
            google(
                "CREATE QUEUE Q (Id INT64, Payload JSON) PRIMARY KEY (Id), \
                 /* OPTIONS (disable_delivery = true) */ OPTIONS (disable_send = true)"
            ),
            Some(("Q".to_owned(), false))
        );
        assert_eq!(
            google(
                r#"CREATE QUEUE Q (Id STRING(MAX) DEFAULT ("""a ' " b"""), Payload BYTES(MAX) DEFAULT (b'\'')) PRIMARY KEY (Id), OPTIONS (disable_delivery = true)"#
            ),
            Some(("Q".to_owned(), true))
        );
    }

    #[test]
    fn names_are_unquoted_in_either_dialect() {
        assert_eq!(
            google("CREATE QUEUE `Order Events` (Id INT64, Payload JSON) PRIMARY KEY (Id)"),
            Some(("Order Events".to_owned(), false))
        );
        assert_eq!(
            google("CREATE QUEUE ops.Jobs (Id INT64, Payload JSON) PRIMARY KEY (Id)"),
            Some(("ops.Jobs".to_owned(), false))
        );
        assert_eq!(
            postgres(
                "CREATE QUEUE \"Tickets\" (id bigint NOT NULL, payload jsonb NOT NULL, PRIMARY KEY(id))"
            ),
            Some(("Tickets".to_owned(), false))
        );
        assert_eq!(
            postgres(
                "CREATE QUEUE tickets (id bigint NOT NULL, payload text DEFAULT 'it''s', PRIMARY KEY(id))"
            ),
            Some(("tickets".to_owned(), false))
        );
    }

    #[test]
    fn unterminated_statements_are_not_read() {
        assert_eq!(
            google("CREATE QUEUE Q (Id STRING(MAX) DEFAULT ('oops"),
            None
        );
        assert_eq!(google("CREATE QUEUE `Q"), None);
        assert_eq!(google("CREATE QUEUE Q /* never closed"), None);
    }
}
