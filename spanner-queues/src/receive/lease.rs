//! Leases held by a receiver, and the background task that renews them.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::value::{FromValue, Type, TypeCode, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::error::{Error, Result};
use crate::ident::QueueName;
use crate::receive::settings::ReceiveSettings;
use crate::schema::{Dialect, SystemColumn};
use crate::telemetry;
use crate::util::lock;

/// An opaque lease token. Its type is not settled: Spanner's docs scan it as a STRING, a pre-GA test read BYTES:
/// both are kept as they came, and bound back with the same type.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum LeaseToken {
    String(String),
    Bytes(Vec<u8>),
}

impl LeaseToken {
    /// Reads a token column value.
    pub(crate) fn from_value(value: &Value, column_type: &Type) -> Result<Option<Self>, String> {
        if value.is_null() {
            return Ok(None);
        }
        match column_type.code() {
            TypeCode::String => String::from_value(value, column_type)
                .map(|s| Some(Self::String(s)))
                .map_err(|e| e.to_string()),
            TypeCode::Bytes => Vec::<u8>::from_value(value, column_type)
                .map(|b| Some(Self::Bytes(b)))
                .map_err(|e| e.to_string()),
            other => Err(format!("a lease token cannot be of type {other:?}")),
        }
    }

    fn is_bytes(&self) -> bool {
        matches!(self, Self::Bytes(_))
    }

    fn to_value(&self) -> Value {
        match self {
            Self::String(s) => Value::from(s.clone()),
            Self::Bytes(b) => Value::from(b.clone()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::String(s) => s.as_bytes(),
            Self::Bytes(b) => b,
        }
    }

    /// A short hash of the token, for logs (never the token itself).
    pub(crate) fn short_hash(&self) -> String {
        let mut hex = telemetry::sha256_hex(self.as_bytes());
        hex.truncate(8);
        hex
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseToken(#{})", self.short_hash())
    }
}

/// Counters of one receiver (shared with its deliveries and tasks).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) expired_on_receipt: AtomicU64,
    pub(crate) released_unread: AtomicU64,
    pub(crate) read_ahead: AtomicUsize,
    pub(crate) receive_calls: AtomicU64,
    pub(crate) receive_errors: AtomicU64,
    pub(crate) renew_rounds: AtomicU64,
    pub(crate) renew_requests: AtomicU64,
    pub(crate) renew_errors: AtomicU64,
    pub(crate) renewed: AtomicU64,
    pub(crate) lease_lost: AtomicU64,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) max_in_flight: AtomicUsize,
}

/// The mutable part of a lease.
#[derive(Debug, Clone)]
struct LeaseState {
    token: LeaseToken,
    expiry: SystemTime,
}

/// One held lease.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) id: u64,
    state: Mutex<LeaseState>,
    lost: CancellationToken,
    lost_counted: AtomicBool,
    changed: Notify,
    received: Instant,
    /// Short hash of the first token: a stable label for logs across renewals.
    label: String,
}

impl Lease {
    pub(crate) fn new(id: u64, token: LeaseToken, expiry: SystemTime) -> Self {
        let label = token.short_hash();
        Self {
            id,
            state: Mutex::new(LeaseState { token, expiry }),
            lost: CancellationToken::new(),
            lost_counted: AtomicBool::new(false),
            changed: Notify::new(),
            received: Instant::now(),
            label,
        }
    }

    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    pub(crate) fn expiry(&self) -> SystemTime {
        lock(&self.state).expiry
    }

    pub(crate) fn received(&self) -> Instant {
        self.received
    }

    /// Whether the lease is known lost, or has passed its expiry by this machine's clock.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_cancelled() || SystemTime::now() >= self.expiry()
    }

    /// Marks the lease lost (once), counting it.
    pub(crate) fn mark_lost(&self, counters: &Counters, queue: &QueueName, why: &str) {
        self.lost.cancel();
        if !self.lost_counted.swap(true, Ordering::SeqCst) {
            counters.lease_lost.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(telemetry::LEASE_LOST, "queue" => queue.as_str().to_owned())
                .increment(1);
            tracing::debug!(queue = %queue, lease = %self.label, why, "lease lost");
        }
    }

    /// Resolves when the lease is lost: marked lost, or past its (renewed) expiry.
    pub(crate) async fn wait_lost(&self, counters: &Counters, queue: &QueueName) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let wait = self
                .expiry()
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            tokio::select! {
                () = self.lost.cancelled() => return,
                () = &mut changed => {}
                () = tokio::time::sleep(wait) => {
                    if SystemTime::now() >= self.expiry() {
                        self.mark_lost(counters, queue, "expired");
                        return;
                    }
                }
            }
        }
    }

    fn snapshot(&self) -> LeaseState {
        lock(&self.state).clone()
    }

    /// Applies a renewal of `old` (ignored if the token changed meanwhile).
    fn renewed(&self, old: &LeaseToken, new: LeaseToken, expiry: SystemTime) -> bool {
        let mut state = lock(&self.state);
        if &state.token != old {
            return false;
        }
        state.token = new;
        state.expiry = expiry;
        drop(state);
        self.changed.notify_waiters();
        true
    }
}

