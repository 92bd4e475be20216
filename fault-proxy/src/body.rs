//! The response bodies the proxy sends to clients: the upstream's, passed through as it arrives;
//! a whole answer held back; or the upstream's cut after some messages. And the gRPC status
//! helpers they share.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use google_cloud_gax::error::rpc::Code;
use http::{HeaderMap, HeaderValue, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::link::{ConnHandle, ProxyError};
use crate::plan::Ending;
use crate::shared::{FireDetails, Firing, Shared};
use crate::stats::RowCounter;

/// The `grpc-message` the proxy puts on statuses it makes up.
pub(crate) const INJECTED_MESSAGE: &str = "fault injected by FaultProxy";

pub(crate) fn grpc_status(headers: &HeaderMap) -> Option<Code> {
    let value = headers.get("grpc-status")?.to_str().ok()?;
    value.trim().parse::<i32>().ok().map(Code::from)
}

pub(crate) fn status_headers(code: Code, headers: &mut HeaderMap) {
    headers.insert("grpc-status", HeaderValue::from(code as i32));
    headers.insert("grpc-message", HeaderValue::from_static(INJECTED_MESSAGE));
}

/// A trailers-only gRPC response carrying `code`.
pub(crate) fn status_response(code: Code) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::Empty);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    status_headers(code, headers);
    response
}

/// The body the proxy sends to the client.
pub(crate) enum ProxyBody {
    /// The upstream's body, frame by frame, as it arrives.
    Pass(Passed),
    /// No body (trailers-only responses).
    Empty,
    /// The upstream's body, cut after some messages.
    MidStream(Box<MidStream>),
    /// The upstream's whole answer, read before it was passed on.
    Held(Held),
}

/// A whole answer held by [`Fault::HoldResponse`](crate::Fault::HoldResponse): its data, then its trailers.
pub(crate) struct Held {
    pub(crate) data: Option<Bytes>,
    pub(crate) trailers: Option<HeaderMap>,
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = ProxyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ProxyError>>> {
        match self.get_mut() {
            Self::Pass(passed) => passed.poll_frame(cx),
            Self::Empty => Poll::Ready(None),
            Self::MidStream(cut) => cut.poll_frame(cx),
            Self::Held(held) => Poll::Ready(
                held.data
                    .take()
                    .map(Frame::data)
                    .or_else(|| held.trailers.take().map(Frame::trailers))
                    .map(Ok),
            ),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Pass(passed) => passed.body.is_end_stream(),
            Self::Empty => true,
            Self::MidStream(cut) => cut.done,
            Self::Held(held) => held.data.is_none() && held.trailers.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Pass(passed) => passed.body.size_hint(),
            Self::Empty => SizeHint::with_exact(0),
            Self::MidStream(_) => SizeHint::default(),
            Self::Held(_) => SizeHint::default(),
        }
    }
}

pub(crate) type CutFuture =
    Pin<Box<dyn Future<Output = Option<Result<Frame<Bytes>, ProxyError>>> + Send>>;

impl ProxyBody {
    /// The upstream's body, passed on as it arrives; `rows` counts its result-set rows.
    pub(crate) fn pass(body: Incoming, rows: Option<RowTally>) -> Self {
        Self::Pass(Passed {
            body,
            rows: rows.map(Box::new),
        })
    }
}

/// The upstream's body, passed on frame by frame.
pub(crate) struct Passed {
    body: Incoming,
    rows: Option<Box<RowTally>>,
}

impl Passed {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ProxyError>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        // Counted before the frame goes on: a client that has read rows finds them counted.
        if let (Some(rows), Some(Ok(frame))) = (self.rows.as_mut(), frame.as_ref())
            && let Some(data) = frame.data_ref()
        {
            rows.feed(data);
        }
        Poll::Ready(frame.map(|frame| frame.map_err(ProxyError::Upstream)))
    }
}

/// Adds the rows of one answer to the proxy's counters as they pass: a long stream (a
/// `RECEIVE` waiting for messages) counts each row before the client gets it, not at its end.
pub(crate) struct RowTally {
    counter: RowCounter,
    kind: String,
    shared: Arc<Shared>,
    /// Rows already added to the counters.
    counted: u64,
}

impl RowTally {
    pub(crate) fn new(counter: RowCounter, kind: String, shared: Arc<Shared>) -> Self {
        Self {
            counter,
            kind,
            shared,
            counted: 0,
        }
    }

    fn feed(&mut self, data: &Bytes) {
        self.counter.feed(data);
        let rows = self.counter.rows();
        if rows > self.counted {
            self.shared.count_rows(&self.kind, rows - self.counted);
            self.counted = rows;
        }
    }
}

/// Passes `target` gRPC messages of the upstream body, then ends the call per `ending`.
pub(crate) struct MidStream {
    pub(crate) upstream: Option<Incoming>,
    pub(crate) counter: MessageCounter,
    pub(crate) target: u64,
    pub(crate) ending: Ending,
    pub(crate) conn: ConnHandle,
    pub(crate) firing: Option<Firing>,
    pub(crate) cut: Option<CutFuture>,
    pub(crate) done: bool,
}

