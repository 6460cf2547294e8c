//! How a limited request is answered.

use crate::Verdict;
use crate::policy::Policy;
use http::{HeaderMap, Response, StatusCode};

/// Everything known about a limited request, for building its response.
#[derive(Debug)]
pub struct Rejection<'a> {
    /// The status the layer is configured to answer with (429 or 503).
    pub status: StatusCode,
    /// The rate-limit fields and `Retry-After`, ready to send.
    pub headers: HeaderMap,
    /// The limits that applied.
    pub policy: &'a Policy,
    /// What each limit decided.
    pub verdict: &'a Verdict,
}

/// Builds the response to a limited request, for a response body type `B`.
pub trait Rejector<B>: Send + Sync + 'static {
    /// The response.
    fn reject(&self, rejection: Rejection<'_>) -> Response<B>;
}

/// The default rejection: the configured status, the fields, an empty body.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultRejector;

impl<B: Default> Rejector<B> for DefaultRejector {
    fn reject(&self, rejection: Rejection<'_>) -> Response<B> {
        let mut response = Response::new(B::default());
        *response.status_mut() = rejection.status;
        *response.headers_mut() = rejection.headers;
        response
    }
}

/// A rejector from a closure; see
/// [`RateLimitBuilder::on_rejection`](crate::RateLimitBuilder::on_rejection).
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
