//! A `RECEIVE_<Q>` stream: the task that finds due messages, leases them and sends them, and
//! waits for its client to settle them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tonic::Status;

use super::candidates::{CandidateQuery, Source, hidden_user_columns};
use super::{
    MAX_IDLE_WAIT, MAX_TIMESTAMP, UNACTED_SETTLE_FRACTION, backend_read_keys, check_transaction,
    parse_timestamp, policy, queue, receive_projection, resolve_batch_size, resolve_duration,
    string_at,
};
use crate::ddl::{Catalog, MESSAGE_ID_COLUMN, QueueDef};
use crate::front::lease::{Granted, LeasePolicy, Standing};
use crate::front::proto::spanner::key_range::{EndKeyType, StartKeyType};
use crate::front::proto::spanner::{
    ExecuteSqlRequest, KeyRange, KeySet, PartialResultSet, ReadRequest, ResultSetMetadata,
    StructType,
};
use crate::front::proto::{ListValue, bool_value, null_value, string_value, timestamp_string};
use crate::front::reads::{FrontRead, backend_read, backend_read_rows};
use crate::front::rpc::BoxStream;
use crate::front::shared::Shared;
use crate::front::state::DbState;
use crate::front::sync::lock;
use crate::sql::ReceiveQuery;
use spanner_queues_sql::Dialect;

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
            .unwrap_or_else(|| {
                started
                    .checked_sub(crate::front::floor::SLACK)
                    .unwrap_or(started)
            });
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