/// A lease, with what is needed to wait for its loss (for worker handler contexts).
#[derive(Debug, Clone)]
pub(crate) struct LeaseHandle {
    pub(crate) lease: Arc<Lease>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) queue: QueueName,
}

impl LeaseHandle {
    pub(crate) fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    pub(crate) async fn wait_lost(&self) {
        self.lease.wait_lost(&self.counters, &self.queue).await;
    }

    pub(crate) fn expiry(&self) -> SystemTime {
        self.lease.expiry()
    }
}

/// Controls the renewal task without keeping the receiver's state alive.
#[derive(Debug, Default)]
pub(crate) struct RenewControl {
    pub(crate) wake: Notify,
    pub(crate) stop: CancellationToken,
}

/// What the renewal task needs from a receiver.
#[derive(Debug)]
pub(crate) struct Leases {
    pub(crate) db: DatabaseClient,
    pub(crate) queue: QueueName,
    pub(crate) dialect: Dialect,
    pub(crate) settings: ReceiveSettings,
    pub(crate) counters: Arc<Counters>,
    pub(crate) held: Mutex<HashMap<u64, Arc<Lease>>>,
    pub(crate) next_id: AtomicU64,
    pub(crate) control: Arc<RenewControl>,
}

impl Drop for Leases {
    fn drop(&mut self) {
        self.control.stop.cancel();
    }
}

