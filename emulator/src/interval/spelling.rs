//! Where a statement spells out an interval, and where the word `interval` is a name instead,
//! read from its tokens (the shared lexer of `spanner-queues-sql`).
//!
//! In PostgreSQL `interval` is a keyword that may still name a table, a column or an alias
//! (`INSERT INTO interval (id) …`, `SELECT t.interval …`, `WHERE interval IS NULL`), and
//! sqlparser misreads many of those uses: it takes `interval (id)` for a precision, `interval +
//! 1` for the literal `INTERVAL +1`, and fails on `interval IS NULL`. PostgreSQL's grammar puts
//! the keyword in few places, each recognizable from its neighbours, so every other unquoted
//! `interval` is a name:
//!
//! - a literal: `interval '…'`, or with a precision, `interval(3) '…'` (a string follows the
//!   word, or follows the parentheses after it);
//! - a type: `::interval`, or `CAST(… AS interval)` (the `AS` directly inside the parentheses
//!   of `CAST`);
//!
//! never after a `.` (a part of a qualified name). A call of `make_interval(…)` spells out an
//! interval too, except where `make_interval (` names the table of an `INSERT INTO`.

use spanner_queues_sql::{Dialect, Token, TokenKind, closing_bracket, tokenize};

/// How a statement uses the words `interval` and `make_interval`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Spelling {
    /// The byte offsets of the unquoted words `interval` that are names.
    pub(super) names: Vec<usize>,
    /// Whether the statement spells out an interval: an interval literal or type, or a call
    /// of `make_interval`.
    pub(super) interval: bool,
}

impl Spelling {
    /// Reads `sql` (PostgreSQL); `None` when it does not tokenize.
    pub(super) fn read(sql: &str) -> Option<Self> {
        let tokens = tokenize(sql, Dialect::PostgreSql).ok()?;
        let mut spelling = Self::default();
        // For each parenthesis open at this point, whether it is the one of `CAST (`.
        let mut open: Vec<bool> = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            let previous = i.checked_sub(1).map(|p| &tokens[p]);
            if token.is_punct("(") {
                open.push(previous.is_some_and(|p| p.is_word("cast")));
            } else if token.is_punct(")") {
                open.pop();
            } else if token.is_word("interval") {
                let type_name = previous.is_some_and(|p| {
                    p.is_punct("::") || p.is_word("as") && open.last() == Some(&true)
                });
                let qualified = previous.is_some_and(|p| p.is_punct("."));
                if !qualified && (type_name || literal_follows(&tokens, i)) {
                    spelling.interval = true;
                } else {
                    spelling.names.push(token.start);
                }
            } else if token.is_word("make_interval")
                && tokens.get(i + 1).is_some_and(|t| t.is_punct("("))
                && !inserted_into(&tokens, i)
            {
                spelling.interval = true;
            }
        }
        Some(spelling)
    }
}

/// Whether a string literal follows the word at `i`, directly or after a parenthesized
/// precision (`interval '…'`, `interval(3) '…'`).
fn literal_follows(tokens: &[Token<'_>], i: usize) -> bool {
    let next = match tokens.get(i + 1) {
        Some(t) if t.is_punct("(") => closing_bracket(tokens, i + 1).map(|close| close + 1),
        Some(_) => Some(i + 1),
        None => None,
    };
    next.and_then(|k| tokens.get(k))
        .is_some_and(|t| t.kind == TokenKind::String)
}

/// Whether the name at `i` (possibly the last part of a qualified name) follows `INTO`.
fn inserted_into(tokens: &[Token<'_>], i: usize) -> bool {
    let mut first = i;
    while first >= 2 && tokens[first - 1].is_punct(".") && tokens[first - 2].is_ident() {
        first -= 2;
    }
    first >= 1 && tokens[first - 1].is_word("into")
}
