//! `RECEIVE_<Q>` (a long-running stream of leased messages) and `RENEWLEASE_<Q>`.

mod candidates;
mod renew;
mod stream;

use std::time::{Duration, SystemTime};

use tonic::Status;

use self::candidates::Source;
use super::lease::LeasePolicy;
use super::proto::spanner::struct_type::Field;
use super::proto::spanner::transaction_options::read_only::TimestampBound;
use super::proto::spanner::transaction_options::{Mode, ReadOnly};
use super::proto::spanner::transaction_selector::Selector;
use super::proto::spanner::{
    ExecuteSqlRequest, KeySet, ReadRequest, ResultSet, TransactionOptions, TransactionSelector,
    Type, TypeCode,
};
use super::proto::{Kind, ListValue, Value};
use super::reads::backend_read_rows;
use super::rpc::sql_status;
use super::shared::Shared;
use super::state::DbState;
use crate::ddl::{Catalog, DELIVER_TIME_COLUMN, MESSAGE_ID_COLUMN, QueueDef};
use crate::sql::{ArgValue, Projection, parse_duration};
use spanner_queues_sql::Dialect;

pub(crate) use renew::renew;
pub(crate) use stream::receive;

/// The SQL type of lease tokens. [?] STRING per the GoogleSQL docs (the Go sample scans the
/// token into a `string`); a pre-GA C++ test reads BYTES. Change it here only.
const LEASE_TOKEN_TYPE: TypeCode = TypeCode::String;

/// `max_duration` when the query omits it. [?] Not documented; the docs recommend about 20 min.
const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(20 * 60);

/// `max_batch_size` when the query omits it. [?] Not documented: every message is its own
/// batch, so `SpannerLastBatchMessage` is TRUE on every row.
const DEFAULT_BATCH_SIZE: usize = 1;

/// How long a message a stream sent counts against its limit of unsettled messages while the
/// client has not yet acked, renewed or released any message of the stream, as a fraction of
/// the lease: a client that reads rows without acting on their leases (a console, a test that
/// only looks) gets its next batch after this, not after a whole lease. Once the client has
/// acted on a message, the stream waits for real evidence (ack, renewal, release, expiry).
/// [I] Cloud Spanner's pacing of RECEIVE streams is not documented: change it here.
const UNACTED_SETTLE_FRACTION: u32 = 10;

/// The largest TIMESTAMP: the end of a due-index range.
const MAX_TIMESTAMP: &str = "9999-12-31T23:59:59.999999999Z";

/// Longest idle wait without re-reading (a safety net: every commit wakes receivers anyway).
const MAX_IDLE_WAIT: Duration = Duration::from_secs(30);

const LEASE_EXPIRATION: &str = "SpannerLeaseExpirationTimestamp";

const LEASE_TOKEN: &str = "SpannerLeaseToken";

const LAST_BATCH_MESSAGE: &str = "SpannerLastBatchMessage";

const OLD_LEASE_TOKEN: &str = "SpannerOldLeaseToken";

const NEW_LEASE_TOKEN: &str = "SpannerNewLeaseToken";

/// The output column names of the queue functions in a dialect's spelling: lease expiration,
/// lease token, last batch message, old lease token, new lease token.
fn output_names(dialect: Dialect) -> [&'static str; 5] {
    match dialect {
        Dialect::GoogleSql => [
            LEASE_EXPIRATION,
            LEASE_TOKEN,
            LAST_BATCH_MESSAGE,
            OLD_LEASE_TOKEN,
            NEW_LEASE_TOKEN,
        ],
        Dialect::PostgreSql => [
            "spanner_lease_expiration_timestamp",
            "spanner_lease_token",
            "spanner_last_batch_message",
            "spanner_old_lease_token",
            "spanner_new_lease_token",
        ],
    }
}

/// The name of a query parameter the front adds after the client's: `sqe_<name>` in
/// GoogleSQL; in PostgreSQL the next free `$n` (`p<n>` in the request), `offset` past the
/// client's highest.
fn front_param(
    dialect: Dialect,
    request: &ExecuteSqlRequest,
    name: &str,
    offset: usize,
) -> (String, String) {
    match dialect {
        Dialect::GoogleSql => (format!("sqe_{name}"), format!("@sqe_{name}")),
        Dialect::PostgreSql => {
            let highest = request
                .params
                .iter()
                .flat_map(|p| p.fields.keys())
                .chain(request.param_types.keys())
                .filter_map(|k| k.strip_prefix('p').and_then(|n| n.parse::<usize>().ok()))
                .max()
                .unwrap_or(0);
            let n = highest + offset;
            (format!("p{n}"), format!("${n}"))
        }
    }
}

