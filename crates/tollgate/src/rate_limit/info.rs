//! What the limiter decided about a request, for its handler.

use crate::Policy;
use crate::store::PolicyDecision;
use smallvec::SmallVec;
use std::sync::Arc;
use std::time::Duration;
use tollgate_core::Decision;

/// The decision for a request that was let through, put into its
/// extensions when the layer is built with
/// [`request_info(true)`](crate::RateLimitBuilder::request_info).
///
/// ```
/// use http::Request;
/// use tollgate::RateLimitInfo;
///
/// fn handler(request: &Request<()>) -> String {
///     match request.extensions().get::<RateLimitInfo>() {
///         Some(info) => format!("{} of {} left", info.remaining(), info.limit()),
///         None => "not limited".into(),
///     }
/// }
/// # let _ = handler;
/// ```
///
/// With the `axum` feature it is also an extractor: take `RateLimitInfo`
/// (rejects with a 500 that says what is missing) or
/// `Option<RateLimitInfo>` as a handler argument.
#[derive(Clone, Debug)]
pub struct RateLimitInfo {
    policy: Arc<Policy>,
    merged: Decision,
    each: SmallVec<[Decision; 2]>,
}

impl RateLimitInfo {
    pub(crate) fn new(policy: &Arc<Policy>, verdict: &PolicyDecision) -> Self {
        RateLimitInfo {
            policy: policy.clone(),
            merged: verdict.merged(),
            each: verdict.each().into(),
        }
    }

    /// Whether the limits allowed the request: false only in shadow mode,
    /// for a request that would have been limited.
    pub fn allowed(&self) -> bool {
        self.merged.allowed()
    }

    /// The quota of the limit closest to running out.
    pub fn limit(&self) -> u64 {
        self.merged.limit()
    }

    /// How many more requests of cost 1 would pass now.
    pub fn remaining(&self) -> u64 {
        self.merged.remaining()
    }

    /// How long until every limit is back at rest.
    pub fn reset_after(&self) -> Duration {
        self.merged.reset_after()
    }

    /// All limits folded into one decision.
    pub fn decision(&self) -> &Decision {
        &self.merged
    }

    /// Each limit's name and decision, in the policy's order.
    pub fn limits(&self) -> impl Iterator<Item = (&str, &Decision)> {
        self.policy
            .limits()
            .iter()
            .map(|limit| limit.name())
            .zip(self.each.iter())
    }
}

#[cfg(feature = "axum")]
mod extract {
    use super::RateLimitInfo;
    use axum::extract::{FromRequestParts, OptionalFromRequestParts};
    use http::StatusCode;
    use http::request::Parts;
    use std::convert::Infallible;

    impl<S: Send + Sync> FromRequestParts<S> for RateLimitInfo {
        type Rejection = (StatusCode, &'static str);

        async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
            parts.extensions.get::<RateLimitInfo>().cloned().ok_or((
                StatusCode::INTERNAL_SERVER_ERROR,
                "no RateLimitInfo for this request: build the rate-limit layer with \
                 .request_info(true), and put the handler behind it",
            ))
        }
    }

    impl<S: Send + Sync> OptionalFromRequestParts<S> for RateLimitInfo {
        type Rejection = Infallible;

        async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Infallible> {
            Ok(parts.extensions.get::<RateLimitInfo>().cloned())
        }
    }
}
