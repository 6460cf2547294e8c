//! [`MeteredBody`]: a response body that settles its request's meter when
//! it ends.

use super::Meter;
use crate::store::ChangeReply;
use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// A settlement on its way to the store.
type Landing = Pin<Box<dyn Future<Output = bool> + Send>>;

pin_project! {
    /// A response body holding its request's [`Meter`]: when the body
    /// ends, its bytes are counted (if asked) and the meter is let go —
    /// settling the request's cost if it was the last handle, in which
    /// case the end of the body waits for the settlement to land. A body
    /// that fails or is dropped (a client gone) lets go of the meter too,
    /// without waiting.
    pub struct MeteredBody<B> {
        // Dropped as soon as it ends, so that a stream holding a clone of
        // the meter lets go of it before the meter is settled.
        #[pin]
        inner: Option<B>,
        meter: Option<Meter>,
        bytes_per_unit: Option<NonZeroU64>,
        bytes: u64,
        landing: Option<Landing>,
    }

    impl<B> PinnedDrop for MeteredBody<B> {
        // A body dropped before its end (a client gone): the bytes sent so
        // far count; the settlement is not waited for.
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let _ = let_go(this.meter, *this.bytes_per_unit, *this.bytes);
        }
    }
}

/// Lets go of the body's meter, if it still holds it, with its bytes
/// counted (if asked): the settlement's answer if it was the last handle.
fn let_go(
    meter: &mut Option<Meter>,
    bytes_per_unit: Option<NonZeroU64>,
    bytes: u64,
) -> ChangeReply {
    let Some(meter) = meter.take() else {
        return ChangeReply::Done;
    };
    if let Some(per_unit) = bytes_per_unit {
        meter.add(bytes.div_ceil(per_unit.get()));
    }
    meter.finish()
}

impl<B> MeteredBody<B> {
    pub(crate) fn new(inner: B, meter: Option<Meter>, bytes_per_unit: Option<NonZeroU64>) -> Self {
        MeteredBody {
            inner: Some(inner),
            meter,
            bytes_per_unit,
            bytes: 0,
            landing: None,
        }
    }
}

impl<B: Default> Default for MeteredBody<B> {
    fn default() -> Self {
        MeteredBody::new(B::default(), None, None)
    }
}

impl<B: Body> Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        if let Some(landing) = this.landing {
            ready!(landing.as_mut().poll(cx));
            *this.landing = None;
            return Poll::Ready(None);
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        match ready!(inner.poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes = this.bytes.saturating_add(data.remaining() as u64);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            // Over, with what was reported.
            Some(Err(error)) => {
                this.inner.set(None);
                let _ = let_go(this.meter, *this.bytes_per_unit, *this.bytes);
                Poll::Ready(Some(Err(error)))
            }
            None => {
                this.inner.set(None);
                let reply = let_go(this.meter, *this.bytes_per_unit, *this.bytes);
                if let ChangeReply::Pending(mut landing) = reply
                    && landing.as_mut().poll(cx).is_pending()
                {
                    *this.landing = Some(landing);
                    return Poll::Pending;
                }
                Poll::Ready(None)
            }
        }
    }

    /// Not while the meter is held: the end must be polled for, or the
    /// settlement would not be waited for.
    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(inner) => self.meter.is_none() && inner.is_end_stream(),
            None => self.landing.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) => inner.size_hint(),
            None => SizeHint::with_exact(0),
        }
    }
}
