//! Client connections: accepting them, serving each over its own upstream HTTP/2 connection,
//! and resetting them (a TCP RST) when a fault asks for it.

use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

use crate::forward::ConnCtx;
use crate::link::{ConnCmd, ConnHandle};
use crate::shared::{Exec, FireDetails, Firing, Shared, lock};

/// Concurrent calls a client connection may have open.
const MAX_CONCURRENT_STREAMS: u32 = 10_000;

pub(crate) async fn accept_loop(listener: TcpListener, shared: Weak<Shared>) {
    loop {
        let accepted = listener.accept().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match accepted {
            Ok((tcp, peer)) => {
                let id = shared.new_connection();
                tracing::debug!(connection = id, %peer, "client connected");
                shared.spawn(serve_client(Arc::clone(&shared), tcp, id));
            }
            Err(error) => {
                // Usually transient (a connection aborted before it was accepted, or file
                // descriptors exhausted): back off briefly instead of spinning.
                tracing::debug!(%error, "accept failed");
                drop(shared);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// What the socket wrapper tells the connection task.
#[derive(Debug, Default)]
pub(crate) struct IoState {
    /// The last write or flush could not complete (socket buffer full).
    pub(crate) write_blocked: AtomicBool,
    /// Close with `SO_LINGER` 0 (a TCP RST) instead of a FIN.
    pub(crate) reset_on_drop: AtomicBool,
}

/// The client socket, instrumented for [`ConnCmd`].
pub(crate) struct ClientIo {
    pub(crate) tcp: TcpStream,
    pub(crate) state: Arc<IoState>,
}

impl ClientIo {
    pub(crate) fn record<T>(&self, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.state
            .write_blocked
            .store(poll.is_pending(), Ordering::Release);
        poll
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.record(poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.record(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.tcp).poll_flush(cx);
        this.record(poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

impl Drop for ClientIo {
    fn drop(&mut self) {
        if self.state.reset_on_drop.load(Ordering::Acquire) {
            // Zero linger turns the close into a RST and never blocks.
            let _ = self.tcp.set_zero_linger();
        }
    }
}

/// Per client connection: everything a request handler needs.
pub(crate) async fn connect_upstream(
    upstream: &str,
    exec: Exec,
) -> Result<SendRequest<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>> {
    let tcp = TcpStream::connect(upstream).await?;
    let _ = tcp.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http2::Builder::new(exec.clone())
        .handshake(TokioIo::new(tcp))
        .await?;
    hyper::rt::Executor::execute(&exec, async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "upstream connection ended with an error");
        }
    });
    Ok(sender)
}

pub(crate) async fn serve_client(shared: Arc<Shared>, tcp: TcpStream, id: u64) {
    let _ = tcp.set_nodelay(true);
    let exec = Exec(Arc::downgrade(&shared));
    let upstream = match connect_upstream(&shared.upstream, exec.clone()).await {
        Ok(upstream) => upstream,
        Err(error) => {
            tracing::warn!(connection = id, upstream = %shared.upstream, %error, "cannot reach the upstream; resetting the client connection");
            let _ = tcp.set_zero_linger();
            return;
        }
    };
    let (commands, mut command_rx) = mpsc::unbounded_channel();
    let (closed_tx, closed) = watch::channel(false);
    let io_state = Arc::new(IoState::default());
    let io = ClientIo {
        tcp,
        state: Arc::clone(&io_state),
    };
    let ctx = Arc::new(ConnCtx {
        shared: Arc::clone(&shared),
        conn: ConnHandle {
            id,
            commands,
            closed,
        },
        upstream,
    });
    let service = hyper::service::service_fn(move |request| {
        let ctx = Arc::clone(&ctx);
        async move { ctx.handle(request).await }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(exec);
    // Forward the upstream's headers unchanged.
    builder.auto_date_header(false);
    // The proxy should not be what limits concurrency (hyper's default is 200 streams a
    // connection): each client connection has its own upstream connection, whose limit applies.
    builder.max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    let connection = Box::pin(builder.serve_connection(TokioIo::new(io), service));

    let (connection, resets) = drive(connection, &mut command_rx, &io_state).await;
    if resets.is_empty() {
        tracing::debug!(connection = id, "client connection closed");
        let _ = closed_tx.send(true);
        return;
    }
    io_state.reset_on_drop.store(true, Ordering::Release);
    drop(connection);
    lock(&shared.state).stats.connections_reset += 1;
    tracing::debug!(connection = id, "client connection reset");
    let _ = closed_tx.send(true);
    for (firing, done) in resets {
        if let Some((firing, details)) = firing {
            firing.fire(details);
        }
        let _ = done.send(());
    }
}

pub(crate) type ResetRequest = (Option<(Firing, FireDetails)>, oneshot::Sender<()>);

/// Drives the client connection until it ends (returns no resets) or a handler asks for a reset
/// (returns the still-open connection, for the caller to drop as a RST, and the requests).
pub(crate) async fn drive<C>(
    mut connection: Pin<Box<C>>,
    commands: &mut mpsc::UnboundedReceiver<ConnCmd>,
    io_state: &IoState,
) -> (Pin<Box<C>>, Vec<ResetRequest>)
where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let mut barriers: Vec<oneshot::Sender<()>> = Vec::new();
    let mut resets: Vec<ResetRequest> = Vec::new();
    let mut commands_open = true;
    poll_fn(|cx| {
        while commands_open {
            match commands.poll_recv(cx) {
                Poll::Ready(Some(ConnCmd::Reset { firing, done })) => resets.push((firing, done)),
                Poll::Ready(Some(ConnCmd::Barrier(done))) => barriers.push(done),
                Poll::Ready(None) => commands_open = false,
                Poll::Pending => break,
            }
        }
        if !resets.is_empty() {
            return Poll::Ready(());
        }
        if let Poll::Ready(result) = connection.as_mut().poll(cx) {
            if let Err(error) = result {
                tracing::debug!(%error, "client connection ended with an error");
            }
            return Poll::Ready(());
        }
        // The connection wrote all it could and is waiting: queued frames are on the wire
        // unless the socket itself pushed back.
        if !barriers.is_empty() && !io_state.write_blocked.load(Ordering::Acquire) {
            for barrier in barriers.drain(..) {
                let _ = barrier.send(());
            }
        }
        Poll::Pending
    })
    .await;
    (connection, resets)
}
