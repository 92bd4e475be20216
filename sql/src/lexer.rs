//! The tokenizer: where comments, literals, quoted identifiers, parameters and numbers start and
//! end, in either dialect.
//!
//! The tokenizer is deliberately small: it knows where comments, string and bytes literals
//! (single, double, triple-quoted, raw and bytes prefixes; PostgreSQL's `E'...'` and
//! dollar-quoted strings), quoted identifiers, query parameters and numbers start and end, so
//! that nothing inside them can confuse the parsers that work on the token stream. It does not
//! know keywords: a keyword is a [`TokenKind::Word`] that the parser compares
//! case-insensitively. Every token keeps its span in the source text, so a parser can copy a
//! clause verbatim when it has to.

use std::borrow::Cow;
use std::fmt;

use crate::Dialect;

/// The kind of a [`Token`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// An unquoted word: an identifier or a keyword.
    Word,
    /// A quoted identifier: `` `name` `` in GoogleSQL, `"name"` in PostgreSQL.
    QuotedIdent,
    /// A string literal of any form; [`Token::value`] holds the decoded text.
    String,
    /// A bytes literal (`b'...'`); [`Token::value`] holds the bytes decoded lossily as UTF-8.
    Bytes,
    /// A numeric literal (integer, hexadecimal or floating point), as written.
    Number,
    /// A query parameter: `@name` in GoogleSQL, `$1` in PostgreSQL. [`Token::value`] holds
    /// the parameter name as it appears in the request's `params` map (`name`, `p1`).
    Param,
    /// An operator or punctuation, e.g. `(`, `,`, `=>`, `<=`.
    Punct,
}

/// One token of a statement, borrowing from the source text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token<'a> {
    /// What kind of token this is.
    pub kind: TokenKind,
    /// The raw source text of the token, including quotes and prefixes.
    pub text: &'a str,
    /// Byte offset of the token in the source text.
    pub start: usize,
    /// The token's value: the decoded text of literals and quoted identifiers, the parameter
    /// name of parameters, and [`Token::text`] for everything else.
    pub value: Cow<'a, str>,
}

impl<'a> Token<'a> {
    /// Byte offset just past the end of the token in the source text.
    pub fn end(&self) -> usize {
        self.start + self.text.len()
    }

    /// Whether this token is the unquoted word `keyword`, compared case-insensitively.
    pub fn is_word(&self, keyword: &str) -> bool {
        self.kind == TokenKind::Word && self.text.eq_ignore_ascii_case(keyword)
    }

    /// Whether this token is the punctuation `punct`.
    pub fn is_punct(&self, punct: &str) -> bool {
        self.kind == TokenKind::Punct && self.text == punct
    }

    /// Whether this token can name something: an unquoted word or a quoted identifier.
    pub fn is_ident(&self) -> bool {
        matches!(self.kind, TokenKind::Word | TokenKind::QuotedIdent)
    }

    /// The name this token stands for when it is an identifier ([`Token::is_ident`]): a quoted
    /// identifier's value; an unquoted word as written in GoogleSQL (whose names are
    /// case-insensitive), folded to lower case in PostgreSQL (which folds unquoted names, ASCII
    /// letters only).
    pub fn name(&self, dialect: Dialect) -> Cow<'a, str> {
        match (self.kind, dialect) {
            (TokenKind::Word, Dialect::PostgreSql)
                if self.text.bytes().any(|b| b.is_ascii_uppercase()) =>
            {
                Cow::Owned(self.text.to_ascii_lowercase())
            }
            _ => self.value.clone(),
        }
    }
}

/// A statement that cannot be tokenized.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LexError {
    /// A string or bytes literal has no closing quote.
    UnterminatedString {
        /// Byte offset where the literal starts.
        offset: usize,
    },
    /// A quoted identifier has no closing quote.
    UnterminatedIdentifier {
        /// Byte offset where the identifier starts.
        offset: usize,
    },
    /// A `/* ... */` comment has no end.
    UnterminatedComment {
        /// Byte offset where the comment starts.
        offset: usize,
    },
    /// A literal or quoted identifier holds an escape sequence that is not valid.
    InvalidEscape {
        /// Byte offset where the literal starts.
        offset: usize,
    },
}

