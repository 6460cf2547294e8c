//! [`LimiterBuilder`]: the limits and the store of a direct or keyed limiter.

use super::{DirectLimiter, KeyedLimiter};
use crate::ConfigError;
use crate::key::Key;
use crate::settings::LimitSettings;
use crate::store::{MemoryStore, Store};
use std::sync::Arc;

/// Builds a [`DirectLimiter`] or a [`KeyedLimiter`]: its limits (at least
/// one; a call must pass every limit and is charged to all or none), their
/// algorithm and its store.
///
/// ```
/// use tollgate::{DirectLimiter, MemoryStore};
/// use tollgate_core::{Algorithm, Quota};
///
/// let limiter: DirectLimiter = DirectLimiter::builder()
///     .quota("per-second", Quota::per_second(10))
///     .quota("per-day", Quota::per_day(10_000))
///     .algorithm(Algorithm::SlidingWindow)
///     .store(MemoryStore::new())
///     .direct()
///     .unwrap();
/// # let _ = limiter;
/// ```
#[derive(Clone, Debug)]
pub struct LimiterBuilder<St = MemoryStore> {
    limits: LimitSettings,
    store: St,
}

impl LimiterBuilder {
    /// No limits yet, a fresh [`MemoryStore`].
    pub fn new() -> Self {
        LimiterBuilder {
            limits: LimitSettings::default(),
            store: MemoryStore::new(),
        }
    }
}

impl Default for LimiterBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl DirectLimiter {
    /// Chooses limits, algorithm and store; finish with
    /// [`LimiterBuilder::direct`].
    pub fn builder() -> LimiterBuilder {
        LimiterBuilder::new()
    }
}

impl KeyedLimiter {
    /// Chooses limits, algorithm and store; finish with
    /// [`LimiterBuilder::keyed`].
    pub fn builder() -> LimiterBuilder {
        LimiterBuilder::new()
    }
}

impl<St: Store> LimiterBuilder<St> {
    crate::limit_setters!(limits);

    /// Where the counters live (default a fresh [`MemoryStore`]). In a store
    /// shared by several processes (Redis), limiters whose limits have the
    /// same names count against one another for the same key: give each
    /// quota a name of its own.
    pub fn store<St2: Store>(self, store: St2) -> LimiterBuilder<St2> {
        LimiterBuilder {
            limits: self.limits,
            store,
        }
    }

    /// A limiter with one counter per key; an error when there is no
    /// limit, or when the store cannot decide these limits
    /// ([`Store::supports`]).
    pub fn keyed(self) -> Result<KeyedLimiter<St>, ConfigError> {
        if self.limits.limits.is_empty() {
            return Err(ConfigError::new(
                "a limiter needs at least one limit: add one with `.quota(name, quota)` \
                 or `.limit(NamedLimit)`",
            ));
        }
        tollgate_store::__private::set_up_default_clock();
        let policy = self.limits.policy();
        // As a layer does when it is built: a store that cannot decide
        // these limits (local-first and the sliding log) says so now,
        // naming itself, not at the first call.
        self.store.supports(&policy)?;
        Ok(KeyedLimiter::from_parts(self.store, Arc::new(policy)))
    }

    /// A limiter with one counter for every call.
    pub fn direct(self) -> Result<DirectLimiter<St>, ConfigError> {
        Ok(DirectLimiter::from_keyed(self.keyed()?, Key::GLOBAL))
    }
}
