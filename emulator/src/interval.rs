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
//! [`translate`] rewrites the interval arithmetic of one statement into those calls: each
//! additive chain (`a + b - c`, bounded by commas, comparisons, keywords and parentheses) that
//! holds an interval operand becomes nested calls, left to right as PostgreSQL evaluates it.
//! The interval operands it knows:
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
//! subtracted from or divided, a precision) is an [`IntervalError`] naming the construct.
//! Intervals the front cannot see (`timestamptz - timestamptz`) still reach the official emulator.
//!
//! `spanner.timestamptz_add` with a NULL argument stops the official emulator's process (a
//! failed check, measured on 1.5.28), where PostgreSQL answers NULL. So when an operand may be
//! NULL (a parameter, a column, anything but a literal or `now()`), the rewritten chain is
//! guarded: `CASE WHEN (a) IS NULL OR … THEN NULL ELSE spanner.timestamptz_add(a, …) END`.

use std::fmt::Write as _;

use spanner_queues_sql::{self as lexer, Dialect, Token, TokenKind};

/// The official emulator's function that adds an interval, given as text, to a timestamptz.
const ADD: &str = "spanner.timestamptz_add";
/// The official emulator's function that subtracts an interval, given as text.
const SUBTRACT: &str = "spanner.timestamptz_subtract";

/// Keywords that end an expression (a clause, a logical or comparison operator).
const BOUNDARY_WORDS: [&str; 63] = [
    "ALL",
    "AND",
    "ANY",
    "AS",
    "ASC",
    "ASSERT_ROWS_MODIFIED",
    "BETWEEN",
    "BY",
    "CONFLICT",
    "CROSS",
    "DELETE",
    "DESC",
    "DISTINCT",
    "DO",
    "ELSE",
    "END",
    "ESCAPE",
    "EXCEPT",
    "EXISTS",
    "FETCH",
    "FILTER",
    "FOR",
    "FROM",
    "FULL",
    "GROUP",
    "HAVING",
    "ILIKE",
    "IN",
    "INNER",
    "INSERT",
    "INTERSECT",
    "INTO",
    "IS",
    "ISNULL",
    "JOIN",
    "LATERAL",
    "LEFT",
    "LIKE",
    "LIMIT",
    "NOT",
    "NOTNULL",
    "NULLS",
    "OFFSET",
    "ON",
    "ONLY",
    "OR",
    "ORDER",
    "OUTER",
    "OVER",
    "RETURNING",
    "RIGHT",
    "SELECT",
    "SET",
    "SIMILAR",
    "SOME",
    "THEN",
    "UNION",
    "UPDATE",
    "USING",
    "VALUES",
    "WHEN",
    "WHERE",
    "WITH",
];

/// Operators that stay inside an additive chain (everything else ends it).
const CHAIN_OPERATORS: [&str; 8] = ["+", "-", "*", "/", "%", "^", ".", "::"];

/// The fields of an interval literal's qualifier (`interval '5' minute`).
const FIELDS: [&str; 6] = ["YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND"];

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

/// The longest piece of a statement quoted in an error.
const QUOTE_LIMIT: usize = 80;

/// An interval construct the emulator cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{construct} is not supported by the spanner-queues emulator: {reason}")]
pub(crate) struct IntervalError {
    /// The construct as written (shortened when long).
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

/// What the official emulator can do with an interval, for error messages.
const ONLY_ADDED: &str = "the official emulator has no interval type, so an interval works only \
                          added to or subtracted from a timestamptz (such as `now() + interval \
                          '5 minutes'`)";

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
/// `non_null_params` those whose value in the request is not NULL (the others are guarded). Returns
/// `None` when the statement holds no interval the front knows how to see (also when it does
/// not tokenize: the backend then reports what is wrong).
///
/// # Errors
/// An [`IntervalError`] for an interval used in a way the official emulator cannot run.
pub(crate) fn translate(
    sql: &str,
    interval_params: &[&str],
    non_null_params: &[&str],
) -> Result<Option<Translated>, IntervalError> {
    let Ok(toks) = lexer::tokenize(sql, Dialect::PostgreSql) else {
        return Ok(None);
    };
    let mut rewriter = Rewriter {
        src: sql,
        toks,
        interval_params,
        non_null_params,
        text_params: Vec::new(),
        changed: false,
    };
    if !rewriter.has_marker(0, rewriter.toks.len()) {
        return Ok(None);
    }
    let body = rewriter.render(0, rewriter.toks.len())?;
    if let Some(unused) = rewriter.toks.iter().find(|t| {
        t.kind == TokenKind::Param
            && interval_params.contains(&t.value.as_ref())
            && !rewriter.text_params.iter().any(|p| *p == t.value)
    }) {
        return Err(IntervalError::new(
            &format!("the INTERVAL parameter {}", unused.text),
            format!("used other than added to or subtracted from a timestamptz; {ONLY_ADDED}"),
        ));
    }
    if !rewriter.changed {
        return Ok(None);
    }
    let (Some(first), Some(last)) = (rewriter.toks.first(), rewriter.toks.last()) else {
        return Ok(None);
    };
    let sql = format!("{}{body}{}", &sql[..first.start], &sql[last.end()..]);
    let mut text_params = rewriter.text_params;
    text_params.sort();
    text_params.dedup();
    Ok(Some(Translated { sql, text_params }))
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

/// Quotes `value` as a PostgreSQL string literal.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// An operand of an additive chain, rendered.
#[derive(Debug, Clone)]
enum Term {
    /// An interval: `text` is SQL of its text form.
    Interval(Interval),
    /// Anything else, as written (inner intervals rewritten).
    Other(Other),
}

/// An interval operand.
#[derive(Debug, Clone)]
struct Interval {
    /// SQL whose value is the interval as text.
    text: String,
    /// The interval's text when known in the statement (a literal).
    literal: Option<String>,
    /// Whether it can never be NULL.
    non_null: bool,
}

impl Interval {
    fn literal(value: String) -> Self {
        Self {
            text: quote(&value),
            literal: Some(value),
            non_null: true,
        }
    }
}

/// A non-interval operand.
#[derive(Debug, Clone)]
struct Other {
    /// The operand as written, with inner intervals rewritten.
    text: String,
    /// Whether it can never be NULL (a literal, `now()`).
    non_null: bool,
    /// Whether it is recognizably a timestamp.
    timestamp: bool,
    /// The decoded value when the operand is a bare string literal.
    string: Option<String>,
}

/// How an operand joins the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sign {
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
}

/// A piece of an interval's text: a literal part, or SQL computing one.
enum Piece {
    Text(String),
    Sql(String),
}

/// Joins pieces into SQL of one text value (`'1 hours ' || CAST(($1) AS text) || ' mins'`).
fn concat(pieces: Vec<Piece>) -> Interval {
    let mut merged: Vec<Piece> = Vec::new();
    for piece in pieces {
        match (merged.last_mut(), piece) {
            (Some(Piece::Text(prev)), Piece::Text(next)) => prev.push_str(&next),
            (_, piece) => merged.push(piece),
        }
    }
    if let [Piece::Text(value)] = merged.as_slice() {
        return Interval::literal(value.clone());
    }
    let parts: Vec<String> = merged
        .into_iter()
        .map(|p| match p {
            Piece::Text(t) => quote(&t),
            Piece::Sql(s) => s,
        })
        .collect();
    Interval {
        text: format!("({})", parts.join(" || ")),
        literal: None,
        non_null: false,
    }
}

/// A number written in a statement: an integer when it is one, else a float.
#[derive(Debug, Clone, Copy)]
enum Number {
    Int(i128),
    Float(f64),
}

impl Number {
    fn parse(text: &str) -> Option<Self> {
        if let Ok(n) = text.parse::<i128>() {
            return Some(Number::Int(n));
        }
        let float = text.parse::<f64>().ok()?;
        float.is_finite().then_some(Number::Float(float))
    }

