//! [`InFlight`], the service the layer wraps around yours.

use super::body::InFlightBody;
use super::fields::FieldValues;
use super::future::ResponseFuture;
use super::gate::{Gate, Settled};
use super::{SlotReply, Slots};
use crate::key::{KeyExtractor, OnMissingKey, RequestView};
use crate::rejection::{Rejection, Rejector};
use http::{Request, Response};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Limits how many requests of one key run in `S` at once. Made by
/// [`InFlightLayer`](super::InFlightLayer).
///
/// Clones share one store and so one count. `poll_ready` is the inner
/// service's. The response body is wrapped in an [`InFlightBody`], which
/// holds the request's slot until it ends.
pub struct InFlight<S, K, Sl, R> {
    inner: S,
    gate: Arc<Gate<K, Sl, R>>,
}

impl<S: Clone, K, Sl, R> Clone for InFlight<S, K, Sl, R> {
    fn clone(&self) -> Self {
        InFlight {
            inner: self.inner.clone(),
            gate: self.gate.clone(),
        }
    }
}

impl<S: fmt::Debug, K, Sl, R> fmt::Debug for InFlight<S, K, Sl, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("inner", &self.inner)
            .field("limit", &self.gate.limit)
            .finish_non_exhaustive()
    }
}

impl<S, K, Sl, R> InFlight<S, K, Sl, R> {
    pub(crate) fn new(inner: S, gate: Arc<Gate<K, Sl, R>>) -> Self {
        InFlight { inner, gate }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, K, Sl, R, ReqBody, ResBody> Service<Request<ReqBody>> for InFlight<S, K, Sl, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: http_body::Body + Default,
    K: KeyExtractor,
    Sl: Slots,
    R: Rejector<ResBody>,
{
    type Response = Response<InFlightBody<ResBody, Sl::Permit>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, Request<ReqBody>, K, Sl, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let gate = &self.gate;
        let key = match gate.key.extract(&RequestView::new(&request)) {
            Some(key) => key,
            None => {
                gate.missing_key.missed(&gate.key);
                match &gate.settings.common.on_missing_key {
                    OnMissingKey::Shared(key) => key.clone(),
                    OnMissingKey::Skip => {
                        return ResponseFuture::calling(
                            self.inner.call(request),
                            None,
                            FieldValues::default(),
                        );
                    }
                    OnMissingKey::Reject(status) => {
                        return ResponseFuture::rejected(Box::new(
                            gate.rejector
                                .reject(Rejection::MissingKey { status: *status }),
                        ));
                    }
                }
            }
        };
        match gate.slots.acquire(&gate.limit, &key) {
            SlotReply::Ready(answer) => match gate.settle(answer, &key, true) {
                Settled::Run { permit, fields } => {
                    ResponseFuture::calling(self.inner.call(request), permit, fields)
                }
                Settled::Reject(response) => ResponseFuture::rejected(response),
                Settled::Queue { in_flight } => ResponseFuture::queued(
                    gate.clone(),
                    key,
                    in_flight,
                    (take_ready(&mut self.inner), request),
                ),
            },
            SlotReply::Pending(acquire) => ResponseFuture::acquiring(
                gate.clone(),
                key,
                acquire,
                (take_ready(&mut self.inner), request),
            ),
        }
    }
}

/// The inner service that `poll_ready` made ready, for a future that calls
/// it later; a fresh clone takes its place.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// Wrapping one generated gRPC service keeps its name, which tonic's
/// `Server::builder().add_service(...)` routes by.
#[cfg(feature = "tonic")]
impl<S: tonic::server::NamedService, K, Sl, R> tonic::server::NamedService
    for InFlight<S, K, Sl, R>
{
    const NAME: &'static str = S::NAME;
}
