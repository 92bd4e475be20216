//! The statement as written: its tokens (sqlparser's PostgreSQL tokenizer), what in them may be
//! an interval, and the text around the statement proper that a rewrite keeps as written.
//!
//! The unquoted words `interval` that are names (see [`super::spelling`]) lose their keyword
//! here, before anything looks at the tokens: the parser then reads them as the identifiers
//! they are (and prints them as written), and only real interval constructs keep the keyword.

use std::ops::Range;

use sqlparser::ast::Statement;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer, Whitespace};

use super::spelling::Spelling;

/// The clause the front strips from PostgreSQL DML and checks itself (the official emulator's
/// PostgreSQL parser lacks it): kept after the statement as written.
const ASSERT_ROWS_MODIFIED: &str = "ASSERT_ROWS_MODIFIED";

/// A statement's tokens and the parts of its text.
pub(super) struct Source<'s> {
    sql: &'s str,
    tokens: Vec<TokenWithSpan>,
    /// The tokens of the statement proper (without leading and trailing comments, `;` and a
    /// trailing `ASSERT_ROWS_MODIFIED n`).
    body: Range<usize>,
    /// The same, as a byte range of `sql`.
    body_bytes: Range<usize>,
    /// Whether the statement spells out an interval; `None` when the shared lexer could not
    /// tell (then any unquoted `interval` or `make_interval` counts).
    spells_interval: Option<bool>,
}

/// The request name of a PostgreSQL parameter (`$1` is sent as `p1`).
pub(super) fn param_name(placeholder: &str) -> Option<String> {
    let n = placeholder.strip_prefix('$')?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| format!("p{n}"))
}

fn significant(token: &TokenWithSpan) -> bool {
    !matches!(token.token, Token::Whitespace(_) | Token::EOF)
}

fn is_string(token: &Token) -> bool {
    matches!(
        token,
        Token::SingleQuotedString(_)
            | Token::EscapedStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
            | Token::DollarQuotedString(_)
    )
}

/// An unquoted word spelled `word` in any letter case.
fn is_word(token: &Token, word: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

fn is_interval_keyword(token: &Token) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.keyword == Keyword::INTERVAL)
}

/// Takes the keyword from the unquoted words `interval` that are names ([`Spelling`]), so that
/// the parser reads them as identifiers; returns whether the statement spells out an interval
/// (`None` when the shared lexer cannot read it: then nothing changes).
fn unmark_names(tokens: &mut [TokenWithSpan], sql: &str, offsets: &LineStarts<'_>) -> Option<bool> {
    let may_spell = tokens
        .iter()
        .any(|t| is_interval_keyword(&t.token) || is_word(&t.token, "make_interval"));
    if !may_spell {
        return Some(false);
    }
    let spelling = Spelling::read(sql)?;
    for token in tokens {
        if let Token::Word(word) = &mut token.token
            && word.quote_style.is_none()
            && word.keyword == Keyword::INTERVAL
            && offsets
                .byte(token.span.start)
                .is_some_and(|at| spelling.names.contains(&at))
        {
            word.keyword = Keyword::NoKeyword;
        }
    }
    Some(spelling.interval)
}

impl<'s> Source<'s> {
    /// Tokenizes `sql`; `None` when it does not tokenize or holds no statement (the backend
    /// then judges it).
    pub(super) fn read(sql: &'s str) -> Option<Self> {
        let mut tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .ok()?;
        let offsets = LineStarts::new(sql);
        let spells_interval = unmark_names(&mut tokens, sql, &offsets);
        let first = tokens.iter().position(significant)?;
        let mut last = tokens.iter().rposition(significant)?;
        while matches!(tokens[last].token, Token::SemiColon) {
            last = tokens[..last].iter().rposition(significant)?;
        }
        // `… ASSERT_ROWS_MODIFIED 1`: the statement ends before the clause.
        if matches!(tokens[last].token, Token::Number(..))
            && let Some(clause) = tokens[..last].iter().rposition(significant)
            && is_word(&tokens[clause].token, ASSERT_ROWS_MODIFIED)
        {
            last = tokens[..clause].iter().rposition(significant)?;
        }
        if last < first {
            return None;
        }
        let body_bytes =
            offsets.byte(tokens[first].span.start)?..offsets.byte(tokens[last].span.end)?;
        Some(Self {
            sql,
            tokens,
            body: first..last + 1,
            body_bytes,
            spells_interval,
        })
    }

    fn body_tokens(&self) -> &[TokenWithSpan] {
        &self.tokens[self.body.clone()]
    }

    /// The significant tokens of the statement proper.
    fn words(&self) -> impl Iterator<Item = &Token> {
        self.body_tokens()
            .iter()
            .filter(|t| significant(t))
            .map(|t| &t.token)
    }

    /// Whether the statement may spell out an interval: the keyword `interval` (not a name) or
    /// the word `make_interval`, unquoted.
    fn mentions_interval(&self) -> bool {
        self.words()
            .any(|t| is_interval_keyword(t) || is_word(t, "make_interval"))
    }