impl fmt::Display for LexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LexError::UnterminatedString { offset } => {
                write!(f, "unterminated string literal at offset {offset}")
            }
            LexError::UnterminatedIdentifier { offset } => {
                write!(f, "unterminated quoted identifier at offset {offset}")
            }
            LexError::UnterminatedComment { offset } => {
                write!(f, "unterminated comment at offset {offset}")
            }
            LexError::InvalidEscape { offset } => {
                write!(
                    f,
                    "invalid escape sequence in the literal at offset {offset}"
                )
            }
        }
    }
}

impl std::error::Error for LexError {}

/// Splits tokens at the commas outside parentheses and brackets. A trailing comma gives a last,
/// empty part; no tokens give no part.
pub fn split_commas<'t, 's>(toks: &'t [Token<'s>]) -> Vec<&'t [Token<'s>]> {
    if toks.is_empty() {
        return Vec::new();
    }
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, t) in toks.iter().enumerate() {
        if t.is_punct("(") || t.is_punct("[") {
            depth += 1;
        } else if t.is_punct(")") || t.is_punct("]") {
            depth -= 1;
        } else if t.is_punct(",") && depth == 0 {
            parts.push(&toks[start..i]);
            start = i + 1;
        }
    }
    parts.push(&toks[start..]);
    parts
}

/// Splits `sql` into tokens, skipping whitespace and comments.
pub fn tokenize(sql: &str, dialect: Dialect) -> Result<Vec<Token<'_>>, LexError> {
    Lexer::new(sql, dialect).collect()
}

/// An iterator over the tokens of a statement; stops after the first error.
///
/// Use it directly (instead of [`tokenize`]) to look at the first few tokens only.
#[derive(Debug, Clone)]
pub struct Lexer<'a> {
    /// The statement text.
    src: &'a str,
    /// Position of the next unread byte.
    pos: usize,
    /// The dialect, which decides comment, quote and parameter syntax.
    dialect: Dialect,
    /// Kind and text of the previous token, used to tell `.5` (a number) from `a.b` (a path).
    prev: Option<(TokenKind, &'a str)>,
    /// Set once an error has been returned.
    failed: bool,
}

impl<'a> Lexer<'a> {
    /// A lexer positioned at the start of `src`.
    pub fn new(src: &'a str, dialect: Dialect) -> Self {
        Lexer {
            src,
            pos: 0,
            dialect,
            prev: None,
            failed: false,
        }
    }

    /// The byte at `pos + ahead`, if any.
    fn peek_byte(&self, ahead: usize) -> Option<u8> {
        self.src.as_bytes().get(self.pos + ahead).copied()
    }

    /// Skips whitespace and comments.
    fn skip_trivia(&mut self) -> Result<(), LexError> {
        let bytes = self.src.as_bytes();
        loop {
            let Some(&b) = bytes.get(self.pos) else {
                return Ok(());
            };
            if b.is_ascii_whitespace() {
                self.pos += 1;
            } else if b == b'-' && self.peek_byte(1) == Some(b'-')
                || b == b'#' && self.dialect == Dialect::GoogleSql
            {
                while let Some(&c) = bytes.get(self.pos) {
                    self.pos += 1;
                    if c == b'\n' {
                        break;
                    }
                }
            } else if b == b'/' && self.peek_byte(1) == Some(b'*') {
                self.skip_block_comment()?;
            } else {
                return Ok(());
            }
        }
    }

    /// Skips a `/* ... */` comment (nested in PostgreSQL, flat in GoogleSQL).
    fn skip_block_comment(&mut self) -> Result<(), LexError> {
        let bytes = self.src.as_bytes();
        let offset = self.pos;
        self.pos += 2;
        let mut depth = 1usize;
        while depth > 0 {
            match (bytes.get(self.pos), bytes.get(self.pos + 1)) {
                (Some(b'*'), Some(b'/')) => {
                    depth -= 1;
                    self.pos += 2;
                }
                (Some(b'/'), Some(b'*')) if self.dialect == Dialect::PostgreSql => {
                    depth += 1;
                    self.pos += 2;
                }
                (Some(_), _) => self.pos += 1,
                (None, _) => return Err(LexError::UnterminatedComment { offset }),
            }
        }
        Ok(())
    }

