//! The proxy against a tiny in-process gRPC upstream: every fault, ending and matching rule.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::body::{INJECTED_MESSAGE, status_headers};
use crate::shared::lock;
use crate::*;

use bytes::{BufMut, BytesMut};
use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;
use pb::spanner_client::SpannerClient;
use prost::Message as _;
use tonic::transport::{Channel, Endpoint};

/// The code of a tonic client's status, as the proxy's `Code`.
fn code(status: &tonic::Status) -> Code {
    Code::from(status.code() as i32)
}

const COMMIT: &str = "/google.spanner.v1.Spanner/Commit";
const STREAM: &str = "/google.spanner.v1.Spanner/ExecuteStreamingSql";
/// Guards every wait so a broken proxy fails the test instead of hanging it.
const LIMIT: Duration = Duration::from_secs(10);

async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(LIMIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

// -----------------------------------------------------------------------------------------
// A tiny gRPC upstream: Commit answers at once; ExecuteStreamingSql sends `N` messages for
// sql "N" or "SELECT N" (then OK), or keeps the stream open for sql "N open": one row of one
// column each, the column named in the first.

/// A response body fed from a channel.
struct ChannelBody(mpsc::Receiver<Frame<Bytes>>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.get_mut().0.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

#[derive(Default)]
struct UpstreamState {
    /// Requests fully received, by path.
    requests: Mutex<BTreeMap<String, usize>>,
    /// Senders of the streams kept open.
    open_streams: Mutex<Vec<mpsc::Sender<Frame<Bytes>>>>,
}

struct Upstream {
    addr: SocketAddr,
    state: Arc<UpstreamState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let state = Arc::new(UpstreamState::default());
        let accept_state = Arc::clone(&state);
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let state = Arc::clone(&accept_state);
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        upstream_handle(Arc::clone(&state), request)
                    });
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
                });
            }
        });
        Self { addr, state, task }
    }

    fn requests(&self, path: &str) -> usize {
        lock(&self.state.requests).get(path).copied().unwrap_or(0)
    }

    /// Sends one more message on every open stream; returns how many took it.
    fn push_to_open_streams(&self, token: &str) -> usize {
        let frame = grpc_frame(&pb::PartialResultSet {
            resume_token: Bytes::copy_from_slice(token.as_bytes()),
            ..Default::default()
        });
        lock(&self.state.open_streams)
            .iter()
            .filter(|tx| tx.try_send(Frame::data(frame.clone())).is_ok())
            .count()
    }
}

fn grpc_frame(message: &impl prost::Message) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_u8(0);
    buf.put_u32(u32::try_from(message.encoded_len()).expect("small message"));
    message.encode(&mut buf).expect("encode");
    buf.freeze()
}

fn ok_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    trailers
}

async fn upstream_handle(
    state: Arc<UpstreamState>,
    request: Request<Incoming>,
) -> Result<Response<ChannelBody>, Infallible> {
    let path = request.uri().path().to_owned();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let payload = body.slice(body.len().min(5)..);
    *lock(&state.requests).entry(path.clone()).or_default() += 1;
    let (tx, rx) = mpsc::channel(64);
    let mut response = Response::new(ChannelBody(rx));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    match path.as_str() {
        COMMIT => {
            let answer = match pb::CommitRequest::decode(payload) {
                Ok(_) => pb::CommitResponse {
                    commit_timestamp: Some(prost_types::Timestamp {
                        seconds: 1_700_000_000,
                        nanos: 0,
                    }),
                    ..Default::default()
                },
                Err(_) => pb::CommitResponse::default(),
            };
            let _ = tx.try_send(Frame::data(grpc_frame(&answer)));
            let _ = tx.try_send(Frame::trailers(ok_trailers()));
        }
        STREAM => {
            let sql = pb::ExecuteSqlRequest::decode(payload)
                .map(|request| request.sql)
                .unwrap_or_default();
            let mut words = sql.split_whitespace().filter(|word| *word != "SELECT");
            let count: u32 = words.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            let keep_open = words.next() == Some("open");
            for i in 0..count {
                let message = pb::PartialResultSet {
                    metadata: (i == 0).then(|| pb::ResultSetMetadata {
                        row_type: Some(pb::StructType {
                            fields: vec![pb::struct_type::Field {
                                name: "N".into(),
                                r#type: None,
                            }],
                        }),
                        ..Default::default()
                    }),
                    values: vec![prost_types::Value::default()],
                    resume_token: Bytes::from(i.to_string()),
                    ..Default::default()
                };
                let _ = tx.try_send(Frame::data(grpc_frame(&message)));
            }
            if keep_open {
                lock(&state.open_streams).push(tx);
            } else {
                let _ = tx.try_send(Frame::trailers(ok_trailers()));
            }
        }
        _ => {
            status_headers(Code::Unimplemented, response.headers_mut());
        }
    }
    Ok(response)
}

