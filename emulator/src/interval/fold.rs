//! The left-to-right evaluation of an additive chain into the official emulator's calls, as
//! PostgreSQL evaluates `a + b - c`.

use sqlparser::ast::Expr;

use super::build::{self, ADD, SUBTRACT};
use super::terms::{IntervalText, Other, Piece, Sign, Term, concat, refused};
use super::{ONLY_ADDED, Stop};

/// The value of a chain so far.
struct Acc {
    expr: Expr,
    /// Whether it is recognizably a timestamp (a bare string added to it is an interval).
    timestamp: bool,
    /// Itself when it is an operand that may be NULL and has not reached a call yet.
    nullable: Option<Expr>,
}

/// The evaluation of one chain.
#[derive(Default)]
pub(super) struct Fold {
    acc: Option<Acc>,
    /// Intervals met before any other operand (`interval '1 day' + now()`).
    pending: Vec<IntervalText>,
    /// Operands that may be NULL and reach an emulator call: guarded.
    nullable: Vec<Expr>,
    /// Whether an emulator call was made.
    calls: bool,
}

impl Fold {
    /// Adds `term`, joined with `sign`; `written` is the operand as the statement has it.
    pub(super) fn push(&mut self, sign: Sign, term: Term, written: &Expr) -> Result<(), Stop> {
        let term = match term {
            // A bare string added to a timestamp is an interval in PostgreSQL.
            Term::Other(Other {
                string: Some(value),
                ..
            }) if self.acc.as_ref().is_some_and(|a| a.timestamp) => {
                Term::Interval(IntervalText::literal(value))
            }
            term => term,
        };
        match (term, self.acc.take()) {
            (Term::Interval(interval), Some(acc)) => {
                self.nullable.extend(acc.nullable);
                if !interval.non_null {
                    self.nullable.push(interval.expr.clone());
                }
                let function = if sign == Sign::Plus { ADD } else { SUBTRACT };
                self.calls = true;
                self.acc = Some(Acc {
                    expr: build::emulator_call(function, vec![acc.expr, interval.expr]),
                    timestamp: true,
                    nullable: None,
                });
            }
            (Term::Interval(interval), None) => {
                if sign == Sign::Minus {
                    return Err(refused(
                        written,
                        format!("a negated interval before any timestamp; {ONLY_ADDED}"),
                    ));
                }
                self.pending.push(interval);
            }
            (Term::Other(other), None) if !self.pending.is_empty() => {
                if sign == Sign::Minus {
                    return Err(refused(
                        written,
                        format!("subtracting from an interval; {ONLY_ADDED}"),
                    ));
                }
                if !other.non_null {
                    self.nullable.push(other.expr.clone());
                }
                let mut pieces = Vec::new();
                for interval in std::mem::take(&mut self.pending) {
                    if !pieces.is_empty() {
                        pieces.push(Piece::Text(" ".to_owned()));
                    }
                    if !interval.non_null {
                        self.nullable.push(interval.expr.clone());
                    }
                    pieces.push(Piece::of(interval));
                }
                let joined = concat(pieces);
                self.calls = true;
                self.acc = Some(Acc {
                    expr: build::emulator_call(ADD, vec![other.expr, joined.expr]),
                    timestamp: true,
                    nullable: None,
                });
            }
            (Term::Other(other), None) => {
                self.acc = Some(Acc {
                    nullable: (!other.non_null).then(|| other.expr.clone()),
                    expr: other.expr,
                    timestamp: other.timestamp,
                });
            }
            (Term::Other(other), Some(acc)) => {
                // `a - b + interval '1 hour'`: the sum is guarded as a whole.
                let may_be_null = acc.nullable.is_some() || !other.non_null;
                let expr = build::binary(acc.expr, sign.operator(), other.expr);
                self.acc = Some(Acc {
                    nullable: may_be_null.then(|| expr.clone()),
                    expr,
                    timestamp: false,
                });
            }
        }
        Ok(())
    }

    /// The chain's rewrite (`written`), or `None` when it needed no emulator call.
    pub(super) fn finish(self, written: &Expr) -> Result<Option<Expr>, Stop> {
        let Some(acc) = self.acc else {
            return Err(refused(
                written,
                format!("an interval value on its own; {ONLY_ADDED}"),
            ));
        };
        if !self.calls {
            return Ok(None);
        }
        if self.nullable.is_empty() {
            return Ok(Some(acc.expr));
        }
        Ok(Some(build::null_guard(self.nullable, acc.expr)))
    }
}
