//! [`FaultProxy`]: starts the listener, arms faults, hands out counters, stops everything.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::armed::ArmedFault;
use crate::conn::accept_loop;
use crate::error::FaultProxyError;
use crate::plan::{Injection, Method};
use crate::shared::{ArmedEntry, FireState, Shared, State, Tasks, lock};
use crate::stats::{RpcObserver, RpcRecord, Stats};

/// A gRPC proxy on `127.0.0.1` that forwards every call to one upstream and breaks the calls it
/// is told to. See the [crate documentation](crate).
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
    /// fails, the client's connection is reset. The same as
    /// `FaultProxy::builder(upstream).start()`.
    ///
    /// # Errors
    /// [`FaultProxyError::Bind`] if no local port can be bound.
    pub async fn start(upstream: impl Into<String>) -> Result<Self, FaultProxyError> {
        Self::builder(upstream).start().await
    }

    /// A proxy to `upstream` (`host:port`) with options; [`FaultProxyBuilder::start`] starts it.
    pub fn builder(upstream: impl Into<String>) -> FaultProxyBuilder {
        FaultProxyBuilder {
            upstream: upstream.into(),
            observer: None,
        }
    }

    /// The address clients dial (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The upstream address the proxy forwards to.
    pub fn upstream(&self) -> &str {
        &self.shared.upstream
    }

    /// Arms a one-shot fault for a request matching `method`.
    ///
    /// `injection` is a [`Fault`](crate::Fault) (with the default [`Ending`](crate::Ending)) or the result of
    /// [`Fault::with_ending`](crate::Fault::with_ending).
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

/// Options of a [`FaultProxy`]; see [`FaultProxy::builder`].
#[derive(Debug)]
pub struct FaultProxyBuilder {
    upstream: String,
    observer: Option<RpcObserver>,
}

impl FaultProxyBuilder {
    /// Calls `observer` for every call the proxy forwards, once the upstream's response headers
    /// arrive (or the upstream call failed), with the call's kind and timing. It runs on the
    /// call's own task, so it should be quick: logging a line is fine, blocking is not.
    #[must_use]
    pub fn with_rpc_observer(
        mut self,
        observer: impl Fn(&RpcRecord<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(RpcObserver(Arc::new(observer)));
        self
    }

    /// Starts the proxy on `127.0.0.1` (a free port).
    ///
    /// The upstream is dialled once per client connection, when the client connects; if that
    /// fails, the client's connection is reset.
    ///
    /// # Errors
    /// [`FaultProxyError::Bind`] if no local port can be bound.
    pub async fn start(self) -> Result<FaultProxy, FaultProxyError> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(FaultProxyError::Bind)?;
        let addr = listener.local_addr().map_err(FaultProxyError::Bind)?;
        let shared = Arc::new(Shared {
            upstream: self.upstream,
            state: Mutex::new(State::default()),
            tasks: Mutex::new(Tasks::default()),
            observer: self.observer,
        });
        shared.spawn(accept_loop(listener, Arc::downgrade(&shared)));
        tracing::debug!(%addr, upstream = %shared.upstream, "fault proxy started");
        Ok(FaultProxy { addr, shared })
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Dropping the task set aborts every task; the tasks hold the strong references that
        // would otherwise keep `Shared` alive.
        drop(self.shared.shut_down());
    }
}
