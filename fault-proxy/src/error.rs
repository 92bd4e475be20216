//! The crate's one error type.

use std::io;

/// Errors from [`FaultProxy`](crate::FaultProxy) and [`ArmedFault`](crate::ArmedFault).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FaultProxyError {
    /// The proxy could not listen on `127.0.0.1`. Nothing was started.
    #[error("could not listen on 127.0.0.1")]
    Bind(#[source] io::Error),

    /// The proxy was stopped or dropped before the fault fired.
    #[error("the proxy stopped before the fault fired")]
    Stopped,

    /// [`ArmedFault::disarm`](crate::ArmedFault::disarm) removed the fault before it fired.
    #[error("the fault was disarmed before it fired")]
    Disarmed,

    /// The fault matched a request but could not be applied, for example because the response
    /// stream ended before [`Fault::ResetMidStream`](crate::Fault::ResetMidStream) reached its message count. The call went
    /// through unharmed (or failed on its own).
    #[error("the fault matched a request but was not applied: {reason}")]
    #[non_exhaustive]
    NotApplied {
        /// Why the fault could not be applied.
        reason: String,
    },
}
