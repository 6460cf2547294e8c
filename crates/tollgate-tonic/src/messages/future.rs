//! [`ResponseFuture`]: the inner service's response, its body wrapped.

use super::body::ResponseBody;
use super::gate::Tally;
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tollgate::Store;

pin_project! {
    /// The response future of [`MessageLimit`](super::MessageLimit): the
    /// inner service's, with the response body wrapped in a
    /// [`ResponseBody`] that counts its messages.
    pub struct ResponseFuture<F, St: Store> {
        #[pin]
        inner: F,
        tally: Option<Tally<St>>,
    }
}

impl<F, St: Store> ResponseFuture<F, St> {
    pub(crate) fn new(inner: F, tally: Option<Tally<St>>) -> Self {
        ResponseFuture { inner, tally }
    }
}

impl<F, St, B, E> Future for ResponseFuture<F, St>
where
    F: Future<Output = Result<Response<B>, E>>,
    St: Store,
{
    type Output = Result<Response<ResponseBody<B, St>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        let tally = this.tally.take();
        Poll::Ready(Ok(response.map(|body| ResponseBody::new(body, tally))))
    }
}
