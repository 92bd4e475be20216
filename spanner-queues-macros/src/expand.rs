//! The `QueueMessage` expansion.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Ident, Type};

use crate::attr::{self, CodecAttr, Errors, PayloadTypeAttr};
use crate::rules::{self, Kind};

/// Most key fields: the typed key is a tuple, implemented up to 8 elements.
const MAX_KEY_FIELDS: usize = 8;

struct KeyField {
    ident: Ident,
    ty: Type,
    column: String,
    desc: bool,
}

struct PayloadField {
    ident: Ident,
    ty: Type,
    serde: Vec<syn::Attribute>,
}

/// Expands `#[derive(QueueMessage)]`.
pub(crate) fn derive_queue_message(input: &DeriveInput) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();

    let named = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => Some(named),
            Fields::Unnamed(_) => {
                errors.spanned(
                    &s.fields,
                    "`QueueMessage` needs a struct with named fields; tuple structs are not supported",
                );
                None
            }
            Fields::Unit => {
                errors.spanned(
                    &input.ident,
                    "`QueueMessage` needs a struct with named fields; unit structs are not supported",
                );
                None
            }
        },
        Data::Enum(e) => {
            errors.at(
                e.enum_token.span,
                "`QueueMessage` can only be derived for structs with named fields, not enums (one Rust type per queue)",
            );
            None
        }
        Data::Union(u) => {
            errors.at(
                u.union_token.span,
                "`QueueMessage` can only be derived for structs, not unions",
            );
            None
        }
    };

    if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
        errors.spanned(
            &input.generics,
            "`QueueMessage` cannot be derived for generic types: a queue maps to one concrete type",
        );
    }

    let container = attr::parse_container(&input.attrs, &mut errors);
    let queue = match &container.name {
        Some(name) => {
            if let Err((_, why)) = rules::check(Kind::Queue, &name.value) {
                errors.at(
                    name.span,
                    format!("invalid queue name `{}`: {why}", name.value),
                );
            }
            Some(name.value.clone())
        }
        None => {
            errors.spanned(
                &input.ident,
                format!(
                    "missing queue name: add `#[queue(name = \"{}\")]` (a stable name, independent of the Rust type name)",
                    input.ident
                ),
            );
            None
        }
    };
    let codec = container
        .codec
        .as_ref()
        .map_or(CodecAttr::Json, |c| c.value);
    if let (Some(pt), true) = (&container.payload_type, codec != CodecAttr::Json) {
        errors.at(pt.span, "`payload_type` only applies to the JSON codec");
    }
    if codec != CodecAttr::Json {
        for attr in &container.serde {
            errors.spanned(attr, "`#[serde(...)]` only applies to the JSON codec");
        }
    }

    let mut keys: Vec<KeyField> = Vec::new();
    let mut payload: Vec<PayloadField> = Vec::new();
    if let Some(named) = named {
        for field in &named.named {
            let Some(ident) = field.ident.clone() else {
                continue;
            };
            let attrs = attr::parse_field(&field.attrs, &mut errors);
            if let Some(span) = attrs.sequence {
                errors.at(span, "`sequence` is not a field attribute: mark the struct `#[queue(ordered)]` and drop this field; the SDK adds the sequence key column and assigns it on send");
            }
            if attrs.key.is_some() {
                for attr in &attrs.serde {
                    errors.spanned(attr, "`#[serde(...)]` has no effect on a key field: key fields are columns, not part of the payload");
                }
                check_key_type(&field.ty, &mut errors);
                let column = match &attrs.column {
                    Some(c) => {
                        if let Err((_, why)) = rules::check(Kind::Column, &c.value) {
                            errors.at(c.span, format!("invalid column name `{}`: {why}", c.value));
                        }
                        c.value.clone()
                    }
                    None => {
                        let derived = rules::upper_camel_case(&ident.to_string());
                        if let Err((_, why)) = rules::check(Kind::Column, &derived) {
                            errors.spanned(
                                &ident,
                                format!(
                                    "the default column name `{derived}` is invalid: {why}; choose one with `#[queue(key, column = \"…\")]`"
                                ),
                            );
                        }
                        derived
                    }
                };
                if let Some(previous) = keys.iter().find(|k| k.column.eq_ignore_ascii_case(&column))
                {
                    errors.spanned(
                        &ident,
                        format!(
                            "column `{column}` is already used by key field `{}`",
                            previous.ident
                        ),
                    );
                }
                keys.push(KeyField {
                    ident,
                    ty: field.ty.clone(),
                    column,
                    desc: attrs.desc.is_some(),
                });
            } else {
                if let Some(span) = attrs.column.as_ref().map(|c| c.span) {
                    errors.at(span, "`column` applies to key fields only (add `key`); payload fields are not columns");
                }
                if let Some(span) = attrs.desc {
                    errors.at(span, "`desc` applies to key fields only (add `key`)");
                }
                if codec != CodecAttr::Json {
                    for attr in &attrs.serde {
                        errors.spanned(attr, "`#[serde(...)]` only applies to the JSON codec");
                    }
                }
                payload.push(PayloadField {
                    ident,
                    ty: field.ty.clone(),
                    serde: attrs.serde,
                });
            }
        }

        if keys.is_empty() {
            errors.spanned(
                &input.ident,
                "a queue message needs at least one key field: mark the fields of the queue's primary key with `#[queue(key)]`",
            );
        }
        if keys.len() > MAX_KEY_FIELDS {
            errors.spanned(
                &input.ident,
                format!(
                    "at most {MAX_KEY_FIELDS} key fields are supported, found {}",
                    keys.len()
                ),
            );
        }
        check_ordered(&container, &keys, &mut errors);
        if codec != CodecAttr::Json && payload.len() != 1 {
            let (name, needs) = match codec {
                CodecAttr::Bytes => ("bytes", "one `Vec<u8>` field"),
                CodecAttr::String => ("string", "one `String` field"),
                CodecAttr::Proto => ("proto", "one protocol buffer message field"),
                CodecAttr::Json => ("json", ""),
            };
            let span = container
                .codec
                .as_ref()
                .map_or_else(|| input.ident.span(), |c| c.span);
            errors.at(
                span,
                format!(
                    "the `{name}` codec needs exactly {needs} besides the key fields, found {} payload fields",
                    payload.len()
                ),
            );
        }
    }

    errors.finish()?;
    let queue = queue.unwrap_or_default();
    Ok(generate(input, &container, &queue, codec, &keys, &payload))
}

