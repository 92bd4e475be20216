//! A cursor over the tokens of one statement, for small hand-written parsers.

use std::fmt;

use crate::{Dialect, Token};

/// A cursor over the tokens of one statement: looks at the next tokens, consumes words,
/// punctuation, names and bracketed groups, and reports what it expected where it did not find
/// it.
///
/// Keywords are compared case-insensitively with unquoted words only, so a quoted identifier
/// that spells a keyword is never mistaken for it.
#[derive(Debug, Clone)]
pub struct Cursor<'t, 's> {
    /// The tokens.
    toks: &'t [Token<'s>],
    /// Index of the next token.
    pos: usize,
    /// The statement kind, for error messages.
    statement: &'static str,
}

/// A statement that does not follow the grammar its parser expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// The statement kind the parser was reading, e.g. `CREATE QUEUE`.
    pub statement: &'static str,
    /// What was expected and what was found.
    pub message: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} statement: {}", self.statement, self.message)
    }
}

impl std::error::Error for SyntaxError {}

impl<'t, 's> Cursor<'t, 's> {
    /// A cursor at the first of `toks`, the tokens of a `statement` (a kind such as
    /// `CREATE QUEUE`, named in errors).
    pub fn new(toks: &'t [Token<'s>], statement: &'static str) -> Self {
        Cursor {
            toks,
            pos: 0,
            statement,
        }
    }

    /// The statement kind given to [`Cursor::new`].
    pub fn statement(&self) -> &'static str {
        self.statement
    }

    /// All the tokens, consumed or not.
    pub fn tokens(&self) -> &'t [Token<'s>] {
        self.toks
    }

    /// The index of the next token.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Moves to the token at index `pos` (at most one past the last).
    pub fn set_pos(&mut self, pos: usize) {
        self.pos = pos.min(self.toks.len());
    }

    /// Skips `n` tokens (at most to the end).
    pub fn advance(&mut self, n: usize) {
        self.set_pos(self.pos.saturating_add(n));
    }

    /// The tokens not consumed yet.
    pub fn rest(&self) -> &'t [Token<'s>] {
        &self.toks[self.pos..]
    }

    /// The next token.
    pub fn peek(&self) -> Option<&'t Token<'s>> {
        self.toks.get(self.pos)
    }

    /// The token `ahead` tokens after the next one (`peek_at(0)` is [`Cursor::peek`]).
    pub fn peek_at(&self, ahead: usize) -> Option<&'t Token<'s>> {
        self.toks.get(self.pos.saturating_add(ahead))
    }

    /// Whether the next token is the word `keyword`.
    pub fn at_word(&self, keyword: &str) -> bool {
        self.peek().is_some_and(|t| t.is_word(keyword))
    }

    /// Whether the next tokens are the words `keywords`.
    pub fn at_words(&self, keywords: &[&str]) -> bool {
        starts_with_words(self.rest(), keywords)
    }

    /// Consumes the word `keyword` if it is next.
    pub fn eat_word(&mut self, keyword: &str) -> bool {
        let found = self.at_word(keyword);
        if found {
            self.pos += 1;
        }
        found
    }

    /// Consumes the words `keywords` if they are all next.
    pub fn eat_words(&mut self, keywords: &[&str]) -> bool {
        let found = self.at_words(keywords);
        if found {
            self.pos += keywords.len();
        }
        found
    }

    /// Consumes the word `keyword`.
    ///
    /// # Errors
    /// A [`SyntaxError`] when it is not next.
    pub fn expect_word(&mut self, keyword: &str) -> Result<(), SyntaxError> {
        if self.eat_word(keyword) {
            Ok(())
        } else {
            Err(self.error(keyword))
        }
    }

    /// Whether the next token is the punctuation `punct`.
    pub fn at_punct(&self, punct: &str) -> bool {
        self.peek().is_some_and(|t| t.is_punct(punct))
    }

    /// Consumes the punctuation `punct` if it is next.
    pub fn eat_punct(&mut self, punct: &str) -> bool {
        let found = self.at_punct(punct);
        if found {
            self.pos += 1;
        }
        found
    }

    /// Consumes the punctuation `punct`.
    ///
    /// # Errors
    /// A [`SyntaxError`] when it is not next.
    pub fn expect_punct(&mut self, punct: &str) -> Result<(), SyntaxError> {
        if self.eat_punct(punct) {
            Ok(())
        } else {
            Err(self.error(&format!("`{punct}`")))
        }
    }

    /// Consumes an identifier, quoted or not, and returns its token. Any unquoted word is
    /// taken, keywords included: the caller knows from the grammar that a name comes here.
    ///
    /// # Errors
    /// A [`SyntaxError`] naming `what` when the next token is not an identifier.
    pub fn ident_token(&mut self, what: &str) -> Result<&'t Token<'s>, SyntaxError> {
        match self.peek() {
            Some(t) if t.is_ident() => {
                self.pos += 1;
                Ok(t)
            }
            _ => Err(self.error(what)),
        }
    }

    /// Consumes an identifier (as [`Cursor::ident_token`]) and returns its value: a quoted
    /// identifier unquoted, a word as written.
    ///
    /// # Errors
    /// As [`Cursor::ident_token`].
    pub fn ident(&mut self, what: &str) -> Result<String, SyntaxError> {
        self.ident_token(what).map(|t| t.value.clone().into_owned())
    }

    /// Consumes an identifier (as [`Cursor::ident_token`]) and returns the name it stands for
    /// in `dialect` ([`Token::name`]: PostgreSQL folds unquoted names to lower case).
    ///
    /// # Errors
    /// As [`Cursor::ident_token`].
    pub fn name(&mut self, dialect: Dialect, what: &str) -> Result<String, SyntaxError> {
        self.ident_token(what).map(|t| t.name(dialect).into_owned())
    }

    /// Consumes a dotted name (`a`, `schema.a`) and returns the names of its parts in
    /// `dialect`.
    ///
    /// # Errors
    /// As [`Cursor::ident_token`], for each part.
    pub fn path(&mut self, dialect: Dialect, what: &str) -> Result<Vec<String>, SyntaxError> {
        let mut parts = vec![self.name(dialect, what)?];
        while self.eat_punct(".") {
            parts.push(self.name(dialect, what)?);
        }
        Ok(parts)
    }

    /// Consumes `( ... )` and returns the tokens inside.
    ///
    /// # Errors
    /// A [`SyntaxError`] when no `(` is next, or when it is not closed.
    pub fn group(&mut self) -> Result<&'t [Token<'s>], SyntaxError> {
        if !self.at_punct("(") {
            return Err(self.error("`(`"));
        }
        let open = self.pos;
        let Some(close) = closing_bracket(self.toks, open) else {
            self.pos = self.toks.len();
            return Err(self.error("`)`"));
        };
        self.pos = close + 1;
        Ok(&self.toks[open + 1..close])
    }

    /// Consumes tokens up to one of `stop_words`, `,` or `)` outside any bracket, and returns
    /// them (a column type or an expression). `brackets` are the punctuation pairs that nest
    /// besides `(` and `)`.
    pub fn until_attribute(
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
    pub fn at_end(&self) -> bool {
        match self.rest() {
            [] => true,
            [t] => t.is_punct(";"),
            _ => false,
        }
    }

    /// Consumes what is left when it is only an optional `;`.
    ///
    /// # Errors
    /// A [`SyntaxError`] when more is left.
    pub fn expect_end(&mut self) -> Result<(), SyntaxError> {
        if self.at_end() {
            self.pos = self.toks.len();
            Ok(())
        } else {
            Err(self.error("the end of the statement"))
        }
    }

    /// A syntax error: `expected` was expected at the current position.
    pub fn error(&self, expected: &str) -> SyntaxError {
        let message = match self.peek() {
            Some(t) => format!("expected {expected} but found `{}`", t.text),
            None => format!("expected {expected} but the statement ended"),
        };
        SyntaxError {
            statement: self.statement,
            message,
        }
    }
}

