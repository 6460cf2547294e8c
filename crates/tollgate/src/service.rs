//! [`RateLimit`], the service the layer wraps around yours.

use crate::future::ResponseFuture;
use crate::headers::{FieldValues, write_retry_after};
use crate::info::RateLimitInfo;
use crate::key::{Key, KeyExtractor, MissingKey, RequestInfo};
use crate::layer::{OnStoreError, Shared};
use crate::rejection::{Refusal, Rejection, Rejector};
use crate::routes::EntryRef;
use crate::store::{Store, StoreCheck, Verdict};
use http::{HeaderMap, Request, Response, StatusCode};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower_service::Service;

/// Rate-limits requests to `S`. Made by [`RateLimitLayer`](crate::RateLimitLayer).
///
/// Clones share one state (the store, the counters). `poll_ready` is the
/// inner service's.
pub struct RateLimit<S, K, St, R> {
    inner: S,
    shared: Arc<Shared<K, St, R>>,
}

impl<S: Clone, K, St, R> Clone for RateLimit<S, K, St, R> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: fmt::Debug, K, St, R> fmt::Debug for RateLimit<S, K, St, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("policy", &self.shared.routes.default_entry().policy)
            .finish_non_exhaustive()
    }
}

impl<S, K, St, R> RateLimit<S, K, St, R> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<K, St, R>>) -> Self {
        RateLimit { inner, shared }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// What to do with a request once its verdict is known.
pub(crate) enum Action<B> {
    /// Forward it, after `wait` (the leaky bucket's slot), adding `fields`
    /// to the response and `info` to the request.
    Forward {
        fields: FieldValues,
        wait: Duration,
        // Boxed: it is rare (opt-in) and would triple the size of the action.
        info: Option<Box<RateLimitInfo>>,
    },
    /// Answer with this response instead. Boxed: a response is large, and
    /// every allowed request would otherwise move an action that size.
    Reject(Box<Response<B>>),
}

impl<K, St, R> Shared<K, St, R> {
    /// Whether the allow-list predicate exempts this request.
    fn is_allowed_always(&self, request: &RequestInfo<'_>) -> bool {
        self.settings
            .allow
            .as_ref()
            .is_some_and(|allow| allow(request))
    }

    /// Whether `verdict` lets the request through at once with nothing to
    /// add to it or to its response.
    #[inline]
    fn passes_bare(&self, verdict: &Verdict) -> bool {
        self.forwards_bare && verdict.merged.allowed && verdict.merged.wait_nanos == 0
    }

    /// Whether requests on `entry` may have per-key quotas of their own
    /// (the layer's default entry, with quotas configured).
    #[inline]
    fn has_key_quotas(&self, entry: &EntryRef) -> bool {
        #[cfg(feature = "quotas")]
        if self.quotas.is_some() && matches!(entry, EntryRef::Table(0)) {
            return true;
        }
        let _ = entry;
        false
    }

    /// The limits a request with `key` is charged, given the entry its
    /// route chose; `None` when its key's quota is "unlimited".
    #[inline]
    fn limits_for_key(&self, entry: EntryRef, key: &Key) -> Option<EntryRef> {
        #[cfg(feature = "quotas")]
        if let (Some(quotas), EntryRef::Table(0)) = (&self.quotas, &entry) {
            return match quotas.resolve(key) {
                crate::quotas::Resolution::Default => Some(entry),
                crate::quotas::Resolution::Unlimited => None,
                crate::quotas::Resolution::Limits(limits) => Some(EntryRef::Key(limits)),
            };
        }
        let _ = key;
        Some(entry)
    }

    /// The action for a verdict on the limits of entry `entry`.
    pub(crate) fn judge<B: Default>(
        &self,
        entry: &EntryRef,
        key: &Key,
        verdict: &Verdict,
    ) -> Action<B>
    where
        R: Rejector<B>,
    {
        let decision = &verdict.merged;
        let policy = &self.routes.get(entry).policy;
        crate::observe::decided(policy, verdict);
        if decision.allowed || self.settings.shadow {
            if !decision.allowed {
                tracing::info!(
                    policy = policy.label(),
                    retry_after_ms = decision.retry_after_nanos / 1_000_000,
                    "shadow mode: this request would have been limited"
                );
            }
            let fields = if self.fields_on_allowed {
                self.field_values(entry, verdict)
            } else {
                FieldValues::default()
            };
            let info = self
                .settings
                .request_info
                .then(|| Box::new(RateLimitInfo::new(policy, verdict)));
            return Action::Forward {
                fields,
                wait: decision.wait(),
                info,
            };
        }
        tracing::debug!(
            policy = policy.label(),
            retry_after_ms = decision.retry_after_nanos / 1_000_000,
            "request limited"
        );
        let mut headers = HeaderMap::new();
        self.field_values(entry, verdict).write_into(&mut headers);
        write_retry_after(&mut headers, decision);
        Action::Reject(Box::new(self.rejector.reject(Rejection {
            status: self.settings.status,
            headers,
            policy,
            key,
            verdict,
        })))
    }

