//! [`LimiterBuilder`]: the limits and the store of a direct or keyed limiter.

use super::{DirectLimiter, KeyedLimiter};
use crate::policy::with_overrides;
use crate::{ConfigError, Key, MemoryStore, NamedLimit, Policy, Store};
use std::sync::Arc;
use tollgate_core::{Algorithm, Quota};

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
    limits: Vec<NamedLimit>,
    algorithm: Option<Algorithm>,
    store: St,
}

impl LimiterBuilder {
    /// No limits yet, a fresh [`MemoryStore`].
    pub fn new() -> Self {
        LimiterBuilder {
            limits: Vec::new(),
            algorithm: None,
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
    /// Adds a named limit.
    pub fn limit(mut self, limit: NamedLimit) -> Self {
        self.limits.push(limit);
        self
    }

    /// Adds a limit called `name` of `quota`.
    ///
    /// # Panics
    ///
    /// If `name` is not a limit name ([`NamedLimit::new`]).
    pub fn quota(self, name: &str, quota: Quota) -> Self {
        self.limit(NamedLimit::new(name, quota))
    }

    /// Uses `algorithm` for every limit (default: each limit's own, GCRA
    /// unless set on the [`NamedLimit`]).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = Some(algorithm);
        self
    }

    /// Where the counters live (default a fresh [`MemoryStore`]). In a store
    /// shared by several processes (Redis), limiters whose limits have the
    /// same names count against one another for the same key: give each
    /// quota a name of its own.
    pub fn store<St2: Store>(self, store: St2) -> LimiterBuilder<St2> {
        LimiterBuilder {
            limits: self.limits,
            algorithm: self.algorithm,
            store,
        }
    }

    /// A limiter with one counter per key.
    pub fn keyed(self) -> Result<KeyedLimiter<St>, ConfigError> {
        if self.limits.is_empty() {
            return Err(ConfigError::new(
                "a limiter needs at least one limit: add one with `.quota(name, quota)` \
                 or `.limit(NamedLimit)`",
            ));
        }
        let algorithm = self.algorithm;
        let limits = self
            .limits
            .into_iter()
            .map(|limit| with_overrides(limit, algorithm, None))
            .collect();
        Ok(KeyedLimiter::from_parts(
            self.store,
            Arc::new(Policy::new(limits)),
        ))
    }

    /// A limiter with one counter for every call.
    pub fn direct(self) -> Result<DirectLimiter<St>, ConfigError> {
        Ok(DirectLimiter::from_keyed(self.keyed()?, Key::GLOBAL))
    }
}