impl MidStream {
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ProxyError>>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if let Some(cut) = self.cut.as_mut() {
                let last = ready!(cut.as_mut().poll(cx));
                self.cut = None;
                self.done = true;
                return Poll::Ready(last);
            }
            if self.counter.completed >= self.target {
                // Dropping the upstream body cancels the upstream call.
                self.upstream = None;
                self.cut = Some(Box::pin(cut_call(
                    self.conn.clone(),
                    self.ending,
                    self.firing.take(),
                )));
                continue;
            }
            let Some(upstream) = self.upstream.as_mut() else {
                self.done = true;
                continue;
            };
            let frame = match ready!(Pin::new(upstream).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(error)) => {
                    self.give_up(format!("the upstream stream failed: {error}"));
                    self.done = true;
                    return Poll::Ready(Some(Err(ProxyError::Upstream(error))));
                }
                None => {
                    self.give_up(self.ended_early());
                    self.done = true;
                    return Poll::Ready(None);
                }
            };
            return match frame.into_data() {
                Ok(data) => {
                    let data = match self.counter.feed(&data, self.target) {
                        Some(end) => data.slice(..end),
                        None => data,
                    };
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Err(trailers) => {
                    self.give_up(self.ended_early());
                    self.done = true;
                    Poll::Ready(Some(Ok(trailers)))
                }
            };
        }
    }

    pub(crate) fn ended_early(&self) -> String {
        format!(
            "the response ended after {} of the {} messages to let through",
            self.counter.completed, self.target
        )
    }

    pub(crate) fn give_up(&mut self, reason: String) {
        if let Some(firing) = self.firing.take() {
            firing.not_applied(reason);
        }
    }
}

pub(crate) async fn cut_call(
    conn: ConnHandle,
    ending: Ending,
    firing: Option<Firing>,
) -> Option<Result<Frame<Bytes>, ProxyError>> {
    match ending {
        Ending::Status(code) => {
            if let Some(firing) = firing {
                firing.fire(FireDetails::default());
            }
            let mut trailers = HeaderMap::new();
            status_headers(code, &mut trailers);
            Some(Ok(Frame::trailers(trailers)))
        }
        Ending::ResetStream => {
            // A stream reset discards the stream's queued frames: let the messages out first.
            conn.barrier().await;
            if let Some(firing) = firing {
                firing.fire(FireDetails::default());
            }
            Some(Err(ProxyError::Injected))
        }
        Ending::ResetConnection => {
            conn.barrier().await;
            conn.reset(firing.map(|firing| (firing, FireDetails::default())))
                .await;
            conn.closed().await;
            Some(Err(ProxyError::Closed))
        }
    }
}

/// Counts gRPC messages (1-byte flag, 4-byte big-endian length, payload) in a byte stream.
#[derive(Debug, Default)]
pub(crate) struct MessageCounter {
    pub(crate) header: [u8; 5],
    pub(crate) header_len: usize,
    pub(crate) payload_left: u64,
    pub(crate) completed: u64,
}

impl MessageCounter {
    /// Consumes `chunk`. If message number `stop_at` (1-based) is completed by this chunk,
    /// returns the offset just past its last byte and stops counting there.
    pub(crate) fn feed(&mut self, chunk: &[u8], stop_at: u64) -> Option<usize> {
        let mut pos = 0;
        while self.completed < stop_at && pos < chunk.len() {
            if self.header_len < self.header.len() {
                let take = (self.header.len() - self.header_len).min(chunk.len() - pos);
                self.header[self.header_len..self.header_len + take]
                    .copy_from_slice(&chunk[pos..pos + take]);
                self.header_len += take;
                pos += take;
                if self.header_len < self.header.len() {
                    continue;
                }
                let [_, a, b, c, d] = self.header;
                self.payload_left = u64::from(u32::from_be_bytes([a, b, c, d]));
            } else {
                let available = (chunk.len() - pos) as u64;
                let take = self.payload_left.min(available);
                // `take` is at most `chunk.len() - pos`, so it fits in usize.
                pos += take as usize;
                self.payload_left -= take;
            }
            if self.payload_left == 0 && self.header_len == self.header.len() {
                self.completed += 1;
                self.header_len = 0;
                if self.completed == stop_at {
                    return Some(pos);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;

    use super::*;

    fn grpc_frame(message: &impl prost::Message) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_u8(0);
        buf.put_u32(u32::try_from(message.encoded_len()).expect("small message"));
        message.encode(&mut buf).expect("encode");
        buf.freeze()
    }

    #[test]
    fn message_counter_finds_the_end_of_the_nth_message() {
        let one = grpc_frame(&pb::PartialResultSet {
            resume_token: Bytes::from_static(b"abc"),
            ..Default::default()
        });
        let empty = Bytes::from_static(&[0, 0, 0, 0, 0]);
        let mut stream = BytesMut::new();
        stream.extend_from_slice(&one);
        stream.extend_from_slice(&empty);
        stream.extend_from_slice(&one);
        let stream = stream.freeze();
        let ends = [one.len(), one.len() + 5, 2 * one.len() + 5];

        for (n, end) in ends.iter().enumerate() {
            let stop_at = n as u64 + 1;
            // Whole buffer at once.
            let mut counter = MessageCounter::default();
            assert_eq!(counter.feed(&stream, stop_at), Some(*end), "n = {stop_at}");
            assert_eq!(counter.completed, stop_at);
            // Byte by byte: the cut comes with the last byte of message n.
            let mut counter = MessageCounter::default();
            let mut cut = None;
            for (i, byte) in stream.iter().enumerate() {
                if let Some(at) = counter.feed(std::slice::from_ref(byte), stop_at) {
                    assert_eq!(at, 1);
                    cut = Some(i + 1);
                    break;
                }
            }
            assert_eq!(cut, Some(*end), "n = {stop_at}, byte by byte");
        }
        // Not reached: the whole chunk passes.
        let mut counter = MessageCounter::default();
        assert_eq!(counter.feed(&stream, 4), None);
        assert_eq!(counter.completed, 3);
    }
}
