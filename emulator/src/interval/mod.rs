//! PostgreSQL `interval` arithmetic, rewritten for the official emulator.
//!
//! Cloud Spanner's PostgreSQL dialect computes times with intervals (`now() + interval '5
//! minutes'`), but the official emulator has no `interval` type: every statement that mentions
//! one fails with `UNIMPLEMENTED` "The Postgres Type is not supported: interval". What it has
//! is `spanner.timestamptz_add(timestamptz, text)` and `spanner.timestamptz_subtract`, which
//! read the text with PostgreSQL's own interval syntax. Measured on emulator 1.5.28: `'5
//! minutes'`, `'5 min'`, `'30s'`, `'1 hour 30 minutes'`, `'1.5 hours'`, `'-5 minutes'`, `'2 days
//! ago'`, `'01:30:00'`, `'1 day 02:00:00'`, `'1 mon'`, `'1 week'`, `'100 ms'`, `'5 us'`, and ISO
//! 8601 durations (`'P1DT2H'`, `'PT-5M'`, `'PT0.5S'`, the wire form of Spanner's `INTERVAL`
//! values) all work; `'-PT5M'` does not.
//!
//! [`translate`] parses a statement that may hold an interval (sqlparser's PostgreSQL dialect)
//! and rewrites the expression tree: each additive chain (`a + b - c`, as the parser groups it)
//! that holds an interval operand becomes nested calls, left to right as PostgreSQL evaluates
//! it. Statements with nothing to rewrite are forwarded as written; a rewritten one is printed
//! anew from its tree (comments inside it are dropped; a statement hint inside it is refused),
//! with the text around it (leading comments and hints, a trailing `;` or
//! `ASSERT_ROWS_MODIFIED n`) kept as written. The interval operands it knows:
//!
//! - `interval '…'`, with an optional single field when the text is a number (`interval '5'
//!   minute`);
//! - `'…'::interval`, `$n::interval`, `(expr)::interval`, `CAST(expr AS interval)`;
//! - `make_interval(years, months, weeks, days, hours, mins, secs)`, positional or named
//!   (`=>`, `:=`), with literal or computed arguments;
//! - parameters whose type is `INTERVAL` (passed on as text, which is their wire form);
//! - a parenthesized sum of those, a product of one with a number or parameter when the
//!   interval is a `'<number> <unit> …'` literal, and a negated one (`- interval '…'`);
//! - a bare string literal added to or subtracted from a recognizable timestamp (`now() + '5
//!   minutes'`), where PostgreSQL reads the literal as an interval.
//!
//! Intervals added to one another before the timestamp (`interval '1 day' + interval '1 hour' +
//! now()`) are joined into one text, which PostgreSQL sums field by field as `interval + interval`
//! does. Every other use of an interval the front can see (an interval on its own, one
//! subtracted from or divided, a precision) is an [`IntervalError`] naming the construct, and so
//! is a statement that spells out an interval but does not parse. Intervals the front cannot
//! see (`timestamptz - timestamptz`) still reach the official emulator.
//!
//! `interval` is also a name in PostgreSQL (a table, a column, an alias: `INSERT INTO interval
//! (id) …`). Before parsing, the front tells the words `interval` that are names from those
//! that spell out an interval by their neighbours in the statement ([`spelling`]); the parser
//! reads the names as identifiers, so a statement using `interval` only as a name is forwarded
//! as written, and one that also holds real interval arithmetic is rewritten with its names
//! printed as written.
//!
//! `spanner.timestamptz_add` with a NULL argument stops the official emulator's process (a
//! failed check, measured on 1.5.28), where PostgreSQL answers NULL. So when an operand may be
//! NULL (a parameter, a column, anything but a literal or `now()`), the rewritten chain is
//! guarded: `CASE WHEN (a) IS NULL OR … THEN NULL ELSE spanner.timestamptz_add(a, …) END`; a
//! written call of those functions is guarded the same way.

mod build;
mod fold;
mod rewrite;
mod source;
mod spelling;
mod terms;
#[cfg(test)]
mod tests;

use sqlparser::ast::VisitMut as _;

use rewrite::{Params, Rewriter};
use source::Source;

/// The longest piece of a statement quoted in an error.
const QUOTE_LIMIT: usize = 80;

/// What the official emulator can do with an interval, for error messages.
const ONLY_ADDED: &str = "the official emulator has no interval type, so an interval works only \
                          added to or subtracted from a timestamptz (such as `now() + interval \
                          '5 minutes'`)";

/// An interval construct the emulator cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{construct} is not supported by the spanner-queues emulator: {reason}")]
pub(crate) struct IntervalError {
    /// The construct (shortened when long).
    construct: String,
    /// Why, and what works instead.
    reason: String,
}

impl IntervalError {
    fn new(construct: &str, reason: impl Into<String>) -> Self {
        let construct = construct.trim();
        let construct = if construct.chars().count() > QUOTE_LIMIT {
            let cut: String = construct.chars().take(QUOTE_LIMIT).collect();
            format!("{cut}…")
        } else {
            construct.to_owned()
        };
        Self {
            construct,
            reason: reason.into(),
        }
    }
}

