//! Statement classification for the emulator front: which queries call the queue table-valued
//! functions (`RECEIVE_<Q>`, `RENEWLEASE_<Q>`), and which statements are DML on which table.
//!
//! [`classify`] runs on every statement the front forwards, so statements that neither start
//! with a DML verb nor mention a queue function anywhere are answered from a substring test and
//! the first word, without tokenizing the whole text. Everything else is tokenized with
//! `spanner_queues_sql`'s lexer, so comments, literals, quoted identifiers and hints cannot
//! confuse it.
//!
//! The queue functions' calls and select lists are read in `functions`, their arguments (and
//! durations) in `args`, DML statements in `dml`. The recognizers of the DML the front holds
//! until commit are the front's (`front::plan`).
//!
//! # Accepted forms
//!
//! ```text
//! [@{hints}] SELECT { * | alias.* | [alias.]column [, ...] }
//!   FROM RECEIVE_<Q>(max_duration => '20m' [, max_batch_size => 20] [, priority => NULL])
//!   [[AS] alias] [@{hints}] [WHERE condition] [;]
//! [@{hints}] SELECT ... FROM RENEWLEASE_<Q>([lease_tokens =>] tokens) [[AS] alias] [;]
//! INSERT [OR UPDATE | OR IGNORE] [INTO] table ... | UPDATE table ... | DELETE [FROM] table ...
//! ```
//!
//! In PostgreSQL-dialect databases the functions are `spanner.receive_<q>(...)` and
//! `spanner.renewlease_<q>(...)`, `RECEIVE` also takes positional arguments in the documented
//! order `(max_batch_size, priority, max_duration)`, parameters are `$1` (reported as `p1`),
//! and unquoted names are folded to lower case.
//!
//! # Choices where the platform is not documented
//!
//! - GoogleSQL `RECEIVE_<Q>` takes named arguments only: the documentation shows no positional
//!   form, so positional arguments are refused with a message naming the arguments.
//! - `max_duration` accepts Go-style duration strings (`'20m'`, `'1m30s'`, `'10s'`,
//!   `'500ms'`, `'1h'`, `'1.5s'`, units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`); zero and
//!   negative durations are refused. `NULL` and an omitted argument both mean "the default",
//!   which is the caller's choice.
//! - `max_batch_size` must be a positive integer; `NULL` means the default.
//! - `priority` (documented only as a PostgreSQL positional argument) accepts an integer, a
//!   parameter or `NULL`, in both dialects.
//! - Lease tokens may be string or bytes literals (the token type is unconfirmed); a `NULL`
//!   element is reported as the empty token, which matches no lease.
//! - Only a single queue function as the only table of a plain `SELECT`, with an optional
//!   `WHERE`, is supported; joins, subqueries, `ORDER BY`, `LIMIT`, expressions and aliases
//!   in the select list are refused as unsupported by the emulator.
//! - DML is classified by its leading verb and first target table; statements that start with
//!   `WITH` (or anything else) are [`Classified::Other`].

use std::time::Duration;

use spanner_queues_sql::{Lexer, Token, contains_ignore_case, skip_hints, tokenize};

pub(crate) use self::args::parse_duration;
use self::dml::{classify_dml, dml_verb_and_target};
pub(crate) use self::dml::{names_identifier, strip_assert_rows_modified};
use self::functions::{classify_call, find_calls};
pub(crate) use spanner_queues_sql::Dialect;

mod args;
mod dml;
mod functions;
#[cfg(test)]
mod tests;

/// Prefix of the receive function of a queue in GoogleSQL (`RECEIVE_<Q>`), case-insensitive.
pub(crate) const RECEIVE_PREFIX: &str = "RECEIVE_";
/// Prefix of the lease renewal function of a queue in GoogleSQL (`RENEWLEASE_<Q>`).
pub(crate) const RENEW_LEASE_PREFIX: &str = "RENEWLEASE_";

/// What a statement is, as far as queues are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Classified {
    /// `SELECT <projection> FROM RECEIVE_<Q>(args)` (GoogleSQL), or
    /// `SELECT ... FROM spanner.receive_<q>(...)` (PostgreSQL).
    Receive(ReceiveQuery),
    /// `SELECT <projection> FROM RENEWLEASE_<Q>(lease_tokens => <tokens>)` (named or positional).
    RenewLease(RenewQuery),
    /// A DML statement and its target table.
    Dml {
        /// The DML verb.
        kind: DmlKind,
        /// The target table, unquoted; dotted when schema-qualified (`sch.T`).
        table: String,
    },
    /// Anything else: pass it through untouched.
    Other,
}

