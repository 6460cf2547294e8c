//! The cache in front of a quota source, and how the layer reads it.

use super::{QuotaAnswer, QuotaSource};
use crate::BoxError;
use crate::key::Key;
use crate::rate_limit::routes::Entry;
use crate::{NamedLimit, Policy};
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate_store::quotas::{Caches, ChangedQuotas, Forget, forget_in};
// tokio's clock, so tests can move time by hand; the real clock otherwise.
use tokio::time::Instant;
use tollgate_core::{Algorithm, Quota};

/// Per-key quotas from a [`QuotaSource`], behind a bounded in-memory cache
/// with a TTL; give it to
/// [`RateLimitBuilder::quota_source`](crate::RateLimitBuilder::quota_source). See the
/// [module docs](super) for what a request gets when the source is slow,
/// failing, or has not answered yet.
///
/// Clones share their counters ([`errors`](Self::errors),
/// [`lookups`](Self::lookups)), so keep one to watch the source.
#[derive(Clone)]
pub struct KeyQuotas {
    source: Arc<dyn QuotaSource>,
    ttl: Duration,
    error_ttl: Duration,
    lookup_timeout: Duration,
    max_keys: u64,
    max_lookups: usize,
    stats: Arc<Stats>,
    /// The caches of the layers built with this (or a clone), which
    /// [`invalidate`](KeyQuotas::invalidate) reaches.
    caches: Caches,
    /// Set once the source was asked to follow its changes.
    following: Arc<AtomicBool>,
    /// What a "default" answer charges instead of the layer's own limits,
    /// when set ([`set_default_quotas`](KeyQuotas::set_default_quotas),
    /// [`set_default_limits`](KeyQuotas::set_default_limits)).
    default_quotas: Arc<std::sync::RwLock<Option<Defaults>>>,
}

/// The limits a "default" answer stands for, replaced at run time.
#[derive(Clone)]
enum Defaults {
    /// Quotas, named and shaped as a key's own quotas are.
    Quotas(Vec<Quota>),
    /// Named limits as they are, with their algorithms.
    Limits(Arc<Entry>),
}

#[derive(Debug, Default)]
struct Stats {
    lookups: AtomicU64,
    errors: AtomicU64,
}

