//! A fault-injecting gRPC proxy for tests of unknown commit outcomes.
//!
//! The official Spanner emulator ignores gRPC deadlines and never fails a call on its own, so it
//! cannot produce the case that matters most to a queue SDK: a commit that *was applied* while the
//! client saw an error. [`FaultProxy`] sits between a client and the emulator (or any gRPC server
//! speaking HTTP/2 cleartext with prior knowledge), forwards every call unchanged and streams
//! both ways, and on command breaks one chosen call:
//!
//! | [`Fault`] | Upstream saw the request? | What the client's call gets (default [`Ending`]) |
//! |---|---|---|
//! | [`Fault::DropRequest`] | no | its connection reset |
//! | [`Fault::DropResponse`] | yes, and fully answered | its connection reset |
//! | [`Fault::DelayResponseThenDrop`] | yes, and fully answered | nothing for a while, then a reset |
//! | [`Fault::Stall`] | yes, and fully answered | nothing, until the client gives up |
//! | [`Fault::ResetMidStream`] | yes | `n` response messages, then a reset |
//! | [`Fault::ResetConnection`] | no | its connection reset at once |
//! | [`Fault::HoldResponse`] | yes, and fully answered | the answer, unchanged, once released |
//!
//! A fault is one-shot: it fires on one matching request (see [`Method`]), then is gone. Several
//! can be armed at once. [`ArmedFault::fired`] resolves once the fault has been applied, so a test
//! awaits it instead of sleeping. [`Fault::HoldResponse`] breaks nothing: it lets a test act while
//! a call is applied upstream but not yet answered (say, while a commit's reply is in flight), and
//! [`ArmedFault::release`] then passes the answer on.
//!
//! # Connection resets and HTTP/2
//!
//! gRPC multiplexes calls: one HTTP/2 connection carries every concurrent call of a channel. A
//! connection reset ([`Ending::ResetConnection`], the default) therefore also fails every other
//! call in flight on that connection, exactly as a real network failure would. Only that
//! connection is affected: other connections, and new ones, keep working. The proxy closes the
//! socket with `SO_LINGER` set to zero, so the client receives a TCP RST, not a FIN.
//!
//! [`Ending::ResetStream`] fails only the one call, with an HTTP/2 `RST_STREAM` frame. hyper
//! chooses the reason code, `INTERNAL_ERROR`, which gRPC clients map to `INTERNAL` (tonic: see
//! below), so a client cannot tell it from a server bug. [`Ending::Status`] ends the call with a gRPC status of your
//! choice instead (what a load balancer in front of Spanner does).
//!
//! Each client connection gets its own upstream connection, so calls that share a connection on
//! the client side also share one upstream.
//!
//! # What clients report (measured with tonic 0.14.9 and `google-cloud-spanner` 0.34.8-preview)
//!
//! - A tonic client sees a connection reset as code `UNKNOWN` ("transport error") whose source
//!   chain ends in an I/O `ConnectionReset`, or `BrokenPipe` when it happened to be writing;
//!   a stream reset as `INTERNAL` if tonic is built with its `server` feature (as in an
//!   application that is also a tonic server) and otherwise as `UNKNOWN` ("transport error")
//!   whose source chain ends in the h2 stream error; its own deadline as `CANCELLED` ("Timeout
//!   expired"). A tonic channel reconnects by itself: the next call on it succeeds.
//! - The official Spanner client **retries `Commit` by default** on transport errors and on
//!   `UNAVAILABLE`, re-sending the same transaction id, and the emulator answers the repeated
//!   commit with success. So with default settings [`Fault::DropRequest`] and
//!   [`Fault::DropResponse`] on a commit are invisible to the caller (two `Commit` requests in
//!   [`Stats`], the row written once). With the commit retry policy disabled the caller sees:
//!   resets as `is_transport()` errors with no `status()`; [`Ending::Status`] as a service error
//!   with that `status().code`; [`Fault::Stall`] under `with_commit_attempt_timeout` as
//!   `is_timeout()`. Streaming reads cut by a fault are retried transparently.
//!
//! # Example
//!
//! ```no_run
//! # async fn sample() -> Result<(), Box<dyn std::error::Error>> {
//! use spanner_queues_fault_proxy::{Fault, FaultProxy, Method};
//!
//! let proxy = FaultProxy::start("127.0.0.1:9010").await?;
//! // Point the client at `proxy.addr()` instead of the emulator, then:
//! let armed = proxy.inject(
//!     Method::path("/google.spanner.v1.Spanner/Commit"),
//!     Fault::DropResponse,
//! );
//! // ... run a transaction (commit retries disabled): its commit is applied, but the client
//! // sees a transport error ...
//! let fired = armed.fired().await?;
//! assert_eq!(fired.upstream_status, Some(tonic::Code::Ok));
//! assert_eq!(proxy.stats().forwarded_to("/Commit"), 1);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tonic::Code;

/// The `grpc-message` the proxy puts on statuses it makes up.
const INJECTED_MESSAGE: &str = "fault injected by FaultProxy";

/// Errors from [`FaultProxy`] and [`ArmedFault`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FaultProxyError {
    /// The proxy could not listen on `127.0.0.1`. Nothing was started.
    #[error("could not listen on 127.0.0.1")]
    Bind(#[source] io::Error),

    /// The proxy was stopped or dropped before the fault fired.
    #[error("the proxy stopped before the fault fired")]
    Stopped,

    /// [`ArmedFault::disarm`] removed the fault before it fired.
    #[error("the fault was disarmed before it fired")]
    Disarmed,

    /// The fault matched a request but could not be applied, for example because the response
    /// stream ended before [`Fault::ResetMidStream`] reached its message count. The call went
    /// through unharmed (or failed on its own).
    #[error("the fault matched a request but was not applied: {reason}")]
    #[non_exhaustive]
    NotApplied {
        /// Why the fault could not be applied.
        reason: String,
    },
}

/// What the proxy does to the one call a fault fires on.
///
/// Faults that end the client's call early use an [`Ending`] (by default
/// [`Ending::ResetConnection`]); choose another with [`Fault::with_ending`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Do not forward the request: read it to its end, then end the client's call. The upstream
    /// never sees the request, so a commit is **not** applied.
    DropRequest,
    /// Forward the request, wait until the upstream has fully answered (headers, every message
    /// and the trailers), discard the answer, then end the client's call. A commit **is** applied,
    /// yet the client sees an error.
    ///
    /// On a server-streaming call this waits for the whole stream to end.
    DropResponse,
    /// Like [`Fault::DropResponse`], but hold the (discarded) answer for the given time after the
    /// upstream finished before ending the client's call. If the client gives up first (its
    /// deadline), the call simply ends there and [`FaultFired::client_gave_up`] is true.
    DelayResponseThenDrop(Duration),
    /// Forward the request, wait for the full answer, discard it and never reply: the call hangs
    /// until the client gives up (its deadline or a cancellation), which is how a client gets
    /// `DEADLINE_EXCEEDED` for a commit that was applied. Without a client deadline the call
    /// hangs until the proxy stops. The [`Ending`] is not used.
    Stall,
    /// Forward the request and pass the response headers and the first `after_messages` gRPC
    /// messages (length-prefixed frames, counted in the body), then end the call. With `0`, only
    /// the response headers get through. If the response ends before that many messages, it
    /// passes unharmed and [`ArmedFault::fired`] reports [`FaultProxyError::NotApplied`].
    ResetMidStream {
        /// How many response messages reach the client before the call is cut.
        after_messages: u32,
    },
    /// Reset the client's connection as soon as the request's headers arrive, without reading or
    /// forwarding anything. The [`Ending`] is not used: this always resets the connection.
    ResetConnection,
    /// Forward the request, wait until the upstream has fully answered, and hold the answer
    /// until [`ArmedFault::release`] is called (or the [`ArmedFault`] is dropped); then pass it
    /// on unchanged. A commit **is** applied, and the client sees it succeed, only late: the
    /// fault fires ([`ArmedFault::fired`] resolves) once the answer is held. If the client gives
    /// up first, its call simply ends there. The [`Ending`] is not used.
    HoldResponse,
}

impl Fault {
    /// The kind of this fault, without its parameters (used as the key of
    /// [`Stats::faults_fired`]).
    pub fn kind(&self) -> FaultKind {
        match self {
            Self::DropRequest => FaultKind::DropRequest,
            Self::DropResponse => FaultKind::DropResponse,
            Self::DelayResponseThenDrop(_) => FaultKind::DelayResponseThenDrop,
            Self::Stall => FaultKind::Stall,
            Self::ResetMidStream { .. } => FaultKind::ResetMidStream,
            Self::ResetConnection => FaultKind::ResetConnection,
            Self::HoldResponse => FaultKind::HoldResponse,
        }
    }

    /// This fault, ending the client's call with `ending` instead of a connection reset.
    ///
    /// [`Fault::ResetConnection`] always resets the connection and ignores `ending`.
    pub fn with_ending(self, ending: Ending) -> Injection {
        let ending = match self {
            Self::ResetConnection => Ending::ResetConnection,
            _ => ending,
        };
        Injection {
            fault: self,
            ending,
        }
    }
}

/// The kind of a [`Fault`], without its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// [`Fault::DropRequest`].
    DropRequest,
    /// [`Fault::DropResponse`].
    DropResponse,
    /// [`Fault::DelayResponseThenDrop`].
    DelayResponseThenDrop,
    /// [`Fault::Stall`].
    Stall,
    /// [`Fault::ResetMidStream`].
    ResetMidStream,
    /// [`Fault::ResetConnection`].
    ResetConnection,
    /// [`Fault::HoldResponse`].
    HoldResponse,
}

/// How the proxy ends a client's call that a [`Fault`] cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Ending {
    /// Reset the client's TCP connection (RST). Every other call on that connection fails too.
    #[default]
    ResetConnection,
    /// Reset only this call's HTTP/2 stream (`RST_STREAM`, reason `INTERNAL_ERROR`, chosen by
    /// hyper). Other calls on the connection are unaffected.
    ResetStream,
    /// End the call with this gRPC status (`grpc-message` says the fault was injected). Mid-stream
    /// the status arrives as trailers after the messages already passed.
    Status(Code),
}

/// A [`Fault`] together with the [`Ending`] it uses; what [`FaultProxy::inject`] arms.
///
/// A plain [`Fault`] converts into an `Injection` with the default [`Ending`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injection {
    fault: Fault,
    ending: Ending,
}

