//! The queue-aware front: a gRPC (HTTP/2) and REST (HTTP/1.1) server that forwards everything to
//! the official emulator and rewrites only what concerns queues.

mod admin;
mod admission;
mod batch_write;
mod calls;
mod commit;
mod config;
mod deferred;
mod floor;
mod grpc;
mod held;
mod intervals;
mod lease;
mod limits;
mod mutations;
mod plan;
mod proto;
mod query;
mod reads;
mod receive;
mod rpc;
mod server;
mod shared;
mod state;
mod sync;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use config::{DEFAULT_ADMISSION_WAIT, FrontConfig};
pub use shared::FrontError;

/// A running front. Dropping the handle does not stop it; call [`Front::shutdown`].
#[derive(Debug, Clone)]
pub struct Front {
    inner: Arc<shared::Shared>,
    addrs: Vec<SocketAddr>,
    cancel: CancellationToken,
}

impl Front {
    /// Binds every address in `listen` (port 0 picks a free port) and starts serving.
    pub async fn start(config: FrontConfig, listen: &[SocketAddr]) -> Result<Self, FrontError> {
        let cancel = CancellationToken::new();
        let inner = Arc::new(shared::Shared::new(config)?);
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
