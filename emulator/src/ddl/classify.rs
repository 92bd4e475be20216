//! What kind of statement a client sent.

use spanner_queues_sql::{Dialect, Lexer, Token, TokenKind, tokenize};

use super::META_COLUMN;
use super::error::DdlError;

/// The leading words of a statement, upper-cased (at most `n`; stops at the first non-word).
pub(super) fn leading_words(statement: &str, dialect: Dialect, n: usize) -> Vec<String> {
    Lexer::new(statement, dialect)
        .take(n)
        .map_while(|t| t.ok().filter(|t| t.kind == TokenKind::Word))
        .map(|t| t.text.to_ascii_uppercase())
        .collect()
}

/// Whether the leading words make a queue statement: `CREATE|ALTER|DROP QUEUE`, or
/// `CREATE OR REPLACE QUEUE` (which is refused).
pub(super) fn is_queue_statement(words: &[String]) -> bool {
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    matches!(
        words.as_slice(),
        ["CREATE" | "ALTER" | "DROP", "QUEUE", ..] | ["CREATE", "OR", "REPLACE", "QUEUE", ..]
    )
}

/// The kind (`CREATE QUEUE`, …) and tokens of a queue statement whose leading `words` are given,
/// or `None` for any other statement.
pub(super) fn queue_statement_tokens<'s>(
    statement: &'s str,
    words: &[String],
    dialect: Dialect,
) -> Result<Option<(&'static str, Vec<Token<'s>>)>, DdlError> {
    if !is_queue_statement(words) {
        return Ok(None);
    }
    let kind: &'static str = match words.first().map(String::as_str) {
        Some("CREATE") => "CREATE QUEUE",
        Some("ALTER") => "ALTER QUEUE",
        _ => "DROP QUEUE",
    };
    let toks = tokenize(statement, dialect).map_err(|err| DdlError::Syntax {
        statement: kind,
        message: err.to_string(),
    })?;
    Ok(Some((kind, toks)))
}

/// The error for a statement that names a queue in a form queues do not support
/// (`CREATE OR REPLACE QUEUE`, …).
pub(super) fn not_a_queue_statement(words: &[String]) -> DdlError {
    DdlError::UnsupportedStatement {
        reason: format!(
            "`{}` is not a queue statement; queues support CREATE QUEUE [IF NOT EXISTS], \
             ALTER QUEUE and DROP QUEUE [IF EXISTS]",
            words.join(" ")
        ),
    }
}

/// Refuses a client table statement that names the internal metadata column.
pub(super) fn reject_meta_column(toks: &[Token<'_>], object: &str) -> Result<(), DdlError> {
    match toks
        .iter()
        .find(|t| t.is_ident() && t.value.eq_ignore_ascii_case(META_COLUMN))
    {
        Some(t) => Err(DdlError::ReservedColumn {
            object: object.to_owned(),
            column: t.value.clone().into_owned(),
        }),
        None => Ok(()),
    }
}
