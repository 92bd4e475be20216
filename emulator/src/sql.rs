//! Statement classification for the emulator front: which queries call the queue table-valued
//! functions (`RECEIVE_<Q>`, `RENEWLEASE_<Q>`), and which statements are DML on which table.
//!
//! [`classify`] runs on every statement the front forwards, so statements that neither start
//! with a DML verb nor mention a queue function anywhere are answered from a substring test and
//! the first word, without tokenizing the whole text. Everything else is tokenized with
//! [`crate::lexer`], so comments, literals, quoted identifiers and hints cannot confuse it.
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

pub(crate) use spanner_queues_sql::Dialect;
use spanner_queues_sql::{
    Lexer, Token, TokenKind, is_google_sql_reserved as is_reserved, split_commas, tokenize,
};

/// Prefix of the receive function of a queue in GoogleSQL (`RECEIVE_<Q>`), case-insensitive.
pub(crate) const RECEIVE_PREFIX: &str = "RECEIVE_";
/// Prefix of the lease renewal function of a queue in GoogleSQL (`RENEWLEASE_<Q>`).
pub(crate) const RENEW_LEASE_PREFIX: &str = "RENEWLEASE_";
/// Schema of the queue functions in PostgreSQL (`spanner.receive_<q>`).
const POSTGRES_FUNCTION_SCHEMA: &str = "spanner";

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
        reason: &'static str,
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
    let bytes = sql.as_bytes();
    let ends_with = |end: usize, word: &[u8]| {
        end >= word.len() && bytes[end - word.len()..end].eq_ignore_ascii_case(word)
    };
    bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'_' && (ends_with(i, b"receive") || ends_with(i, b"renewlease")))
}

/// The index after any hints (`@{...}`) starting at `i`.
fn skip_hints(toks: &[Token<'_>], mut i: usize) -> usize {
    while toks.get(i).is_some_and(|t| t.is_punct("@"))
        && toks.get(i + 1).is_some_and(|t| t.is_punct("{"))
    {
        let mut depth = 0usize;
        let mut j = i + 1;
        while let Some(t) = toks.get(j) {
            if t.is_punct("{") {
                depth += 1;
            } else if t.is_punct("}") {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            j += 1;
        }
        i = j + 1;
    }
    i.min(toks.len())
}

/// The name value of an identifier token, folded to lower case for unquoted PostgreSQL names.
fn name_of(t: &Token<'_>, dialect: Dialect) -> String {
    if dialect == Dialect::PostgreSql && t.kind == TokenKind::Word {
        t.value.to_lowercase()
    } else {
        t.value.clone().into_owned()
    }
}

/// Which queue function a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FunctionKind {
    /// `RECEIVE_<Q>`.
    Receive,
    /// `RENEWLEASE_<Q>`.
    RenewLease,
}

/// A call of a queue function found in a statement.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    /// Index of the first token of the function name (`spanner` in PostgreSQL).
    start: usize,
    /// Index of the `(` that opens the arguments.
    open: usize,
    /// Which function.
    kind: FunctionKind,
    /// The queue name.
    queue: String,
    /// The function name as written, for messages.
    written: String,
}

/// Finds the calls of queue functions in `toks`.
fn find_calls(toks: &[Token<'_>], dialect: Dialect) -> Vec<Call> {
    let mut calls = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        if !t.is_ident() || !toks.get(i + 1).is_some_and(|n| n.is_punct("(")) {
            continue;
        }
        let qualified = i >= 2
            && toks[i - 1].is_punct(".")
            && toks[i - 2].is_ident()
            && toks[i - 2]
                .value
                .eq_ignore_ascii_case(POSTGRES_FUNCTION_SCHEMA);
        let start = match dialect {
            // `x.RECEIVE_Q(` is not the GoogleSQL function.
            Dialect::GoogleSql if i >= 1 && toks[i - 1].is_punct(".") => continue,
            Dialect::GoogleSql => i,
            Dialect::PostgreSql if qualified => i - 2,
            Dialect::PostgreSql => continue,
        };
        let name = name_of(t, dialect);
        let split = |prefix: &str| {
            name.get(..prefix.len())
                .filter(|head| head.eq_ignore_ascii_case(prefix))
                .and_then(|_| name.get(prefix.len()..))
                .filter(|queue| !queue.is_empty())
                .map(str::to_owned)
        };
        let (kind, queue) = match (split(RECEIVE_PREFIX), split(RENEW_LEASE_PREFIX)) {
            (Some(queue), _) => (FunctionKind::Receive, queue),
            (None, Some(queue)) => (FunctionKind::RenewLease, queue),
            (None, None) => continue,
        };
        let written = toks[start..=i].iter().map(|t| t.text).collect::<String>();
        calls.push(Call {
            start,
            open: i + 1,
            kind,
            queue,
            written,
        });
    }
    calls
}

