//! Reading the queues out of the database's DDL (`GetDatabaseDdl`): their names and whether
//! delivery is disabled. The DDL is the only place Spanner documents for queue options.
//!
//! Statements are tokenized first (comments, string literals and quoted identifiers are single
//! tokens), so that nothing inside a literal, a comment or a column definition is mistaken for
//! the statement's own words. `CREATE QUEUE` is in none of the SQL grammars that parsing crates
//! know, and the queue-aware emulator's parser is private to it; only `CREATE QUEUE` is read
//! here, so the tokenizer stays small. Should Spanner one day list queue options in
//! `INFORMATION_SCHEMA` (it documents none today), reading them there would replace this.

use spanner_queues::Dialect;

/// A queue as its `CREATE QUEUE` statement declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueDdl {
    /// The name as written (quotes removed).
    pub(crate) name: String,
    /// Whether the options set `disable_delivery = true`.
    pub(crate) delivery_disabled: bool,
}

/// A token of a DDL statement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An unquoted word: a keyword, an identifier, a number.
    Word(String),
    /// A quoted identifier, unquoted: `` `a b` `` (GoogleSQL), `"a b"` (PostgreSQL).
    Quoted(String),
    /// A string or bytes literal (its content is never needed here).
    Literal,
    /// Any other character: `(`, `)`, `,`, `=`, `.`, ….
    Punct(char),
}

impl Token {
    fn is_word(&self, keyword: &str) -> bool {
        matches!(self, Token::Word(w) if w.eq_ignore_ascii_case(keyword))
    }

    /// An identifier's text, quoted or not.
    fn ident(&self) -> Option<&str> {
        match self {
            Token::Word(w) | Token::Quoted(w) => Some(w),
            _ => None,
        }
    }
}

/// The queue `statement` creates, or `None` for any other statement (or one that does not
/// tokenize).
pub(crate) fn parse_create_queue(statement: &str, dialect: Dialect) -> Option<QueueDdl> {
    let tokens = tokenize(statement, dialect)?;
    let mut rest = tokens.as_slice();
    if !(rest.first()?.is_word("CREATE") && rest.get(1)?.is_word("QUEUE")) {
        return None;
    }
    rest = &rest[2..];
    if rest.len() >= 3
        && rest[0].is_word("IF")
        && rest[1].is_word("NOT")
        && rest[2].is_word("EXISTS")
    {
        rest = &rest[3..];
    }
    // The name, with its schema if it has one (`schema.Queue`).
    let mut name = rest.first()?.ident()?.to_owned();
    rest = &rest[1..];
    while let [Token::Punct('.'), part, tail @ ..] = rest {
        name.push('.');
        name.push_str(part.ident()?);
        rest = tail;
    }
    let delivery_disabled = options(rest).iter().any(|(option, value)| {
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
fn options(tokens: &[Token]) -> Vec<(String, Token)> {
    let mut depth = 0usize;
    let mut at = None;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Punct('(') => depth += 1,
            Token::Punct(')') => depth = depth.saturating_sub(1),
            _ if depth == 0
                && token.is_word("OPTIONS")
                && tokens.get(i + 1) == Some(&Token::Punct('(')) =>
            {
                at = Some(i + 2);
                break;
            }
            _ => {}
        }
    }
    let Some(start) = at else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut item: Vec<&Token> = Vec::new();
    let mut depth = 0usize;
    for token in &tokens[start..] {
        match token {
            Token::Punct('(') => depth += 1,
            Token::Punct(')') if depth == 0 => break,
            Token::Punct(')') => depth -= 1,
            Token::Punct(',') if depth == 0 => {
                out.extend(pair(&item));
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(token);
    }
    out.extend(pair(&item));
    out
}

/// `name = value` with a one-token value.
fn pair(item: &[&Token]) -> Option<(String, Token)> {
    match item {
        [name, Token::Punct('='), value] => Some((name.ident()?.to_owned(), (*value).clone())),
        _ => None,
    }
}

/// The tokens of `sql`, without whitespace and comments; `None` if a literal, a quoted
/// identifier or a comment does not end.
fn tokenize(sql: &str, dialect: Dialect) -> Option<Vec<Token>> {
    let google = dialect == Dialect::GoogleSql;
    let chars: Vec<char> = sql.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if (c == '-' && next == Some('-')) || (google && c == '#') {
            while chars.get(i).is_some_and(|&c| c != '\n') {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let end = (i + 2..chars.len().saturating_sub(1))
                .find(|&j| chars[j] == '*' && chars[j + 1] == '/')?;
            i = end + 2;
        } else if c == '`' && google {
            let (text, end) = quoted(&chars, i, '`')?;
            tokens.push(Token::Quoted(text));
            i = end;
        } else if c == '"' && !google {
            let (text, end) = quoted(&chars, i, '"')?;
            tokens.push(Token::Quoted(text));
            i = end;
        } else if c == '\'' || c == '"' {
            i = literal(&chars, i, google, false)?;
            tokens.push(Token::Literal);
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while chars
                .get(i)
                .is_some_and(|&c| c.is_alphanumeric() || c == '_')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // GoogleSQL's prefixed literals: r'…', b'…', rb'…', br'…'.
            let prefix = word.to_ascii_lowercase();
            if google
                && matches!(prefix.as_str(), "r" | "b" | "rb" | "br")
                && matches!(chars.get(i), Some('\'' | '"'))
            {
                i = literal(&chars, i, google, prefix.contains('r'))?;
                tokens.push(Token::Literal);
            } else {
                tokens.push(Token::Word(word));
            }
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    Some(tokens)
}

/// A quoted identifier starting at `start`: its text and the index after it. A doubled quote
/// stands for one; in a GoogleSQL (backquoted) identifier a backslash escapes the next
/// character.
fn quoted(chars: &[char], start: usize, quote: char) -> Option<(String, usize)> {
    let mut text = String::new();
    let mut i = start + 1;
    loop {
        let c = *chars.get(i)?;
        if c == quote {
            if chars.get(i + 1) == Some(&quote) {
                text.push(quote);
                i += 2;
                continue;
            }
            return Some((text, i + 1));
        }
        if c == '\\' && quote == '`' {
            text.push(*chars.get(i + 1)?);
            i += 2;
            continue;
        }
        text.push(c);
        i += 1;
    }
}

/// The index after the string literal starting at `start` (`'…'`, `"…"`, and in GoogleSQL the
/// triple-quoted forms).
fn literal(chars: &[char], start: usize, google: bool, raw: bool) -> Option<usize> {
    let quote = chars[start];
    let triple =
        google && chars.get(start + 1) == Some(&quote) && chars.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    loop {
        let c = *chars.get(i)?;
        if google && c == '\\' && !raw {
            i += 2;
            continue;
        }
        if c == quote {
            if triple {
                if chars.get(i + 1) == Some(&quote) && chars.get(i + 2) == Some(&quote) {
                    return Some(i + 3);
                }
            } else if !google && chars.get(i + 1) == Some(&quote) {
                // PostgreSQL: '' inside a literal is one quote.
                i += 2;
                continue;
            } else {
                return Some(i + 1);
            }
        }
        i += 1;
    }
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
