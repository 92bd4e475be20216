//! Counters of what a proxy has seen: connections, requests by path, faults fired, and the
//! calls it forwarded by kind of RPC (how many, how long until the upstream answered, how many
//! rows their result sets returned).
//!
//! A call's kind is its gRPC method (`Commit`, `BeginTransaction`, ...) and, for Spanner's SQL
//! methods (`ExecuteSql`, `ExecuteStreamingSql`), what the statement does:
//! `ExecuteSql:INSERT`, `ExecuteStreamingSql:RECEIVE`, ... (see [`Stats::rpcs`]). Only the
//! request's `sql` field is decoded, and only the row counts of result sets; nothing else of a
//! message is read.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Buf, Bytes, BytesMut};
use prost::Message as _;
use spanner_queues_sql::{Dialect, Lexer, TokenKind, contains_ignore_case, skip_hints};

use crate::plan::FaultKind;

/// Counters of what a [`FaultProxy`](crate::FaultProxy) has seen since it started; see [`FaultProxy::stats`](crate::FaultProxy::stats).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Client connections accepted.
    pub connections: u64,
    /// Client connections the proxy reset on purpose.
    pub connections_reset: u64,
    /// Requests received from clients, by `:path`.
    pub requests: BTreeMap<String, u64>,
    /// Requests forwarded to the upstream, by `:path`.
    pub forwarded: BTreeMap<String, u64>,
    /// Faults applied, by kind (a fault that matched but could not be applied is not counted).
    pub faults_fired: BTreeMap<FaultKind, u64>,
    /// Calls forwarded to the upstream, by kind of RPC: the method (the last segment of the
    /// `:path`, such as `Commit`), and for `ExecuteSql` and `ExecuteStreamingSql` also what the
    /// SQL does after a colon: `RECEIVE` or `RENEWLEASE` for queue reads, otherwise the
    /// statement's first keyword in upper case (`ExecuteSql:INSERT`, `ExecuteSql:SELECT`;
    /// `EMPTY` when there is none or the request could not be read).
    pub rpcs: BTreeMap<String, RpcStats>,
}

/// What the proxy measured for one kind of RPC; see [`Stats::rpcs`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RpcStats {
    /// Calls forwarded to the upstream (including calls a fault then broke).
    pub calls: u64,
    /// Time from forwarding each call until the upstream's response headers arrived (for a
    /// unary call, about its whole answer), summed over the calls.
    pub time_to_headers: Duration,
    /// Rows in the result sets the upstream returned (`ResultSet.rows`, or the rows a stream of
    /// `PartialResultSet`s carries), counted as they pass on to the client (each before the
    /// client can read it, so an open stream's rows count too). Not counted in answers a fault
    /// discarded or cut.
    pub rows: u64,
}

impl Stats {
    /// Requests received whose `:path` ends with `suffix`.
    pub fn requests_to(&self, suffix: &str) -> u64 {
        sum_matching(&self.requests, suffix)
    }

    /// Requests forwarded whose `:path` ends with `suffix`.
    pub fn forwarded_to(&self, suffix: &str) -> u64 {
        sum_matching(&self.forwarded, suffix)
    }

    /// How many faults of this kind were applied.
    pub fn fired(&self, kind: FaultKind) -> u64 {
        self.faults_fired.get(&kind).copied().unwrap_or(0)
    }

    /// The counters of one kind of RPC (see [`Stats::rpcs`]); zero if none was forwarded.
    pub fn rpc(&self, kind: &str) -> RpcStats {
        self.rpcs.get(kind).copied().unwrap_or_default()
    }
}

/// One call the proxy forwarded, as an observer set with
/// [`FaultProxyBuilder::with_rpc_observer`](crate::FaultProxyBuilder::with_rpc_observer) sees it once the upstream's response headers arrived
/// (or the upstream call failed).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RpcRecord<'a> {
    /// The call's kind (see [`Stats::rpcs`]).
    pub kind: &'a str,
    /// When the proxy forwarded it.
    pub sent: SystemTime,
    /// From forwarding it until the upstream's response headers arrived.
    pub time_to_headers: Duration,
}