    /// Reads the next token, or `None` at the end of the text.
    fn next_token(&mut self) -> Result<Option<Token<'a>>, LexError> {
        self.skip_trivia()?;
        let start = self.pos;
        let bytes = self.src.as_bytes();
        let Some(&b) = bytes.get(start) else {
            return Ok(None);
        };
        let token = match self.dialect {
            Dialect::GoogleSql => self.google_token(b, start)?,
            Dialect::PostgreSql => self.postgres_token(b, start)?,
        };
        self.prev = Some((token.kind, token.text));
        Ok(Some(token))
    }

    /// Lexes one GoogleSQL token starting with byte `b` at `start`.
    fn google_token(&mut self, b: u8, start: usize) -> Result<Token<'a>, LexError> {
        // String and bytes literals, with optional r/b prefixes.
        if let Some((prefix_len, raw, bytes_lit)) = self.literal_prefix() {
            return self.google_string(start, prefix_len, raw, bytes_lit);
        }
        match b {
            b'`' => self.google_quoted_ident(start),
            b'@' => Ok(self.google_param(start)),
            b'0'..=b'9' => Ok(self.number(start)),
            b'.' if self.peek_byte(1).is_some_and(|c| c.is_ascii_digit()) && !self.after_path() => {
                Ok(self.number(start))
            }
            _ if is_word_start(b) => Ok(self.word(start)),
            _ => Ok(self.punct(start)),
        }
    }

    /// Lexes one PostgreSQL token starting with byte `b` at `start`.
    fn postgres_token(&mut self, b: u8, start: usize) -> Result<Token<'a>, LexError> {
        match b {
            b'\'' => self.postgres_string(start, start, false),
            b'E' | b'e' if self.peek_byte(1) == Some(b'\'') => {
                self.postgres_string(start, start + 1, true)
            }
            b'"' => self.postgres_quoted_ident(start),
            b'$' if self.peek_byte(1).is_some_and(|c| c.is_ascii_digit()) => {
                let mut end = start + 1;
                while self.src.as_bytes().get(end).is_some_and(u8::is_ascii_digit) {
                    end += 1;
                }
                self.pos = end;
                let text = &self.src[start..end];
                Ok(Token {
                    kind: TokenKind::Param,
                    text,
                    start,
                    value: Cow::Owned(format!("p{}", &text[1..])),
                })
            }
            b'$' => match self.dollar_quoted(start)? {
                Some(token) => Ok(token),
                None => Ok(self.punct(start)),
            },
            b'0'..=b'9' => Ok(self.number(start)),
            b'.' if self.peek_byte(1).is_some_and(|c| c.is_ascii_digit()) && !self.after_path() => {
                Ok(self.number(start))
            }
            _ if is_word_start(b) || b >= 0x80 => Ok(self.word(start)),
            _ => Ok(self.punct(start)),
        }
    }

    /// Whether the previous token ends a path element, so that a `.` starts a path, not a number.
    fn after_path(&self) -> bool {
        matches!(
            self.prev,
            Some((TokenKind::Word | TokenKind::QuotedIdent, _))
                | Some((TokenKind::Punct, ")" | "]"))
        )
    }

    /// If a GoogleSQL string or bytes literal starts here, returns the prefix length and
    /// whether it is raw and whether it is bytes.
    fn literal_prefix(&self) -> Option<(usize, bool, bool)> {
        let mut raw = false;
        let mut bytes_lit = false;
        let mut len = 0;
        while len < 2 {
            match self.peek_byte(len) {
                Some(b'r' | b'R') if !raw => raw = true,
                Some(b'b' | b'B') if !bytes_lit => bytes_lit = true,
                _ => break,
            }
            len += 1;
        }
        matches!(self.peek_byte(len), Some(b'\'' | b'"')).then_some((len, raw, bytes_lit))
    }

    /// Lexes a GoogleSQL string or bytes literal whose quote starts at `start + prefix_len`.
    fn google_string(
        &mut self,
        start: usize,
        prefix_len: usize,
        raw: bool,
        bytes_lit: bool,
    ) -> Result<Token<'a>, LexError> {
        let bytes = self.src.as_bytes();
        let quote_at = start + prefix_len;
        let quote = bytes[quote_at];
        let triple =
            bytes.get(quote_at + 1) == Some(&quote) && bytes.get(quote_at + 2) == Some(&quote);
        let delim = if triple { 3 } else { 1 };
        let body_start = quote_at + delim;
        let mut i = body_start;
        let body_end = loop {
            match bytes.get(i) {
                None => return Err(LexError::UnterminatedString { offset: start }),
                // A backslash escapes the next character, even in raw literals (where it stays
                // part of the value).
                Some(b'\\') => i += 2,
                Some(&c) if c == quote => {
                    if !triple {
                        break i;
                    }
                    if bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) {
                        break i;
                    }
                    i += 1;
                }
                Some(_) => i += 1,
            }
        };
        let end = body_end + delim;
        self.pos = end;
        let body = &self.src[body_start..body_end];
        let value = if raw {
            Cow::Borrowed(body)
        } else {
            unescape_google(body, bytes_lit).ok_or(LexError::InvalidEscape { offset: start })?
        };
        Ok(Token {
            kind: if bytes_lit {
                TokenKind::Bytes
            } else {
                TokenKind::String
            },
            text: &self.src[start..end],
            start,
            value,
        })
    }

    /// Lexes a GoogleSQL `` `quoted identifier` ``.
    fn google_quoted_ident(&mut self, start: usize) -> Result<Token<'a>, LexError> {
        let bytes = self.src.as_bytes();
        let mut i = start + 1;
        loop {
            match bytes.get(i) {
                None => return Err(LexError::UnterminatedIdentifier { offset: start }),
                Some(b'\\') => i += 2,
                Some(b'`') => break,
                Some(_) => i += 1,
            }
        }
        self.pos = i + 1;
        let body = &self.src[start + 1..i];
        let value =
            unescape_google(body, false).ok_or(LexError::InvalidEscape { offset: start })?;
        Ok(Token {
            kind: TokenKind::QuotedIdent,
            text: &self.src[start..=i],
            start,
            value,
        })
    }

    /// Lexes `@name` (a parameter), `@@name` (a system variable, kept as a parameter named
    /// `@name`) or a lone `@` (which starts a hint, `@{...}`).
    fn google_param(&mut self, start: usize) -> Token<'a> {
        let bytes = self.src.as_bytes();
        let sigils = if bytes.get(start + 1) == Some(&b'@') {
            2
        } else {
            1
        };
        let mut end = start + sigils;
        if !bytes.get(end).is_some_and(|&c| is_word_start(c)) {
            return self.punct(start);
        }
        while bytes.get(end).is_some_and(|&c| is_word_char(c)) {
            end += 1;
        }
        self.pos = end;
        Token {
            kind: TokenKind::Param,
            text: &self.src[start..end],
            start,
            value: Cow::Borrowed(&self.src[start + 1..end]),
        }
    }

    /// Lexes a PostgreSQL `'string'` (with `''` for a quote) or `E'string'` (with backslash
    /// escapes too); the quote is at `quote_at`.
    fn postgres_string(
        &mut self,
        start: usize,
        quote_at: usize,
        escapes: bool,
    ) -> Result<Token<'a>, LexError> {
        let bytes = self.src.as_bytes();
        let mut i = quote_at + 1;
        let mut value = String::new();
        let mut seg = i;
        loop {
            match bytes.get(i) {
                None => return Err(LexError::UnterminatedString { offset: start }),
                Some(b'\'') if bytes.get(i + 1) == Some(&b'\'') => {
                    value.push_str(&self.src[seg..=i]);
                    i += 2;
                    seg = i;
                }
                Some(b'\'') => break,
                Some(b'\\') if escapes => {
                    value.push_str(&self.src[seg..i]);
                    let Some(&c) = bytes.get(i + 1) else {
                        return Err(LexError::UnterminatedString { offset: start });
                    };
                    match c {
                        b'n' => value.push('\n'),
                        b't' => value.push('\t'),
                        b'r' => value.push('\r'),
                        b'b' => value.push('\u{8}'),
                        b'f' => value.push('\u{c}'),
                        _ if c.is_ascii() => value.push(char::from(c)),
                        _ => return Err(LexError::InvalidEscape { offset: start }),
                    }
                    i += 2;
                    seg = i;
                }
                Some(_) => i += 1,
            }
        }
        value.push_str(&self.src[seg..i]);
        self.pos = i + 1;
        Ok(Token {
            kind: TokenKind::String,
            text: &self.src[start..=i],
            start,
            value: Cow::Owned(value),
        })
    }

    /// Lexes a PostgreSQL `"quoted identifier"` (with `""` for a quote).
    fn postgres_quoted_ident(&mut self, start: usize) -> Result<Token<'a>, LexError> {
        let bytes = self.src.as_bytes();
        let mut i = start + 1;
        loop {
            match bytes.get(i) {
                None => return Err(LexError::UnterminatedIdentifier { offset: start }),
                Some(b'"') if bytes.get(i + 1) == Some(&b'"') => i += 2,
                Some(b'"') => break,
                Some(_) => i += 1,
            }
        }
        self.pos = i + 1;
        let body = &self.src[start + 1..i];
        let value = if body.contains("\"\"") {
            Cow::Owned(body.replace("\"\"", "\""))
        } else {
            Cow::Borrowed(body)
        };
        Ok(Token {
            kind: TokenKind::QuotedIdent,
            text: &self.src[start..=i],
            start,
            value,
        })
    }

    /// Lexes a PostgreSQL dollar-quoted string (`$$...$$`, `$tag$...$tag$`), or returns `None`
    /// if the `$` at `start` does not open one.
    fn dollar_quoted(&mut self, start: usize) -> Result<Option<Token<'a>>, LexError> {
        let bytes = self.src.as_bytes();
        let mut i = start + 1;
        while bytes.get(i).is_some_and(|&c| is_word_char(c)) {
            i += 1;
        }
        if bytes.get(i) != Some(&b'$') || bytes.get(start + 1).is_some_and(u8::is_ascii_digit) {
            return Ok(None);
        }
        let tag = &self.src[start..=i];
        let body_start = i + 1;
        let Some(rel) = self.src[body_start..].find(tag) else {
            return Err(LexError::UnterminatedString { offset: start });
        };
        let body_end = body_start + rel;
        let end = body_end + tag.len();
        self.pos = end;
        Ok(Some(Token {
            kind: TokenKind::String,
            text: &self.src[start..end],
            start,
            value: Cow::Borrowed(&self.src[body_start..body_end]),
        }))
    }

    /// Lexes a numeric literal (decimal, hexadecimal or floating point).
    fn number(&mut self, start: usize) -> Token<'a> {
        let bytes = self.src.as_bytes();
        let mut i = start;
        if bytes.get(i) == Some(&b'0') && matches!(bytes.get(i + 1), Some(b'x' | b'X')) {
            i += 2;
            while bytes.get(i).is_some_and(u8::is_ascii_hexdigit) {
                i += 1;
            }
        } else {
            while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if bytes.get(i) == Some(&b'.') {
                i += 1;
                while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
            }
            if matches!(bytes.get(i), Some(b'e' | b'E')) {
                let mut j = i + 1;
                if matches!(bytes.get(j), Some(b'+' | b'-')) {
                    j += 1;
                }
                if bytes.get(j).is_some_and(u8::is_ascii_digit) {
                    i = j;
                    while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                        i += 1;
                    }
                }
            }
        }
        self.pos = i;
        let text = &self.src[start..i];
        Token {
            kind: TokenKind::Number,
            text,
            start,
            value: Cow::Borrowed(text),
        }
    }

    /// Lexes an unquoted word.
    fn word(&mut self, start: usize) -> Token<'a> {
        let mut end = start;
        for (offset, c) in self.src[start..].char_indices() {
            let ok = if c.is_ascii() {
                is_word_char(c as u8)
                    || (c == '$' && offset > 0 && self.dialect == Dialect::PostgreSql)
            } else {
                self.dialect == Dialect::PostgreSql && c.is_alphanumeric()
            };
            if !ok {
                break;
            }
            end = start + offset + c.len_utf8();
        }
        if end == start {
            return self.punct(start);
        }
        self.pos = end;
        let text = &self.src[start..end];
        Token {
            kind: TokenKind::Word,
            text,
            start,
            value: Cow::Borrowed(text),
        }
    }

    /// Lexes an operator or punctuation: one of the known two-character operators, or else a
    /// single character.
    fn punct(&mut self, start: usize) -> Token<'a> {
        const TWO: [&str; 7] = ["=>", "<=", ">=", "!=", "<>", "||", "::"];
        let rest = &self.src[start..];
        let len = if TWO.iter().any(|op| rest.starts_with(op)) {
            2
        } else {
            rest.chars().next().map_or(1, char::len_utf8)
        };
        let end = start + len;
        self.pos = end;
        let text = &self.src[start..end];
        Token {
            kind: TokenKind::Punct,
            text,
            start,
            value: Cow::Borrowed(text),
        }
    }
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Result<Token<'a>, LexError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_token() {
            Ok(token) => token.map(Ok),
            Err(err) => {
                self.failed = true;
                Some(Err(err))
            }
        }
    }
}