impl fmt::Debug for KeyQuotas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyQuotas")
            .field("ttl", &self.ttl)
            .field("error_ttl", &self.error_ttl)
            .field("lookup_timeout", &self.lookup_timeout)
            .field("max_keys", &self.max_keys)
            .field("max_lookups", &self.max_lookups)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl KeyQuotas {
    /// Quotas from `source`, cached for 60 s, failures remembered for 5 s,
    /// lookups (and a key's first request) given up after 5 s, at most 100,000 keys cached and 64
    /// lookups running at once.
    pub fn new(source: impl QuotaSource) -> Self {
        KeyQuotas {
            source: Arc::new(source),
            ttl: Duration::from_secs(60),
            error_ttl: Duration::from_secs(5),
            lookup_timeout: Duration::from_secs(5),
            max_keys: 100_000,
            max_lookups: 64,
            stats: Arc::default(),
            caches: Arc::default(),
            following: Arc::default(),
            default_quotas: Arc::default(),
        }
    }

    /// How soon a change at the source reaches a key in use: once half the
    /// TTL has passed since a lookup, the key's next request starts a
    /// refresh in the background (and is still charged the cached answer).
    pub fn ttl(self, ttl: Duration) -> Self {
        KeyQuotas { ttl, ..self }
    }

    /// How long a failed lookup is remembered before the key is looked up
    /// again.
    pub fn error_ttl(self, error_ttl: Duration) -> Self {
        KeyQuotas { error_ttl, ..self }
    }

    /// How long a lookup may take before it counts as failed (default
    /// 5 s): the longest a key's first request waits for its quota. Lookups are
    /// timed with tokio's timer, so they need a runtime with time enabled
    /// (as axum and tonic servers have; see the [module docs](super)).
    pub fn lookup_timeout(self, lookup_timeout: Duration) -> Self {
        KeyQuotas {
            lookup_timeout,
            ..self
        }
    }

    /// How many keys the cache holds at most; beyond that the least used
    /// are dropped (and looked up again when they return).
    pub fn max_keys(self, max_keys: u64) -> Self {
        KeyQuotas { max_keys, ..self }
    }

    /// How many lookups may run at once (default 64). Keys come from
    /// requests, so a flood of new keys would otherwise be a flood of
    /// queries to the source: past the bound a new key is charged the
    /// default limits and looked up by a later request, once a lookup has
    /// finished.
    pub fn max_lookups(self, max_lookups: usize) -> Self {
        KeyQuotas {
            max_lookups,
            ..self
        }
    }

    /// How many lookups failed or timed out so far.
    pub fn errors(&self) -> u64 {
        self.stats.errors.load(Ordering::Relaxed)
    }

    /// How many lookups were started so far.
    pub fn lookups(&self) -> u64 {
        self.stats.lookups.load(Ordering::Relaxed)
    }

    /// Drops `key`'s cached quota in every layer built with these quotas
    /// (or a clone): the key's next request asks the source again and
    /// waits for its answer, as a key's first request does, so a changed
    /// plan applies from that request on, whatever the TTL. A lookup of
    /// the key running now is not trusted: its answer may predate the
    /// change, so the key is looked up again once it ends.
    ///
    /// ```
    /// use tollgate::Key;
    /// use tollgate::quotas::{KeyQuotas, StaticQuotas};
    ///
    /// let quotas = KeyQuotas::new(StaticQuotas::new());
    /// // ... the key's plan changed at the source:
    /// quotas.invalidate(&Key::from("tenant-42"));
    /// ```
    pub fn invalidate(&self, key: &Key) {
        forget_in(&self.caches, Some(key));
    }

    /// Drops the cached quota of each of `keys` (of every key at once past
    /// 1,024 of them, rather than one at a time): after a source's plans
    /// changed for these keys ([`PlanBook::replace`](super::PlanBook::replace)
    /// names them).
    pub fn invalidate_keys(&self, keys: &[Key]) {
        const ONE_BY_ONE: usize = 1_024;
        if keys.len() > ONE_BY_ONE {
            self.invalidate_all();
        } else {
            for key in keys {
                self.invalidate(key);
            }
        }
    }

    /// Drops every key's cached quota, as [`invalidate`](Self::invalidate)
    /// drops one: after a source's whole contents changed.
    pub fn invalidate_all(&self) {
        forget_in(&self.caches, None);
    }

    /// Replaces, at run time, the limits a key with no quota of its own
    /// (the source's "default" answer) is charged: `quotas` instead of the
    /// layer's limits, in every layer built with these quotas (clones
    /// included). No key's state is lost: every cached answer is dropped
    /// ([`invalidate_all`](Self::invalidate_all)), and each key's next
    /// request takes the new default with its usage carried over, as for
    /// any plan change. An empty list goes back to the layer's own limits.
    /// Requests that match a route keep the route's limits.
    ///
    /// A layer whose defaults may change at run time is given a quota
    /// source even if no key has a quota of its own:
    ///
    /// ```
    /// use tollgate::quotas::{KeyQuotas, StaticQuotas};
    /// use tollgate::{HeaderKey, RateLimitLayer};
    /// use tollgate::core::Quota;
    ///
    /// let quotas = KeyQuotas::new(StaticQuotas::new());
    /// let layer = RateLimitLayer::builder()
    ///     .quota("api", Quota::per_minute(10))
    ///     .key(HeaderKey::new("x-api-key"))
    ///     .quota_source(quotas.clone())
    ///     .build();
    /// // Later, the new defaults (every key, its usage kept):
    /// quotas.set_default_quotas(vec![Quota::per_minute(100)]);
    /// # let _ = layer;
    /// ```
    pub fn set_default_quotas(&self, quotas: Vec<Quota>) {
        self.set_defaults((!quotas.is_empty()).then_some(Defaults::Quotas(quotas)));
    }

    /// [`set_default_quotas`](Self::set_default_quotas) with named limits
    /// as they are (their names, algorithms and quotas), for a layer whose
    /// limits change while it runs ([`LiveLimits`](super::LiveLimits)):
    /// each key's next request is charged `limits`, its usage carried
    /// limit by limit (by name), as for any plan change; a limit left out
    /// keeps each key's usage for its period, found again when it is put
    /// back ([`Store::carry`](crate::Store::carry)). An empty list goes
    /// back to the layer's own limits.
    ///
    /// The limits' policy is no [plan](Policy::plan): a store that names
    /// a limit's state by its name (Redis, the compare-and-swap store)
    /// keeps one state per limit name and key whatever its quota, and
    /// each state says the quota it was written under, so a process
    /// started with other limits (a limits file changed while no instance
    /// ran) reads each key's usage as this change carries it.
    pub fn set_default_limits(&self, limits: Vec<NamedLimit>) {
        let defaults = (!limits.is_empty()).then(|| {
            let seed = tollgate_store::__private::plan_fingerprint(&limits);
            Defaults::Limits(Arc::new(Entry::new(Policy::with_seed(seed, limits))))
        });
        self.set_defaults(defaults);
    }

    fn set_defaults(&self, defaults: Option<Defaults>) {
        *self
            .default_quotas
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = defaults;
        self.invalidate_all();
    }

    /// What a "default" answer stands for now, if replaced.
    fn default_quotas(&self) -> Option<Defaults> {
        self.default_quotas
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Asks the source, once, to follow its changes (inside a runtime).
    fn follow_changes(&self) {
        if self.following.load(Ordering::Relaxed) || self.following.swap(true, Ordering::AcqRel) {
            return;
        }
        self.source.follow(ChangedQuotas::new(&self.caches));
    }
}

impl Forget for Resolver {
    fn forget(&self, key: Option<&Key>) {
        Resolver::forget(self, key);
    }
}

/// What the layer should charge a request, per its key's quota.
#[derive(Clone, Debug)]
pub(crate) enum Resolution {
    /// The layer's own limits.
    Default,
    /// Nothing.
    Unlimited,
    /// These.
    Limits(Arc<Entry>),
    /// Not known yet: the key's first lookup runs; the request waits for
    /// it ([`Arrival::wait`]), then asks again.
    Pending(Arc<Arrival>),
}

/// The end of a key's first lookup, which its first requests wait for.
#[derive(Debug, Default)]
pub(crate) struct Arrival {
    arrived: AtomicBool,
    notify: tokio::sync::Notify,
}

/// What a request waits on for its key's quota: one allocation, once per
/// key (its first requests), none on the common path.
pub(crate) type QuotaWait = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl Arrival {
    /// Ends when the lookup has ended (answered, failed, timed out, or its
    /// task was lost), its answer in the cache.
    pub(crate) fn wait(self: Arc<Self>) -> QuotaWait {
        Box::pin(async move {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the flag is read: an arrival in between
            // still wakes this.
            notified.as_mut().enable();
            if !self.arrived.load(Ordering::Acquire) {
                notified.await;
            }
        })
    }

    fn arrive(&self) {
        self.arrived.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

/// A cached answer.
struct Cached {
    resolution: Resolution,
    /// From this moment the next request starts a refresh (the answer is
    /// still served meanwhile): half the TTL after the lookup, so that a
    /// key in use sees a change at its source within the TTL.
    refresh_at: Instant,
    /// Set while a lookup for the key runs, so a key has one at a time.
    refreshing: AtomicBool,
}

/// Policies built for per-key quotas are shared by every key with the same
/// quotas. Past this many distinct quota sets, new ones are built per
/// lookup instead; their identity is derived from the quotas either way, so
/// a key keeps its counters across refreshes.
const MAX_INTERNED: usize = 10_000;

/// The most quotas one answer may hold (each is checked on every request
/// of its key); an answer with more is a failed lookup.
const MAX_QUOTAS_PER_KEY: usize = 16;

/// The layer's side of [`KeyQuotas`]: the cache, and how answers become
/// policies (with the layer's algorithm, delay and limit names).
pub(crate) struct Resolver {
    config: KeyQuotas,
    cache: moka::sync::Cache<Key, Arc<Cached>>,
    interned: Mutex<HashMap<Vec<Quota>, Arc<Entry>>>,
    base_name: Arc<str>,
    algorithm: Option<Algorithm>,
    max_delay: Option<Duration>,
    warned_no_runtime: AtomicBool,
    /// Lookups running now, at most `config.max_lookups`.
    running: Arc<AtomicUsize>,
    /// Mixed into every per-key policy's identity, so that two layers with
    /// the same quotas over one store keep apart.
    salt: u64,
    /// Counts invalidations: a lookup that saw it move while it ran is
    /// made again before its answer is kept.
    forgotten: AtomicU64,
    /// Moves a key's usage between plans (the layer's store's
    /// [`Store::carry`](crate::Store::carry)), and the layer's own policy
    /// (what a "default" answer charges; `None`: nothing).
    plans: Plans,
    /// The answers of keys invalidated since (no longer in `cache`): the
    /// plan a key's next answer carries its usage from.
    previous: moka::sync::Cache<Key, Resolution>,
    /// Keys whose first lookup was lost (its task ended early: a source
    /// that panicked, a runtime without time): the requests that waited
    /// for it take the default limits rather than wait for another.
    lost: moka::sync::Cache<Key, ()>,
}

/// What moves a key's usage from one plan to another.
pub(crate) type Carrier =
    Arc<dyn Fn(&Arc<Policy>, &Arc<Policy>, &Key) -> crate::store::AdminFuture + Send + Sync>;

/// How a layer's plans relate: the policy a "default" answer stands for,
/// and what carries a key's usage when its plan changes.
#[derive(Clone, Default)]
pub(crate) struct Plans {
    pub(crate) default: Option<Arc<Policy>>,
    pub(crate) carrier: Option<Carrier>,
}

impl Plans {
    /// The policy a key is charged under `resolution`; `None`: nothing, or
    /// not known yet.
    fn policy(&self, resolution: &Resolution) -> Option<Arc<Policy>> {
        match resolution {
            Resolution::Default => self.default.clone(),
            Resolution::Limits(entry) => Some(entry.policy.clone()),
            Resolution::Unlimited | Resolution::Pending(_) => None,
        }
    }
}

impl Resolver {
    /// The cache of one layer, reached by `config`'s invalidations.
    #[cfg(test)]
    pub(crate) fn new(
        config: KeyQuotas,
        base_name: &str,
        algorithm: Option<Algorithm>,
        max_delay: Option<Duration>,
    ) -> Arc<Self> {
        Self::with_plans(config, base_name, algorithm, max_delay, Plans::default())
    }

    /// [`new`](Self::new), whose keys carry their usage across plans.
    pub(crate) fn with_plans(
        config: KeyQuotas,
        base_name: &str,
        algorithm: Option<Algorithm>,
        max_delay: Option<Duration>,
        plans: Plans,
    ) -> Arc<Self> {
        let caches = config.caches.clone();
        let mut resolver = Self::unlisted(config, base_name, algorithm, max_delay);
        resolver.plans = plans;
        let resolver = Arc::new(resolver);
        caches
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(Arc::downgrade(&(resolver.clone() as Arc<dyn Forget>)));
        resolver
    }

    fn unlisted(
        config: KeyQuotas,
        base_name: &str,
        algorithm: Option<Algorithm>,
        max_delay: Option<Duration>,
    ) -> Self {
        let config_keys = config.max_keys;
        // A key invalidated and not asked for again within this long has
        // its old plan's usage forgotten (it has come back by then, or
        // nearly, for any quota whose period fits in it).
        let previous_ttl = config
            .ttl
            .saturating_add(Duration::from_secs(3600))
            .min(Duration::from_secs(365 * 86_400));
        Resolver {
            cache: moka::sync::Cache::builder()
                .max_capacity(config.max_keys)
                .build(),
            config,
            interned: Mutex::default(),
            // Room for a "-N" suffix within the 64 bytes a name may take
            // (names are ASCII tokens, so any cut is on a char boundary).
            base_name: base_name[..base_name.len().min(60)].into(),
            algorithm,
            max_delay,
            warned_no_runtime: AtomicBool::new(false),
            running: Arc::default(),
            salt: Policy::new(Vec::new()).id(),
            forgotten: AtomicU64::new(0),
            plans: Plans::default(),
            previous: moka::sync::Cache::builder()
                .max_capacity(config_keys)
                .time_to_live(previous_ttl)
                .build(),
            lost: moka::sync::Cache::builder()
                .max_capacity(config_keys)
                .time_to_live(Duration::from_secs(60))
                .build(),
        }
    }

    /// Drops `key`'s cached answer (every key's with `None`), keeping it
    /// as the plan the key's next answer carries its usage from.
    fn forget(&self, key: Option<&Key>) {
        self.forgotten.fetch_add(1, Ordering::AcqRel);
        let keep = |key: Key, cached: &Cached| {
            if !matches!(cached.resolution, Resolution::Pending(_)) {
                self.previous.insert(key, cached.resolution.clone());
            }
        };
        match key {
            Some(key) => {
                if let Some(cached) = self.cache.get(key) {
                    keep(key.clone(), &cached);
                }
                self.cache.invalidate(key);
            }
            None => {
                for (key, cached) in self.cache.iter() {
                    keep((*key).clone(), &cached);
                }
                self.cache.invalidate_all();
            }
        }
    }

    /// Carries `key`'s usage from the plan it was charged under
    /// (`before`) to the one it gets now, if they differ; waits for it at
    /// most the lookup timeout (a carry that fails is logged, and the new
    /// plan starts from its own state).
    async fn carry(&self, key: &Key, before: Option<Resolution>, now: &Resolution) {
        let Some(carrier) = &self.plans.carrier else {
            return;
        };
        let from = before.and_then(|before| self.plans.policy(&before));
        let (Some(from), Some(to)) = (from, self.plans.policy(now)) else {
            return;
        };
        if from.id() == to.id() {
            return;
        }
        let carried = tokio::time::timeout(self.config.lookup_timeout, carrier(&from, &to, key));
        match carried.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "a key's plan changed and its usage could not be carried over")
            }
            Err(_) => tracing::warn!("a key's plan changed and carrying its usage over timed out"),
        }
    }

    /// What `key` is charged now. Reads the cache; a key in it gets its
    /// answer (and starts a background refresh when the answer is stale);
    /// a key not in it starts its first lookup and gets
    /// [`Resolution::Pending`] to wait on, as do its other requests until
    /// the answer arrives. A key whose lookup cannot start (no runtime,
    /// lookups at their bound) gets the default limits, uncached.
    pub(crate) fn resolve(self: &Arc<Self>, key: &Key) -> Resolution {
        let now = Instant::now();
        if let Some(cached) = self.cache.get(key) {
            if now >= cached.refresh_at && !cached.refreshing.swap(true, Ordering::AcqRel) {
                self.spawn_lookup(key, Some(cached.clone()), None);
            }
            return cached.resolution.clone();
        }
        // A placeholder marks the lookup as running, so that the key's other
        // requests meanwhile wait for it rather than start their own.
        let arrival = Arc::new(Arrival::default());
        let entry = self.cache.entry(key.clone()).or_insert_with(|| {
            Arc::new(Cached {
                resolution: Resolution::Pending(arrival.clone()),
                refresh_at: now,
                refreshing: AtomicBool::new(true),
            })
        });
        if entry.is_fresh() && !self.spawn_lookup(key, None, Some(arrival.clone())) {
            // Its waiters (none yet, or a few that came in between) ask again.
            self.cache.invalidate(key);
            arrival.arrive();
            return Resolution::Default;
        }
        entry.into_value().resolution.clone()
    }

    /// What a request that waited for `key`'s lookup is charged: the
    /// answer if it is there; the default limits if the lookup was lost;
    /// else (the answer was dropped by an invalidation before the request
    /// read it) what [`resolve`](Self::resolve) says, to wait again.
    pub(crate) fn resolve_again(self: &Arc<Self>, key: &Key) -> Resolution {
        if self.lost.remove(key).is_some() {
            return Resolution::Default;
        }
        self.resolve(key)
    }

    /// What `key` is charged by the cache's answer, without waiting or
    /// starting a first lookup: a key whose first lookup has not arrived
    /// (it failed to run, or the entry was dropped since) gets the default
    /// limits, and its next request looks it up. For a request that has
    /// waited for the lookup once already.
    pub(crate) fn resolve_now(self: &Arc<Self>, key: &Key) -> Resolution {
        match self.cache.get(key) {
            Some(cached) if !matches!(cached.resolution, Resolution::Pending(_)) => {
                self.resolve(key)
            }
            _ => Resolution::Default,
        }
    }

    /// Starts a lookup of `key` (a refresh of `previous`, or the first,
    /// whose waiters `arrival` wakes once its answer is in the cache);
    /// false when none can start now.
    fn spawn_lookup(
        self: &Arc<Self>,
        key: &Key,
        previous: Option<Arc<Cached>>,
        arrival: Option<Arc<Arrival>>,
    ) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            if !self.warned_no_runtime.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "per-key quotas need a tokio runtime to look quotas up; using the default limits"
                );
            }
            if let Some(cached) = self.cache.get(key) {
                cached.refreshing.store(false, Ordering::Release);
            }
            return false;
        };
        self.config.follow_changes();
        let Some(slot) = LookupSlot::take(&self.running, self.config.max_lookups) else {
            tracing::debug!("quota lookups at their bound; this key is looked up later");
            if let Some(cached) = self.cache.get(key) {
                cached.refreshing.store(false, Ordering::Release);
            }
            return false;
        };
        self.config.stats.lookups.fetch_add(1, Ordering::Relaxed);
        let resolver = self.clone();
        let key = key.clone();
        runtime.spawn(async move {
            let _slot = slot;
            // A source that panics ends this task early: the guard then
            // clears the key's mark, so a later request looks it up again,
            // and wakes the requests waiting for a first answer.
            let guard = LookupGuard {
                resolver: &resolver,
                key: &key,
                arrival: arrival.as_deref(),
            };
            // Asked again if an invalidation came while it ran (a few times
            // at most: a source changing all the time keeps the last).
            let mut result = Err(BoxError::from("not asked"));
            for _ in 0..3 {
                let seen = resolver.forgotten.load(Ordering::Acquire);
                let lookup = resolver.config.source.lookup(&key);
                result = match tokio::time::timeout(resolver.config.lookup_timeout, lookup).await
                {
                    Ok(result) => result,
                    Err(_) => Err("the quota source did not answer in time".into()),
                };
                if resolver.forgotten.load(Ordering::Acquire) == seen {
                    break;
                }
            }
            let result = result.and_then(|answer| resolver.resolution_of(answer));
            if let Ok(now) = &result {
                let before = match &previous {
                    Some(previous) => Some(previous.resolution.clone()),
                    None => resolver.previous.remove(&key),
                };
                resolver.carry(&key, before, now).await;
            }
            let cached = match result {
                Ok(resolution) => Cached {
                    resolution,
                    refresh_at: after(resolver.config.ttl / 2),
                    refreshing: AtomicBool::new(false),
                },
                Err(error) => {
                    resolver.config.stats.errors.fetch_add(1, Ordering::Relaxed);
                    crate::observe::quota_lookup_failed();
                    tracing::warn!(%error, "quota lookup failed; keeping the last answer or the default limits");
                    Cached {
                        resolution: previous.map_or(Resolution::Default, |p| p.resolution.clone()),
                        refresh_at: after(resolver.config.error_ttl),
                        refreshing: AtomicBool::new(false),
                    }
                }
            };
            std::mem::forget(guard);
            resolver.cache.insert(key, Arc::new(cached));
            if let Some(arrival) = arrival {
                arrival.arrive();
            }
        });
        true
    }

    /// The resolution for a source's answer.
    fn resolution_of(&self, answer: QuotaAnswer) -> Result<Resolution, BoxError> {
        // The default, replaced at run time, stands for those quotas.
        let default = |answer: &QuotaAnswer| match answer {
            QuotaAnswer::Default => true,
            QuotaAnswer::Quotas(quotas) => quotas.is_empty(),
            QuotaAnswer::Unlimited => false,
        };
        let answer = match self.config.default_quotas() {
            Some(Defaults::Quotas(quotas)) if default(&answer) => QuotaAnswer::Quotas(quotas),
            Some(Defaults::Limits(entry)) if default(&answer) => {
                return Ok(Resolution::Limits(entry));
            }
            _ => answer,
        };
        Ok(match answer {
            QuotaAnswer::Default => Resolution::Default,
            QuotaAnswer::Unlimited => Resolution::Unlimited,
            // An empty list would limit nothing by accident: read it as the
            // default.
            QuotaAnswer::Quotas(quotas) if quotas.is_empty() => Resolution::Default,
            QuotaAnswer::Quotas(quotas) if quotas.len() > MAX_QUOTAS_PER_KEY => {
                return Err(format!(
                    "{} quotas for one key; at most {MAX_QUOTAS_PER_KEY}",
                    quotas.len()
                )
                .into());
            }
            QuotaAnswer::Quotas(quotas) => Resolution::Limits(self.entry_for(quotas)),
        })
    }

    /// The shared entry for a set of quotas.
    fn entry_for(&self, quotas: Vec<Quota>) -> Arc<Entry> {
        let mut interned = self
            .interned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(entry) = interned.get(&quotas) {
            return entry.clone();
        }
        let entry = Arc::new(Entry::new(self.policy_for(&quotas)));
        if interned.len() < MAX_INTERNED {
            interned.insert(quotas, entry.clone());
        }
        entry
    }

    fn policy_for(&self, quotas: &[Quota]) -> Policy {
        let limits = quotas
            .iter()
            .enumerate()
            .map(|(i, quota)| {
                let name = match i {
                    0 => self.base_name.to_string(),
                    _ => format!("{}-{}", self.base_name, i + 1),
                };
                tollgate_store::__private::with_overrides(
                    NamedLimit::new(name, *quota),
                    self.algorithm,
                    self.max_delay,
                )
            })
            .collect();
        // The same quotas give the same identity, interned or not. No
        // plan: a store that names state by limit keeps one state per
        // limit name and key, which says its quota, so a key's usage reads
        // the same under its next plan, in this process or the next.
        let mut seed = std::hash::DefaultHasher::new();
        (self.salt, quotas).hash(&mut seed);
        Policy::with_seed(seed.finish(), limits)
    }
}

