//! Token-level parsing helpers.

use std::borrow::Cow;

use super::error::DdlError;
use crate::lexer::{Dialect, Lexer, Token, TokenKind};

/// A cursor over the tokens of one statement.
pub(super) struct Parser<'t, 's> {
    /// The tokens.
    pub(super) toks: &'t [Token<'s>],
    /// Index of the next token.
    pub(super) pos: usize,
    /// The statement kind, for error messages.
    pub(super) statement: &'static str,
}

impl<'t, 's> Parser<'t, 's> {
    /// A parser at the first token.
    pub(super) fn new(toks: &'t [Token<'s>], statement: &'static str) -> Self {
        Parser {
            toks,
            pos: 0,
            statement,
        }
    }

    /// The next token.
    pub(super) fn peek(&self) -> Option<&'t Token<'s>> {
        self.toks.get(self.pos)
    }

    /// Whether the next token is the word `keyword`.
    pub(super) fn at_word(&self, keyword: &str) -> bool {
        self.peek().is_some_and(|t| t.is_word(keyword))
    }

    /// Whether the next tokens are the words `keywords`.
    pub(super) fn at_words(&self, keywords: &[&str]) -> bool {
        keywords
            .iter()
            .enumerate()
            .all(|(i, k)| self.toks.get(self.pos + i).is_some_and(|t| t.is_word(k)))
    }

    /// Consumes the word `keyword` if it is next.
    pub(super) fn eat_word(&mut self, keyword: &str) -> bool {
        let found = self.at_word(keyword);
        if found {
            self.pos += 1;
        }
        found
    }

    /// Consumes the words `keywords` if they are all next.
    pub(super) fn eat_words(&mut self, keywords: &[&str]) -> bool {
        let found = self.at_words(keywords);
        if found {
            self.pos += keywords.len();
        }
        found
    }

    /// Consumes the word `keyword`, or fails.
    pub(super) fn expect_word(&mut self, keyword: &str) -> Result<(), DdlError> {
        if self.eat_word(keyword) {
            Ok(())
        } else {
            Err(self.error(keyword))
        }
    }

    /// Whether the next token is the punctuation `punct`.
    pub(super) fn at_punct(&self, punct: &str) -> bool {
        self.peek().is_some_and(|t| t.is_punct(punct))
    }

    /// Consumes the punctuation `punct` if it is next.
    pub(super) fn eat_punct(&mut self, punct: &str) -> bool {
        let found = self.at_punct(punct);
        if found {
            self.pos += 1;
        }
        found
    }

    /// Consumes the punctuation `punct`, or fails.
    pub(super) fn expect_punct(&mut self, punct: &str) -> Result<(), DdlError> {
        if self.eat_punct(punct) {
            Ok(())
        } else {
            Err(self.error(&format!("`{punct}`")))
        }
    }

    /// Consumes an identifier (quoted or not) and returns its value.
    pub(super) fn ident(&mut self, what: &str) -> Result<String, DdlError> {
        match self.peek() {
            Some(t) if t.is_ident() => {
                self.pos += 1;
                Ok(t.value.clone().into_owned())
            }
            _ => Err(self.error(what)),
        }
    }

    /// Consumes a dotted name (`a`, `schema.a`) and returns its parts.
    pub(super) fn path(&mut self, what: &str) -> Result<Vec<String>, DdlError> {
        let mut parts = vec![self.ident(what)?];
        while self.eat_punct(".") {
            parts.push(self.ident(what)?);
        }
        Ok(parts)
    }

    /// Consumes `( ... )` and returns the tokens inside.
    pub(super) fn group(&mut self) -> Result<&'t [Token<'s>], DdlError> {
        self.expect_punct("(")?;
        let start = self.pos;
        let mut depth = 1usize;
        while let Some(t) = self.peek() {
            if t.is_punct("(") {
                depth += 1;
            } else if t.is_punct(")") {
                depth -= 1;
                if depth == 0 {
                    let inner = &self.toks[start..self.pos];
                    self.pos += 1;
                    return Ok(inner);
                }
            }
            self.pos += 1;
        }
        Err(self.error("`)`"))
    }

    /// Consumes tokens up to one of `stop_words`, `,` or `)` outside any bracket, and returns
    /// them (a column type or expression). `brackets` are the punctuation pairs that nest, besides
    /// `(`/`)`.
    pub(super) fn until_attribute(
        &mut self,
        stop_words: &[&str],
        brackets: (&str, &str),
    ) -> &'t [Token<'s>] {
        let start = self.pos;
        let mut depth = 0i32;
        while let Some(t) = self.peek() {
            if depth == 0
                && (t.is_punct(",") || t.is_punct(")") || stop_words.iter().any(|w| t.is_word(w)))
            {
                break;
            }
            if t.is_punct("(") || t.is_punct(brackets.0) {
                depth += 1;
            } else if t.is_punct(")") || t.is_punct(brackets.1) {
                depth -= 1;
            }
            self.pos += 1;
        }
        &self.toks[start..self.pos]
    }

    /// Whether only an optional `;` is left.
    pub(super) fn at_end(&self) -> bool {
        match self.toks.len() - self.pos.min(self.toks.len()) {
            0 => true,
            1 => self.at_punct(";"),
            _ => false,
        }
    }

    /// Fails unless only an optional `;` is left.
    pub(super) fn expect_end(&mut self) -> Result<(), DdlError> {
        if self.at_end() {
            self.pos = self.toks.len();
            Ok(())
        } else {
            Err(self.error("the end of the statement"))
        }
    }

    /// A syntax error: `expected` was expected at the current position.
    pub(super) fn error(&self, expected: &str) -> DdlError {
        let message = match self.peek() {
            Some(t) => format!("expected {expected} but found `{}`", t.text),
            None => format!("expected {expected} but the statement ended"),
        };
        DdlError::Syntax {
            statement: self.statement,
            message,
        }
    }
}