/// Whether `b` can start an unquoted identifier.
fn is_word_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

/// Whether `b` can continue an unquoted identifier.
fn is_word_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Decodes the escape sequences of a GoogleSQL string, bytes or quoted-identifier body.
///
/// Returns `None` for an invalid escape, or for a string (not bytes) body that does not decode
/// to UTF-8. Bytes bodies are decoded lossily.
fn unescape_google(body: &str, bytes_lit: bool) -> Option<Cow<'_, str>> {
    if !body.contains('\\') {
        return Some(Cow::Borrowed(body));
    }
    let src = body.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(src.len());
    let mut i = 0;
    while i < src.len() {
        let b = src[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let &e = src.get(i + 1)?;
        i += 2;
        match e {
            b'a' => out.push(0x07),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            b'\\' | b'?' | b'"' | b'\'' | b'`' => out.push(e),
            b'0'..=b'7' => {
                let digits = body.get(i - 1..i + 2)?;
                out.push(u8::from_str_radix(digits, 8).ok()?);
                i += 2;
            }
            b'x' | b'X' => {
                let digits = body.get(i..i + 2)?;
                out.push(u8::from_str_radix(digits, 16).ok()?);
                i += 2;
            }
            b'u' | b'U' => {
                let n = if e == b'u' { 4 } else { 8 };
                let digits = body.get(i..i + n)?;
                let c = char::from_u32(u32::from_str_radix(digits, 16).ok()?)?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                i += n;
            }
            _ => return None,
        }
    }
    if bytes_lit {
        Some(Cow::Owned(String::from_utf8_lossy(&out).into_owned()))
    } else {
        String::from_utf8(out).ok().map(Cow::Owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kinds and values of the tokens of `sql`.
    fn lex(sql: &str, dialect: Dialect) -> Vec<(TokenKind, String)> {
        tokenize(sql, dialect)
            .expect("test input tokenizes")
            .into_iter()
            .map(|t| (t.kind, t.value.into_owned()))
            .collect()
    }

    /// The values of the tokens of a GoogleSQL statement.
    fn values(sql: &str) -> Vec<String> {
        lex(sql, Dialect::GoogleSql)
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    #[test]
    fn comments_and_whitespace_are_skipped() {
        let sql = "SELECT -- one\n a # two\n /* three */ , b";
        assert_eq!(values(sql), ["SELECT", "a", ",", "b"]);
        assert!(matches!(
            tokenize("SELECT /* open", Dialect::GoogleSql),
            Err(LexError::UnterminatedComment { offset: 7 })
        ));
    }

    #[test]
    fn string_literal_forms_decode() {
        let toks = lex(
            r#"'a\'b' "c\"d" '''x'y''' """p"q""" r'\n' R"raw\"" b'\x41' rb'\x41' BR"q" '\u00e9\101'"#,
            Dialect::GoogleSql,
        );
        let expected = [
            (TokenKind::String, "a'b"),
            (TokenKind::String, "c\"d"),
            (TokenKind::String, "x'y"),
            (TokenKind::String, "p\"q"),
            (TokenKind::String, "\\n"),
            (TokenKind::String, "raw\\\""),
            (TokenKind::Bytes, "A"),
            (TokenKind::Bytes, "\\x41"),
            (TokenKind::Bytes, "q"),
            (TokenKind::String, "éA"),
        ];
        assert_eq!(toks.len(), expected.len());
        for ((kind, value), (ek, ev)) in toks.iter().zip(expected) {
            assert_eq!((*kind, value.as_str()), (ek, ev));
        }
    }

    #[test]
    fn literals_hide_sql_inside_them() {
        let sql = "SELECT '-- not a comment', \"/* nor */\", '''RECEIVE_X(''' FROM t";
        assert_eq!(
            values(sql),
            [
                "SELECT",
                "-- not a comment",
                ",",
                "/* nor */",
                ",",
                "RECEIVE_X(",
                "FROM",
                "t"
            ]
        );
    }

    #[test]
    fn bad_literals_are_errors() {
        assert!(matches!(
            tokenize("SELECT 'abc", Dialect::GoogleSql),
            Err(LexError::UnterminatedString { offset: 7 })
        ));
        assert!(matches!(
            tokenize("SELECT '\\q'", Dialect::GoogleSql),
            Err(LexError::InvalidEscape { .. })
        ));
        assert!(matches!(
            tokenize("SELECT `abc", Dialect::GoogleSql),
            Err(LexError::UnterminatedIdentifier { .. })
        ));
    }

    #[test]
    fn identifiers_params_numbers_and_operators() {
        let toks = lex(
            "`My Table`.col @p @@sys 12 0x1F 1.5e3 .5 a.b => <= @{HINT=1}",
            Dialect::GoogleSql,
        );
        let kinds: Vec<_> = toks.iter().map(|(k, _)| *k).collect();
        use TokenKind::*;
        assert_eq!(
            kinds,
            [
                QuotedIdent,
                Punct,
                Word,
                Param,
                Param,
                Number,
                Number,
                Number,
                Number,
                Word,
                Punct,
                Word,
                Punct,
                Punct,
                Punct,
                Punct,
                Word,
                Punct,
                Number,
                Punct
            ]
        );
        assert_eq!(toks[0].1, "My Table");
        assert_eq!(toks[3].1, "p");
        assert_eq!(toks[4].1, "@sys");
        assert_eq!(toks[8].1, ".5");
    }

    #[test]
    fn names_fold_in_postgresql_only() {
        let g = tokenize("MyQ `My Q`", Dialect::GoogleSql).expect("tokenizes");
        assert_eq!(g[0].name(Dialect::GoogleSql), "MyQ");
        assert_eq!(g[1].name(Dialect::GoogleSql), "My Q");
        let p = tokenize("MyQ \"MyQ\" myq", Dialect::PostgreSql).expect("tokenizes");
        let names: Vec<_> = p.iter().map(|t| t.name(Dialect::PostgreSql)).collect();
        assert_eq!(names, ["myq", "MyQ", "myq"]);
    }

    #[test]
    fn spans_point_into_the_source() {
        let sql = "SELECT  `a`, 'b'";
        let toks = tokenize(sql, Dialect::GoogleSql).expect("tokenizes");
        for t in &toks {
            assert_eq!(&sql[t.start..t.end()], t.text);
        }
        assert_eq!(toks[1].start, 8);
    }

    #[test]
    fn postgres_quoting_and_params() {
        let toks = lex(
            r#"SELECT "My ""T""", 'it''s', E'a\'b', $1, $$x$y$$, $t$ ' $t$ # -- c"#,
            Dialect::PostgreSql,
        );
        let want = [
            (TokenKind::Word, "SELECT"),
            (TokenKind::QuotedIdent, "My \"T\""),
            (TokenKind::Punct, ","),
            (TokenKind::String, "it's"),
            (TokenKind::Punct, ","),
            (TokenKind::String, "a'b"),
            (TokenKind::Punct, ","),
            (TokenKind::Param, "p1"),
            (TokenKind::Punct, ","),
            (TokenKind::String, "x$y"),
            (TokenKind::Punct, ","),
            (TokenKind::String, " ' "),
            (TokenKind::Punct, "#"),
        ];
        assert_eq!(toks.len(), want.len());
        for ((kind, value), (ek, ev)) in toks.iter().zip(want) {
            assert_eq!((*kind, value.as_str()), (ek, ev));
        }
        assert!(tokenize("/* a /* b */ c */ x", Dialect::PostgreSql).is_ok_and(|t| t.len() == 1));
    }
}