    /// Whether the statement spells out an interval (see [`super::spelling`]). Such a
    /// statement that does not parse is refused rather than forwarded.
    pub(super) fn spells_interval(&self) -> bool {
        self.spells_interval
            .unwrap_or_else(|| self.mentions_interval())
    }

    /// Whether anything in the statement may need a rewrite: an interval spelled out, a written
    /// `spanner.timestamptz_add` / `_subtract` (guarded against NULL), one of the
    /// `INTERVAL` parameters, or a string literal after `+` or `-` (an interval when added to
    /// a timestamp).
    pub(super) fn may_need_rewrite(&self, interval_params: &[&str]) -> bool {
        if self.mentions_interval() || self.interval_placeholders(interval_params).next().is_some()
        {
            return true;
        }
        let mut previous: Option<&Token> = None;
        for token in self.words() {
            let after_sign = matches!(previous, Some(Token::Plus | Token::Minus));
            if (after_sign && is_string(token))
                || is_word(token, "timestamptz_add")
                || is_word(token, "timestamptz_subtract")
            {
                return true;
            }
            previous = Some(token);
        }
        false
    }

    /// The request names of the `INTERVAL` parameters the statement uses.
    pub(super) fn interval_placeholders<'a>(
        &'a self,
        interval_params: &'a [&'a str],
    ) -> impl Iterator<Item = (String, &'a str)> + 'a {
        self.words().filter_map(move |t| match t {
            Token::Placeholder(p) => param_name(p)
                .filter(|name| interval_params.contains(&name.as_str()))
                .map(|name| (name, p.as_str())),
            _ => None,
        })
    }

    /// An interval literal with a precision (`interval(3) '1 hour'`), as written: the parser
    /// drops a literal's precision, so it is looked for in the tokens. (The type's precision,
    /// `::interval(3)` or `AS interval(3)`, the parser keeps.)
    pub(super) fn interval_precision(&self) -> Option<&'s str> {
        let tokens = self.body_tokens();
        let next = |from: usize| (from..tokens.len()).find(|&k| significant(&tokens[k]));
        let offsets = LineStarts::new(self.sql);
        let mut previous: Option<&Token> = None;
        for (i, token) in tokens.iter().enumerate() {
            let type_name = matches!(previous, Some(Token::DoubleColon))
                || previous.is_some_and(|p| is_word(p, "as"));
            if significant(token) {
                previous = Some(&token.token);
            }
            if type_name || !is_interval_keyword(&token.token) {
                continue;
            }
            let Some(open) = next(i + 1).filter(|&k| tokens[k].token == Token::LParen) else {
                continue;
            };
            let close = (open..tokens.len()).find(|&k| tokens[k].token == Token::RParen);
            let end = close
                .and_then(|c| {
                    next(c + 1)
                        .filter(|&k| is_string(&tokens[k].token))
                        .or(Some(c))
                })
                .unwrap_or(tokens.len() - 1);
            let start = offsets.byte(token.span.start)?;
            let stop = offsets.byte(tokens[end].span.end)?;
            return self.sql.get(start..stop);
        }
        None
    }

    /// Whether a statement hint (`/*@ … */`) stands inside the statement proper (a rewritten
    /// statement is printed anew, without its comments).
    pub(super) fn hint_inside(&self) -> bool {
        self.body_tokens().iter().any(|t| {
            matches!(&t.token, Token::Whitespace(Whitespace::MultiLineComment(c)) if c.starts_with('@'))
        })
    }

    /// The statement proper, parsed; `Ok(None)` when it is more than one statement.
    pub(super) fn parse(&self) -> Result<Option<Statement>, ParserError> {
        let mut statements = Parser::new(&PostgreSqlDialect {})
            .with_tokens_with_locations(self.body_tokens().to_vec())
            .parse_statements()?;
        Ok(match statements.len() {
            1 => statements.pop(),
            _ => None,
        })
    }

    /// The statement proper as written.
    pub(super) fn body_text(&self) -> &'s str {
        &self.sql[self.body_bytes.clone()]
    }

    /// `statement` in place of the statement proper, the text around it kept as written.
    pub(super) fn replaced(&self, statement: &str) -> String {
        format!(
            "{}{statement}{}",
            &self.sql[..self.body_bytes.start],
            &self.sql[self.body_bytes.end..]
        )
    }
}

/// Byte offsets of the tokenizer's locations (lines counted at `\n`, columns in characters,
/// both from 1).
struct LineStarts<'s> {
    sql: &'s str,
    starts: Vec<usize>,
}

impl<'s> LineStarts<'s> {
    fn new(sql: &'s str) -> Self {
        let mut starts = vec![0];
        starts.extend(sql.match_indices('\n').map(|(i, _)| i + 1));
        Self { sql, starts }
    }

    fn byte(&self, location: Location) -> Option<usize> {
        let line = usize::try_from(location.line).ok()?.checked_sub(1)?;
        let column = usize::try_from(location.column).ok()?.checked_sub(1)?;
        let start = *self.starts.get(line)?;
        let rest = &self.sql[start..];
        match rest.char_indices().nth(column) {
            Some((offset, _)) => Some(start + offset),
            None => (rest.chars().count() == column).then_some(self.sql.len()),
        }
    }
}