/// Whether `toks` starts with the words `keywords`.
pub fn starts_with_words(toks: &[Token<'_>], keywords: &[&str]) -> bool {
    keywords.len() <= toks.len() && keywords.iter().zip(toks).all(|(k, t)| t.is_word(k))
}

/// The index of the bracket that closes the one at `open` (`(`, `[` or `{`), counting only
/// brackets of the same kind; `None` when `open` is not an opening bracket or it is not
/// closed.
pub fn closing_bracket(toks: &[Token<'_>], open: usize) -> Option<usize> {
    let (opening, closing) = match toks.get(open)?.text {
        "(" => ("(", ")"),
        "[" => ("[", "]"),
        "{" => ("{", "}"),
        _ => return None,
    };
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(open) {
        if t.is_punct(opening) {
            depth += 1;
        } else if t.is_punct(closing) {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// The index after the hints (`@{...}`, GoogleSQL's statement, table and join hints) that
/// start at `i`, or `i` when none does; at most `toks.len()`.
pub fn skip_hints(toks: &[Token<'_>], mut i: usize) -> usize {
    while toks.get(i).is_some_and(|t| t.is_punct("@"))
        && toks.get(i + 1).is_some_and(|t| t.is_punct("{"))
    {
        match closing_bracket(toks, i + 1) {
            Some(close) => i = close + 1,
            None => return toks.len(),
        }
    }
    i.min(toks.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize;

    #[test]
    fn words_punctuation_and_groups() {
        let toks = tokenize(
            "CREATE QUEUE IF NOT EXISTS `select` (a INT64, b ARRAY<STRING(MAX)>) ;",
            Dialect::GoogleSql,
        )
        .expect("tokenizes");
        let mut c = Cursor::new(&toks, "CREATE QUEUE");
        assert!(c.eat_words(&["CREATE", "QUEUE"]));
        assert!(!c.eat_words(&["IF", "EXISTS"]));
        assert!(c.eat_words(&["IF", "NOT", "EXISTS"]));
        assert_eq!(c.ident("a queue name"), Ok("select".to_owned()));
        let inner = c.group().expect("a group");
        assert_eq!(inner.len(), 11);
        let mut body = Cursor::new(inner, "CREATE QUEUE");
        assert_eq!(body.ident("a column").as_deref(), Ok("a"));
        assert_eq!(body.until_attribute(&["NOT"], ("<", ">")).len(), 1);
        assert!(body.eat_punct(","));
        body.advance(1);
        assert_eq!(body.until_attribute(&[], ("<", ">")).len(), 7);
        assert!(body.at_end());
        assert!(c.at_end());
        assert_eq!(c.expect_end(), Ok(()));
    }

    #[test]
    fn errors_say_what_was_expected_where() {
        let toks = tokenize("DROP QUEUE 42", Dialect::GoogleSql).expect("tokenizes");
        let mut c = Cursor::new(&toks, "DROP QUEUE");
        c.set_pos(2);
        let err = c
            .path(Dialect::GoogleSql, "a queue name")
            .expect_err("a number");
        assert_eq!(
            err.to_string(),
            "DROP QUEUE statement: expected a queue name but found `42`"
        );
        c.advance(5);
        assert_eq!(
            c.expect_punct("(").expect_err("ended").message,
            "expected `(` but the statement ended"
        );
        let toks = tokenize("(a (b)", Dialect::GoogleSql).expect("tokenizes");
        assert!(Cursor::new(&toks, "X").group().is_err());
    }

    #[test]
    fn names_fold_in_postgresql() {
        let toks = tokenize("Public.\"MyQ\" x", Dialect::PostgreSql).expect("tokenizes");
        let mut c = Cursor::new(&toks, "DROP QUEUE");
        assert_eq!(
            c.path(Dialect::PostgreSql, "a name"),
            Ok(vec!["public".to_owned(), "MyQ".to_owned()])
        );
        assert_eq!(c.ident_token("a name").map(|t| t.text), Ok("x"));
    }

    #[test]
    fn closing_brackets_match_their_kind() {
        let toks = tokenize("@{a=(1)} f(x, [y], (z))", Dialect::GoogleSql).expect("tokenizes");
        assert_eq!(closing_bracket(&toks, 1), Some(7));
        assert_eq!(closing_bracket(&toks, 9), Some(19));
        assert_eq!(closing_bracket(&toks, 12), Some(14));
        assert_eq!(closing_bracket(&toks, 0), None);
        assert_eq!(closing_bracket(&toks[..19], 9), None);
        assert_eq!(skip_hints(&toks, 0), 8);
        assert_eq!(skip_hints(&toks, 8), 8);
        assert_eq!(skip_hints(&toks[..5], 0), 5);
        assert!(starts_with_words(&toks[8..], &["f"]));
    }
}