/// The default name of the sequence column of an ordered queue.
const SEQUENCE_COLUMN: &str = "Sequence";

/// The sequence column of an ordered queue (`#[queue(ordered)]`): `Sequence`, or the name
/// given with `sequence_column`.
fn sequence_column(container: &attr::ContainerAttrs) -> Option<String> {
    container.ordered.map(|_| {
        container
            .sequence_column
            .as_ref()
            .map_or_else(|| SEQUENCE_COLUMN.to_owned(), |c| c.value.clone())
    })
}

/// An ordered queue's sequence column: a valid name that no key field uses; `sequence_column`
/// only with `ordered`.
fn check_ordered(container: &attr::ContainerAttrs, keys: &[KeyField], errors: &mut Errors) {
    if let (Some(column), None) = (&container.sequence_column, container.ordered) {
        errors.at(
            column.span,
            "`sequence_column` applies to ordered queues only (add `ordered`)",
        );
    }
    let Some(column) = sequence_column(container) else {
        return;
    };
    let span = container
        .sequence_column
        .as_ref()
        .map(|c| c.span)
        .or(container.ordered)
        .unwrap_or_else(proc_macro2::Span::call_site);
    if let Err((_, why)) = rules::check(Kind::Column, &column) {
        errors.at(
            span,
            format!("invalid sequence column name `{column}`: {why}"),
        );
    }
    if let Some(key) = keys.iter().find(|k| k.column.eq_ignore_ascii_case(&column)) {
        errors.at(
            span,
            format!(
                "key field `{}` already uses column `{column}`, which an ordered queue adds as its sequence; name the sequence column with `sequence_column = \"…\"`",
                key.ident
            ),
        );
    }
}

