//! Parsing of `#[queue(...)]` and the accepted `#[serde(...)]` attributes.
//!
//! Every problem is pushed to an [`Errors`] accumulator, spanned on the offending tokens, so a
//! user sees all of them at once.

use proc_macro2::Span;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Attribute, LitStr, Meta, Token};

/// Collects spanned errors and combines them.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn spanned(
        &mut self,
        tokens: impl quote::ToTokens,
        message: impl std::fmt::Display,
    ) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The payload codec chosen with `payload = "…"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CodecAttr {
    Json,
    Bytes,
    String,
    Proto,
}

/// The column type chosen with `payload_type = "…"` (JSON codec only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PayloadTypeAttr {
    Json,
    String,
    Bytes,
}

/// A value with the span of the attribute that set it.
pub(crate) struct At<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

#[derive(Default)]
pub(crate) struct ContainerAttrs {
    pub(crate) name: Option<At<String>>,
    pub(crate) codec: Option<At<CodecAttr>>,
    pub(crate) payload_type: Option<At<PayloadTypeAttr>>,
    pub(crate) krate: Option<syn::Path>,
    /// `ordered`: the queue is ordered per key; the derive adds the sequence key column.
    pub(crate) ordered: Option<Span>,
    /// `sequence_column = "…"`: the name of the added sequence column (with `ordered`).
    pub(crate) sequence_column: Option<At<String>>,
    /// `#[serde(...)]` attributes to forward to the payload structs.
    pub(crate) serde: Vec<Attribute>,
}

#[derive(Default)]
pub(crate) struct FieldAttrs {
    pub(crate) key: Option<Span>,
    pub(crate) column: Option<At<String>>,
    pub(crate) desc: Option<Span>,
    /// `sequence`: no longer a field attribute (the sequence is the SDK's); kept to say so.
    pub(crate) sequence: Option<Span>,
    /// `#[serde(...)]` attributes to forward to the payload structs.
    pub(crate) serde: Vec<Attribute>,
}

const CONTAINER_KEYS: &str =
    "`name`, `payload`, `payload_type`, `ordered`, `sequence_column` or `crate`";
const FIELD_KEYS: &str = "`key`, `column` or `desc`";
const SERDE_FIELD_KEYS: &[&str] = &["rename", "alias", "default"];
const SERDE_CONTAINER_KEYS: &[&str] = &["rename_all", "deny_unknown_fields"];

fn set_once<T>(slot: &mut Option<T>, value: T, span: Span, what: &str, errors: &mut Errors) {
    if slot.is_some() {
        errors.at(span, format!("duplicate `{what}` attribute"));
    } else {
        *slot = Some(value);
    }
}

