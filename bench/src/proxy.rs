//! A counting gRPC proxy: every RPC between the benchmark's clients and the emulator passes
//! through it, so RPCs are counted where they really happen, for the SDK and for the
//! hand-written baselines alike.
//!
//! Requests are counted by method; `ExecuteSql` and `ExecuteStreamingSql` also by what the SQL
//! does (`RECEIVE`, `RENEWLEASE`, or the statement's first keyword), read from the request
//! (the proxy decodes only that field). Everything is forwarded unchanged, each client
//! connection over its own upstream HTTP/2 connection.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message as _;
use tokio::net::{TcpListener, TcpStream};

type ResponseBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// RPC counts by kind (`Commit`, `ExecuteSql:INSERT`, `ExecuteStreamingSql:RECEIVE`, …), and
/// the time each kind took, summed.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    counts: Mutex<BTreeMap<String, u64>>,
    /// Microseconds from forwarding each request to its response headers (for a unary call,
    /// its whole answer), summed by kind.
    micros: Mutex<BTreeMap<String, u64>>,
}

impl Counts {
    fn record(&self, kind: &str) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        match counts.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                counts.insert(kind.to_owned(), 1);
            }
        }
    }

    fn record_time(&self, kind: String, took: std::time::Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        *self
            .micros
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(kind)
            .or_default() += micros;
    }

    /// The counts so far.
    pub(crate) fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Microseconds until the response headers so far, summed by kind.
    pub(crate) fn micros_snapshot(&self) -> BTreeMap<String, u64> {
        self.micros
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Starts the proxy on a free loopback port, forwarding to `upstream`.
pub(crate) async fn start(upstream: SocketAddr) -> std::io::Result<(SocketAddr, Arc<Counts>)> {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let counts = Arc::new(Counts::default());
    let shared = Arc::clone(&counts);
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            let counts = Arc::clone(&shared);
            tokio::spawn(async move {
                if let Err(error) = serve(client, upstream, counts).await {
                    tracing::debug!(%error, "proxy connection ended");
                }
            });
        }
    });
    Ok((addr, counts))
}

async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    counts: Arc<Counts>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    client.set_nodelay(true)?;
    let upstream = TcpStream::connect(upstream).await?;
    upstream.set_nodelay(true)?;
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(upstream)).await?;
    tokio::spawn(connection);
    let service = hyper::service::service_fn(move |request| {
        forward(request, sender.clone(), Arc::clone(&counts))
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .max_concurrent_streams(10_000)
        .serve_connection(TokioIo::new(client), service)
        .await?;
    Ok(())
}

async fn forward(
    request: Request<Incoming>,
    mut sender: SendRequest<Full<Bytes>>,
    counts: Arc<Counts>,
) -> Result<Response<ResponseBody>, Infallible> {
    let (parts, body) = request.into_parts();
    // Spanner's RPCs are unary or server-streaming: the request is one message.
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return Ok(unavailable(&format!("proxy: reading the request: {error}"))),
    };
    let kind = classify(parts.uri.path(), &body);
    let sent = std::time::SystemTime::now();
    let started = std::time::Instant::now();
    counts.record(&kind);
    let request = Request::from_parts(parts, Full::new(body));
    if let Err(error) = sender.ready().await {
        return Ok(unavailable(&format!("proxy: upstream: {error}")));
    }
    let response = sender.send_request(request).await;
    if rpc_log() {
        log_rpc(&kind, sent);
    }
    counts.record_time(kind, started.elapsed());
    match response {
        Ok(response) => Ok(response.map(|body| body.boxed_unsync())),
        Err(error) => Ok(unavailable(&format!("proxy: upstream: {error}"))),
    }
}

/// Whether to log every RPC with its timing (`SPANNER_QUEUES_BENCH_RPC_LOG=1`): one line per
/// RPC on the emulator process's stderr (`emulator.log`), for finding where time goes.
pub(crate) fn rpc_log() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SPANNER_QUEUES_BENCH_RPC_LOG").is_some_and(|v| v == "1"))
}

