//! The front's settings.

use std::net::SocketAddr;
use std::time::Duration;

/// Settings of a [`Front`](super::Front).
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
    /// Read-write transaction admission: `Some(wait)` admits a database's read-write
    /// transactions one at a time, in arrival order (the official emulator aborts all but one),
    /// taking the slot from a holder idle for `wait` while others wait; `None` forwards every
    /// transaction at once, as the official emulator alone behaves.
    pub admission_wait: Option<Duration>,
}

/// The default [`FrontConfig::admission_wait`]: how long a read-write transaction may stay idle
/// (no call in flight) while others wait for the database, before the next one is admitted and
/// the idle one is aborted. Long enough for any handler between two calls of its transaction,
/// short enough that a client killed mid-transaction stalls the others only briefly.
pub const DEFAULT_ADMISSION_WAIT: Duration = Duration::from_secs(5);

impl FrontConfig {
    /// A configuration forwarding to `backend_grpc`, with Cloud Spanner's defaults.
    pub fn new(backend_grpc: SocketAddr) -> Self {
        Self {
            backend_grpc,
            backend_rest: None,
            lease_duration: Duration::from_secs(10),
            admission_wait: Some(DEFAULT_ADMISSION_WAIT),
        }
    }

    /// Sets the REST gateway address.
    pub fn with_backend_rest(mut self, addr: SocketAddr) -> Self {
        self.backend_rest = Some(addr);
        self
    }

    /// Sets read-write transaction admission ([`FrontConfig::admission_wait`]); `None`
    /// turns it off.
    pub fn with_admission_wait(mut self, wait: Option<Duration>) -> Self {
        self.admission_wait = wait;
        self
    }

    /// Sets the lease duration.
    pub fn with_lease_duration(mut self, lease: Duration) -> Self {
        self.lease_duration = lease;
        self
    }
}