    fn times(self, other: Number) -> Option<String> {
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

/// Splits a simple interval literal (`'1 hour 30 minutes'`) into (number, unit) pairs.
fn simple_pairs(literal: &str) -> Option<Vec<(Number, &str)>> {
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

/// The rewriting of one statement.
struct Rewriter<'s, 'p> {
    /// The statement.
    src: &'s str,
    /// Its tokens.
    toks: Vec<Token<'s>>,
    /// Parameters typed `INTERVAL`.
    interval_params: &'p [&'p str],
    /// Parameters whose value is not NULL.
    non_null_params: &'p [&'p str],
    /// `INTERVAL` parameters now read as text.
    text_params: Vec<String>,
    /// Whether anything was rewritten.
    changed: bool,
}

impl<'s> Rewriter<'s, '_> {
    fn tok(&self, i: usize) -> Option<&Token<'_>> {
        self.toks.get(i)
    }

    fn is_word(&self, i: usize, word: &str) -> bool {
        self.tok(i).is_some_and(|t| t.is_word(word))
    }

    fn is_punct(&self, i: usize, punct: &str) -> bool {
        self.tok(i).is_some_and(|t| t.is_punct(punct))
    }

    /// The source between token `i - 1` and token `i`.
    fn gap(&self, i: usize) -> &'s str {
        match (i.checked_sub(1).and_then(|p| self.tok(p)), self.tok(i)) {
            (Some(prev), Some(next)) => {
                let src: &'s str = self.src;
                &src[prev.end()..next.start]
            }
            _ => "",
        }
    }

    /// The source of tokens `a..b`.
    fn span(&self, a: usize, b: usize) -> &'s str {
        if b <= a {
            return "";
        }
        let src: &'s str = self.src;
        &src[self.toks[a].start..self.toks[b - 1].end()]
    }

    /// Whether token `i` is a parameter whose value is not NULL.
    fn non_null_param(&self, i: usize) -> bool {
        self.tok(i).is_some_and(|t| {
            t.kind == TokenKind::Param && self.non_null_params.contains(&t.value.as_ref())
        })
    }

    /// Whether `spanner.timestamptz_add(` or `spanner.timestamptz_subtract(` starts at token `i`.
    fn emulator_call_at(&self, i: usize) -> bool {
        self.is_word(i, "spanner")
            && self.is_punct(i + 1, ".")
            && (self.is_word(i + 2, "timestamptz_add")
                || self.is_word(i + 2, "timestamptz_subtract"))
            && self.is_punct(i + 3, "(")
    }

    /// Whether the operand `s..b` can never be NULL: a literal, a parameter with a value,
    /// `now()`, or a cast of one of those.
    fn operand_non_null(&self, s: usize, b: usize) -> bool {
        let n = b.saturating_sub(s);
        let t = |k: usize| &self.toks[s + k];
        let single = |i: usize| {
            self.tok(i)
                .is_some_and(|t| matches!(t.kind, TokenKind::String | TokenKind::Number))
                || self.non_null_param(i)
        };
        let now = (n == 3
            && (t(0).is_word("now") || t(0).is_word("transaction_timestamp"))
            && t(1).is_punct("(")
            && t(2).is_punct(")"))
            || (n == 1 && t(0).is_word("current_timestamp"))
            || (n == 4 && t(0).is_word("current_timestamp") && t(1).is_punct("("));
        // `'…'`, `$1`, `'…'::timestamptz`, `$1::text`.
        let cast = n >= 1
            && single(s)
            && (n == 1 || self.is_punct(s + 1, "::") && self.type_end(s + 2, b) == b);
        // `timestamptz '…'`.
        let typed_literal = n >= 2
            && self.toks[b - 1].kind == TokenKind::String
            && self.toks[s..b - 1]
                .iter()
                .all(|t| t.kind == TokenKind::Word);
        now || cast || typed_literal
    }

    /// A user-written `spanner.timestamptz_add(…)` / `_subtract(…)` at `i`, its parenthesis
    /// closed at `close`: guarded when an argument may be NULL (the official emulator's process
    /// stops on a NULL argument).
    fn guarded_call(&mut self, i: usize, close: usize) -> Result<Option<String>, IntervalError> {
        let open = i + 3;
        let mut args = Vec::new();
        let mut start = open + 1;
        let mut k = open + 1;
        while k < close {
            if self.is_punct(k, ",") {
                args.push((start, k));
                start = k + 1;
                k += 1;
            } else {
                k = self.unit_end(k, close);
            }
        }
        args.push((start, close));
        let nullable: Vec<(usize, usize)> = args
            .into_iter()
            .filter(|&(a, b)| a < b && !self.operand_non_null(a, b))
            .collect();
        if nullable.is_empty() {
            return Ok(None);
        }
        let mut conditions = Vec::new();
        for (a, b) in nullable {
            conditions.push(format!("({}) IS NULL", self.render(a, b)?));
        }
        let inner = if close > open + 1 {
            format!(
                "{}{}{}",
                self.gap(open + 1),
                self.render(open + 1, close)?,
                self.gap(close)
            )
        } else {
            String::new()
        };
        self.changed = true;
        Ok(Some(format!(
            "CASE WHEN {} THEN NULL ELSE {}({inner}) END",
            conditions.join(" OR "),
            self.span(i, open)
        )))
    }

    /// Whether tokens `a..b` hold anything that may be an interval.
    fn has_marker(&self, a: usize, b: usize) -> bool {
        (a..b.min(self.toks.len())).any(|i| {
            let t = &self.toks[i];
            t.is_word("interval")
                || t.is_word("make_interval")
                || self.emulator_call_at(i)
                || (t.kind == TokenKind::Param && self.interval_params.contains(&t.value.as_ref()))
                || (t.kind == TokenKind::String
                    && i > a
                    && (self.is_punct(i - 1, "+") || self.is_punct(i - 1, "-")))
        })
    }

    /// The index of the token closing the group opened at `open` (`(` or `[`), or of the `END`
    /// of the `CASE` at `open`; `None` when it is never closed.
    fn closing(&self, open: usize) -> Option<usize> {
        let mut depth = 0usize;
        for i in open..self.toks.len() {
            let t = &self.toks[i];
            if t.is_punct("(") || t.is_punct("[") || t.is_word("CASE") {
                depth += 1;
            } else if t.is_punct(")") || t.is_punct("]") || t.is_word("END") {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Whether token `i` ends the additive chain it would be part of.
    fn is_boundary(&self, i: usize) -> bool {
        let t = &self.toks[i];
        match t.kind {
            TokenKind::Punct => {
                !(CHAIN_OPERATORS.contains(&t.text) || t.is_punct("(") || t.is_punct("["))
            }
            TokenKind::Word => BOUNDARY_WORDS.iter().any(|w| t.is_word(w)),
            _ => false,
        }
    }

    /// The index after a type name starting at `i` (after `::`).
    fn type_end(&self, mut i: usize, hi: usize) -> usize {
        if i >= hi || !self.toks[i].is_ident() {
            return i;
        }
        i = self.word_type_end(i, hi);
        while i + 1 < hi && self.is_punct(i, ".") && self.tok(i + 1).is_some_and(Token::is_ident) {
            i += 2;
        }
        if i < hi && self.is_punct(i, "(") {
            i = self.closing(i).map_or(hi, |c| c + 1).min(hi);
        }
        while i + 1 < hi && self.is_punct(i, "[") && self.is_punct(i + 1, "]") {
            i += 2;
        }
        i
    }

    /// The index after a (possibly multi-word) type name at `i`: `timestamp with time zone`,
    /// `double precision`, `character varying`.
    fn word_type_end(&self, i: usize, hi: usize) -> usize {
        let t = &self.toks[i];
        if (t.is_word("timestamp") || t.is_word("time"))
            && (self.is_word(i + 1, "with") || self.is_word(i + 1, "without"))
            && self.is_word(i + 2, "time")
            && self.is_word(i + 3, "zone")
        {
            return (i + 4).min(hi);
        }
        if (t.is_word("double") && self.is_word(i + 1, "precision"))
            || ((t.is_word("character") || t.is_word("bit")) && self.is_word(i + 1, "varying"))
        {
            return (i + 2).min(hi);
        }
        i + 1
    }

    /// The index after the operand unit at `i`: a group, a `CASE … END`, a cast's `::type`, a
    /// multi-word type name, or one token.
    fn unit_end(&self, i: usize, hi: usize) -> usize {
        let t = &self.toks[i];
        if t.is_punct("(") || t.is_punct("[") || t.is_word("CASE") {
            return self.closing(i).map_or(hi, |c| c + 1).min(hi);
        }
        if t.is_punct("::") {
            return self.type_end(i + 1, hi);
        }
        if t.kind == TokenKind::Word {
            return self.word_type_end(i, hi);
        }
        i + 1
    }

    /// Renders tokens `lo..hi`, rewriting every additive chain that holds an interval.
    fn render(&mut self, lo: usize, hi: usize) -> Result<String, IntervalError> {
        let mut out = String::new();
        let mut i = lo;
        while i < hi {
            if i > lo {
                out.push_str(self.gap(i));
            }
            if self.is_boundary(i) {
                out.push_str(self.toks[i].text);
                i += 1;
                continue;
            }
            let mut end = i;
            while end < hi && !self.is_boundary(end) {
                end = self.unit_end(end, hi);
            }
            let chain = self.chain(i, end)?;
            out.push_str(&chain);
            i = end;
        }
        Ok(out)
    }

    /// Renders tokens `lo..hi` as written, except inside groups and `CASE`s, which are
    /// rendered (rewritten) on their own.
    fn verbatim(&mut self, lo: usize, hi: usize) -> Result<String, IntervalError> {
        let mut out = String::new();
        let mut i = lo;
        while i < hi {
            if i > lo {
                out.push_str(self.gap(i));
            }
            if self.emulator_call_at(i)
                && let Some(close) = self.closing(i + 3).filter(|&c| c < hi)
                && let Some(guarded) = self.guarded_call(i, close)?
            {
                out.push_str(&guarded);
                i = close + 1;
                continue;
            }
            let t = &self.toks[i];
            let opens = t.is_punct("(") || t.is_punct("[") || t.is_word("CASE");
            match self.closing(i).filter(|&c| opens && c < hi) {
                Some(close) => {
                    out.push_str(self.toks[i].text);
                    if close > i + 1 {
                        out.push_str(self.gap(i + 1));
                        let inner = self.render(i + 1, close)?;
                        out.push_str(&inner);
                    }
                    out.push_str(self.gap(close));
                    out.push_str(self.toks[close].text);
                    i = close + 1;
                }
                None => {
                    out.push_str(t.text);
                    i += 1;
                }
            }
        }
        Ok(out)
    }

    /// Splits the chain `lo..hi` at its binary `+` and `-`: each term's sign, operator index
    /// (none for the first) and token range.
    fn terms(&self, lo: usize, hi: usize) -> Vec<(Sign, Option<usize>, usize, usize)> {
        let mut terms = Vec::new();
        let mut sign = Sign::Plus;
        let mut op = None;
        let mut start = lo;
        let mut operand_before = false;
        let mut i = lo;
        while i < hi {
            let t = &self.toks[i];
            if operand_before && (t.is_punct("+") || t.is_punct("-")) {
                terms.push((sign, op, start, i));
                sign = if t.is_punct("+") {
                    Sign::Plus
                } else {
                    Sign::Minus
                };
                op = Some(i);
                start = i + 1;
                operand_before = false;
                i += 1;
                continue;
            }
            operand_before = !(t.kind == TokenKind::Punct
                && !t.is_punct("(")
                && !t.is_punct("[")
                && !t.is_punct("::"));
            i = self.unit_end(i, hi);
        }
        terms.push((sign, op, start, hi));
        terms
    }

    /// Renders the additive chain `lo..hi`.
    fn chain(&mut self, lo: usize, hi: usize) -> Result<String, IntervalError> {
        if !self.has_marker(lo, hi) {
            return self.verbatim(lo, hi);
        }
        let split = self.terms(lo, hi);
        let count = split.len();
        let mut terms = Vec::with_capacity(count);
        for (n, &(sign, op, a, b)) in split.iter().enumerate() {
            let (sign, term, suffix) = self.term(sign, a, b, n + 1 == count)?;
            terms.push((sign, op, a, b, term, suffix));
        }
        if terms.len() == 1
            && let Term::Other(other) = &terms[0].4
        {
            return Ok(other.text.clone());
        }
        let mut fold = Fold::default();
        let mut suffix = None;
        for (sign, op, a, b, term, term_suffix) in terms {
            suffix = term_suffix.or(suffix);
            let gap_op = op.map_or(String::new(), |o| {
                format!("{}{}{}", self.gap(o), self.toks[o].text, self.gap(o + 1))
            });
            fold.push(sign, &gap_op, term, self.span(a, b))?;
        }
        let Some(text) = fold.finish(self.span(lo, hi))? else {
            return self.verbatim(lo, hi);
        };
        self.changed = true;
        Ok(match suffix {
            Some(s) => format!("{text}{s}"),
            None => text,
        })
    }

    /// Classifies the term `a..b` of a chain, joined with `sign`; returns the sign after any
    /// unary minus of an interval, the term, and a trailing alias (last term only).
    fn term(
        &mut self,
        sign: Sign,
        a: usize,
        b: usize,
        last: bool,
    ) -> Result<(Sign, Term, Option<String>), IntervalError> {
        let mut s = a;
        let mut negated = false;
        while s < b && (self.is_punct(s, "+") || self.is_punct(s, "-")) {
            negated ^= self.is_punct(s, "-");
            s += 1;
        }
        let effective = if negated { sign.flip() } else { sign };
        // `interval …`, possibly times a factor, possibly followed by an alias.
        if let Some((interval, q)) = self.interval_primary(s, b)? {
            if q == b {
                return Ok((effective, Term::Interval(interval), None));
            }
            if self.is_punct(q, "*") && self.unit_end(q + 1, b) == b {
                let scaled = self.scale(&interval, q + 1, b, self.span(s, b))?;
                return Ok((effective, Term::Interval(scaled), None));
            }
            let alias = self.toks[q].kind == TokenKind::Word && q + 1 == b && last;
            if alias {
                let suffix = format!("{}{}", self.gap(q), self.toks[q].text);
                return Ok((effective, Term::Interval(interval), Some(suffix)));
            }
            let reason = if self.is_punct(q, "/") {
                format!("dividing an interval; {ONLY_ADDED}")
            } else {
                ONLY_ADDED.to_owned()
            };
            return Err(IntervalError::new(self.span(a, b), reason));
        }
        // A factor times an interval.
        let f = if s < b { self.unit_end(s, b) } else { b };
        if f < b && self.is_punct(f, "*") {
            let factor_end = f;
            if let Some((interval, q)) = self.interval_primary(f + 1, b)?
                && q == b
            {
                let scaled = self.scale(&interval, s, factor_end, self.span(s, b))?;
                return Ok((effective, Term::Interval(scaled), None));
            }
        }
        if self.has_marker_outside_groups(a, b) {
            return Err(IntervalError::new(self.span(a, b), ONLY_ADDED));
        }
        let other = self.other(a, s, b)?;
        Ok((sign, Term::Other(other), None))
    }

    /// Whether tokens `a..b` mention an interval outside parentheses (inside, the groups are
    /// rendered on their own).
    fn has_marker_outside_groups(&self, a: usize, b: usize) -> bool {
        let mut i = a;
        while i < b {
            let t = &self.toks[i];
            if t.is_punct("(") || t.is_punct("[") || t.is_word("CASE") {
                i = self.closing(i).map_or(b, |c| c + 1);
                continue;
            }
            let interval_type = t.is_word("interval") && i > a && self.is_punct(i - 1, "::");
            let literal = t.is_word("interval")
                && self
                    .tok(i + 1)
                    .is_some_and(|n| n.kind == TokenKind::String || n.is_punct("("));
            let param =
                t.kind == TokenKind::Param && self.interval_params.contains(&t.value.as_ref());
            if interval_type || literal || param || t.is_word("make_interval") {
                return true;
            }
            i += 1;
        }
        false
    }

    /// A non-interval term `a..b` (its operand proper starting at `s`, after unary signs).
    fn other(&mut self, a: usize, s: usize, b: usize) -> Result<Other, IntervalError> {
        let text = self.verbatim(a, b)?;
        let n = b - s;
        let t = |k: usize| &self.toks[s + k];
        let string = (n == 1 && t(0).kind == TokenKind::String).then(|| t(0).value.to_string());
        let now = (n == 3
            && (t(0).is_word("now") || t(0).is_word("transaction_timestamp"))
            && t(1).is_punct("(")
            && t(2).is_punct(")"))
            || (n == 1 && t(0).is_word("current_timestamp"))
            || (n == 4 && t(0).is_word("current_timestamp") && t(1).is_punct("("));
        let is_tz_type = |i: usize, end: usize| {
            self.is_word(i, "timestamptz") && i + 1 == end && !self.is_punct(i + 1, "(")
                || self.is_word(i, "timestamp")
                    && self.is_word(i + 1, "with")
                    && self.word_type_end(i, end) == end
        };
        // `'…'::timestamptz`, `x::timestamptz`.
        let cast = n >= 3 && {
            let unit = self.unit_end(s, b);
            unit < b && self.is_punct(unit, "::") && is_tz_type(unit + 1, b)
        };
        let literal_cast = cast && t(0).kind == TokenKind::String && self.is_punct(s + 1, "::");
        // `timestamptz '…'`.
        let typed_literal =
            n >= 2 && self.toks[b - 1].kind == TokenKind::String && is_tz_type(s, b - 1);
        // `CAST(x AS timestamptz)`.
        let cast_call = n >= 2
            && t(0).is_word("cast")
            && t(1).is_punct("(")
            && self.closing(s + 1) == Some(b - 1)
            && (s + 2..b - 1)
                .rev()
                .find(|&i| self.is_word(i, "as"))
                .is_some_and(|as_at| is_tz_type(as_at + 1, b - 1));
        let emulator_call = n >= 4
            && t(0).is_word("spanner")
            && t(1).is_punct(".")
            && (t(2).is_word("timestamptz_add") || t(2).is_word("timestamptz_subtract"));
        Ok(Other {
            text,
            non_null: s == a
                && (now || literal_cast || typed_literal || self.operand_non_null(s, b)),
            timestamp: s == a && (now || cast || typed_literal || cast_call || emulator_call),
            string: (s == a).then_some(string).flatten(),
        })
    }

    /// Recognizes an interval operand starting at `s` (before `b`): the operand and the index
    /// after it.
    fn interval_primary(
        &mut self,
        s: usize,
        b: usize,
    ) -> Result<Option<(Interval, usize)>, IntervalError> {
        if s >= b {
            return Ok(None);
        }
        let t = self.toks[s].clone();
        // `x::interval`: the operand is the text.
        let unit = self.unit_end(s, b);
        if unit < b
            && self.is_punct(unit, "::")
            && self.is_word(unit + 1, "interval")
            && !t.is_punct("::")
        {
            let after = unit + 2;
            if self.is_punct(after, "(") || self.is_punct(after, "[") {
                return Err(IntervalError::new(
                    self.span(s, self.type_end(unit + 1, b)),
                    format!("an interval type with a precision or as an array; {ONLY_ADDED}"),
                ));
            }
            let interval = self.text_operand(s, unit)?;
            return Ok(Some((interval, after)));
        }
        if t.is_word("interval") {
            return self.interval_literal(s, b);
        }
        if t.is_word("make_interval") && self.is_punct(s + 1, "(") {
            let Some(close) = self.closing(s + 1).filter(|&c| c < b) else {
                return Ok(None);
            };
            let interval = self.make_interval(s, close)?;
            return Ok(Some((interval, close + 1)));
        }
        if t.is_word("cast")
            && self.is_punct(s + 1, "(")
            && let Some(close) = self.closing(s + 1).filter(|&c| c < b)
            && let Some(as_at) = (s + 2..close).rev().find(|&i| self.is_word(i, "as"))
            && self.is_word(as_at + 1, "interval")
        {
            if as_at + 2 != close {
                return Err(IntervalError::new(
                    self.span(s, close + 1),
                    format!("an interval type with a precision or as an array; {ONLY_ADDED}"),
                ));
            }
            let text = self.render(s + 2, as_at)?;
            let non_null = as_at == s + 3 && self.toks[s + 2].kind == TokenKind::String;
            self.note_text_params(s + 2, as_at);
            return Ok(Some((
                Interval {
                    text: format!("({text})"),
                    literal: non_null.then(|| self.toks[s + 2].value.to_string()),
                    non_null,
                },
                close + 1,
            )));
        }
        if t.kind == TokenKind::Param && self.interval_params.contains(&t.value.as_ref()) {
            self.text_params.push(t.value.to_string());
            return Ok(Some((
                Interval {
                    text: t.text.to_owned(),
                    literal: None,
                    non_null: self.non_null_param(s),
                },
                s + 1,
            )));
        }
        // `(interval '1 day' + interval '2 hours')`.
        if t.is_punct("(")
            && let Some(close) = self.closing(s).filter(|&c| c < b)
            && self.has_marker(s + 1, close)
            && let Some(interval) = self.interval_sum(s + 1, close)?
        {
            return Ok(Some((interval, close + 1)));
        }
        Ok(None)
    }

    /// The operand `s..e` of a cast to interval, as SQL of its text.
    fn text_operand(&mut self, s: usize, e: usize) -> Result<Interval, IntervalError> {
        let t = &self.toks[s];
        if e == s + 1 && t.kind == TokenKind::String {
            return Ok(Interval {
                text: t.text.to_owned(),
                literal: Some(t.value.to_string()),
                non_null: true,
            });
        }
        self.note_text_params(s, e);
        let text = self.verbatim(s, e)?;
        Ok(Interval {
            text,
            literal: None,
            non_null: e == s + 1 && self.non_null_param(s),
        })
    }

    /// Notes the `INTERVAL` parameters among tokens `a..b` as read as text.
    fn note_text_params(&mut self, a: usize, b: usize) {
        for i in a..b {
            let t = &self.toks[i];
            if t.kind == TokenKind::Param && self.interval_params.contains(&t.value.as_ref()) {
                self.text_params.push(t.value.to_string());
            }
        }
    }

    /// `interval '…' [field]` at `s`.
    fn interval_literal(
        &mut self,
        s: usize,
        b: usize,
    ) -> Result<Option<(Interval, usize)>, IntervalError> {
        if self.is_punct(s + 1, "(") {
            let end = self.closing(s + 1).map_or(b, |c| c + 2).min(b);
            return Err(IntervalError::new(
                self.span(s, end),
                format!("an interval literal with a precision; {ONLY_ADDED}"),
            ));
        }
        let Some(literal) = self.tok(s + 1).filter(|t| t.kind == TokenKind::String) else {
            // An identifier named `interval`.
            return Ok(None);
        };
        let value = literal.value.to_string();
        let literal_text = literal.text.to_owned();
        let q = s + 2;
        if q < b && FIELDS.iter().any(|f| self.is_word(q, f)) {
            let field = self.toks[q].text.to_ascii_lowercase();
            let mut end = q + 1;
            if self.is_word(end, "to") {
                end += 2;
            }
            if self.is_punct(end, "(") {
                end = self.closing(end).map_or(b, |c| c + 1);
            }
            let single = end == q + 1;
            if !single || Number::parse(value.trim()).is_none() {
                return Err(IntervalError::new(
                    self.span(s, end.min(b)),
                    format!(
                        "an interval literal with a field qualifier is supported only as a \
                         number and one field (interval '5' minute); {ONLY_ADDED}"
                    ),
                ));
            }
            return Ok(Some((
                Interval::literal(format!("{} {field}", value.trim())),
                end,
            )));
        }
        Ok(Some((
            Interval {
                text: literal_text,
                literal: Some(value),
                non_null: true,
            },
            q,
        )))
    }

    /// `make_interval(…)` at `s`, its parenthesis closed at `close`.
    fn make_interval(&mut self, s: usize, close: usize) -> Result<Interval, IntervalError> {
        let whole = self.span(s, close + 1).to_owned();
        let mut args: Vec<(usize, usize)> = Vec::new();
        let mut start = s + 2;
        let mut i = s + 2;
        while i < close {
            if self.is_punct(i, ",") {
                args.push((start, i));
                start = i + 1;
                i += 1;
            } else {
                i = self.unit_end(i, close);
            }
        }
        if start < close || !args.is_empty() {
            args.push((start, close));
        }
        let mut values: [Option<(usize, usize)>; 7] = [None; 7];
        let mut named = false;
        for (position, &(a, b)) in args.iter().enumerate() {
            let name = if self.tok(a).is_some_and(Token::is_ident) && self.is_punct(a + 1, "=>") {
                Some((self.toks[a].value.to_ascii_lowercase(), a + 2))
            } else if self.tok(a).is_some_and(Token::is_ident)
                && self.is_punct(a + 1, ":")
                && self.is_punct(a + 2, "=")
            {
                Some((self.toks[a].value.to_ascii_lowercase(), a + 3))
            } else {
                None
            };
            let (slot, value_start) = match name {
                Some((name, value_start)) => {
                    named = true;
                    let slot = MAKE_INTERVAL_ARGS
                        .iter()
                        .position(|(n, _)| *n == name)
                        .ok_or_else(|| {
                            IntervalError::new(
                                &whole,
                                format!(
                                    "make_interval has no argument {name} (it takes years, \
                                     months, weeks, days, hours, mins, secs)"
                                ),
                            )
                        })?;
                    (slot, value_start)
                }
                None if named => {
                    return Err(IntervalError::new(
                        &whole,
                        "a positional argument after a named one",
                    ));
                }
                None if position >= MAKE_INTERVAL_ARGS.len() => {
                    return Err(IntervalError::new(
                        &whole,
                        "make_interval takes at most 7 arguments (years, months, weeks, days, \
                         hours, mins, secs)",
                    ));
                }
                None => (position, a),
            };
            if value_start >= b {
                return Err(IntervalError::new(&whole, "an empty argument"));
            }
            if values[slot].replace((value_start, b)).is_some() {
                return Err(IntervalError::new(
                    &whole,
                    format!("the argument {} given twice", MAKE_INTERVAL_ARGS[slot].0),
                ));
            }
        }
        let mut pieces = Vec::new();
        for (slot, range) in values.iter().enumerate() {
            let Some((a, b)) = *range else { continue };
            let unit = MAKE_INTERVAL_ARGS[slot].1;
            if !pieces.is_empty() {
                pieces.push(Piece::Text(" ".to_owned()));
            }
            match self.signed_number(a, b) {
                Some(number) => pieces.push(Piece::Text(format!("{number} {unit}"))),
                None => {
                    self.note_text_params(a, b);
                    let expr = self.render(a, b)?;
                    pieces.push(Piece::Sql(format!("CAST(({expr}) AS text)")));
                    pieces.push(Piece::Text(format!(" {unit}")));
                }
            }
        }
        if pieces.is_empty() {
            pieces.push(Piece::Text("0 secs".to_owned()));
        }
        Ok(concat(pieces))
    }

    /// The number written by tokens `a..b` (`5`, `-1.5`), if that is all they are.
    fn signed_number(&self, a: usize, b: usize) -> Option<String> {
        let mut negative = false;
        let mut i = a;
        while i < b && (self.is_punct(i, "-") || self.is_punct(i, "+")) {
            negative ^= self.is_punct(i, "-");
            i += 1;
        }
        let t = self
            .tok(i)
            .filter(|t| t.kind == TokenKind::Number && i + 1 == b)?;
        Number::parse(t.text)?;
        Some(if negative {
            format!("-{}", t.text)
        } else {
            t.text.to_owned()
        })
    }

    /// `interval * factor`, the factor at `a..b`.
    fn scale(
        &mut self,
        interval: &Interval,
        a: usize,
        b: usize,
        whole: &str,
    ) -> Result<Interval, IntervalError> {
        let whole = whole.to_owned();
        let pairs = interval
            .literal
            .as_deref()
            .and_then(simple_pairs)
            .ok_or_else(|| {
                IntervalError::new(
                    &whole,
                    "multiplying an interval is supported only for a literal of numbers and \
                     units ('1 hour 30 minutes'); make_interval(mins => $1) computes one too",
                )
            })?;
        let factor = self.signed_number(a, b).and_then(|n| Number::parse(&n));
        let mut pieces = Vec::new();
        for (number, unit) in pairs {
            if !pieces.is_empty() {
                pieces.push(Piece::Text(" ".to_owned()));
            }
            match factor {
                Some(factor) => {
                    let product = number.times(factor).ok_or_else(|| {
                        IntervalError::new(&whole, "a product out of range".to_owned())
                    })?;
                    pieces.push(Piece::Text(format!("{product} {unit}")));
                }
                None => {
                    self.note_text_params(a, b);
                    let expr = self.render(a, b)?;
                    let number = match number {
                        Number::Int(n) => n.to_string(),
                        Number::Float(f) => f.to_string(),
                    };
                    pieces.push(Piece::Sql(format!("CAST(({expr}) * {number} AS text)")));
                    pieces.push(Piece::Text(format!(" {unit}")));
                }
            }
        }
        Ok(concat(pieces))
    }

    /// The interval sum `a..b` (inside parentheses), or `None` when it is not one.
    fn interval_sum(&mut self, a: usize, b: usize) -> Result<Option<Interval>, IntervalError> {
        let mut i = a;
        while i < b {
            if self.is_boundary(i) {
                // A list or a clause, not one expression.
                return Ok(None);
            }
            i = self.unit_end(i, b);
        }
        let split = self.terms(a, b);
        let mut pieces = Vec::new();
        for (sign, _, s, e) in split {
            let (sign, term, suffix) = self.term(sign, s, e, false)?;
            let Term::Interval(interval) = term else {
                return Ok(None);
            };
            if sign == Sign::Minus || suffix.is_some() {
                return Err(IntervalError::new(
                    self.span(a, b),
                    format!("subtracting from an interval; {ONLY_ADDED}"),
                ));
            }
            if !pieces.is_empty() {
                pieces.push(Piece::Text(" ".to_owned()));
            }
            pieces.push(match interval.literal {
                Some(value) => Piece::Text(value),
                None => Piece::Sql(interval.text),
            });
        }
        let mut joined = concat(pieces);
        if joined.literal.is_none() {
            joined.non_null = false;
        }
        Ok(Some(joined))
    }
}

/// The value of an additive chain so far.
struct Acc {
    /// Its SQL.
    text: String,
    /// Whether it is recognizably a timestamp (a bare string added to it is an interval).
    timestamp: bool,
    /// Its SQL when it is an operand that may be NULL and has not reached a call yet.
    nullable: Option<String>,
}

/// The left-to-right evaluation of an additive chain.
#[derive(Default)]
struct Fold {
    /// The value so far.
    acc: Option<Acc>,
    /// Intervals met before any other operand (`interval '1 day' + now()`).
    pending: Vec<Interval>,
    /// Operands that may be NULL and reach an emulator call: guarded.
    nullable: Vec<String>,
    /// Whether an emulator call was made.
    calls: bool,
}

impl Fold {
    fn push(
        &mut self,
        sign: Sign,
        gap_op: &str,
        term: Term,
        written: &str,
    ) -> Result<(), IntervalError> {
        let term = match term {
            // A bare string added to a timestamp is an interval in PostgreSQL.
            Term::Other(Other {
                string: Some(value),
                ..
            }) if self.acc.as_ref().is_some_and(|a| a.timestamp) => {
                Term::Interval(Interval::literal(value))
            }
            term => term,
        };
        match (term, self.acc.take()) {
            (Term::Interval(interval), Some(acc)) => {
                self.nullable.extend(acc.nullable);
                if !interval.non_null {
                    self.nullable.push(interval.text.clone());
                }
                let function = if sign == Sign::Plus { ADD } else { SUBTRACT };
                self.calls = true;
                self.acc = Some(Acc {
                    text: format!("{function}({}, {})", acc.text, interval.text),
                    timestamp: true,
                    nullable: None,
                });
            }
            (Term::Interval(interval), None) => {
                if sign == Sign::Minus {
                    return Err(IntervalError::new(
                        written,
                        format!("a negated interval before any timestamp; {ONLY_ADDED}"),
                    ));
                }
                self.pending.push(interval);
            }
            (Term::Other(other), None) if !self.pending.is_empty() => {
                if sign == Sign::Minus {
                    return Err(IntervalError::new(
                        written,
                        format!("subtracting from an interval; {ONLY_ADDED}"),
                    ));
                }
                if !other.non_null {
                    self.nullable.push(other.text.clone());
                }
                let mut pieces = Vec::new();
                for interval in std::mem::take(&mut self.pending) {
                    if !pieces.is_empty() {
                        pieces.push(Piece::Text(" ".to_owned()));
                    }
                    if !interval.non_null {
                        self.nullable.push(interval.text.clone());
                    }
                    pieces.push(match interval.literal {
                        Some(value) => Piece::Text(value),
                        None => Piece::Sql(interval.text),
                    });
                }
                let joined = concat(pieces);
                self.calls = true;
                self.acc = Some(Acc {
                    text: format!("{ADD}({}, {})", other.text, joined.text),
                    timestamp: true,
                    nullable: None,
                });
            }
            (Term::Other(other), None) => {
                self.acc = Some(Acc {
                    nullable: (!other.non_null).then(|| other.text.clone()),
                    text: other.text,
                    timestamp: other.timestamp,
                });
            }
            (Term::Other(other), Some(acc)) => {
                // `a - b + interval '1 hour'`: the sum is guarded as a whole.
                let text = format!("{}{gap_op}{}", acc.text, other.text);
                self.acc = Some(Acc {
                    nullable: (acc.nullable.is_some() || !other.non_null).then(|| text.clone()),
                    text,
                    timestamp: false,
                });
            }
        }
        Ok(())
    }

    /// The chain's SQL, or `None` when it needed no emulator call.
    fn finish(self, written: &str) -> Result<Option<String>, IntervalError> {
        let Some(acc) = self.acc else {
            return Err(IntervalError::new(
                written,
                format!("an interval value on its own; {ONLY_ADDED}"),
            ));
        };
        if !self.calls {
            return Ok(None);
        }
        if self.nullable.is_empty() {
            return Ok(Some(acc.text));
        }
        let mut guard = String::from("CASE WHEN ");
        for (n, operand) in self.nullable.iter().enumerate() {
            if n > 0 {
                guard.push_str(" OR ");
            }
            let _ = write!(guard, "({operand}) IS NULL");
        }
        let _ = write!(guard, " THEN NULL ELSE {} END", acc.text);
        Ok(Some(guard))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rewritten statement (panics when it is refused or left alone).
    fn sql(statement: &str) -> String {
        rewrite(statement, &[]).sql
    }

    fn rewrite(statement: &str, interval_params: &[&str]) -> Translated {
        translate(statement, interval_params, &[])
            .unwrap_or_else(|e| panic!("{statement}: {e}"))
            .unwrap_or_else(|| panic!("{statement}: left alone"))
    }

    /// The error's text (panics when the statement is accepted).
    fn refused(statement: &str) -> String {
        match translate(statement, &[], &[]) {
            Err(e) => e.to_string(),
            Ok(t) => panic!("{statement}: accepted as {t:?}"),
        }
    }

    #[test]
    fn statements_without_intervals_are_left_alone() {
        for statement in [
            "SELECT 1",
            "INSERT INTO q (id, payload) VALUES ($1, $2)",
            "SELECT spanner.timestamptz_add(now(), '5 minutes')",
            "SELECT spanner.timestamptz_add(CURRENT_TIMESTAMP, '5 microseconds')",
            "SELECT a + b - c * 2 FROM t WHERE x > now()",
            "SELECT 'a' || 'b'",
            // An identifier named interval, and a string that says interval.
            "SELECT interval FROM t",
            "SELECT \"interval\" + 1 FROM t",
            "SELECT 'interval ''1 day''' FROM t",
            "SELECT x - 'abc' FROM t",
            // Does not tokenize: the backend judges it.
            "SELECT interval '5 minutes",
        ] {
            assert_eq!(translate(statement, &[], &[]), Ok(None), "{statement}");
        }
    }

    #[test]
    fn interval_literals_added_to_now_need_no_guard() {
        assert_eq!(
            sql(
                "INSERT INTO q (id, payload, deliver_time) VALUES ($1, $2, now() + interval '5 minutes')"
            ),
            "INSERT INTO q (id, payload, deliver_time) VALUES ($1, $2, \
             spanner.timestamptz_add(now(), '5 minutes'))"
        );
        assert_eq!(
            sql("SELECT CURRENT_TIMESTAMP - INTERVAL '1 hour 30 minutes'"),
            "SELECT spanner.timestamptz_subtract(CURRENT_TIMESTAMP, '1 hour 30 minutes')"
        );
        assert_eq!(
            sql("SELECT now() + '5 minutes'::interval, now() - CAST('2 days' AS interval)"),
            "SELECT spanner.timestamptz_add(now(), '5 minutes'), \
             spanner.timestamptz_subtract(now(), ('2 days'))"
        );
        assert_eq!(
            sql("SELECT '2026-01-01T00:00:00Z'::timestamptz + interval '1 day'"),
            "SELECT spanner.timestamptz_add('2026-01-01T00:00:00Z'::timestamptz, '1 day')"
        );
        assert_eq!(
            sql("SELECT timestamptz '2026-01-01T00:00:00Z' + interval '1 day'"),
            "SELECT spanner.timestamptz_add(timestamptz '2026-01-01T00:00:00Z', '1 day')"
        );
    }

    #[test]
    fn operands_that_may_be_null_are_guarded() {
        assert_eq!(
            sql(
                "INSERT INTO q (id, payload, deliver_time) VALUES ($1, $2, $3::timestamptz + interval '30 seconds')"
            ),
            "INSERT INTO q (id, payload, deliver_time) VALUES ($1, $2, CASE WHEN \
             ($3::timestamptz) IS NULL THEN NULL ELSE \
             spanner.timestamptz_add($3::timestamptz, '30 seconds') END)"
        );
        assert_eq!(
            sql("UPDATE t SET ts = ts + interval '1 hour' WHERE id = 1"),
            "UPDATE t SET ts = CASE WHEN (ts) IS NULL THEN NULL ELSE \
             spanner.timestamptz_add(ts, '1 hour') END WHERE id = 1"
        );
        // A cast parameter: both operands may be NULL.
        assert_eq!(
            sql("SELECT now() + $1::interval"),
            "SELECT CASE WHEN ($1) IS NULL THEN NULL ELSE spanner.timestamptz_add(now(), $1) END"
        );
    }

    #[test]
    fn chains_are_evaluated_left_to_right_with_one_guard() {
        assert_eq!(
            sql("SELECT $1::timestamptz + interval '1 day' - interval '1 hour'"),
            "SELECT CASE WHEN ($1::timestamptz) IS NULL THEN NULL ELSE \
             spanner.timestamptz_subtract(spanner.timestamptz_add($1::timestamptz, '1 day'), \
             '1 hour') END"
        );
        // Intervals before the timestamp are summed as PostgreSQL sums intervals.
        assert_eq!(
            sql("SELECT interval '1 day' + interval '1 month' + now()"),
            "SELECT spanner.timestamptz_add(now(), '1 day 1 month')"
        );
        assert_eq!(
            sql("SELECT now() + (interval '1 hour' + interval '30 minutes')"),
            "SELECT spanner.timestamptz_add(now(), '1 hour 30 minutes')"
        );
        assert_eq!(
            sql("SELECT now() + (interval '1 hour')"),
            "SELECT spanner.timestamptz_add(now(), '1 hour')"
        );
    }

    #[test]
    fn parameters_with_a_value_need_no_guard() {
        let t = translate(
            "SELECT $1::timestamptz + interval '30 seconds', now() + $2",
            &["p2"],
            &["p1", "p2"],
        )
        .expect("supported")
        .expect("rewritten");
        assert_eq!(
            t.sql,
            "SELECT spanner.timestamptz_add($1::timestamptz, '30 seconds'), \
             spanner.timestamptz_add(now(), $2)"
        );
        // The SDK's own scheduled send is left alone when its parameter has a value.
        let sdk = "INSERT INTO q (id, payload, deliver_time) VALUES ($2, $3, \
                   spanner.timestamptz_add(CURRENT_TIMESTAMP, $1))";
        assert_eq!(translate(sdk, &[], &["p1", "p2", "p3"]), Ok(None));
    }

    #[test]
    fn written_emulator_calls_are_guarded_when_an_argument_may_be_null() {
        assert_eq!(
            sql("SELECT spanner.timestamptz_add(CURRENT_TIMESTAMP, $1)"),
            "SELECT CASE WHEN ($1) IS NULL THEN NULL ELSE \
             spanner.timestamptz_add(CURRENT_TIMESTAMP, $1) END"
        );
        assert_eq!(
            sql("UPDATE t SET ts = spanner.timestamptz_subtract(ts, '1 day') WHERE id = 1"),
            "UPDATE t SET ts = CASE WHEN (ts) IS NULL THEN NULL ELSE \
             spanner.timestamptz_subtract(ts, '1 day') END WHERE id = 1"
        );
        // Arguments are rewritten first; a computed argument is checked too (conservatively:
        // this one is never NULL).
        assert_eq!(
            sql("SELECT spanner.timestamptz_add(now() + interval '1 day', $1::text)"),
            "SELECT CASE WHEN (spanner.timestamptz_add(now(), '1 day')) IS NULL OR ($1::text) IS \
             NULL THEN NULL ELSE spanner.timestamptz_add(spanner.timestamptz_add(now(), '1 day'), \
             $1::text) END"
        );
    }

    #[test]
    fn unary_minus_flips_the_operation() {
        assert_eq!(
            sql("SELECT now() + - interval '5 minutes'"),
            "SELECT spanner.timestamptz_subtract(now(), '5 minutes')"
        );
        assert_eq!(
            sql("SELECT now() - -interval '5 minutes'"),
            "SELECT spanner.timestamptz_add(now(), '5 minutes')"
        );
    }

    #[test]
    fn chains_end_at_comparisons_keywords_commas_and_parentheses() {
        assert_eq!(
            sql(
                "SELECT id FROM q WHERE deliver_time > now() - interval '1 hour' AND id = 1 ORDER BY id"
            ),
            "SELECT id FROM q WHERE deliver_time > spanner.timestamptz_subtract(now(), '1 hour') \
             AND id = 1 ORDER BY id"
        );
        assert_eq!(
            sql("SELECT 'at ' || now() + interval '1 hour', 2"),
            "SELECT 'at ' || spanner.timestamptz_add(now(), '1 hour'), 2"
        );
        assert_eq!(
            sql("SELECT x FROM t WHERE ts BETWEEN now() AND now() + interval '1 day'"),
            "SELECT x FROM t WHERE ts BETWEEN now() AND spanner.timestamptz_add(now(), '1 day')"
        );
        assert_eq!(
            sql("SELECT CASE WHEN a THEN now() + interval '1 day' ELSE now() END FROM t"),
            "SELECT CASE WHEN a THEN spanner.timestamptz_add(now(), '1 day') ELSE now() END FROM t"
        );
        assert_eq!(
            sql("SELECT coalesce(ts, now()) + interval '1 day' FROM t"),
            "SELECT CASE WHEN (coalesce(ts, now())) IS NULL THEN NULL ELSE \
             spanner.timestamptz_add(coalesce(ts, now()), '1 day') END FROM t"
        );
        assert_eq!(
            sql("SELECT greatest(ts, now() + interval '1 day') FROM t"),
            "SELECT greatest(ts, spanner.timestamptz_add(now(), '1 day')) FROM t"
        );
        // A multi-word type and a trailing alias.
        assert_eq!(
            sql("SELECT $1::timestamp with time zone + interval '1 day' due"),
            "SELECT CASE WHEN ($1::timestamp with time zone) IS NULL THEN NULL ELSE \
             spanner.timestamptz_add($1::timestamp with time zone, '1 day') END due"
        );
        assert_eq!(
            sql("SELECT now() + interval '1 day' AS due -- comment\n"),
            "SELECT spanner.timestamptz_add(now(), '1 day') AS due -- comment\n"
        );
    }

    #[test]
    fn field_qualifiers_with_a_number() {
        assert_eq!(
            sql("SELECT now() + interval '5' minute"),
            "SELECT spanner.timestamptz_add(now(), '5 minute')"
        );
        assert!(refused("SELECT now() + interval '1:30' hour to minute").contains("field"));
        assert!(refused("SELECT now() + interval '1 day' hour").contains("field"));
    }

    #[test]
    fn make_interval_positional_named_and_computed() {
        assert_eq!(
            sql("SELECT now() + make_interval(0, 0, 0, 1, 2)"),
            "SELECT spanner.timestamptz_add(now(), '0 years 0 months 0 weeks 1 days 2 hours')"
        );
        assert_eq!(
            sql("SELECT now() + make_interval(mins => 5, secs => 1.5)"),
            "SELECT spanner.timestamptz_add(now(), '5 mins 1.5 secs')"
        );
        assert_eq!(
            sql("SELECT now() + make_interval(hours := -2)"),
            "SELECT spanner.timestamptz_add(now(), '-2 hours')"
        );
        assert_eq!(
            sql("SELECT now() + make_interval()"),
            "SELECT spanner.timestamptz_add(now(), '0 secs')"
        );
        assert_eq!(
            sql("SELECT now() + make_interval(days => 1, mins => $1)"),
            "SELECT CASE WHEN (('1 days ' || CAST(($1) AS text) || ' mins')) IS NULL THEN NULL \
             ELSE spanner.timestamptz_add(now(), ('1 days ' || CAST(($1) AS text) || ' mins')) END"
        );
        assert!(refused("SELECT now() + make_interval(minutes => 5)").contains("no argument"));
        assert!(refused("SELECT now() + make_interval(mins => 5, 1)").contains("positional"));
        assert!(
            refused("SELECT now() + make_interval(1, 2, 3, 4, 5, 6, 7, 8)").contains("at most")
        );
        assert!(refused("SELECT now() + make_interval(1, years => 2)").contains("twice"));
    }

    #[test]
    fn products_of_simple_literals() {
        assert_eq!(
            sql("SELECT now() + interval '1 hour 30 minutes' * 2"),
            "SELECT spanner.timestamptz_add(now(), '2 hour 60 minutes')"
        );
        assert_eq!(
            sql("SELECT now() + 1.5 * interval '1 hour'"),
            "SELECT spanner.timestamptz_add(now(), '1.5 hour')"
        );
        assert_eq!(
            sql("SELECT now() + $1 * interval '1 minute'"),
            "SELECT CASE WHEN ((CAST(($1) * 1 AS text) || ' minute')) IS NULL THEN NULL ELSE \
             spanner.timestamptz_add(now(), (CAST(($1) * 1 AS text) || ' minute')) END"
        );
        assert!(refused("SELECT now() + interval '01:30:00' * 2").contains("multiplying"));
        assert!(refused("SELECT now() + interval '1 hour' / 2").contains("dividing"));
    }

    #[test]
    fn interval_parameters_become_text() {
        let t = rewrite("SELECT $1::timestamptz + $2", &["p2"]);
        assert_eq!(
            t.sql,
            "SELECT CASE WHEN ($1::timestamptz) IS NULL OR ($2) IS NULL THEN NULL ELSE \
             spanner.timestamptz_add($1::timestamptz, $2) END"
        );
        assert_eq!(t.text_params, ["p2"]);
        let t = rewrite("SELECT now() - $1::interval", &["p1"]);
        assert_eq!(t.text_params, ["p1"]);
        // An interval parameter anywhere else is refused.
        let e = translate("SELECT $1", &["p1"], &[]).expect_err("an interval on its own");
        assert!(e.to_string().contains("$1"), "{e}");
        let e =
            translate("INSERT INTO t (id, i) VALUES (1, $1)", &["p1"], &[]).expect_err("stored");
        assert!(e.to_string().contains("on its own"), "{e}");
    }

    #[test]
    fn bare_strings_after_a_timestamp_are_intervals() {
        assert_eq!(
            sql("SELECT now() + '5 minutes'"),
            "SELECT spanner.timestamptz_add(now(), '5 minutes')"
        );
        assert_eq!(
            sql("SELECT $1::timestamptz - '1 day'"),
            "SELECT CASE WHEN ($1::timestamptz) IS NULL THEN NULL ELSE \
             spanner.timestamptz_subtract($1::timestamptz, '1 day') END"
        );
        // Not a recognizable timestamp: left alone.
        assert_eq!(
            translate("SELECT ts + '5 minutes' FROM t", &[], &[]),
            Ok(None)
        );
    }

    #[test]
    fn literals_keep_their_quoting() {
        assert_eq!(
            sql("SELECT now() + interval E'5 minutes' + interval $$1 day$$"),
            "SELECT spanner.timestamptz_add(spanner.timestamptz_add(now(), E'5 minutes'), $$1 day$$)"
        );
        // Joined texts are quoted again.
        assert_eq!(
            sql("SELECT interval '1 day' + interval 'it''s' + now()"),
            "SELECT spanner.timestamptz_add(now(), '1 day it''s')"
        );
    }

    #[test]
    fn unsupported_uses_name_the_construct() {
        for (statement, construct, why) in [
            (
                "SELECT interval '1 hour'",
                "interval '1 hour'",
                "on its own",
            ),
            (
                "SELECT '5 minutes'::interval",
                "'5 minutes'::interval",
                "on its own",
            ),
            (
                "SELECT now() - ts > interval '5 minutes' FROM t",
                "interval '5 minutes'",
                "on its own",
            ),
            ("SELECT interval '1 day' - now()", "now()", "subtracting"),
            (
                "SELECT interval '1 day' - interval '1 hour' + now()",
                "interval '1 hour'",
                "negated",
            ),
            (
                "SELECT now() + interval(3) '1 hour'",
                "interval(3) '1 hour'",
                "precision",
            ),
            (
                "SELECT now() + '1 hour'::interval(3)",
                "'1 hour'::interval(3)",
                "precision",
            ),
            (
                "SELECT now() + (interval '1 day' - interval '1 hour')",
                "interval '1 day' - interval '1 hour'",
                "subtracting",
            ),
            (
                "SELECT spanner.timestamptz_add(now(), interval '5 minutes')",
                "interval '5 minutes'",
                "on its own",
            ),
            (
                "SELECT now() + interval '1 hour' later x",
                "interval '1 hour' later x",
                "timestamptz",
            ),
        ] {
            let message = refused(statement);
            assert!(
                message.starts_with(construct) && message.contains(why),
                "{statement}: {message}"
            );
            assert!(message.contains("spanner-queues emulator"), "{message}");
        }
    }

    #[test]
    fn long_constructs_are_shortened_in_errors() {
        let long = format!("SELECT interval '{}'", "1 day ".repeat(40));
        let message = refused(&long);
        assert!(message.starts_with("interval '1 day"), "{message}");
        assert!(message.contains('…'), "{message}");
        assert!(message.len() < 400, "{message}");
    }

    #[test]
    fn text_around_the_statement_is_kept() {
        assert_eq!(
            sql("  /* lead */ SELECT now() + interval '1 day' ; "),
            "  /* lead */ SELECT spanner.timestamptz_add(now(), '1 day') ; "
        );
    }

    #[test]
    fn the_backend_interval_error_is_explained() {
        let explained = explain_unimplemented(BACKEND_NO_INTERVAL).expect("explained");
        assert!(
            explained.contains("timestamptz - timestamptz"),
            "{explained}"
        );
        assert!(explained.ends_with(BACKEND_NO_INTERVAL), "{explained}");
        assert!(
            explain_unimplemented(
                "Postgres function timestamptz_mi(timestamp with time zone, timestamp with time \
                 zone) is not supported"
            )
            .is_some()
        );
        assert_eq!(
            explain_unimplemented("Postgres function clock_timestamp() is not supported"),
            None
        );
        assert_eq!(explain_unimplemented("something else"), None);
    }

    #[test]
    fn simple_pairs_parse_numbers_and_units() {
        let pairs = simple_pairs("1 hour 30 minutes").expect("simple");
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[1].1, "minutes");
        assert!(simple_pairs("01:30:00").is_none());
        assert!(simple_pairs("2 days ago").is_none());
        assert!(simple_pairs("5").is_none());
        assert!(simple_pairs("").is_none());
        assert_eq!(Number::Int(3).times(Number::Int(4)).as_deref(), Some("12"));
        assert_eq!(
            Number::Float(0.5).times(Number::Int(3)).as_deref(),
            Some("1.5")
        );
    }
}