/// `rpc <kind> <start, µs since the epoch> <µs until the response headers>`.
fn log_rpc(kind: &str, sent: std::time::SystemTime) {
    let start = sent
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    let took = sent.elapsed().unwrap_or_default().as_micros();
    eprintln!("rpc {kind} {start} {took}");
}

/// A trailers-only gRPC `UNAVAILABLE` answer.
fn unavailable(message: &str) -> Response<ResponseBody> {
    let mut response = Response::new(
        Empty::<Bytes>::new()
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", http::HeaderValue::from_static("14"));
    if let Ok(value) = http::HeaderValue::from_str(&message.replace(['\r', '\n'], " ")) {
        headers.insert("grpc-message", value);
    }
    response
}

/// The kind of one request: its method, plus what the SQL does for SQL methods.
pub(crate) fn classify(path: &str, body: &[u8]) -> String {
    let method = path.rsplit('/').next().unwrap_or(path);
    if method != "ExecuteSql" && method != "ExecuteStreamingSql" {
        return method.to_owned();
    }
    let sql = grpc_message(body)
        .and_then(|message| {
            googleapis_tonic_google_spanner_v1::google::spanner::v1::ExecuteSqlRequest::decode(
                message,
            )
            .ok()
        })
        .map(|request| request.sql)
        .unwrap_or_default();
    format!("{method}:{}", sql_kind(&sql))
}

/// The first message of a gRPC body (5-byte prefix: compression flag, big-endian length).
fn grpc_message(body: &[u8]) -> Option<&[u8]> {
    let (&compressed, rest) = body.split_first()?;
    if compressed != 0 || rest.len() < 4 {
        return None;
    }
    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    rest.get(4..4 + len)
}

/// `RECEIVE`, `RENEWLEASE`, or the statement's first keyword in upper case.
pub(crate) fn sql_kind(sql: &str) -> String {
    let upper = sql.to_ascii_uppercase();
    if upper.contains("RENEWLEASE_") {
        return "RENEWLEASE".to_owned();
    }
    if upper.contains("RECEIVE_") {
        return "RECEIVE".to_owned();
    }
    upper
        .split_whitespace()
        .next()
        .unwrap_or("EMPTY")
        .trim_matches(|c: char| !c.is_ascii_alphabetic())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_kinds() {
        assert_eq!(
            sql_kind("SELECT * FROM RECEIVE_Jobs(max_duration => '1s')"),
            "RECEIVE"
        );
        assert_eq!(
            sql_kind("select * from renewlease_Jobs(lease_tokens => @t)"),
            "RENEWLEASE"
        );
        assert_eq!(sql_kind("  insert INTO T (Id) VALUES (1)"), "INSERT");
        assert_eq!(sql_kind("DELETE FROM Jobs WHERE Id = 1"), "DELETE");
    }

    #[test]
    fn classify_decodes_the_sql_of_a_request() {
        let request = googleapis_tonic_google_spanner_v1::google::spanner::v1::ExecuteSqlRequest {
            sql: "SELECT * FROM RECEIVE_Jobs()".into(),
            ..Default::default()
        };
        let message = request.encode_to_vec();
        let mut body = vec![0];
        body.extend_from_slice(&(message.len() as u32).to_be_bytes());
        body.extend_from_slice(&message);
        assert_eq!(
            classify("/google.spanner.v1.Spanner/ExecuteStreamingSql", &body),
            "ExecuteStreamingSql:RECEIVE"
        );
        assert_eq!(
            classify("/google.spanner.v1.Spanner/Commit", &body),
            "Commit"
        );
        assert_eq!(
            classify("/google.spanner.v1.Spanner/ExecuteSql", &[]),
            "ExecuteSql:EMPTY"
        );
    }
}
