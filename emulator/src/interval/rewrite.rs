//! The rewrite of a parsed statement: a mutable visitor that meets each expression top-down
//! and replaces every additive chain holding an interval (and every written call of the
//! official emulator's interval functions whose argument may be NULL).

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, DataType, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments,
    UnaryOperator, VisitMut, VisitorMut,
};

use super::build::{
    self, is_emulator_call, is_function, never_null, placeholder, signed_number, string_literal,
};
use super::fold::Fold;
use super::source::param_name;
use super::terms::{
    IntervalText, Number, Other, Piece, Sign, Term, chain_terms, concat, interval_literal,
    named_arg, peel, refused, simple_pairs,
};
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

/// What an interval is multiplied by.
enum Factor {
    /// A number written in the statement: the product is computed here.
    Constant(Number),
    /// An expression (inner intervals rewritten): the product is computed in SQL.
    Computed(Box<Expr>),
}

/// The parameters of the request.
#[derive(Debug, Clone, Copy)]
pub(super) struct Params<'p> {
    /// Request names of the parameters typed `INTERVAL`.
    pub(super) interval: &'p [&'p str],
    /// Request names of the parameters whose value is not NULL.
    pub(super) non_null: &'p [&'p str],
}

/// The rewriting of one statement.
pub(super) struct Rewriter<'p> {
    pub(super) params: Params<'p>,
    /// `INTERVAL` parameters now read as text.
    pub(super) text_params: Vec<String>,
    /// Whether anything was rewritten.
    pub(super) changed: bool,
    /// Inside an interval's text (a cast operand, a `make_interval` argument, a factor), where
    /// an `INTERVAL` parameter is read as text.
    in_text: bool,
    /// The node last replaced: its subtree, already rewritten, is not visited again.
    skip: Option<*const Expr>,
}

/// What [`Rewriter::mark`] saved, to undo work on a chain that needs no rewrite.
struct Mark {
    text_params: usize,
    changed: bool,
}

impl VisitorMut for Rewriter<'_> {
    type Break = Stop;

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Stop> {
        if self.skip.is_some() {
            return ControlFlow::Continue(());
        }
        match self.rewrite(expr) {
            Ok(Some(new)) => {
                *expr = new;
                self.changed = true;
                self.skip = Some(std::ptr::from_ref(expr));
                ControlFlow::Continue(())
            }
            Ok(None) => ControlFlow::Continue(()),
            Err(stop) => ControlFlow::Break(stop),
        }
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Stop> {
        if self.skip == Some(std::ptr::from_ref(expr)) {
            self.skip = None;
        }
        ControlFlow::Continue(())
    }
}

impl<'p> Rewriter<'p> {
    pub(super) fn new(params: Params<'p>) -> Self {
        Self {
            params,
            text_params: Vec::new(),
            changed: false,
            in_text: false,
            skip: None,
        }
    }

    fn mark(&self) -> Mark {
        Mark {
            text_params: self.text_params.len(),
            changed: self.changed,
        }
    }

    fn reset(&mut self, mark: Mark) {
        self.text_params.truncate(mark.text_params);
        self.changed = mark.changed;
    }

    /// The request name of `expr` when it is an `INTERVAL` parameter.
    pub(super) fn interval_param(&self, expr: &Expr) -> Option<String> {
        placeholder(expr)
            .and_then(param_name)
            .filter(|name| self.params.interval.contains(&name.as_str()))
    }

    /// Rewrites the inner intervals of `expr`; `in_text` when its value becomes part of an
    /// interval's text.
    pub(super) fn visit_nested(&mut self, expr: &mut Expr, in_text: bool) -> Result<(), Stop> {
        let outer = std::mem::replace(&mut self.in_text, in_text);
        let flow = expr.visit(self);
        self.in_text = outer;
        match flow {
            ControlFlow::Continue(()) => Ok(()),
            ControlFlow::Break(stop) => Err(stop),
        }
    }

