//! Limits changed while a layer runs: [`LiveLimits`].

use super::{KeyQuotas, StaticQuotas};
use crate::ConfigError;
use crate::{NamedLimit, Policy};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_core::{Algorithm, Quota};

/// Whether a layer's store can decide a policy (its `Store::supports`).
type Supports = Arc<dyn Fn(&Policy) -> Result<(), ConfigError> + Send + Sync>;

/// A handle that changes a rate-limit layer's limits while it runs: a
/// named limit's quota or algorithm, or the whole list. Each key keeps its
/// usage: its next request, before it is charged, has the units it used
/// carried to the new limits, limit by limit in their order, as a per-key
/// plan change does ([`Store::carry`](crate::Store::carry)): 8 used of 10
/// a minute, moved to 5 a minute, is refused until enough came back at the
/// new pace; moved to 20 a minute instead, it has 12 left. Requests of a
/// key that arrive while its usage is carried wait for it, so none is
/// charged under the new limits before the carry (no over-admission at the
/// swap).
///
/// Give it to [`RateLimitBuilder::live_limits`](crate::RateLimitBuilder::live_limits);
/// the handle starts with the builder's limits. It is a per-key quota
/// source of its own (the `quotas` feature), so a layer takes either live
/// limits or a [`quota_source`](crate::RateLimitBuilder::quota_source)
/// (whose [`KeyQuotas::set_default_limits`] does the same). Requests that
/// match a [route](crate::RateLimitBuilder::route) keep the route's limits.
/// Keys are remembered, to carry their usage, up to
/// [`max_keys`](Self::max_keys) (100,000): a key dropped past that before a
/// change starts the new limits afresh.
///
/// ```
/// use tollgate::quotas::LiveLimits;
/// use tollgate::{NamedLimit, RateLimitLayer};
/// use tollgate_core::Quota;
///
/// let limits = LiveLimits::new();
/// let layer = RateLimitLayer::builder()
///     .quota("api", Quota::per_minute(10))
///     .live_limits(limits.clone())
///     .build();
/// // Later, while it serves: every key, its usage kept.
/// limits.set_quota("api", Quota::per_minute(5)).unwrap();
/// assert_eq!(limits.limits()[0].quota(), Quota::per_minute(5));
/// // A name the layer does not have is an error, and changes nothing.
/// assert!(limits.set_quota("other", Quota::per_minute(1)).is_err());
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct LiveLimits {
    quotas: KeyQuotas,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// The limits in force.
    limits: Vec<NamedLimit>,
    /// Each layer's store's check, so that a change no store can decide
    /// is refused before it applies.
    supports: Vec<Supports>,
}

impl std::fmt::Debug for LiveLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveLimits")
            .field("limits", &self.limits())
            .finish_non_exhaustive()
    }
}

impl Default for LiveLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveLimits {
    /// A handle with no limits yet: the layer it is given to brings its
    /// own.
    pub fn new() -> Self {
        LiveLimits {
            quotas: KeyQuotas::new(StaticQuotas::new()),
            state: Arc::default(),
        }
    }

    /// How many keys are remembered to carry their usage (default
    /// 100,000).
    pub fn max_keys(self, max_keys: u64) -> Self {
        LiveLimits {
            quotas: self.quotas.max_keys(max_keys),
            ..self
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> Vec<NamedLimit> {
        self.lock().limits.clone()
    }

    /// Puts `limits` in force, in place of the ones in force: every key's
    /// next request is charged them, its usage carried. Refused (nothing
    /// changes) if the list is empty, two limits share a name, or a
    /// layer's store cannot decide them.
    pub fn set(&self, limits: Vec<NamedLimit>) -> Result<(), ConfigError> {
        if limits.is_empty() {
            return Err(ConfigError::new(
                "live limits need at least one limit; to limit nothing, build a layer without one",
            ));
        }
        let mut names = HashSet::new();
        if let Some(twice) = limits.iter().find(|limit| !names.insert(limit.name())) {
            return Err(ConfigError::new(format!(
                "two limits are called {:?}; give each its own name",
                twice.name()
            )));
        }
        let mut state = self.lock();
        let policy = Policy::new(limits.clone());
        for supports in &state.supports {
            supports(&policy)?;
        }
        self.quotas.set_default_limits(limits.clone());
        state.limits = limits;
        Ok(())
    }

    /// Changes the quota of the limit called `name`, keeping its algorithm
    /// and the other limits.
    pub fn set_quota(&self, name: &str, quota: Quota) -> Result<(), ConfigError> {
        self.change(name, |limit| {
            let algorithm = limit.limiter().algorithm();
            let changed = NamedLimit::try_new(limit.name(), quota)?.with_algorithm(algorithm);
            Ok(if limit.is_shadow() {
                changed.shadow()
            } else {
                changed
            })
        })
    }

    /// Changes the algorithm of the limit called `name`, keeping its quota
    /// and the other limits.
    pub fn set_algorithm(&self, name: &str, algorithm: Algorithm) -> Result<(), ConfigError> {
        self.change(name, |limit| Ok(limit.clone().with_algorithm(algorithm)))
    }

    /// The limits in force with the one called `name` changed by `change`.
    fn change(
        &self,
        name: &str,
        change: impl FnOnce(&NamedLimit) -> Result<NamedLimit, ConfigError>,
    ) -> Result<(), ConfigError> {
        let mut limits = self.limits();
        let Some(limit) = limits.iter_mut().find(|limit| limit.name() == name) else {
            let names: Vec<&str> = limits.iter().map(NamedLimit::name).collect();
            return Err(ConfigError::new(format!(
                "no limit is called {name:?} (the limits in force: {})",
                names.join(", ")
            )));
        };
        *limit = change(limit)?;
        self.set(limits)
    }

    /// What the layer being built asks of the handle: the per-key quota
    /// source it reads the limits through. `limits` (the builder's) are
    /// the limits in force unless a change came first; `supports` checks
    /// every later change against the layer's store.
    pub(crate) fn attach(&self, limits: Vec<NamedLimit>, supports: Supports) -> KeyQuotas {
        let mut state = self.lock();
        if state.limits.is_empty() {
            state.limits = limits;
        }
        state.supports.push(supports);
        self.quotas.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