/// Classifies `SELECT ... FROM <call> ...`.
fn classify_call(
    sql: &str,
    toks: &[Token<'_>],
    call: &Call,
    dialect: Dialect,
) -> Result<Classified, SqlError> {
    let function = call.written.as_str();
    let unsupported = |detail: &str| SqlError::Unsupported {
        function: function.to_owned(),
        detail: detail.to_owned(),
    };
    let shape = "only `SELECT <columns> FROM <function>(...) [WHERE ...]`: any other query shape";
    if !toks.first().is_some_and(|t| t.is_word("SELECT")) {
        return Err(unsupported(shape));
    }
    // The select list runs up to the first FROM outside parentheses.
    let mut depth = 0i32;
    let mut from = None;
    for (i, t) in toks.iter().enumerate().skip(1) {
        if t.is_punct("(") || t.is_punct("[") {
            depth += 1;
        } else if t.is_punct(")") || t.is_punct("]") {
            depth -= 1;
        } else if depth == 0 && t.is_word("FROM") {
            from = Some(i);
            break;
        }
    }
    let Some(from) = from.filter(|&f| f + 1 == call.start) else {
        return Err(unsupported(shape));
    };
    let close = matching_paren(toks, call.open).ok_or_else(|| SqlError::InvalidQuery {
        function: function.to_owned(),
        reason: "the argument list is not closed".to_owned(),
    })?;
    let args = split_commas(&toks[call.open + 1..close]);

    // After the call: [[AS] alias] [@{hint}] [WHERE ...] [;]
    let mut i = close + 1;
    let mut alias = None;
    if toks.get(i).is_some_and(|t| t.is_word("AS")) {
        i += 1;
        match toks.get(i) {
            Some(t) if t.is_ident() => alias = Some(name_of(t, dialect)),
            _ => {
                return Err(SqlError::InvalidQuery {
                    function: function.to_owned(),
                    reason: "AS must be followed by an alias".to_owned(),
                });
            }
        }
        i += 1;
    } else if let Some(t) = toks.get(i).filter(|t| {
        t.kind == TokenKind::QuotedIdent || t.kind == TokenKind::Word && !is_keyword(t.text)
    }) {
        alias = Some(name_of(t, dialect));
        i += 1;
    }
    i = skip_hints(toks, i);
    let mut end = toks.len();
    if toks.last().is_some_and(|t| t.is_punct(";")) {
        end -= 1;
    }
    let mut filter = None;
    if i < end && toks[i].is_word("WHERE") {
        if i + 1 >= end {
            return Err(SqlError::InvalidQuery {
                function: function.to_owned(),
                reason: "WHERE must be followed by a condition".to_owned(),
            });
        }
        filter = Some(sql[toks[i + 1].start..toks[end - 1].end()].to_owned());
        i = end;
    }
    if i < end {
        return Err(unsupported(&format!(
            "`{}` after the function call (the emulator supports only an alias and a WHERE \
             clause there)",
            toks[i].text
        )));
    }

    let qualifier = alias.unwrap_or_else(|| name_of(&toks[call.open - 1], dialect));
    let projection = parse_projection(&toks[1..from], &qualifier, function, dialect)?;
    match call.kind {
        FunctionKind::Receive => {
            let mut query = receive_args(&args, function, dialect)?;
            query.queue = call.queue.clone();
            query.projection = projection;
            query.filter = filter;
            Ok(Classified::Receive(query))
        }
        FunctionKind::RenewLease => {
            if filter.is_some() {
                return Err(unsupported("a WHERE clause on lease renewal"));
            }
            Ok(Classified::RenewLease(RenewQuery {
                queue: call.queue.clone(),
                projection,
                tokens: renew_args(&args, function)?,
            }))
        }
    }
}

/// Whether an unquoted word cannot be an alias (a reserved keyword, or a clause keyword).
fn is_keyword(word: &str) -> bool {
    is_reserved(word)
        || ["OFFSET", "QUALIFY", "TABLESAMPLE", "RETURNING"]
            .iter()
            .any(|k| word.eq_ignore_ascii_case(k))
}

/// The index of the `)` that closes the `(` at `open`.
fn matching_paren(toks: &[Token<'_>], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(open) {
        if t.is_punct("(") {
            depth += 1;
        } else if t.is_punct(")") {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// Parses the select list of a queue function query.
fn parse_projection(
    toks: &[Token<'_>],
    qualifier: &str,
    function: &str,
    dialect: Dialect,
) -> Result<Projection, SqlError> {
    let unsupported = || SqlError::Unsupported {
        function: function.to_owned(),
        detail: format!(
            "the select list `{}` (the emulator supports `*` or a list of column names)",
            toks.iter().map(|t| t.text).collect::<Vec<_>>().join(" ")
        ),
    };
    let check_qualifier = |t: &Token<'_>| {
        let name = name_of(t, dialect);
        if name.eq_ignore_ascii_case(qualifier) {
            Ok(())
        } else {
            Err(SqlError::InvalidQuery {
                function: function.to_owned(),
                reason: format!("unrecognized name: {name}"),
            })
        }
    };
    match toks {
        [star] if star.is_punct("*") => return Ok(Projection::All),
        [q, dot, star] if q.is_ident() && dot.is_punct(".") && star.is_punct("*") => {
            check_qualifier(q)?;
            return Ok(Projection::All);
        }
        _ => {}
    }
    let mut columns = Vec::new();
    let items = split_commas(toks);
    for (n, item) in items.iter().enumerate() {
        match *item {
            [] if n + 1 == items.len() && n > 0 => {}
            [c] if c.is_ident() => columns.push(name_of(c, dialect)),
            [q, dot, c] if q.is_ident() && dot.is_punct(".") && c.is_ident() => {
                check_qualifier(q)?;
                columns.push(name_of(c, dialect));
            }
            _ => return Err(unsupported()),
        }
    }
    if columns.is_empty() {
        return Err(unsupported());
    }
    Ok(Projection::Columns(columns))
}

/// An argument value, as far as the queue functions need to understand it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ArgExpr {
    /// `NULL`.
    Null,
    /// A string literal.
    Str(String),
    /// A bytes literal (decoded lossily).
    Bytes(String),
    /// An integer literal (with an optional sign).
    Int(i64),
    /// A query parameter.
    Param(String),
    /// An array literal.
    Array(Vec<ArgExpr>),
    /// Anything else, as written.
    Other(String),
}

/// Parses an argument value.
fn arg_expr(toks: &[Token<'_>]) -> ArgExpr {
    let other = || ArgExpr::Other(toks.iter().map(|t| t.text).collect::<Vec<_>>().join(" "));
    match toks {
        [t] if t.is_word("NULL") => ArgExpr::Null,
        [t] if t.kind == TokenKind::String => ArgExpr::Str(t.value.clone().into_owned()),
        [t] if t.kind == TokenKind::Bytes => ArgExpr::Bytes(t.value.clone().into_owned()),
        [t] if t.kind == TokenKind::Param => ArgExpr::Param(t.value.clone().into_owned()),
        [t] if t.kind == TokenKind::Number => {
            parse_int(t.text, false).map_or_else(other, ArgExpr::Int)
        }
        [sign, t] if sign.is_punct("-") && t.kind == TokenKind::Number => {
            parse_int(t.text, true).map_or_else(other, ArgExpr::Int)
        }
        _ => {
            // [ ... ], ARRAY[ ... ], ARRAY<T>[ ... ]
            let mut i = 0;
            if toks.first().is_some_and(|t| t.is_word("ARRAY")) {
                i = 1;
                if toks.get(1).is_some_and(|t| t.is_punct("<")) {
                    match toks.iter().position(|t| t.is_punct(">")) {
                        Some(close) => i = close + 1,
                        None => return other(),
                    }
                }
            }
            let is_array = toks.get(i).is_some_and(|t| t.is_punct("["))
                && toks.last().is_some_and(|t| t.is_punct("]"))
                && i + 1 < toks.len();
            if !is_array {
                return other();
            }
            let inner = &toks[i + 1..toks.len() - 1];
            let elements = split_commas(inner);
            if elements.iter().any(|e| e.is_empty()) {
                return other();
            }
            ArgExpr::Array(elements.into_iter().map(arg_expr).collect())
        }
    }
}

/// Parses an integer literal (decimal or hexadecimal).
fn parse_int(text: &str, negative: bool) -> Option<i64> {
    let magnitude: i128 = match text.get(..2) {
        Some(p) if p.eq_ignore_ascii_case("0x") => i128::from_str_radix(&text[2..], 16).ok()?,
        _ => text.parse().ok()?,
    };
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// One argument of a call: its name (for `name => value`) and its value tokens.
fn split_named<'t, 's>(arg: &'t [Token<'s>]) -> (Option<&'t Token<'s>>, &'t [Token<'s>]) {
    match arg {
        [name, arrow, value @ ..] if name.is_ident() && arrow.is_punct("=>") => (Some(name), value),
        _ => (None, arg),
    }
}

/// Reads the arguments of a receive call (queue, projection and filter are left empty).
fn receive_args(
    args: &[&[Token<'_>]],
    function: &str,
    dialect: Dialect,
) -> Result<ReceiveQuery, SqlError> {
    /// The argument names, in the PostgreSQL positional order.
    const NAMES: [&str; 3] = ["max_batch_size", "priority", "max_duration"];
    let mut query = ReceiveQuery {
        queue: String::new(),
        projection: Projection::All,
        max_duration: None,
        max_batch_size: None,
        priority: None,
        filter: None,
    };
    let mut seen = [false; 3];
    let mut named_seen = false;
    for (position, arg) in args.iter().enumerate() {
        let (name, value) = split_named(arg);
        let slot = match name {
            Some(name) => {
                named_seen = true;
                let written = name.value.as_ref();
                NAMES
                    .iter()
                    .position(|n| n.eq_ignore_ascii_case(written))
                    .ok_or_else(|| SqlError::UnknownArgument {
                        function: function.to_owned(),
                        argument: written.to_owned(),
                        expected: "max_duration, max_batch_size and priority",
                    })?
            }
            None if dialect == Dialect::GoogleSql => {
                return Err(SqlError::PositionalArgument {
                    function: function.to_owned(),
                });
            }
            None if named_seen || position >= NAMES.len() => {
                return Err(SqlError::InvalidQuery {
                    function: function.to_owned(),
                    reason: "positional arguments must come first, and there are at most \
                             three: (max_batch_size, priority, max_duration)"
                        .to_owned(),
                });
            }
            None => position,
        };
        if seen[slot] {
            return Err(SqlError::DuplicateArgument {
                function: function.to_owned(),
                argument: NAMES[slot].to_owned(),
            });
        }
        seen[slot] = true;
        let invalid = |reason: &str| SqlError::InvalidArgument {
            function: function.to_owned(),
            argument: NAMES[slot].to_owned(),
            reason: reason.to_owned(),
        };
        let expr = arg_expr(value);
        match (slot, expr) {
            (_, ArgExpr::Null) => {}
            (0, ArgExpr::Int(n)) if n > 0 => query.max_batch_size = Some(ArgValue::Literal(n)),
            (0, ArgExpr::Param(p)) => query.max_batch_size = Some(ArgValue::Param(p)),
            (0, _) => {
                return Err(invalid(
                    "expected a positive integer, a query parameter or NULL",
                ));
            }
            (1, ArgExpr::Int(n)) => query.priority = Some(ArgValue::Literal(n)),
            (1, ArgExpr::Param(p)) => query.priority = Some(ArgValue::Param(p)),
            (1, _) => return Err(invalid("expected an integer, a query parameter or NULL")),
            (_, ArgExpr::Str(s)) => {
                let duration = parse_duration(&s).map_err(|e| invalid(&e.to_string()))?;
                query.max_duration = Some(ArgValue::Literal(duration));
            }
            (_, ArgExpr::Param(p)) => query.max_duration = Some(ArgValue::Param(p)),
            (_, _) => {
                return Err(invalid(
                    "expected a duration string such as '20m', a query parameter or NULL",
                ));
            }
        }
    }
    Ok(query)
}

/// Reads the `lease_tokens` argument of a renew call.
fn renew_args(args: &[&[Token<'_>]], function: &str) -> Result<TokensArg, SqlError> {
    let arg = match args {
        [] => {
            return Err(SqlError::MissingArgument {
                function: function.to_owned(),
                argument: "lease_tokens",
            });
        }
        [arg] => *arg,
        _ => {
            return Err(SqlError::InvalidQuery {
                function: function.to_owned(),
                reason: "it takes one argument, lease_tokens".to_owned(),
            });
        }
    };
    let (name, value) = split_named(arg);
    if let Some(name) = name.filter(|n| !n.value.eq_ignore_ascii_case("lease_tokens")) {
        return Err(SqlError::UnknownArgument {
            function: function.to_owned(),
            argument: name.value.clone().into_owned(),
            expected: "lease_tokens",
        });
    }
    let invalid = || SqlError::InvalidArgument {
        function: function.to_owned(),
        argument: "lease_tokens".to_owned(),
        reason: "expected an array of lease tokens, e.g. ['token1', 'token2'], or an array \
                 query parameter"
            .to_owned(),
    };
    match arg_expr(value) {
        ArgExpr::Param(p) => Ok(TokensArg::Param(p)),
        ArgExpr::Null => Ok(TokensArg::Literals(Vec::new())),
        ArgExpr::Array(elements) => {
            let values = elements
                .into_iter()
                .map(|e| match e {
                    ArgExpr::Str(s) | ArgExpr::Bytes(s) => Ok(ArgValue::Literal(s)),
                    ArgExpr::Null => Ok(ArgValue::Literal(String::new())),
                    ArgExpr::Param(p) => Ok(ArgValue::Param(p)),
                    _ => Err(invalid()),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let literals: Option<Vec<String>> = values
                .iter()
                .map(|v| match v {
                    ArgValue::Literal(s) => Some(s.clone()),
                    ArgValue::Param(_) => None,
                })
                .collect();
            let params: Option<Vec<String>> = values
                .iter()
                .map(|v| match v {
                    ArgValue::Param(p) => Some(p.clone()),
                    ArgValue::Literal(_) => None,
                })
                .collect();
            Ok(match (literals, params) {
                (Some(literals), _) => TokensArg::Literals(literals),
                (None, Some(params)) => TokensArg::Params(params),
                (None, None) => TokensArg::Mixed(values),
            })
        }
        _ => Err(invalid()),
    }
}

/// The verb of a DML statement and the index of the first token of its target table.
fn dml_verb_and_target(toks: &[Token<'_>], dialect: Dialect) -> Option<(DmlKind, usize)> {
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
fn classify_dml(toks: &[Token<'_>], dialect: Dialect) -> Option<Classified> {
    let (mut kind, mut i) = dml_verb_and_target(toks, dialect)?;
    let mut parts = vec![name_of(toks.get(i).filter(|t| t.is_ident())?, dialect)];
    i += 1;
    while toks.get(i).is_some_and(|t| t.is_punct(".")) {
        parts.push(name_of(toks.get(i + 1).filter(|t| t.is_ident())?, dialect));
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

/// Parses a Go-style duration string such as `20m`, `1m30s`, `10s`, `500ms`, `1h` or `1.5s`.
///
/// Units: `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`; every number needs a unit.
///
/// # Errors
/// [`SqlError::InvalidDuration`] for malformed strings, and for zero or negative durations.
pub(crate) fn parse_duration(value: &str) -> Result<Duration, SqlError> {
    /// Units and their length in nanoseconds; longer spellings first.
    const UNITS: [(&str, u128); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    let invalid = |reason: &'static str| SqlError::InvalidDuration {
        value: value.to_owned(),
        reason,
    };
    let mut rest = value;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if rest.starts_with('-') {
        return Err(invalid("the duration must be positive"));
    }
    if rest.is_empty() {
        return Err(invalid(
            "expected a number and a unit, e.g. '20m' or '1m30s'",
        ));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => {
                let len = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(len)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid(
                "expected a number and a unit, e.g. '20m' or '1m30s'",
            ));
        }
        let Some(&(unit, nanos)) = UNITS.iter().find(|(u, _)| after.starts_with(u)) else {
            return Err(invalid(
                "every number needs a unit: ns, us, ms, s, m or h (e.g. '20m', '1m30s')",
            ));
        };
        rest = &after[unit.len()..];
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse()
                .map_err(|_| invalid("the duration is too long"))?
        };
        let mut part = int
            .checked_mul(nanos)
            .ok_or_else(|| invalid("the duration is too long"))?;
        // Fractional digits beyond nanosecond precision are dropped, as Go does.
        let mut scale = nanos;
        for digit in frac_part.bytes().take(30) {
            scale /= 10;
            part += u128::from(digit - b'0') * scale;
        }
        total = total
            .checked_add(part)
            .filter(|t| *t <= u128::from(u64::MAX))
            .ok_or_else(|| invalid("the duration is too long"))?;
    }
    if total == 0 {
        return Err(invalid("the duration must be positive"));
    }
    let secs =
        u64::try_from(total / 1_000_000_000).map_err(|_| invalid("the duration is too long"))?;
    let nanos =
        u32::try_from(total % 1_000_000_000).map_err(|_| invalid("the duration is too long"))?;
    Ok(Duration::new(secs, nanos))
}

/// A trailing `ASSERT_ROWS_MODIFIED n` of a PostgreSQL DML statement: the statement without
/// it, and `n`. The official emulator's PostgreSQL parser lacks the clause (Cloud Spanner
/// documents it for PostgreSQL [C]), so the front strips it and checks the row count itself.
pub(crate) fn strip_assert_rows_modified(sql: &str, dialect: Dialect) -> Option<(String, i64)> {
    if dialect != Dialect::PostgreSql || !contains_word_ignore_case(sql, "ASSERT_ROWS_MODIFIED") {
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
    if table.kind == TokenKind::Word && is_reserved(table.text) {
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
            || column.kind == TokenKind::Word && is_reserved(column.text)
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
        if column.kind == TokenKind::Word && is_reserved(column.text) {
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

/// Whether `sql` names `name` (an identifier, compared case-insensitively) anywhere; a
/// statement that does not tokenize counts as naming it.
pub(crate) fn names_identifier(sql: &str, dialect: Dialect, name: &str) -> bool {
    if !contains_word_ignore_case(sql, name) {
        return false;
    }
    let Ok(toks) = tokenize(sql, dialect) else {
        return true;
    };
    toks.iter()
        .any(|t| t.is_ident() && t.value.eq_ignore_ascii_case(name))
}

/// Case-insensitive substring test (ASCII), cheap enough to run on every statement.
fn contains_word_ignore_case(haystack: &str, needle: &str) -> bool {
    haystack
        .as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
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

    #[test]
    fn identifiers_are_found_as_tokens() {
        let g = Dialect::GoogleSql;
        assert!(names_identifier(
            "SELECT * FROM jobs WHERE x = 1",
            g,
            "Jobs"
        ));
        assert!(names_identifier("SELECT * FROM `Jobs`", g, "Jobs"));
        assert!(!names_identifier("SELECT 'Jobs' AS Jobsite", g, "Jobs"));
        assert!(!names_identifier(
            "INSERT INTO Effects (Id) VALUES (@id)",
            g,
            "Jobs"
        ));
    }

    #[test]
    fn assert_rows_modified_is_stripped_from_postgresql_dml_only() {
        let pg = Dialect::PostgreSql;
        assert_eq!(
            strip_assert_rows_modified(
                "DELETE FROM q WHERE userid = $1 AND messageid = $2 ASSERT_ROWS_MODIFIED 1;",
                pg
            ),
            Some((
                "DELETE FROM q WHERE userid = $1 AND messageid = $2".to_owned(),
                1
            ))
        );
        assert_eq!(
            strip_assert_rows_modified("DELETE FROM q WHERE id = 1 assert_rows_modified 2", pg),
            Some(("DELETE FROM q WHERE id = 1".to_owned(), 2))
        );
        // Inside a literal, or in GoogleSQL (the backend supports it there): untouched.
        assert_eq!(
            strip_assert_rows_modified("DELETE FROM q WHERE note = 'ASSERT_ROWS_MODIFIED 1'", pg),
            None
        );
        assert_eq!(
            strip_assert_rows_modified(
                "DELETE FROM Q WHERE Id = 1 ASSERT_ROWS_MODIFIED 1",
                Dialect::GoogleSql
            ),
            None
        );
    }

    /// Classifies a GoogleSQL statement that must classify without error.
    fn ok(sql: &str) -> Classified {
        classify(sql, Dialect::GoogleSql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The error of classifying a GoogleSQL statement.
    fn err(sql: &str) -> SqlError {
        match classify(sql, Dialect::GoogleSql) {
            Ok(c) => panic!("{sql} classified as {c:?}"),
            Err(e) => e,
        }
    }

    /// Classifies a statement that must be a receive query.
    fn receive(sql: &str) -> ReceiveQuery {
        match ok(sql) {
            Classified::Receive(q) => q,
            other => panic!("{sql}: {other:?}"),
        }
    }

    /// Classifies a statement that must be a renew query.
    fn renew(sql: &str) -> RenewQuery {
        match ok(sql) {
            Classified::RenewLease(q) => q,
            other => panic!("{sql}: {other:?}"),
        }
    }

    /// A column list projection.
    fn cols(names: &[&str]) -> Projection {
        Projection::Columns(names.iter().map(|n| (*n).to_owned()).collect())
    }

    /// A DML classification.
    fn dml(kind: DmlKind, table: &str) -> Classified {
        Classified::Dml {
            kind,
            table: table.to_owned(),
        }
    }

    #[test]
    fn documented_receive_queries() {
        let q = receive(
            "SELECT UserId, MessageId, Payload, DeliverTime,
                    SpannerLeaseExpirationTimestamp, SpannerLeaseToken
             FROM RECEIVE_UserTasks(max_duration=>'20m');",
        );
        assert_eq!(q.queue, "UserTasks");
        assert_eq!(
            q.projection,
            cols(&[
                "UserId",
                "MessageId",
                "Payload",
                "DeliverTime",
                "SpannerLeaseExpirationTimestamp",
                "SpannerLeaseToken"
            ])
        );
        assert_eq!(
            q.max_duration,
            Some(ArgValue::Literal(Duration::from_secs(20 * 60)))
        );
        assert_eq!(q.max_batch_size, None);
        assert_eq!(q.filter, None);

        let q = receive(
            "SELECT UserId, MessageId, Payload, DeliverTime,
                    SpannerLeaseExpirationTimestamp, SpannerLeaseToken,
                    SpannerLastBatchMessage -- Special boolean column returns TRUE if the
                                            -- last message is in a batch.
             FROM RECEIVE_UserTasks(max_duration=>'20m', max_batch_size=>20)",
        );
        assert_eq!(q.max_batch_size, Some(ArgValue::Literal(20)));
        assert!(matches!(&q.projection, Projection::Columns(c) if c.len() == 7));

        let q = receive("SELECT * FROM RECEIVE_UserTasks(max_duration=>'20m')");
        assert_eq!(q.projection, Projection::All);
    }

    #[test]
    fn receive_arguments() {
        let q = receive(
            "select * from receive_Q(MAX_BATCH_SIZE => @n, Max_Duration => @d, priority => NULL)",
        );
        assert_eq!(q.queue, "Q");
        assert_eq!(q.max_duration, Some(ArgValue::Param("d".to_owned())));
        assert_eq!(q.max_batch_size, Some(ArgValue::Param("n".to_owned())));
        assert_eq!(q.priority, None);
        let q = receive(
            "SELECT * FROM RECEIVE_Q(max_duration => NULL, max_batch_size => NULL, priority => 2)",
        );
        assert_eq!((q.max_duration, q.max_batch_size), (None, None));
        assert_eq!(q.priority, Some(ArgValue::Literal(2)));
        let q = receive("SELECT * FROM RECEIVE_Q()");
        assert_eq!(q.max_duration, None);
        let q =
            receive("SELECT * FROM RECEIVE_Q(max_duration => \"1m30s\", max_batch_size => 0x10)");
        assert_eq!(
            q.max_duration,
            Some(ArgValue::Literal(Duration::from_secs(90)))
        );
        assert_eq!(q.max_batch_size, Some(ArgValue::Literal(16)));
    }

    #[test]
    fn receive_argument_errors() {
        let cases: &[(&str, &str)] = &[
            ("SELECT * FROM RECEIVE_Q('20m')", "positional"),
            (
                "SELECT * FROM RECEIVE_Q(max_duration => '20m', 20)",
                "positional",
            ),
            ("SELECT * FROM RECEIVE_Q(timeout => '20m')", "unknown"),
            (
                "SELECT * FROM RECEIVE_Q(max_duration => '1m', MAX_DURATION => '2m')",
                "duplicate",
            ),
            ("SELECT * FROM RECEIVE_Q(max_duration => 20)", "invalid"),
            ("SELECT * FROM RECEIVE_Q(max_duration => '20')", "invalid"),
            ("SELECT * FROM RECEIVE_Q(max_duration => '0s')", "invalid"),
            ("SELECT * FROM RECEIVE_Q(max_duration => '-5s')", "invalid"),
            (
                "SELECT * FROM RECEIVE_Q(max_duration => INTERVAL 5 MINUTE)",
                "invalid",
            ),
            ("SELECT * FROM RECEIVE_Q(max_batch_size => 0)", "invalid"),
            ("SELECT * FROM RECEIVE_Q(max_batch_size => -3)", "invalid"),
            ("SELECT * FROM RECEIVE_Q(max_batch_size => '20')", "invalid"),
            ("SELECT * FROM RECEIVE_Q(max_batch_size => 1.5)", "invalid"),
            (
                "SELECT * FROM RECEIVE_Q(max_batch_size => 99999999999999999999)",
                "invalid",
            ),
            ("SELECT * FROM RECEIVE_Q(priority => 'HIGH')", "invalid"),
        ];
        for (sql, kind) in cases {
            let e = err(sql);
            let matches = match *kind {
                "positional" => matches!(e, SqlError::PositionalArgument { .. }),
                "unknown" => matches!(e, SqlError::UnknownArgument { .. }),
                "duplicate" => matches!(e, SqlError::DuplicateArgument { .. }),
                _ => matches!(e, SqlError::InvalidArgument { .. }),
            };
            assert!(matches, "{sql}: {e:?}");
            assert_eq!(e.code(), SqlErrorCode::InvalidArgument, "{sql}");
            assert!(e.to_string().contains("RECEIVE_Q"), "{sql}: {e}");
        }
    }

    #[test]
    fn projections_aliases_hints_and_filters() {
        let q = receive(
            "SELECT r.Payload, r.`UserId`, SpannerLeaseToken, FROM RECEIVE_Q(max_duration => '1m') AS r",
        );
        assert_eq!(
            q.projection,
            cols(&["Payload", "UserId", "SpannerLeaseToken"])
        );
        let q = receive(
            "SELECT m.* FROM RECEIVE_Q(max_duration => '1m') m WHERE m.UserId = 5 AND Payload IS NOT NULL;",
        );
        assert_eq!(q.projection, Projection::All);
        assert_eq!(
            q.filter.as_deref(),
            Some("m.UserId = 5 AND Payload IS NOT NULL")
        );
        let q = receive("SELECT RECEIVE_Q.Payload FROM RECEIVE_Q(max_duration => '1m')");
        assert_eq!(q.projection, cols(&["Payload"]));
        let q = receive(
            "@{USE_ADDITIONAL_PARALLELISM=TRUE} /* c */ SELECT * FROM RECEIVE_Q(max_duration => '1m') \
             @{FORCE_INDEX=_BASE_TABLE} WHERE Payload = b'x' -- trailing comment\n",
        );
        assert_eq!(q.filter.as_deref(), Some("Payload = b'x'"));
        let q = receive("SELECT * FROM `RECEIVE_Odd Name`(max_duration => '1m')");
        assert_eq!(q.queue, "Odd Name");
        assert_eq!(
            err("SELECT x.Payload FROM RECEIVE_Q(max_duration => '1m') AS r").code(),
            SqlErrorCode::InvalidArgument
        );
    }

    #[test]
    fn unsupported_shapes_are_refused() {
        for sql in [
            "SELECT Payload || 'x' FROM RECEIVE_Q(max_duration => '1m')",
            "SELECT Payload AS p FROM RECEIVE_Q(max_duration => '1m')",
            "SELECT COUNT(*) FROM RECEIVE_Q(max_duration => '1m')",
            "SELECT DISTINCT Payload FROM RECEIVE_Q(max_duration => '1m')",
            "SELECT * EXCEPT (Payload) FROM RECEIVE_Q(max_duration => '1m')",
            "SELECT * FROM RECEIVE_Q(max_duration => '1m') ORDER BY DeliverTime",
            "SELECT * FROM RECEIVE_Q(max_duration => '1m') LIMIT 5",
            "SELECT * FROM RECEIVE_Q(max_duration => '1m') r JOIN Users u ON r.UserId = u.UserId",
            "SELECT * FROM Users, RECEIVE_Q(max_duration => '1m')",
            "SELECT * FROM (SELECT * FROM RECEIVE_Q(max_duration => '1m'))",
            "WITH r AS (SELECT * FROM RECEIVE_Q(max_duration => '1m')) SELECT * FROM r",
            "SELECT (SELECT COUNT(*) FROM RECEIVE_Q(max_duration => '1m'))",
            "SELECT * FROM RECEIVE_Q(max_duration => '1m') UNION ALL SELECT * FROM RECEIVE_Q(max_duration => '1m')",
            "INSERT INTO T SELECT * FROM RECEIVE_Q(max_duration => '1m')",
            "SELECT * FROM RECEIVE_Q(max_duration => '1m'); SELECT 1",
            "SELECT * FROM RENEWLEASE_Q(['a']) WHERE SpannerNewLeaseToken IS NULL",
        ] {
            let e = err(sql);
            assert!(matches!(e, SqlError::Unsupported { .. }), "{sql}: {e:?}");
            assert_eq!(e.code(), SqlErrorCode::Unimplemented);
            assert!(
                e.to_string()
                    .contains("not supported by the spanner-queues emulator")
            );
        }
    }

    #[test]
    fn renew_lease_forms() {
        let r = renew("SELECT * FROM RENEWLEASE_UserTasks(lease_tokens => ['token1', 'token2'])");
        assert_eq!(r.queue, "UserTasks");
        assert_eq!(r.projection, Projection::All);
        assert_eq!(
            r.tokens,
            TokensArg::Literals(vec!["token1".to_owned(), "token2".to_owned()])
        );
        let r = renew("SELECT * FROM RENEWLEASE_UserTasks(lease_tokens => [@token1])");
        assert_eq!(r.tokens, TokensArg::Params(vec!["token1".to_owned()]));
        let r = renew("SELECT * FROM RENEWLEASE_ReportQueue(['tok'])");
        assert_eq!(r.queue, "ReportQueue");
        assert_eq!(r.tokens, TokensArg::Literals(vec!["tok".to_owned()]));
        let r = renew("select SpannerNewLeaseToken from renewlease_q(@tokens)");
        assert_eq!(r.projection, cols(&["SpannerNewLeaseToken"]));
        assert_eq!(r.tokens, TokensArg::Param("tokens".to_owned()));
        let r = renew(
            "SELECT * FROM RENEWLEASE_Q(LEASE_TOKENS => ARRAY<STRING>['a', r'b\\c', b'x', NULL])",
        );
        assert_eq!(
            r.tokens,
            TokensArg::Literals(vec![
                "a".to_owned(),
                "b\\c".to_owned(),
                "x".to_owned(),
                String::new()
            ])
        );
        let r = renew("SELECT * FROM RENEWLEASE_Q(lease_tokens => ['a', @b])");
        assert_eq!(
            r.tokens,
            TokensArg::Mixed(vec![
                ArgValue::Literal("a".to_owned()),
                ArgValue::Param("b".to_owned())
            ])
        );
        let r = renew("SELECT * FROM RENEWLEASE_Q(lease_tokens => [])");
        assert_eq!(r.tokens, TokensArg::Literals(Vec::new()));
        let r = renew("SELECT * FROM RENEWLEASE_Q(lease_tokens => ARRAY['a'])");
        assert_eq!(r.tokens, TokensArg::Literals(vec!["a".to_owned()]));
    }

    #[test]
    fn renew_lease_errors() {
        for (sql, check) in [
            ("SELECT * FROM RENEWLEASE_Q()", "missing"),
            ("SELECT * FROM RENEWLEASE_Q(tokens => ['a'])", "unknown"),
            ("SELECT * FROM RENEWLEASE_Q(lease_tokens => 'a')", "invalid"),
            (
                "SELECT * FROM RENEWLEASE_Q(lease_tokens => [1, 2])",
                "invalid",
            ),
            ("SELECT * FROM RENEWLEASE_Q(['a'], ['b'])", "query"),
        ] {
            let e = err(sql);
            let matches = match check {
                "missing" => matches!(e, SqlError::MissingArgument { .. }),
                "unknown" => matches!(e, SqlError::UnknownArgument { .. }),
                "invalid" => matches!(e, SqlError::InvalidArgument { .. }),
                _ => matches!(e, SqlError::InvalidQuery { .. }),
            };
            assert!(matches, "{sql}: {e:?}");
            assert_eq!(e.code(), SqlErrorCode::InvalidArgument);
        }
    }

    #[test]
    fn dml_classification() {
        let cases = [
            (
                "INSERT INTO UserTasks (UserId, MessageId, Payload) VALUES (1, 'a', b'x')",
                DmlKind::Insert,
                "UserTasks",
            ),
            (
                "insert UserTasks (UserId) VALUES (1)",
                DmlKind::Insert,
                "UserTasks",
            ),
            (
                "INSERT OR UPDATE INTO T (A) VALUES (1)",
                DmlKind::InsertOrUpdate,
                "T",
            ),
            (
                "INSERT OR IGNORE T (A) VALUES (1)",
                DmlKind::InsertOrIgnore,
                "T",
            ),
            (
                "UPDATE `Order` SET A = 1 WHERE TRUE",
                DmlKind::Update,
                "Order",
            ),
            (
                "DELETE FROM UserTasks WHERE UserId = @u AND MessageId = @m ASSERT_ROWS_MODIFIED 1",
                DmlKind::Delete,
                "UserTasks",
            ),
            ("DELETE T WHERE TRUE THEN RETURN *", DmlKind::Delete, "T"),
            (
                "@{PDML_MAX_PARALLELISM=4} -- x\n DELETE FROM sch.T WHERE TRUE",
                DmlKind::Delete,
                "sch.T",
            ),
            (
                "/* RECEIVE_X( */ UPDATE T SET S = 'RECEIVE_Y(' WHERE TRUE",
                DmlKind::Update,
                "T",
            ),
        ];
        for (sql, kind, table) in cases {
            assert_eq!(ok(sql), dml(kind, table), "{sql}");
        }
        for sql in ["INSERT", "INSERT INTO (", "DELETE FROM 'x'"] {
            assert_eq!(ok(sql), Classified::Other, "{sql}");
        }
    }

    #[test]
    fn everything_else_is_other() {
        for sql in [
            "SELECT 1",
            "SELECT * FROM UserTasks",
            "SELECT * FROM Receive_Log WHERE Id = 1",
            "SELECT RECEIVE_COUNT FROM T",
            "SELECT 'RECEIVE_Q(max_duration => 1)' AS s",
            "SELECT * FROM T WHERE s = \"\"\"RENEWLEASE_Q(\"\"\"",
            "SELECT x.RECEIVE_Q(1) FROM T x",
            "-- SELECT * FROM RECEIVE_Q(max_duration => '1m')\nSELECT 1",
            "WITH t AS (SELECT 1) SELECT * FROM t",
            "SELECT * FROM RECEIVE_(max_duration => '1m')",
            "SELECT 'unterminated RECEIVE_Q(",
            "CALL cancel_query('1')",
            "",
        ] {
            assert_eq!(ok(sql), Classified::Other, "{sql}");
        }
    }

    #[test]
    fn postgres_dialect() {
        let pg = |sql: &str| classify(sql, Dialect::PostgreSql);
        let Ok(Classified::Receive(q)) =
            pg("SELECT * FROM spanner.receive_usertasks(20, NULL, '20m')")
        else {
            panic!("positional receive");
        };
        assert_eq!(q.queue, "usertasks");
        assert_eq!(q.max_batch_size, Some(ArgValue::Literal(20)));
        assert_eq!(
            q.max_duration,
            Some(ArgValue::Literal(Duration::from_secs(1200)))
        );
        let Ok(Classified::Receive(q)) = pg(
            "SELECT userid, \"Payload\" FROM SPANNER.RECEIVE_UserTasks(max_batch_size=>NULL, priority=>NULL, max_duration=>$1)",
        ) else {
            panic!("named receive");
        };
        assert_eq!(q.queue, "usertasks");
        assert_eq!(q.projection, cols(&["userid", "Payload"]));
        assert_eq!(q.max_duration, Some(ArgValue::Param("p1".to_owned())));
        let Ok(Classified::RenewLease(r)) = pg(
            "SELECT * FROM spanner.renewlease_usertasks(lease_tokens => ARRAY['token1', 'token2'])",
        ) else {
            panic!("renew");
        };
        assert_eq!(
            r.tokens,
            TokensArg::Literals(vec!["token1".to_owned(), "token2".to_owned()])
        );
        assert!(matches!(
            pg("SELECT * FROM spanner.receive_q(1, 2, '1m', 4)"),
            Err(SqlError::InvalidQuery { .. })
        ));
        assert_eq!(pg("SELECT * FROM receive_q(1)"), Ok(Classified::Other));
        assert_eq!(
            pg("INSERT INTO UserTasks (userid, payload) VALUES ($1, $2)"),
            Ok(dml(DmlKind::Insert, "usertasks"))
        );
        assert_eq!(
            pg("INSERT INTO \"Q\" (id) VALUES (1) ON CONFLICT (id) DO NOTHING"),
            Ok(dml(DmlKind::InsertOrIgnore, "Q"))
        );
        assert_eq!(
            pg("INSERT INTO q (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET id = excluded.id"),
            Ok(dml(DmlKind::InsertOrUpdate, "q"))
        );
        assert_eq!(
            pg("DELETE FROM ONLY public.q WHERE id = $1"),
            Ok(dml(DmlKind::Delete, "public.q"))
        );
        assert_eq!(pg("UPDATE q SET id = 2"), Ok(dml(DmlKind::Update, "q")));
        assert_eq!(pg("DELETE q"), Ok(Classified::Other));
    }

    #[test]
    fn durations() {
        let cases = [
            ("20m", Duration::from_secs(1200)),
            ("1m30s", Duration::from_secs(90)),
            ("10s", Duration::from_secs(10)),
            ("500ms", Duration::from_millis(500)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            (".5s", Duration::from_millis(500)),
            ("1h2m3s4ms5us6ns", Duration::new(3723, 4_005_006)),
            ("250µs", Duration::from_micros(250)),
            ("+2s", Duration::from_secs(2)),
            ("1.0000000001s", Duration::from_secs(1)),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s), Ok(want), "{s}");
        }
        for s in [
            "",
            "20",
            "m",
            "0",
            "0s",
            "-1s",
            "1 m",
            "1d",
            "1.s2",
            "20M",
            "1e3s",
            "99999999999999999999h",
        ] {
            let e = parse_duration(s).expect_err(s);
            assert!(matches!(e, SqlError::InvalidDuration { .. }), "{s}");
        }
        // "1." is a valid Go duration number ("1.s" = 1s).
        assert_eq!(parse_duration("1.s"), Ok(Duration::from_secs(1)));
    }
}