/// Rejects key types that are certainly unsupported, with a message naming the fix. Types not
/// recognised here are left to the `KeyPart` bound.
fn check_key_type(ty: &Type, errors: &mut Errors) {
    const SUPPORTED: &str = "key columns can be `String`, `i64`, `bool`, `Vec<u8>`, `uuid::Uuid`, `time::OffsetDateTime`, `time::Date` or `google_cloud_spanner::Decimal`";
    let hint = match ty {
        Type::Reference(r) => match &*r.elem {
            Type::Path(p) if p.path.is_ident("str") => {
                Some("use `String` instead of `&str`".to_owned())
            }
            _ => Some("references cannot be key fields; use an owned type".to_owned()),
        },
        Type::Tuple(_) | Type::Array(_) | Type::Slice(_) => {
            Some("use one key field per key column".to_owned())
        }
        Type::Path(p) => {
            let last = p.path.segments.last();
            let name = last.map(|s| s.ident.to_string()).unwrap_or_default();
            match name.as_str() {
                "i8" | "i16" | "i32" | "u8" | "u16" | "u32" | "u64" | "u128" | "i128" | "usize"
                | "isize" => Some(format!(
                    "`{name}` is not a Spanner key type; use `i64` (INT64)"
                )),
                "f32" | "f64" => Some(format!(
                    "`{name}` cannot be a key: floating-point keys are not supported"
                )),
                "char" => Some("use `String` instead of `char`".to_owned()),
                "Option" => {
                    Some("key columns are NOT NULL: use the inner type, not `Option`".to_owned())
                }
                "Vec" => {
                    let is_bytes = last.is_some_and(|s| match &s.arguments {
                        syn::PathArguments::AngleBracketed(a) => {
                            a.args.len() == 1
                                && matches!(a.args.first(), Some(syn::GenericArgument::Type(Type::Path(t))) if t.path.is_ident("u8"))
                        }
                        _ => false,
                    });
                    (!is_bytes).then(|| {
                        "only `Vec<u8>` (BYTES) can be a key; arrays cannot be key columns"
                            .to_owned()
                    })
                }
                "HashMap" | "BTreeMap" | "HashSet" | "BTreeSet" | "VecDeque" => {
                    Some(format!("`{name}` cannot be a key column"))
                }
                "Box" | "Rc" | "Arc" | "Cow" => {
                    Some(format!("use the owned inner type, not `{name}`"))
                }
                "SystemTime" | "DateTime" | "NaiveDate" | "NaiveDateTime" => Some(format!(
                    "`{name}` is not supported; use `time::OffsetDateTime` (TIMESTAMP) or `time::Date` (DATE)"
                )),
                _ => None,
            }
        }
        _ => None,
    };
    if let Some(hint) = hint {
        errors.spanned(ty, format!("unsupported key type: {hint}; {SUPPORTED}"));
    }
}

