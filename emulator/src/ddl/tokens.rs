//! Token-level helpers of the DDL translator: rendering types and clauses from their tokens,
//! option lists. The tokenizer and the cursor are `spanner_queues_sql`'s.

use spanner_queues_sql::{
    Cursor, Dialect, Lexer, Token, TokenKind, is_google_sql_reserved, quote_ident_always,
};

use super::error::DdlError;

/// Consumes an identifier of a client's statement and returns the name it stands for in
/// `dialect` and how it is passed on to the backend (see `model::generated_name`): a quoted
/// one quoted again, a bare word bare (folded to lower case in PostgreSQL, which folds it
/// anyway). Any word is taken, keywords included: the backend, given the name as written,
/// accepts or refuses it as Cloud Spanner would.
pub(super) fn ident_written(
    p: &mut Cursor<'_, '_>,
    dialect: Dialect,
    what: &str,
) -> Result<(String, String), DdlError> {
    let token = p.ident_token(what)?;
    let name = token.name(dialect).into_owned();
    let written = if token.kind == TokenKind::QuotedIdent {
        quote_ident_always(dialect, &name)
    } else {
        name.clone()
    };
    Ok((name, written))
}

/// Consumes a dotted name (`a`, `schema.a`) as [`ident_written`] does each part; returns the
/// parts' names and the whole as written.
pub(super) fn path_written(
    p: &mut Cursor<'_, '_>,
    dialect: Dialect,
    what: &str,
) -> Result<(Vec<String>, String), DdlError> {
    let (name, mut written) = ident_written(p, dialect, what)?;
    let mut names = vec![name];
    while p.eat_punct(".") {
        let (name, part) = ident_written(p, dialect, what)?;
        names.push(name);
        written.push('.');
        written.push_str(&part);
    }
    Ok((names, written))
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
                    || p.kind == TokenKind::Word && !is_google_sql_reserved(p.text));
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
    let mut parts = spanner_queues_sql::split_commas(toks);
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
        let mut p = Cursor::new(part, statement);
        let name = p.ident("an option name")?;
        p.expect_punct("=")?;
        let value_toks = p.rest();
        if value_toks.is_empty() {
            return Err(p.error("an option value").into());
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
