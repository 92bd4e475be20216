//! The rewrite of a parsed statement: a mutable visitor that meets each expression top-down
//! and replaces every additive chain holding an interval (and every written call of the
//! official emulator's interval functions whose argument may be NULL).

use std::ops::ControlFlow;

use sqlparser::ast::{BinaryOperator, Expr, UnaryOperator, VisitMut, VisitorMut};

use super::build::{self, is_emulator_call, is_function, never_null, placeholder, string_literal};
use super::fold::Fold;
use super::operand::IntervalText;
use super::source::param_name;
use super::{IntervalError, ONLY_ADDED, Stop};

/// The parameters of the request.
#[derive(Debug, Clone, Copy)]
pub(super) struct Params<'p> {
    /// Request names of the parameters typed `INTERVAL`.
    pub(super) interval: &'p [&'p str],
    /// Request names of the parameters whose value is not NULL.
    pub(super) non_null: &'p [&'p str],
}

/// How an operand joins a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sign {
    Plus,
    Minus,
}

impl Sign {
    fn flip(self) -> Self {
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
