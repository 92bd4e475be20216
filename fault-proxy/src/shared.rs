//! The state every task of one proxy shares: the armed faults, the counters and the tasks; and
//! [`Firing`], a fault that matched a request until it is applied.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use google_cloud_gax::error::rpc::Code;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::plan::{FaultFired, Injection, Method};
use crate::stats::{RpcObserver, RpcRecord, RpcStats, Stats};

#[derive(Debug, Clone)]
pub(crate) enum FireState {
    Armed,
    Fired(FaultFired),
    NotApplied(String),
    Disarmed,
}

pub(crate) struct ArmedEntry {
    pub(crate) id: u64,
    pub(crate) method: Method,
    /// Matching requests seen since the fault was armed.
    pub(crate) seen: u32,
    pub(crate) injection: Injection,
    pub(crate) report: watch::Sender<FireState>,
    /// Becomes `true` (or closes) when a held answer may pass.
    pub(crate) released: watch::Receiver<bool>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) next_fault_id: u64,
    pub(crate) next_connection_id: u64,
    pub(crate) armed: Vec<ArmedEntry>,
    pub(crate) stats: Stats,
    pub(crate) stopped: bool,
}

#[derive(Default)]
pub(crate) struct Tasks {
    pub(crate) set: JoinSet<()>,
    pub(crate) stopped: bool,
}

pub(crate) struct Shared {
    pub(crate) upstream: String,
    pub(crate) state: Mutex<State>,
    pub(crate) tasks: Mutex<Tasks>,
    /// Told of every call forwarded, once its response headers arrive.
    pub(crate) observer: Option<RpcObserver>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Runs `future` as a task the proxy owns (aborted when the proxy stops).
    pub(crate) fn spawn<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut tasks = lock(&self.tasks);
        if tasks.stopped {
            return;
        }
        // Reap finished tasks so a long-lived proxy does not accumulate them.
        while tasks.set.try_join_next().is_some() {}
        tasks.set.spawn(future);
    }

    pub(crate) fn shut_down(&self) -> JoinSet<()> {
        {
            let mut state = lock(&self.state);
            state.stopped = true;
            // Dropping the senders makes pending `fired()` calls return `Stopped`.
            state.armed.clear();
        }
        let mut tasks = lock(&self.tasks);
        tasks.stopped = true;
        std::mem::take(&mut tasks.set)
    }

    pub(crate) fn is_stopped(&self) -> bool {
        lock(&self.state).stopped
    }

    pub(crate) fn new_connection(&self) -> u64 {
        let mut state = lock(&self.state);
        state.stats.connections += 1;
        state.next_connection_id += 1;
        state.next_connection_id
    }

    /// Counts the request and takes the fault due for it, if any.
    pub(crate) fn take_fault(&self, path: &str) -> Option<ArmedEntry> {
        let mut state = lock(&self.state);
        *state.stats.requests.entry(path.to_owned()).or_default() += 1;
        let mut due = None;
        for (index, entry) in state.armed.iter_mut().enumerate() {
            if entry.method.matches(path) {
                entry.seen = entry.seen.saturating_add(1);
                if due.is_none() && entry.seen >= entry.method.nth {
                    due = Some(index);
                }
            }
        }
        due.map(|index| state.armed.remove(index))
    }

    /// Counts a request forwarded to the upstream, by `:path` and by kind.
    pub(crate) fn count_forwarded(&self, path: &str, kind: &str) {
        let mut state = lock(&self.state);
        *state.stats.forwarded.entry(path.to_owned()).or_default() += 1;
        rpc_entry(&mut state.stats.rpcs, kind).calls += 1;
    }

    /// Adds the time a forwarded call waited for its response headers (sent at `sent`), and
    /// tells the observer.
    pub(crate) fn record_answer_time(&self, kind: &str, sent: SystemTime, took: Duration) {
        rpc_entry(&mut lock(&self.state).stats.rpcs, kind).time_to_headers += took;
        if let Some(RpcObserver(observer)) = &self.observer {
            observer(&RpcRecord {
                kind,
                sent,
                time_to_headers: took,
            });
        }
    }

    /// Adds rows the upstream returned to a call of this kind.
    pub(crate) fn count_rows(&self, kind: &str, rows: u64) {
        if rows == 0 {
            return;
        }
        rpc_entry(&mut lock(&self.state).stats.rpcs, kind).rows += rows;
    }
}

/// The counters of `kind`, created at the first call of that kind.
fn rpc_entry<'a>(rpcs: &'a mut BTreeMap<String, RpcStats>, kind: &str) -> &'a mut RpcStats {
    // Looked up by `&str` first: a call of a known kind allocates nothing here.
    if !rpcs.contains_key(kind) {
        rpcs.insert(kind.to_owned(), RpcStats::default());
    }
    rpcs.get_mut(kind).expect("inserted above")
}

/// hyper's executor: every task hyper spawns (one per HTTP/2 stream, plus the driver of each
/// upstream connection) belongs to the proxy, so stopping the proxy ends them.
#[derive(Clone)]
pub(crate) struct Exec(pub(crate) Weak<Shared>);

impl<F> hyper::rt::Executor<F> for Exec
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        if let Some(shared) = self.0.upgrade() {
            shared.spawn(async move {
                future.await;
            });
        }
    }
}

/// A fault that matched a request, until it is applied. Dropping it unapplied reports
/// `NotApplied` (or `Stopped` when the proxy is stopping).
pub(crate) struct Firing {
    pub(crate) shared: Arc<Shared>,
    pub(crate) report: Option<watch::Sender<FireState>>,
    pub(crate) path: String,
    pub(crate) connection: u64,
    pub(crate) injection: Injection,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FireDetails {
    pub(crate) upstream_status: Option<Code>,
    pub(crate) client_gave_up: bool,
}

impl Firing {
    pub(crate) fn fire(mut self, details: FireDetails) {
        let Some(report) = self.report.take() else {
            return;
        };
        {
            let mut state = lock(&self.shared.state);
            *state
                .stats
                .faults_fired
                .entry(self.injection.fault.kind())
                .or_default() += 1;
        }
        tracing::debug!(
            path = %self.path,
            connection = self.connection,
            fault = ?self.injection.fault,
            ending = ?self.injection.ending,
            upstream_status = ?details.upstream_status,
            client_gave_up = details.client_gave_up,
            "fault fired"
        );
        report.send_replace(FireState::Fired(FaultFired {
            path: std::mem::take(&mut self.path),
            injection: self.injection,
            connection: self.connection,
            upstream_status: details.upstream_status,
            client_gave_up: details.client_gave_up,
        }));
    }

    pub(crate) fn not_applied(mut self, reason: impl Into<String>) {
        if let Some(report) = self.report.take() {
            let reason = reason.into();
            tracing::debug!(path = %self.path, connection = self.connection, %reason, "fault not applied");
            report.send_replace(FireState::NotApplied(reason));
        }
    }
}

impl Drop for Firing {
    fn drop(&mut self) {
        if let Some(report) = self.report.take()
            && !self.shared.is_stopped()
        {
            let reason = "the call ended before the fault could be applied".to_owned();
            tracing::debug!(path = %self.path, connection = self.connection, %reason, "fault not applied");
            report.send_replace(FireState::NotApplied(reason));
        }
    }
}
