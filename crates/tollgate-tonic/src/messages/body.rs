//! The bodies [`MessageLimit`](super::MessageLimit) wraps: the request's
//! ([`RequestBody`], a client stream's messages) and the response's
//! ([`ResponseBody`], a server stream's).

use super::gate::{Gate, Step, Tally};
use crate::rejection::write_status;
use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tollgate::Store;

/// The error type of a [`RequestBody`]: the inner body's error, or the
/// [`tonic::Status`] of a message out of budget (which tonic's
/// `Streaming` hands to the handler as it is).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// A request body whose messages are counted: each one is checked
    /// against the layer's limits before it reaches the service. A message
    /// out of budget is not forwarded; the body yields an error instead,
    /// which is a [`tonic::Status`] `RESOURCE_EXHAUSTED` with
    /// `google.rpc.RetryInfo` and `google.rpc.QuotaFailure` details and
    /// the rate-limit fields as metadata: the handler's
    /// `Streaming::message()` returns that status, and a handler that
    /// passes it on with `?` ends the call with it. In delay mode a
    /// message over the rate is held until its turn.
    pub struct RequestBody<B, St: Store> {
        #[pin]
        inner: Option<B>,
        #[pin]
        gate: Gate<St>,
    }
}

impl<B, St: Store> RequestBody<B, St> {
    pub(crate) fn new(inner: B, tally: Option<Tally<St>>) -> Self {
        RequestBody {
            inner: Some(inner),
            gate: Gate::new(tally),
        }
    }
}

impl<B, St> Body for RequestBody<B, St>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
    St: Store,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            match ready!(this.gate.as_mut().poll_step(cx)) {
                Step::Forward(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Step::Refused(status) => {
                    // The rest of the stream is not read.
                    this.inner.set(None);
                    let error: BoxError = status;
                    return Poll::Ready(Some(Err(error)));
                }
                Step::NeedData => {
                    let Some(inner) = this.inner.as_mut().as_pin_mut() else {
                        return Poll::Ready(None);
                    };
                    match ready!(inner.poll_frame(cx)) {
                        Some(Ok(frame)) => match frame.into_data() {
                            Ok(data) => this.gate.as_mut().push(data),
                            Err(frame) => return Poll::Ready(Some(Ok(frame))),
                        },
                        Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
                        None => {
                            this.inner.set(None);
                            return Poll::Ready(None);
                        }
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.gate.is_empty() && self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            // Counting may end the body early.
            Some(inner) if !self.gate.counts() => inner.size_hint(),
            _ => SizeHint::default(),
        }
    }
}

pin_project! {
    /// A response body whose messages are counted: each one is checked
    /// against the layer's limits before it is sent. At a message out of
    /// budget the body stops — the messages before it have been sent, that
    /// one and the rest never are — and ends with trailers: `grpc-status`
    /// 8 (`RESOURCE_EXHAUSTED`), a `grpc-message` naming the limit,
    /// `grpc-status-details-bin` with `google.rpc.RetryInfo` and
    /// `google.rpc.QuotaFailure`, and the rate-limit fields. The service's
    /// stream is dropped there. In delay mode a message over the rate is
    /// held until its turn.
    pub struct ResponseBody<B, St: Store> {
        #[pin]
        inner: Option<B>,
        #[pin]
        gate: Gate<St>,
    }
}

impl<B, St: Store> ResponseBody<B, St> {
    pub(crate) fn new(inner: B, tally: Option<Tally<St>>) -> Self {
        ResponseBody {
            inner: Some(inner),
            gate: Gate::new(tally),
        }
    }
}

impl<B, St> Body for ResponseBody<B, St>
where
    B: Body<Data = Bytes>,
    St: Store,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        loop {
            match ready!(this.gate.as_mut().poll_step(cx)) {
                Step::Forward(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Step::Refused(status) => {
                    // Drops the service's stream: it sends nothing more.
                    this.inner.set(None);
                    let mut trailers = HeaderMap::new();
                    write_status(&status, &mut trailers);
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
                Step::NeedData => {
                    let Some(inner) = this.inner.as_mut().as_pin_mut() else {
                        return Poll::Ready(None);
                    };
                    match ready!(inner.poll_frame(cx)) {
                        Some(Ok(frame)) => match frame.into_data() {
                            Ok(data) => this.gate.as_mut().push(data),
                            Err(frame) => return Poll::Ready(Some(Ok(frame))),
                        },
                        Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                        None => {
                            this.inner.set(None);
                            return Poll::Ready(None);
                        }
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.gate.is_empty() && self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) if !self.gate.counts() => inner.size_hint(),
            _ => SizeHint::default(),
        }
    }
}

impl<B: Default, St: Store> Default for ResponseBody<B, St> {
    /// An empty body that counts nothing (what a layer in front answers
    /// with, e.g. a rejection).
    fn default() -> Self {
        ResponseBody::new(B::default(), None)
    }
}
