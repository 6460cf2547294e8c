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

// A `RequestBody` fails with a `BoxError`: the inner body's error, or the
// `tonic::Status` of a message out of budget (which tonic's `Streaming`
// hands to the handler as it is).
use tollgate::BoxError;

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
                    if let Pulled::Answer(answer) =
                        ready!(pull(this.inner.as_mut(), this.gate.as_mut(), cx))
                    {
                        return Poll::Ready(answer.map(|frame| frame.map_err(Into::into)));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        is_end_stream(&self.inner, &self.gate)
    }

    fn size_hint(&self) -> SizeHint {
        size_hint(&self.inner, &self.gate)
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
                    if let Pulled::Answer(answer) =
                        ready!(pull(this.inner.as_mut(), this.gate.as_mut(), cx))
                    {
                        return Poll::Ready(answer);
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        is_end_stream(&self.inner, &self.gate)
    }

    fn size_hint(&self) -> SizeHint {
        size_hint(&self.inner, &self.gate)
    }
}

impl<B: Default, St: Store> Default for ResponseBody<B, St> {
    /// An empty body that counts nothing (what a layer in front answers
    /// with, e.g. a rejection).
    fn default() -> Self {
        ResponseBody::new(B::default(), None)
    }
}

/// What pulling the inner body's next frame gave.
enum Pulled<E> {
    /// A data frame, now in the gate: step the gate again.
    Data,
    /// What the counted body answers as it is: a frame that is not data
    /// (trailers), the inner body's error, or the end.
    Answer(Option<Result<Frame<Bytes>, E>>),
}

/// Pulls the inner body's next frame, both bodies alike: data goes into
/// `gate` to be counted; anything else is handed back. The inner body is
/// dropped at its end (or was, at a refusal).
fn pull<B, St>(
    mut inner: Pin<&mut Option<B>>,
    gate: Pin<&mut Gate<St>>,
    cx: &mut Context<'_>,
) -> Poll<Pulled<B::Error>>
where
    B: Body<Data = Bytes>,
    St: Store,
{
    let Some(body) = inner.as_mut().as_pin_mut() else {
        return Poll::Ready(Pulled::Answer(None));
    };
    Poll::Ready(match ready!(body.poll_frame(cx)) {
        Some(Ok(frame)) => match frame.into_data() {
            Ok(data) => {
                gate.push(data);
                Pulled::Data
            }
            Err(frame) => Pulled::Answer(Some(Ok(frame))),
        },
        Some(Err(error)) => Pulled::Answer(Some(Err(error))),
        None => {
            inner.set(None);
            Pulled::Answer(None)
        }
    })
}

/// Whether a counted body is over: nothing held in its gate, and the inner
/// body gone or over.
fn is_end_stream<B: Body, St: Store>(inner: &Option<B>, gate: &Gate<St>) -> bool {
    gate.is_empty() && inner.as_ref().is_none_or(Body::is_end_stream)
}

