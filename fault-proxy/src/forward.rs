//! One request: read it, forward it unchanged, or apply the fault due for it.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use google_cloud_gax::error::rpc::Code;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{oneshot, watch};

use crate::body::{
    Held, MessageCounter, MidStream, ProxyBody, RowTally, grpc_status, status_response,
};
use crate::link::{ConnHandle, ProxyError};
use crate::plan::{Ending, Fault, Injection};
use crate::shared::{FireDetails, Firing, Shared};
use crate::stats::{RowCounter, method, rpc_kind};

/// A request read whole from the client, and its kind (see [`Stats::rpcs`]).
///
/// The proxy reads each request to its end before forwarding it: Spanner's RPCs all send one
/// request message, and the kind of a SQL call is in that message. (A client-streaming call
/// would go through too, only not before the client finished sending.)
///
/// [`Stats::rpcs`]: crate::Stats::rpcs
struct Call {
    request: Request<Full<Bytes>>,
    kind: String,
    /// Counts the rows of the answer, if the method answers with result sets.
    rows: Option<RowCounter>,
}

impl Call {
    async fn read(request: Request<Incoming>) -> Result<Self, ProxyError> {
        let (parts, body) = request.into_parts();
        let body = body.collect().await.map_err(ProxyError::Client)?.to_bytes();
        let kind = rpc_kind(parts.uri.path(), &body);
        let rows = RowCounter::for_method(method(parts.uri.path()));
        Ok(Self {
            request: Request::from_parts(parts, Full::new(body)),
            kind,
            rows,
        })
    }
}

pub(crate) struct ConnCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conn: ConnHandle,
    pub(crate) upstream: SendRequest<Full<Bytes>>,
}

impl ConnCtx {
    pub(crate) async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let path = request.uri().path().to_owned();
        let Some(entry) = self.shared.take_fault(&path) else {
            return self.pass(Call::read(request).await?).await;
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
        if injection.fault == Fault::ResetConnection {
            // At once, without reading the request.
            self.conn
                .reset(Some((firing, FireDetails::default())))
                .await;
            self.conn.closed().await;
            return Err(ProxyError::Closed);
        }
        // Every other fault lets the client finish sending: a dropped request is "on the wire"
        // when it is lost.
        let call = match Call::read(request).await {
            Ok(call) => call,
            Err(error) => {
                firing.not_applied(format!("reading the request failed: {error}"));
                return Err(error);
            }
        };
        match injection.fault {
            // (`ResetConnection` returned above; it always resets the connection.)
            Fault::DropRequest | Fault::ResetConnection => {
                self.end_call(injection.ending, firing, FireDetails::default())
                    .await
            }
            Fault::DropResponse | Fault::DelayResponseThenDrop(_) | Fault::Stall => {
                self.hold_reply(call, injection, firing).await
            }
            Fault::HoldResponse => self.hold_then_pass(call, firing, entry.released).await,
            Fault::ResetMidStream { after_messages } => {
                let response = match self.forward(call.request, &call.kind).await {
                    Ok(response) => response,
                    Err(error) => {
                        firing.not_applied(format!("the upstream call failed: {error}"));
                        return Err(error);
                    }
                };
                let (parts, body) = response.into_parts();
                if body.is_end_stream() {
                    firing.not_applied("the upstream answered with trailers only");
                    return Ok(Response::from_parts(parts, ProxyBody::pass(body, None)));
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

    /// Forwards the call and passes its answer on as it arrives, counting its rows.
    async fn pass(&self, call: Call) -> Result<Response<ProxyBody>, ProxyError> {
        let Call {
            request,
            kind,
            rows,
        } = call;
        let response = self.forward(request, &kind).await?;
        let rows = rows.map(|counter| RowTally::new(counter, kind, Arc::clone(&self.shared)));
        Ok(response.map(|body| ProxyBody::pass(body, rows)))
    }

    /// Forwards a request of this kind; returns the upstream's response once its headers
    /// arrive.
    async fn forward(
        &self,
        request: Request<Full<Bytes>>,
        kind: &str,
    ) -> Result<Response<Incoming>, ProxyError> {
        let sent = SystemTime::now();
        let started = Instant::now();
        let mut upstream = self.upstream.clone();
        upstream.ready().await.map_err(ProxyError::Upstream)?;
        self.shared.count_forwarded(request.uri().path(), kind);
        let response = upstream.send_request(request).await;
        self.shared
            .record_answer_time(kind, sent, started.elapsed());
        response.map_err(ProxyError::Upstream)
    }

    /// Forwards the call and reads the whole answer; returns the upstream's gRPC status.
    async fn exchange(&self, call: Call) -> Result<Option<Code>, ProxyError> {
        let response = self.forward(call.request, &call.kind).await?;
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
    async fn hold_then_pass(
        &self,
        call: Call,
        firing: Firing,
        mut released: watch::Receiver<bool>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let Call {
            request,
            kind,
            rows,
        } = call;
        let response = match self.forward(request, &kind).await {
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
        if let Some(mut counter) = rows {
            counter.feed(&data);
            self.shared.count_rows(&kind, counter.rows());
        }
        let held = Held {
            data: (!data.is_empty()).then_some(data),
            trailers,
        };
        Ok(Response::from_parts(parts, ProxyBody::Held(held)))
    }

    /// Ends a call whose response the proxy will not pass on.
    async fn end_call(
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
    async fn hold_reply(
        self: &Arc<Self>,
        call: Call,
        injection: Injection,
        firing: Firing,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let (gone_tx, gone_rx) = oneshot::channel::<()>();
        let (verdict_tx, verdict_rx) = oneshot::channel::<Ending>();
        let ctx = Arc::clone(self);
        self.shared.spawn(async move {
            ctx.run_held_reply(call, injection, firing, gone_rx, verdict_tx)
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

    async fn run_held_reply(
        self: Arc<Self>,
        call: Call,
        injection: Injection,
        firing: Firing,
        mut gone: oneshot::Receiver<()>,
        verdict: oneshot::Sender<Ending>,
    ) {
        let upstream_status = match self.exchange(call).await {
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