/// `delay` from now; a delay past what the clock can hold (a TTL of
/// `Duration::MAX`, "never") is decades.
fn after(delay: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(delay)
        .unwrap_or_else(|| now + Duration::from_secs(1 << 30))
}

/// One of the bounded number of lookups that may run at once; the slot is
/// given back when the lookup ends, however it ends.
struct LookupSlot(Arc<AtomicUsize>);

impl LookupSlot {
    fn take(running: &Arc<AtomicUsize>, max: usize) -> Option<LookupSlot> {
        running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| LookupSlot(running.clone()))
    }
}

impl Drop for LookupSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Clears a key's "lookup running" mark unless the lookup finished (then
/// it is forgotten): a lookup that panicked must not leave the key waiting
/// for an answer that never comes.
struct LookupGuard<'a> {
    resolver: &'a Resolver,
    key: &'a Key,
    arrival: Option<&'a Arrival>,
}

impl Drop for LookupGuard<'_> {
    fn drop(&mut self) {
        if let Some(arrival) = self.arrival {
            // A first lookup lost: no placeholder left to wait on, and its
            // waiters take the default limits.
            self.resolver.lost.insert(self.key.clone(), ());
            self.resolver.cache.invalidate(self.key);
            arrival.arrive();
        } else if let Some(cached) = self.resolver.cache.get(self.key) {
            cached.refreshing.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::quotas::StaticQuotas;

    /// A flood of distinct keys keeps at most `max_keys` answers cached.
    #[tokio::test]
    async fn the_cache_holds_at_most_max_keys() {
        let quotas = KeyQuotas::new(StaticQuotas::new()).max_keys(100);
        let resolver = Resolver::new(quotas, "api", None, None);
        for i in 0..10_000u32 {
            let key = Key::from_bytes(&i.to_be_bytes());
            // Its first lookup starts (or, past the bound on lookups at
            // once, the default limits for now).
            assert!(matches!(
                resolver.resolve(&key),
                Resolution::Pending(_) | Resolution::Default
            ));
            if i % 1_000 == 999 {
                // Let the background lookups land, as they would between requests.
                tokio::task::yield_now().await;
            }
        }
        tokio::task::yield_now().await;
        resolver.cache.run_pending_tasks();
        let cached = resolver.cache.entry_count();
        assert!(cached <= 100, "{cached} answers cached, bound 100");
        assert!(cached > 0, "nothing cached");
    }

    /// A flood of new keys against a slow source runs at most
    /// `max_lookups` lookups at once; a key turned away is looked up later.
    #[tokio::test(start_paused = true)]
    async fn lookups_at_once_are_bounded() {
        let source = crate::rate_limit::quotas::quota_fn_async(|_| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(QuotaAnswer::Unlimited)
        });
        let quotas = KeyQuotas::new(source).max_lookups(3);
        let resolver = Resolver::new(quotas.clone(), "api", None, None);
        let key = |i: u32| Key::from_bytes(&i.to_be_bytes());
        let mut waits = Vec::new();
        for i in 0..100 {
            match resolver.resolve(&key(i)) {
                Resolution::Pending(arrival) => waits.push(arrival.wait()),
                // Turned away: charged the default limits, nothing cached.
                resolution => assert!(matches!(resolution, Resolution::Default), "{i}"),
            }
        }
        assert_eq!((quotas.lookups(), waits.len()), (3, 3));
        for wait in waits {
            wait.await;
        }
        assert_eq!(resolver.running.load(Ordering::Acquire), 0);
        assert!(matches!(resolver.resolve(&key(0)), Resolution::Unlimited));
        // Key 50 was turned away: its next request looks it up, and waits.
        let Resolution::Pending(arrival) = resolver.resolve(&key(50)) else {
            panic!("key 50 is looked up");
        };
        assert_eq!(quotas.lookups(), 4);
        arrival.wait().await;
        assert!(matches!(resolver.resolve(&key(50)), Resolution::Unlimited));
    }

    /// A key's requests that come while its first lookup runs wait for
    /// that one lookup; a lookup whose task is lost (a panicking source)
    /// wakes them, and the key is looked up again.
    #[tokio::test(start_paused = true)]
    async fn first_requests_wait_for_one_lookup() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let source = crate::rate_limit::quotas::quota_fn_async(move |_| {
            let call = counted.fetch_add(1, Ordering::Relaxed);
            async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                assert!(call > 0, "the first lookup's task is lost");
                Ok(QuotaAnswer::Unlimited)
            }
        });
        let quotas = KeyQuotas::new(source);
        let resolver = Resolver::new(quotas.clone(), "api", None, None);
        let waits: Vec<_> = (0..5)
            .map(|_| match resolver.resolve(&Key::GLOBAL) {
                Resolution::Pending(arrival) => arrival.wait(),
                _ => panic!("the first requests wait"),
            })
            .collect();
        for wait in waits {
            wait.await;
        }
        assert_eq!(quotas.lookups(), 1);
        assert!(matches!(
            resolver.resolve_now(&Key::GLOBAL),
            Resolution::Default
        ));
        assert_eq!(
            quotas.lookups(),
            1,
            "not looked up by a request that waited"
        );
        let Resolution::Pending(arrival) = resolver.resolve(&Key::GLOBAL) else {
            panic!("the next request waits for a second lookup");
        };
        assert_eq!(quotas.lookups(), 2);
        arrival.wait().await;
        assert!(matches!(
            resolver.resolve(&Key::GLOBAL),
            Resolution::Unlimited
        ));
    }

    /// A TTL of `Duration::MAX` ("never refresh") is not a panic.
    #[tokio::test]
    async fn a_ttl_past_the_clock_is_far_away_not_a_panic() {
        let quotas = KeyQuotas::new(StaticQuotas::new())
            .ttl(Duration::MAX)
            .error_ttl(Duration::MAX);
        let resolver = Resolver::new(quotas.clone(), "api", None, None);
        resolver.resolve(&Key::GLOBAL);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        resolver.resolve(&Key::GLOBAL);
        assert_eq!(quotas.lookups(), 1, "answered once, not refreshed");
        assert_eq!(resolver.running.load(Ordering::Acquire), 0);
    }
}