/// A counted body's size: the inner body's while nothing is counted;
/// unknown otherwise, since counting may end the body early.
fn size_hint<B: Body, St: Store>(inner: &Option<B>, gate: &Gate<St>) -> SizeHint {
    match inner {
        Some(inner) if !gate.counts() => inner.size_hint(),
        _ => SizeHint::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::gate::Limits;
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::task::Waker;
    use std::time::Duration;
    use tollgate::core::{ManualClock, Quota};
    use tollgate::{Key, MemoryStore, NamedLimit, OnStoreError, Policy, headers::HeaderStyle};
    use tonic::{Code, Status};
    use tonic_types::StatusExt;

    /// A body of the given chunks.
    struct Chunks(VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Status;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
        }
    }

    /// `n` framed messages, the `i`th of `len(i)` bytes.
    fn messages(n: usize, len: impl Fn(usize) -> usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let len = len(i);
                let mut m = vec![0];
                m.extend_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
                m.extend(std::iter::repeat_n(u8::try_from(i % 256).unwrap(), len));
                m
            })
            .collect()
    }

    /// `body` cut at `cuts`.
    fn cut(body: &[u8], cuts: &[usize]) -> Chunks {
        let mut bounds: Vec<usize> = cuts.iter().copied().filter(|&c| c < body.len()).collect();
        bounds.sort_unstable();
        bounds.dedup();
        bounds.push(body.len());
        let mut from = 0;
        let mut chunks = VecDeque::new();
        for end in bounds {
            if end > from {
                chunks.push_back(Bytes::copy_from_slice(&body[from..end]));
            }
            from = end;
        }
        Chunks(chunks)
    }

    /// A tally of `limit` messages per minute on a clock that never moves.
    fn tally(limit: u32) -> Tally<MemoryStore<ManualClock>> {
        tally_in(limit, false)
    }

    /// [`tally`], its limit in shadow when `shadow`.
    fn tally_in(limit: u32, shadow: bool) -> Tally<MemoryStore<ManualClock>> {
        let store = MemoryStore::builder().clock(ManualClock::new(0)).build();
        let policy = Policy::new(vec![NamedLimit::new(
            "messages",
            Quota::per_minute(limit.into()),
        )]);
        Tally::new(
            Arc::new(Limits {
                store,
                policy: Arc::new(policy),
                store_timeout: Duration::from_millis(100),
                on_store_error: OnStoreError::Open,
                headers: HeaderStyle::DRAFT,
                shadow: shadow.then(|| tollgate::__private::ShadowLog::new(1)),
            }),
            Key::GLOBAL,
        )
    }

    #[test]
    fn in_shadow_every_message_passes() {
        let all = messages(8, |i| i * 3);
        let body: Vec<u8> = all.concat();
        let response = ResponseBody::new(cut(&body, &[]), Some(tally_in(5, true)));
        let (data, ends) = drain(response);
        assert_eq!(data, body, "the 3 over the limit pass too");
        assert!(ends.is_empty(), "no status ends the stream");
    }

    /// Polls `body` to its end (it never waits: the memory store answers
    /// at once and nothing is held): the data, and the trailers or error.
    fn drain<B: Body<Data = Bytes>>(body: B) -> (Vec<u8>, Vec<Result<HeaderMap, B::Error>>) {
        let mut body = std::pin::pin!(body);
        let mut cx = Context::from_waker(Waker::noop());
        let (mut data, mut ends) = (Vec::new(), Vec::new());
        loop {
            match body.as_mut().poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(chunk) => {
                        assert!(ends.is_empty(), "data after the end");
                        data.extend_from_slice(&chunk);
                    }
                    Err(frame) => ends.push(Ok(frame.into_trailers().ok().unwrap_or_default())),
                },
                Poll::Ready(Some(Err(error))) => ends.push(Err(error)),
                Poll::Ready(None) => return (data, ends),
                Poll::Pending => panic!("a body over the memory store never waits"),
            }
        }
    }

    #[test]
    fn a_response_stops_at_the_first_message_out_of_budget() {
        let all = messages(8, |i| i * 3);
        let body: Vec<u8> = all.concat();
        let response = ResponseBody::new(cut(&body, &[]), Some(tally(5)));
        let (data, ends) = drain(response);
        assert_eq!(data, all[..5].concat());
        let [Ok(trailers)] = &ends[..] else {
            panic!("one trailers frame, got {}", ends.len())
        };
        let status = Status::from_header_map(trailers).expect("a grpc-status");
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(
            status.get_details_retry_info().and_then(|r| r.retry_delay),
            Some(Duration::from_secs(12))
        );
        assert_eq!(trailers["retry-after"], "12");
        assert_eq!(trailers["ratelimit"], "\"messages\";r=0;t=12");
    }

    #[test]
    fn a_request_yields_the_status_as_its_error() {
        let all = messages(3, |_| 2);
        let body: Vec<u8> = all.concat();
        let request = RequestBody::new(cut(&body, &[1, 8, 9]), Some(tally(2)));
        let (data, ends) = drain(request);
        assert_eq!(data, all[..2].concat());
        let [Err(error)] = &ends[..] else {
            panic!("one error")
        };
        let status = Status::from_error(Box::<Status>::from(
            error.downcast_ref::<Status>().expect("a Status").clone(),
        ));
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.get_details_retry_info().is_some());
        assert!(
            status.message().contains("\"messages\""),
            "{}",
            status.message()
        );
    }

    #[test]
    fn a_body_that_is_not_counted_passes_as_it_is() {
        let body: Vec<u8> = messages(10, |_| 1).concat();
        let (data, ends) = drain(ResponseBody::new(
            cut(&body, &[3, 4]),
            None::<Tally<MemoryStore>>,
        ));
        assert_eq!(data, body);
        assert!(ends.is_empty());
    }

    proptest! {
        /// Random messages cut at random points, against a budget of
        /// `limit`: the response forwards exactly the first `limit`
        /// messages' bytes, then ends with RESOURCE_EXHAUSTED if there were
        /// more; so does the request, with its error.
        #[test]
        fn random_cuts_forward_exactly_the_budget(
            lens in proptest::collection::vec(0usize..30, 0..16),
            cuts in proptest::collection::vec(0usize..500, 0..20),
            limit in 1u32..10,
        ) {
            let all = messages(lens.len(), |i| lens[i]);
            let body: Vec<u8> = all.concat();
            let admitted = lens.len().min(limit as usize);
            let refused = lens.len() > admitted;

            let (data, ends) = drain(ResponseBody::new(cut(&body, &cuts), Some(tally(limit))));
            prop_assert_eq!(&data, &all[..admitted].concat());
            prop_assert_eq!(ends.len(), usize::from(refused));
            if let Some(Ok(trailers)) = ends.first() {
                prop_assert_eq!(&trailers["grpc-status"], "8");
            }

            let (data, ends) = drain(RequestBody::new(cut(&body, &cuts), Some(tally(limit))));
            prop_assert_eq!(&data, &all[..admitted].concat());
            prop_assert_eq!(ends.len(), usize::from(refused));
            if let Some(error) = ends.first() {
                prop_assert!(error.as_ref().is_err_and(|e| e.is::<Status>()));
            }
        }
    }
}
