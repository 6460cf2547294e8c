//! [`Rules`], the service a [`RulesLayer`](super::RulesLayer) wraps around
//! yours.

use super::set::RuleSet;
use crate::key::{KeyExtractor, RequestView};
use crate::rate_limit::future::ResponseFuture;
use crate::rejection::{DefaultRejector, Rejector};
use crate::store::Store;
use arc_swap::ArcSwap;
use http::{Request, Response};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Applies the first matching rule's limits to each request; requests no
/// rule matches pass unlimited. Clones share the rules (and their reloads).
pub struct Rules<S, St, R = DefaultRejector> {
    inner: S,
    rules: Arc<ArcSwap<RuleSet<St, R>>>,
}

impl<S: Clone, St, R> Clone for Rules<S, St, R> {
    fn clone(&self) -> Self {
        Rules {
            inner: self.inner.clone(),
            rules: self.rules.clone(),
        }
    }
}

impl<S: std::fmt::Debug, St, R> std::fmt::Debug for Rules<S, St, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, St, R> Rules<S, St, R> {
    pub(crate) fn new(inner: S, rules: Arc<ArcSwap<RuleSet<St, R>>>) -> Self {
        Rules { inner, rules }
    }
}

impl<S, St, R, ReqBody, ResBody> Service<Request<ReqBody>> for Rules<S, St, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Default,
    St: Store,
    R: Rejector<ResBody>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, Request<ReqBody>, Box<dyn KeyExtractor>, St, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The rule set of this moment: a reload while the request is in
        // flight does not change the limiter it was given.
        let rules = self.rules.load();
        let info = RequestView::new(&request);
        let Some(rule) = rules.iter().find(|rule| rule.matcher.matches(&info)) else {
            return ResponseFuture::passed(self.inner.call(request));
        };
        crate::rate_limit::service::limit(&mut self.inner, &rule.shared, request)
    }
}