/// Whether `toks` starts with the words `keywords`.
pub(super) fn starts_with_words(toks: &[Token<'_>], keywords: &[&str]) -> bool {
    keywords.len() <= toks.len() && keywords.iter().zip(toks).all(|(k, t)| t.is_word(k))
}

/// Case-insensitive substring test (ASCII).
pub(super) fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    let needle = needle.as_bytes();
    haystack
        .as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// The name after `CREATE TABLE` in `statement`, for error messages.
pub(super) fn first_table_name(statement: &str) -> Option<String> {
    let toks: Vec<Token<'_>> = Lexer::new(statement, Dialect::GoogleSql)
        .take(3)
        .filter_map(Result::ok)
        .collect();
    toks.get(2).map(|t| t.value.clone().into_owned())
}

/// Renders an expression or clause from its tokens, with normalised spacing.
pub(super) fn render_tokens(toks: &[Token<'_>]) -> String {
    let mut out = String::new();
    let mut prev: Option<&Token<'_>> = None;
    for t in toks {
        if let Some(p) = prev {
            let call = t.is_punct("(")
                && (p.kind == TokenKind::QuotedIdent
                    || p.kind == TokenKind::Word && !crate::lexer::is_reserved(p.text));
            let glue = call
                || p.is_punct("(")
                || p.is_punct("[")
                || p.is_punct(".")
                || p.is_punct("@")
                || t.is_punct(")")
                || t.is_punct("]")
                || t.is_punct(",")
                || t.is_punct(".");
            if !glue {
                out.push(' ');
            }
        }
        out.push_str(t.text);
        prev = Some(t);
    }
    out
}

/// Renders a type from its tokens, compactly (`ARRAY<STRING(MAX)>`), with the built-in type
/// names in upper case.
pub(super) fn render_type(toks: &[Token<'_>]) -> String {
    /// Built-in type names (and `MAX`), upper-cased when rendered.
    const TYPE_WORDS: [&str; 16] = [
        "ARRAY",
        "BOOL",
        "BYTES",
        "DATE",
        "ENUM",
        "FLOAT32",
        "FLOAT64",
        "INT64",
        "INTERVAL",
        "JSON",
        "MAX",
        "NUMERIC",
        "PROTO",
        "STRING",
        "TIMESTAMP",
        "TOKENLIST",
    ];
    let mut out = String::new();
    for (i, t) in toks.iter().enumerate() {
        let wordish = |t: &Token<'_>| {
            matches!(
                t.kind,
                TokenKind::Word | TokenKind::QuotedIdent | TokenKind::Number
            )
        };
        if i > 0 && wordish(t) && wordish(&toks[i - 1]) {
            out.push(' ');
        }
        let next_to_dot = (i > 0 && toks[i - 1].is_punct("."))
            || toks.get(i + 1).is_some_and(|n| n.is_punct("."));
        if t.kind == TokenKind::Word
            && !next_to_dot
            && TYPE_WORDS.iter().any(|w| t.text.eq_ignore_ascii_case(w))
        {
            out.push_str(&t.text.to_ascii_uppercase());
        } else {
            out.push_str(t.text);
        }
    }
    out
}

/// Splits `toks` at the commas that are not nested in parentheses or brackets; a trailing
/// comma is allowed (it gives no empty last part).
pub(super) fn split_commas<'t, 's>(toks: &'t [Token<'s>]) -> Vec<&'t [Token<'s>]> {
    let mut parts = crate::lexer::split_commas(toks);
    if parts.last().is_some_and(|part| part.is_empty()) {
        parts.pop();
    }
    parts
}

/// The value of one `name = value` option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum OptionValue {
    /// `NULL`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A string literal (decoded).
    Str(String),
    /// Anything else.
    Other,
}

/// One `name = value` option, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OptionItem {
    /// The option name, as written.
    pub(super) name: String,
    /// The value, rendered as written.
    pub(super) text: String,
    /// The value, classified.
    pub(super) value: OptionValue,
}

/// Parses the inside of `OPTIONS ( ... )`.
pub(super) fn parse_options(
    inner: &[Token<'_>],
    statement: &'static str,
) -> Result<Vec<OptionItem>, DdlError> {
    let mut items = Vec::new();
    for part in split_commas(inner) {
        let mut p = Parser::new(part, statement);
        let name = p.ident("an option name")?;
        p.expect_punct("=")?;
        let value_toks = &part[p.pos..];
        if value_toks.is_empty() {
            return Err(p.error("an option value"));
        }
        let value = match value_toks {
            [t] if t.is_word("NULL") => OptionValue::Null,
            [t] if t.is_word("TRUE") => OptionValue::Bool(true),
            [t] if t.is_word("FALSE") => OptionValue::Bool(false),
            [t] if t.kind == TokenKind::String => OptionValue::Str(t.value.clone().into_owned()),
            _ => OptionValue::Other,
        };
        items.push(OptionItem {
            name,
            text: render_tokens(value_toks),
            value,
        });
    }
    Ok(items)
}

/// `name` as a PostgreSQL identifier: bare when it is a lower-case word that is not reserved,
/// else double-quoted.
pub(crate) fn pg_ident(name: &str) -> Cow<'_, str> {
    let plain = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !crate::lexer::is_reserved(name);
    if plain {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(format!("\"{}\"", name.replace('"', "\"\"")))
    }
}

/// `value` as a PostgreSQL string literal.
pub(crate) fn pg_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}