impl Leases {
    pub(crate) fn register(&self, token: LeaseToken, expiry: SystemTime) -> Arc<Lease> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let lease = Arc::new(Lease::new(id, token, expiry));
        lock(&self.held).insert(id, Arc::clone(&lease));
        let remaining = expiry.duration_since(SystemTime::now()).unwrap_or_default();
        if remaining < self.settings.renew_interval() + Duration::from_secs(1) {
            // The next scheduled round could come too late for this one.
            self.control.wake.notify_one();
        }
        lease
    }

    pub(crate) fn unregister(&self, id: u64) {
        lock(&self.held).remove(&id);
    }

    /// One renewal round. `early`: woken for a short lease, renew only what is due soon.
    /// Returns whether every call succeeded.
    async fn round(&self, early: bool) -> bool {
        let now = SystemTime::now();
        let held: Vec<Arc<Lease>> = lock(&self.held).values().cloned().collect();
        let soon = self.settings.renew_interval() + Duration::from_secs(1);
        let mut due: Vec<(Arc<Lease>, LeaseToken)> = Vec::new();
        for lease in held {
            if lease.lost.is_cancelled() {
                continue;
            }
            let state = lease.snapshot();
            if now >= state.expiry {
                lease.mark_lost(&self.counters, &self.queue, "expired before renewal");
                continue;
            }
            if lease.received.elapsed() >= self.settings.max_lease_duration() {
                continue; // total lease time used up: let it lapse
            }
            if early && state.expiry.duration_since(now).unwrap_or_default() > soon {
                continue;
            }
            due.push((lease, state.token));
        }
        if due.is_empty() {
            return true;
        }
        self.counters.renew_rounds.fetch_add(1, Ordering::Relaxed);
        // Tokens of both kinds in one receiver would be odd, but each call needs one type.
        let (bytes, strings): (Vec<_>, Vec<_>) = due.into_iter().partition(|(_, t)| t.is_bytes());
        let mut ok = true;
        for group in [strings, bytes] {
            for chunk in group.chunks(self.settings.renew_chunk_size()) {
                ok &= self.renew(chunk).await;
            }
        }
        ok
    }

    /// One `RENEWLEASE` call for `chunk`.
    async fn renew(&self, chunk: &[(Arc<Lease>, LeaseToken)]) -> bool {
        let Some((_, first)) = chunk.first() else {
            return true;
        };
        let element = if first.is_bytes() {
            google_cloud_spanner::types::bytes()
        } else {
            google_cloud_spanner::types::string()
        };
        let tokens: Vec<Value> = chunk.iter().map(|(_, t)| t.to_value()).collect();
        let (name, placeholder) = crate::queue::Params::new(self.dialect).next("tokens");
        let sql = format!(
            "SELECT * FROM {}(lease_tokens => {placeholder})",
            self.queue.renew_lease_function(self.dialect)
        );
        let statement = Statement::builder(sql)
            .add_typed_param(
                name,
                Value::from(tokens),
                google_cloud_spanner::types::array(element),
            )
            .with_attempt_timeout(self.settings.renew_timeout())
            .with_retry_policy(NeverRetry)
            .build();
        self.counters.renew_requests.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(telemetry::RENEW_REQUESTS, "queue" => self.queue.as_str().to_owned())
            .increment(1);
        let span = tracing::debug_span!(
            "spanner_queues.renew",
            queue = %self.queue,
            leases = chunk.len()
        );
        let result = self.call(statement).instrument(span).await;
        let rows = match result {
            Ok(rows) => rows,
            Err(error) => {
                self.counters.renew_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    queue = %self.queue,
                    leases = chunk.len(),
                    error = %telemetry::ErrorChain(&error),
                    "lease renewal failed; retrying before the leases expire"
                );
                return false;
            }
        };
        let renewed = apply_renewals(&self.held, &self.counters, &self.queue, chunk, &rows);
        self.counters.renewed.fetch_add(renewed, Ordering::Relaxed);
        metrics::counter!(telemetry::RENEWED, "queue" => self.queue.as_str().to_owned())
            .increment(renewed);
        true
    }

    /// Runs a `RENEWLEASE` query: old token → (new token, new expiry).
    async fn call(
        &self,
        statement: Statement,
    ) -> Result<HashMap<LeaseToken, (Option<LeaseToken>, Option<SystemTime>)>> {
        let mut rows = self
            .db
            .single_use()
            .build()
            .execute_query(statement)
            .await?;
        let names = rows.metadata().column_names().to_vec();
        let types = rows.metadata().column_types().to_vec();
        let find = |column: SystemColumn| {
            let name = column.name(self.dialect);
            names
                .iter()
                .position(|n| n.eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    Error::invalid_schema(
                        Some(self.queue.as_str()),
                        format!(
                            "{} returned no {name} column",
                            self.queue.renew_lease_function(self.dialect)
                        ),
                    )
                })
        };
        let old = find(SystemColumn::OldLeaseToken)?;
        let new = find(SystemColumn::NewLeaseToken)?;
        let expiry = find(SystemColumn::LeaseExpirationTimestamp)?;
        let bad = |reason: String| Error::invalid_schema(Some(self.queue.as_str()), reason);
        let mut out = HashMap::new();
        while let Some(row) = rows.next().await {
            let row = row?;
            let values = row.raw_values();
            let (Some(old_value), Some(new_value), Some(expiry_value)) =
                (values.get(old), values.get(new), values.get(expiry))
            else {
                return Err(bad("RENEWLEASE row shorter than its metadata".into()));
            };
            let Some(old_token) = LeaseToken::from_value(old_value, &types[old]).map_err(bad)?
            else {
                continue;
            };
            let new_token = LeaseToken::from_value(new_value, &types[new]).map_err(bad)?;
            let new_expiry = if expiry_value.is_null() {
                None
            } else {
                Some(
                    SystemTime::from_value(expiry_value, &types[expiry])
                        .map_err(|e| bad(e.to_string()))?,
                )
            };
            out.insert(old_token, (new_token, new_expiry));
        }
        Ok(out)
    }
}

/// What a `RENEWLEASE` call answered (old token → new token and expiry), applied to the leases
/// of `chunk`; returns how many were renewed. A lease the call did not renew is lost, unless
/// its delivery is gone from `held` by the time the answer comes: its message was acked (or
/// released) while the call ran, which is why the call found no row, and nothing was lost.
fn apply_renewals(
    held: &Mutex<HashMap<u64, Arc<Lease>>>,
    counters: &Counters,
    queue: &QueueName,
    chunk: &[(Arc<Lease>, LeaseToken)],
    answers: &HashMap<LeaseToken, (Option<LeaseToken>, Option<SystemTime>)>,
) -> u64 {
    let mut renewed = 0_u64;
    for (lease, token) in chunk {
        let why = match answers.get(token) {
            Some((Some(new), Some(expiry))) => {
                if lease.renewed(token, new.clone(), *expiry) {
                    renewed += 1;
                }
                continue;
            }
            Some(_) => "not renewable",
            None => "expired or unknown token",
        };
        if lock(held).contains_key(&lease.id) {
            lease.mark_lost(counters, queue, why);
        }
    }
    renewed
}

