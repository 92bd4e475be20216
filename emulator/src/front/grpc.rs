//! gRPC routing: the methods that concern queues are decoded and rewritten; every other call is
//! forwarded unchanged, byte for byte.

use std::future::Future;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use tonic::body::Body;
use tonic::{Status, server::Grpc};
use tonic_prost::ProstCodec;
use tower_service::Service;

use super::rpc::{BoxFuture, BoxStream};
use super::shared::Shared;
use super::{admin, batch_write, commit, query};

const SPANNER: &str = "/google.spanner.v1.Spanner/";
const DATABASE_ADMIN: &str = "/google.spanner.admin.database.v1.DatabaseAdmin/";

pub(crate) async fn route(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    if let Some(method) = path.strip_prefix(SPANNER) {
        match method {
            "Commit" => return unary(shared, req, commit::commit).await,
            "BeginTransaction" => return unary(shared, req, commit::begin_transaction).await,
            "ExecuteSql" => return unary(shared, req, query::execute_sql).await,
            "ExecuteBatchDml" => return unary(shared, req, query::execute_batch_dml).await,
            "ExecuteStreamingSql" => {
                return streaming(shared, req, query::execute_streaming_sql).await;
            }
            "BatchWrite" => return streaming(shared, req, batch_write::batch_write).await,
            "Rollback" => return unary(shared, req, commit::rollback).await,
            "Read" => return unary(shared, req, query::read).await,
            "StreamingRead" => return streaming(shared, req, query::streaming_read).await,
            _ => {}
        }
    } else if let Some(method) = path.strip_prefix(DATABASE_ADMIN) {
        match method {
            "UpdateDatabaseDdl" => return unary(shared, req, admin::update_database_ddl).await,
            "CreateDatabase" => return unary(shared, req, admin::create_database).await,
            "GetDatabaseDdl" => return unary(shared, req, admin::get_database_ddl).await,
            "GetDatabase" => return unary(shared, req, admin::get_database).await,
            "DropDatabase" => return unary(shared, req, admin::drop_database).await,
            _ => {}
        }
    }
    passthrough_grpc(&shared, req).await
}

struct UnaryHandler<F> {
    shared: Arc<Shared>,
    handler: Option<F>,
}

impl<Req, Resp, F, Fut> tonic::server::UnaryService<Req> for UnaryHandler<F>
where
    F: FnOnce(Arc<Shared>, tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Result<tonic::Response<Resp>, Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        match self.handler.take() {
            Some(handler) => Box::pin(handler(Arc::clone(&self.shared), request)),
            None => Box::pin(async { Err(Status::internal("handler called twice")) }),
        }
    }
}

struct StreamingHandler<F> {
    shared: Arc<Shared>,
    handler: Option<F>,
}

impl<Req, Resp, F, Fut> tonic::server::ServerStreamingService<Req> for StreamingHandler<F>
where
    Resp: Send + 'static,
    F: FnOnce(Arc<Shared>, tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<BoxStream<Resp>>, Status>> + Send + 'static,
{
    type Response = Resp;
    type ResponseStream = BoxStream<Resp>;
    type Future = BoxFuture<Result<tonic::Response<BoxStream<Resp>>, Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        match self.handler.take() {
            Some(handler) => Box::pin(handler(Arc::clone(&self.shared), request)),
            None => Box::pin(async { Err(Status::internal("handler called twice")) }),
        }
    }
}

async fn unary<Req, Resp, F, Fut>(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    handler: F,
) -> Response<Body>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: FnOnce(Arc<Shared>, tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send + 'static,
{
    let mut grpc = Grpc::new(ProstCodec::<Resp, Req>::default())
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    grpc.unary(
        UnaryHandler {
            shared,
            handler: Some(handler),
        },
        req,
    )
    .await
}

async fn streaming<Req, Resp, F, Fut>(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    handler: F,
) -> Response<Body>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: FnOnce(Arc<Shared>, tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<BoxStream<Resp>>, Status>> + Send + 'static,
{
    let mut grpc = Grpc::new(ProstCodec::<Resp, Req>::default())
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    grpc.server_streaming(
        StreamingHandler {
            shared,
            handler: Some(handler),
        },
        req,
    )
    .await
}

/// Forwards a gRPC call to the backend unchanged.
pub(crate) async fn passthrough_grpc(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let req = req.map(Body::new);
    let mut channel = shared.backend.clone();
    if let Err(error) = std::future::poll_fn(|cx| channel.poll_ready(cx)).await {
        return tonic::Status::unavailable(format!("backend emulator unreachable: {error}"))
            .into_http();
    }
    match channel.call(req).await {
        Ok(response) => response.map(Body::new),
        Err(error) => {
            tonic::Status::unavailable(format!("backend emulator unreachable: {error}")).into_http()
        }
    }
}
