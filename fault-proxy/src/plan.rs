//! The fault plan's vocabulary: which faults exist ([`Fault`], [`FaultKind`]), how a call they
//! cut ends ([`Ending`], [`Injection`]), which requests they fire on ([`Method`]), and what a
//! fired fault reports ([`FaultFired`]).

use std::time::Duration;

use google_cloud_gax::error::rpc::Code;

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
    /// passes unharmed and [`ArmedFault::fired`](crate::ArmedFault::fired) reports [`FaultProxyError::NotApplied`](crate::FaultProxyError::NotApplied).
    ResetMidStream {
        /// How many response messages reach the client before the call is cut.
        after_messages: u32,
    },
    /// Reset the client's connection as soon as the request's headers arrive, without reading or
    /// forwarding anything. The [`Ending`] is not used: this always resets the connection.
    ResetConnection,
    /// Forward the request, wait until the upstream has fully answered, and hold the answer
    /// until [`ArmedFault::release`](crate::ArmedFault::release) is called (or the [`ArmedFault`](crate::ArmedFault) is dropped); then pass it
    /// on unchanged. A commit **is** applied, and the client sees it succeed, only late: the
    /// fault fires ([`ArmedFault::fired`](crate::ArmedFault::fired) resolves) once the answer is held. If the client gives
    /// up first, its call simply ends there. The [`Ending`] is not used.
    HoldResponse,
}

impl Fault {
    /// The kind of this fault, without its parameters (used as the key of
    /// [`Stats::faults_fired`](crate::Stats::faults_fired)).
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
#[derive(Debug, Clone, Copy, PartialEq, Default)]
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

/// A [`Fault`] together with the [`Ending`] it uses; what [`FaultProxy::inject`](crate::FaultProxy::inject) arms.
///
/// A plain [`Fault`] converts into an `Injection` with the default [`Ending`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Injection {
    pub(crate) fault: Fault,
    pub(crate) ending: Ending,
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
    pub(crate) suffix: String,
    pub(crate) nth: u32,
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

/// What happened when a fault fired; returned by [`ArmedFault::fired`](crate::ArmedFault::fired).
#[derive(Debug, Clone, PartialEq)]
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
