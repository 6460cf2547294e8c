//! [`RateLimitLayer`] and its builder.

use crate::ConfigError;
use crate::key::{KeyExtractor, PeerIp, RequestView};
use crate::rate_limit::engine::{Engine, Settings};
use crate::rate_limit::routes::{RouteMatch, Routes, path_is};
use crate::rate_limit::service::RateLimit;
use crate::rejection::{DefaultRejector, FnRejector, Limited};
use crate::settings::LimitSettings;
use crate::store::{Capability, MemoryStore, Store, short_type_name};
use crate::{NamedLimit, Policy};
use http::StatusCode;
use std::fmt;
use std::sync::Arc;
use tollgate_core::Quota;
use tower_layer::Layer;

/// Applies rate limits to every request of the service it wraps.
///
/// ```
/// use tollgate::RateLimitLayer;
/// use tollgate_core::Quota;
///
/// // 10 requests per second per client IP, in memory.
/// let layer = RateLimitLayer::new(Quota::per_second(10));
///
/// // Two named limits on an API key, as a token bucket.
/// use tollgate::{HeaderKey, NamedLimit};
/// use tollgate_core::Algorithm;
/// let layer = RateLimitLayer::builder()
///     .limit(NamedLimit::new("burst", Quota::per_second(10)))
///     .limit(NamedLimit::new("hourly", Quota::per_hour(1000)))
///     .algorithm(Algorithm::TokenBucket)
///     .key(HeaderKey::new("x-api-key"))
///     .build();
/// # let _ = layer;
/// ```
pub struct RateLimitLayer<K = PeerIp, St = MemoryStore, R = DefaultRejector> {
    shared: Arc<Engine<K, St, R>>,
}

impl<K, St, R> Clone for RateLimitLayer<K, St, R> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<K, St, R> fmt::Debug for RateLimitLayer<K, St, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("policy", self.policy())
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// One limit called `"default"` of `quota` per client IP (the connection's
    /// peer address), GCRA, in a [`MemoryStore`], with the IETF draft headers.
    pub fn new(quota: Quota) -> Self {
        Self::builder()
            .limit(NamedLimit::new("default", quota))
            .build()
    }

    /// A builder with the defaults of [`RateLimitLayer::new`] and no limit yet.
    pub fn builder() -> RateLimitBuilder {
        RateLimitBuilder {
            key: PeerIp,
            store: MemoryStore::new(),
            rejector: DefaultRejector,
            config: Config::default(),
        }
    }
}

impl<K, St, R> RateLimitLayer<K, St, R> {
    /// The limits this layer applies to requests that no route matches.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.shared.routes.default_entry().policy
    }

    /// Every policy of this layer: the default first, then each route's in
    /// the order they were added.
    pub fn policies(&self) -> impl Iterator<Item = &Arc<Policy>> {
        self.shared
            .routes
            .entries()
            .iter()
            .map(|entry| &entry.policy)
    }

    /// The store this layer counts in.
    pub fn store(&self) -> &St {
        &self.shared.store
    }

    /// The handle that changes this layer's limits while it runs, when it
    /// was built with [`live_limits`](RateLimitBuilder::live_limits) (a
    /// clone of the one given: both change the same limits).
    #[cfg(feature = "quotas")]
    pub fn live_limits(&self) -> Option<&crate::quotas::LiveLimits> {
        self.shared.live.as_ref()
    }
}

/// What a rules layer takes from the builder it is made with, for every
/// rule's layer: the store, the rejector, and the settings (cost, headers,
/// status, store timeout and failure behaviour, missing keys, allow-list,
/// request info, algorithm and delay); each rule brings its own key, limits
/// and behaviour.
#[cfg(feature = "rules")]
#[derive(Clone)]
pub(crate) struct Template<St, R> {
    store: St,
    rejector: R,
    settings: Settings,
    /// The algorithm and delay bound (no limits: the rules bring theirs).
    limits: LimitSettings,
}