fn policy(shared: &Shared) -> LeasePolicy {
    LeasePolicy {
        lease: shared.config.lease_duration,
        ..LeasePolicy::default()
    }
}

fn scalar(code: TypeCode) -> Type {
    Type {
        code: code as i32,
        ..Type::default()
    }
}

fn field(name: &str, code: TypeCode) -> Field {
    Field {
        name: name.to_owned(),
        r#type: Some(scalar(code)),
    }
}

/// RECEIVE and RENEWLEASE must run as strong single-use read-only queries.
fn check_transaction(function: &str, selector: Option<&TransactionSelector>) -> Result<(), Status> {
    let Some(selector) = selector.and_then(|s| s.selector.as_ref()) else {
        return Ok(()); // No transaction: a single-use strong read.
    };
    let bad = |what: &str| {
        Err(Status::invalid_argument(format!(
            "{function} must be executed in a strong, single-use, read-only transaction \
             (got {what})"
        )))
    };
    match selector {
        Selector::SingleUse(TransactionOptions {
            mode: Some(Mode::ReadOnly(ReadOnly {
                timestamp_bound, ..
            })),
            ..
        }) => match timestamp_bound {
            None | Some(TimestampBound::Strong(_)) => Ok(()),
            Some(_) => Err(Status::invalid_argument(format!(
                "{function} requires a strong read: Spanner rejects stale reads of queues"
            ))),
        },
        Selector::SingleUse(_) => bad("a single-use read-write or partitioned DML transaction"),
        Selector::Begin(_) => bad("a transaction begun by this query"),
        Selector::Id(_) => bad("a multi-use transaction"),
    }
}

fn queue<'a>(catalog: &'a Catalog, function: &str, name: &str) -> Result<&'a QueueDef, Status> {
    catalog.queue(name).ok_or_else(|| {
        Status::invalid_argument(format!("Table-valued function not found: {function}"))
    })
}

fn param<'a>(request: &'a ExecuteSqlRequest, name: &str) -> Result<&'a Value, Status> {
    request
        .params
        .as_ref()
        .and_then(|p| p.fields.get(name))
        .ok_or_else(|| Status::invalid_argument(format!("No value found for parameter @{name}")))
}

fn param_string(request: &ExecuteSqlRequest, name: &str) -> Result<Option<String>, Status> {
    match &param(request, name)?.kind {
        Some(Kind::StringValue(s)) => Ok(Some(s.clone())),
        Some(Kind::NullValue(_)) | None => Ok(None),
        Some(Kind::NumberValue(n)) => Ok(Some(n.to_string())),
        _ => Err(Status::invalid_argument(format!(
            "Parameter @{name} must be a string"
        ))),
    }
}

fn resolve_duration(
    request: &ExecuteSqlRequest,
    arg: Option<&ArgValue<Duration>>,
) -> Result<Duration, Status> {
    match arg {
        None => Ok(DEFAULT_MAX_DURATION),
        Some(ArgValue::Literal(d)) => Ok(*d),
        Some(ArgValue::Param(name)) => match param_string(request, name)? {
            None => Ok(DEFAULT_MAX_DURATION),
            Some(text) => parse_duration(&text).map_err(sql_status),
        },
    }
}

fn resolve_batch_size(
    request: &ExecuteSqlRequest,
    arg: Option<&ArgValue<i64>>,
) -> Result<usize, Status> {
    let value = match arg {
        None => return Ok(DEFAULT_BATCH_SIZE),
        Some(ArgValue::Literal(n)) => *n,
        Some(ArgValue::Param(name)) => match param_string(request, name)? {
            None => return Ok(DEFAULT_BATCH_SIZE),
            Some(text) => text.parse::<i64>().map_err(|_| {
                Status::invalid_argument(format!("max_batch_size must be an INT64, got {text}"))
            })?,
        },
    };
    usize::try_from(value)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            Status::invalid_argument(format!("max_batch_size must be positive, got {value}"))
        })
}

