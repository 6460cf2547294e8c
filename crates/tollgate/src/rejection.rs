//! How a refused request is answered: every refusal is a [`Rejection`],
//! which a [`Rejector`] turns into a response.

use crate::Policy;
use crate::key::Key;
use crate::store::PolicyDecision;
use http::{HeaderMap, Response, StatusCode};

/// Every refusal a layer answers, for a [`Rejector`] to turn into a
/// response: one enum, one method. Each variant's status is the one the
/// layer is configured with; [`into_response`](Self::into_response) is the
/// default answer (that status, the fields, an empty body), for a
/// rejector that shapes only some refusals.
///
/// ```
/// use http::{Response, StatusCode};
/// use tollgate::Rejection;
///
/// // A rejector's closure: a body for the rate limit, the default else.
/// let reject = |rejection: Rejection<'_>| -> Response<String> {
///     match rejection {
///         Rejection::Limited(limited) => {
///             let mut response = Response::new("slow down".to_owned());
///             *response.status_mut() = limited.status;
///             *response.headers_mut() = limited.headers;
///             response
///         }
///         other => other.into_response(),
///     }
/// };
/// let response = reject(Rejection::StoreFailed {
///     status: StatusCode::SERVICE_UNAVAILABLE,
///     retry_after: std::time::Duration::from_secs(3),
/// });
/// assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
/// assert_eq!(response.headers()["retry-after"], "3");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejection<'a> {
    /// Its rate limits refused it.
    Limited(Limited<'a>),
    /// An in-flight limit turned it away: its key already had as many
    /// requests running as the limit allows.
    InFlight(InFlight<'a>),
    /// Its key is on the layer's deny list
    /// ([`AccessLists`](crate::access::AccessLists)); `403 Forbidden`.
    Denied {
        /// The status to answer with.
        status: StatusCode,
    },
    /// It had no key and the layer refuses such requests
    /// ([`OnMissingKey::Reject`](crate::OnMissingKey::Reject)).
    MissingKey {
        /// The status to answer with (the one `OnMissingKey::Reject` names).
        status: StatusCode,
    },
    /// The store failed or timed out and the layer fails closed
    /// ([`OnStoreError::Closed`](crate::OnStoreError::Closed)); `503`,
    /// with `Retry-After`.
    StoreFailed {
        /// The status to answer with.
        status: StatusCode,
        /// How long the client should wait before it tries again: an open
        /// [`Breaker`](crate::store::Breaker)'s time until it asks the
        /// store again, else (no breaker, or its probe already out)
        /// [`STORE_FAILED_RETRY_AFTER`] (the next request asks the store
        /// again). The default response sends it
        /// as `Retry-After` in whole seconds, rounded up, at least 1;
        /// tollgate-tonic's rejector as gRPC's `RetryInfo`.
        retry_after: std::time::Duration,
    },
}

impl Rejection<'_> {
    /// The status the layer is configured to answer this refusal with.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::Limited(limited) => limited.status,
            Rejection::InFlight(in_flight) => in_flight.status,
            Rejection::Denied { status }
            | Rejection::MissingKey { status }
            | Rejection::StoreFailed { status, .. } => *status,
        }
    }

    /// A sentence for the client.
    pub fn message(&self) -> &'static str {
        match self {
            Rejection::Limited(_) => "too many requests; retry after the time the fields give",
            Rejection::InFlight(_) => "too many requests of this client are running; retry later",
            Rejection::Denied { .. } => "this client is not allowed to make requests",
            Rejection::MissingKey { .. } => "the request carries no rate-limit key",
            Rejection::StoreFailed { .. } => "the rate limiter is unavailable; retry later",
        }
    }

    /// The default response: the status, the fields (a limited or in-flight
    /// refusal's; a store failure's `Retry-After`), an empty body.
    pub fn into_response<B: Default>(self) -> Response<B> {
        let status = self.status();
        let mut response = status_response(status);
        match self {
            Rejection::Limited(limited) => *response.headers_mut() = limited.headers,
            Rejection::InFlight(in_flight) => *response.headers_mut() = in_flight.headers,
            Rejection::StoreFailed { retry_after, .. } => {
                response.headers_mut().insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from(whole_seconds(retry_after)),
                );
            }
            _ => {}
        }
        response
    }
}

