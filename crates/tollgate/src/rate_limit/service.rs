//! [`RateLimit`], the service the layer wraps around yours.

use crate::key::KeyExtractor;
use crate::rate_limit::engine::Engine;
use crate::rate_limit::future::ResponseFuture;
use crate::rejection::Rejector;
use crate::store::Store;
use http::{Request, Response};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Rate-limits requests to `S`. Made by [`RateLimitLayer`](crate::RateLimitLayer).
///
/// Clones share one state (the store, the counters). `poll_ready` is the
/// inner service's.
pub struct RateLimit<S, K, St, R> {
    inner: S,
    shared: Arc<Engine<K, St, R>>,
}

impl<S: Clone, K, St, R> Clone for RateLimit<S, K, St, R> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: fmt::Debug, K, St, R> fmt::Debug for RateLimit<S, K, St, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("policy", &self.shared.routes.default_entry().policy)
            .finish_non_exhaustive()
    }
}

impl<S, K, St, R> RateLimit<S, K, St, R> {
    pub(crate) fn new(inner: S, shared: Arc<Engine<K, St, R>>) -> Self {
        RateLimit { inner, shared }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, K, St, R, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, K, St, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Default,
    K: KeyExtractor,
    St: Store,
    R: Rejector<ResBody>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, Request<ReqBody>, K, St, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        limit(&mut self.inner, &self.shared, request)
    }
}

/// Rate-limits one request to `inner` under `engine`'s limits: the body of
/// [`RateLimit::call`], shared with the rules layer, which picks `engine`
/// per request. The engine decides; [`ResponseFuture::start`] carries out
/// what it decided, or builds the future that awaits the store or the
/// key's first quota lookup.
#[inline]
pub(crate) fn limit<S, K, St, R, ReqBody, ResBody>(
    inner: &mut S,
    engine: &Arc<Engine<K, St, R>>,
    request: Request<ReqBody>,
) -> ResponseFuture<S, Request<ReqBody>, K, St, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Default,
    K: KeyExtractor,
    St: Store,
    R: Rejector<ResBody>,
{
    ResponseFuture::start(inner, engine, request, 0)
}

/// Wrapping one generated gRPC service keeps its name, which tonic's
/// `Server::builder().add_service(...)` routes by.
#[cfg(feature = "tonic")]
impl<S: tonic::server::NamedService, K, St, R> tonic::server::NamedService
    for RateLimit<S, K, St, R>
{
    const NAME: &'static str = S::NAME;
}
