//! `BatchWrite`, which the official emulator does not implement (it answers `UNIMPLEMENTED`,
//! even for plain tables): each mutation group is applied as its own single-use read-write
//! commit through the front's commit path (queue mutations rewritten, the database's
//! read-write slot taken in turn, floors lowered and receivers woken by sends), and one
//! `BatchWriteResponse` per group is streamed back as it is applied, with the group's index, its
//! status and, when it committed, the commit timestamp.
//!
//! As Cloud Spanner documents it: all mutations of a group are committed atomically; groups are
//! independent, so one group's failure does not stop the others. Cloud Spanner may apply
//! groups in any order and report several in one response; the front applies them in request
//! order, one response each. A group that the backend aborts (it committed nothing) is tried
//! again, as Cloud Spanner retries inside a batch write; other errors are that group's status.
//! The groups still to apply when the client cancels the call are not applied.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::calls::db;
use super::commit::commit_request;
use super::proto::spanner::{
    BatchWriteRequest, BatchWriteResponse, CommitRequest, TransactionOptions, batch_write_request,
    commit_request as commit, transaction_options,
};
use super::rpc::BoxStream;
use super::shared::Shared;

/// How often a group the backend aborts is tried in all.
const ATTEMPTS: u32 = 10;
/// The pause after the first abort of a group; it doubles after each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// The `BatchWrite` RPC.
///
/// # Errors
/// `INVALID_ARGUMENT` for a request without mutation groups, `NOT_FOUND` for an unknown
/// database; a group's own failure is its response's status, not an error of the call.
pub(crate) async fn batch_write(
    shared: Arc<Shared>,
    request: Request<BatchWriteRequest>,
) -> Result<Response<BoxStream<BatchWriteResponse>>, Status> {
    let metadata = request.metadata().clone();
    let message = request.into_inner();
    // An unknown session's database is the call's error, before any group.
    db(&shared, &message.session)?;
    if message.mutation_groups.is_empty() {
        // [?] Cloud Spanner's code for a request without groups (the field is required).
        return Err(Status::invalid_argument(
            "BatchWrite needs at least one mutation group",
        ));
    }
    let options = TransactionOptions {
        mode: Some(transaction_options::Mode::ReadWrite(
            transaction_options::ReadWrite::default(),
        )),
        exclude_txn_from_change_streams: message.exclude_txn_from_change_streams,
        ..TransactionOptions::default()
    };
    let groups = Groups {
        shared,
        metadata,
        session: message.session,
        request_options: message.request_options,
        options,
        groups: message.mutation_groups.into_iter().enumerate(),
    };
    let stream = futures::stream::unfold(groups, |mut groups| async move {
        let (index, group) = groups.groups.next()?;
        let response = groups.apply(index, group).await;
        Some((Ok(response), groups))
    });
    Ok(Response::new(Box::pin(stream)))
}

/// The groups of one call still to apply, and what each group's commit shares.
struct Groups {
    shared: Arc<Shared>,
    metadata: tonic::metadata::MetadataMap,
    session: String,
    request_options: Option<super::proto::spanner::RequestOptions>,
    options: TransactionOptions,
    groups: std::iter::Enumerate<std::vec::IntoIter<batch_write_request::MutationGroup>>,
}

impl Groups {
    /// Commits group `index`; its response says how that went.
    async fn apply(
        &self,
        index: usize,
        group: batch_write_request::MutationGroup,
    ) -> BatchWriteResponse {
        let request = CommitRequest {
            session: self.session.clone(),
            transaction: Some(commit::Transaction::SingleUseTransaction(
                self.options.clone(),
            )),
            mutations: group.mutations,
            request_options: self.request_options.clone(),
            ..CommitRequest::default()
        };
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        let result = loop {
            let result = commit_request(&self.shared, &self.metadata, request.clone()).await;
            match result {
                Err(status) if status.code() == tonic::Code::Aborted && attempt < ATTEMPTS => {
                    tracing::debug!(
                        group = index,
                        attempt,
                        "a batch-write group was aborted: trying again"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    attempt += 1;
                }
                result => break result,
            }
        };
        let (status, commit_timestamp) = match result {
            Ok(response) => (
                Status::new(tonic::Code::Ok, ""),
                response.into_inner().commit_timestamp,
            ),
            Err(status) => (status, None),
        };
        BatchWriteResponse {
            indexes: vec![i32::try_from(index).unwrap_or(i32::MAX)],
            status: Some(googleapis_tonic_google_spanner_v1::google::rpc::Status {
                code: status.code() as i32,
                message: status.message().to_owned(),
                details: Vec::new(),
            }),
            commit_timestamp,
        }
    }
}
