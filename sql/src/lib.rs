//! Cloud Spanner's SQL, lexically: what the crates of spanner-queues that read or write SQL
//! share.
//!
//! - The reserved keywords of both dialects ([`GOOGLE_SQL_RESERVED`], [`POSTGRES_RESERVED`],
//!   [`is_reserved`]): a reserved keyword cannot be an unquoted name, so whatever writes SQL
//!   quotes it ([`quote_ident`]) and whatever parses SQL reads it as a keyword.
//! - A tokenizer ([`tokenize`], [`Lexer`]) that knows where comments, string and bytes
//!   literals, quoted identifiers, query parameters and numbers start and end in either
//!   dialect, so that nothing inside them can confuse a parser working on the tokens. It does
//!   not know keywords: a keyword is a [`TokenKind::Word`] compared case-insensitively.
//! - A cursor over tokens ([`Cursor`]) for small hand-written parsers, with syntax errors that
//!   say what was expected where ([`SyntaxError`]).
//! - Go-style durations ([`parse_go_duration`]), the format of the `max_duration` argument of
//!   Spanner's `RECEIVE` queries.
//!
//! `spanner-queues` (which writes DDL and queries), its emulator (which parses them) and its
//! command line (which reads `CREATE QUEUE` statements) all use this crate, so they agree on
//! which names need quotes and on where a token ends.
//!
//! ```
//! use spanner_queues_sql::{Cursor, Dialect, is_reserved, quote_ident, tokenize};
//!
//! assert!(is_reserved(Dialect::GoogleSql, "Select"));
//! assert!(is_reserved(Dialect::PostgreSql, "user"));
//! assert_eq!(quote_ident(Dialect::PostgreSql, "user"), "\"user\"");
//!
//! let tokens = tokenize("CREATE QUEUE `Order` -- a comment", Dialect::GoogleSql).unwrap();
//! let mut cursor = Cursor::new(&tokens, "CREATE QUEUE");
//! assert!(cursor.eat_words(&["CREATE", "QUEUE"]));
//! assert_eq!(cursor.ident("a queue name").unwrap(), "Order");
//! assert!(cursor.at_end());
//! ```

mod cursor;
mod duration;
mod keywords;
mod lexer;
mod quote;

pub use cursor::{Cursor, SyntaxError, closing_bracket, skip_hints, starts_with_words};
pub use duration::{DurationError, parse_go_duration};
pub use keywords::{
    GOOGLE_SQL_RESERVED, POSTGRES_RESERVED, is_google_sql_reserved, is_postgres_reserved,
    is_reserved,
};
pub use lexer::{LexError, Lexer, Token, TokenKind, split_commas, tokenize};
pub use quote::{contains_ignore_case, quote_ident, quote_ident_always, quote_string};

/// The SQL dialect of a Spanner database, which decides how its statements are tokenized and
/// which words are reserved.
///
/// Not `#[non_exhaustive]`: Spanner has these two dialects, and the parsers built on this crate
/// match on them exhaustively so that a third one could not be missed silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// GoogleSQL, the default dialect.
    #[default]
    GoogleSql,
    /// The PostgreSQL interface.
    PostgreSql,
}
