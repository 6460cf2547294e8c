//! [`ResponseFuture`], the response future of [`MeterService`](super::MeterService).

use super::{Meter, MeteredBody};
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

pin_project! {
    /// The inner service's future; its response's body is wrapped to hold
    /// the request's meter until it has been sent.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        meter: Option<Meter>,
        bytes_per_unit: Option<NonZeroU64>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, meter: Option<Meter>, bytes_per_unit: Option<NonZeroU64>) -> Self {
        ResponseFuture {
            inner,
            meter,
            bytes_per_unit,
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<MeteredBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // An error drops the meter with the future: the request is over.
        let response = ready!(this.inner.poll(cx))?;
        let meter = this.meter.take();
        let bytes_per_unit = *this.bytes_per_unit;
        Poll::Ready(Ok(
            response.map(|body| MeteredBody::new(body, meter, bytes_per_unit))
        ))
    }
}