/// Reads the message id of the rows of `table` at `key_set`.
async fn backend_read_keys(
    shared: &Shared,
    state: &DbState,
    table: &str,
    key_set: KeySet,
) -> Result<ResultSet, Status> {
    let read = ReadRequest {
        table: table.to_owned(),
        columns: vec![MESSAGE_ID_COLUMN.to_owned()],
        key_set: Some(key_set),
        ..ReadRequest::default()
    };
    backend_read_rows(shared, state, read).await
}

fn string_at(row: &ListValue, index: usize) -> Option<&str> {
    match row.values.get(index).and_then(|v| v.kind.as_ref()) {
        Some(Kind::StringValue(s)) => Some(s),
        _ => None,
    }
}

fn parse_timestamp(text: &str) -> Option<SystemTime> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(SystemTime::from)
}

fn receive_projection(
    function: &str,
    projection: &Projection,
    backend: &[Field],
    hidden: usize,
    dialect: Dialect,
) -> Result<(Vec<Field>, Vec<Source>), Status> {
    let [lease_expiration, lease_token, last_batch_message, _, _] = output_names(dialect);
    // The backend row: `*` (visible user columns and DeliverTime), the HIDDEN user columns,
    // then the message id.
    let user_count = backend.len().saturating_sub(1);
    let visible_count = user_count.saturating_sub(hidden);
    let synthetic = [
        (
            lease_expiration,
            TypeCode::Timestamp,
            Source::LeaseExpiration,
        ),
        (lease_token, LEASE_TOKEN_TYPE, Source::LeaseToken),
        (last_batch_message, TypeCode::Bool, Source::LastBatch),
    ];
    let mut fields = Vec::new();
    let mut sources = Vec::new();
    match projection {
        Projection::All => {
            for (i, f) in backend.iter().take(visible_count).enumerate() {
                fields.push(f.clone());
                sources.push(Source::Backend(i));
            }
            for (name, code, source) in synthetic {
                fields.push(field(name, code));
                sources.push(source);
            }
        }
        Projection::Columns(names) => {
            for name in names {
                // PostgreSQL databases also name the delivery time `DeliverTime` [C].
                let alias = dialect == Dialect::PostgreSql && name == DELIVER_TIME_COLUMN;
                if let Some(i) = backend.iter().take(user_count).position(|f| {
                    f.name.eq_ignore_ascii_case(name)
                        || alias && f.name == crate::ddl::PG_DELIVER_TIME_COLUMN
                }) {
                    let mut f = backend[i].clone();
                    if alias {
                        f.name = DELIVER_TIME_COLUMN.to_owned();
                    }
                    fields.push(f);
                    sources.push(Source::Backend(i));
                } else if let Some((n, code, source)) = synthetic
                    .iter()
                    .find(|(n, _, _)| n.eq_ignore_ascii_case(name))
                {
                    fields.push(field(n, *code));
                    sources.push(*source);
                } else {
                    return Err(Status::invalid_argument(format!(
                        "Unrecognized name: {name} (in the output of {function})"
                    )));
                }
            }
        }
    }
    Ok((fields, sources))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_and_read_write_transactions_are_refused() {
        let strong = TransactionSelector {
            selector: Some(Selector::SingleUse(TransactionOptions {
                mode: Some(Mode::ReadOnly(ReadOnly {
                    return_read_timestamp: false,
                    timestamp_bound: Some(TimestampBound::Strong(true)),
                })),
                ..TransactionOptions::default()
            })),
        };
        assert!(check_transaction("RECEIVE_Q", Some(&strong)).is_ok());
        assert!(check_transaction("RECEIVE_Q", None).is_ok());
        let stale = TransactionSelector {
            selector: Some(Selector::SingleUse(TransactionOptions {
                mode: Some(Mode::ReadOnly(ReadOnly {
                    return_read_timestamp: false,
                    timestamp_bound: Some(TimestampBound::ExactStaleness(prost_types::Duration {
                        seconds: 10,
                        nanos: 0,
                    })),
                })),
                ..TransactionOptions::default()
            })),
        };
        let err = check_transaction("RECEIVE_Q", Some(&stale)).unwrap_err();
        assert!(err.message().contains("stale"), "{err}");
        let id = TransactionSelector {
            selector: Some(Selector::Id(bytes::Bytes::from_static(b"tx"))),
        };
        assert_eq!(
            check_transaction("RECEIVE_Q", Some(&id))
                .unwrap_err()
                .code(),
            tonic::Code::InvalidArgument
        );
    }
}