/// What [`FaultProxyBuilder::with_rpc_observer`](crate::FaultProxyBuilder::with_rpc_observer) keeps.
#[derive(Clone)]
pub(crate) struct RpcObserver(pub(crate) Arc<dyn Fn(&RpcRecord<'_>) + Send + Sync>);

impl fmt::Debug for RpcObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RpcObserver")
    }
}

fn sum_matching(counts: &BTreeMap<String, u64>, suffix: &str) -> u64 {
    counts
        .iter()
        .filter(|(path, _)| path.ends_with(suffix))
        .map(|(_, n)| n)
        .sum()
}

// ---------------------------------------------------------------------------------------------
// What the proxy reads of a call: the SQL of a request, the row counts of result sets.

/// The kind of a call (see [`Stats::rpcs`]) from its `:path` and its request body.
pub(crate) fn rpc_kind(path: &str, request: &[u8]) -> String {
    let method = method(path);
    if method != "ExecuteSql" && method != "ExecuteStreamingSql" {
        return method.to_owned();
    }
    let sql = first_message(request)
        .and_then(|message| SqlOnly::decode(message).ok())
        .map(|request| request.sql)
        .unwrap_or_default();
    format!("{method}:{}", sql_kind(&sql))
}

/// The gRPC method of a `:path` (`/google.spanner.v1.Spanner/Commit` → `Commit`).
pub(crate) fn method(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `RECEIVE`, `RENEWLEASE`, or the statement's first keyword in upper case (`EMPTY` if none),
/// after comments, hints and opening parentheses.
fn sql_kind(sql: &str) -> String {
    if contains_ignore_case(sql, "RENEWLEASE_") {
        return "RENEWLEASE".to_owned();
    }
    if contains_ignore_case(sql, "RECEIVE_") {
        return "RECEIVE".to_owned();
    }
    // The dialect of the database is not known here: GoogleSQL's lexer reads a first word of
    // either dialect (PostgreSQL's comments and quotes are a subset of its own).
    let head: Vec<_> = Lexer::new(sql, Dialect::GoogleSql)
        .take(32)
        .map_while(Result::ok)
        .collect();
    let first = head[skip_hints(&head, 0)..]
        .iter()
        .find(|token| !token.is_punct("("));
    match first {
        Some(token) if token.kind == TokenKind::Word => token.text.to_ascii_uppercase(),
        _ => "EMPTY".to_owned(),
    }
}

/// The first message of a gRPC body (a 5-byte prefix: compression flag, big-endian length).
/// `None` for a compressed or truncated message.
fn first_message(body: &[u8]) -> Option<&[u8]> {
    let (&compressed, rest) = body.split_first()?;
    if compressed != 0 || rest.len() < 4 {
        return None;
    }
    let len = usize::try_from(u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]])).ok()?;
    rest.get(4..4usize.checked_add(len)?)
}

// The few fields the proxy reads of Spanner's messages (`google.spanner.v1`), declared here so
// that nothing else is decoded: a nested message is read as the bytes it is made of.

/// `ExecuteSqlRequest`, its `sql` only.
#[derive(Clone, PartialEq, prost::Message)]
struct SqlOnly {
    #[prost(string, tag = "3")]
    sql: String,
}

/// `ResultSet`, its `rows` only (each a `ListValue`, left encoded).
#[derive(Clone, PartialEq, prost::Message)]
struct ResultRows {
    #[prost(bytes = "bytes", repeated, tag = "2")]
    rows: Vec<Bytes>,
}

/// `PartialResultSet`: `metadata` (present in the first message of a stream), `values` (left
/// encoded) and `chunked_value`.
#[derive(Clone, PartialEq, prost::Message)]
struct PartialRows {
    #[prost(message, optional, tag = "1")]
    metadata: Option<Metadata>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    values: Vec<Bytes>,
    #[prost(bool, tag = "3")]
    chunked_value: bool,
}

/// `ResultSetMetadata`, its `row_type` only.
#[derive(Clone, PartialEq, prost::Message)]
struct Metadata {
    #[prost(message, optional, tag = "1")]
    row_type: Option<RowType>,
}

/// `StructType`, its `fields` (the columns, left encoded).
#[derive(Clone, PartialEq, prost::Message)]
struct RowType {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    fields: Vec<Bytes>,
}

/// Which result sets the answer of a method carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// One `ResultSet` (`ExecuteSql`, `Read`).
    ResultSet,
    /// A stream of `PartialResultSet`s (`ExecuteStreamingSql`, `StreamingRead`).
    Partial,
}

