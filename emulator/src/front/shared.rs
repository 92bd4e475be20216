//! What every connection shares: the settings, the backend channel and clients, and the state
//! of each database.

use std::net::SocketAddr;
use std::sync::RwLock;

use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tonic::body::Body;
use tonic::transport::{Channel, Endpoint};

use super::config::FrontConfig;
use super::proto::admin::database_admin_client::DatabaseAdminClient;
use super::proto::longrunning::operations_client::OperationsClient;
use super::proto::spanner::spanner_client::SpannerClient;
use super::state::Databases;

/// Errors starting the front.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrontError {
    /// A listening address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The backend address is not a valid endpoint.
    #[error("invalid backend address {addr}")]
    Backend {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: tonic::transport::Error,
    },
}

/// State shared by every connection.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: FrontConfig,
    /// A lazily connected channel to `emulator_main`.
    pub(crate) backend: Channel,
    pub(crate) databases: Databases,
    rest_addr: RwLock<Option<SocketAddr>>,
    pub(crate) rest_client: HttpClient<HttpConnector, Body>,
}

impl Shared {
    pub(crate) fn new(config: FrontConfig) -> Result<Self, FrontError> {
        let backend = Endpoint::from_shared(format!("http://{}", config.backend_grpc))
            .map_err(|source| FrontError::Backend {
                addr: config.backend_grpc,
                source,
            })?
            .connect_lazy();
        let rest_client = HttpClient::builder(TokioExecutor::new()).build_http();
        Ok(Self {
            rest_addr: RwLock::new(config.backend_rest),
            databases: Databases::new(config.admission_wait),
            config,
            backend,
            rest_client,
        })
    }

    pub(crate) fn set_backend_rest(&self, addr: SocketAddr) {
        if let Ok(mut slot) = self.rest_addr.write() {
            *slot = Some(addr);
        }
    }

    /// A Spanner data-plane client on the backend channel.
    pub(crate) fn spanner(&self) -> SpannerClient<Channel> {
        SpannerClient::new(self.backend.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// A database admin client on the backend channel.
    pub(crate) fn admin(&self) -> DatabaseAdminClient<Channel> {
        DatabaseAdminClient::new(self.backend.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// A long-running operations client on the backend channel.
    pub(crate) fn operations(&self) -> OperationsClient<Channel> {
        OperationsClient::new(self.backend.clone())
    }

    /// The REST gateway's address, if known.
    pub(crate) fn rest_addr(&self) -> Option<SocketAddr> {
        self.rest_addr.read().ok().and_then(|slot| *slot)
    }
}
