//! [`MeterService`], the service [`MeterLayer`](super::MeterLayer) makes.

use super::Meter;
use super::future::ResponseFuture;
use http::{Request, Response};
use std::num::NonZeroU64;
use std::task::{Context, Poll};
use tower_service::Service;

/// Holds each request's [`Meter`] until its response's body has been
/// sent. Made by [`MeterLayer`](super::MeterLayer).
#[derive(Clone, Debug)]
pub struct MeterService<S> {
    inner: S,
    bytes_per_unit: Option<NonZeroU64>,
}

impl<S> MeterService<S> {
    pub(crate) fn new(inner: S, bytes_per_unit: Option<NonZeroU64>) -> Self {
        MeterService {
            inner,
            bytes_per_unit,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for MeterService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<super::MeteredBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let meter = request.extensions().get::<Meter>().cloned();
        ResponseFuture::new(self.inner.call(request), meter, self.bytes_per_unit)
    }
}

/// Keeps the wrapped gRPC service's name (tonic routes by it).
#[cfg(feature = "tonic")]
impl<S: tonic::server::NamedService> tonic::server::NamedService for MeterService<S> {
    const NAME: &'static str = S::NAME;
}
