//! Compile-time copy of Spanner's identifier rules.
//!
//! This mirrors `spanner_queues::ident::check_identifier` (a proc-macro crate cannot depend on
//! the crate it generates code for). `spanner-queues/tests/derive.rs` runs both over the same
//! names through the hidden `__identifier_problem!` macro, so the copies cannot drift apart
//! unnoticed.

/// Longest identifier Spanner accepts.
pub(crate) const MAX_IDENTIFIER_LEN: usize = 128;
/// Longest queue name: `RENEWLEASE_<queue>` must fit in [`MAX_IDENTIFIER_LEN`].
pub(crate) const MAX_QUEUE_NAME_LEN: usize = MAX_IDENTIFIER_LEN - "RENEWLEASE_".len();

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Queue,
    Column,
}

/// Checks `name`; on failure returns the stable problem code (the same codes as
/// `spanner_queues::ident::IdentifierProblem::code`) and a human explanation.
pub(crate) fn check(kind: Kind, name: &str) -> Result<(), (&'static str, String)> {
    let bytes = name.as_bytes();
    let Some(first) = bytes.first() else {
        return Err(("empty", "the name is empty".to_owned()));
    };
    let max = match kind {
        Kind::Queue => MAX_QUEUE_NAME_LEN,
        Kind::Column => MAX_IDENTIFIER_LEN,
    };
    if bytes.len() > max {
        let why = match kind {
            Kind::Queue => format!(
                "a queue name has at most {MAX_QUEUE_NAME_LEN} characters, so that `RENEWLEASE_<queue>` fits in {MAX_IDENTIFIER_LEN}"
            ),
            Kind::Column => format!("a name has at most {MAX_IDENTIFIER_LEN} characters"),
        };
        return Err(("too_long", why));
    }
    if !first.is_ascii_alphabetic() {
        return Err((
            "invalid_start",
            "a Spanner name must start with an ASCII letter".to_owned(),
        ));
    }
    if !bytes[1..]
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        return Err((
            "invalid_character",
            "a Spanner name may contain only ASCII letters, digits and underscores".to_owned(),
        ));
    }
    if kind == Kind::Column {
        let lower = name.to_ascii_lowercase();
        if lower == "payload"
            || lower == "delivertime"
            || lower == "deliver_time"
            || lower.starts_with("spanner")
        {
            return Err((
                "reserved_for_system",
                "`Payload`, `DeliverTime` and names starting with `Spanner` are reserved for Spanner's own columns".to_owned(),
            ));
        }
    }
    Ok(())
}

/// `order_id` → `OrderId`, `r#type` → `Type`, `email2_id` → `Email2Id`.
pub(crate) fn upper_camel_case(field: &str) -> String {
    let field = field.strip_prefix("r#").unwrap_or(field);
    let mut out = String::with_capacity(field.len());
    for part in field.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case() {
        assert_eq!(upper_camel_case("order_id"), "OrderId");
        assert_eq!(upper_camel_case("id"), "Id");
        assert_eq!(upper_camel_case("r#type"), "Type");
        assert_eq!(upper_camel_case("_private__x"), "PrivateX");
        assert_eq!(upper_camel_case("email2_id"), "Email2Id");
        assert_eq!(upper_camel_case("alreadyCamel"), "AlreadyCamel");
    }

    #[test]
    fn rules() {
        assert!(check(Kind::Queue, "OrderEmails").is_ok());
        assert_eq!(check(Kind::Queue, "").map_err(|e| e.0), Err("empty"));
        assert_eq!(
            check(Kind::Queue, "9x").map_err(|e| e.0),
            Err("invalid_start")
        );
        assert_eq!(
            check(Kind::Queue, "a-b").map_err(|e| e.0),
            Err("invalid_character")
        );
        assert_eq!(
            check(Kind::Queue, &"q".repeat(MAX_QUEUE_NAME_LEN + 1)).map_err(|e| e.0),
            Err("too_long")
        );
        assert!(check(Kind::Column, &"q".repeat(MAX_QUEUE_NAME_LEN + 1)).is_ok());
        assert_eq!(
            check(Kind::Column, "payload").map_err(|e| e.0),
            Err("reserved_for_system")
        );
        assert!(check(Kind::Queue, "Payload").is_ok());
    }
}