/// Counts the rows of the result sets in a response body, fed chunk by chunk as it streams.
#[derive(Debug)]
pub(crate) struct RowCounter {
    shape: Shape,
    /// The start of a message that the chunks so far have not completed.
    pending: BytesMut,
    /// `ResultSet` rows.
    rows: u64,
    /// Columns, from the first `PartialResultSet`'s metadata.
    columns: u64,
    /// `PartialResultSet` values, pieces of chunked values included.
    values: u64,
    /// Values continued in the next message (each joins two pieces into one value).
    chunked: u64,
}

impl RowCounter {
    /// A counter for the answers of `method`, or `None` if they carry no result sets.
    pub(crate) fn for_method(method: &str) -> Option<Self> {
        let shape = match method {
            "ExecuteSql" | "Read" => Shape::ResultSet,
            "ExecuteStreamingSql" | "StreamingRead" => Shape::Partial,
            _ => return None,
        };
        Some(Self {
            shape,
            pending: BytesMut::new(),
            rows: 0,
            columns: 0,
            values: 0,
            chunked: 0,
        })
    }

    /// Reads the messages `chunk` completes.
    pub(crate) fn feed(&mut self, chunk: &Bytes) {
        if self.pending.is_empty() {
            // The usual case: the chunk starts with a message; read the whole ones in place.
            let mut rest = chunk.clone();
            while let Some(message) = take_message(&mut rest) {
                self.count(message);
            }
            self.pending.extend_from_slice(&rest);
            return;
        }
        self.pending.extend_from_slice(chunk);
        let mut rest = std::mem::take(&mut self.pending).freeze();
        while let Some(message) = take_message(&mut rest) {
            self.count(message);
        }
        self.pending.extend_from_slice(&rest);
    }

    /// The rows counted so far.
    pub(crate) fn rows(&self) -> u64 {
        match self.shape {
            Shape::ResultSet => self.rows,
            Shape::Partial if self.columns == 0 => 0,
            Shape::Partial => self.values.saturating_sub(self.chunked) / self.columns,
        }
    }

    fn count(&mut self, message: Bytes) {
        match self.shape {
            Shape::ResultSet => {
                if let Ok(result) = ResultRows::decode(message) {
                    self.rows += result.rows.len() as u64;
                }
            }
            Shape::Partial => {
                let Ok(partial) = PartialRows::decode(message) else {
                    return;
                };
                if let Some(row_type) = partial.metadata.and_then(|m| m.row_type) {
                    self.columns = row_type.fields.len() as u64;
                }
                self.values += partial.values.len() as u64;
                self.chunked += u64::from(partial.chunked_value);
            }
        }
    }
}