fn generate(
    input: &DeriveInput,
    container: &attr::ContainerAttrs,
    queue: &str,
    codec: CodecAttr,
    keys: &[KeyField],
    payload: &[PayloadField],
) -> TokenStream {
    let name = &input.ident;
    let sequence = sequence_column(container);
    let ordered = sequence.is_some();
    let krate: syn::Path = container
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::spanner_queues));

    // Key type and extraction.
    let key_types: Vec<&Type> = keys.iter().map(|k| &k.ty).collect();
    let key_idents: Vec<&Ident> = keys.iter().map(|k| &k.ident).collect();
    let key_vars: Vec<Ident> = (0..keys.len())
        .map(|i| format_ident!("__key{}", i))
        .collect();
    let (key_type, key_expr, key_destructure) = if keys.len() == 1 {
        let ty = key_types[0];
        let ident = key_idents[0];
        let var = &key_vars[0];
        (
            quote!(#ty),
            quote!(::core::clone::Clone::clone(&self.#ident)),
            quote!(let #var = key;),
        )
    } else {
        (
            quote!((#(#key_types,)*)),
            quote!((#(::core::clone::Clone::clone(&self.#key_idents),)*)),
            quote!(let (#(#key_vars,)*) = key;),
        )
    };

    let key_columns = keys.iter().map(|k| {
        let column = &k.column;
        let ty = &k.ty;
        let kind = quote_spanned!(ty.span()=> <#ty as #krate::key::KeyPart>::KEY_TYPE);
        let order = if k.desc {
            quote!(.with_order(#krate::schema::SortOrder::Desc))
        } else {
            quote!()
        };
        quote!(#krate::key::KeyColumn::new(#krate::ident::ColumnName::from_static(#column), #kind) #order)
    });
    // An ordered queue's sequence: the last key column, assigned by the send.
    let sequence_key_column = sequence.map(|column| {
        quote!(#krate::key::KeyColumn::new(
            #krate::ident::ColumnName::from_static(#column),
            #krate::key::KeyType::Int64
        ))
    });
    let key_columns = key_columns.chain(sequence_key_column);

    let payload_spec = match (codec, container.payload_type.as_ref().map(|p| p.value)) {
        (CodecAttr::Json, None | Some(PayloadTypeAttr::Json)) => {
            quote!(#krate::codec::PayloadSpec::json())
        }
        (CodecAttr::Json, Some(PayloadTypeAttr::String)) => quote!(#krate::codec::PayloadSpec::new(
            #krate::codec::Codec::Json,
            #krate::schema::PayloadType::String(#krate::schema::Length::Max)
        )),
        (CodecAttr::Json, Some(PayloadTypeAttr::Bytes)) => quote!(#krate::codec::PayloadSpec::new(
            #krate::codec::Codec::Json,
            #krate::schema::PayloadType::Bytes(#krate::schema::Length::Max)
        )),
        (CodecAttr::Bytes, _) => quote!(#krate::codec::PayloadSpec::bytes()),
        (CodecAttr::String, _) => quote!(#krate::codec::PayloadSpec::string()),
        (CodecAttr::Proto, _) => quote!(#krate::codec::PayloadSpec::proto()),
    };

    let private = quote!(#krate::__private);
    let payload_idents: Vec<&Ident> = payload.iter().map(|p| &p.ident).collect();
    let (encode_body, decode_body) = match codec {
        CodecAttr::Json => {
            let serde_path = format!("{}::__private::serde", path_string(&krate));
            let container_serde = &container.serde;
            let ser_fields = payload.iter().map(|p| {
                let (ident, ty, serde) = (&p.ident, &p.ty, &p.serde);
                quote_spanned!(ty.span()=> #(#serde)* #ident: &'__a #ty)
            });
            let de_fields = payload.iter().map(|p| {
                let (ident, ty, serde) = (&p.ident, &p.ty, &p.serde);
                quote_spanned!(ty.span()=> #(#serde)* #ident: #ty)
            });
            let encode = quote! {
                #[derive(#private::serde::Serialize)]
                #[serde(crate = #serde_path)]
                #(#container_serde)*
                struct __QueuePayload<'__a> {
                    #(#ser_fields,)*
                    #[serde(skip)]
                    __marker: ::core::marker::PhantomData<&'__a ()>,
                }
                let __spec: #krate::codec::PayloadSpec = <Self as #krate::QueueMessage>::PAYLOAD;
                #private::encode_json(
                    &__QueuePayload { #(#payload_idents: &self.#payload_idents,)* __marker: ::core::marker::PhantomData },
                    __spec.column(),
                )
            };
            let decode = quote! {
                #[derive(#private::serde::Deserialize)]
                #[serde(crate = #serde_path)]
                #(#container_serde)*
                struct __QueuePayload {
                    #(#de_fields,)*
                }
                let __payload: __QueuePayload = #private::decode_json(&payload)?;
                #key_destructure
                ::core::result::Result::Ok(Self {
                    #(#key_idents: #key_vars,)*
                    #(#payload_idents: __payload.#payload_idents,)*
                })
            };
            (encode, decode)
        }
        CodecAttr::Bytes | CodecAttr::String | CodecAttr::Proto => {
            let field = &payload[0];
            let (ident, ty) = (&field.ident, &field.ty);
            let (encode_fn, decode_call) = match codec {
                CodecAttr::Bytes => (
                    quote!(encode_bytes),
                    quote_spanned!(ty.span()=> #private::decode_bytes(payload)?),
                ),
                CodecAttr::String => (
                    quote!(encode_string),
                    quote_spanned!(ty.span()=> #private::decode_string(payload)?),
                ),
                _ => (
                    quote!(encode_proto),
                    quote_spanned!(ty.span()=> #private::decode_proto::<#ty>(&payload)?),
                ),
            };
            let encode_call = quote_spanned!(ty.span()=> #private::#encode_fn(&self.#ident));
            let encode = quote!(::core::result::Result::Ok(#encode_call));
            let decode = quote! {
                let __value: #ty = #decode_call;
                #key_destructure
                ::core::result::Result::Ok(Self {
                    #(#key_idents: #key_vars,)*
                    #ident: __value,
                })
            };
            (encode, decode)
        }
    };

    quote! {
        #[allow(non_local_definitions, clippy::all)]
        const _: () = {
            #[automatically_derived]
            impl #krate::QueueMessage for #name {
                type Key = #key_type;
                const QUEUE: #krate::ident::QueueName = #krate::ident::QueueName::from_static(#queue);
                const KEY_COLUMNS: &'static [#krate::key::KeyColumn] = &[#(#key_columns),*];
                const PAYLOAD: #krate::codec::PayloadSpec = #payload_spec;
                const ORDERED: bool = #ordered;

                fn key(&self) -> Self::Key {
                    #key_expr
                }

                fn encode_payload(&self) -> ::core::result::Result<#krate::codec::Payload, #krate::codec::CodecError> {
                    #encode_body
                }

                fn decode(
                    key: Self::Key,
                    payload: #krate::codec::Payload,
                ) -> ::core::result::Result<Self, #krate::codec::CodecError> {
                    #decode_body
                }
            }
        };
    }
}

fn path_string(path: &syn::Path) -> String {
    let mut s = String::new();
    if path.leading_colon.is_some() {
        s.push_str("::");
    }
    let segments: Vec<String> = path
        .segments
        .iter()
        .map(|seg| seg.ident.to_string())
        .collect();
    s.push_str(&segments.join("::"));
    s
}

/// `__identifier_problem!(queue "Name")`: `"ok"` or the problem code. Used by the drift test.
pub(crate) fn identifier_problem(input: TokenStream) -> syn::Result<TokenStream> {
    struct Input {
        kind: Ident,
        name: syn::LitStr,
    }
    impl syn::parse::Parse for Input {
        fn parse(input: syn::parse::ParseStream<'_>) -> syn::Result<Self> {
            Ok(Self {
                kind: input.parse()?,
                name: input.parse()?,
            })
        }
    }
    let parsed: Input = syn::parse2(input)?;
    let kind = match parsed.kind.to_string().as_str() {
        "queue" => Kind::Queue,
        "column" => Kind::Column,
        _ => {
            return Err(syn::Error::new(
                parsed.kind.span(),
                "expected `queue` or `column`",
            ));
        }
    };
    let code = match rules::check(kind, &parsed.name.value()) {
        Ok(()) => "ok",
        Err((code, _)) => code,
    };
    Ok(quote!(#code))
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn expand(input: DeriveInput) -> syn::Result<String> {
        derive_queue_message(&input).map(|t| t.to_string())
    }

    fn error_messages(input: DeriveInput) -> Vec<String> {
        match derive_queue_message(&input) {
            Ok(_) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn expands_a_json_message() {
        let out = expand(parse_quote! {
            #[queue(name = "OrderEmails")]
            struct OrderEmail {
                #[queue(key)] order_id: i64,
                #[queue(key, column = "EmailId", desc)] id: uuid::Uuid,
                subject: String,
            }
        })
        .expect("expands");
        assert!(
            out.contains("QueueName :: from_static (\"OrderEmails\")"),
            "{out}"
        );
        assert!(
            out.contains("ColumnName :: from_static (\"OrderId\")"),
            "{out}"
        );
        assert!(
            out.contains("ColumnName :: from_static (\"EmailId\")"),
            "{out}"
        );
        assert!(out.contains("SortOrder :: Desc"), "{out}");
        assert!(out.contains("type Key = (i64 , uuid :: Uuid ,)"), "{out}");
        assert!(out.contains("PayloadSpec :: json ()"), "{out}");
        assert!(
            out.contains("serde (crate = \":: spanner_queues :: __private :: serde\")")
                || out.contains("serde (crate = \"::spanner_queues::__private::serde\")"),
            "{out}"
        );
        assert!(out.starts_with("# [allow"), "{out}");
        assert!(out.contains("const _ : () ="), "{out}");
    }

    #[test]
    fn an_ordered_queue_gets_a_sequence_key_column_after_its_key_fields() {
        let out = expand(parse_quote! {
            #[queue(name = "Turns", ordered)]
            struct Turn { #[queue(key)] conversation: String, text: String }
        })
        .expect("expands");
        assert!(out.contains("const ORDERED : bool = true ;"), "{out}");
        // The typed key is the ordering key alone; the sequence is a key column of its own.
        assert!(out.contains("type Key = String ;"), "{out}");
        let conversation = out
            .find("from_static (\"Conversation\")")
            .expect("key column");
        let sequence = out
            .find("from_static (\"Sequence\")")
            .expect("sequence column");
        assert!(conversation < sequence, "{out}");
        assert!(out.contains("KeyType :: Int64"), "{out}");
        let named = expand(parse_quote! {
            #[queue(name = "Turns", ordered, sequence_column = "Seq")]
            struct Turn { #[queue(key)] conversation: String, text: String }
        })
        .expect("expands");
        assert!(named.contains("from_static (\"Seq\")"), "{named}");
        let plain = expand(parse_quote! {
            #[queue(name = "Pings")]
            struct Ping { #[queue(key)] id: String, text: String }
        })
        .expect("expands");
        assert!(plain.contains("const ORDERED : bool = false ;"), "{plain}");
    }

    #[test]
    fn the_sequence_column_is_the_sdks() {
        let cases: Vec<(DeriveInput, &str)> = vec![
            (
                parse_quote!(
                    #[queue(name = "Q", ordered)]
                    struct N {
                        #[queue(key)]
                        k: String,
                        #[queue(key, sequence)]
                        s: i64,
                    }
                ),
                "`sequence` is not a field attribute: mark the struct `#[queue(ordered)]`",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q", ordered)]
                    struct N {
                        #[queue(key)]
                        k: String,
                        #[queue(key)]
                        sequence: i64,
                    }
                ),
                "already uses column `Sequence`",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q", ordered, sequence_column = "K")]
                    struct N {
                        #[queue(key)]
                        k: String,
                    }
                ),
                "already uses column `K`",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q", sequence_column = "Seq")]
                    struct N {
                        #[queue(key)]
                        k: String,
                    }
                ),
                "applies to ordered queues only",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q", ordered, sequence_column = "1st")]
                    struct N {
                        #[queue(key)]
                        k: String,
                    }
                ),
                "invalid sequence column name",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q", ordered, ordered)]
                    struct N {
                        #[queue(key)]
                        k: String,
                    }
                ),
                "duplicate `ordered` attribute",
            ),
        ];
        for (input, expected) in cases {
            let errors = error_messages(input);
            assert!(
                errors.iter().any(|m| m.contains(expected)),
                "expected {expected:?}, got {errors:#?}"
            );
        }
    }

    #[test]
    fn single_key_is_not_a_tuple() {
        let out = expand(parse_quote! {
            #[queue(name = "Pings", payload = "string")]
            struct Ping { #[queue(key)] id: String, text: String }
        })
        .expect("expands");
        assert!(out.contains("type Key = String ;"), "{out}");
        assert!(out.contains("encode_string"), "{out}");
        assert!(out.contains("PayloadSpec :: string ()"), "{out}");
    }

    #[test]
    fn payload_type_and_crate_override() {
        let out = expand(parse_quote! {
            #[queue(name = "Q", payload_type = "STRING", crate = "my::sq")]
            struct M { #[queue(key)] id: i64 }
        })
        .expect("expands");
        assert!(
            out.contains(
                "my :: sq :: schema :: PayloadType :: String (my :: sq :: schema :: Length :: Max)"
            ),
            "{out}"
        );
        assert!(out.contains("\"my::sq::__private::serde\""), "{out}");
        assert!(!out.contains("spanner_queues"), "{out}");
    }

    #[test]
    fn reports_all_errors_at_once() {
        let errors = error_messages(parse_quote! {
            #[queue(nme = "x", payload = "yaml")]
            struct M {
                #[queue(key, key)] a: f64,
                #[queue(colum = "B")] b: String,
                #[queue(column = "C")] c: String,
            }
        });
        let expected = [
            "unknown queue attribute `nme`",
            "unknown payload codec",
            "missing queue name",
            "duplicate `key` attribute",
            "unsupported key type: `f64` cannot be a key",
            "unknown queue field attribute `colum`",
            "`column` applies to key fields only",
        ];
        for e in expected {
            assert!(
                errors.iter().any(|m| m.contains(e)),
                "missing {e:?} in {errors:#?}"
            );
        }
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    }

    #[test]
    fn rejects_shapes() {
        let cases: Vec<(DeriveInput, &str)> = vec![
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    enum E {
                        A,
                    }
                ),
                "not enums",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct T(i64);
                ),
                "tuple structs",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct U;
                ),
                "unit structs",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct G<T> {
                        #[queue(key)]
                        id: i64,
                        t: T,
                    }
                ),
                "generic",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        a: i64,
                    }
                ),
                "at least one key field",
            ),
            (
                parse_quote!(
                    #[queue(name = "bad-name")]
                    struct N {
                        #[queue(key)]
                        a: i64,
                    }
                ),
                "invalid queue name `bad-name`",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key)]
                        payload: i64,
                    }
                ),
                "default column name `Payload` is invalid",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key, column = "9")]
                        a: i64,
                    }
                ),
                "invalid column name `9`",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key)]
                        a_b: i64,
                        #[queue(key, column = "ab")]
                        c: i64,
                    }
                ),
                "already used by key field `a_b`",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q", payload = "bytes")]
                    struct N {
                        #[queue(key)]
                        a: i64,
                        b: Vec<u8>,
                        c: Vec<u8>,
                    }
                ),
                "exactly one `Vec<u8>` field",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q", payload = "string")]
                    struct N {
                        #[queue(key)]
                        a: i64,
                    }
                ),
                "found 0 payload fields",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q", payload = "bytes", payload_type = "JSON")]
                    struct N {
                        #[queue(key)]
                        a: i64,
                        b: Vec<u8>,
                    }
                ),
                "only applies to the JSON codec",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q", name = "R")]
                    struct N {
                        #[queue(key)]
                        a: i64,
                    }
                ),
                "duplicate `name` attribute",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key)]
                        a: i32,
                    }
                ),
                "use `i64`",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key)]
                        a: Option<String>,
                    }
                ),
                "NOT NULL",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key)]
                        a: Vec<String>,
                    }
                ),
                "only `Vec<u8>`",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key)]
                        a: &'static str,
                    }
                ),
                "use `String`",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key)]
                        a: i64,
                        #[serde(skip)]
                        b: String,
                    }
                ),
                "`#[serde(skip)]` is not supported",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key)]
                        #[serde(rename = "x")]
                        a: i64,
                    }
                ),
                "no effect on a key field",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    #[serde(tag = "t")]
                    struct N {
                        #[queue(key)]
                        a: i64,
                    }
                ),
                "`#[serde(tag)]` is not supported on the struct",
            ),
            (
                parse_quote!(
                    #[queue(name = "Q")]
                    struct N {
                        #[queue(key)]
                        a: i64,
                        #[queue(desc)]
                        b: String,
                    }
                ),
                "`desc` applies to key fields only",
            ),
        ];
        for (input, expected) in cases {
            let errors = error_messages(input);
            assert!(
                errors.iter().any(|m| m.contains(expected)),
                "expected {expected:?}, got {errors:#?}"
            );
        }
    }

    #[test]
    fn accepts_supported_key_types_and_serde_forwarding() {
        let out = expand(parse_quote! {
            #[queue(name = "Q")]
            #[serde(rename_all = "camelCase")]
            struct N {
                #[queue(key)] a: Vec<u8>,
                #[queue(key)] b: time::OffsetDateTime,
                #[serde(rename = "x", default)] first_name: Option<String>,
            }
        })
        .expect("expands");
        assert!(
            out.contains("# [serde (rename = \"x\" , default)]"),
            "{out}"
        );
        assert!(
            out.contains("# [serde (rename_all = \"camelCase\")]"),
            "{out}"
        );
    }

    #[test]
    fn identifier_problem_macro() {
        let ok = identifier_problem(quote!(queue "Orders"))
            .expect("parses")
            .to_string();
        assert_eq!(ok, "\"ok\"");
        let bad = identifier_problem(quote!(column "Payload"))
            .expect("parses")
            .to_string();
        assert_eq!(bad, "\"reserved_for_system\"");
        assert!(identifier_problem(quote!(table "x")).is_err());
    }
}