/// The verb of a DML statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DmlKind {
    /// `INSERT [INTO]` (PostgreSQL: without `ON CONFLICT`).
    Insert,
    /// `INSERT OR UPDATE` (PostgreSQL: `ON CONFLICT ... DO UPDATE`).
    InsertOrUpdate,
    /// `INSERT OR IGNORE` (PostgreSQL: `ON CONFLICT ... DO NOTHING`).
    InsertOrIgnore,
    /// `UPDATE`.
    Update,
    /// `DELETE [FROM]`.
    Delete,
}

/// A function argument: a literal value, or a query parameter to resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ArgValue<T> {
    /// A literal, already checked and converted.
    Literal(T),
    /// A query parameter, by the name it has in the request's `params` (`@d` → `d`, `$1` → `p1`).
    /// The value still has to be checked (with [`parse_duration`] for durations).
    Param(String),
}

/// The select list of a queue function query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Projection {
    /// `*` (or `alias.*`).
    All,
    /// Plain column names, in order, qualifiers removed. Names are not checked against the
    /// function's output here.
    Columns(Vec<String>),
}

/// A `RECEIVE_<Q>` query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReceiveQuery {
    /// The queue, spelled as in the function name (`RECEIVE_UserTasks` → `UserTasks`).
    pub(crate) queue: String,
    /// The select list.
    pub(crate) projection: Projection,
    /// `max_duration`; `None` when omitted or `NULL`.
    pub(crate) max_duration: Option<ArgValue<Duration>>,
    /// `max_batch_size` (positive); `None` when omitted or `NULL`.
    pub(crate) max_batch_size: Option<ArgValue<i64>>,
    /// `priority` [?]; `None` when omitted or `NULL`.
    pub(crate) priority: Option<ArgValue<i64>>,
    /// The text of the `WHERE` condition (without `WHERE`), as written.
    pub(crate) filter: Option<String>,
}

/// A `RENEWLEASE_<Q>` query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenewQuery {
    /// The queue, spelled as in the function name.
    pub(crate) queue: String,
    /// The select list.
    pub(crate) projection: Projection,
    /// The lease tokens to renew.
    pub(crate) tokens: TokensArg,
}

/// The `lease_tokens` argument of `RENEWLEASE_<Q>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokensArg {
    /// An array of literals: `['a', 'b']`, `ARRAY<STRING>['a']` (also `NULL` → no tokens).
    Literals(Vec<String>),
    /// One array parameter: `@tokens` / `$1`.
    Param(String),
    /// An array of parameters: `[@t1, @t2]`.
    Params(Vec<String>),
    /// An array mixing literals and parameters: `['a', @t]`.
    Mixed(Vec<ArgValue<String>>),
}

/// The gRPC status class of a [`SqlError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SqlErrorCode {
    /// `INVALID_ARGUMENT`: the query is wrong for Cloud Spanner too.
    InvalidArgument,
    /// `UNIMPLEMENTED`: the query may be valid, but the emulator does not support its shape.
    Unimplemented,
}

/// Why a queue function query cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SqlError {
    /// The query around the function has a shape the emulator does not support.
    #[error("{function}: {detail} is not supported by the spanner-queues emulator")]
    Unsupported {
        /// The function as written, e.g. `RECEIVE_UserTasks`.
        function: String,
        /// What is not supported.
        detail: String,
    },
    /// Positional arguments where only named ones are accepted.
    #[error(
        "{function} takes named arguments only, e.g. {function}(max_duration => '20m', \
         max_batch_size => 20)"
    )]
    PositionalArgument {
        /// The function as written.
        function: String,
    },
    /// An argument name the function does not have.
    #[error("{function} has no argument named {argument}; its arguments are {expected}")]
    UnknownArgument {
        /// The function as written.
        function: String,
        /// The argument as written.
        argument: String,
        /// The argument names it has.
        expected: &'static str,
    },
    /// The same argument given twice.
    #[error("Argument {argument} of {function} is given more than once")]
    DuplicateArgument {
        /// The function as written.
        function: String,
        /// The argument.
        argument: String,
    },
    /// A required argument is missing.
    #[error("{function} requires the argument {argument}")]
    MissingArgument {
        /// The function as written.
        function: String,
        /// The argument.
        argument: &'static str,
    },
    /// An argument value of the wrong type or out of range.
    #[error("Invalid value for argument {argument} of {function}: {reason}")]
    InvalidArgument {
        /// The function as written.
        function: String,
        /// The argument.
        argument: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// The query is invalid (wrong for Cloud Spanner too).
    #[error("{function}: {reason}")]
    InvalidQuery {
        /// The function as written.
        function: String,
        /// What is wrong.
        reason: String,
    },
    /// A duration string that cannot be parsed (from [`parse_duration`]).
    #[error("Invalid duration {value:?}: {reason}")]
    InvalidDuration {
        /// The string as given.
        value: String,
        /// What is wrong.
        reason: String,
    },
}

