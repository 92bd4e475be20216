//! The query a receive stream reads its candidate messages with.

use std::collections::HashMap;

use super::{front_param, scalar};
use crate::ddl::{MESSAGE_ID_COLUMN, QueueDef};
use crate::front::proto::spanner::{ExecuteSqlRequest, Type, TypeCode};
use crate::front::proto::{Kind, ListValue, Value, string_value};
use spanner_queues_sql::Dialect;

/// Where an output column of RECEIVE comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source {
    Backend(usize),
    LeaseExpiration,
    LeaseToken,
    LastBatch,
}

/// The backend read that finds deliverable messages.
pub(super) struct CandidateQuery {
    pub(super) sql: String,
    /// The same query with a limit of 0 (reads only the column metadata).
    pub(super) probe_sql: String,
    params: prost_types::Struct,
    param_types: HashMap<String, Type>,
    /// The request names of the exclusion list and limit parameters.
    excluded_param: String,
    limit_param: String,
}

impl CandidateQuery {
    pub(super) fn new(queue: &QueueDef, filter: Option<&str>, request: &ExecuteSqlRequest) -> Self {
        let table = queue.quoted_name();
        let deliver = queue.quote(queue.deliver_time_column());
        let id = queue.quote(MESSAGE_ID_COLUMN);
        let filter = filter.map(|f| format!(" AND ({f})")).unwrap_or_default();
        let (excluded_param, excluded) = front_param(queue.dialect, request, "excluded", 1);
        let (limit_param, limit) = front_param(queue.dialect, request, "limit", 2);
        // Messages not yet due come back too (after the due ones): the first of them tells when
        // to look again, so an idle receiver needs no second scan. Every scan of a queue table
        // costs more the more messages it ever held (the official emulator keeps deleted rows'
        // versions), so the receive loop scans as little as it can.
        let (head, tail) = match queue.dialect {
            Dialect::GoogleSql => {
                // `*` leaves out HIDDEN user columns; they follow it, so that they can be
                // selected by name (a hidden key column is needed to ack; a hidden payload is
                // the message).
                let hidden: String = hidden_user_columns(queue)
                    .map(|name| format!("{}, ", queue.quote(name)))
                    .collect();
                (
                    format!(
                        "SELECT *, {hidden}{id} FROM {table} WHERE {id} NOT IN UNNEST({excluded})\
                         {filter} ORDER BY {deliver} LIMIT "
                    ),
                    limit,
                )
            }
            Dialect::PostgreSql => {
                // PostgreSQL has no HIDDEN columns, and `*` would include the internal ones:
                // the declared columns and deliver_time, by name.
                let columns: String = queue
                    .declared_columns()
                    .map(|c| format!("{}, ", queue.quote(&c.name)))
                    .collect();
                (
                    format!(
                        "SELECT {columns}{deliver}, {id} FROM {table} WHERE NOT ({id} = \
                         ANY({excluded})){filter} ORDER BY {deliver} LIMIT "
                    ),
                    limit,
                )
            }
        };
        Self {
            sql: format!("{head}{tail}"),
            probe_sql: format!("{head}0"),
            params: request.params.clone().unwrap_or_default(),
            param_types: request.param_types.clone(),
            excluded_param,
            limit_param,
        }
    }

    /// The client's parameters (a filter may use them) plus the exclusion list and the limit.
    pub(super) fn params(
        &self,
        excluded: Vec<String>,
        limit: usize,
    ) -> (prost_types::Struct, HashMap<String, Type>) {
        let mut params = self.params.clone();
        let mut types = self.param_types.clone();
        params.fields.insert(
            self.excluded_param.clone(),
            Value {
                kind: Some(Kind::ListValue(ListValue {
                    values: excluded.into_iter().map(string_value).collect(),
                })),
            },
        );
        types.insert(
            self.excluded_param.clone(),
            Type {
                code: TypeCode::Array as i32,
                array_element_type: Some(Box::new(scalar(TypeCode::String))),
                ..Type::default()
            },
        );
        params
            .fields
            .insert(self.limit_param.clone(), string_value(limit.to_string()));
        types.insert(self.limit_param.clone(), scalar(TypeCode::Int64));
        (params, types)
    }
}

/// The queue's HIDDEN key and payload columns.
pub(super) fn hidden_user_columns(queue: &QueueDef) -> impl Iterator<Item = &str> {
    queue
        .key_columns
        .iter()
        .map(|k| &k.column)
        .chain(std::iter::once(&queue.payload.column))
        .filter(|c| c.hidden)
        .map(|c| c.name.as_str())
}
