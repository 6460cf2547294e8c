//! [`DirectLimiter`]: one limit, checked directly.

use super::{Check, KeyedLimiter, UntilReady};
use crate::key::Key;
use crate::store::{MemoryStore, Store};
use crate::store::{PinnedKey, Watched};
use std::fmt;
use std::sync::{Arc, OnceLock};
use tollgate_core::{Clock, Decision, Quota};

/// A limit (or several, charged together) on one stream of calls: the way
/// to throttle the calls a program makes to an API with a quota. Cheap to
/// clone; clones share the counter. See the [module docs](crate::direct).
///
/// ```
/// use tollgate::DirectLimiter;
/// use tollgate_core::Quota;
///
/// let limiter = DirectLimiter::new(Quota::per_second(2));
/// assert!(limiter.check_now().allowed());
/// assert!(limiter.check_now().allowed());
/// let refused = limiter.check_now();
/// assert!(!refused.allowed());
/// assert!(refused.retry_after().as_millis() <= 500);
/// ```
pub struct DirectLimiter<St = MemoryStore> {
    keyed: KeyedLimiter<St>,
    /// The one key every call is counted under: [`Key::GLOBAL`] unless
    /// [`with_key`](DirectLimiter::with_key) chose another.
    key: Key,
    /// On the memory store, the key held apart from the store's map once
    /// the first `*_now` check ran, shared by the clones: checked without
    /// the store's hash, shard lock and map, the same state the store's
    /// every operation (through [`keyed`](DirectLimiter::keyed) too) finds.
    pinned: Arc<OnceLock<PinnedKey>>,
}

impl<St: Clone> Clone for DirectLimiter<St> {
    fn clone(&self) -> Self {
        DirectLimiter {
            keyed: self.keyed.clone(),
            key: self.key.clone(),
            pinned: self.pinned.clone(),
        }
    }
}

impl<St> fmt::Debug for DirectLimiter<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectLimiter")
            .field("limiter", &self.keyed)
            .field("key", &self.key)
            .finish()
    }
}

impl DirectLimiter {
    /// GCRA at `quota`, counted in a fresh [`MemoryStore`]: the burst at
    /// once, then the refill, so up to about `burst + limit` calls in the
    /// first period. For a partner that counts at most N in any period,
    /// use [`at_most`](Self::at_most).
    pub fn new(quota: Quota) -> Self {
        Self::from_keyed(KeyedLimiter::new(quota), Key::GLOBAL)
    }

    /// At most `quota.limit()` calls in any `quota.period()` (a sliding
    /// log), counted in a fresh [`MemoryStore`]: see
    /// [`KeyedLimiter::at_most`], and make the calls through
    /// [`call`](Self::call).
    ///
    /// ```
    /// use tollgate::DirectLimiter;
    /// use tollgate_core::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // The partner counts 5 calls in any second, and refuses the 6th.
    /// let partner = DirectLimiter::at_most(Quota::per_second(5));
    /// for page in 0..3 {
    ///     let reply = partner.call(async { format!("page {page}") }).await?;
    ///     # let _ = reply;
    /// }
    /// assert_eq!(partner.peek_now().remaining(), 2);
    /// # Ok(()) }
    /// ```
    pub fn at_most(quota: Quota) -> Self {
        Self::from_keyed(KeyedLimiter::at_most(quota), Key::GLOBAL)
    }
}

impl<St: Store> DirectLimiter<St> {
    /// The limiter that counts every call of `keyed` under `key`.
    pub(crate) fn from_keyed(keyed: KeyedLimiter<St>, key: Key) -> Self {
        DirectLimiter {
            keyed,
            key,
            pinned: Arc::default(),
        }
    }

    /// The same limiter counting under `key` instead of [`Key::GLOBAL`]: in
    /// a store shared by several programs (Redis), the key tells apart
    /// quotas whose limits have the same names.
    pub fn with_key(self, key: Key) -> Self {
        DirectLimiter {
            key,
            pinned: Arc::default(),
            ..self
        }
    }

    /// The keyed limiter underneath, whose counter for [`key`](Self::key)
    /// this one uses.
    pub fn keyed(&self) -> &KeyedLimiter<St> {
        &self.keyed
    }

    /// The key every call is counted under.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Charges one call if every limit allows it; see
    /// [`KeyedLimiter::check`].
    pub fn check(&self) -> Check<Watched<St>, St::Error> {
        self.keyed.check(&self.key)
    }

    /// Charges a call of cost `n` if every limit allows it.
    pub fn check_n(&self, n: u32) -> Check<Watched<St>, St::Error> {
        self.keyed.check_n(&self.key, n)
    }

    /// What a call of cost 1 would be told now, charging nothing; see
    /// [`KeyedLimiter::peek`].
    pub fn peek(&self) -> Check<Watched<St>, St::Error> {
        self.keyed.peek(&self.key)
    }

    /// Waits until a call is allowed, makes it, and counts it from when it
    /// is done; see [`KeyedLimiter::call`].
    pub async fn call<F: std::future::Future>(
        &self,
        call: F,
    ) -> Result<F::Output, super::UntilReadyError<St::Error>> {
        self.keyed.call(&self.key, call).await
    }

    /// Waits until a call is allowed, then charges it; see
    /// [`KeyedLimiter::until_ready`].
    pub fn until_ready(&self) -> UntilReady<St> {
        self.keyed.until_ready(&self.key)
    }

    /// Waits until a call of cost `n` is allowed, then charges it.
    pub fn until_n_ready(&self, n: u32) -> UntilReady<St> {
        self.keyed.until_n_ready(&self.key, n)
    }
}

impl<C: Clock> DirectLimiter<MemoryStore<C>> {
    /// [`check`](Self::check) without `await`: the memory store answers at
    /// once.
    #[inline]
    pub fn check_now(&self) -> Decision {
        self.check_n_now(1)
    }

    /// [`check_n`](Self::check_n) without `await`.
    #[inline]
    pub fn check_n_now(&self, n: u32) -> Decision {
        let store = self.keyed.store();
        let policy = self.keyed.policy();
        let pinned = self.pinned.get_or_init(|| store.pin(policy, &self.key));
        store.check_pinned(policy, pinned, n)
    }

    /// [`peek`](Self::peek) without `await`.
    pub fn peek_now(&self) -> Decision {
        self.keyed.peek_now(&self.key)
    }
}