// -----------------------------------------------------------------------------------------
// Client helpers

async fn connect(proxy: &FaultProxy) -> SpannerClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{}", proxy.addr()))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect to proxy");
    SpannerClient::new(channel)
}

async fn commit(client: &mut SpannerClient<Channel>) -> Result<pb::CommitResponse, tonic::Status> {
    commit_with_timeout(client, None).await
}

async fn commit_with_timeout(
    client: &mut SpannerClient<Channel>,
    timeout: Option<Duration>,
) -> Result<pb::CommitResponse, tonic::Status> {
    let mut request = tonic::Request::new(pb::CommitRequest {
        session: "projects/p/instances/i/databases/d/sessions/s".into(),
        ..Default::default()
    });
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    within("commit", client.commit(request))
        .await
        .map(tonic::Response::into_inner)
}

/// An open server-streaming call.
struct OpenStream(tonic::Streaming<pb::PartialResultSet>);

impl OpenStream {
    async fn start(client: &mut SpannerClient<Channel>, sql: &str) -> Result<Self, tonic::Status> {
        let request = pb::ExecuteSqlRequest {
            session: "projects/p/instances/i/databases/d/sessions/s".into(),
            sql: sql.into(),
            ..Default::default()
        };
        within("stream start", client.execute_streaming_sql(request))
            .await
            .map(|response| Self(response.into_inner()))
    }

    /// The next message's resume token, `Ok(None)` at the end, or the error.
    async fn next(&mut self) -> Result<Option<String>, tonic::Status> {
        within("stream message", self.0.message())
            .await
            .map(|message| message.map(|m| String::from_utf8_lossy(&m.resume_token).into_owned()))
    }

    /// Reads to the end: the tokens received, and the error that ended the stream if any.
    async fn drain(&mut self) -> (Vec<String>, Option<tonic::Status>) {
        let mut tokens = Vec::new();
        loop {
            match self.next().await {
                Ok(Some(token)) => tokens.push(token),
                Ok(None) => return (tokens, None),
                Err(status) => return (tokens, Some(status)),
            }
        }
    }
}

/// What a tonic client reports for a connection reset by the proxy: code `Unknown`, with the
/// transport error as the source, ending in an I/O `ConnectionReset`, or `BrokenPipe` when the
/// client was writing (a window update, the rest of the request) as the RST arrived.
fn assert_connection_reset(status: &tonic::Status) {
    assert_eq!(code(status), Code::Unknown, "{}", describe(status));
    let mut source = std::error::Error::source(status);
    let mut broken = false;
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<io::Error>() {
            broken |= matches!(
                io.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
            );
        }
        // Mid-stream the chain ends in an `h2::Error`, which hides its I/O error (no
        // `source()`) and only says so in its text.
        let text = error.to_string();
        broken |= error.source().is_none()
            && (text == "connection reset" || text.ends_with("broken pipe"));
        source = error.source();
    }
    assert!(
        broken,
        "expected an I/O ConnectionReset or BrokenPipe in {}",
        describe(status)
    );
}

