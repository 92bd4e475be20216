//! SQL the reading commands share: any column as text.

use google_cloud_spanner::value::Value;
use spanner_queues::schema::SpannerType;

use crate::times::millis;

/// A GoogleSQL expression giving column `name` of type `ty` as text.
pub(crate) fn as_text(name: &str, ty: &SpannerType) -> String {
    match ty {
        SpannerType::String(_) => name.to_owned(),
        SpannerType::Json => format!("TO_JSON_STRING({name})"),
        SpannerType::Bytes(_) => format!("CONCAT('base64:', TO_BASE64({name}))"),
        SpannerType::Timestamp => {
            format!("FORMAT_TIMESTAMP('%Y-%m-%dT%H:%M:%E*SZ', {name}, 'UTC')")
        }
        SpannerType::Int64
        | SpannerType::Bool
        | SpannerType::Float64
        | SpannerType::Numeric
        | SpannerType::Date => format!("CAST({name} AS STRING)"),
        // PROTO and anything else: the bytes.
        _ => format!("CONCAT('base64:', TO_BASE64(CAST({name} AS BYTES)))"),
    }
}

/// A value read as it is, as text, for a column of type `ty`: the wire form of most types is
/// their text already; bytes get a `base64:` prefix, as in GoogleSQL's peek.
pub(crate) fn value_text(value: &Value, ty: &SpannerType) -> Option<String> {
    if value.is_null() {
        return Some("NULL".to_owned());
    }
    match ty {
        SpannerType::Bytes(_) => return value.as_str().map(|b| format!("base64:{b}")),
        SpannerType::Timestamp => return value.as_str().map(millis),
        _ => {}
    }
    if let Some(text) = value.as_str() {
        return Some(text.to_owned());
    }
    if let Some(b) = value.as_bool() {
        return Some(b.to_string());
    }
    value.as_f64().map(|f| f.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use spanner_queues::schema::Length;

    #[test]
    fn bytes_read_as_base64_text() {
        assert_eq!(
            value_text(
                &Value::from("AAE=".to_owned()),
                &SpannerType::Bytes(Length::Max)
            )
            .as_deref(),
            Some("base64:AAE=")
        );
    }
}