    /// The rate-limit fields reporting `verdict` on the limits of entry
    /// `entry`, in the layer's header style.
    pub(crate) fn field_values(&self, entry: &EntryRef, verdict: &Verdict) -> FieldValues {
        let entry = self.routes.get(entry);
        FieldValues::of(self.settings.headers, &entry.fields, verdict)
    }

    /// The action when the store failed or did not answer in time.
    pub(crate) fn on_failure<B: Default>(
        &self,
        entry: &EntryRef,
        key: &Key,
        cost: u32,
        error: &dyn fmt::Display,
    ) -> Action<B>
    where
        R: Rejector<B>,
    {
        let policy = &self.routes.get(entry).policy;
        tracing::warn!(
            policy = policy.label(),
            %error,
            "rate-limit store failed; applying the configured fallback"
        );
        crate::observe::store_failed(policy);
        match &self.settings.on_store_error {
            OnStoreError::Open => Action::Forward {
                fields: FieldValues::default(),
                wait: Duration::ZERO,
                info: None,
            },
            OnStoreError::Closed => Action::Reject(Box::new(
                self.rejector
                    .refuse(StatusCode::SERVICE_UNAVAILABLE, Refusal::StoreFailed),
            )),
            OnStoreError::Fallback(local) => {
                self.judge(entry, key, &local.check_now(policy, key, cost))
            }
        }
    }
}

/// A response with `status` and an empty body.
pub(crate) fn status_response<B: Default>(status: StatusCode) -> Response<B> {
    let mut response = Response::new(B::default());
    *response.status_mut() = status;
    response
}

impl<S, K, St, R, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, K, St, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Default,
    K: KeyExtractor,
    St: Store,
    R: Rejector<ResBody>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, Request<ReqBody>, K, St, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        limit(&mut self.inner, &self.shared, request)
    }
}

/// Rate-limits one request to `inner` under `shared`'s limits: the body of
/// [`RateLimit::call`], shared with the rules layer, which picks `shared`
/// per request.
pub(crate) fn limit<S, K, St, R, ReqBody, ResBody>(
    inner: &mut S,
    shared_arc: &Arc<Shared<K, St, R>>,
    mut request: Request<ReqBody>,
) -> ResponseFuture<S, Request<ReqBody>, K, St, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Default,
    K: KeyExtractor,
    St: Store,
    R: Rejector<ResBody>,
{
    let shared = &**shared_arc;
    let info = RequestInfo::new(&request);
    let entry = shared.routes.select(&info);
    let unlimited = shared.routes.get(&entry).is_unlimited() && !shared.has_key_quotas(&entry);
    if unlimited || shared.is_allowed_always(&info) {
        return ResponseFuture::passed(inner.call(request));
    }
    let key = match shared.key.extract(&info) {
        Some(key) => key,
        None => match &shared.settings.missing_key {
            MissingKey::Shared(key) => key.clone(),
            MissingKey::Skip => {
                return ResponseFuture::passed(inner.call(request));
            }
            MissingKey::Reject(status) => {
                let response = shared.rejector.refuse(*status, Refusal::MissingKey);
                return ResponseFuture::rejected(Box::new(response));
            }
        },
    };
    let Some(entry) = shared
        .limits_for_key(entry, &key)
        .filter(|entry| !shared.routes.get(entry).is_unlimited())
    else {
        return ResponseFuture::passed(inner.call(request));
    };
    let cost = shared.settings.cost.as_ref().map_or(1, |cost| cost(&info));
    let policy = &shared.routes.get(&entry).policy;
    let action = match shared
        .store
        .check_within(policy, &key, cost, shared.settings.store_timeout)
    {
        // The hot path: admitted at once, nothing to add.
        StoreCheck::Ready(Ok(verdict)) if shared.passes_bare(&verdict) => {
            crate::observe::decided(policy, &verdict);
            return ResponseFuture::passed(inner.call(request));
        }
        StoreCheck::Ready(Ok(verdict)) => shared.judge(&entry, &key, &verdict),
        StoreCheck::Ready(Err(error)) => shared.on_failure(&entry, &key, cost, &error),
        StoreCheck::Pending(check) => {
            let ready = take_ready(inner);
            let pending = (ready, request);
            return ResponseFuture::checking(check, pending, entry, key, cost, shared_arc);
        }
    };
    match action {
        Action::Forward { fields, wait, info } => {
            if let Some(info) = info {
                request.extensions_mut().insert(*info);
            }
            if wait.is_zero() {
                ResponseFuture::calling(inner.call(request), fields)
            } else {
                let ready = take_ready(inner);
                ResponseFuture::waiting(wait, (ready, request), fields)
            }
        }
        Action::Reject(response) => ResponseFuture::rejected(response),
    }
}

/// Wrapping one generated gRPC service keeps its name, which tonic's
/// `Server::builder().add_service(...)` routes by.
#[cfg(feature = "tonic")]
impl<S: tonic::server::NamedService, K, St, R> tonic::server::NamedService
    for RateLimit<S, K, St, R>
{
    const NAME: &'static str = S::NAME;
}

/// The inner service that `poll_ready` made ready, for a future that calls
/// it later; a fresh clone takes its place.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}
