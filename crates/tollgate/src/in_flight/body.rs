//! [`InFlightBody`]: a response body that holds its request's slot.

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

pin_project! {
    /// The response body of a request under an in-flight limit: the inner
    /// service's body, holding the request's slot until the body ends
    /// (its last frame is out, or it was empty), yields an error, or is
    /// dropped (the server gives up on it: the client went away). For a
    /// gRPC streaming call this is the stream, so the slot lasts as long as
    /// the stream.
    ///
    /// It is the inner body in every other respect: same frames, same
    /// `is_end_stream` and size hint.
    pub struct InFlightBody<B, P> {
        #[pin]
        inner: B,
        permit: Option<P>,
    }
}

impl<B, P> InFlightBody<B, P> {
    /// `inner`, holding `permit` (if any) until it ends.
    pub fn new(inner: B, permit: Option<P>) -> Self {
        InFlightBody { inner, permit }
    }

    /// Whether the body still holds a slot.
    pub fn holds_slot(&self) -> bool {
        self.permit.is_some()
    }

    /// The inner body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }
}

impl<B: Default, P> Default for InFlightBody<B, P> {
    /// An empty inner body, holding no slot: what a rejection made by an
    /// outer layer needs.
    fn default() -> Self {
        InFlightBody::new(B::default(), None)
    }
}

impl<B: fmt::Debug, P> fmt::Debug for InFlightBody<B, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightBody")
            .field("inner", &self.inner)
            .field("holds_slot", &self.permit.is_some())
            .finish()
    }
}

impl<B: Body, P> Body for InFlightBody<B, P> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        let over = match &frame {
            None | Some(Err(_)) => true,
            Some(Ok(_)) => this.inner.is_end_stream(),
        };
        if over {
            // Given back now, not when the server gets round to dropping
            // the body.
            drop(this.permit.take());
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A permit that says when it is dropped.
    struct Flag(Arc<AtomicBool>);

    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn flag() -> (Flag, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        (Flag(dropped.clone()), dropped)
    }

    /// Frames from a list, then the end: `Err` items are errors.
    struct Frames(Vec<Result<&'static str, &'static str>>);

    impl Body for Frames {
        type Data = bytes::Bytes;
        type Error = &'static str;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<bytes::Bytes>, &'static str>>> {
            if self.0.is_empty() {
                return Poll::Ready(None);
            }
            let next = self.0.remove(0);
            Poll::Ready(Some(next.map(|text| Frame::data(bytes::Bytes::from(text)))))
        }
    }

    type Polled<B> = Poll<Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>>;

    fn poll<B: Body + Unpin>(body: &mut B) -> Polled<B> {
        let waker = std::task::Waker::noop();
        Pin::new(body).poll_frame(&mut Context::from_waker(waker))
    }

    #[test]
    fn the_slot_is_held_until_the_last_frame_then_given_back() {
        let (permit, dropped) = flag();
        let mut body = InFlightBody::new(Frames(vec![Ok("a"), Ok("b")]), Some(permit));
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        assert!(!dropped.load(Ordering::SeqCst), "the body has not ended");
        assert!(matches!(poll(&mut body), Poll::Ready(None)));
        assert!(dropped.load(Ordering::SeqCst));
        assert!(!body.holds_slot());
    }

    #[test]
    fn an_error_gives_the_slot_back() {
        let (permit, dropped) = flag();
        let mut body = InFlightBody::new(Frames(vec![Err("broken"), Ok("x")]), Some(permit));
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Err("broken")))));
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn a_body_dropped_unfinished_gives_the_slot_back() {
        let (permit, dropped) = flag();
        let mut body = InFlightBody::new(Frames(vec![Ok("a"), Ok("b")]), Some(permit));
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        drop(body);
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn a_body_that_knows_its_end_gives_the_slot_back_with_its_last_frame() {
        let (permit, dropped) = flag();
        let full = http_body_full("done");
        let mut body = InFlightBody::new(full, Some(permit));
        assert!(!body.is_end_stream());
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        assert!(dropped.load(Ordering::SeqCst));
        assert!(body.is_end_stream());
    }

    /// A body of one data frame that says when it has ended, as
    /// `http_body_util::Full` does (written here: no dependency for it).
    fn http_body_full(text: &'static str) -> OneFrame {
        OneFrame(Some(bytes::Bytes::from(text)))
    }

    struct OneFrame(Option<bytes::Bytes>);

    impl Body for OneFrame {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<bytes::Bytes>, Self::Error>>> {
            Poll::Ready(self.0.take().map(|data| Ok(Frame::data(data))))
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_none()
        }
    }
}
