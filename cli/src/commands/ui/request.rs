//! What the console takes from a request: the `Host` check, the queue in the path, query
//! strings and forms (with repeated fields), and the checks every write passes first.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use spanner_queues::ident::QueueName;

use super::{Console, MAX_FORM_BYTES, PageError};

/// Whether a `Host` header names this machine's loopback interface.
pub(super) fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [::1]:8080
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Refuses a request whose `Host` is not a loopback name when the console listens on loopback:
/// a page of another site that rebinds its name to 127.0.0.1 sends its own name.
pub(super) async fn check_host(
    State(console): State<Arc<Console>>,
    request: Request,
    next: Next,
) -> Response {
    if console.loopback_only {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()));
        if !host.is_some_and(loopback_host) {
            return PageError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "this console answers only to a loopback host name (localhost, 127.0.0.1, [::1]); \
                 start it with --allow-remote to serve other names",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// The `{queue}` of a route, checked to be a queue name.
#[derive(Debug)]
pub(super) struct QueuePath(pub(super) String);

impl<S: Send + Sync> FromRequestParts<S> for QueuePath {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(queue) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e| PageError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
        QueueName::new(&queue).map_err(|e| {
            PageError::new(
                StatusCode::BAD_REQUEST,
                format!("`{queue}` is not a queue name: {e}"),
            )
        })?;
        Ok(Self(queue))
    }
}

/// A form's or query string's fields, in order (repeated fields such as `key` kept).
#[derive(Debug, Default)]
pub(super) struct Fields(Vec<(String, String)>);

impl Fields {
    pub(super) fn parse(text: &str) -> Self {
        Self(
            form_urlencoded::parse(text.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// Refuses fields other than `allowed`.
    pub(super) fn only(&self, allowed: &[&str]) -> Result<(), PageError> {
        let unknown: BTreeSet<&str> = self
            .0
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !allowed.contains(k))
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(PageError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "unknown field(s): {}",
                    unknown.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ))
        }
    }

    pub(super) fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The one value of `name`, if given; twice is an error.
    pub(super) fn one(&self, name: &str) -> Result<Option<String>, PageError> {
        let mut values = self.all(name);
        match values.len() {
            0 => Ok(None),
            1 => Ok(values.pop()),
            _ => Err(PageError::new(
                StatusCode::BAD_REQUEST,
                format!("`{name}` is given more than once"),
            )),
        }
    }

    /// The key values (`key`, repeated in primary-key order), at least one.
    pub(super) fn keys(&self) -> Result<Vec<String>, PageError> {
        let keys = self.all("key");
        if keys.is_empty() {
            return Err(PageError::new(
                StatusCode::BAD_REQUEST,
                "no `key`: give the dead letter's key values, in primary-key order",
            ));
        }
        Ok(keys)
    }
}

/// The query string's fields.
pub(super) fn query(raw: Option<String>) -> Fields {
    raw.as_deref().map(Fields::parse).unwrap_or_default()
}

/// A write's form, accepted only when writes are allowed, with the console's token and, if the
/// browser says where the form came from, from the console itself.
#[derive(Debug)]
pub(super) struct WriteForm(pub(super) Fields);

impl FromRequest<Arc<Console>> for WriteForm {
    type Rejection = PageError;

    async fn from_request(request: Request, console: &Arc<Console>) -> Result<Self, PageError> {
        if !console.allow_writes {
            return Err(PageError::new(
                StatusCode::FORBIDDEN,
                "this console is read-only: nothing was changed. Start it with \
                 `spanner-queues ui --allow-writes` to replay, purge, pause and resume",
            ));
        }
        same_origin(request.headers())?;
        let form_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim() == "application/x-www-form-urlencoded");
        if !form_type {
            return Err(PageError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "actions take an HTML form (application/x-www-form-urlencoded); nothing was changed",
            ));
        }
        let body = axum::body::to_bytes(request.into_body(), MAX_FORM_BYTES)
            .await
            .map_err(|_| {
                PageError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the form is too large; nothing was changed",
                )
            })?;
        let text = std::str::from_utf8(&body).map_err(|_| {
            PageError::new(
                StatusCode::BAD_REQUEST,
                "the form is not UTF-8; nothing was changed",
            )
        })?;
        let mut fields = Fields::parse(text);
        let tokens = fields.all("token");
        if tokens.len() != 1 || tokens[0] != console.token {
            return Err(PageError::new(
                StatusCode::FORBIDDEN,
                "the form's token is missing or not this console's (a form from another page, \
                 or from before the console restarted): reload the page; nothing was changed",
            ));
        }
        fields.0.retain(|(k, _)| k != "token");
        Ok(Self(fields))
    }
}

/// Refuses a request that the browser says came from another site.
fn same_origin(headers: &HeaderMap) -> Result<(), PageError> {
    let refused = || {
        PageError::new(
            StatusCode::FORBIDDEN,
            "the form was sent from another site; nothing was changed",
        )
    };
    if let Some(site) = headers.get("sec-fetch-site")
        && !matches!(site.to_str(), Ok("same-origin" | "none"))
    {
        return Err(refused());
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let origin = origin.to_str().ok();
        let same = match (origin, host) {
            (Some(origin), Some(host)) => origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|o| o.eq_ignore_ascii_case(host)),
            _ => false,
        };
        if !same {
            return Err(refused());
        }
    }
    Ok(())
}