/// Splits the first whole gRPC message off `rest` (its payload, without the 5-byte prefix);
/// `None` if `rest` does not hold a whole one yet.
fn take_message(rest: &mut Bytes) -> Option<Bytes> {
    let header = rest.get(..5)?;
    let len = usize::try_from(u32::from_be_bytes([
        header[1], header[2], header[3], header[4],
    ]))
    .ok()?;
    if rest.len() - 5 < len {
        return None;
    }
    rest.advance(5);
    Some(rest.split_to(len))
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;
    use pb::{StructType, struct_type::Field};
    use prost_types::{ListValue, Value, value::Kind};

    use super::*;

    fn grpc_frame(message: &impl prost::Message) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_u8(0);
        buf.put_u32(u32::try_from(message.encoded_len()).expect("small message"));
        message.encode(&mut buf).expect("encode");
        buf.freeze()
    }

    fn text(s: &str) -> Value {
        Value {
            kind: Some(Kind::StringValue(s.to_owned())),
        }
    }

    fn metadata(columns: &[&str]) -> pb::ResultSetMetadata {
        pb::ResultSetMetadata {
            row_type: Some(StructType {
                fields: columns
                    .iter()
                    .map(|name| Field {
                        name: (*name).to_owned(),
                        r#type: None,
                    })
                    .collect(),
            }),
            ..Default::default()
        }
    }

    /// Feeds `body` whole and byte by byte; both must count `rows`.
    fn assert_rows(method: &str, body: &Bytes, rows: u64) {
        let mut whole = RowCounter::for_method(method).expect("a method with result sets");
        whole.feed(body);
        assert_eq!(whole.rows(), rows, "{method}, whole body");
        let mut bytewise = RowCounter::for_method(method).expect("a method with result sets");
        for i in 0..body.len() {
            bytewise.feed(&body.slice(i..=i));
        }
        assert_eq!(bytewise.rows(), rows, "{method}, byte by byte");
    }

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
        assert_eq!(sql_kind("(SELECT 1)"), "SELECT");
        assert_eq!(sql_kind(""), "EMPTY");
        assert_eq!(sql_kind("  42 "), "EMPTY");
        assert_eq!(
            sql_kind("@{LOCK_SCANNED_RANGES=exclusive} /* c */ -- x\n delete T WHERE 1=1"),
            "DELETE"
        );
    }

    #[test]
    fn the_kind_of_a_sql_call_comes_from_its_request() {
        let request = pb::ExecuteSqlRequest {
            session: "projects/p/instances/i/databases/d/sessions/s".into(),
            sql: "SELECT * FROM RECEIVE_Jobs()".into(),
            params: Some(prost_types::Struct::default()),
            ..Default::default()
        };
        let body = grpc_frame(&request);
        assert_eq!(
            rpc_kind("/google.spanner.v1.Spanner/ExecuteStreamingSql", &body),
            "ExecuteStreamingSql:RECEIVE"
        );
        assert_eq!(
            rpc_kind("/google.spanner.v1.Spanner/ExecuteSql", &body),
            "ExecuteSql:RECEIVE"
        );
        // Other methods are their name, whatever the body.
        assert_eq!(
            rpc_kind("/google.spanner.v1.Spanner/Commit", &body),
            "Commit"
        );
        // A body that is not a whole message has no SQL to read.
        assert_eq!(
            rpc_kind(
                "/google.spanner.v1.Spanner/ExecuteSql",
                &body[..body.len() - 1]
            ),
            "ExecuteSql:EMPTY"
        );
        assert_eq!(
            rpc_kind("/google.spanner.v1.Spanner/ExecuteSql", &[]),
            "ExecuteSql:EMPTY"
        );
    }

    #[test]
    fn rows_of_a_result_set() {
        let row = |id: &str| ListValue {
            values: vec![text(id), text("payload")],
        };
        let answer = pb::ResultSet {
            metadata: Some(metadata(&["Id", "Payload"])),
            rows: vec![row("1"), row("2"), row("3")],
            ..Default::default()
        };
        let body = grpc_frame(&answer);
        assert_rows("ExecuteSql", &body, 3);
        assert_rows("Read", &body, 3);
        // An empty result set, and no answer at all.
        assert_rows("ExecuteSql", &grpc_frame(&pb::ResultSet::default()), 0);
        assert_rows("ExecuteSql", &Bytes::new(), 0);
        // Methods without result sets get no counter.
        assert!(RowCounter::for_method("Commit").is_none());
        assert!(RowCounter::for_method("ExecuteBatchDml").is_none());
    }

    #[test]
    fn rows_of_a_stream_of_partial_result_sets_with_a_chunked_value() {
        // Two columns, three rows: (1, "ab"), (2, "cd"), (3, "ef"); "cd" is split over the
        // second and third messages (chunked), so the stream carries 7 values for 6.
        let stream = [
            pb::PartialResultSet {
                metadata: Some(metadata(&["Id", "Payload"])),
                values: vec![text("1"), text("ab"), text("2"), text("c")],
                chunked_value: true,
                ..Default::default()
            },
            pb::PartialResultSet {
                values: vec![text("d"), text("3")],
                ..Default::default()
            },
            pb::PartialResultSet {
                values: vec![text("ef")],
                ..Default::default()
            },
        ];
        let mut body = BytesMut::new();
        for message in &stream {
            body.extend_from_slice(&grpc_frame(message));
        }
        let body = body.freeze();
        assert_rows("ExecuteStreamingSql", &body, 3);
        assert_rows("StreamingRead", &body, 3);
        // A stream with metadata and no rows.
        let empty = grpc_frame(&pb::PartialResultSet {
            metadata: Some(metadata(&["Id"])),
            ..Default::default()
        });
        assert_rows("ExecuteStreamingSql", &empty, 0);
    }
}