/// The renewal task: one per receiver, alive while the receiver or any of its deliveries is.
pub(crate) async fn renew_loop(
    leases: Weak<Leases>,
    control: Arc<RenewControl>,
    interval: Duration,
) {
    let mut next = tokio::time::Instant::now() + interval;
    loop {
        let early = tokio::select! {
            () = control.stop.cancelled() => return,
            () = tokio::time::sleep_until(next) => false,
            () = control.wake.notified() => true,
        };
        let Some(leases) = leases.upgrade() else {
            return;
        };
        let ok = leases.round(early).await;
        drop(leases);
        let now = tokio::time::Instant::now();
        if !ok {
            // Try again soon: the leases are still valid for a few seconds.
            next = now + interval.min(Duration::from_secs(1));
        } else if !early || next <= now {
            next = now + interval;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_keep_their_type_and_never_print() {
        let string = LeaseToken::String("c2VjcmV0".into());
        let bytes = LeaseToken::Bytes(b"c2VjcmV0".to_vec());
        assert_ne!(string, bytes);
        assert!(!string.is_bytes() && bytes.is_bytes());
        let shown = format!("{string:?}");
        assert!(!shown.contains("c2VjcmV0"), "{shown}");
        assert_eq!(
            string.short_hash(),
            bytes.short_hash(),
            "same bytes, same label"
        );
        assert_eq!(string.short_hash().len(), 8);

        let column = google_cloud_spanner::types::string();
        let read = LeaseToken::from_value(&Value::from("abc"), &column).expect("string");
        assert_eq!(read, Some(LeaseToken::String("abc".into())));
        let null = LeaseToken::from_value(&Value::null(), &column).expect("null");
        assert_eq!(null, None);
        let bytes_column = google_cloud_spanner::types::bytes();
        let read = LeaseToken::from_value(&Value::from(vec![1_u8, 2]), &bytes_column).expect("b");
        assert_eq!(read, Some(LeaseToken::Bytes(vec![1, 2])));
        let int = google_cloud_spanner::types::int64();
        assert!(LeaseToken::from_value(&Value::from(1_i64), &int).is_err());
    }

    #[test]
    fn a_lease_let_go_during_a_renewal_is_not_counted_lost() {
        let counters = Counters::default();
        let queue = QueueName::from_static("Q");
        let in_future = SystemTime::now() + Duration::from_secs(10);
        let token = |t: &str| LeaseToken::String(t.into());
        let lease = |id: u64, t: &str| Arc::new(Lease::new(id, token(t), in_future));
        let (renewed, gone, acked, unrenewable) =
            (lease(1, "a"), lease(2, "b"), lease(3, "c"), lease(4, "d"));
        let held = Mutex::new(HashMap::new());
        for kept in [&renewed, &gone, &unrenewable] {
            lock(&held).insert(kept.id, Arc::clone(kept));
        }
        // `acked` was held when the call began, and its delivery dropped before the answer.
        let chunk: Vec<(Arc<Lease>, LeaseToken)> = [&renewed, &gone, &acked, &unrenewable]
            .iter()
            .map(|l| (Arc::clone(l), l.snapshot().token))
            .collect();
        let later = in_future + Duration::from_secs(5);
        let answers = HashMap::from([
            (token("a"), (Some(token("a2")), Some(later))),
            (token("d"), (None, None)),
        ]);
        let count = apply_renewals(&held, &counters, &queue, &chunk, &answers);
        assert_eq!(count, 1);
        assert_eq!(renewed.expiry(), later);
        assert!(!renewed.is_lost());
        assert!(gone.is_lost(), "held, and no row: lost");
        assert!(unrenewable.is_lost(), "held, and no new token: lost");
        assert!(!acked.is_lost(), "no longer held: let go, not lost");
        assert_eq!(counters.lease_lost.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_lease_is_lost_at_expiry_unless_renewed() {
        let counters = Counters::default();
        let queue = QueueName::from_static("Q");
        let token = LeaseToken::String("t1".into());
        let lease = Lease::new(
            1,
            token.clone(),
            SystemTime::now() + Duration::from_millis(200),
        );
        assert!(!lease.is_lost());
        // A renewal moves the expiry; the waiter follows it.
        let renewed_until = SystemTime::now() + Duration::from_millis(400);
        assert!(lease.renewed(&token, LeaseToken::String("t2".into()), renewed_until));
        assert!(!lease.renewed(&token, LeaseToken::String("t3".into()), renewed_until));
        lease.wait_lost(&counters, &queue).await;
        assert!(SystemTime::now() >= renewed_until);
        assert!(lease.is_lost());
        assert_eq!(counters.lease_lost.load(Ordering::Relaxed), 1);
        lease.mark_lost(&counters, &queue, "again");
        assert_eq!(
            counters.lease_lost.load(Ordering::Relaxed),
            1,
            "counted once"
        );
    }
}