#[cfg(feature = "rules")]
impl<K, St, R> RateLimitBuilder<K, St, R> {
    /// This builder as a template for a rules layer's rules (its key,
    /// limits, routes and per-key quotas are the rules' own).
    pub(crate) fn into_template(self) -> Template<St, R> {
        Template {
            store: self.store,
            rejector: self.rejector,
            settings: self.config.settings,
            limits: LimitSettings {
                limits: Vec::new(),
                ..self.config.limits
            },
        }
    }
}

#[cfg(feature = "rules")]
impl<St: Clone, R: Clone> Template<St, R> {
    /// A builder with the template's store, rejector and settings.
    pub(crate) fn builder(&self) -> RateLimitBuilder<PeerIp, St, R> {
        RateLimitBuilder {
            key: PeerIp,
            store: self.store.clone(),
            rejector: self.rejector.clone(),
            config: Config {
                settings: self.settings.clone(),
                limits: self.limits.clone(),
                ..Config::default()
            },
        }
    }
}

impl<K, St, R> RateLimitLayer<K, St, R> {
    /// What every service of this layer shares.
    #[cfg_attr(not(feature = "rules"), allow(dead_code))]
    pub(crate) fn into_shared(self) -> Arc<Engine<K, St, R>> {
        self.shared
    }
}

impl<S, K, St, R> Layer<S> for RateLimitLayer<K, St, R> {
    type Service = RateLimit<S, K, St, R>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, self.shared.clone())
    }
}

/// Builds a [`RateLimitLayer`]. Every setting has a default; see each method.
#[must_use]
pub struct RateLimitBuilder<K = PeerIp, St = MemoryStore, R = DefaultRejector> {
    key: K,
    store: St,
    rejector: R,
    config: Config,
}

impl<K, St, R> std::fmt::Debug for RateLimitBuilder<K, St, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitBuilder").finish_non_exhaustive()
    }
}

/// The builder's settings that do not change its type.
#[derive(Default)]
struct Config {
    limits: LimitSettings,
    routes: Vec<(RouteMatch, Vec<NamedLimit>)>,
    #[cfg(feature = "quotas")]
    quotas: Option<crate::rate_limit::quotas::KeyQuotas>,
    #[cfg(feature = "quotas")]
    live: Option<crate::rate_limit::quotas::LiveLimits>,
    policy_seed: Option<u64>,
    settings: Settings,
}

impl<K: KeyExtractor, St: Store, R> RateLimitBuilder<K, St, R> {
    // With no limit at all the layer limits nothing.
    crate::limit_setters!(config.limits, max_delay);

