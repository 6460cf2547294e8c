//! [`Throttle`].

use super::future::ResponseFuture;
use crate::BoxError;
use crate::direct::DirectLimiter;
use crate::store::{MemoryStore, Store};
use std::task::{Context, Poll};
use tower_service::Service;

/// A client service whose calls wait until a [`DirectLimiter`] admits
/// them; made by [`ThrottleLayer`](super::ThrottleLayer).
#[derive(Debug)]
pub struct Throttle<S, St = MemoryStore> {
    inner: S,
    limiter: DirectLimiter<St>,
}

impl<S: Clone, St: Clone> Clone for Throttle<S, St> {
    fn clone(&self) -> Self {
        Throttle {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

impl<S, St> Throttle<S, St> {
    /// `inner`, its calls waiting for `limiter`.
    pub fn new(inner: S, limiter: DirectLimiter<St>) -> Self {
        Throttle { inner, limiter }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, St, Req> Service<Req> for Throttle<S, St>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    St: Store,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S, Req, St>;

    /// Always ready: the wait for the limiter, and for the inner service,
    /// happen in the call's future.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        ResponseFuture::new(self.limiter.until_ready(), self.inner.clone(), request)
    }
}