impl Injection {
    /// The fault.
    pub fn fault(&self) -> Fault {
        self.fault
    }

    /// How the client's call ends.
    pub fn ending(&self) -> Ending {
        self.ending
    }
}

impl From<Fault> for Injection {
    fn from(fault: Fault) -> Self {
        fault.with_ending(Ending::default())
    }
}

/// Which requests a fault applies to: a gRPC method, and which of its calls.
///
/// A request matches when its HTTP/2 `:path` ends with the given suffix, so
/// `Method::path("/Commit")` and `Method::path("/google.spanner.v1.Spanner/Commit")` both match
/// Spanner commits. By default the fault fires on the next matching request; [`Method::nth`]
/// picks a later one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    suffix: String,
    nth: u32,
}

impl Method {
    /// Requests whose `:path` ends with `suffix`.
    pub fn path(suffix: impl Into<String>) -> Self {
        Self {
            suffix: suffix.into(),
            nth: 1,
        }
    }

    /// Every request, whatever its method.
    pub fn any() -> Self {
        Self::path("")
    }

    /// Fire on the `n`th matching request counted from the moment the fault is armed (1-based:
    /// `nth(1)` is the next one; `0` is read as `1`).
    ///
    /// Every armed fault counts every matching request on its own. When two faults are due on
    /// the same request, the one armed first fires and the other fires on the next matching
    /// request; so faults armed for the same method with the default count apply in arming order,
    /// one request each.
    pub fn nth(self, n: u32) -> Self {
        Self {
            nth: n.max(1),
            ..self
        }
    }

    /// Whether a request with this `:path` matches.
    pub fn matches(&self, path: &str) -> bool {
        path.ends_with(&self.suffix)
    }
}

/// What happened when a fault fired; returned by [`ArmedFault::fired`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultFired {
    /// The `:path` of the request the fault fired on.
    pub path: String,
    /// The fault and ending that were applied.
    pub injection: Injection,
    /// The proxy's id of the client connection that carried the call (connections are numbered
    /// from 1 in accept order).
    pub connection: u64,
    /// The gRPC status the upstream answered with, when the proxy waited for a full answer
    /// ([`Fault::DropResponse`], [`Fault::DelayResponseThenDrop`], [`Fault::Stall`]); `None` if
    /// the request was not forwarded, the answer was cut, or the upstream call failed.
    pub upstream_status: Option<Code>,
    /// True when the client gave up on the call (deadline or cancellation) before the proxy
    /// ended it.
    pub client_gave_up: bool,
}

/// Counters of what a [`FaultProxy`] has seen since it started; see [`FaultProxy::stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Client connections accepted.
    pub connections: u64,
    /// Client connections the proxy reset on purpose.
    pub connections_reset: u64,
    /// Requests received from clients, by `:path`.
    pub requests: BTreeMap<String, u64>,
    /// Requests forwarded to the upstream, by `:path`.
    pub forwarded: BTreeMap<String, u64>,
    /// Faults applied, by kind (a fault that matched but could not be applied is not counted).
    pub faults_fired: BTreeMap<FaultKind, u64>,
}

impl Stats {
    /// Requests received whose `:path` ends with `suffix`.
    pub fn requests_to(&self, suffix: &str) -> u64 {
        sum_matching(&self.requests, suffix)
    }

    /// Requests forwarded whose `:path` ends with `suffix`.
    pub fn forwarded_to(&self, suffix: &str) -> u64 {
        sum_matching(&self.forwarded, suffix)
    }

    /// How many faults of this kind were applied.
    pub fn fired(&self, kind: FaultKind) -> u64 {
        self.faults_fired.get(&kind).copied().unwrap_or(0)
    }
}

fn sum_matching(counts: &BTreeMap<String, u64>, suffix: &str) -> u64 {
    counts
        .iter()
        .filter(|(path, _)| path.ends_with(suffix))
        .map(|(_, n)| n)
        .sum()
}

/// A gRPC proxy on `127.0.0.1` that forwards every call to one upstream and breaks the calls it
/// is told to. See the [module documentation](self).
///
/// Dropping the proxy (or [`FaultProxy::stop`]) closes the listener and every connection, and
/// makes pending [`ArmedFault::fired`] calls return [`FaultProxyError::Stopped`].
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// Starts a proxy on `127.0.0.1` (a free port) that forwards to `upstream` (`host:port`).
    ///
    /// The upstream is dialled once per client connection, when the client connects; if that
    /// fails, the client's connection is reset.
    ///
    /// # Errors
    /// [`FaultProxyError::Bind`] if no local port can be bound.
    pub async fn start(upstream: impl Into<String>) -> Result<Self, FaultProxyError> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(FaultProxyError::Bind)?;
        let addr = listener.local_addr().map_err(FaultProxyError::Bind)?;
        let shared = Arc::new(Shared {
            upstream: upstream.into(),
            state: Mutex::new(State::default()),
            tasks: Mutex::new(Tasks::default()),
        });
        shared.spawn(accept_loop(listener, Arc::downgrade(&shared)));
        tracing::debug!(%addr, upstream = %shared.upstream, "fault proxy started");
        Ok(Self { addr, shared })
    }

    /// The address clients dial (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The upstream address given to [`FaultProxy::start`].
    pub fn upstream(&self) -> &str {
        &self.shared.upstream
    }

    /// Arms a one-shot fault for a request matching `method`.
    ///
    /// `injection` is a [`Fault`] (with the default [`Ending`]) or the result of
    /// [`Fault::with_ending`].
    pub fn inject(&self, method: Method, injection: impl Into<Injection>) -> ArmedFault {
        let injection = injection.into();
        let (report, receiver) = watch::channel(FireState::Armed);
        let (release, released) = watch::channel(false);
        let mut state = lock(&self.shared.state);
        state.next_fault_id += 1;
        let id = state.next_fault_id;
        if !state.stopped {
            state.armed.push(ArmedEntry {
                id,
                method: method.clone(),
                seen: 0,
                injection,
                report,
                released,
            });
        }
        tracing::debug!(id, ?method, ?injection, "fault armed");
        ArmedFault {
            id,
            method,
            injection,
            report: receiver,
            release,
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Disarms every fault that has not fired yet; returns how many there were.
    pub fn disarm_all(&self) -> usize {
        let mut state = lock(&self.shared.state);
        let removed = std::mem::take(&mut state.armed);
        let count = removed.len();
        for entry in removed {
            entry.report.send_replace(FireState::Disarmed);
        }
        count
    }

    /// A snapshot of the proxy's counters.
    pub fn stats(&self) -> Stats {
        lock(&self.shared.state).stats.clone()
    }

    /// Stops the proxy: closes the listener and every connection (client and upstream), and
    /// waits until all of its tasks have ended.
    pub async fn stop(self) {
        let mut tasks = self.shared.shut_down();
        tasks.shutdown().await;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Dropping the task set aborts every task; the tasks hold the strong references that
        // would otherwise keep `Shared` alive.
        drop(self.shared.shut_down());
    }
}

/// A fault armed with [`FaultProxy::inject`].
///
/// Dropping the handle does not disarm the fault, but it releases a [`Fault::HoldResponse`].
pub struct ArmedFault {
    id: u64,
    method: Method,
    injection: Injection,
    report: watch::Receiver<FireState>,
    release: watch::Sender<bool>,
    shared: Weak<Shared>,
}

impl fmt::Debug for ArmedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArmedFault")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("injection", &self.injection)
            .field("state", &*self.report.borrow())
            .finish_non_exhaustive()
    }
}

impl ArmedFault {
    /// Waits until the fault has been applied, and says what happened.
    ///
    /// For faults that reset the connection this resolves after the socket was reset; for
    /// [`Fault::DropResponse`] and friends, after the upstream answered in full and the answer
    /// was discarded; for [`Fault::Stall`], once the client gave up.
    ///
    /// # Errors
    /// - [`FaultProxyError::NotApplied`]: the fault matched a request but could not be applied.
    /// - [`FaultProxyError::Disarmed`]: the fault was disarmed first.
    /// - [`FaultProxyError::Stopped`]: the proxy stopped first.
    pub async fn fired(&self) -> Result<FaultFired, FaultProxyError> {
        let mut report = self.report.clone();
        let state = report
            .wait_for(|state| !matches!(state, FireState::Armed))
            .await
            .map_err(|_| FaultProxyError::Stopped)?;
        match &*state {
            FireState::Fired(fired) => Ok(fired.clone()),
            FireState::NotApplied(reason) => Err(FaultProxyError::NotApplied {
                reason: reason.clone(),
            }),
            FireState::Disarmed => Err(FaultProxyError::Disarmed),
            FireState::Armed => Err(FaultProxyError::Stopped),
        }
    }

    /// Passes on the answer a [`Fault::HoldResponse`] holds (at once if it is held, as soon as
    /// it is if the fault has not fired yet). Does nothing for other faults.
    pub fn release(&self) {
        self.release.send_replace(true);
    }

    /// Whether the fault has been applied (not merely matched).
    pub fn has_fired(&self) -> bool {
        matches!(*self.report.borrow(), FireState::Fired(_))
    }

    /// Removes the fault if it has not matched a request yet; returns whether it did.
    pub fn disarm(&self) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        let mut state = lock(&shared.state);
        let Some(index) = state.armed.iter().position(|entry| entry.id == self.id) else {
            return false;
        };
        let entry = state.armed.remove(index);
        entry.report.send_replace(FireState::Disarmed);
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Shared state

#[derive(Debug, Clone)]
enum FireState {
    Armed,
    Fired(FaultFired),
    NotApplied(String),
    Disarmed,
}

struct ArmedEntry {
    id: u64,
    method: Method,
    /// Matching requests seen since the fault was armed.
    seen: u32,
    injection: Injection,
    report: watch::Sender<FireState>,
    /// Becomes `true` (or closes) when a held answer may pass.
    released: watch::Receiver<bool>,
}

#[derive(Default)]
struct State {
    next_fault_id: u64,
    next_connection_id: u64,
    armed: Vec<ArmedEntry>,
    stats: Stats,
    stopped: bool,
}

#[derive(Default)]
struct Tasks {
    set: JoinSet<()>,
    stopped: bool,
}

struct Shared {
    upstream: String,
    state: Mutex<State>,
    tasks: Mutex<Tasks>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Runs `future` as a task the proxy owns (aborted when the proxy stops).
    fn spawn<F>(&self, future: F)
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

