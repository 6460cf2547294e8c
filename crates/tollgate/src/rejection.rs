//! How a limited request is answered.

use crate::key::Key;
use crate::policy::Policy;
use crate::store::PolicyDecision;
use http::{HeaderMap, Response, StatusCode};

/// Everything known about a limited request, for building its response.
#[derive(Debug)]
#[non_exhaustive]
pub struct Rejection<'a> {
    /// The status the layer is configured to answer with (429 unless set
    /// with [`rejection_status`](crate::RateLimitBuilder::rejection_status)).
    pub status: StatusCode,
    /// The rate-limit fields and `Retry-After`, ready to send.
    pub headers: HeaderMap,
    /// The limits that applied.
    pub policy: &'a Policy,
    /// The key the request was counted under.
    pub key: &'a Key,
    /// What each limit decided.
    pub decision: &'a PolicyDecision,
}

impl<'a> Rejection<'a> {
    /// Everything known about a limited request (the layer makes these;
    /// this is for testing a [`Rejector`] of your own).
    pub fn new(
        status: StatusCode,
        headers: HeaderMap,
        policy: &'a Policy,
        key: &'a Key,
        decision: &'a PolicyDecision,
    ) -> Self {
        Rejection {
            status,
            headers,
            policy,
            key,
            decision,
        }
    }
}

/// Why the layer rejected a request without a decision of its limits: what
/// [`Rejector::reject_without_decision`] is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectReason {
    /// The store failed or timed out and the layer fails closed
    /// ([`OnStoreError::Closed`](crate::OnStoreError::Closed)).
    StoreFailed,
    /// The request had no key and the layer rejects such requests
    /// ([`OnMissingKey::Reject`](crate::OnMissingKey::Reject)).
    MissingKey,
    /// The request's key is on the layer's deny list
    /// ([`AccessLists`](crate::access::AccessLists)); the layer answers
    /// `403 Forbidden`.
    Denied,
}

impl RejectReason {
    /// A sentence for the client.
    pub fn message(self) -> &'static str {
        match self {
            RejectReason::StoreFailed => "the rate limiter is unavailable; retry later",
            RejectReason::MissingKey => "the request carries no rate-limit key",
            RejectReason::Denied => "this client is not allowed to make requests",
        }
    }
}

/// Everything known about a request an in-flight limit turned away
/// ([`InFlightLayer`](crate::InFlightLayer)): its key already had
/// `limit` requests running (and, when the layer queues, kept them for as
/// long as it waited).
#[derive(Debug)]
#[non_exhaustive]
pub struct InFlightRejection<'a> {
    /// The status the layer answers with (429 unless its builder's
    /// `rejection_status` set another).
    pub status: StatusCode,
    /// The fields to send: `RateLimit-Policy` and `RateLimit` with
    /// `qu="concurrent-requests"` (as the layer's header style asks), and
    /// no `Retry-After` (the [`InFlightLayer`](crate::InFlightLayer)
    /// docs say why).
    pub headers: HeaderMap,
    /// The limit's name, as in the fields.
    pub name: &'a str,
    /// How many requests of one key may run at once.
    pub limit: u32,
    /// The key the request was counted under.
    pub key: &'a Key,
}

impl<'a> InFlightRejection<'a> {
    /// A rejection of a request of `key` by the in-flight limit `name` of
    /// `limit` concurrent requests: for rejectors' tests and for layers
    /// outside this crate.
    pub fn new(
        status: StatusCode,
        headers: HeaderMap,
        name: &'a str,
        limit: u32,
        key: &'a Key,
    ) -> Self {
        InFlightRejection {
            status,
            headers,
            name,
            limit,
            key,
        }
    }
}

/// Builds the response to a limited request, for a response body type `B`.
pub trait Rejector<B>: Send + Sync + 'static {
    /// The response to a request its limits rejected.
    fn reject(&self, rejection: Rejection<'_>) -> Response<B>;

    /// The response to a request rejected before its limits decided (see
    /// [`RejectReason`]), with `status` (503 for a store failure, the
    /// configured one for a missing key). By default: that status and an
    /// empty body. Protocols with their own error shape (gRPC) override it.
    fn reject_without_decision(&self, status: StatusCode, reason: RejectReason) -> Response<B>
    where
        B: Default,
    {
        let _ = reason;
        status_response(status)
    }

    /// The response to a request an in-flight limit turned away (its key
    /// already has as many requests running as the limit allows). By
    /// default: the rejection's status and fields, an empty body. Protocols
    /// with their own error shape (gRPC) override it.
    fn reject_in_flight(&self, rejection: InFlightRejection<'_>) -> Response<B>
    where
        B: Default,
    {
        let mut response = status_response(rejection.status);
        *response.headers_mut() = rejection.headers;
        response
    }
}

/// The default rejection: the configured status, the fields, an empty body.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultRejector;

impl<B: Default> Rejector<B> for DefaultRejector {
    fn reject(&self, rejection: Rejection<'_>) -> Response<B> {
        let mut response = status_response(rejection.status);
        *response.headers_mut() = rejection.headers;
        response
    }
}

/// A rejector from a closure; see
/// [`RateLimitBuilder::reject_with`](crate::RateLimitBuilder::reject_with).
#[derive(Clone, Copy, Debug)]
pub struct FnRejector<F>(pub F);

impl<F, B> Rejector<B> for FnRejector<F>
where
    F: Fn(Rejection<'_>) -> Response<B> + Send + Sync + 'static,
{
    fn reject(&self, rejection: Rejection<'_>) -> Response<B> {
        (self.0)(rejection)
    }
}

/// A response with `status` and an empty body.
pub(crate) fn status_response<B: Default>(status: StatusCode) -> Response<B> {
    let mut response = Response::new(B::default());
    *response.status_mut() = status;
    response
}
