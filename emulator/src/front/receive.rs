//! `RECEIVE_<Q>` (a long-running stream of leased messages) and `RENEWLEASE_<Q>`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tonic::Status;

use super::lease::{Granted, LeasePolicy, Standing};
use super::proto::spanner::key_range::{EndKeyType, StartKeyType};
use super::proto::spanner::struct_type::Field;
use super::proto::spanner::transaction_options::read_only::TimestampBound;
use super::proto::spanner::transaction_options::{Mode, ReadOnly};
use super::proto::spanner::transaction_selector::Selector;
use super::proto::spanner::{
    ExecuteSqlRequest, KeyRange, KeySet, PartialResultSet, ReadRequest, ResultSet,
    ResultSetMetadata, StructType, TransactionOptions, TransactionSelector, Type, TypeCode,
};
use super::proto::{
    Kind, ListValue, Value, bool_value, null_value, string_value, timestamp_string,
};
use super::reads::{FrontRead, backend_read, backend_read_rows};
use super::rpc::{BoxStream, sql_status};
use super::shared::Shared;
use super::state::DbState;
use super::sync::lock;
use crate::ddl::{Catalog, DELIVER_TIME_COLUMN, MESSAGE_ID_COLUMN, QueueDef};
use crate::lexer::Dialect;
use crate::sql::{ArgValue, Projection, ReceiveQuery, RenewQuery, TokensArg, parse_duration};

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

/// Where an output column of RECEIVE comes from.
#[derive(Debug, Clone, Copy)]
enum Source {
    Backend(usize),
    LeaseExpiration,
    LeaseToken,
    LastBatch,
}

/// The backend read that finds deliverable messages.
struct CandidateQuery {
    sql: String,
    /// The same query with a limit of 0 (reads only the column metadata).
    probe_sql: String,
    params: prost_types::Struct,
    param_types: HashMap<String, Type>,
    /// The request names of the exclusion list and limit parameters.
    excluded_param: String,
    limit_param: String,
}

