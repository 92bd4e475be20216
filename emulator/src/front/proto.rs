//! Short paths to the generated protobuf types.

pub(crate) mod spanner {
    pub(crate) use googleapis_tonic_google_spanner_v1::google::spanner::v1::*;
}

pub(crate) mod admin {
    pub(crate) use googleapis_tonic_google_spanner_admin_database_v1::google::spanner::admin::database::v1::*;
}

pub(crate) mod longrunning {
    pub(crate) use googleapis_tonic_google_spanner_admin_database_v1::google::longrunning::*;
}

pub(crate) use prost_types::value::Kind;
pub(crate) use prost_types::{ListValue, Value};

/// A string `Value`.
pub(crate) fn string_value(s: impl Into<String>) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

/// A bool `Value`.
pub(crate) fn bool_value(b: bool) -> Value {
    Value {
        kind: Some(Kind::BoolValue(b)),
    }
}

/// A NULL `Value`.
pub(crate) fn null_value() -> Value {
    Value {
        kind: Some(Kind::NullValue(0)),
    }
}

/// Formats a time as Spanner's TIMESTAMP wire format (RFC 3339, UTC, `Z`).
pub(crate) fn timestamp_string(t: std::time::SystemTime) -> String {
    let odt = time::OffsetDateTime::from(t);
    odt.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

/// Converts a protobuf `Timestamp` to `SystemTime` (saturating at the epoch).
pub(crate) fn system_time(ts: &prost_types::Timestamp) -> std::time::SystemTime {
    let nanos = i128::from(ts.seconds) * 1_000_000_000 + i128::from(ts.nanos);
    if nanos <= 0 {
        return std::time::UNIX_EPOCH;
    }
    std::time::UNIX_EPOCH
        + std::time::Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}