    /// Requests that `matches` are charged `limits` instead of the layer's
    /// own (under the same key, in the same store): the route's limits
    /// replace the layer's, they are not added to them. To keep the layer's
    /// limit and add a stricter one, list both. Routes are tried in the order
    /// they are added and the first match wins; no limits at all means
    /// such requests are not limited. The builder's
    /// [`algorithm`](Self::algorithm) and [`max_delay`](Self::max_delay) apply to
    /// routes' limits too.
    ///
    /// Give a route's limits names of their own: the names are what clients
    /// see in the headers, and in a shared store (Redis) limits with the
    /// same name and key share one counter.
    ///
    /// ```
    /// use tollgate::{NamedLimit, RateLimitLayer};
    /// use tollgate_core::Quota;
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .quota("api", Quota::per_second(20))
    ///     .route(
    ///         |request| request.method == http::Method::POST,
    ///         [NamedLimit::new("writes", Quota::per_second(2))],
    ///     )
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn route(
        mut self,
        matches: impl Fn(&RequestView<'_>) -> bool + Send + Sync + 'static,
        limits: impl IntoIterator<Item = NamedLimit>,
    ) -> Self {
        self.config
            .routes
            .push((Arc::new(matches), limits.into_iter().collect()));
        self
    }

    /// Per-key quotas: each key's limits come from `source` (through its
    /// cache) instead of the layer's own, which remain the default for keys
    /// the source does not name. See [`quotas`](crate::quotas).
    #[cfg(feature = "quotas")]
    pub fn quota_source(mut self, source: crate::rate_limit::quotas::KeyQuotas) -> Self {
        self.config.quotas = Some(source);
        self.config.live = None;
        self
    }

    /// Limits changed while the layer runs, through `limits` (keep a clone):
    /// see [`LiveLimits`](crate::quotas::LiveLimits). The handle starts with
    /// this builder's limits. In place of a
    /// [`quota_source`](Self::quota_source) (the last one set applies).
    #[cfg(feature = "quotas")]
    pub fn live_limits(mut self, limits: crate::rate_limit::quotas::LiveLimits) -> Self {
        self.config.live = Some(limits);
        self.config.quotas = None;
        self
    }

    /// Requests for exactly the URI path `path` are charged `limits` instead
    /// of the layer's own (not beside them: list the layer's limit too to
    /// keep it); see [`route`](Self::route). For a gRPC method the path is
    /// `/package.Service/Method`.
    ///
    /// ```
    /// use tollgate::{NamedLimit, RateLimitLayer};
    /// use tollgate_core::Quota;
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .quota("api", Quota::per_second(20))
    ///     .path("/login", [NamedLimit::new("login", Quota::per_minute(5))])
    ///     .path("/health", []) // never limited
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn path(mut self, path: &str, limits: impl IntoIterator<Item = NamedLimit>) -> Self {
        self.config
            .routes
            .push((path_is(path), limits.into_iter().collect()));
        self
    }

    /// How requests map to keys (default [`PeerIp`]).
    pub fn key<K2: KeyExtractor>(self, key: K2) -> RateLimitBuilder<K2, St, R> {
        RateLimitBuilder {
            key,
            store: self.store,
            rejector: self.rejector,
            config: self.config,
        }
    }

    /// Where the counters live (default a fresh [`MemoryStore`]).
    pub fn store<St2: Store>(self, store: St2) -> RateLimitBuilder<K, St2, R> {
        RateLimitBuilder {
            key: self.key,
            store,
            rejector: self.rejector,
            config: self.config,
        }
    }

    /// How much of the quota a request takes (default 1 for every request).
    pub fn cost(mut self, cost: impl Fn(&RequestView<'_>) -> u32 + Send + Sync + 'static) -> Self {
        self.config.settings.cost = Some(Arc::new(cost));
        self
    }

    /// Requests for which `allow` returns true are never limited nor counted
    /// (health checks, internal addresses).
    pub fn allow(
        mut self,
        allow: impl Fn(&RequestView<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.config.settings.allow = Some(Arc::new(allow));
        self
    }

    /// The status limited requests are answered with (default
    /// `429 Too Many Requests`); e.g. `StatusCode::SERVICE_UNAVAILABLE` for
    /// `503 Service Unavailable`. It applies to requests their limits
    /// rejected (the [`Rejector`](crate::Rejector) gets it as
    /// [`Rejection::status`](crate::Rejection::status)). Requests turned
    /// away without a decision keep their own status whatever this is: 503
    /// for a store failure when the layer fails closed, and
    /// [`OnMissingKey::Reject`](crate::OnMissingKey::Reject)'s for a missing
    /// key.
    ///
    /// ```
    /// use http::StatusCode;
    /// use tollgate::RateLimitLayer;
    /// use tollgate_core::Quota;
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .quota("api", Quota::per_second(5))
    ///     .rejection_status(StatusCode::SERVICE_UNAVAILABLE)
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn rejection_status(mut self, status: StatusCode) -> Self {
        self.config.settings.status = status;
        self
    }

    crate::common_setters!(config.settings.common);

    /// Puts a [`RateLimitInfo`](crate::RateLimitInfo) into the extensions of
    /// every request the limiter checked and let through, so a handler can
    /// read its limit, remaining and reset. Off by default: it costs a few
    /// allocations per request (the value and the extensions' map).
    ///
    /// Requests let through unchecked carry none: on an unlimited route or
    /// key, allow-listed, skipped for a missing key, or passed because the
    /// store failed and the layer fails open. In axum, take an
    /// `Option<RateLimitInfo>` argument, so that those requests are served
    /// rather than refused by the extractor.
    pub fn request_info(mut self, on: bool) -> Self {
        self.config.settings.request_info = on;
        self
    }

    /// Counts only the responses `when` says count (see [`ChargeWhen`]):
    /// a request is charged when admitted, and its charge is given back
    /// when its response does not count. Needs a store that gives charges
    /// back ([`Store::can`](crate::Store::can)
    /// [`Capability::Refund`](crate::store::Capability::Refund)): the
    /// memory, Redis and local-first stores, the wrappers over them and
    /// fallbacks of two of them; `try_build` fails otherwise, naming the
    /// store that cannot.
    ///
    /// [`ChargeWhen`]: crate::settings::ChargeWhen
    pub fn charge_when(mut self, when: crate::rate_limit::outcome::ChargeWhen) -> Self {
        self.config.settings.charge_when = Some(when);
        self
    }

    /// Charges costs known only once the response is over (see
    /// [`pay_after`](crate::pay_after)): each admitted request carries a
    /// [`Meter`](crate::pay_after::Meter) in its extensions, and what it
    /// reports replaces the admission's charge (1 unit, or what
    /// [`cost`](Self::cost) estimates) when the request is over — the
    /// difference charged into debt if need be, or given back. With
    /// [`charge_when`](Self::charge_when), a response that does not count
    /// gives the whole charge back. Needs a store that charges into debt
    /// and gives back ([`Store::can`](crate::Store::can) both
    /// [`Capability`](crate::store::Capability)s); `try_build` fails
    /// otherwise, naming the store that cannot.
    ///
    /// ```
    /// use tollgate::RateLimitLayer;
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .quota("tokens", "1000/min".parse().unwrap())
    ///     .pay_after()
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn pay_after(mut self) -> Self {
        self.config.settings.pay_after = true;
        self
    }

    /// Answers limited requests with the response `rejector` builds: for a
    /// [`Rejector`](crate::Rejector) type of your own or another crate's
    /// (tollgate-axum's `problem+json`, say). For a closure, see
    /// [`reject_with`](Self::reject_with).
    pub fn rejector<R2>(self, rejector: R2) -> RateLimitBuilder<K, St, R2> {
        RateLimitBuilder {
            key: self.key,
            store: self.store,
            rejector,
            config: self.config,
        }
    }

    /// Keys that pass uncounted and keys refused with `403 Forbidden`
    /// whatever their budget; keep a clone of `lists` to change them while
    /// the layer runs (see [`AccessLists`](crate::access::AccessLists)). Checked
    /// after the key is extracted, before any limit or quota lookup.
    pub fn access(mut self, lists: crate::access::AccessLists) -> Self {
        self.config.settings.access = Some(lists);
        self
    }

    /// Shadow mode, for the whole layer: every limit decided and counted
    /// exactly as if enforced, but no request refused. A request the limits
    /// would have refused passes uncharged (as a refused request is), and
    /// is counted (`decision="shadow_limited"` with the `metrics` feature)
    /// and logged at most once per [`SHADOW_LOG_INTERVAL`](crate::SHADOW_LOG_INTERVAL)
    /// per limit. Responses are left as they are: no rate-limit field, no
    /// `Retry-After`. For one limit in shadow beside enforced ones, see
    /// [`NamedLimit::shadow`].
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.config.settings.shadow = shadow;
        self
    }

    /// Answers limited requests with the response `reject` builds (a JSON
    /// body, a redirect, ...). It gets the configured status and the
    /// rate-limit fields with `Retry-After`, to keep or drop. The other
    /// refusals (a denied key, no key, the store failing closed) get the
    /// default answer ([`Rejection::into_response`](crate::Rejection::into_response)); a [`Rejector`](crate::Rejector) of
    /// your own ([`rejector`](Self::rejector)) shapes them all.
    ///
    /// ```
    /// use http::Response;
    /// use tollgate::{RateLimitLayer, rejection::Limited};
    /// use tollgate_core::Quota;
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .quota("api", Quota::per_second(5))
    ///     .reject_with(|rejection: Limited<'_>| {
    ///         let mut response = Response::new(String::from("slow down"));
    ///         *response.status_mut() = rejection.status;
    ///         *response.headers_mut() = rejection.headers;
    ///         response
    ///     })
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn reject_with<F, B>(self, reject: F) -> RateLimitBuilder<K, St, FnRejector<F>>
    where
        F: Fn(Limited<'_>) -> http::Response<B> + Send + Sync + 'static,
    {
        self.rejector(FnRejector(reject))
    }

    /// Gives the layer's own policy an identity derived from `seed`, so a
    /// layer rebuilt with the same seed keeps its counters in a memory
    /// store (rules reloads).
    #[cfg_attr(not(feature = "rules"), allow(dead_code))]
    pub(crate) fn stable_policy_id(mut self, seed: u64) -> Self {
        self.config.policy_seed = Some(seed);
        self
    }

    /// The layer.
    ///
    /// # Panics
    ///
    /// If a setting cannot work (a zero `store_timeout`), with the message
    /// [`try_build`](Self::try_build) would return: a mistake in the
    /// program's setup, found when it starts rather than at the first
    /// request.
    pub fn build(self) -> RateLimitLayer<K, St, R> {
        self.try_build()
            .unwrap_or_else(|error| panic!("tollgate: {error}"))
    }

    /// The layer, or what is wrong with its settings: for settings read
    /// from configuration, where a mistake should be reported, not panic.
    pub fn try_build(self) -> Result<RateLimitLayer<K, St, R>, ConfigError> {
        self.config.settings.common.check()?;
        if self.config.settings.charge_when.is_some() {
            needs(&self.store, "charge_when", Capability::Refund)?;
        }
        if self.config.settings.pay_after {
            needs(&self.store, "pay_after", Capability::Refund)?;
            needs(&self.store, "pay_after", Capability::Debit)?;
        }
        #[cfg(feature = "metrics")]
        crate::observe::describe_metrics();
        tollgate_store::__private::set_up_default_clock();
        let layer = self.build_checked();
        for entry in layer.shared.routes.entries() {
            layer.shared.store.supports(&entry.policy)?;
            if let Some(shadow) = &entry.shadow {
                layer.shared.store.supports(shadow.policy())?;
                shadow_composes(&layer.shared.settings)?;
            }
        }
        // Every series a decision can count in, at 0; only those (a
        // dashboard's shadow panel reads the shadow limits', and an
        // enforced limit has none).
        #[cfg(feature = "metrics")]
        for entry in layer.shared.routes.entries() {
            match layer.shared.settings.shadow {
                true => entry.policy.metrics().register_in_shadow(),
                false => entry.policy.metrics().register(),
            }
            if let Some(shadow) = &entry.shadow {
                shadow.policy().metrics().register_in_shadow();
            }
        }
        #[cfg(feature = "metrics")]
        tollgate_store::__private::observe::register_late_checks();
        Ok(layer)
    }

    fn build_checked(self) -> RateLimitLayer<K, St, R> {
        let config = self.config;
        let limits = config.limits;
        let routes = config
            .routes
            .into_iter()
            .map(|(matches, route)| {
                let route = route.into_iter().map(|limit| limits.apply(limit));
                (matches, Policy::new(route.collect()))
            })
            .collect();
        #[cfg(feature = "quotas")]
        let live_default = config.live.is_some();
        #[cfg(not(feature = "quotas"))]
        let live_default = false;
        let default = match config.policy_seed {
            Some(seed) => Policy::with_seed(seed, limits.applied()),
            // The identity live limits give these same limits when they
            // are set again (`KeyQuotas::set_default_limits`): a limit left
            // out and put back finds its keys' states under it.
            None if live_default => {
                let applied = limits.applied();
                Policy::with_seed(
                    tollgate_store::__private::plan_fingerprint(&applied),
                    applied,
                )
            }
            None => limits.policy(),
        };
        let routes = Routes::new(default, routes);
        #[cfg(feature = "quotas")]
        let live = config.live.clone();
        #[cfg(feature = "quotas")]
        let quotas = match config.live {
            Some(live) => {
                let store = self.store.clone();
                let supports = Arc::new(move |policy: &Policy| store.supports(policy));
                Some(live.attach(limits.applied(), supports))
            }
            None => config.quotas,
        };
        #[cfg(feature = "quotas")]
        let quotas = quotas.map(|quotas| {
            let default = &routes.default_entry().policy;
            let base_name = default.limits().first().map_or("quota", NamedLimit::name);
            let store = self.store.clone();
            let plans = crate::rate_limit::quotas::Plans {
                default: (!default.limits().is_empty()).then(|| default.clone()),
                carrier: Some(Arc::new(move |from, to, key| store.carry(from, to, key))),
            };
            crate::rate_limit::quotas::Resolver::with_plans(
                quotas,
                base_name,
                limits.algorithm,
                limits.max_delay,
                plans,
            )
        });
        let settings = config.settings;
        let headers = settings.common.headers;
        // A layer in shadow leaves responses as they are: no fields at all.
        let fields_on_allowed =
            !settings.shadow && headers.on_allowed && (headers.draft || headers.legacy);
        let forwards_bare = !settings.request_info
            && !fields_on_allowed
            && settings.charge_when.is_none()
            && !settings.pay_after;
        #[cfg(feature = "quotas")]
        let per_key = quotas.is_some();
        #[cfg(not(feature = "quotas"))]
        let per_key = false;
        let default = routes.default_entry();
        let plain = routes.is_single()
            && !per_key
            && !default.policy.limits().is_empty()
            && default.shadow.is_none()
            && settings.allow.is_none()
            && settings.access.is_none()
            && settings.cost.is_none();
        RateLimitLayer {
            shared: Arc::new(Engine {
                rejector: self.rejector,
                routes,
                #[cfg(feature = "quotas")]
                quotas,
                #[cfg(feature = "quotas")]
                live,
                key: self.key,
                missing_key: Default::default(),
                store: self.store,
                settings,
                fields_on_allowed,
                forwards_bare,
                plain,
            }),
        }
    }
}

/// Whether limits in shadow compose with the layer's `settings`: not with
/// `charge_when` or `pay_after`, which would give back (or charge) the
/// enforced limits' part of a request but not the shadow limits'.
fn shadow_composes(settings: &crate::rate_limit::engine::Settings) -> Result<(), ConfigError> {
    let feature = if settings.charge_when.is_some() {
        "charge_when"
    } else if settings.pay_after {
        "pay_after"
    } else {
        return Ok(());
    };
    Err(ConfigError::new(format!(
        "a limit in shadow (NamedLimit::shadow) cannot be combined with {feature}: \
         the shadow limits would keep charges the enforced ones give back; \
         put the whole layer in shadow (RateLimitBuilder::shadow) instead"
    )))
}

/// Whether `store` does what `feature` needs, or an error that names the
/// feature, the store of the composition that lacks it and the fix.
pub(crate) fn needs<St: Store>(
    store: &St,
    feature: &str,
    capability: Capability,
) -> Result<(), ConfigError> {
    let Err(missing) = store.can(capability) else {
        return Ok(());
    };
    let whole = short_type_name::<St>();
    let within = if whole == missing.store {
        String::new()
    } else {
        format!(" (in `{whole}`)")
    };
    Err(ConfigError::new(format!(
        "{feature} needs a store that {does} (`{method}`): `{lacking}`{within} does not say \
         that it does. help: if `{lacking}` wraps another store, implement `StoreWrapper` \
         for it, which forwards `{method}` by itself; if it keeps counts, override \
         `Store::can` and `{method}`; or use a store that does (the memory store, the Redis \
         store, the local-first store, and the wrappers and fallbacks over them)",
        does = capability.does(),
        method = capability.method(),
        lacking = missing.store,
    )))
}