impl CandidateQuery {
    fn new(queue: &QueueDef, filter: Option<&str>, request: &ExecuteSqlRequest) -> Self {
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
    fn params(
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
fn hidden_user_columns(queue: &QueueDef) -> impl Iterator<Item = &str> {
    queue
        .key_columns
        .iter()
        .map(|k| &k.column)
        .chain(std::iter::once(&queue.payload.column))
        .filter(|c| c.hidden)
        .map(|c| c.name.as_str())
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

/// Starts a `RECEIVE_<Q>` stream.
pub(crate) async fn receive(
    shared: Arc<Shared>,
    state: Arc<DbState>,
    catalog: Arc<Catalog>,
    query: ReceiveQuery,
    request: ExecuteSqlRequest,
) -> Result<BoxStream<PartialResultSet>, Status> {
    let function = match catalog.queue(&query.queue).map(|q| q.dialect) {
        Some(Dialect::PostgreSql) => format!("spanner.receive_{}", query.queue),
        _ => format!("RECEIVE_{}", query.queue),
    };
    check_transaction(&function, request.transaction.as_ref())?;
    let queue = queue(&catalog, &function, &query.queue)?.clone();
    let max_duration = resolve_duration(&request, query.max_duration.as_ref())?;
    let batch_size = resolve_batch_size(&request, query.max_batch_size.as_ref())?;
    let candidates = CandidateQuery::new(&queue, query.filter.as_deref(), &request);

    // A first read gives the backend's column metadata (and validates any filter).
    let (params, types) = candidates.params(Vec::new(), 0);
    let probe = backend_read(
        &shared,
        &state,
        FrontRead::Locking,
        candidates.probe_sql.clone(),
        params,
        types,
    )
    .await?;
    let backend_fields = probe
        .metadata
        .and_then(|m| m.row_type)
        .map(|t| t.fields)
        .unwrap_or_default();
    let hidden = hidden_user_columns(&queue).count();
    let (fields, sources) = receive_projection(
        &function,
        &query.projection,
        &backend_fields,
        hidden,
        queue.dialect,
    )?;
    let id_index = backend_fields.len().saturating_sub(1);
    let deliver_index = backend_fields
        .iter()
        .position(|f| f.name.eq_ignore_ascii_case(queue.deliver_time_column()))
        .ok_or_else(|| Status::internal("queue table without its delivery time column"))?;
    let key_indexes = queue
        .key_columns
        .iter()
        .map(|k| {
            backend_fields
                .iter()
                .position(|f| f.name.eq_ignore_ascii_case(&k.column.name))
                .ok_or_else(|| Status::internal(format!("queue table without {}", k.column.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;

    // Without a filter, candidates come from the queue's due index, from the queue's floor
    // on (see `floor`), instead of a scan of the table.
    let indexed = queue
        .due_index()
        .filter(|_| queue.has_due_index && query.filter.is_none())
        .map(|index| Indexed {
            index,
            columns: backend_fields.iter().map(|f| f.name.clone()).collect(),
        });

    let metadata = ResultSetMetadata {
        row_type: Some(StructType { fields }),
        ..ResultSetMetadata::default()
    };
    // One message of slack: a batch is leased just before the transport can take it.
    let (tx, rx) = mpsc::channel::<Outgoing>(1);
    let unsent = Unsent {
        rx,
        state: Arc::clone(&state),
        queue: queue.name.clone(),
    };
    let receiver = Receiver {
        shared,
        state,
        queue,
        candidates,
        indexed,
        sources,
        id_index,
        deliver_index,
        key_indexes,
        batch_size,
        deadline: tokio::time::Instant::now() + max_duration,
        tx,
        sent: std::sync::atomic::AtomicU64::new(0),
    };
    tracing::debug!(
        database = %receiver.state.name,
        queue = %receiver.queue.name,
        ?max_duration,
        batch_size,
        "receive started"
    );
    tokio::spawn(receiver.run(metadata));
    Ok(Box::pin(unsent))
}

/// One message of a receive stream, with the leases of the rows it carries.
struct Outgoing {
    message: Result<PartialResultSet, Status>,
    /// (message id, token) of every row in `message`.
    leases: Vec<(String, String)>,
}

/// The response stream of a `RECEIVE`: what the serving task queued, handed to the transport as
/// it asks. Dropped (the call ended or the client went away), it gives back the leases of the
/// rows still queued, which no client can have read.
struct Unsent {
    rx: mpsc::Receiver<Outgoing>,
    state: Arc<DbState>,
    queue: String,
}

impl futures::Stream for Unsent {
    type Item = Result<PartialResultSet, Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx
            .poll_recv(cx)
            .map(|item| item.map(|outgoing| outgoing.message))
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        self.rx.close();
        let mut released = 0_usize;
        while let Ok(outgoing) = self.rx.try_recv() {
            let mut leases = lock(&self.state.leases);
            for (message_id, token) in &outgoing.leases {
                leases.release(&self.queue, message_id, token);
                released += 1;
            }
        }
        if released > 0 {
            tracing::debug!(
                database = %self.state.name,
                queue = %self.queue,
                released,
                "receive stream closed: released rows it never sent"
            );
            // Other streams may deliver them now.
            self.state.notify_change();
        }
    }
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

struct Receiver {
    shared: Arc<Shared>,
    state: Arc<DbState>,
    queue: QueueDef,
    candidates: CandidateQuery,
    indexed: Option<Indexed>,
    sources: Vec<Source>,
    id_index: usize,
    deliver_index: usize,
    /// Positions of the key columns (primary-key order) in a candidate row.
    key_indexes: Vec<usize>,
    batch_size: usize,
    deadline: tokio::time::Instant,
    tx: mpsc::Sender<Outgoing>,
    sent: std::sync::atomic::AtomicU64,
}

/// How a receive stream reads candidates from the queue's due index.
struct Indexed {
    /// The index (see [`QueueDef::due_index`]).
    index: String,
    /// The columns of a candidate row, as the SQL read would give them.
    columns: Vec<String>,
}

/// The candidates of one look at the queue: due rows (oldest first, at most the stream's free
/// places), how many due rows were found, and the delivery time of the first message not yet
/// due.
struct Candidates {
    rows: Vec<ListValue>,
    due: usize,
    scheduled: Option<SystemTime>,
}

/// One message leased in this iteration.
struct Delivery {
    row: ListValue,
    message_id: String,
    granted: Granted,
}

/// A message this stream sent whose receiver has not yet shown that it read it.
struct Unsettled {
    message_id: String,
    token: String,
    /// The message's primary key, to look it up after a commit (was it acked?).
    key: ListValue,
    expires_at: SystemTime,
    sent_at: SystemTime,
}

/// The messages a stream sent that still count against its limit (`max_batch_size`).
#[derive(Default)]
struct Outstanding {
    messages: Vec<Unsettled>,
    /// Whether the client acked, renewed or released any message of this stream: from then
    /// on, only such evidence or an expired lease settles a message.
    acted: bool,
}

impl Receiver {
    async fn run(self, metadata: ResultSetMetadata) {
        let first = PartialResultSet {
            metadata: Some(metadata),
            ..PartialResultSet::default()
        };
        let first = Outgoing {
            message: Ok(first),
            leases: Vec::new(),
        };
        if self.tx.send(first).await.is_err() {
            return;
        }
        if let Err(status) = self.serve().await {
            let last = Outgoing {
                message: Err(status),
                leases: Vec::new(),
            };
            let _ = self.tx.send(last).await;
        }
        tracing::debug!(database = %self.state.name, queue = %self.queue.name, "receive ended");
    }

    async fn serve(&self) -> Result<(), Status> {
        let policy = policy(&self.shared);
        let mut changes = self.state.changes.subscribe();
        let mut settled = self.state.settled.subscribe();
        let mut outstanding = Outstanding::default();
        // `changed()` in `await_settlement` marks the commit it woke for as seen, so a wake by a
        // commit is carried here; `has_changed()` alone would miss it and the stream would wait
        // out its patience (one message per second at batch size 1).
        let mut woken_by_commit = false;
        loop {
            if self.tx.is_closed() || tokio::time::Instant::now() >= self.deadline {
                return Ok(());
            }
            // Seen-markers first: a commit landing after this point wakes the waits below.
            changes.borrow_and_update();
            let committed =
                std::mem::take(&mut woken_by_commit) || settled.has_changed().unwrap_or(false);
            settled.borrow_and_update();
            self.settle(&mut outstanding, &policy, committed).await?;
            let free = self.batch_size.saturating_sub(outstanding.messages.len());
            // Refill once at most half a batch is unsettled, not after every ack: each refill
            // is a scan of the queue table, whose cost grows with every message ever acked in
            // it (see the README's long runs).
            if outstanding.messages.len() > self.batch_size / 2 {
                // Flow control: no more leases until the client acts on what it was sent.
                woken_by_commit = self
                    .await_settlement(&mut settled, &outstanding, &policy)
                    .await;
                continue;
            }
            let catalog = self.state.catalog(&self.shared).await?;
            let Some(current) = catalog.queue(&self.queue.name) else {
                return Err(Status::not_found(format!(
                    "Queue {} was dropped",
                    self.queue.name
                )));
            };
            if current.options.delivery_disabled() {
                self.idle(&mut changes, None).await;
                continue;
            }
            let now = SystemTime::now();
            let excluded = lock(&self.state.leases).excluded(&self.queue.name, now);
            let Candidates {
                rows,
                due,
                scheduled,
            } = match &self.indexed {
                Some(indexed) => {
                    self.indexed_candidates(indexed, excluded, free, now)
                        .await?
                }
                None => self.scanned_candidates(excluded, free, now).await?,
            };
            let deliveries = self.grant(rows, &policy);
            if !deliveries.is_empty() {
                self.send(deliveries, &mut outstanding).await;
                continue;
            }
            if due > 0 {
                // Another receiver took them between our read and our lock: read again.
                tokio::task::yield_now().await;
                continue;
            }
            lock(&self.state.leases).collect_garbage(SystemTime::now());
            let next = self.next_deliverable(scheduled);
            self.idle(&mut changes, next).await;
        }
    }

    /// Candidates by a scan of the queue table (a filtered receive, or a queue without a due
    /// index).
    async fn scanned_candidates(
        &self,
        excluded: Vec<String>,
        free: usize,
        now: SystemTime,
    ) -> Result<Candidates, Status> {
        let (params, types) = self.candidates.params(excluded, free);
        let sql = self.candidates.sql.clone();
        let mut rows = backend_read(
            &self.shared,
            &self.state,
            FrontRead::Locking,
            sql,
            params,
            types,
        )
        .await?
        .rows;
        // Ordered by DeliverTime: the due rows, then the scheduled ones.
        let due = rows
            .iter()
            .position(|row| self.deliver_time(row).is_some_and(|t| t > now))
            .unwrap_or(rows.len());
        let scheduled = rows.get(due).and_then(|row| self.deliver_time(row));
        rows.truncate(due);
        Ok(Candidates {
            rows,
            due,
            scheduled,
        })
    }

    /// Candidates from the queue's due index, read from the queue's floor on, then the due
    /// rows by key. Both reads cost what they return, not what the queue ever held.
    async fn indexed_candidates(
        &self,
        indexed: &Indexed,
        excluded: Vec<String>,
        free: usize,
        now: SystemTime,
    ) -> Result<Candidates, Status> {
        let (floor, epoch) =
            lock(&self.state.floors).start(&self.queue.name, tokio::time::Instant::now().into());
        let started = SystemTime::now();
        let key_set = match floor {
            None => KeySet {
                all: true,
                ..KeySet::default()
            },
            Some(at) => KeySet {
                ranges: vec![KeyRange {
                    start_key_type: Some(StartKeyType::StartClosed(ListValue {
                        values: vec![string_value(timestamp_string(at))],
                    })),
                    end_key_type: Some(EndKeyType::EndClosed(ListValue {
                        values: vec![string_value(MAX_TIMESTAMP)],
                    })),
                }],
                ..KeySet::default()
            },
        };
        // Index order is (DeliverTime, key): the leased messages can come first.
        let limit = free + excluded.len() + 1;
        let mut columns = vec![
            self.queue.deliver_time_column().to_owned(),
            MESSAGE_ID_COLUMN.to_owned(),
        ];
        columns.extend(self.queue.key_columns.iter().map(|k| k.column.name.clone()));
        let index_rows = backend_read_rows(
            &self.shared,
            &self.state,
            ReadRequest {
                table: self.queue.name.clone(),
                index: indexed.index.clone(),
                columns,
                key_set: Some(key_set),
                limit: i64::try_from(limit).unwrap_or(i64::MAX),
                ..ReadRequest::default()
            },
        )
        .await?
        .rows;
        let oldest = index_rows
            .first()
            .and_then(|row| string_at(row, 0))
            .and_then(parse_timestamp)
            .unwrap_or_else(|| started.checked_sub(super::floor::SLACK).unwrap_or(started));
        lock(&self.state.floors).raise(&self.queue.name, epoch, oldest);

        let excluded: HashSet<String> = excluded.into_iter().collect();
        let mut keys = Vec::new();
        let mut order: HashMap<String, usize> = HashMap::new();
        let mut scheduled = None;
        for row in &index_rows {
            let Some(id) = string_at(row, 1) else {
                continue;
            };
            if excluded.contains(id) {
                continue;
            }
            let at = string_at(row, 0).and_then(parse_timestamp);
            if at.is_some_and(|t| t > now) {
                scheduled = at;
                break;
            }
            if keys.len() == free {
                break;
            }
            order.insert(id.to_owned(), keys.len());
            keys.push(ListValue {
                values: row.values.get(2..).unwrap_or_default().to_vec(),
            });
        }
        let due = keys.len();
        if keys.is_empty() {
            return Ok(Candidates {
                rows: Vec::new(),
                due,
                scheduled,
            });
        }
        let mut rows = backend_read_rows(
            &self.shared,
            &self.state,
            ReadRequest {
                table: self.queue.name.clone(),
                columns: indexed.columns.clone(),
                key_set: Some(KeySet {
                    keys,
                    ..KeySet::default()
                }),
                ..ReadRequest::default()
            },
        )
        .await?
        .rows;
        // A keyed read answers in key order; deliver oldest first. Rows acked since the index
        // read are simply missing.
        rows.sort_by_key(|row| {
            string_at(row, self.id_index)
                .and_then(|id| order.get(id).copied())
                .unwrap_or(usize::MAX)
        });
        Ok(Candidates {
            rows,
            due,
            scheduled,
        })
    }

    /// Drops from `outstanding` the messages the client acted on (acked, renewed, released),
    /// whose lease ran out, or, while the client has acted on none, that were sent long enough
    /// ago. `committed`: a commit or renewal happened since the last look, so acks are looked up
    /// in the queue table (one keyed read).
    async fn settle(
        &self,
        outstanding: &mut Outstanding,
        policy: &LeasePolicy,
        committed: bool,
    ) -> Result<(), Status> {
        if outstanding.messages.is_empty() {
            return Ok(());
        }
        let now = SystemTime::now();
        let mut acted = outstanding.acted;
        {
            let leases = lock(&self.state.leases);
            outstanding.messages.retain(|m| {
                match leases.standing(&self.queue.name, &m.message_id, &m.token, now) {
                    Standing::Held => true,
                    Standing::Acted => {
                        acted = true;
                        false
                    }
                    Standing::Expired => false,
                }
            });
        }
        if committed && !outstanding.messages.is_empty() {
            let present = self.present(&outstanding.messages).await?;
            let before = outstanding.messages.len();
            let mut leases = lock(&self.state.leases);
            outstanding.messages.retain(|m| {
                let present = present.contains(&m.message_id);
                if !present {
                    // Acked (or cancelled): its record would only lengthen every later look
                    // at what is blocked.
                    leases.forget_acked(&self.queue.name, &m.message_id, &m.token);
                }
                present
            });
            drop(leases);
            acted |= outstanding.messages.len() < before;
        }
        outstanding.acted = acted;
        if !acted {
            let patience = policy.lease / UNACTED_SETTLE_FRACTION;
            outstanding
                .messages
                .retain(|m| now.duration_since(m.sent_at).unwrap_or_default() < patience);
        }
        Ok(())
    }

    /// Which of `messages` are still in the queue (not acked): a read of their keys.
    async fn present(&self, messages: &[Unsettled]) -> Result<HashSet<String>, Status> {
        let key_set = KeySet {
            keys: messages.iter().map(|m| m.key.clone()).collect(),
            ..KeySet::default()
        };
        let result =
            backend_read_keys(&self.shared, &self.state, &self.queue.name, key_set).await?;
        Ok(result
            .rows
            .iter()
            .filter_map(|row| string_at(row, 0).map(str::to_owned))
            .collect())
    }

    /// Waits until a message of `outstanding` may have settled: a commit or renewal, the next
    /// lease expiry (or, while the client has acted on none, the end of its patience), the
    /// client going away, or the end of the call. True when a commit or renewal woke it.
    async fn await_settlement(
        &self,
        settled: &mut tokio::sync::watch::Receiver<u64>,
        outstanding: &Outstanding,
        policy: &LeasePolicy,
    ) -> bool {
        let patience = policy.lease / UNACTED_SETTLE_FRACTION;
        let next = outstanding
            .messages
            .iter()
            .map(|m| {
                if outstanding.acted {
                    m.expires_at
                } else {
                    m.expires_at.min(m.sent_at + patience)
                }
            })
            .min();
        let mut wait = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .min(MAX_IDLE_WAIT);
        if let Some(next) = next {
            let delta = next.duration_since(SystemTime::now()).unwrap_or_default();
            wait = wait.min(delta + Duration::from_millis(5));
        }
        tokio::select! {
            changed = settled.changed() => changed.is_ok(),
            () = tokio::time::sleep(wait) => false,
            () = self.tx.closed() => false,
        }
    }

    /// An opaque resume token. A client that resumes with it starts a new receive: messages
    /// already delivered stay leased to it, so nothing is delivered twice within a lease.
    fn next_resume_token(&self) -> bytes::Bytes {
        let n = self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        bytes::Bytes::from(format!("sqe-receive-{n}"))
    }

    fn grant(&self, rows: Vec<ListValue>, policy: &LeasePolicy) -> Vec<Delivery> {
        let now = SystemTime::now();
        let mut leases = lock(&self.state.leases);
        // Here as well as when idle: a queue that is never idle would keep every record.
        leases.collect_garbage(now);
        rows.into_iter()
            .filter_map(|row| {
                let message_id = string_at(&row, self.id_index)?.to_owned();
                let deliver_time = string_at(&row, self.deliver_index)
                    .and_then(parse_timestamp)
                    .unwrap_or(now);
                let granted =
                    leases.try_grant(&self.queue.name, &message_id, deliver_time, policy, now)?;
                Some(Delivery {
                    row,
                    message_id,
                    granted,
                })
            })
            .collect()
    }

    async fn send(&self, deliveries: Vec<Delivery>, outstanding: &mut Outstanding) {
        let mut pending = deliveries.into_iter().peekable();
        while pending.peek().is_some() {
            let batch: Vec<Delivery> = pending.by_ref().take(self.batch_size).collect();
            let last = batch.len() - 1;
            let mut values = Vec::with_capacity(batch.len() * self.sources.len());
            for (i, delivery) in batch.iter().enumerate() {
                for source in &self.sources {
                    values.push(match source {
                        Source::Backend(index) => delivery
                            .row
                            .values
                            .get(*index)
                            .cloned()
                            .unwrap_or_else(null_value),
                        Source::LeaseExpiration => {
                            string_value(timestamp_string(delivery.granted.expires_at))
                        }
                        Source::LeaseToken => string_value(delivery.granted.token.clone()),
                        Source::LastBatch => bool_value(i == last),
                    });
                }
            }
            // Clients hold rows back until they see a resume token (so that they can resume
            // without duplicates); without one, nothing would reach them before the stream ends.
            let message = PartialResultSet {
                values,
                resume_token: self.next_resume_token(),
                ..PartialResultSet::default()
            };
            let outgoing = Outgoing {
                message: Ok(message),
                leases: batch
                    .iter()
                    .map(|d| (d.message_id.clone(), d.granted.token.clone()))
                    .collect(),
            };
            if self.tx.send(outgoing).await.is_err() {
                // The receiver went away: give back what it never got.
                let mut leases = lock(&self.state.leases);
                for delivery in batch
                    .iter()
                    .chain(pending.by_ref().collect::<Vec<_>>().iter())
                {
                    leases.release(
                        &self.queue.name,
                        &delivery.message_id,
                        &delivery.granted.token,
                    );
                }
                return;
            }
            let sent_at = SystemTime::now();
            for delivery in batch {
                outstanding.messages.push(Unsettled {
                    key: ListValue {
                        values: self
                            .key_indexes
                            .iter()
                            .map(|&i| {
                                delivery
                                    .row
                                    .values
                                    .get(i)
                                    .cloned()
                                    .unwrap_or_else(null_value)
                            })
                            .collect(),
                    },
                    expires_at: delivery.granted.expires_at,
                    token: delivery.granted.token,
                    message_id: delivery.message_id.clone(),
                    sent_at,
                });
                tracing::debug!(
                    database = %self.state.name,
                    queue = %self.queue.name,
                    message = %delivery.message_id,
                    "delivered under a new lease"
                );
            }
        }
    }

    /// When the next message could become deliverable without a commit: a lease expiring (plus
    /// back-off), or the `scheduled` `DeliverTime` (of the first message not yet due) arriving.
    fn next_deliverable(&self, scheduled: Option<SystemTime>) -> Option<SystemTime> {
        let from_leases = lock(&self.state.leases).next_wake(&self.queue.name, SystemTime::now());
        [from_leases, scheduled].into_iter().flatten().min()
    }

    /// The `DeliverTime` of a candidate row.
    fn deliver_time(&self, row: &ListValue) -> Option<SystemTime> {
        string_at(row, self.deliver_index).and_then(parse_timestamp)
    }

    async fn idle(
        &self,
        changes: &mut tokio::sync::watch::Receiver<u64>,
        until: Option<SystemTime>,
    ) {
        let mut wait = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .min(MAX_IDLE_WAIT);
        if let Some(until) = until {
            let delta = until.duration_since(SystemTime::now()).unwrap_or_default();
            wait = wait.min(delta + Duration::from_millis(5));
        }
        tokio::select! {
            _ = changes.changed() => {}
            () = tokio::time::sleep(wait) => {}
            () = self.tx.closed() => {}
        }
    }
}

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
                    super::lease::Renewal::Live { message_id } => Some(message_id),
                    super::lease::Renewal::NoRow => None,
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