/// Why a rewrite stopped.
#[derive(Debug)]
enum Stop {
    /// A construct the official emulator cannot run.
    Refused(IntervalError),
    /// The parser misread the statement: it goes to the backend as written.
    Unreadable,
}

/// A statement rewritten by [`translate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Translated {
    /// The statement the official emulator can run.
    pub(crate) sql: String,
    /// The `INTERVAL` parameters (request names, `p1`) that the statement now reads as text:
    /// send them typed `STRING`, with the same value.
    pub(crate) text_params: Vec<String>,
}

/// Rewrites the interval arithmetic of a PostgreSQL statement for the official emulator.
///
/// `interval_params` names the parameters typed `INTERVAL` (request names, `p1`), and
/// `non_null_params` those whose value in the request is not NULL (the others are guarded).
/// Returns `None` when the statement needs no rewrite (also when it does not tokenize, or does
/// not parse and spells out no interval: the backend then reports what is wrong).
///
/// # Errors
/// An [`IntervalError`] for an interval used in a way the official emulator cannot run, or in
/// a statement the front cannot parse.
pub(crate) fn translate(
    sql: &str,
    interval_params: &[&str],
    non_null_params: &[&str],
) -> Result<Option<Translated>, IntervalError> {
    let Some(source) = Source::read(sql) else {
        return Ok(None);
    };
    if !source.may_need_rewrite(interval_params) {
        return Ok(None);
    }
    if let Some(construct) = source.interval_precision() {
        return Err(IntervalError::new(
            construct,
            format!("an interval literal with a precision; {ONLY_ADDED}"),
        ));
    }
    let mut statement = match source.parse() {
        Ok(Some(statement)) => statement,
        Ok(None) => return Ok(None),
        Err(error) if source.spells_interval() => {
            return Err(IntervalError::new(
                source.body_text(),
                format!(
                    "the front rewrites interval arithmetic for the official emulator, which has \
                     no interval type, and cannot read this statement ({error})"
                ),
            ));
        }
        Err(_) => return Ok(None),
    };
    let mut rewriter = Rewriter::new(Params {
        interval: interval_params,
        non_null: non_null_params,
    });
    match statement.visit(&mut rewriter) {
        std::ops::ControlFlow::Continue(()) => {}
        std::ops::ControlFlow::Break(Stop::Refused(error)) => return Err(error),
        std::ops::ControlFlow::Break(Stop::Unreadable) => return Ok(None),
    }
    if let Some((_, written)) = source
        .interval_placeholders(interval_params)
        .find(|(name, _)| !rewriter.text_params.contains(name))
    {
        return Err(IntervalError::new(
            &format!("the INTERVAL parameter {written}"),
            format!("used other than added to or subtracted from a timestamptz; {ONLY_ADDED}"),
        ));
    }
    if !rewriter.changed {
        return Ok(None);
    }
    if source.hint_inside() {
        return Err(IntervalError::new(
            source.body_text(),
            "a statement hint (/*@ … */) inside a statement whose interval arithmetic the front \
             rewrites: the rewritten statement is printed anew, without its comments. Put the \
             hint before the statement, or compute the time in a parameter",
        ));
    }
    let mut text_params = rewriter.text_params;
    text_params.sort();
    text_params.dedup();
    Ok(Some(Translated {
        sql: source.replaced(&statement.to_string()),
        text_params,
    }))
}

/// The official emulator's answer to a statement holding an interval value.
const BACKEND_NO_INTERVAL: &str = "The Postgres Type is not supported: interval";

/// The start of the official emulator's answer to an unsupported function, such as
/// `timestamptz_mi(timestamp with time zone, timestamp with time zone)` for the difference of
/// two timestamps (an interval).
const BACKEND_NO_FUNCTION: &str = "Postgres function ";

/// For the official emulator's `UNIMPLEMENTED` `message` about an interval value the front did
/// not rewrite (one it cannot see, such as `timestamptz - timestamptz`), the message to answer
/// with instead, as `INVALID_ARGUMENT`, saying what works; `None` for other messages.
pub(crate) fn explain_unimplemented(message: &str) -> Option<String> {
    let about_interval = message.contains(BACKEND_NO_INTERVAL)
        || message.starts_with(BACKEND_NO_FUNCTION)
            && (message.contains("interval")
                || message.contains("timestamptz_mi(")
                || message.contains("timestamp_mi("));
    about_interval.then(|| {
        format!(
            "an interval value the spanner-queues emulator cannot rewrite, such as timestamptz \
             - timestamptz or age(…), is not supported: the official emulator has no interval \
             type. Intervals added to or subtracted from a timestamptz work (now() + interval \
             '5 minutes', make_interval(…), INTERVAL parameters); compare timestamps instead \
             of their difference (deliver_time < now() - interval '5 minutes'). The official \
             emulator said: {message}"
        )
    })
}
