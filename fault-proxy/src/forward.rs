//! One request: forward it unchanged, or apply the fault due for it.

use std::sync::Arc;

use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{oneshot, watch};
use tonic::Code;

use crate::body::{Held, MessageCounter, MidStream, ProxyBody, grpc_status, status_response};
use crate::link::{ConnHandle, ProxyError};
use crate::plan::{Ending, Fault, Injection};
use crate::shared::{FireDetails, Firing, Shared};

pub(crate) struct ConnCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conn: ConnHandle,
    pub(crate) upstream: SendRequest<Incoming>,
}

impl ConnCtx {
    pub(crate) async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let path = request.uri().path().to_owned();
        let Some(entry) = self.shared.take_fault(&path) else {
            let response = self.forward(request).await?;
            return Ok(response.map(ProxyBody::Pass));
        };
        let injection = entry.injection;
        tracing::debug!(%path, connection = self.conn.id, fault = ?injection.fault, "fault matched a request");
        let firing = Firing {
            shared: Arc::clone(&self.shared),
            report: Some(entry.report),
            path,
            connection: self.conn.id,
            injection,
        };
        match injection.fault {
            Fault::ResetConnection => {
                self.conn
                    .reset(Some((firing, FireDetails::default())))
                    .await;
                self.conn.closed().await;
                Err(ProxyError::Closed)
            }
            Fault::DropRequest => {
                // Let the client finish sending, so the request is "on the wire" when it is lost.
                let _ = request.into_body().collect().await;
                self.end_call(injection.ending, firing, FireDetails::default())
                    .await
            }
            Fault::DropResponse | Fault::DelayResponseThenDrop(_) | Fault::Stall => {
                self.hold_reply(request, injection, firing).await
            }
            Fault::HoldResponse => self.hold_then_pass(request, firing, entry.released).await,
            Fault::ResetMidStream { after_messages } => {
                let response = match self.forward(request).await {
                    Ok(response) => response,
                    Err(error) => {
                        firing.not_applied(format!("the upstream call failed: {error}"));
                        return Err(error);
                    }
                };
                let (parts, body) = response.into_parts();
                if body.is_end_stream() {
                    firing.not_applied("the upstream answered with trailers only");
                    return Ok(Response::from_parts(parts, ProxyBody::Pass(body)));
                }
                let cut = MidStream {
                    upstream: Some(body),
                    counter: MessageCounter::default(),
                    target: u64::from(after_messages),
                    ending: injection.ending,
                    conn: self.conn.clone(),
                    firing: Some(firing),
                    cut: None,
                    done: false,
                };
                Ok(Response::from_parts(
                    parts,
                    ProxyBody::MidStream(Box::new(cut)),
                ))
            }
        }
    }

    pub(crate) async fn forward(
        &self,
        request: Request<Incoming>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let mut upstream = self.upstream.clone();
        upstream.ready().await.map_err(ProxyError::Upstream)?;
        self.shared.count_forwarded(request.uri().path());
        upstream
            .send_request(request)
            .await
            .map_err(ProxyError::Upstream)
    }

    /// Forwards the request and reads the whole answer; returns the upstream's gRPC status.
    pub(crate) async fn exchange(
        &self,
        request: Request<Incoming>,
    ) -> Result<Option<Code>, ProxyError> {
        let response = self.forward(request).await?;
        let header_status = grpc_status(response.headers());
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(ProxyError::Upstream)?;
        Ok(body.trailers().and_then(grpc_status).or(header_status))
    }

    /// `HoldResponse`: forwards the request, reads the whole answer, reports the fault fired,
    /// and passes the answer on once released.
    pub(crate) async fn hold_then_pass(
        &self,
        request: Request<Incoming>,
        firing: Firing,
        mut released: watch::Receiver<bool>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let response = match self.forward(request).await {
            Ok(response) => response,
            Err(error) => {
                firing.not_applied(format!("the upstream call failed: {error}"));
                return Err(error);
            }
        };
        let (parts, body) = response.into_parts();
        let body = match body.collect().await {
            Ok(body) => body,
            Err(error) => {
                firing.not_applied(format!("the upstream answer failed: {error}"));
                return Err(ProxyError::Upstream(error));
            }
        };
        let trailers = body.trailers().cloned();
        let upstream_status = trailers
            .as_ref()
            .and_then(grpc_status)
            .or_else(|| grpc_status(&parts.headers));
        firing.fire(FireDetails {
            upstream_status,
            client_gave_up: false,
        });
        // A closed channel (the handle dropped) releases the answer too.
        let _ = released.wait_for(|released| *released).await;
        let data = body.to_bytes();
        let held = Held {
            data: (!data.is_empty()).then_some(data),
            trailers,
        };
        Ok(Response::from_parts(parts, ProxyBody::Held(held)))
    }

    /// Ends a call whose response the proxy will not pass on.
    pub(crate) async fn end_call(
        &self,
        ending: Ending,
        firing: Firing,
        details: FireDetails,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        match ending {
            Ending::ResetConnection => {
                self.conn.reset(Some((firing, details))).await;
                self.conn.closed().await;
                Err(ProxyError::Closed)
            }
            Ending::ResetStream => {
                firing.fire(details);
                Err(ProxyError::Injected)
            }
            Ending::Status(code) => {
                firing.fire(details);
                Ok(status_response(code))
            }
        }
    }

    /// `DropResponse`, `DelayResponseThenDrop` and `Stall`. The upstream exchange runs in its own
    /// task, so it completes even when the client gives up first; this future only waits for
    /// the verdict, and its being dropped tells that task the client gave up.
    pub(crate) async fn hold_reply(
        self: &Arc<Self>,
        request: Request<Incoming>,
        injection: Injection,
        firing: Firing,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let (gone_tx, gone_rx) = oneshot::channel::<()>();
        let (verdict_tx, verdict_rx) = oneshot::channel::<Ending>();
        let ctx = Arc::clone(self);
        self.shared.spawn(async move {
            ctx.run_held_reply(request, injection, firing, gone_rx, verdict_tx)
                .await;
        });
        let _client_waiting = gone_tx;
        match verdict_rx.await {
            Ok(Ending::Status(code)) => Ok(status_response(code)),
            Ok(_) => Err(ProxyError::Injected),
            // The connection is being reset (or the proxy is stopping).
            Err(_) => {
                self.conn.closed().await;
                Err(ProxyError::Closed)
            }
        }
    }

    pub(crate) async fn run_held_reply(
        self: Arc<Self>,
        request: Request<Incoming>,
        injection: Injection,
        firing: Firing,
        mut gone: oneshot::Receiver<()>,
        verdict: oneshot::Sender<Ending>,
    ) {
        let upstream_status = match self.exchange(request).await {
            Ok(status) => status,
            Err(error) => {
                // The answer is discarded either way; the fault still applies.
                tracing::debug!(%error, "upstream call under a held reply failed");
                None
            }
        };
        let mut details = FireDetails {
            upstream_status,
            client_gave_up: false,
        };
        match injection.fault {
            Fault::DropResponse => {}
            Fault::DelayResponseThenDrop(delay) => {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = &mut gone => {
                        details.client_gave_up = true;
                        firing.fire(details);
                        return;
                    }
                }
            }
            Fault::Stall => {
                tokio::select! {
                    _ = &mut gone => {}
                    () = self.conn.closed() => {}
                }
                details.client_gave_up = true;
                firing.fire(details);
                return;
            }
            _ => {
                firing.not_applied("internal error: not a held-reply fault");
                return;
            }
        }
        details.client_gave_up = matches!(gone.try_recv(), Err(TryRecvError::Closed));
        match injection.ending {
            Ending::ResetConnection => self.conn.reset(Some((firing, details))).await,
            other => {
                let _ = verdict.send(other);
                firing.fire(details);
            }
        }
    }
}
