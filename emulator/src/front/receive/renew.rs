//! `RENEWLEASE_<Q>`: extends the leases of messages a receive stream sent.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use tonic::Status;

use super::{
    LEASE_TOKEN_TYPE, check_transaction, field, output_names, param, param_string, policy, queue,
    scalar, string_at,
};
use crate::ddl::{Catalog, MESSAGE_ID_COLUMN};
use crate::front::proto::spanner::{
    ExecuteSqlRequest, ResultSet, ResultSetMetadata, StructType, Type, TypeCode,
};
use crate::front::proto::{Kind, ListValue, Value, null_value, string_value, timestamp_string};
use crate::front::reads::{FrontRead, backend_read};
use crate::front::shared::Shared;
use crate::front::state::DbState;
use crate::front::sync::lock;
use crate::sql::{ArgValue, Projection, RenewQuery, TokensArg};
use spanner_queues_sql::Dialect;

/// Serves `RENEWLEASE_<Q>`.
pub(crate) async fn renew(
    shared: &Shared,
    state: &DbState,
    catalog: &Catalog,
    query: &RenewQuery,
    request: &ExecuteSqlRequest,
) -> Result<ResultSet, Status> {
    let function = match catalog.queue(&query.queue).map(|q| q.dialect) {
        Some(Dialect::PostgreSql) => format!("spanner.renewlease_{}", query.queue),
        _ => format!("RENEWLEASE_{}", query.queue),
    };
    check_transaction(&function, request.transaction.as_ref())?;
    let queue = queue(catalog, &function, &query.queue)?;
    let tokens = resolve_tokens(request, &query.tokens)?;
    let policy = policy(shared);

    // Which tokens are live, and for which messages.
    let now = SystemTime::now();
    let live: Vec<(String, Option<String>)> = {
        let leases = lock(&state.leases);
        tokens
            .into_iter()
            .map(|token| {
                let id = match leases.check(&queue.name, &token, now) {
                    crate::front::lease::Renewal::Live { message_id } => Some(message_id),
                    crate::front::lease::Renewal::NoRow => None,
                };
                (token, id)
            })
            .collect()
    };
    // One backend read tells which of those messages still exist (not acked).
    let ids: Vec<String> = live.iter().filter_map(|(_, id)| id.clone()).collect();
    let existing: HashSet<String> = if ids.is_empty() {
        HashSet::new()
    } else {
        let id = queue.quote(MESSAGE_ID_COLUMN);
        let (ids_name, sql) = match queue.dialect {
            Dialect::GoogleSql => (
                "sqe_ids",
                format!(
                    "SELECT {id} FROM {} WHERE {id} IN UNNEST(@sqe_ids)",
                    queue.quoted_name()
                ),
            ),
            Dialect::PostgreSql => (
                "p1",
                format!(
                    "SELECT {id} FROM {} WHERE {id} = ANY($1)",
                    queue.quoted_name()
                ),
            ),
        };
        let mut params = prost_types::Struct::default();
        params.fields.insert(
            ids_name.into(),
            Value {
                kind: Some(Kind::ListValue(ListValue {
                    values: ids.into_iter().map(string_value).collect(),
                })),
            },
        );
        let types = HashMap::from([(
            ids_name.to_owned(),
            Type {
                code: TypeCode::Array as i32,
                array_element_type: Some(Box::new(scalar(TypeCode::String))),
                ..Type::default()
            },
        )]);
        backend_read(shared, state, FrontRead::Locking, sql, params, types)
            .await?
            .rows
            .iter()
            .filter_map(|row| string_at(row, 0).map(str::to_owned))
            .collect()
    };

    let now = SystemTime::now();
    let mut rows = Vec::new();
    {
        let mut leases = lock(&state.leases);
        for (token, id) in live {
            let Some(id) = id else { continue };
            if existing.contains(&id) {
                if let Some(granted) = leases.renew(&queue.name, &token, &policy, now) {
                    rows.push((token, Some(granted.token), granted.expires_at));
                }
            } else if let Some(expires_at) = leases.expiry(&token) {
                // Acked while the lease was live: not renewable.
                rows.push((token, None, expires_at));
            }
        }
    }
    tracing::debug!(
        database = %state.name,
        queue = %queue.name,
        renewed = rows.iter().filter(|r| r.1.is_some()).count(),
        "renew lease"
    );
    if rows.iter().any(|r| r.1.is_some()) {
        // Receive streams that sent these messages may lease more now.
        state.notify_settled();
    }

    let [lease_expiration, _, _, old_lease_token, new_lease_token] = output_names(queue.dialect);
    let all = [
        (old_lease_token, LEASE_TOKEN_TYPE),
        (new_lease_token, LEASE_TOKEN_TYPE),
        (lease_expiration, TypeCode::Timestamp),
    ];
    let columns: Vec<usize> = match &query.projection {
        Projection::All => vec![0, 1, 2],
        Projection::Columns(names) => names
            .iter()
            .map(|name| {
                all.iter()
                    .position(|(n, _)| n.eq_ignore_ascii_case(name))
                    .ok_or_else(|| {
                        Status::invalid_argument(format!(
                            "Unrecognized name: {name} (in the output of {function})"
                        ))
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    let fields = columns.iter().map(|&i| field(all[i].0, all[i].1)).collect();
    let rows = rows
        .into_iter()
        .map(|(old, new, expires_at)| {
            let cells = [
                string_value(old),
                new.map_or_else(null_value, string_value),
                string_value(timestamp_string(expires_at)),
            ];
            ListValue {
                values: columns.iter().map(|&i| cells[i].clone()).collect(),
            }
        })
        .collect();
    Ok(ResultSet {
        metadata: Some(ResultSetMetadata {
            row_type: Some(StructType { fields }),
            ..ResultSetMetadata::default()
        }),
        rows,
        ..ResultSet::default()
    })
}

fn resolve_tokens(request: &ExecuteSqlRequest, arg: &TokensArg) -> Result<Vec<String>, Status> {
    let one = |name: &str| -> Result<Option<String>, Status> { param_string(request, name) };
    Ok(match arg {
        TokensArg::Literals(tokens) => tokens.clone(),
        TokensArg::Params(names) => names
            .iter()
            .map(|n| one(n))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .collect(),
        TokensArg::Mixed(items) => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    ArgValue::Literal(token) => out.push(token.clone()),
                    ArgValue::Param(name) => out.extend(one(name)?),
                }
            }
            out
        }
        TokensArg::Param(name) => match &param(request, name)?.kind {
            Some(Kind::ListValue(list)) => list
                .values
                .iter()
                .filter_map(|v| match &v.kind {
                    Some(Kind::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .collect(),
            Some(Kind::NullValue(_)) | None => Vec::new(),
            _ => {
                return Err(Status::invalid_argument(format!(
                    "Parameter @{name} must be an ARRAY<STRING> of lease tokens"
                )));
            }
        },
    })
}
