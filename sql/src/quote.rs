//! Writing names and strings so that the lexer reads them back as they were.

use std::borrow::Cow;

use crate::{Dialect, is_reserved};

/// `name` as an identifier of `dialect`, quoted only when it has to be: when it is a reserved
/// keyword of the dialect, or when it is not a plain word (GoogleSQL: letters, digits and `_`,
/// not starting with a digit; PostgreSQL: the same in lower case, since PostgreSQL folds
/// unquoted names to lower case).
///
/// ```
/// use spanner_queues_sql::{Dialect, quote_ident};
///
/// assert_eq!(quote_ident(Dialect::GoogleSql, "Users"), "Users");
/// assert_eq!(quote_ident(Dialect::GoogleSql, "Order"), "`Order`");
/// assert_eq!(quote_ident(Dialect::PostgreSql, "users"), "users");
/// assert_eq!(quote_ident(Dialect::PostgreSql, "Users"), "\"Users\"");
/// assert_eq!(quote_ident(Dialect::PostgreSql, "user"), "\"user\"");
/// ```
pub fn quote_ident(dialect: Dialect, name: &str) -> Cow<'_, str> {
    let start = |b: u8| match dialect {
        Dialect::GoogleSql => b.is_ascii_alphabetic() || b == b'_',
        Dialect::PostgreSql => b.is_ascii_lowercase() || b == b'_',
    };
    let rest = |b: u8| start(b) || b.is_ascii_digit();
    let plain = name.bytes().next().is_some_and(start)
        && name.bytes().all(rest)
        && !is_reserved(dialect, name);
    if plain {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(quote_ident_always(dialect, name))
    }
}

/// `name` as a quoted identifier of `dialect` (`` `name` `` or `"name"`), whatever it is: for
/// statements a program writes for a database, where a name that some position of the
/// grammar happens to reserve must not break the statement.
///
/// ```
/// use spanner_queues_sql::{Dialect, quote_ident_always};
///
/// assert_eq!(quote_ident_always(Dialect::GoogleSql, "a`b"), "`a\\`b`");
/// assert_eq!(quote_ident_always(Dialect::PostgreSql, "ttl"), "\"ttl\"");
/// ```
pub fn quote_ident_always(dialect: Dialect, name: &str) -> String {
    match dialect {
        Dialect::GoogleSql => {
            let mut quoted = String::with_capacity(name.len() + 2);
            quoted.push('`');
            push_escaped(&mut quoted, name, '`');
            quoted.push('`');
            quoted
        }
        Dialect::PostgreSql => format!("\"{}\"", name.replace('"', "\"\"")),
    }
}

/// `value` as a string literal of `dialect`: single-quoted, with backslash escapes in
/// GoogleSQL and doubled quotes in PostgreSQL.
///
/// ```
/// use spanner_queues_sql::{Dialect, quote_string};
///
/// assert_eq!(quote_string(Dialect::GoogleSql, "it's"), "'it\\'s'");
/// assert_eq!(quote_string(Dialect::PostgreSql, "it's"), "'it''s'");
/// ```
pub fn quote_string(dialect: Dialect, value: &str) -> String {
    match dialect {
        Dialect::GoogleSql => {
            let mut out = String::with_capacity(value.len() + 2);
            out.push('\'');
            push_escaped(&mut out, value, '\'');
            out.push('\'');
            out
        }
        Dialect::PostgreSql => format!("'{}'", value.replace('\'', "''")),
    }
}

/// Appends `text` with GoogleSQL backslash escapes for `quote`, backslashes and line breaks.
fn push_escaped(out: &mut String, text: &str, quote: char) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
}

/// Whether `needle` occurs in `haystack`, ASCII letters compared case-insensitively: a test
/// cheap enough to run on every statement before deciding to tokenize it.
///
/// ```
/// assert!(spanner_queues_sql::contains_ignore_case("select * FROM receive_q()", "RECEIVE_"));
/// assert!(!spanner_queues_sql::contains_ignore_case("SELECT 1", "RECEIVE_"));
/// ```
pub fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    let (haystack, needle) = (haystack.as_bytes(), needle.as_bytes());
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    let (lower, upper) = (first.to_ascii_lowercase(), first.to_ascii_uppercase());
    // Only the positions of the first byte are compared further.
    haystack.iter().enumerate().any(|(i, &b)| {
        (b == lower || b == upper)
            && haystack
                .get(i + 1..i + needle.len())
                .is_some_and(|w| w.eq_ignore_ascii_case(rest))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TokenKind, tokenize};

    #[test]
    fn quoted_names_and_strings_read_back_as_written() {
        for dialect in [Dialect::GoogleSql, Dialect::PostgreSql] {
            for name in [
                "Plain",
                "plain",
                "Order",
                "user",
                "with space",
                "back`tick",
                "a\\b",
                "q\"d",
                "é",
            ] {
                for quoted in [
                    quote_ident(dialect, name).into_owned(),
                    quote_ident_always(dialect, name),
                ] {
                    let toks = tokenize(&quoted, dialect).expect("tokenizes");
                    assert_eq!(toks.len(), 1, "{quoted}");
                    assert_eq!(toks[0].name(dialect), name, "{dialect:?} {quoted}");
                }
            }
            for value in ["", "it's", "a\\b\nc", "é", "\"", "$$"] {
                let quoted = quote_string(dialect, value);
                let toks = tokenize(&quoted, dialect).expect("tokenizes");
                assert_eq!(toks.len(), 1, "{quoted}");
                assert_eq!(toks[0].kind, TokenKind::String);
                assert_eq!(toks[0].value, value, "{dialect:?} {quoted}");
            }
        }
    }

    #[test]
    fn each_dialect_quotes_its_own_reserved_words() {
        assert_eq!(quote_ident(Dialect::GoogleSql, "user"), "user");
        assert_eq!(quote_ident(Dialect::PostgreSql, "user"), "\"user\"");
        assert_eq!(quote_ident(Dialect::GoogleSql, "Select"), "`Select`");
        assert_eq!(quote_ident(Dialect::PostgreSql, "select"), "\"select\"");
        assert_eq!(
            quote_ident(Dialect::PostgreSql, "constraint"),
            "\"constraint\""
        );
        assert_eq!(quote_ident(Dialect::PostgreSql, "interval"), "interval");
    }

    #[test]
    fn substrings_ignore_ascii_case() {
        assert!(contains_ignore_case("ab", ""));
        assert!(contains_ignore_case(
            "xSpannerQueuesEmulatorQueue",
            "spannerqueuesemulatorqueue"
        ));
        assert!(!contains_ignore_case("a", "ab"));
        assert!(contains_ignore_case("ab", "B"));
        assert!(!contains_ignore_case("receive", "receive_"));
        assert!(contains_ignore_case("x RECEIVE_", "receive_"));
        assert!(contains_ignore_case("é_Receive_q", "RECEIVE_"));
    }
}
