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
//! # Counting RPCs
//!
//! With no fault armed the proxy is a counter: [`FaultProxy::stats`] counts every call it
//! forwarded by kind of RPC (the method, and for SQL calls what the statement does, such as
//! `ExecuteStreamingSql:RECEIVE` or `ExecuteSql:INSERT`), with the time until the upstream's
//! response headers and the rows its result sets returned ([`Stats::rpcs`]);
//! [`FaultProxyBuilder::with_rpc_observer`] sees each call as it is answered. The proxy reads
//! each request whole before forwarding it (Spanner's RPCs send one request message) and
//! decodes only the fields it counts.
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
//! use spanner_queues_fault_proxy::{Code, Fault, FaultProxy, Method};
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
//! assert_eq!(fired.upstream_status, Some(Code::Ok));
//! assert_eq!(proxy.stats().forwarded_to("/Commit"), 1);
//! # Ok(()) }
//! ```

// Layers, lowest first (a module uses only modules above it in this list; checked by
// checks/tests/layers.rs):
// - `error`, `plan`: the public vocabulary (errors, faults and how they match); no I/O.
// - `stats`: the counters, and what the proxy reads of calls to fill them; no I/O.
// - `shared`: the state every task of one proxy shares (armed faults, counters, tasks) and
//   `Firing`, a matched fault until it is applied.
// - `armed`: `ArmedFault`, the test's handle on one armed fault.
// - `link`: a request handler's view of its client connection.
// - `body`: the response bodies the proxy sends (passed through, held, or cut mid-stream).
// - `forward`: one request: forward it, or apply the fault due for it.
// - `conn`: client connections (accept, serve, reset) and their upstream connections.
// - `proxy`: `FaultProxy`, which starts and stops it all.
mod error;
mod plan;
mod stats;

mod shared;

mod armed;
mod link;

mod body;
mod forward;

mod conn;
mod proxy;

#[cfg(test)]
mod tests;

/// gRPC status codes, as [`Ending::Status`] takes them and [`FaultFired::upstream_status`]
/// reports them: the type the official client reports (`google-cloud-gax`), which is also
/// `spanner_queues::error::Code`.
pub use google_cloud_gax::error::rpc::Code;

pub use armed::ArmedFault;
pub use error::FaultProxyError;
pub use plan::{Ending, Fault, FaultFired, FaultKind, Injection, Method};
pub use proxy::{FaultProxy, FaultProxyBuilder};
pub use stats::{RpcRecord, RpcStats, Stats};