impl SqlError {
    /// The gRPC status class to report this error with.
    pub(crate) fn code(&self) -> SqlErrorCode {
        match self {
            SqlError::Unsupported { .. } => SqlErrorCode::Unimplemented,
            _ => SqlErrorCode::InvalidArgument,
        }
    }
}

/// Classifies one SQL statement.
///
/// # Errors
/// A [`SqlError`] when the statement calls a queue function in a way that cannot be served.
/// Statements the classifier cannot understand otherwise (including ones that do not
/// tokenize) are [`Classified::Other`], for the backend to judge.
pub(crate) fn classify(sql: &str, dialect: Dialect) -> Result<Classified, SqlError> {
    /// Enough leading tokens for `INSERT OR UPDATE INTO a.b.c`.
    const DML_HEAD: usize = 12;
    let Some(head) = head_tokens(sql, dialect, DML_HEAD) else {
        return Ok(Classified::Other);
    };
    let dml = head
        .first()
        .is_some_and(|t| ["INSERT", "UPDATE", "DELETE"].iter().any(|v| t.is_word(v)));
    let mentions_function = mentions_queue_function(sql);
    if !mentions_function {
        // The common case: decided from the first tokens. PostgreSQL's ON CONFLICT clause
        // needs the whole INSERT.
        if !dml {
            return Ok(Classified::Other);
        }
        if dialect == Dialect::GoogleSql || !head[0].is_word("INSERT") {
            return Ok(classify_dml(&head, dialect).unwrap_or(Classified::Other));
        }
    }
    let Ok(toks) = tokenize(sql, dialect) else {
        return Ok(Classified::Other);
    };
    let start = skip_hints(&toks, 0);
    let body = &toks[start..];
    let mut calls = find_calls(body, dialect);
    if dml {
        // `INSERT INTO RECEIVE_Log (Id) …`: the target table followed by its column list is not
        // a call of a queue function.
        if let Some((_, target)) = dml_verb_and_target(body, dialect) {
            calls.retain(|call| call.start != target);
        }
    }
    if let Some(call) = calls.first() {
        if dml {
            return Err(SqlError::Unsupported {
                function: call.written.clone(),
                detail: "calling a queue function inside a DML statement".to_owned(),
            });
        }
        if calls.len() > 1 {
            return Err(SqlError::Unsupported {
                function: calls[1].written.clone(),
                detail: "more than one queue function in a query".to_owned(),
            });
        }
        return classify_call(sql, body, call, dialect);
    }
    if dml {
        return Ok(classify_dml(body, dialect).unwrap_or(Classified::Other));
    }
    Ok(Classified::Other)
}

/// The first `n` tokens of the statement after comments and leading statement hints
/// (`@{...}`), without tokenizing the rest; `None` if they do not tokenize.
fn head_tokens(sql: &str, dialect: Dialect, n: usize) -> Option<Vec<Token<'_>>> {
    let mut lexer = Lexer::new(sql, dialect);
    let mut head = Vec::with_capacity(n);
    let mut depth = 0usize;
    let mut after_at = false;
    while head.len() < n {
        let Some(t) = lexer.next() else {
            break;
        };
        let t = t.ok()?;
        if !head.is_empty() {
            head.push(t);
            continue;
        }
        if depth > 0 {
            if t.is_punct("{") {
                depth += 1;
            } else if t.is_punct("}") {
                depth -= 1;
            }
        } else if after_at && t.is_punct("{") {
            depth = 1;
        } else if t.is_punct("@") {
            after_at = true;
            continue;
        } else {
            head.push(t);
        }
        after_at = false;
    }
    Some(head)
}

/// Whether `receive_` or `renewlease_` (any case) occurs anywhere in `sql`: a fast test that
/// lets most statements skip tokenizing.
fn mentions_queue_function(sql: &str) -> bool {
    contains_ignore_case(sql, RECEIVE_PREFIX) || contains_ignore_case(sql, RENEW_LEASE_PREFIX)
}
