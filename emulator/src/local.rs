//! The whole local stack in one value: the official emulator's processes plus the queue front.

use std::net::SocketAddr;
use std::time::Duration;

use crate::backend::{BackendError, EmulatorBinaries, OfficialEmulator, Placeholder};
use crate::front::{Front, FrontConfig, FrontError};

/// Errors starting a [`LocalEmulator`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalEmulatorError {
    /// The official emulator could not be started.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The front could not be started.
    #[error(transparent)]
    Front(#[from] FrontError),
}

/// Options for [`LocalEmulator::start`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LocalEmulatorOptions {
    /// Addresses the front listens on; the first one is the main (gRPC + REST) address.
    pub listen: Vec<SocketAddr>,
    /// Use an official emulator that is already running at this gRPC address instead of
    /// starting one (then there is no REST gateway unless `existing_rest` is set).
    pub existing_backend: Option<SocketAddr>,
    /// REST gateway of `existing_backend`, if any. Note that REST DDL sent through an existing
    /// gateway reaches the official emulator directly and is not rewritten.
    pub existing_rest: Option<SocketAddr>,
    /// What the REST gateway runs as its placeholder gRPC binary.
    pub placeholder: Placeholder,
    /// Lease duration (Cloud Spanner: 10 s).
    pub lease_duration: Duration,
    /// Read-write transaction admission (see [`FrontConfig::admission_wait`]).
    pub admission_wait: Option<Duration>,
}

impl LocalEmulatorOptions {
    /// Listen on a free loopback port; start the official emulator; use a shell-script
    /// placeholder written to the system temp dir.
    pub fn new() -> Self {
        Self {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
            existing_backend: None,
            existing_rest: None,
            placeholder: Placeholder::ShellScriptIn(std::env::temp_dir()),
            lease_duration: Duration::from_secs(10),
            admission_wait: Some(crate::front::DEFAULT_ADMISSION_WAIT),
        }
    }
}

impl Default for LocalEmulatorOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// A queue-aware emulator: the official emulator's processes and the front before them.
#[derive(Debug)]
pub struct LocalEmulator {
    official: Option<OfficialEmulator>,
    backend: SocketAddr,
    front: Front,
}

impl LocalEmulator {
    /// Starts everything and returns once the front accepts connections.
    pub async fn start(options: LocalEmulatorOptions) -> Result<Self, LocalEmulatorError> {
        let (official, backend_grpc) = match options.existing_backend {
            Some(addr) => (None, addr),
            None => {
                let bins = EmulatorBinaries::locate()?;
                let official = OfficialEmulator::start_grpc(&bins).await?;
                let addr = official.grpc_addr();
                (Some((official, bins)), addr)
            }
        };
        let mut config = FrontConfig::new(backend_grpc)
            .with_lease_duration(options.lease_duration)
            .with_admission_wait(options.admission_wait);
        if let Some(rest) = options.existing_rest {
            config = config.with_backend_rest(rest);
        }
        let front = Front::start(config, &options.listen).await?;
        let official = match official {
            Some((mut official, bins)) => {
                let grpc_target = loopback_of(front.addrs()[0]);
                let rest = official
                    .start_gateway(&bins, grpc_target, &options.placeholder)
                    .await?;
                front.set_backend_rest(rest);
                Some(official)
            }
            None => None,
        };
        Ok(Self {
            official,
            backend: backend_grpc,
            front,
        })
    }

    /// The front's main address (gRPC and REST).
    pub fn addr(&self) -> SocketAddr {
        self.front.addrs()[0]
    }

    /// The gRPC address of the official emulator behind the front (it does not speak queues;
    /// useful to compare the front's overhead).
    pub fn backend_addr(&self) -> SocketAddr {
        self.backend
    }

    /// Every address the front listens on.
    pub fn addrs(&self) -> &[SocketAddr] {
        self.front.addrs()
    }

    /// Process ids of the official emulator's processes (empty with an existing backend).
    pub fn child_pids(&self) -> Vec<u32> {
        self.official
            .as_ref()
            .map(OfficialEmulator::pids)
            .unwrap_or_default()
    }

    /// Stops the front and the official emulator.
    pub async fn stop(self) {
        self.front.shutdown();
        if let Some(official) = self.official {
            official.stop().await;
        }
    }
}

/// The gateway must dial the front on an address that accepts connections: an unspecified
/// listen address (0.0.0.0) is reached through loopback.
fn loopback_of(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::from(([127, 0, 0, 1], addr.port()))
    } else {
        addr
    }
}
