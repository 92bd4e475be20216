//! The pieces of an additive chain and of an interval's text, and what the statement writes
//! in them (pure: no visiting).

use sqlparser::ast::{
    BinaryOperator, DateTimeField, Expr, FunctionArg, FunctionArgExpr, FunctionArgOperator,
    Interval, UnaryOperator,
};

use super::build::{self, string_literal};
use super::{IntervalError, ONLY_ADDED, Stop};

/// How an operand joins a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sign {
    Plus,
    Minus,
}

impl Sign {
    pub(super) fn flip(self) -> Self {
        match self {
            Sign::Plus => Sign::Minus,
            Sign::Minus => Sign::Plus,
        }
    }

    pub(super) fn operator(self) -> BinaryOperator {
        match self {
            Sign::Plus => BinaryOperator::Plus,
            Sign::Minus => BinaryOperator::Minus,
        }
    }
}

/// An operand of an additive chain.
#[derive(Debug, Clone)]
pub(super) enum Term {
    Interval(IntervalText),
    Other(Other),
}

/// A non-interval operand.
#[derive(Debug, Clone)]
pub(super) struct Other {
    /// The operand, its inner intervals rewritten.
    pub(super) expr: Expr,
    /// Whether it can never be NULL.
    pub(super) non_null: bool,
    /// Whether it is recognizably a timestamptz (a bare string added to it is an interval).
    pub(super) timestamp: bool,
    /// Its value when it is a bare string literal.
    pub(super) string: Option<String>,
}

/// The operands of the additive chain `expr` (`a + b - c`), left to right with their signs.
pub(super) fn chain_terms(expr: &Expr) -> Vec<(Sign, &Expr)> {
    let mut rights = Vec::new();
    let mut left = expr;
    while let Expr::BinaryOp {
        left: l,
        op: op @ (BinaryOperator::Plus | BinaryOperator::Minus),
        right,
    } = left
    {
        let sign = if *op == BinaryOperator::Plus {
            Sign::Plus
        } else {
            Sign::Minus
        };
        rights.push((sign, &**right));
        left = l;
    }
    rights.push((Sign::Plus, left));
    rights.reverse();
    rights
}

/// `expr` without its unary signs, and the sign they give `sign`.
pub(super) fn peel(sign: Sign, mut expr: &Expr) -> (Sign, &Expr) {
    let mut sign = sign;
    while let Expr::UnaryOp { op, expr: inner } = expr {
        match op {
            UnaryOperator::Minus => sign = sign.flip(),
            UnaryOperator::Plus => {}
            _ => break,
        }
        expr = inner;
    }
    (sign, expr)
}

/// An interval operand.
#[derive(Debug, Clone)]
pub(super) struct IntervalText {
    /// SQL whose value is the interval as text.
    pub(super) expr: Expr,
    /// The text when the statement writes it (a literal).
    pub(super) literal: Option<String>,
    /// Whether it can never be NULL.
    pub(super) non_null: bool,
}

impl IntervalText {
    pub(super) fn literal(value: String) -> Self {
        Self {
            expr: build::text(&value),
            literal: Some(value),
            non_null: true,
        }
    }
}

/// A piece of an interval's text: a literal part, or SQL computing one.
pub(super) enum Piece {
    Text(String),
    Sql(Box<Expr>),
}

impl Piece {
    /// The interval's own text, as a piece.
    pub(super) fn of(interval: IntervalText) -> Self {
        match interval.literal {
            Some(value) => Piece::Text(value),
            None => Piece::Sql(Box::new(interval.expr)),
        }
    }
}

/// Joins pieces into SQL of one text value (`('1 hours ' || CAST(($1) AS TEXT) || ' mins')`).
pub(super) fn concat(pieces: Vec<Piece>) -> IntervalText {
    let mut merged: Vec<Piece> = Vec::new();
    for piece in pieces {
        match (merged.last_mut(), piece) {
            (Some(Piece::Text(prev)), Piece::Text(next)) => prev.push_str(&next),
            (_, piece) => merged.push(piece),
        }
    }
    if let [Piece::Text(value)] = merged.as_slice() {
        return IntervalText::literal(value.clone());
    }
    let joined = merged
        .into_iter()
        .map(|p| match p {
            Piece::Text(t) => build::text(&t),
            Piece::Sql(e) => *e,
        })
        .reduce(|a, b| build::binary(a, BinaryOperator::StringConcat, b))
        .unwrap_or_else(|| build::text(""));
    IntervalText {
        expr: Expr::Nested(Box::new(joined)),
        literal: None,
        non_null: false,
    }
}

