//! [`MessageLimit`], the service the layer wraps around yours.

use super::body::{RequestBody, ResponseBody};
use super::future::ResponseFuture;
use super::shared::Shared;
use http::{Request, Response};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tollgate::{KeyExtractor, Store};
use tower_service::Service;

/// Counts the messages of the calls to `S`. Made by
/// [`MessageLimitLayer`](super::MessageLimitLayer).
///
/// Wraps each call's request body in a [`RequestBody`] and its response
/// body in a [`ResponseBody`] (counting in the directions the layer was
/// built for; a call that is not counted passes through them untouched).
/// Clones share one state. `poll_ready` is the inner service's.
pub struct MessageLimit<S, K, St> {
    inner: S,
    shared: Arc<Shared<K, St>>,
}

impl<S, K, St> MessageLimit<S, K, St> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<K, St>>) -> Self {
        MessageLimit { inner, shared }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, K, St> Clone for MessageLimit<S, K, St> {
    fn clone(&self) -> Self {
        MessageLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: fmt::Debug, K, St> fmt::Debug for MessageLimit<S, K, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, K, St, ReqBody, ResBody> Service<Request<ReqBody>> for MessageLimit<S, K, St>
where
    S: Service<Request<RequestBody<ReqBody, St>>, Response = Response<ResBody>>,
    K: KeyExtractor,
    St: Store,
{
    type Response = Response<ResponseBody<ResBody, St>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, St>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (requests, responses) = self.shared.tallies(&request);
        let request = request.map(|body| RequestBody::new(body, requests));
        ResponseFuture::new(self.inner.call(request), responses)
    }
}

/// Wrapping one generated gRPC service keeps its name, which tonic's
/// `Server::builder().add_service(...)` routes by.
impl<S: tonic::server::NamedService, K, St> tonic::server::NamedService for MessageLimit<S, K, St> {
    const NAME: &'static str = S::NAME;
}