/// An HTTP/2 `RST_STREAM` (`INTERNAL_ERROR`) as a tonic client reports it: `INTERNAL` when
/// tonic is built with its `server` feature (which maps h2 errors to codes), otherwise
/// `UNKNOWN` with the h2 stream error in the source chain.
fn assert_stream_reset(status: &tonic::Status) {
    let mut text = String::new();
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        text.push_str(&error.to_string());
        source = error.source();
    }
    let reset = match code(status) {
        Code::Internal => true,
        Code::Unknown => text.contains("stream error received"),
        _ => false,
    };
    assert!(reset, "expected a stream reset: {}", describe(status));
}

fn describe(status: &tonic::Status) -> String {
    let mut text = format!("{:?}: {:?}", code(status), status.message());
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        text.push_str(&format!(" <- {error}"));
        source = error.source();
    }
    text
}

async fn setup() -> (Upstream, FaultProxy, SpannerClient<Channel>) {
    let upstream = Upstream::start().await;
    let proxy = FaultProxy::start(upstream.addr.to_string())
        .await
        .expect("start proxy");
    let client = connect(&proxy).await;
    (upstream, proxy, client)
}

/// After a fault: a new request on the same client, and one on a new connection, both pass.
async fn assert_later_calls_pass(proxy: &FaultProxy, client: &mut SpannerClient<Channel>) {
    // tonic reconnects a broken channel lazily; allow it one failed call to notice.
    if let Err(status) = commit(client).await {
        eprintln!(
            "first call on the same channel after the fault: {}",
            describe(&status)
        );
        commit(client)
            .await
            .expect("second call on the same channel passes");
    }
    let mut fresh = connect(proxy).await;
    commit(&mut fresh).await.expect("a new connection works");
}

// -----------------------------------------------------------------------------------------
// Tests

