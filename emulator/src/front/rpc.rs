//! Helpers for the calls the front forwards: the request it sends, the stream types it answers
//! with, and how it reports the backend's errors.

use std::future::Future;
use std::pin::Pin;

use futures::Stream;
use tonic::Status;

use super::proto::spanner::ExecuteBatchDmlResponse;
use crate::sql::{SqlError, SqlErrorCode};

/// A boxed, sendable future.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
/// A boxed, sendable stream of responses.
pub(crate) type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Builds the request to forward to the backend, keeping the caller's metadata (routing
/// headers, resource prefix, request ids) but not transport-level headers.
pub(crate) fn forward<T>(metadata: &tonic::metadata::MetadataMap, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    for entry in metadata.iter() {
        match entry {
            tonic::metadata::KeyAndValueRef::Ascii(key, value) => {
                if !is_transport_header(key.as_str()) {
                    request.metadata_mut().insert(key.clone(), value.clone());
                }
            }
            tonic::metadata::KeyAndValueRef::Binary(key, value) => {
                request
                    .metadata_mut()
                    .insert_bin(key.clone(), value.clone());
            }
        }
    }
    request
}

fn is_transport_header(name: &str) -> bool {
    matches!(
        name,
        "te" | "content-type"
            | "user-agent"
            | "grpc-timeout"
            | "grpc-encoding"
            | "grpc-accept-encoding"
            | "host"
            | "content-length"
    )
}

/// The official emulator runs one read-write transaction per database at a time: a newer
/// transaction displaces (rolls back) an older one, whose next call then fails with
/// `NOT_FOUND` "Transaction not found", or `FAILED_PRECONDITION` "Invalid transaction ID" or
/// "Cannot read or query using a transaction after it has been committed or rolledback". Cloud
/// Spanner aborts a transaction that loses a conflict, and clients retry `ABORTED`; report it
/// that way. Nothing of the displaced transaction was applied.
///
/// Every backend error of a SQL call passes here, so the official emulator's `UNIMPLEMENTED`
/// for a PostgreSQL interval value the front did not rewrite is explained here too, as
/// `INVALID_ARGUMENT` (see [`crate::interval::explain_unimplemented`]).
pub(crate) fn displaced(status: Status) -> Status {
    let message = status.message();
    let lost = match status.code() {
        tonic::Code::NotFound => message.starts_with("Transaction not found"),
        tonic::Code::FailedPrecondition => {
            message.starts_with("Invalid transaction ID")
                || message.starts_with("Cannot read or query using a transaction after")
        }
        _ => false,
    };
    if lost {
        Status::aborted(format!(
            "Transaction was aborted: a concurrent transaction displaced it in the emulator \
             (the emulator runs one read-write transaction per database at a time; original \
             error: {message})"
        ))
    } else if status.code() == tonic::Code::Unimplemented
        && let Some(explained) = crate::interval::explain_unimplemented(status.message())
    {
        Status::invalid_argument(explained)
    } else {
        status
    }
}

/// Applies [`displaced`] to the status inside a Batch DML response (a failing statement is
/// reported there, not as an RPC error).
pub(crate) fn displaced_in_batch(mut response: ExecuteBatchDmlResponse) -> ExecuteBatchDmlResponse {
    if let Some(status) = response.status.take() {
        let code = tonic::Code::from_i32(status.code);
        let mapped = displaced(Status::new(code, status.message.clone()));
        response.status = Some(if mapped.code() == code {
            status
        } else {
            googleapis_tonic_google_spanner_v1::google::rpc::Status {
                code: mapped.code() as i32,
                message: mapped.message().to_owned(),
                details: Vec::new(),
            }
        });
    }
    response
}

/// The status of a statement the front's SQL reading refuses.
pub(crate) fn sql_status(error: SqlError) -> Status {
    match error.code() {
        SqlErrorCode::InvalidArgument => Status::invalid_argument(error.to_string()),
        SqlErrorCode::Unimplemented => Status::unimplemented(error.to_string()),
    }
}
