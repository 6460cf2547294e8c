//! [`InFlightBody`]: a response body that holds its request's slot.

use super::SlotPermit;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
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
    /// The slot is given back when the body sees its end coming (the inner
    /// body says `is_end_stream` after a frame, or ends, or fails), and
    /// that frame (or the end) is held back until the slot is back
    /// ([`SlotPermit::release`]): a client that reads the whole response
    /// and sends its next request never finds its own slot still taken.
    /// It is the inner body in every other respect: same frames, same
    /// `is_end_stream` (false while a release is on its way) and size hint.
    pub struct InFlightBody<B: Body, P> {
        #[pin]
        inner: B,
        permit: Option<P>,
        // A release on its way, and the frame (or the end) it holds back.
        releasing: Option<Releasing<B::Data, B::Error>>,
    }
}

/// The last frame (or the end, or an error) of a body, held back until
/// its slot is back.
struct Releasing<D, E> {
    released: Pin<Box<dyn Future<Output = ()> + Send>>,
    held: Option<Result<Frame<D>, E>>,
}

impl<B: Body, P> InFlightBody<B, P> {
    /// `inner`, holding `permit` (if any) until it ends.
    pub fn new(inner: B, permit: Option<P>) -> Self {
        InFlightBody {
            inner,
            permit,
            releasing: None,
        }
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

impl<B: Body + Default, P> Default for InFlightBody<B, P> {
    /// An empty inner body, holding no slot: what a rejection made by an
    /// outer layer needs.
    fn default() -> Self {
        InFlightBody::new(B::default(), None)
    }
}

impl<B: Body + fmt::Debug, P> fmt::Debug for InFlightBody<B, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightBody")
            .field("inner", &self.inner)
            .field("holds_slot", &self.permit.is_some())
            .field("releasing", &self.releasing.is_some())
            .finish()
    }
}

impl<B: Body, P: SlotPermit> Body for InFlightBody<B, P> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        if let Some(releasing) = this.releasing.as_mut() {
            ready!(releasing.released.as_mut().poll(cx));
            let held = releasing.held.take();
            *this.releasing = None;
            return Poll::Ready(held);
        }
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        let over = match &frame {
            None | Some(Err(_)) => true,
            Some(Ok(_)) => this.inner.is_end_stream(),
        };
        let Some(permit) = this.permit.take_if(|_| over) else {
            return Poll::Ready(frame);
        };
        // Given back now, not when the server gets round to dropping the
        // body; the frame waits until the slot is back.
        let mut released = permit.release();
        if released.as_mut().poll(cx).is_ready() {
            return Poll::Ready(frame);
        }
        *this.releasing = Some(Releasing {
            released,
            held: frame,
        });
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.releasing.is_none() && self.inner.is_end_stream()
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

    impl SlotPermit for Flag {}

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

    /// A permit whose slot is back only once `back` is sent (a store over
    /// the network, whose release is a round trip).
    struct Remote(tokio::sync::oneshot::Receiver<()>);

    impl SlotPermit for Remote {
        fn release(self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
            Box::pin(async move {
                let _ = self.0.await;
            })
        }
    }

    #[test]
    fn the_last_frame_waits_until_the_slot_is_back() {
        let (back, slot) = tokio::sync::oneshot::channel();
        let mut body = InFlightBody::new(http_body_full("done"), Some(Remote(slot)));
        // The frame that ends the body is held while the release is on its
        // way, and the body does not say it has ended.
        assert!(poll(&mut body).is_pending());
        assert!(!body.is_end_stream());
        assert!(poll(&mut body).is_pending());
        back.send(()).unwrap();
        let frame = poll(&mut body);
        assert!(
            matches!(&frame, Poll::Ready(Some(Ok(f))) if f.data_ref().is_some_and(|d| d == "done")),
            "{frame:?}"
        );
        assert!(body.is_end_stream());
        assert!(matches!(poll(&mut body), Poll::Ready(None)));
    }

    #[test]
    fn the_end_of_a_body_that_did_not_know_it_waits_too() {
        let (back, slot) = tokio::sync::oneshot::channel();
        let mut body = InFlightBody::new(Frames(vec![Ok("a")]), Some(Remote(slot)));
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        assert!(poll(&mut body).is_pending(), "the end waits for the slot");
        back.send(()).unwrap();
        assert!(matches!(poll(&mut body), Poll::Ready(None)));
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
