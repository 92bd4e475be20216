//! The queue-aware front: a gRPC (HTTP/2) and REST (HTTP/1.1) server that forwards everything to
//! the official emulator and rewrites only what concerns queues.

mod admin;
mod grpc;
mod lease;
mod mutations;
mod proto;
mod receive;
mod server;
mod spanner;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use server::FrontError;

/// Settings of a [`Front`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FrontConfig {
    /// gRPC address of the official emulator (`emulator_main`).
    pub backend_grpc: SocketAddr,
    /// REST address of the official emulator's gateway, if any. HTTP/1.1 requests arriving at
    /// the front are proxied there.
    pub backend_rest: Option<SocketAddr>,
    /// Lease granted by `RECEIVE_<Q>` and extended by `RENEWLEASE_<Q>` (Cloud Spanner: about
    /// 10 seconds, not configurable).
    pub lease_duration: Duration,
}

impl FrontConfig {
    /// A configuration forwarding to `backend_grpc`, with Cloud Spanner's defaults.
    pub fn new(backend_grpc: SocketAddr) -> Self {
        Self {
            backend_grpc,
            backend_rest: None,
            lease_duration: Duration::from_secs(10),
        }
    }

    /// Sets the REST gateway address.
    pub fn with_backend_rest(mut self, addr: SocketAddr) -> Self {
        self.backend_rest = Some(addr);
        self
    }

    /// Sets the lease duration.
    pub fn with_lease_duration(mut self, lease: Duration) -> Self {
        self.lease_duration = lease;
        self
    }
}

/// A running front. Dropping the handle does not stop it; call [`Front::shutdown`].
#[derive(Debug, Clone)]
pub struct Front {
    inner: Arc<server::Shared>,
    addrs: Vec<SocketAddr>,
    cancel: CancellationToken,
}

impl Front {
    /// Binds every address in `listen` (port 0 picks a free port) and starts serving.
    pub async fn start(config: FrontConfig, listen: &[SocketAddr]) -> Result<Self, FrontError> {
        let cancel = CancellationToken::new();
        let inner = Arc::new(server::Shared::new(config)?);
        let mut addrs = Vec::with_capacity(listen.len());
        for addr in listen {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| FrontError::Bind {
                    addr: *addr,
                    source,
                })?;
            let local = listener.local_addr().map_err(|source| FrontError::Bind {
                addr: *addr,
                source,
            })?;
            addrs.push(local);
            tokio::spawn(server::serve(listener, Arc::clone(&inner), cancel.clone()));
        }
        Ok(Self {
            inner,
            addrs,
            cancel,
        })
    }

    /// The addresses the front listens on, in the order given to [`Front::start`].
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops accepting connections and closes open ones.
    pub fn shutdown(&self) {
        self.cancel.cancel();
    }

    /// Points the REST proxy at a gateway started after the front (the gateway needs the
    /// front's address first).
    pub fn set_backend_rest(&self, addr: SocketAddr) {
        self.inner.set_backend_rest(addr);
    }
}