#[test]
fn method_matching_and_nth() {
    assert!(Method::path("/Commit").matches(COMMIT));
    assert!(Method::path(COMMIT).matches(COMMIT));
    assert!(!Method::path("/Commit").matches(STREAM));
    assert!(Method::any().matches(STREAM));
    assert_eq!(Method::any().nth(0), Method::any().nth(1));
    assert_eq!(
        Fault::ResetConnection
            .with_ending(Ending::ResetStream)
            .ending(),
        Ending::ResetConnection
    );
    assert_eq!(
        Injection::from(Fault::DropResponse).ending(),
        Ending::ResetConnection
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_unary_and_streaming_calls_unchanged() {
    let (upstream, proxy, mut client) = setup().await;

    let answer = commit(&mut client).await.expect("commit through the proxy");
    assert_eq!(
        answer.commit_timestamp.map(|t| t.seconds),
        Some(1_700_000_000)
    );

    let mut stream = OpenStream::start(&mut client, "3").await.expect("stream");
    let (tokens, error) = stream.drain().await;
    assert_eq!(tokens, ["0", "1", "2"]);
    assert!(error.is_none(), "{error:?}");

    // A stream that stays open: messages flow through as they arrive.
    let mut open = OpenStream::start(&mut client, "1 open")
        .await
        .expect("open stream");
    assert_eq!(open.next().await.expect("first"), Some("0".into()));
    assert_eq!(upstream.push_to_open_streams("later"), 1);
    assert_eq!(open.next().await.expect("pushed"), Some("later".into()));

    let stats = proxy.stats();
    assert_eq!(stats.connections, 1);
    assert_eq!(stats.requests_to(COMMIT), 1);
    assert_eq!(stats.forwarded_to(COMMIT), 1);
    assert_eq!(stats.requests_to(STREAM), 2);
    assert!(stats.faults_fired.is_empty());
    assert_eq!(upstream.requests(COMMIT), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_calls_by_kind_with_their_rows_and_tells_the_observer() {
    let upstream = Upstream::start().await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let proxy = {
        let seen = Arc::clone(&seen);
        FaultProxy::builder(upstream.addr.to_string())
            .with_rpc_observer(move |rpc| lock(&seen).push(rpc.kind.to_owned()))
            .start()
            .await
            .expect("start proxy")
    };
    let mut client = connect(&proxy).await;

    commit(&mut client).await.expect("commit");
    commit(&mut client).await.expect("commit");
    let mut stream = OpenStream::start(&mut client, "SELECT 3")
        .await
        .expect("stream");
    assert_eq!(stream.drain().await.0, ["0", "1", "2"]);
    let mut stream = OpenStream::start(&mut client, "2").await.expect("stream");
    assert_eq!(stream.drain().await.0, ["0", "1"]);
    // A held answer's rows count when it passes.
    let armed = proxy.inject(Method::path(STREAM), Fault::HoldResponse);
    armed.release();
    let mut stream = OpenStream::start(&mut client, "SELECT 4")
        .await
        .expect("stream");
    assert_eq!(stream.drain().await.0, ["0", "1", "2", "3"]);
    within("fired", armed.fired()).await.expect("fired");
    // An open stream's rows count as they pass, before it ends.
    let mut open = OpenStream::start(&mut client, "SELECT 2 open")
        .await
        .expect("stream");
    assert_eq!(open.next().await.expect("first"), Some("0".into()));
    assert_eq!(open.next().await.expect("second"), Some("1".into()));

    let stats = proxy.stats();
    let kinds: Vec<&str> = stats.rpcs.keys().map(String::as_str).collect();
    assert_eq!(
        kinds,
        [
            "Commit",
            "ExecuteStreamingSql:EMPTY",
            "ExecuteStreamingSql:SELECT"
        ]
    );
    assert_eq!(stats.rpc("Commit").calls, 2);
    assert_eq!(stats.rpc("Commit").rows, 0);
    assert_eq!(stats.rpc("ExecuteStreamingSql:SELECT").calls, 3);
    assert_eq!(stats.rpc("ExecuteStreamingSql:SELECT").rows, 9);
    assert_eq!(stats.rpc("ExecuteStreamingSql:EMPTY").calls, 1);
    assert_eq!(stats.rpc("ExecuteStreamingSql:EMPTY").rows, 2);
    assert_eq!(stats.rpc("Rollback"), RpcStats::default());
    assert_eq!(
        stats.rpcs.values().map(|rpc| rpc.calls).sum::<u64>(),
        stats.forwarded.values().sum::<u64>()
    );
    // The observer saw each call once its response headers arrived.
    let mut seen = lock(&seen).clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            "Commit",
            "Commit",
            "ExecuteStreamingSql:EMPTY",
            "ExecuteStreamingSql:SELECT",
            "ExecuteStreamingSql:SELECT",
            "ExecuteStreamingSql:SELECT"
        ]
    );
    drop(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_request_never_reaches_the_upstream() {
    let (upstream, proxy, mut client) = setup().await;
    let armed = proxy.inject(Method::path(COMMIT), Fault::DropRequest);

    let status = commit(&mut client).await.expect_err("commit must fail");
    eprintln!("DropRequest/ResetConnection: {}", describe(&status));
    let fired = within("fired", armed.fired()).await.expect("fired");
    assert!(armed.has_fired());
    assert_eq!(fired.path, COMMIT);
    assert_eq!(fired.upstream_status, None);
    assert_eq!(upstream.requests(COMMIT), 0);
    assert_connection_reset(&status);

    assert_later_calls_pass(&proxy, &mut client).await;
    let stats = proxy.stats();
    assert_eq!(stats.fired(FaultKind::DropRequest), 1);
    assert_eq!(stats.connections_reset, 1);
    assert_eq!(stats.forwarded_to(COMMIT) + 1, stats.requests_to(COMMIT));
    assert_eq!(
        upstream.requests(COMMIT) + 1,
        stats.requests_to(COMMIT) as usize
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_response_applies_the_commit_but_fails_the_call() {
    let (upstream, proxy, mut client) = setup().await;
    let armed = proxy.inject(Method::path("/Commit"), Fault::DropResponse);

    let status = commit(&mut client).await.expect_err("commit must fail");
    eprintln!("DropResponse/ResetConnection: {}", describe(&status));
    let fired = within("fired", armed.fired()).await.expect("fired");
    assert_eq!(fired.upstream_status, Some(Code::Ok));
    assert_eq!(
        upstream.requests(COMMIT),
        1,
        "the upstream answered the commit"
    );
    assert_connection_reset(&status);

    assert_later_calls_pass(&proxy, &mut client).await;
    assert_eq!(proxy.stats().fired(FaultKind::DropResponse), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endings_reset_stream_and_status() {
    let (upstream, proxy, mut client) = setup().await;

    let armed = proxy.inject(
        Method::path(COMMIT),
        Fault::DropRequest.with_ending(Ending::ResetStream),
    );
    let status = commit(&mut client).await.expect_err("fails");
    eprintln!("DropRequest/ResetStream: {}", describe(&status));
    within("fired", armed.fired()).await.expect("fired");
    assert_stream_reset(&status);
    assert_eq!(upstream.requests(COMMIT), 0);

    let armed = proxy.inject(
        Method::path(COMMIT),
        Fault::DropResponse.with_ending(Ending::Status(Code::Unavailable)),
    );
    let status = commit(&mut client).await.expect_err("fails");
    eprintln!("DropResponse/Status(Unavailable): {}", describe(&status));
    within("fired", armed.fired()).await.expect("fired");
    assert_eq!(code(&status), Code::Unavailable);
    assert_eq!(status.message(), INJECTED_MESSAGE);
    assert_eq!(upstream.requests(COMMIT), 1);

    // Stream-level endings leave the connection alone: the same client goes on at once.
    commit(&mut client).await.expect("next commit passes");
    assert_eq!(proxy.stats().connections, 1);
    assert_eq!(proxy.stats().connections_reset, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_connection_fires_at_once() {
    let (upstream, proxy, mut client) = setup().await;
    let armed = proxy.inject(Method::path(COMMIT), Fault::ResetConnection);
    let status = commit(&mut client).await.expect_err("fails");
    eprintln!("ResetConnection: {}", describe(&status));
    within("fired", armed.fired()).await.expect("fired");
    assert_connection_reset(&status);
    assert_eq!(upstream.requests(COMMIT), 0);
    assert_later_calls_pass(&proxy, &mut client).await;
    assert_eq!(proxy.stats().fired(FaultKind::ResetConnection), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stall_holds_the_reply_until_the_client_gives_up() {
    let (upstream, proxy, mut client) = setup().await;
    let armed = proxy.inject(Method::path(COMMIT), Fault::Stall);
    let status = commit_with_timeout(&mut client, Some(Duration::from_millis(300)))
        .await
        .expect_err("times out");
    eprintln!("Stall (client deadline 300ms): {}", describe(&status));
    let fired = within("fired", armed.fired()).await.expect("fired");
    assert!(fired.client_gave_up);
    assert_eq!(fired.upstream_status, Some(Code::Ok));
    assert_eq!(upstream.requests(COMMIT), 1);
    assert_eq!(code(&status), Code::Cancelled);
    // The connection was not touched.
    commit(&mut client).await.expect("next commit passes");
    assert_eq!(proxy.stats().connections_reset, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_then_drop_resets_after_the_delay_or_sees_the_client_give_up() {
    let (upstream, proxy, mut client) = setup().await;

    let armed = proxy.inject(
        Method::path(COMMIT),
        Fault::DelayResponseThenDrop(Duration::from_millis(100)),
    );
    let status = commit(&mut client).await.expect_err("fails");
    eprintln!(
        "DelayResponseThenDrop(100ms), no deadline: {}",
        describe(&status)
    );
    let fired = within("fired", armed.fired()).await.expect("fired");
    assert!(!fired.client_gave_up);
    assert_eq!(fired.upstream_status, Some(Code::Ok));
    assert_connection_reset(&status);
    assert_later_calls_pass(&proxy, &mut client).await;

    let armed = proxy.inject(
        Method::path(COMMIT),
        Fault::DelayResponseThenDrop(Duration::from_secs(3600)),
    );
    let status = commit_with_timeout(&mut client, Some(Duration::from_millis(200)))
        .await
        .expect_err("times out");
    let fired = within("fired", armed.fired()).await.expect("fired");
    assert!(fired.client_gave_up);
    assert_eq!(code(&status), Code::Cancelled);
    assert_eq!(upstream.requests(COMMIT), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_response_passes_the_answer_once_released() {
    let (upstream, proxy, client) = setup().await;
    let armed = proxy.inject(Method::path(COMMIT), Fault::HoldResponse);
    let mut held_client = client.clone();
    let call = tokio::spawn(async move { commit(&mut held_client).await });
    let fired = within("fired", armed.fired()).await.expect("fired");
    assert_eq!(fired.upstream_status, Some(Code::Ok));
    assert!(!fired.client_gave_up);
    assert_eq!(upstream.requests(COMMIT), 1, "the upstream answered");
    // Held: other calls pass meanwhile, and the held one has no answer yet.
    let mut other = client.clone();
    commit(&mut other).await.expect("another commit passes");
    assert!(!call.is_finished(), "the answer was passed before release");
    armed.release();
    let answer = within("held commit", call).await.expect("joined");
    answer.expect("the held answer arrives unchanged");
    assert_eq!(proxy.stats().fired(FaultKind::HoldResponse), 1);
    assert_eq!(proxy.stats().connections_reset, 0);

    // Dropping the handle releases a held answer too.
    let armed = proxy.inject(Method::path(COMMIT), Fault::HoldResponse);
    let mut held_client = client.clone();
    let call = tokio::spawn(async move { commit(&mut held_client).await });
    within("fired", armed.fired()).await.expect("fired");
    drop(armed);
    let answer = within("held commit", call).await.expect("joined");
    answer.expect("released by the drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_mid_stream_passes_n_messages() {
    let (upstream, proxy, mut client) = setup().await;

    for ending in [
        Ending::ResetConnection,
        Ending::ResetStream,
        Ending::Status(Code::Unavailable),
    ] {
        let armed = proxy.inject(
            Method::path(STREAM),
            Fault::ResetMidStream { after_messages: 2 }.with_ending(ending),
        );
        let mut stream = OpenStream::start(&mut client, "5 open")
            .await
            .expect("stream");
        let (tokens, error) = stream.drain().await;
        let status = error.expect("the stream ends with an error");
        eprintln!(
            "ResetMidStream(2)/{ending:?}: {tokens:?} then {}",
            describe(&status)
        );
        assert_eq!(tokens, ["0", "1"], "{ending:?}");
        within("fired", armed.fired()).await.expect("fired");
        match ending {
            Ending::ResetConnection => assert_connection_reset(&status),
            Ending::Status(expected) => assert_eq!(code(&status), expected),
            _ => assert_stream_reset(&status),
        }
        assert_later_calls_pass(&proxy, &mut client).await;
    }

    // Zero messages: only the headers get through.
    let armed = proxy.inject(
        Method::path(STREAM),
        Fault::ResetMidStream { after_messages: 0 }.with_ending(Ending::ResetStream),
    );
    let mut stream = OpenStream::start(&mut client, "5 open")
        .await
        .expect("headers arrive");
    assert_eq!(stream.drain().await.0, Vec::<String>::new());
    within("fired", armed.fired()).await.expect("fired");

    // A stream shorter than the cut passes unharmed, and the fault reports why.
    let armed = proxy.inject(
        Method::path(STREAM),
        Fault::ResetMidStream { after_messages: 9 },
    );
    let mut stream = OpenStream::start(&mut client, "3").await.expect("stream");
    let (tokens, error) = stream.drain().await;
    assert_eq!(tokens, ["0", "1", "2"]);
    assert!(error.is_none(), "{error:?}");
    assert!(matches!(
        within("fired", armed.fired()).await,
        Err(FaultProxyError::NotApplied { .. })
    ));
    assert!(!armed.has_fired());
    assert_eq!(proxy.stats().fired(FaultKind::ResetMidStream), 4);
    assert_eq!(upstream.requests(STREAM), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nth_and_queued_faults_fire_once_each_in_order() {
    let (upstream, proxy, mut client) = setup().await;
    let third = proxy.inject(
        Method::path(COMMIT).nth(3),
        Fault::DropRequest.with_ending(Ending::Status(Code::Aborted)),
    );
    let first = proxy.inject(
        Method::path(COMMIT),
        Fault::DropRequest.with_ending(Ending::Status(Code::Unavailable)),
    );
    let second = proxy.inject(
        Method::path(COMMIT),
        Fault::DropRequest.with_ending(Ending::Status(Code::ResourceExhausted)),
    );
    // A fault for another method is not consumed by commits.
    let other = proxy.inject(Method::path(STREAM), Fault::ResetConnection);

    let codes: Vec<Code> = [
        commit(&mut client).await,
        commit(&mut client).await,
        commit(&mut client).await,
        commit(&mut client).await,
    ]
    .into_iter()
    .map(|result| result.err().map_or(Code::Ok, |status| code(&status)))
    .collect();
    assert_eq!(
        codes,
        [
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::Aborted,
            Code::Ok
        ]
    );
    for armed in [&first, &second, &third] {
        assert!(armed.has_fired());
    }
    assert!(!other.has_fired());
    assert!(other.disarm());
    assert!(!other.disarm());
    assert!(matches!(
        other.fired().await,
        Err(FaultProxyError::Disarmed)
    ));
    assert_eq!(upstream.requests(COMMIT), 1);
    assert_eq!(proxy.stats().fired(FaultKind::DropRequest), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_spares_other_connections_but_not_its_own_calls() {
    let (upstream, proxy, mut client) = setup().await;
    let mut other_client = connect(&proxy).await;

    // Open streams on both connections.
    let mut same = OpenStream::start(&mut client, "1 open")
        .await
        .expect("stream");
    let mut other = OpenStream::start(&mut other_client, "1 open")
        .await
        .expect("stream");
    assert_eq!(same.next().await.expect("msg"), Some("0".into()));
    assert_eq!(other.next().await.expect("msg"), Some("0".into()));

    // A stream reset on `client` leaves its other call alone.
    let armed = proxy.inject(
        Method::path(COMMIT),
        Fault::DropResponse.with_ending(Ending::ResetStream),
    );
    commit(&mut client).await.expect_err("fails");
    within("fired", armed.fired()).await.expect("fired");
    assert_eq!(upstream.push_to_open_streams("a"), 2);
    assert_eq!(
        same.next().await.expect("same conn alive"),
        Some("a".into())
    );
    assert_eq!(
        other.next().await.expect("other conn alive"),
        Some("a".into())
    );

    // A connection reset on `client` kills its open stream too, but not `other_client`'s.
    let armed = proxy.inject(Method::path(COMMIT), Fault::DropResponse);
    commit(&mut client).await.expect_err("fails");
    let fired = within("fired", armed.fired()).await.expect("fired");
    assert_eq!(fired.connection, 1);
    let status = same.next().await.expect_err("the reset killed the stream");
    eprintln!("other call on the reset connection: {}", describe(&status));
    assert_connection_reset(&status);
    upstream.push_to_open_streams("b");
    assert_eq!(
        other.next().await.expect("other conn alive"),
        Some("b".into())
    );
    commit(&mut other_client)
        .await
        .expect("other connection still works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_drop_end_everything() {
    let (_upstream, proxy, mut client) = setup().await;
    commit(&mut client).await.expect("works");
    let armed = proxy.inject(Method::path(COMMIT).nth(5), Fault::DropRequest);
    let addr = proxy.addr();
    within("stop", proxy.stop()).await;
    assert!(matches!(armed.fired().await, Err(FaultProxyError::Stopped)));
    assert!(!armed.disarm());
    commit(&mut client).await.expect_err("the proxy is gone");
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");

    let upstream = Upstream::start().await;
    let proxy = FaultProxy::start(upstream.addr.to_string())
        .await
        .expect("start");
    let armed = proxy.inject(Method::any(), Fault::Stall);
    let mut client = connect(&proxy).await;
    let pending = tokio::spawn(async move { commit(&mut client).await });
    // Wait until the stall is in place (the upstream answered), then drop the proxy.
    while upstream.requests(COMMIT) == 0 {
        tokio::task::yield_now().await;
    }
    drop(proxy);
    let result = within("stalled call", pending).await.expect("join");
    assert!(result.is_err());
    assert!(matches!(
        armed.fired().await,
        Err(FaultProxyError::Stopped) | Ok(_)
    ));
}