/// A refusal naming `construct`.
pub(super) fn refused(construct: &Expr, reason: impl Into<String>) -> Stop {
    Stop::Refused(IntervalError::new(&construct.to_string(), reason))
}

/// A number written in a statement: an integer when it is one, else a float.
#[derive(Debug, Clone, Copy)]
pub(super) enum Number {
    Int(i128),
    Float(f64),
}

impl Number {
    pub(super) fn parse(text: &str) -> Option<Self> {
        if let Ok(n) = text.parse::<i128>() {
            return Some(Number::Int(n));
        }
        let float = text.parse::<f64>().ok()?;
        float.is_finite().then_some(Number::Float(float))
    }

    pub(super) fn times(self, other: Number) -> Option<String> {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a.checked_mul(b).map(|n| n.to_string()),
            (a, b) => {
                let product = a.as_f64() * b.as_f64();
                product.is_finite().then(|| product.to_string())
            }
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            // Precision loss only past 2^53, far beyond any interval field.
            #[allow(clippy::cast_precision_loss)]
            Number::Int(n) => n as f64,
            Number::Float(f) => f,
        }
    }
}

impl std::fmt::Display for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Number::Int(n) => n.fmt(f),
            Number::Float(x) => x.fmt(f),
        }
    }
}

/// Splits a simple interval literal (`'1 hour 30 minutes'`) into (number, unit) pairs.
pub(super) fn simple_pairs(literal: &str) -> Option<Vec<(Number, &str)>> {
    let words: Vec<&str> = literal.split_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(2) {
        return None;
    }
    words
        .chunks(2)
        .map(|pair| {
            let unit = pair[1];
            let ok =
                unit.chars().all(|c| c.is_ascii_alphabetic()) && !unit.eq_ignore_ascii_case("ago");
            Some((Number::parse(pair[0])?, unit)).filter(|_| ok)
        })
        .collect()
}

/// The field names an interval literal's single-field qualifier may have (`interval '5'
/// minute`).
fn field_name(field: &DateTimeField) -> Option<&'static str> {
    Some(match field {
        DateTimeField::Year => "year",
        DateTimeField::Month => "month",
        DateTimeField::Day => "day",
        DateTimeField::Hour => "hour",
        DateTimeField::Minute => "minute",
        DateTimeField::Second => "second",
        _ => return None,
    })
}

/// `interval '…' [field]`, `whole` being the expression.
pub(super) fn interval_literal(interval: &Interval, whole: &Expr) -> Result<IntervalText, Stop> {
    let Some(value) = string_literal(&interval.value) else {
        // PostgreSQL has no such literal: the parser misread the statement (the words
        // `interval` that are names reach it as identifiers, see `spelling`, so this is only a
        // safety net). The backend judges it as written.
        return Err(Stop::Unreadable);
    };
    if interval.leading_precision.is_some() || interval.fractional_seconds_precision.is_some() {
        return Err(refused(
            whole,
            format!("an interval literal with a precision; {ONLY_ADDED}"),
        ));
    }
    let Some(field) = &interval.leading_field else {
        return Ok(IntervalText {
            expr: (*interval.value).clone(),
            literal: Some(value.to_owned()),
            non_null: true,
        });
    };
    match field_name(field) {
        Some(name) if interval.last_field.is_none() && Number::parse(value.trim()).is_some() => {
            Ok(IntervalText::literal(format!("{} {name}", value.trim())))
        }
        _ => Err(refused(
            whole,
            format!(
                "an interval literal with a field qualifier is supported only as a number and \
                 one field (interval '5' minute); {ONLY_ADDED}"
            ),
        )),
    }
}

/// A named argument of a call: its name and value (`mins => 5`, `mins := 5`).
pub(super) fn named_arg(arg: &FunctionArg) -> Option<(String, &Expr)> {
    let arrow = |op: &FunctionArgOperator| {
        matches!(
            op,
            FunctionArgOperator::RightArrow | FunctionArgOperator::Assignment
        )
    };
    match arg {
        FunctionArg::Named {
            name,
            arg: FunctionArgExpr::Expr(value),
            operator,
        } if arrow(operator) => Some((name.value.to_ascii_lowercase(), value)),
        FunctionArg::ExprNamed {
            name: Expr::Identifier(name),
            arg: FunctionArgExpr::Expr(value),
            operator,
        } if arrow(operator) => Some((name.value.to_ascii_lowercase(), value)),
        _ => None,
    }
}
