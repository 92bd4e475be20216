//! Connection handling and routing.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;

use super::grpc;
use super::shared::Shared;

/// Accepts connections until `cancel` fires.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        let cancel = cancel.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(route(shared, req).await) }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = cancel.cancelled() => {}
                result = connection => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, %error, "connection closed with an error");
                    }
                }
            }
        });
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
    }
    connections.shutdown().await;
}

fn is_grpc(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

async fn route(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    if is_grpc(&req) {
        grpc::route(shared, req).await
    } else {
        proxy_rest(&shared, req).await
    }
}

/// Forwards an HTTP/1.1 (REST) request to the gateway.
async fn proxy_rest(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let Some(rest) = shared.rest_addr() else {
        return plain_response(
            StatusCode::NOT_FOUND,
            "this endpoint serves gRPC only (no REST gateway configured)",
        );
    };
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    parts.uri = match format!("http://{rest}{path}").parse() {
        Ok(uri) => uri,
        Err(_) => return plain_response(StatusCode::BAD_REQUEST, "invalid request path"),
    };
    parts.version = http::Version::HTTP_11;
    for name in [
        http::header::CONNECTION,
        http::header::TRANSFER_ENCODING,
        http::header::UPGRADE,
    ] {
        parts.headers.remove(name);
    }
    parts.headers.remove("keep-alive");
    let outgoing = Request::from_parts(parts, Body::new(body));
    match shared.rest_client.request(outgoing).await {
        Ok(response)
            if response.status().is_client_error() || response.status().is_server_error() =>
        {
            google_error_body(response).await
        }
        Ok(response) => response.map(Body::new),
        Err(error) => plain_response(
            StatusCode::BAD_GATEWAY,
            &format!("REST gateway unreachable: {error}"),
        ),
    }
}

/// The official emulator's gateway answers errors with a flat `{"code": 3, "message": …}` body;
/// Google APIs (and so the official clients' error parsing) use
/// `{"error": {"code": 400, "message": …, "status": "INVALID_ARGUMENT", "details": […]}}`.
/// Rewrites the former into the latter so that clients see the gRPC status of REST errors.
async fn google_error_body(response: Response<Incoming>) -> Response<Body> {
    use http_body_util::BodyExt as _;
    let (mut parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return plain_response(
                StatusCode::BAD_GATEWAY,
                &format!("REST gateway error body unreadable: {error}"),
            );
        }
    };
    let rewritten = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|flat| {
            let code = flat.get("code")?.as_i64()?;
            if flat.get("error").is_some() {
                return None;
            }
            let status = grpc_code_name(code)?;
            Some(serde_json::json!({
                "error": {
                    "code": parts.status.as_u16(),
                    "message": flat.get("message").cloned().unwrap_or_default(),
                    "status": status,
                    "details": flat.get("details").cloned().unwrap_or_else(|| serde_json::json!([])),
                }
            }))
        })
        .and_then(|json| serde_json::to_vec(&json).ok());
    let bytes = match rewritten {
        Some(body) => {
            parts.headers.remove(http::header::CONTENT_LENGTH);
            parts.headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            bytes::Bytes::from(body)
        }
        None => bytes,
    };
    Response::from_parts(parts, Body::new(http_body_util::Full::new(bytes)))
}

/// The canonical name of a gRPC status code.
fn grpc_code_name(code: i64) -> Option<&'static str> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i).copied())
}

fn plain_response(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Body::new(http_body_util::Full::new(bytes::Bytes::from(
        text.to_owned(),
    ))));
    *response.status_mut() = status;
    response
}