/// How long a client refused because the store failed is told to wait
/// when nothing knows better (no open breaker in front of the store): 1 s,
/// since the next request asks the store again.
pub const STORE_FAILED_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The wait a client is told after the store failed with `error` (`None`:
/// it did not answer in time): an open breaker's, else the default.
pub(crate) fn retry_after_failure(
    error: Option<&(dyn std::error::Error + 'static)>,
) -> std::time::Duration {
    error
        .and_then(tollgate_store::retry_after)
        // Zero while a probe is out: its answer is not known yet.
        .filter(|wait| !wait.is_zero())
        .unwrap_or(STORE_FAILED_RETRY_AFTER)
}

/// `wait` in whole seconds, rounded up, at least 1: `Retry-After`'s unit.
fn whole_seconds(wait: std::time::Duration) -> u64 {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    seconds.max(1)
}

/// Everything known about a request its rate limits refused.
#[derive(Debug)]
#[non_exhaustive]
pub struct Limited<'a> {
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

impl<'a> Limited<'a> {
    /// Everything known about a limited request (the layer makes these;
    /// this is for testing a [`Rejector`] of your own).
    pub fn new(
        status: StatusCode,
        headers: HeaderMap,
        policy: &'a Policy,
        key: &'a Key,
        decision: &'a PolicyDecision,
    ) -> Self {
        Limited {
            status,
            headers,
            policy,
            key,
            decision,
        }
    }
}

/// Everything known about a request an in-flight limit turned away
/// ([`InFlightLayer`](crate::InFlightLayer)): its key already had
/// `limit` requests running (and, when the layer queues, kept them for as
/// long as it waited).
#[derive(Debug)]
#[non_exhaustive]
pub struct InFlight<'a> {
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

impl<'a> InFlight<'a> {
    /// A refusal of a request of `key` by the in-flight limit `name` of
    /// `limit` concurrent requests: for rejectors' tests and for layers
    /// outside this crate.
    pub fn new(
        status: StatusCode,
        headers: HeaderMap,
        name: &'a str,
        limit: u32,
        key: &'a Key,
    ) -> Self {
        InFlight {
            status,
            headers,
            name,
            limit,
            key,
        }
    }
}

/// Builds the response to a refused request ([`Rejection`]), for a
/// response body type `B`.
pub trait Rejector<B>: Send + Sync + 'static {
    /// The response to `rejection`.
    fn reject(&self, rejection: Rejection<'_>) -> Response<B>;
}

/// The default rejection: the configured status, the fields, an empty body.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultRejector;

impl<B: Default> Rejector<B> for DefaultRejector {
    fn reject(&self, rejection: Rejection<'_>) -> Response<B> {
        rejection.into_response()
    }
}

/// A rejector from a closure for limited requests, the default answer
/// for the other refusals; see
/// [`RateLimitBuilder::reject_with`](crate::RateLimitBuilder::reject_with).
#[derive(Clone, Copy, Debug)]
pub struct FnRejector<F>(pub F);

impl<F, B: Default> Rejector<B> for FnRejector<F>
where
    F: Fn(Limited<'_>) -> Response<B> + Send + Sync + 'static,
{
    fn reject(&self, rejection: Rejection<'_>) -> Response<B> {
        match rejection {
            Rejection::Limited(limited) => (self.0)(limited),
            other => other.into_response(),
        }
    }
}

/// A response with `status` and an empty body.
pub(crate) fn status_response<B: Default>(status: StatusCode) -> Response<B> {
    let mut response = Response::new(B::default());
    *response.status_mut() = status;
    response
}
