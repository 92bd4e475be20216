//! Interval operands and the text each one stands for: the second argument of the official
//! emulator's `spanner.timestamptz_add`, which reads it as PostgreSQL reads an interval.

use sqlparser::ast::{
    BinaryOperator, DataType, DateTimeField, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgOperator, FunctionArguments, Interval,
};

use super::build::{self, is_function, signed_number, string_literal};
use super::rewrite::{Rewriter, Sign, chain_terms, peel};
use super::{IntervalError, ONLY_ADDED, Stop};

/// `make_interval`'s parameters in order, with the unit each one's value is written in.
const MAKE_INTERVAL_ARGS: [(&str, &str); 7] = [
    ("years", "years"),
    ("months", "months"),
    ("weeks", "weeks"),
    ("days", "days"),
    ("hours", "hours"),
    ("mins", "mins"),
    ("secs", "secs"),
];

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

/// What an interval is multiplied by.
enum Factor {
    /// A number written in the statement: the product is computed here.
    Constant(Number),
    /// An expression (inner intervals rewritten): the product is computed in SQL.
    Computed(Expr),
}

/// A piece of an interval's text: a literal part, or SQL computing one.
pub(super) enum Piece {
    Text(String),
    Sql(Expr),
}

impl Piece {
    /// The interval's own text, as a piece.
    pub(super) fn of(interval: IntervalText) -> Self {
        match interval.literal {
            Some(value) => Piece::Text(value),
            None => Piece::Sql(interval.expr),
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
            Piece::Sql(e) => e,
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
fn interval_literal(interval: &Interval, whole: &Expr) -> Result<IntervalText, Stop> {
    let Some(value) = string_literal(&interval.value) else {
        // PostgreSQL has no such literal: the parser misread the statement (`SELECT interval
        // FROM t` names a column). The backend judges it as written.
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
fn named_arg(arg: &FunctionArg) -> Option<(String, &Expr)> {
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

impl Rewriter<'_> {
    /// The text of the interval operand `expr` (one [`Rewriter::is_interval`] accepts).
    pub(super) fn interval_operand(&mut self, expr: &Expr) -> Result<IntervalText, Stop> {
        match expr {
            Expr::Interval(interval) => interval_literal(interval, expr),
            Expr::Cast {
                expr: inner,
                data_type: DataType::Interval { fields, precision },
                ..
            } => {
                if fields.is_some() || precision.is_some() {
                    return Err(refused(
                        expr,
                        format!("an interval type with a precision or fields; {ONLY_ADDED}"),
                    ));
                }
                self.text_operand(inner)
            }
            Expr::Function(f) if is_function(f, "make_interval") => self.make_interval(f, expr),
            Expr::Nested(inner) => self.interval_sum(inner),
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Multiply,
                right,
            } => {
                let (interval, factor) = if self.is_interval(left) {
                    (left, right)
                } else {
                    (right, left)
                };
                let interval = self.interval_operand(interval)?;
                self.scale(&interval, factor, expr)
            }
            Expr::BinaryOp {
                op: BinaryOperator::Divide,
                ..
            } => Err(refused(expr, format!("dividing an interval; {ONLY_ADDED}"))),
            _ => match self.interval_param(expr) {
                Some(name) => {
                    let non_null = self.params.non_null.contains(&name.as_str());
                    self.text_params.push(name);
                    Ok(IntervalText {
                        expr: expr.clone(),
                        literal: None,
                        non_null,
                    })
                }
                None => Err(refused(
                    expr,
                    format!("an interval inside another expression; {ONLY_ADDED}"),
                )),
            },
        }
    }

    /// The operand of a cast to interval, as SQL of its text.
    fn text_operand(&mut self, inner: &Expr) -> Result<IntervalText, Stop> {
        if let Some(value) = string_literal(inner) {
            return Ok(IntervalText {
                expr: inner.clone(),
                literal: Some(value.to_owned()),
                non_null: true,
            });
        }
        let mut text = inner.clone();
        self.visit_nested(&mut text, true)?;
        let parameter = build::placeholder(inner).is_some();
        Ok(IntervalText {
            expr: if parameter {
                text
            } else {
                Expr::Nested(Box::new(text))
            },
            literal: None,
            non_null: parameter && build::never_null(inner, self.params.non_null),
        })
    }

    /// `make_interval(…)`, `whole` being the call.
    fn make_interval(&mut self, function: &Function, whole: &Expr) -> Result<IntervalText, Stop> {
        let list = match &function.args {
            FunctionArguments::List(list)
                if list.duplicate_treatment.is_none()
                    && list.clauses.is_empty()
                    && function.filter.is_none()
                    && function.over.is_none() =>
            {
                list
            }
            _ => {
                return Err(refused(
                    whole,
                    "make_interval takes a list of arguments (years, months, weeks, days, \
                     hours, mins, secs)",
                ));
            }
        };
        let mut values: [Option<&Expr>; 7] = [None; 7];
        let mut named = false;
        for (position, arg) in list.args.iter().enumerate() {
            let (slot, value) = match (named_arg(arg), arg) {
                (Some((name, value)), _) => {
                    named = true;
                    let slot = MAKE_INTERVAL_ARGS
                        .iter()
                        .position(|(n, _)| *n == name)
                        .ok_or_else(|| {
                            refused(
                                whole,
                                format!(
                                    "make_interval has no argument {name} (it takes years, \
                                     months, weeks, days, hours, mins, secs)"
                                ),
                            )
                        })?;
                    (slot, value)
                }
                (None, FunctionArg::Unnamed(FunctionArgExpr::Expr(value))) => {
                    if named {
                        return Err(refused(whole, "a positional argument after a named one"));
                    }
                    if position >= MAKE_INTERVAL_ARGS.len() {
                        return Err(refused(
                            whole,
                            "make_interval takes at most 7 arguments (years, months, weeks, \
                             days, hours, mins, secs)",
                        ));
                    }
                    (position, value)
                }
                (None, _) => {
                    return Err(refused(whole, "an argument make_interval does not take"));
                }
            };
            if values[slot].replace(value).is_some() {
                return Err(refused(
                    whole,
                    format!("the argument {} given twice", MAKE_INTERVAL_ARGS[slot].0),
                ));
            }
        }
        let mut pieces = Vec::new();
        for (slot, value) in values.iter().enumerate() {
            let Some(value) = value else { continue };
            let unit = MAKE_INTERVAL_ARGS[slot].1;
            if !pieces.is_empty() {
                pieces.push(Piece::Text(" ".to_owned()));
            }
            match signed_number(value).filter(|n| Number::parse(n).is_some()) {
                Some(number) => pieces.push(Piece::Text(format!("{number} {unit}"))),
                None => {
                    let mut computed = (*value).clone();
                    self.visit_nested(&mut computed, true)?;
                    pieces.push(Piece::Sql(build::cast_text(Expr::Nested(Box::new(
                        computed,
                    )))));
                    pieces.push(Piece::Text(format!(" {unit}")));
                }
            }
        }
        if pieces.is_empty() {
            pieces.push(Piece::Text("0 secs".to_owned()));
        }
        Ok(concat(pieces))
    }

    /// `interval * factor` (either way round), `whole` being the product.
    fn scale(
        &mut self,
        interval: &IntervalText,
        factor: &Expr,
        whole: &Expr,
    ) -> Result<IntervalText, Stop> {
        let pairs = interval
            .literal
            .as_deref()
            .and_then(simple_pairs)
            .ok_or_else(|| {
                refused(
                    whole,
                    "multiplying an interval is supported only for a literal of numbers and \
                     units ('1 hour 30 minutes'); make_interval(mins => $1) computes one too",
                )
            })?;
        let factor = match signed_number(factor).and_then(|n| Number::parse(&n)) {
            Some(constant) => Factor::Constant(constant),
            None => {
                let mut computed = factor.clone();
                self.visit_nested(&mut computed, true)?;
                Factor::Computed(computed)
            }
        };
        let mut pieces = Vec::new();
        for (number, unit) in pairs {
            if !pieces.is_empty() {
                pieces.push(Piece::Text(" ".to_owned()));
            }
            match &factor {
                Factor::Constant(constant) => {
                    let product = number
                        .times(*constant)
                        .ok_or_else(|| refused(whole, "a product out of range"))?;
                    pieces.push(Piece::Text(format!("{product} {unit}")));
                }
                Factor::Computed(computed) => {
                    let product = build::binary(
                        Expr::Nested(Box::new(computed.clone())),
                        BinaryOperator::Multiply,
                        build::number(number.to_string()),
                    );
                    pieces.push(Piece::Sql(build::cast_text(product)));
                    pieces.push(Piece::Text(format!(" {unit}")));
                }
            }
        }
        Ok(concat(pieces))
    }

    /// A parenthesized sum of intervals (`(interval '1 day' + interval '2 hours')`), joined
    /// into one text, which PostgreSQL sums field by field as `interval + interval` does.
    fn interval_sum(&mut self, inner: &Expr) -> Result<IntervalText, Stop> {
        let mut pieces = Vec::new();
        for (sign, term) in chain_terms(inner) {
            let (sign, term) = peel(sign, term);
            if sign == Sign::Minus {
                return Err(refused(
                    inner,
                    format!("subtracting from an interval; {ONLY_ADDED}"),
                ));
            }
            let interval = self.interval_operand(term)?;
            if !pieces.is_empty() {
                pieces.push(Piece::Text(" ".to_owned()));
            }
            pieces.push(Piece::of(interval));
        }
        Ok(concat(pieces))
    }
}
