//! The calls of the queue functions (`RECEIVE_<Q>`, `RENEWLEASE_<Q>`) in a statement, the
//! query around a call and its select list.

use spanner_queues_sql::{
    Dialect, Token, TokenKind, closing_bracket, is_reserved, skip_hints, split_commas,
};

use super::args::{receive_args, renew_args};
use super::{Classified, Projection, RECEIVE_PREFIX, RENEW_LEASE_PREFIX, RenewQuery, SqlError};

/// Schema of the queue functions in PostgreSQL (`spanner.receive_<q>`).
const POSTGRES_FUNCTION_SCHEMA: &str = "spanner";

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
pub(super) struct Call {
    /// Index of the first token of the function name (`spanner` in PostgreSQL).
    pub(super) start: usize,
    /// Index of the `(` that opens the arguments.
    open: usize,
    /// Which function.
    kind: FunctionKind,
    /// The queue name.
    queue: String,
    /// The function name as written, for messages.
    pub(super) written: String,
}

/// Finds the calls of queue functions in `toks`.
pub(super) fn find_calls(toks: &[Token<'_>], dialect: Dialect) -> Vec<Call> {
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
        let name = t.name(dialect).into_owned();
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
pub(super) fn classify_call(
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
    let close = closing_bracket(toks, call.open).ok_or_else(|| SqlError::InvalidQuery {
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
            Some(t) if t.is_ident() => alias = Some(t.name(dialect).into_owned()),
            _ => {
                return Err(SqlError::InvalidQuery {
                    function: function.to_owned(),
                    reason: "AS must be followed by an alias".to_owned(),
                });
            }
        }
        i += 1;
    } else if let Some(t) = toks.get(i).filter(|t| {
        t.kind == TokenKind::QuotedIdent
            || t.kind == TokenKind::Word && !is_keyword(dialect, t.text)
    }) {
        alias = Some(t.name(dialect).into_owned());
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

    let qualifier = alias.unwrap_or_else(|| toks[call.open - 1].name(dialect).into_owned());
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

/// Whether an unquoted word cannot be an alias (a reserved keyword of the dialect, or a clause
/// keyword).
fn is_keyword(dialect: Dialect, word: &str) -> bool {
    is_reserved(dialect, word)
        || ["OFFSET", "QUALIFY", "TABLESAMPLE", "RETURNING"]
            .iter()
            .any(|k| word.eq_ignore_ascii_case(k))
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
        let name = t.name(dialect);
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
            [c] if c.is_ident() => columns.push(c.name(dialect).into_owned()),
            [q, dot, c] if q.is_ident() && dot.is_punct(".") && c.is_ident() => {
                check_qualifier(q)?;
                columns.push(c.name(dialect).into_owned());
            }
            _ => return Err(unsupported()),
        }
    }
    if columns.is_empty() {
        return Err(unsupported());
    }
    Ok(Projection::Columns(columns))
}