    fn shut_down(&self) -> JoinSet<()> {
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

    fn is_stopped(&self) -> bool {
        lock(&self.state).stopped
    }

    fn new_connection(&self) -> u64 {
        let mut state = lock(&self.state);
        state.stats.connections += 1;
        state.next_connection_id += 1;
        state.next_connection_id
    }

    /// Counts the request and takes the fault due for it, if any.
    fn take_fault(&self, path: &str) -> Option<ArmedEntry> {
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

    fn count_forwarded(&self, path: &str) {
        let mut state = lock(&self.state);
        *state.stats.forwarded.entry(path.to_owned()).or_default() += 1;
    }
}

/// hyper's executor: every task hyper spawns (one per HTTP/2 stream, plus the driver of each
/// upstream connection) belongs to the proxy, so stopping the proxy ends them.
#[derive(Clone)]
struct Exec(Weak<Shared>);

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
struct Firing {
    shared: Arc<Shared>,
    report: Option<watch::Sender<FireState>>,
    path: String,
    connection: u64,
    injection: Injection,
}

#[derive(Debug, Clone, Copy, Default)]
struct FireDetails {
    upstream_status: Option<Code>,
    client_gave_up: bool,
}

impl Firing {
    fn fire(mut self, details: FireDetails) {
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

    fn not_applied(mut self, reason: impl Into<String>) {
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

// ---------------------------------------------------------------------------------------------
// Connections

async fn accept_loop(listener: TcpListener, shared: Weak<Shared>) {
    loop {
        let accepted = listener.accept().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match accepted {
            Ok((tcp, peer)) => {
                let id = shared.new_connection();
                tracing::debug!(connection = id, %peer, "client connected");
                shared.spawn(serve_client(Arc::clone(&shared), tcp, id));
            }
            Err(error) => {
                // Usually transient (a connection aborted before it was accepted, or file
                // descriptors exhausted): back off briefly instead of spinning.
                tracing::debug!(%error, "accept failed");
                drop(shared);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Commands a request handler sends to the task that drives its client connection.
enum ConnCmd {
    /// Reset the connection (RST), then fire the fault, then answer.
    Reset {
        firing: Option<(Firing, FireDetails)>,
        done: oneshot::Sender<()>,
    },
    /// Answer once everything queued on the connection has been written to the socket.
    Barrier(oneshot::Sender<()>),
}

/// A request handler's view of its client connection.
#[derive(Clone)]
struct ConnHandle {
    id: u64,
    commands: mpsc::UnboundedSender<ConnCmd>,
    closed: watch::Receiver<bool>,
}

impl ConnHandle {
    /// Resets the connection; `firing` fires after the socket is closed (from the connection's
    /// own task, because resetting the connection also ends the caller's task).
    async fn reset(&self, firing: Option<(Firing, FireDetails)>) {
        let (done, wait) = oneshot::channel();
        match self.commands.send(ConnCmd::Reset { firing, done }) {
            Ok(()) => {
                let _ = wait.await;
            }
            Err(mpsc::error::SendError(ConnCmd::Reset {
                firing: Some((firing, _)),
                ..
            })) => firing.not_applied("the client connection had already closed"),
            Err(_) => {}
        }
    }

    /// Waits until every frame already queued on the connection has been written to the socket
    /// (or the connection closed). Frames held back by HTTP/2 flow control are not waited for.
    async fn barrier(&self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(ConnCmd::Barrier(done)).is_ok() {
            let _ = wait.await;
        }
    }

    async fn closed(&self) {
        let mut closed = self.closed.clone();
        let _ = closed.wait_for(|closed| *closed).await;
    }
}

/// What the socket wrapper tells the connection task.
#[derive(Debug, Default)]
struct IoState {
    /// The last write or flush could not complete (socket buffer full).
    write_blocked: AtomicBool,
    /// Close with `SO_LINGER` 0 (a TCP RST) instead of a FIN.
    reset_on_drop: AtomicBool,
}

/// The client socket, instrumented for [`ConnCmd`].
struct ClientIo {
    tcp: TcpStream,
    state: Arc<IoState>,
}

impl ClientIo {
    fn record<T>(&self, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.state
            .write_blocked
            .store(poll.is_pending(), Ordering::Release);
        poll
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.record(poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.record(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_flush(cx);
        this.record(poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

impl Drop for ClientIo {
    fn drop(&mut self) {
        if self.state.reset_on_drop.load(Ordering::Acquire) {
            // Zero linger turns the close into a RST and never blocks.
            let _ = self.tcp.set_zero_linger();
        }
    }
}

/// Per client connection: everything a request handler needs.
struct ConnCtx {
    shared: Arc<Shared>,
    conn: ConnHandle,
    upstream: SendRequest<Incoming>,
}

async fn connect_upstream(
    upstream: &str,
    exec: Exec,
) -> Result<SendRequest<Incoming>, Box<dyn std::error::Error + Send + Sync>> {
    let tcp = TcpStream::connect(upstream).await?;
    let _ = tcp.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http2::Builder::new(exec.clone())
        .handshake(TokioIo::new(tcp))
        .await?;
    hyper::rt::Executor::execute(&exec, async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "upstream connection ended with an error");
        }
    });
    Ok(sender)
}

async fn serve_client(shared: Arc<Shared>, tcp: TcpStream, id: u64) {
    let _ = tcp.set_nodelay(true);
    let exec = Exec(Arc::downgrade(&shared));
    let upstream = match connect_upstream(&shared.upstream, exec.clone()).await {
        Ok(upstream) => upstream,
        Err(error) => {
            tracing::warn!(connection = id, upstream = %shared.upstream, %error, "cannot reach the upstream; resetting the client connection");
            let _ = tcp.set_zero_linger();
            return;
        }
    };
    let (commands, mut command_rx) = mpsc::unbounded_channel();
    let (closed_tx, closed) = watch::channel(false);
    let io_state = Arc::new(IoState::default());
    let io = ClientIo {
        tcp,
        state: Arc::clone(&io_state),
    };
    let ctx = Arc::new(ConnCtx {
        shared: Arc::clone(&shared),
        conn: ConnHandle {
            id,
            commands,
            closed,
        },
        upstream,
    });
    let service = hyper::service::service_fn(move |request| {
        let ctx = Arc::clone(&ctx);
        async move { ctx.handle(request).await }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(exec);
    // Forward the upstream's headers unchanged.
    builder.auto_date_header(false);
    let connection = Box::pin(builder.serve_connection(TokioIo::new(io), service));

    let (connection, resets) = drive(connection, &mut command_rx, &io_state).await;
    if resets.is_empty() {
        tracing::debug!(connection = id, "client connection closed");
        let _ = closed_tx.send(true);
        return;
    }
    io_state.reset_on_drop.store(true, Ordering::Release);
    drop(connection);
    lock(&shared.state).stats.connections_reset += 1;
    tracing::debug!(connection = id, "client connection reset");
    let _ = closed_tx.send(true);
    for (firing, done) in resets {
        if let Some((firing, details)) = firing {
            firing.fire(details);
        }
        let _ = done.send(());
    }
}

type ResetRequest = (Option<(Firing, FireDetails)>, oneshot::Sender<()>);

/// Drives the client connection until it ends (returns no resets) or a handler asks for a reset
/// (returns the still-open connection, for the caller to drop as a RST, and the requests).
async fn drive<C>(
    mut connection: Pin<Box<C>>,
    commands: &mut mpsc::UnboundedReceiver<ConnCmd>,
    io_state: &IoState,
) -> (Pin<Box<C>>, Vec<ResetRequest>)
where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let mut barriers: Vec<oneshot::Sender<()>> = Vec::new();
    let mut resets: Vec<ResetRequest> = Vec::new();
    let mut commands_open = true;
    poll_fn(|cx| {
        while commands_open {
            match commands.poll_recv(cx) {
                Poll::Ready(Some(ConnCmd::Reset { firing, done })) => resets.push((firing, done)),
                Poll::Ready(Some(ConnCmd::Barrier(done))) => barriers.push(done),
                Poll::Ready(None) => commands_open = false,
                Poll::Pending => break,
            }
        }
        if !resets.is_empty() {
            return Poll::Ready(());
        }
        if let Poll::Ready(result) = connection.as_mut().poll(cx) {
            if let Err(error) = result {
                tracing::debug!(%error, "client connection ended with an error");
            }
            return Poll::Ready(());
        }
        // The connection wrote all it could and is waiting: queued frames are on the wire
        // unless the socket itself pushed back.
        if !barriers.is_empty() && !io_state.write_blocked.load(Ordering::Acquire) {
            for barrier in barriers.drain(..) {
                let _ = barrier.send(());
            }
        }
        Poll::Pending
    })
    .await;
    (connection, resets)
}

// ---------------------------------------------------------------------------------------------
// Requests

/// Errors a handler or response body hands to hyper, which turns them into `RST_STREAM`.
#[derive(Debug, thiserror::Error)]
enum ProxyError {
    #[error("call cut by an injected fault")]
    Injected,
    #[error("client connection closed")]
    Closed,
    /// Keeps hyper's error (and the HTTP/2 reason inside it) as the source, so an upstream
    /// `RST_STREAM` reaches the client with the same reason code.
    #[error("upstream call failed")]
    Upstream(#[source] hyper::Error),
}

impl ConnCtx {
    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let path = request.uri().path().to_owned();
        let Some(entry) = self.shared.take_fault(&path) else {
            let response = self.forward(request).await?;
            return Ok(response.map(ProxyBody::Pass));
        };
        let injection = entry.injection;
        tracing::debug!(%path, connection = self.conn.id, fault = ?injection.fault, "fault matched a request");
        let firing = Firing {
            shared: Arc::clone(&self.shared),
            report: Some(entry.report),
            path,
            connection: self.conn.id,
            injection,
        };
        match injection.fault {
            Fault::ResetConnection => {
                self.conn
                    .reset(Some((firing, FireDetails::default())))
                    .await;
                self.conn.closed().await;
                Err(ProxyError::Closed)
            }
            Fault::DropRequest => {
                // Let the client finish sending, so the request is "on the wire" when it is lost.
                let _ = request.into_body().collect().await;
                self.end_call(injection.ending, firing, FireDetails::default())
                    .await
            }
            Fault::DropResponse | Fault::DelayResponseThenDrop(_) | Fault::Stall => {
                self.hold_reply(request, injection, firing).await
            }
            Fault::HoldResponse => self.hold_then_pass(request, firing, entry.released).await,
            Fault::ResetMidStream { after_messages } => {
                let response = match self.forward(request).await {
                    Ok(response) => response,
                    Err(error) => {
                        firing.not_applied(format!("the upstream call failed: {error}"));
                        return Err(error);
                    }
                };
                let (parts, body) = response.into_parts();
                if body.is_end_stream() {
                    firing.not_applied("the upstream answered with trailers only");
                    return Ok(Response::from_parts(parts, ProxyBody::Pass(body)));
                }
                let cut = MidStream {
                    upstream: Some(body),
                    counter: MessageCounter::default(),
                    target: u64::from(after_messages),
                    ending: injection.ending,
                    conn: self.conn.clone(),
                    firing: Some(firing),
                    cut: None,
                    done: false,
                };
                Ok(Response::from_parts(
                    parts,
                    ProxyBody::MidStream(Box::new(cut)),
                ))
            }
        }
    }

    async fn forward(&self, request: Request<Incoming>) -> Result<Response<Incoming>, ProxyError> {
        let mut upstream = self.upstream.clone();
        upstream.ready().await.map_err(ProxyError::Upstream)?;
        self.shared.count_forwarded(request.uri().path());
        upstream
            .send_request(request)
            .await
            .map_err(ProxyError::Upstream)
    }

    /// Forwards the request and reads the whole answer; returns the upstream's gRPC status.
    async fn exchange(&self, request: Request<Incoming>) -> Result<Option<Code>, ProxyError> {
        let response = self.forward(request).await?;
        let header_status = grpc_status(response.headers());
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(ProxyError::Upstream)?;
        Ok(body.trailers().and_then(grpc_status).or(header_status))
    }

    /// `HoldResponse`: forwards the request, reads the whole answer, reports the fault fired,
    /// and passes the answer on once released.
    async fn hold_then_pass(
        &self,
        request: Request<Incoming>,
        firing: Firing,
        mut released: watch::Receiver<bool>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let response = match self.forward(request).await {
            Ok(response) => response,
            Err(error) => {
                firing.not_applied(format!("the upstream call failed: {error}"));
                return Err(error);
            }
        };
        let (parts, body) = response.into_parts();
        let body = match body.collect().await {
            Ok(body) => body,
            Err(error) => {
                firing.not_applied(format!("the upstream answer failed: {error}"));
                return Err(ProxyError::Upstream(error));
            }
        };
        let trailers = body.trailers().cloned();
        let upstream_status = trailers
            .as_ref()
            .and_then(grpc_status)
            .or_else(|| grpc_status(&parts.headers));
        firing.fire(FireDetails {
            upstream_status,
            client_gave_up: false,
        });
        // A closed channel (the handle dropped) releases the answer too.
        let _ = released.wait_for(|released| *released).await;
        let data = body.to_bytes();
        let held = Held {
            data: (!data.is_empty()).then_some(data),
            trailers,
        };
        Ok(Response::from_parts(parts, ProxyBody::Held(held)))
    }

    /// Ends a call whose response the proxy will not pass on.
    async fn end_call(
        &self,
        ending: Ending,
        firing: Firing,
        details: FireDetails,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        match ending {
            Ending::ResetConnection => {
                self.conn.reset(Some((firing, details))).await;
                self.conn.closed().await;
                Err(ProxyError::Closed)
            }
            Ending::ResetStream => {
                firing.fire(details);
                Err(ProxyError::Injected)
            }
            Ending::Status(code) => {
                firing.fire(details);
                Ok(status_response(code))
            }
        }
    }

    /// `DropResponse`, `DelayResponseThenDrop` and `Stall`. The upstream exchange runs in its own
    /// task, so it completes even when the client gives up first; this future only waits for
    /// the verdict, and its being dropped tells that task the client gave up.
    async fn hold_reply(
        self: &Arc<Self>,
        request: Request<Incoming>,
        injection: Injection,
        firing: Firing,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let (gone_tx, gone_rx) = oneshot::channel::<()>();
        let (verdict_tx, verdict_rx) = oneshot::channel::<Ending>();
        let ctx = Arc::clone(self);
        self.shared.spawn(async move {
            ctx.run_held_reply(request, injection, firing, gone_rx, verdict_tx)
                .await;
        });
        let _client_waiting = gone_tx;
        match verdict_rx.await {
            Ok(Ending::Status(code)) => Ok(status_response(code)),
            Ok(_) => Err(ProxyError::Injected),
            // The connection is being reset (or the proxy is stopping).
            Err(_) => {
                self.conn.closed().await;
                Err(ProxyError::Closed)
            }
        }
    }

    async fn run_held_reply(
        self: Arc<Self>,
        request: Request<Incoming>,
        injection: Injection,
        firing: Firing,
        mut gone: oneshot::Receiver<()>,
        verdict: oneshot::Sender<Ending>,
    ) {
        let upstream_status = match self.exchange(request).await {
            Ok(status) => status,
            Err(error) => {
                // The answer is discarded either way; the fault still applies.
                tracing::debug!(%error, "upstream call under a held reply failed");
                None
            }
        };
        let mut details = FireDetails {
            upstream_status,
            client_gave_up: false,
        };
        match injection.fault {
            Fault::DropResponse => {}
            Fault::DelayResponseThenDrop(delay) => {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = &mut gone => {
                        details.client_gave_up = true;
                        firing.fire(details);
                        return;
                    }
                }
            }
            Fault::Stall => {
                tokio::select! {
                    _ = &mut gone => {}
                    () = self.conn.closed() => {}
                }
                details.client_gave_up = true;
                firing.fire(details);
                return;
            }
            _ => {
                firing.not_applied("internal error: not a held-reply fault");
                return;
            }
        }
        details.client_gave_up = matches!(gone.try_recv(), Err(TryRecvError::Closed));
        match injection.ending {
            Ending::ResetConnection => self.conn.reset(Some((firing, details))).await,
            other => {
                let _ = verdict.send(other);
                firing.fire(details);
            }
        }
    }
}

fn grpc_status(headers: &HeaderMap) -> Option<Code> {
    let value = headers.get("grpc-status")?.to_str().ok()?;
    value.trim().parse::<i32>().ok().map(Code::from_i32)
}

fn status_headers(code: Code, headers: &mut HeaderMap) {
    headers.insert("grpc-status", HeaderValue::from(code as i32));
    headers.insert("grpc-message", HeaderValue::from_static(INJECTED_MESSAGE));
}

/// A trailers-only gRPC response carrying `code`.
fn status_response(code: Code) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::Empty);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    status_headers(code, headers);
    response
}

// ---------------------------------------------------------------------------------------------
// Response bodies

/// The body the proxy sends to the client.
enum ProxyBody {
    /// The upstream's body, frame by frame, as it arrives.
    Pass(Incoming),
    /// No body (trailers-only responses).
    Empty,
    /// The upstream's body, cut after some messages.
    MidStream(Box<MidStream>),
    /// The upstream's whole answer, read before it was passed on.
    Held(Held),
}

/// A whole answer held by [`Fault::HoldResponse`]: its data, then its trailers.
struct Held {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = ProxyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ProxyError>>> {
        match self.get_mut() {
            Self::Pass(body) => Pin::new(body).poll_frame(cx).map_err(ProxyError::Upstream),
            Self::Empty => Poll::Ready(None),
            Self::MidStream(cut) => cut.poll_frame(cx),
            Self::Held(held) => Poll::Ready(
                held.data
                    .take()
                    .map(Frame::data)
                    .or_else(|| held.trailers.take().map(Frame::trailers))
                    .map(Ok),
            ),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Pass(body) => body.is_end_stream(),
            Self::Empty => true,
            Self::MidStream(cut) => cut.done,
            Self::Held(held) => held.data.is_none() && held.trailers.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Pass(body) => body.size_hint(),
            Self::Empty => SizeHint::with_exact(0),
            Self::MidStream(_) => SizeHint::default(),
            Self::Held(_) => SizeHint::default(),
        }
    }
}

type CutFuture = Pin<Box<dyn Future<Output = Option<Result<Frame<Bytes>, ProxyError>>> + Send>>;

/// Passes `target` gRPC messages of the upstream body, then ends the call per `ending`.
struct MidStream {
    upstream: Option<Incoming>,
    counter: MessageCounter,
    target: u64,
    ending: Ending,
    conn: ConnHandle,
    firing: Option<Firing>,
    cut: Option<CutFuture>,
    done: bool,
}

impl MidStream {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ProxyError>>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if let Some(cut) = self.cut.as_mut() {
                let last = ready!(cut.as_mut().poll(cx));
                self.cut = None;
                self.done = true;
                return Poll::Ready(last);
            }
            if self.counter.completed >= self.target {
                // Dropping the upstream body cancels the upstream call.
                self.upstream = None;
                self.cut = Some(Box::pin(cut_call(
                    self.conn.clone(),
                    self.ending,
                    self.firing.take(),
                )));
                continue;
            }
            let Some(upstream) = self.upstream.as_mut() else {
                self.done = true;
                continue;
            };
            let frame = match ready!(Pin::new(upstream).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(error)) => {
                    self.give_up(format!("the upstream stream failed: {error}"));
                    self.done = true;
                    return Poll::Ready(Some(Err(ProxyError::Upstream(error))));
                }
                None => {
                    self.give_up(self.ended_early());
                    self.done = true;
                    return Poll::Ready(None);
                }
            };
            return match frame.into_data() {
                Ok(data) => {
                    let data = match self.counter.feed(&data, self.target) {
                        Some(end) => data.slice(..end),
                        None => data,
                    };
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Err(trailers) => {
                    self.give_up(self.ended_early());
                    self.done = true;
                    Poll::Ready(Some(Ok(trailers)))
                }
            };
        }
    }

    fn ended_early(&self) -> String {
        format!(
            "the response ended after {} of the {} messages to let through",
            self.counter.completed, self.target
        )
    }

    fn give_up(&mut self, reason: String) {
        if let Some(firing) = self.firing.take() {
            firing.not_applied(reason);
        }
    }
}

async fn cut_call(
    conn: ConnHandle,
    ending: Ending,
    firing: Option<Firing>,
) -> Option<Result<Frame<Bytes>, ProxyError>> {
    match ending {
        Ending::Status(code) => {
            if let Some(firing) = firing {
                firing.fire(FireDetails::default());
            }
            let mut trailers = HeaderMap::new();
            status_headers(code, &mut trailers);
            Some(Ok(Frame::trailers(trailers)))
        }
        Ending::ResetStream => {
            // A stream reset discards the stream's queued frames: let the messages out first.
            conn.barrier().await;
            if let Some(firing) = firing {
                firing.fire(FireDetails::default());
            }
            Some(Err(ProxyError::Injected))
        }
        Ending::ResetConnection => {
            conn.barrier().await;
            conn.reset(firing.map(|firing| (firing, FireDetails::default())))
                .await;
            conn.closed().await;
            Some(Err(ProxyError::Closed))
        }
    }
}

/// Counts gRPC messages (1-byte flag, 4-byte big-endian length, payload) in a byte stream.
#[derive(Debug, Default)]
struct MessageCounter {
    header: [u8; 5],
    header_len: usize,
    payload_left: u64,
    completed: u64,
}

impl MessageCounter {
    /// Consumes `chunk`. If message number `stop_at` (1-based) is completed by this chunk,
    /// returns the offset just past its last byte and stops counting there.
    fn feed(&mut self, chunk: &[u8], stop_at: u64) -> Option<usize> {
        let mut pos = 0;
        while self.completed < stop_at && pos < chunk.len() {
            if self.header_len < self.header.len() {
                let take = (self.header.len() - self.header_len).min(chunk.len() - pos);
                self.header[self.header_len..self.header_len + take]
                    .copy_from_slice(&chunk[pos..pos + take]);
                self.header_len += take;
                pos += take;
                if self.header_len < self.header.len() {
                    continue;
                }
                let [_, a, b, c, d] = self.header;
                self.payload_left = u64::from(u32::from_be_bytes([a, b, c, d]));
            } else {
                let available = (chunk.len() - pos) as u64;
                let take = self.payload_left.min(available);
                // `take` is at most `chunk.len() - pos`, so it fits in usize.
                pos += take as usize;
                self.payload_left -= take;
            }
            if self.payload_left == 0 && self.header_len == self.header.len() {
                self.completed += 1;
                self.header_len = 0;
                if self.completed == stop_at {
                    return Some(pos);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::convert::Infallible;

    use bytes::{BufMut, BytesMut};
    use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;
    use pb::spanner_client::SpannerClient;
    use prost::Message as _;
    use tonic::transport::{Channel, Endpoint};

    const COMMIT: &str = "/google.spanner.v1.Spanner/Commit";
    const STREAM: &str = "/google.spanner.v1.Spanner/ExecuteStreamingSql";
    /// Guards every wait so a broken proxy fails the test instead of hanging it.
    const LIMIT: Duration = Duration::from_secs(10);

    async fn within<F: Future>(what: &str, future: F) -> F::Output {
        tokio::time::timeout(LIMIT, future)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
    }

    // -----------------------------------------------------------------------------------------
    // A tiny gRPC upstream: Commit answers at once; ExecuteStreamingSql sends `N` messages for
    // sql "N" (then OK), or keeps the stream open for sql "N open".

    /// A response body fed from a channel.
    struct ChannelBody(mpsc::Receiver<Frame<Bytes>>);

    impl Body for ChannelBody {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.get_mut().0.poll_recv(cx).map(|frame| frame.map(Ok))
        }
    }

    #[derive(Default)]
    struct UpstreamState {
        /// Requests fully received, by path.
        requests: Mutex<BTreeMap<String, usize>>,
        /// Senders of the streams kept open.
        open_streams: Mutex<Vec<mpsc::Sender<Frame<Bytes>>>>,
    }

    struct Upstream {
        addr: SocketAddr,
        state: Arc<UpstreamState>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Upstream {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    impl Upstream {
        async fn start() -> Self {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind upstream");
            let addr = listener.local_addr().expect("upstream addr");
            let state = Arc::new(UpstreamState::default());
            let accept_state = Arc::clone(&state);
            let task = tokio::spawn(async move {
                let mut connections = JoinSet::new();
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let state = Arc::clone(&accept_state);
                    connections.spawn(async move {
                        let service = hyper::service::service_fn(move |request| {
                            upstream_handle(Arc::clone(&state), request)
                        });
                        let _ = hyper::server::conn::http2::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        )
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                    });
                }
            });
            Self { addr, state, task }
        }

        fn requests(&self, path: &str) -> usize {
            lock(&self.state.requests).get(path).copied().unwrap_or(0)
        }

        /// Sends one more message on every open stream; returns how many took it.
        fn push_to_open_streams(&self, token: &str) -> usize {
            let frame = grpc_frame(&pb::PartialResultSet {
                resume_token: Bytes::copy_from_slice(token.as_bytes()),
                ..Default::default()
            });
            lock(&self.state.open_streams)
                .iter()
                .filter(|tx| tx.try_send(Frame::data(frame.clone())).is_ok())
                .count()
        }
    }

    fn grpc_frame(message: &impl prost::Message) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_u8(0);
        buf.put_u32(u32::try_from(message.encoded_len()).expect("small message"));
        message.encode(&mut buf).expect("encode");
        buf.freeze()
    }

    fn ok_trailers() -> HeaderMap {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        trailers
    }

    async fn upstream_handle(
        state: Arc<UpstreamState>,
        request: Request<Incoming>,
    ) -> Result<Response<ChannelBody>, Infallible> {
        let path = request.uri().path().to_owned();
        let body = request
            .into_body()
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .unwrap_or_default();
        let payload = body.slice(body.len().min(5)..);
        *lock(&state.requests).entry(path.clone()).or_default() += 1;
        let (tx, rx) = mpsc::channel(64);
        let mut response = Response::new(ChannelBody(rx));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        match path.as_str() {
            COMMIT => {
                let answer = match pb::CommitRequest::decode(payload) {
                    Ok(_) => pb::CommitResponse {
                        commit_timestamp: Some(prost_types::Timestamp {
                            seconds: 1_700_000_000,
                            nanos: 0,
                        }),
                        ..Default::default()
                    },
                    Err(_) => pb::CommitResponse::default(),
                };
                let _ = tx.try_send(Frame::data(grpc_frame(&answer)));
                let _ = tx.try_send(Frame::trailers(ok_trailers()));
            }
            STREAM => {
                let sql = pb::ExecuteSqlRequest::decode(payload)
                    .map(|request| request.sql)
                    .unwrap_or_default();
                let mut words = sql.split_whitespace();
                let count: u32 = words.next().and_then(|n| n.parse().ok()).unwrap_or(0);
                let keep_open = words.next() == Some("open");
                for i in 0..count {
                    let message = pb::PartialResultSet {
                        resume_token: Bytes::from(i.to_string()),
                        ..Default::default()
                    };
                    let _ = tx.try_send(Frame::data(grpc_frame(&message)));
                }
                if keep_open {
                    lock(&state.open_streams).push(tx);
                } else {
                    let _ = tx.try_send(Frame::trailers(ok_trailers()));
                }
            }
            _ => {
                status_headers(Code::Unimplemented, response.headers_mut());
            }
        }
        Ok(response)
    }

    // -----------------------------------------------------------------------------------------
    // Client helpers

    async fn connect(proxy: &FaultProxy) -> SpannerClient<Channel> {
        let channel = Endpoint::from_shared(format!("http://{}", proxy.addr()))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect to proxy");
        SpannerClient::new(channel)
    }

    async fn commit(
        client: &mut SpannerClient<Channel>,
    ) -> Result<pb::CommitResponse, tonic::Status> {
        commit_with_timeout(client, None).await
    }

    async fn commit_with_timeout(
        client: &mut SpannerClient<Channel>,
        timeout: Option<Duration>,
    ) -> Result<pb::CommitResponse, tonic::Status> {
        let mut request = tonic::Request::new(pb::CommitRequest {
            session: "projects/p/instances/i/databases/d/sessions/s".into(),
            ..Default::default()
        });
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        within("commit", client.commit(request))
            .await
            .map(tonic::Response::into_inner)
    }

    /// An open server-streaming call.
    struct OpenStream(tonic::Streaming<pb::PartialResultSet>);

    impl OpenStream {
        async fn start(
            client: &mut SpannerClient<Channel>,
            sql: &str,
        ) -> Result<Self, tonic::Status> {
            let request = pb::ExecuteSqlRequest {
                session: "projects/p/instances/i/databases/d/sessions/s".into(),
                sql: sql.into(),
                ..Default::default()
            };
            within("stream start", client.execute_streaming_sql(request))
                .await
                .map(|response| Self(response.into_inner()))
        }

        /// The next message's resume token, `Ok(None)` at the end, or the error.
        async fn next(&mut self) -> Result<Option<String>, tonic::Status> {
            within("stream message", self.0.message())
                .await
                .map(|message| {
                    message.map(|m| String::from_utf8_lossy(&m.resume_token).into_owned())
                })
        }

        /// Reads to the end: the tokens received, and the error that ended the stream if any.
        async fn drain(&mut self) -> (Vec<String>, Option<tonic::Status>) {
            let mut tokens = Vec::new();
            loop {
                match self.next().await {
                    Ok(Some(token)) => tokens.push(token),
                    Ok(None) => return (tokens, None),
                    Err(status) => return (tokens, Some(status)),
                }
            }
        }
    }

    /// What a tonic client reports for a connection reset by the proxy: code `Unknown`, with the
    /// transport error as the source, ending in an I/O `ConnectionReset`, or `BrokenPipe` when the
    /// client was writing (a window update, the rest of the request) as the RST arrived.
    fn assert_connection_reset(status: &tonic::Status) {
        assert_eq!(status.code(), Code::Unknown, "{}", describe(status));
        let mut source = std::error::Error::source(status);
        let mut broken = false;
        while let Some(error) = source {
            if let Some(io) = error.downcast_ref::<io::Error>() {
                broken |= matches!(
                    io.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                );
            }
            // Mid-stream the chain ends in an `h2::Error`, which hides its I/O error (no
            // `source()`) and only says so in its text.
            let text = error.to_string();
            broken |= error.source().is_none()
                && (text == "connection reset" || text.ends_with("broken pipe"));
            source = error.source();
        }
        assert!(
            broken,
            "expected an I/O ConnectionReset or BrokenPipe in {}",
            describe(status)
        );
    }

    /// An HTTP/2 `RST_STREAM` (`INTERNAL_ERROR`) as a tonic client reports it: `INTERNAL` when
    /// tonic is built with its `server` feature (which maps h2 errors to codes), otherwise
    /// `UNKNOWN` with the h2 stream error in the source chain.
    fn assert_stream_reset(status: &tonic::Status) {
        let mut text = String::new();
        let mut source = std::error::Error::source(status);
        while let Some(error) = source {
            text.push_str(&error.to_string());
            source = error.source();
        }
        let reset = match status.code() {
            Code::Internal => true,
            Code::Unknown => text.contains("stream error received"),
            _ => false,
        };
        assert!(reset, "expected a stream reset: {}", describe(status));
    }

    fn describe(status: &tonic::Status) -> String {
        let mut text = format!("{:?}: {:?}", status.code(), status.message());
        let mut source = std::error::Error::source(status);
        while let Some(error) = source {
            text.push_str(&format!(" <- {error}"));
            source = error.source();
        }
        text
    }

    async fn setup() -> (Upstream, FaultProxy, SpannerClient<Channel>) {
        let upstream = Upstream::start().await;
        let proxy = FaultProxy::start(upstream.addr.to_string())
            .await
            .expect("start proxy");
        let client = connect(&proxy).await;
        (upstream, proxy, client)
    }

    /// After a fault: a new request on the same client, and one on a new connection, both pass.
    async fn assert_later_calls_pass(proxy: &FaultProxy, client: &mut SpannerClient<Channel>) {
        // tonic reconnects a broken channel lazily; allow it one failed call to notice.
        if let Err(status) = commit(client).await {
            eprintln!(
                "first call on the same channel after the fault: {}",
                describe(&status)
            );
            commit(client)
                .await
                .expect("second call on the same channel passes");
        }
        let mut fresh = connect(proxy).await;
        commit(&mut fresh).await.expect("a new connection works");
    }

    // -----------------------------------------------------------------------------------------
    // Tests

    #[test]
    fn message_counter_finds_the_end_of_the_nth_message() {
        let one = grpc_frame(&pb::PartialResultSet {
            resume_token: Bytes::from_static(b"abc"),
            ..Default::default()
        });
        let empty = Bytes::from_static(&[0, 0, 0, 0, 0]);
        let mut stream = BytesMut::new();
        stream.extend_from_slice(&one);
        stream.extend_from_slice(&empty);
        stream.extend_from_slice(&one);
        let stream = stream.freeze();
        let ends = [one.len(), one.len() + 5, 2 * one.len() + 5];

        for (n, end) in ends.iter().enumerate() {
            let stop_at = n as u64 + 1;
            // Whole buffer at once.
            let mut counter = MessageCounter::default();
            assert_eq!(counter.feed(&stream, stop_at), Some(*end), "n = {stop_at}");
            assert_eq!(counter.completed, stop_at);
            // Byte by byte: the cut comes with the last byte of message n.
            let mut counter = MessageCounter::default();
            let mut cut = None;
            for (i, byte) in stream.iter().enumerate() {
                if let Some(at) = counter.feed(std::slice::from_ref(byte), stop_at) {
                    assert_eq!(at, 1);
                    cut = Some(i + 1);
                    break;
                }
            }
            assert_eq!(cut, Some(*end), "n = {stop_at}, byte by byte");
        }
        // Not reached: the whole chunk passes.
        let mut counter = MessageCounter::default();
        assert_eq!(counter.feed(&stream, 4), None);
        assert_eq!(counter.completed, 3);
    }

    #[test]
    fn method_matching_and_nth() {
        assert!(Method::path("/Commit").matches(COMMIT));
        assert!(Method::path(COMMIT).matches(COMMIT));
        assert!(!Method::path("/Commit").matches(STREAM));
        assert!(Method::any().matches(STREAM));
        assert_eq!(Method::any().nth(0), Method::any().nth(1));
        assert_eq!(
            Fault::ResetConnection
                .with_ending(Ending::ResetStream)
                .ending(),
            Ending::ResetConnection
        );
        assert_eq!(
            Injection::from(Fault::DropResponse).ending(),
            Ending::ResetConnection
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn forwards_unary_and_streaming_calls_unchanged() {
        let (upstream, proxy, mut client) = setup().await;

        let answer = commit(&mut client).await.expect("commit through the proxy");
        assert_eq!(
            answer.commit_timestamp.map(|t| t.seconds),
            Some(1_700_000_000)
        );

        let mut stream = OpenStream::start(&mut client, "3").await.expect("stream");
        let (tokens, error) = stream.drain().await;
        assert_eq!(tokens, ["0", "1", "2"]);
        assert!(error.is_none(), "{error:?}");

        // A stream that stays open: messages flow through as they arrive.
        let mut open = OpenStream::start(&mut client, "1 open")
            .await
            .expect("open stream");
        assert_eq!(open.next().await.expect("first"), Some("0".into()));
        assert_eq!(upstream.push_to_open_streams("later"), 1);
        assert_eq!(open.next().await.expect("pushed"), Some("later".into()));

        let stats = proxy.stats();
        assert_eq!(stats.connections, 1);
        assert_eq!(stats.requests_to(COMMIT), 1);
        assert_eq!(stats.forwarded_to(COMMIT), 1);
        assert_eq!(stats.requests_to(STREAM), 2);
        assert!(stats.faults_fired.is_empty());
        assert_eq!(upstream.requests(COMMIT), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drop_request_never_reaches_the_upstream() {
        let (upstream, proxy, mut client) = setup().await;
        let armed = proxy.inject(Method::path(COMMIT), Fault::DropRequest);

        let status = commit(&mut client).await.expect_err("commit must fail");
        eprintln!("DropRequest/ResetConnection: {}", describe(&status));
        let fired = within("fired", armed.fired()).await.expect("fired");
        assert!(armed.has_fired());
        assert_eq!(fired.path, COMMIT);
        assert_eq!(fired.upstream_status, None);
        assert_eq!(upstream.requests(COMMIT), 0);
        assert_connection_reset(&status);

        assert_later_calls_pass(&proxy, &mut client).await;
        let stats = proxy.stats();
        assert_eq!(stats.fired(FaultKind::DropRequest), 1);
        assert_eq!(stats.connections_reset, 1);
        assert_eq!(stats.forwarded_to(COMMIT) + 1, stats.requests_to(COMMIT));
        assert_eq!(
            upstream.requests(COMMIT) + 1,
            stats.requests_to(COMMIT) as usize
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drop_response_applies_the_commit_but_fails_the_call() {
        let (upstream, proxy, mut client) = setup().await;
        let armed = proxy.inject(Method::path("/Commit"), Fault::DropResponse);

        let status = commit(&mut client).await.expect_err("commit must fail");
        eprintln!("DropResponse/ResetConnection: {}", describe(&status));
        let fired = within("fired", armed.fired()).await.expect("fired");
        assert_eq!(fired.upstream_status, Some(Code::Ok));
        assert_eq!(
            upstream.requests(COMMIT),
            1,
            "the upstream answered the commit"
        );
        assert_connection_reset(&status);

        assert_later_calls_pass(&proxy, &mut client).await;
        assert_eq!(proxy.stats().fired(FaultKind::DropResponse), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn endings_reset_stream_and_status() {
        let (upstream, proxy, mut client) = setup().await;

        let armed = proxy.inject(
            Method::path(COMMIT),
            Fault::DropRequest.with_ending(Ending::ResetStream),
        );
        let status = commit(&mut client).await.expect_err("fails");
        eprintln!("DropRequest/ResetStream: {}", describe(&status));
        within("fired", armed.fired()).await.expect("fired");
        assert_stream_reset(&status);
        assert_eq!(upstream.requests(COMMIT), 0);

        let armed = proxy.inject(
            Method::path(COMMIT),
            Fault::DropResponse.with_ending(Ending::Status(Code::Unavailable)),
        );
        let status = commit(&mut client).await.expect_err("fails");
        eprintln!("DropResponse/Status(Unavailable): {}", describe(&status));
        within("fired", armed.fired()).await.expect("fired");
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.message(), INJECTED_MESSAGE);
        assert_eq!(upstream.requests(COMMIT), 1);

        // Stream-level endings leave the connection alone: the same client goes on at once.
        commit(&mut client).await.expect("next commit passes");
        assert_eq!(proxy.stats().connections, 1);
        assert_eq!(proxy.stats().connections_reset, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reset_connection_fires_at_once() {
        let (upstream, proxy, mut client) = setup().await;
        let armed = proxy.inject(Method::path(COMMIT), Fault::ResetConnection);
        let status = commit(&mut client).await.expect_err("fails");
        eprintln!("ResetConnection: {}", describe(&status));
        within("fired", armed.fired()).await.expect("fired");
        assert_connection_reset(&status);
        assert_eq!(upstream.requests(COMMIT), 0);
        assert_later_calls_pass(&proxy, &mut client).await;
        assert_eq!(proxy.stats().fired(FaultKind::ResetConnection), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stall_holds_the_reply_until_the_client_gives_up() {
        let (upstream, proxy, mut client) = setup().await;
        let armed = proxy.inject(Method::path(COMMIT), Fault::Stall);
        let status = commit_with_timeout(&mut client, Some(Duration::from_millis(300)))
            .await
            .expect_err("times out");
        eprintln!("Stall (client deadline 300ms): {}", describe(&status));
        let fired = within("fired", armed.fired()).await.expect("fired");
        assert!(fired.client_gave_up);
        assert_eq!(fired.upstream_status, Some(Code::Ok));
        assert_eq!(upstream.requests(COMMIT), 1);
        assert_eq!(status.code(), Code::Cancelled);
        // The connection was not touched.
        commit(&mut client).await.expect("next commit passes");
        assert_eq!(proxy.stats().connections_reset, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delay_then_drop_resets_after_the_delay_or_sees_the_client_give_up() {
        let (upstream, proxy, mut client) = setup().await;

        let armed = proxy.inject(
            Method::path(COMMIT),
            Fault::DelayResponseThenDrop(Duration::from_millis(100)),
        );
        let status = commit(&mut client).await.expect_err("fails");
        eprintln!(
            "DelayResponseThenDrop(100ms), no deadline: {}",
            describe(&status)
        );
        let fired = within("fired", armed.fired()).await.expect("fired");
        assert!(!fired.client_gave_up);
        assert_eq!(fired.upstream_status, Some(Code::Ok));
        assert_connection_reset(&status);
        assert_later_calls_pass(&proxy, &mut client).await;

        let armed = proxy.inject(
            Method::path(COMMIT),
            Fault::DelayResponseThenDrop(Duration::from_secs(3600)),
        );
        let status = commit_with_timeout(&mut client, Some(Duration::from_millis(200)))
            .await
            .expect_err("times out");
        let fired = within("fired", armed.fired()).await.expect("fired");
        assert!(fired.client_gave_up);
        assert_eq!(status.code(), Code::Cancelled);
        assert_eq!(upstream.requests(COMMIT), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hold_response_passes_the_answer_once_released() {
        let (upstream, proxy, client) = setup().await;
        let armed = proxy.inject(Method::path(COMMIT), Fault::HoldResponse);
        let mut held_client = client.clone();
        let call = tokio::spawn(async move { commit(&mut held_client).await });
        let fired = within("fired", armed.fired()).await.expect("fired");
        assert_eq!(fired.upstream_status, Some(Code::Ok));
        assert!(!fired.client_gave_up);
        assert_eq!(upstream.requests(COMMIT), 1, "the upstream answered");
        // Held: other calls pass meanwhile, and the held one has no answer yet.
        let mut other = client.clone();
        commit(&mut other).await.expect("another commit passes");
        assert!(!call.is_finished(), "the answer was passed before release");
        armed.release();
        let answer = within("held commit", call).await.expect("joined");
        answer.expect("the held answer arrives unchanged");
        assert_eq!(proxy.stats().fired(FaultKind::HoldResponse), 1);
        assert_eq!(proxy.stats().connections_reset, 0);

        // Dropping the handle releases a held answer too.
        let armed = proxy.inject(Method::path(COMMIT), Fault::HoldResponse);
        let mut held_client = client.clone();
        let call = tokio::spawn(async move { commit(&mut held_client).await });
        within("fired", armed.fired()).await.expect("fired");
        drop(armed);
        let answer = within("held commit", call).await.expect("joined");
        answer.expect("released by the drop");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reset_mid_stream_passes_n_messages() {
        let (upstream, proxy, mut client) = setup().await;

        for ending in [
            Ending::ResetConnection,
            Ending::ResetStream,
            Ending::Status(Code::Unavailable),
        ] {
            let armed = proxy.inject(
                Method::path(STREAM),
                Fault::ResetMidStream { after_messages: 2 }.with_ending(ending),
            );
            let mut stream = OpenStream::start(&mut client, "5 open")
                .await
                .expect("stream");
            let (tokens, error) = stream.drain().await;
            let status = error.expect("the stream ends with an error");
            eprintln!(
                "ResetMidStream(2)/{ending:?}: {tokens:?} then {}",
                describe(&status)
            );
            assert_eq!(tokens, ["0", "1"], "{ending:?}");
            within("fired", armed.fired()).await.expect("fired");
            match ending {
                Ending::ResetConnection => assert_connection_reset(&status),
                Ending::Status(code) => assert_eq!(status.code(), code),
                _ => assert_stream_reset(&status),
            }
            assert_later_calls_pass(&proxy, &mut client).await;
        }

        // Zero messages: only the headers get through.
        let armed = proxy.inject(
            Method::path(STREAM),
            Fault::ResetMidStream { after_messages: 0 }.with_ending(Ending::ResetStream),
        );
        let mut stream = OpenStream::start(&mut client, "5 open")
            .await
            .expect("headers arrive");
        assert_eq!(stream.drain().await.0, Vec::<String>::new());
        within("fired", armed.fired()).await.expect("fired");

        // A stream shorter than the cut passes unharmed, and the fault reports why.
        let armed = proxy.inject(
            Method::path(STREAM),
            Fault::ResetMidStream { after_messages: 9 },
        );
        let mut stream = OpenStream::start(&mut client, "3").await.expect("stream");
        let (tokens, error) = stream.drain().await;
        assert_eq!(tokens, ["0", "1", "2"]);
        assert!(error.is_none(), "{error:?}");
        assert!(matches!(
            within("fired", armed.fired()).await,
            Err(FaultProxyError::NotApplied { .. })
        ));
        assert!(!armed.has_fired());
        assert_eq!(proxy.stats().fired(FaultKind::ResetMidStream), 4);
        assert_eq!(upstream.requests(STREAM), 5);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nth_and_queued_faults_fire_once_each_in_order() {
        let (upstream, proxy, mut client) = setup().await;
        let third = proxy.inject(
            Method::path(COMMIT).nth(3),
            Fault::DropRequest.with_ending(Ending::Status(Code::Aborted)),
        );
        let first = proxy.inject(
            Method::path(COMMIT),
            Fault::DropRequest.with_ending(Ending::Status(Code::Unavailable)),
        );
        let second = proxy.inject(
            Method::path(COMMIT),
            Fault::DropRequest.with_ending(Ending::Status(Code::ResourceExhausted)),
        );
        // A fault for another method is not consumed by commits.
        let other = proxy.inject(Method::path(STREAM), Fault::ResetConnection);

        let codes: Vec<Code> = [
            commit(&mut client).await,
            commit(&mut client).await,
            commit(&mut client).await,
            commit(&mut client).await,
        ]
        .into_iter()
        .map(|result| result.err().map_or(Code::Ok, |status| status.code()))
        .collect();
        assert_eq!(
            codes,
            [
                Code::Unavailable,
                Code::ResourceExhausted,
                Code::Aborted,
                Code::Ok
            ]
        );
        for armed in [&first, &second, &third] {
            assert!(armed.has_fired());
        }
        assert!(!other.has_fired());
        assert!(other.disarm());
        assert!(!other.disarm());
        assert!(matches!(
            other.fired().await,
            Err(FaultProxyError::Disarmed)
        ));
        assert_eq!(upstream.requests(COMMIT), 1);
        assert_eq!(proxy.stats().fired(FaultKind::DropRequest), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_reset_spares_other_connections_but_not_its_own_calls() {
        let (upstream, proxy, mut client) = setup().await;
        let mut other_client = connect(&proxy).await;

        // Open streams on both connections.
        let mut same = OpenStream::start(&mut client, "1 open")
            .await
            .expect("stream");
        let mut other = OpenStream::start(&mut other_client, "1 open")
            .await
            .expect("stream");
        assert_eq!(same.next().await.expect("msg"), Some("0".into()));
        assert_eq!(other.next().await.expect("msg"), Some("0".into()));

        // A stream reset on `client` leaves its other call alone.
        let armed = proxy.inject(
            Method::path(COMMIT),
            Fault::DropResponse.with_ending(Ending::ResetStream),
        );
        commit(&mut client).await.expect_err("fails");
        within("fired", armed.fired()).await.expect("fired");
        assert_eq!(upstream.push_to_open_streams("a"), 2);
        assert_eq!(
            same.next().await.expect("same conn alive"),
            Some("a".into())
        );
        assert_eq!(
            other.next().await.expect("other conn alive"),
            Some("a".into())
        );

        // A connection reset on `client` kills its open stream too, but not `other_client`'s.
        let armed = proxy.inject(Method::path(COMMIT), Fault::DropResponse);
        commit(&mut client).await.expect_err("fails");
        let fired = within("fired", armed.fired()).await.expect("fired");
        assert_eq!(fired.connection, 1);
        let status = same.next().await.expect_err("the reset killed the stream");
        eprintln!("other call on the reset connection: {}", describe(&status));
        assert_connection_reset(&status);
        upstream.push_to_open_streams("b");
        assert_eq!(
            other.next().await.expect("other conn alive"),
            Some("b".into())
        );
        commit(&mut other_client)
            .await
            .expect("other connection still works");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stop_and_drop_end_everything() {
        let (_upstream, proxy, mut client) = setup().await;
        commit(&mut client).await.expect("works");
        let armed = proxy.inject(Method::path(COMMIT).nth(5), Fault::DropRequest);
        let addr = proxy.addr();
        within("stop", proxy.stop()).await;
        assert!(matches!(armed.fired().await, Err(FaultProxyError::Stopped)));
        assert!(!armed.disarm());
        commit(&mut client).await.expect_err("the proxy is gone");
        assert!(TcpStream::connect(addr).await.is_err(), "listener closed");

        let upstream = Upstream::start().await;
        let proxy = FaultProxy::start(upstream.addr.to_string())
            .await
            .expect("start");
        let armed = proxy.inject(Method::any(), Fault::Stall);
        let mut client = connect(&proxy).await;
        let pending = tokio::spawn(async move { commit(&mut client).await });
        // Wait until the stall is in place (the upstream answered), then drop the proxy.
        while upstream.requests(COMMIT) == 0 {
            tokio::task::yield_now().await;
        }
        drop(proxy);
        let result = within("stalled call", pending).await.expect("join");
        assert!(result.is_err());
        assert!(matches!(
            armed.fired().await,
            Err(FaultProxyError::Stopped) | Ok(_)
        ));
    }
}

/// What the official Rust client (`google-cloud-spanner`) reports for each fault on a commit,
/// against the official emulator. Opt-in (`cargo test -- --ignored official_client`): it starts
/// `emulator_main` from the installed Cloud SDK on a free port in 19200-19299.
#[cfg(test)]
mod official_client {
    use super::*;

    use std::fmt::Write as _;
    use std::time::Instant;

    use google_cloud_spanner::client::{DatabaseClient, Spanner};
    use google_cloud_spanner::statement::Statement;
    use googleapis_tonic_google_spanner_admin_database_v1::google::spanner::admin::database::v1 as admin;
    use tonic::transport::{Channel, Endpoint};

    const PROJECT: &str = "fault-proxy";
    const INSTANCE: &str = "fault-proxy-instance";

    /// The instance-admin messages we need (no tonic crate for that API is in the workspace).
    #[derive(Clone, PartialEq, prost::Message)]
    struct CreateInstanceRequest {
        #[prost(string, tag = "1")]
        parent: String,
        #[prost(string, tag = "2")]
        instance_id: String,
        #[prost(message, optional, tag = "3")]
        instance: Option<Instance>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct Instance {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(string, tag = "2")]
        config: String,
        #[prost(string, tag = "3")]
        display_name: String,
        #[prost(int32, tag = "5")]
        node_count: i32,
    }

    /// Any response: only success matters.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Ignored {}

    struct Emulator {
        addr: String,
        _child: tokio::process::Child,
    }

    async fn emulator_binary() -> Option<std::path::PathBuf> {
        let output = tokio::process::Command::new("gcloud")
            .args(["info", "--format=value(installation.sdk_root)"])
            .output()
            .await
            .ok()?;
        let root = String::from_utf8(output.stdout).ok()?;
        let path =
            std::path::Path::new(root.trim()).join("bin/cloud_spanner_emulator/emulator_main");
        path.exists().then_some(path)
    }

    async fn start_emulator() -> Option<Emulator> {
        let binary = emulator_binary().await?;
        let port = (19200..19300)
            .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())?;
        let addr = format!("127.0.0.1:{port}");
        let child = tokio::process::Command::new(binary)
            .args(["--host_port", &addr])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .ok()?;
        // Readiness probe of an external process: poll its port.
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "emulator did not start on {addr}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(Emulator {
            addr,
            _child: child,
        })
    }

    async fn create_instance(channel: Channel) {
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.expect("ready");
        let request = CreateInstanceRequest {
            parent: format!("projects/{PROJECT}"),
            instance_id: INSTANCE.into(),
            instance: Some(Instance {
                name: format!("projects/{PROJECT}/instances/{INSTANCE}"),
                config: format!("projects/{PROJECT}/instanceConfigs/emulator-config"),
                display_name: "fault proxy".into(),
                node_count: 1,
            }),
        };
        grpc.unary(
            tonic::Request::new(request),
            http::uri::PathAndQuery::from_static(
                "/google.spanner.admin.instance.v1.InstanceAdmin/CreateInstance",
            ),
            tonic_prost::ProstCodec::<CreateInstanceRequest, Ignored>::default(),
        )
        .await
        .expect("create instance");
    }

    async fn create_database(channel: Channel, id: &str) -> String {
        let mut admin = admin::database_admin_client::DatabaseAdminClient::new(channel);
        let parent = format!("projects/{PROJECT}/instances/{INSTANCE}");
        admin
            .create_database(admin::CreateDatabaseRequest {
                parent: parent.clone(),
                create_statement: format!("CREATE DATABASE `{id}`"),
                extra_statements: vec![
                    "CREATE TABLE T (Id INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (Id)".into(),
                ],
                ..Default::default()
            })
            .await
            .expect("create database");
        let name = format!("{parent}/databases/{id}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let database = admin
                .get_database(admin::GetDatabaseRequest { name: name.clone() })
                .await
                .expect("get database")
                .into_inner();
            if database.state == admin::database::State::Ready as i32 {
                return name;
            }
            assert!(Instant::now() < deadline, "database {name} not ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn row_count(db: &DatabaseClient, id: i64) -> i64 {
        let statement = Statement::builder("SELECT COUNT(*) FROM T WHERE Id = @id")
            .add_param("id", id)
            .build();
        let mut rows = db
            .single_use()
            .build()
            .execute_query(statement)
            .await
            .expect("query");
        let row = rows.next().await.expect("one row").expect("row");
        row.get::<i64>(0).expect("count")
    }

    struct Case {
        label: &'static str,
        injection: Option<Injection>,
        commit_timeout: Option<Duration>,
    }

    fn case(label: &'static str, injection: impl Into<Injection>) -> Case {
        Case {
            label,
            injection: Some(injection.into()),
            commit_timeout: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "starts the official emulator (Cloud SDK) on a port in 19200-19299"]
    async fn official_client_commit_errors() {
        let Some(emulator) = start_emulator().await else {
            eprintln!("skipped: emulator_main not found (gcloud info) or no free port");
            return;
        };
        let direct = Endpoint::from_shared(format!("http://{}", emulator.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect to the emulator");
        create_instance(direct.clone()).await;

        let proxy = FaultProxy::start(emulator.addr.clone())
            .await
            .expect("proxy");
        let spanner = Spanner::builder()
            .with_endpoint(format!("http://{}", proxy.addr()))
            .build()
            .await
            .expect("official client");

        let commit = Method::path("/google.spanner.v1.Spanner/Commit");
        let mut cases = vec![
            Case {
                label: "no fault",
                injection: None,
                commit_timeout: None,
            },
            case("DropRequest (reset conn)", Fault::DropRequest),
            case(
                "DropRequest (RST_STREAM)",
                Fault::DropRequest.with_ending(Ending::ResetStream),
            ),
            case(
                "DropRequest (UNAVAILABLE)",
                Fault::DropRequest.with_ending(Ending::Status(Code::Unavailable)),
            ),
            case("ResetConnection", Fault::ResetConnection),
            case("DropResponse (reset conn)", Fault::DropResponse),
            case(
                "DropResponse (RST_STREAM)",
                Fault::DropResponse.with_ending(Ending::ResetStream),
            ),
            case(
                "DropResponse (UNAVAILABLE)",
                Fault::DropResponse.with_ending(Ending::Status(Code::Unavailable)),
            ),
            case(
                "DropResponse (DEADLINE_EXCEEDED)",
                Fault::DropResponse.with_ending(Ending::Status(Code::DeadlineExceeded)),
            ),
            case(
                "DropResponse (INTERNAL)",
                Fault::DropResponse.with_ending(Ending::Status(Code::Internal)),
            ),
            case(
                "DelayResponseThenDrop(200ms)",
                Fault::DelayResponseThenDrop(Duration::from_millis(200)),
            ),
        ];
        cases.push(Case {
            label: "Stall, commit attempt timeout 1s",
            injection: Some(Fault::Stall.into()),
            commit_timeout: Some(Duration::from_secs(1)),
        });

        let mut table = String::from(
            "| case | result | is_timeout | is_exhausted | is_io | is_transport | is_connect | status().code | Commit RPCs | applied | time |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let mut violations = Vec::new();
        for (index, case) in cases.iter().enumerate() {
            // A database per case: the emulator allows one read-write transaction per database
            // at a time, and a dropped commit leaves its transaction open.
            let name = create_database(direct.clone(), &format!("db{index}")).await;
            let db = spanner
                .database_client(name)
                .build()
                .await
                .expect("database client");
            let armed = case
                .injection
                .map(|injection| proxy.inject(commit.clone(), injection));
            let before = proxy.stats().requests_to("/Commit");
            let id = i64::try_from(index).expect("small") + 1;

            let mut runner = db.read_write_transaction();
            if let Some(timeout) = case.commit_timeout {
                runner = runner.with_commit_attempt_timeout(timeout);
            }
            let started = Instant::now();
            let result = tokio::time::timeout(
                Duration::from_secs(60),
                runner.build().run(async |tx| {
                    let statement = Statement::builder("INSERT INTO T (Id, V) VALUES (@id, 'x')")
                        .add_param("id", id)
                        .build();
                    tx.execute_update(statement).await?;
                    Ok(())
                }),
            )
            .await
            .expect("transaction finished");
            let elapsed = started.elapsed();
            let commits = proxy.stats().requests_to("/Commit") - before;
            if let Some(armed) = &armed {
                within_secs(10, armed.fired()).await.expect("fault fired");
            }
            let applied = row_count(&db, id).await;

            let row = match &result {
                Ok(_) => format!(
                    "| {} | Ok | | | | | | | {commits} | {applied} | {elapsed:.1?} |",
                    case.label
                ),
                Err(error) => format!(
                    "| {} | Err: {} | {} | {} | {} | {} | {} | {:?} | {commits} | {applied} | {elapsed:.1?} |",
                    case.label,
                    error.to_string().replace('|', "/"),
                    error.is_timeout(),
                    error.is_exhausted(),
                    error.is_io(),
                    error.is_transport(),
                    error.is_connect(),
                    error.status().map(|status| status.code),
                ),
            };
            let _ = writeln!(table, "{row}");

            // Exactly one transaction was applied, whatever the client saw.
            if applied != 1 && !(result.is_err() && applied == 0) {
                violations.push(row);
            }
        }
        eprintln!("{table}");

        // Streaming reads (ExecuteStreamingSql), cut before the first message.
        let streaming = Method::path("/google.spanner.v1.Spanner/ExecuteStreamingSql");
        let name = create_database(direct.clone(), "streams").await;
        let db = spanner
            .database_client(name)
            .build()
            .await
            .expect("database client");
        db.read_write_transaction()
            .build()
            .run(async |tx| {
                tx.execute_update("INSERT INTO T (Id, V) VALUES (1, 'x'), (2, 'y')")
                    .await?;
                Ok(())
            })
            .await
            .expect("seed rows");
        let mut table = String::from(
            "| query case | result | is_timeout | is_io | is_transport | status().code | ExecuteStreamingSql RPCs |\n|---|---|---|---|---|---|---|\n",
        );
        for (label, injection) in [
            (
                "DropRequest (reset conn)",
                Injection::from(Fault::DropRequest),
            ),
            (
                "ResetMidStream(0) (reset conn)",
                Fault::ResetMidStream { after_messages: 0 }.into(),
            ),
            (
                "ResetMidStream(0) (RST_STREAM)",
                Fault::ResetMidStream { after_messages: 0 }.with_ending(Ending::ResetStream),
            ),
            (
                "ResetMidStream(0) (UNAVAILABLE)",
                Fault::ResetMidStream { after_messages: 0 }
                    .with_ending(Ending::Status(Code::Unavailable)),
            ),
        ] {
            let armed = proxy.inject(streaming.clone(), injection);
            let before = proxy.stats().requests_to("/ExecuteStreamingSql");
            let result = within_secs(60, async {
                let mut rows = db
                    .single_use()
                    .build()
                    .execute_query("SELECT Id FROM T ORDER BY Id")
                    .await?;
                let mut ids = Vec::new();
                while let Some(row) = rows.next().await {
                    ids.push(
                        row?.get::<i64>(0)
                            .map_err(google_cloud_spanner::Error::deser)?,
                    );
                }
                Ok::<_, google_cloud_spanner::Error>(ids)
            })
            .await;
            within_secs(10, armed.fired()).await.expect("fault fired");
            let rpcs = proxy.stats().requests_to("/ExecuteStreamingSql") - before;
            let row = match &result {
                Ok(ids) => format!("| {label} | Ok {ids:?} | | | | | {rpcs} |"),
                Err(error) => format!(
                    "| {label} | Err: {} | {} | {} | {} | {:?} | {rpcs} |",
                    error.to_string().replace('|', "/"),
                    error.is_timeout(),
                    error.is_io(),
                    error.is_transport(),
                    error.status().map(|status| status.code),
                ),
            };
            let _ = writeln!(table, "{row}");
            if let Ok(ids) = &result {
                assert_eq!(ids, &[1, 2], "{row}");
            }
        }
        eprintln!("{table}");
        eprintln!("proxy stats: {:?}", proxy.stats());
        assert!(violations.is_empty(), "{violations:#?}");
    }

    async fn within_secs<F: Future>(seconds: u64, future: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(seconds), future)
            .await
            .expect("in time")
    }
}
