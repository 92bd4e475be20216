//! The arguments of the queue functions: `max_duration`, `max_batch_size` and `priority` of
//! `RECEIVE_<Q>`, `lease_tokens` of `RENEWLEASE_<Q>`.

use std::time::Duration;

use spanner_queues_sql::{
    Dialect, DurationError, Token, TokenKind, parse_go_duration, split_commas,
};

use super::{ArgValue, Projection, ReceiveQuery, SqlError, TokensArg};

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
pub(super) fn receive_args(
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
pub(super) fn renew_args(args: &[&[Token<'_>]], function: &str) -> Result<TokensArg, SqlError> {
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

/// Parses the Go-style duration of a `max_duration` argument (see
/// [`spanner_queues_sql::parse_go_duration`]); it must be positive.
///
/// # Errors
/// [`SqlError::InvalidDuration`] for malformed strings, and for zero or negative durations.
pub(crate) fn parse_duration(value: &str) -> Result<Duration, SqlError> {
    let invalid = |reason: String| SqlError::InvalidDuration {
        value: value.to_owned(),
        reason,
    };
    match parse_go_duration(value) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) | Err(DurationError::Negative) => {
            Err(invalid("the duration must be positive".to_owned()))
        }
        Err(error) => Err(invalid(error.to_string())),
    }
}
