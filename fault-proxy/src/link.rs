//! A request handler's view of its client connection ([`ConnHandle`]), and the errors a handler
//! hands to hyper ([`ProxyError`]).

use tokio::sync::{mpsc, oneshot, watch};

use crate::shared::{FireDetails, Firing};

/// Commands a request handler sends to the task that drives its client connection.
pub(crate) enum ConnCmd {
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
pub(crate) struct ConnHandle {
    pub(crate) id: u64,
    pub(crate) commands: mpsc::UnboundedSender<ConnCmd>,
    pub(crate) closed: watch::Receiver<bool>,
}

impl ConnHandle {
    /// Resets the connection; `firing` fires after the socket is closed (from the connection's
    /// own task, because resetting the connection also ends the caller's task).
    pub(crate) async fn reset(&self, firing: Option<(Firing, FireDetails)>) {
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
    pub(crate) async fn barrier(&self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(ConnCmd::Barrier(done)).is_ok() {
            let _ = wait.await;
        }
    }

    pub(crate) async fn closed(&self) {
        let mut closed = self.closed.clone();
        let _ = closed.wait_for(|closed| *closed).await;
    }
}

/// Errors a handler or response body hands to hyper, which turns them into `RST_STREAM`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    #[error("call cut by an injected fault")]
    Injected,
    #[error("client connection closed")]
    Closed,
    #[error("reading the client's request failed")]
    Client(#[source] hyper::Error),
    /// Keeps hyper's error (and the HTTP/2 reason inside it) as the source, so an upstream
    /// `RST_STREAM` reaches the client with the same reason code.
    #[error("upstream call failed")]
    Upstream(#[source] hyper::Error),
}