    /// Whether `expr` is an interval operand (syntactically; it may still be refused).
    pub(super) fn is_interval(&self, expr: &Expr) -> bool {
        match expr {
            Expr::Interval(_) => true,
            Expr::Cast { data_type, .. } => {
                matches!(data_type, sqlparser::ast::DataType::Interval { .. })
            }
            Expr::Function(f) => is_function(f, "make_interval"),
            Expr::Value(_) => self.interval_param(expr).is_some(),
            Expr::Nested(inner) => chain_terms(inner)
                .into_iter()
                .all(|(sign, e)| self.is_interval(peel(sign, e).1)),
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Multiply,
                right,
            } => self.is_interval(left) || self.is_interval(right),
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Divide,
                ..
            } => self.is_interval(left),
            Expr::UnaryOp {
                op: UnaryOperator::Minus | UnaryOperator::Plus,
                expr,
            } => self.is_interval(expr),
            _ => false,
        }
    }

    /// The replacement of `expr`, met top-down before its children; `None` to keep it and
    /// visit its children.
    fn rewrite(&mut self, expr: &Expr) -> Result<Option<Expr>, Stop> {
        if let Some(name) = self.interval_param(expr) {
            if self.in_text {
                self.text_params.push(name);
                return Ok(None);
            }
            return Err(Stop::Refused(IntervalError::new(
                &format!("the INTERVAL parameter {expr}"),
                format!("an interval value on its own; {ONLY_ADDED}"),
            )));
        }
        match expr {
            Expr::BinaryOp {
                op: BinaryOperator::Plus | BinaryOperator::Minus,
                ..
            } => self.chain(expr),
            Expr::Function(f) if is_emulator_call(f) => self.guarded_call(expr),
            _ if self.is_interval(expr) => {
                // Any specific refusal first (a precision, a bad argument), then the general one.
                self.interval_operand(expr)?;
                Err(Stop::Refused(IntervalError::new(
                    &expr.to_string(),
                    format!("an interval value on its own; {ONLY_ADDED}"),
                )))
            }
            _ => Ok(None),
        }
    }

    /// The additive chain `expr`, evaluated left to right into emulator calls when it holds an
    /// interval; `None` when it needs none.
    fn chain(&mut self, expr: &Expr) -> Result<Option<Expr>, Stop> {
        let terms = chain_terms(expr);
        let any_interval = terms
            .iter()
            .any(|&(sign, e)| self.is_interval(peel(sign, e).1));
        let any_string = terms
            .iter()
            .skip(1)
            .any(|(_, e)| string_literal(e).is_some());
        if !any_interval && !any_string {
            return Ok(None);
        }
        let mark = self.mark();
        let mut fold = Fold::default();
        for (sign, written) in terms {
            let (sign, term) = self.term(sign, written)?;
            fold.push(sign, term, written)?;
        }
        match fold.finish(expr)? {
            Some(rewritten) => Ok(Some(rewritten)),
            None => {
                self.reset(mark);
                Ok(None)
            }
        }
    }

    /// Classifies one operand of a chain joined with `sign`: the sign after its unary signs
    /// when it is an interval, and the operand.
    fn term(&mut self, sign: Sign, written: &Expr) -> Result<(Sign, Term), Stop> {
        let (effective, inner) = peel(sign, written);
        if self.is_interval(inner) {
            return Ok((effective, Term::Interval(self.interval_operand(inner)?)));
        }
        let mut rewritten = written.clone();
        self.visit_nested(&mut rewritten, false)?;
        Ok((
            sign,
            Term::Other(Other {
                expr: rewritten,
                non_null: never_null(written, self.params.non_null),
                timestamp: build::is_timestamp(written),
                string: string_literal(written).map(str::to_owned),
            }),
        ))
    }

    /// A written `spanner.timestamptz_add(…)` / `_subtract(…)`: guarded when an argument may be
    /// NULL (the official emulator's process stops on a NULL argument).
    fn guarded_call(&mut self, expr: &Expr) -> Result<Option<Expr>, Stop> {
        let Expr::Function(function) = expr else {
            return Ok(None);
        };
        let mut function = function.clone();
        let Some(args) = build::plain_args(&mut function) else {
            return Ok(None);
        };
        let mark = self.mark();
        let mut nullable = Vec::new();
        for arg in args {
            let may_be_null = !never_null(arg, self.params.non_null);
            self.visit_nested(arg, false)?;
            if may_be_null {
                nullable.push(arg.clone());
            }
        }
        if nullable.is_empty() {
            // Its arguments are visited where they stand.
            self.reset(mark);
            return Ok(None);
        }
        Ok(Some(build::null_guard(nullable, Expr::Function(function))))
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
                    pieces.push(Piece::Sql(Box::new(build::cast_text(Expr::Nested(
                        Box::new(computed),
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
                Factor::Computed(Box::new(computed))
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
                        Expr::Nested(computed.clone()),
                        BinaryOperator::Multiply,
                        build::number(number.to_string()),
                    );
                    pieces.push(Piece::Sql(Box::new(build::cast_text(product))));
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