pub(crate) fn parse_container(attrs: &[Attribute], errors: &mut Errors) -> ContainerAttrs {
    let mut out = ContainerAttrs::default();
    for attr in attrs {
        if attr.path().is_ident("serde") {
            check_serde(attr, SERDE_CONTAINER_KEYS, "on the struct", errors);
            out.serde.push(attr.clone());
            continue;
        }
        if !attr.path().is_ident("queue") {
            continue;
        }
        let result = attr.parse_nested_meta(|meta| {
            let span = meta.path.span();
            if meta.path.is_ident("name") {
                let lit: LitStr = meta.value()?.parse()?;
                set_once(&mut out.name, At { value: lit.value(), span: lit.span() }, span, "name", errors);
            } else if meta.path.is_ident("payload") {
                let lit: LitStr = meta.value()?.parse()?;
                let codec = match lit.value().as_str() {
                    "json" => Some(CodecAttr::Json),
                    "bytes" => Some(CodecAttr::Bytes),
                    "string" => Some(CodecAttr::String),
                    "proto" => Some(CodecAttr::Proto),
                    _ => None,
                };
                match codec {
                    Some(value) => set_once(&mut out.codec, At { value, span: lit.span() }, span, "payload", errors),
                    None => errors.at(
                        lit.span(),
                        "unknown payload codec; expected \"json\", \"bytes\", \"string\" or \"proto\"",
                    ),
                }
            } else if meta.path.is_ident("payload_type") {
                let lit: LitStr = meta.value()?.parse()?;
                let ty = match lit.value().to_ascii_uppercase().as_str() {
                    "JSON" => Some(PayloadTypeAttr::Json),
                    "STRING" | "STRING(MAX)" => Some(PayloadTypeAttr::String),
                    "BYTES" | "BYTES(MAX)" => Some(PayloadTypeAttr::Bytes),
                    _ => None,
                };
                match ty {
                    Some(value) => set_once(&mut out.payload_type, At { value, span: lit.span() }, span, "payload_type", errors),
                    None => errors.at(
                        lit.span(),
                        "unknown payload_type; expected \"JSON\", \"STRING\" or \"BYTES\"",
                    ),
                }
            } else if meta.path.is_ident("ordered") {
                set_once(&mut out.ordered, span, span, "ordered", errors);
            } else if meta.path.is_ident("sequence_column") {
                let lit: LitStr = meta.value()?.parse()?;
                set_once(&mut out.sequence_column, At { value: lit.value(), span: lit.span() }, span, "sequence_column", errors);
            } else if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                match lit.parse::<syn::Path>() {
                    Ok(path) => set_once(&mut out.krate, path, span, "crate", errors),
                    Err(_) => errors.at(lit.span(), "`crate` must be a path, such as \"::my_crate::queues\""),
                }
            } else {
                let name = meta.path.get_ident().map_or_else(|| "?".to_owned(), ToString::to_string);
                errors.at(span, format!("unknown queue attribute `{name}`; expected {CONTAINER_KEYS}"));
                skip_value(&meta)?;
            }
            Ok(())
        });
        if let Err(e) = result {
            errors.push(e);
        }
    }
    out
}

pub(crate) fn parse_field(attrs: &[Attribute], errors: &mut Errors) -> FieldAttrs {
    let mut out = FieldAttrs::default();
    for attr in attrs {
        if attr.path().is_ident("serde") {
            check_serde(attr, SERDE_FIELD_KEYS, "on a payload field", errors);
            out.serde.push(attr.clone());
            continue;
        }
        if !attr.path().is_ident("queue") {
            continue;
        }
        let result = attr.parse_nested_meta(|meta| {
            let span = meta.path.span();
            if meta.path.is_ident("key") {
                set_once(&mut out.key, span, span, "key", errors);
            } else if meta.path.is_ident("desc") {
                set_once(&mut out.desc, span, span, "desc", errors);
            } else if meta.path.is_ident("sequence") {
                set_once(&mut out.sequence, span, span, "sequence", errors);
            } else if meta.path.is_ident("column") {
                let lit: LitStr = meta.value()?.parse()?;
                set_once(
                    &mut out.column,
                    At {
                        value: lit.value(),
                        span: lit.span(),
                    },
                    span,
                    "column",
                    errors,
                );
            } else {
                let name = meta
                    .path
                    .get_ident()
                    .map_or_else(|| "?".to_owned(), ToString::to_string);
                errors.at(
                    span,
                    format!("unknown queue field attribute `{name}`; expected {FIELD_KEYS}"),
                );
                skip_value(&meta)?;
            }
            Ok(())
        });
        if let Err(e) = result {
            errors.push(e);
        }
    }
    out
}

/// Consumes `= value` or `(…)` after an unknown attribute name so parsing can go on.
fn skip_value(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        let _: syn::Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| skip_value(&inner))?;
    }
    Ok(())
}

/// Accepts only serde attributes that mean the same on the derive's private payload structs.
fn check_serde(attr: &Attribute, allowed: &[&str], place: &str, errors: &mut Errors) {
    let metas = match attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated) {
        Ok(metas) => metas,
        Err(e) => {
            errors.push(e);
            return;
        }
    };
    for meta in metas {
        let path = meta.path();
        let ok = path
            .get_ident()
            .is_some_and(|i| allowed.iter().any(|a| i == a));
        if !ok {
            let name = path
                .get_ident()
                .map_or_else(|| "?".to_owned(), ToString::to_string);
            let list = allowed
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ");
            errors.spanned(
                path,
                format!(
                    "`#[serde({name})]` is not supported {place} of a queue message: the payload is encoded by the derive, which honours only {list}"
                ),
            );
        }
    }
}
