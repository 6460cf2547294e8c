//! [`KeyedLimiter`]: a limit per key, checked directly.

use super::{Check, UntilReady};
use crate::Policy;
use crate::key::Key;
use crate::store::Watched;
use crate::store::{MemoryStore, Store};
use std::fmt;
use std::sync::Arc;
use tollgate_core::{Clock, Decision, Quota};

/// The name of the one limit of [`KeyedLimiter::new`] and
/// [`DirectLimiter::new`](super::DirectLimiter::new).
pub(crate) const DEFAULT_LIMIT_NAME: &str = "default";

/// A limit (or several, charged together) for each of many keys: one
/// counter per tenant, per host, per user. Cheap to clone; clones share the
/// counters. See the [module docs](crate::direct).
///
/// ```
/// use tollgate::{Key, KeyedLimiter};
/// use tollgate_core::Quota;
///
/// let limiter = KeyedLimiter::new(Quota::per_minute(2));
/// let (alice, bob) = (Key::from("alice"), Key::from("bob"));
/// assert!(limiter.check_now(&alice).allowed());
/// assert!(limiter.check_now(&alice).allowed());
/// assert!(!limiter.check_now(&alice).allowed());
/// assert!(limiter.check_now(&bob).allowed()); // a counter of its own
/// ```
pub struct KeyedLimiter<St = MemoryStore> {
    store: St,
    policy: Arc<Policy>,
}

impl<St: Clone> Clone for KeyedLimiter<St> {
    fn clone(&self) -> Self {
        KeyedLimiter {
            store: self.store.clone(),
            policy: self.policy.clone(),
        }
    }
}

impl<St> fmt::Debug for KeyedLimiter<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("limits", &self.policy.limits())
            .finish_non_exhaustive()
    }
}

impl KeyedLimiter {
    /// GCRA at `quota` for each key, counted in a fresh [`MemoryStore`].
    pub fn new(quota: Quota) -> Self {
        let policy = Policy::new(vec![crate::NamedLimit::new(DEFAULT_LIMIT_NAME, quota)]);
        Self::from_parts(MemoryStore::new(), Arc::new(policy))
    }

    /// At most `quota.limit()` calls for each key in any `quota.period()`
    /// (a sliding log: no burst on top, unlike GCRA's `new`, which admits
    /// its burst and then its refill, so more than the limit in some
    /// periods), counted in a fresh [`MemoryStore`]. What a partner that
    /// counts its own calls that way accepts; make the calls through
    /// [`call`](Self::call), which counts each from when it is done, and
    /// none is refused whatever the network's delays.
    pub fn at_most(quota: Quota) -> Self {
        let limit = crate::NamedLimit::new(DEFAULT_LIMIT_NAME, quota)
            .with_algorithm(tollgate_core::Algorithm::SlidingLog);
        Self::from_parts(MemoryStore::new(), Arc::new(Policy::new(vec![limit])))
    }
}

impl<St: Store> KeyedLimiter<St> {
    /// The limiter of `policy`'s limits, counted in `store`.
    pub(crate) fn from_parts(store: St, policy: Arc<Policy>) -> Self {
        KeyedLimiter { store, policy }
    }

    /// The limits every call is checked against.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// The store the counters live in.
    pub fn store(&self) -> &St {
        &self.store
    }

    /// Charges one call for `key` if every limit allows it; a refused call
    /// charges nothing. The decision is every limit's folded into one
    /// ([`Decision::merge`]).
    pub fn check(&self, key: &Key) -> Check<Watched<St>, St::Error> {
        self.check_n(key, 1)
    }

    /// Charges a call of cost `n` for `key` if every limit allows it.
    pub fn check_n(&self, key: &Key, n: u32) -> Check<Watched<St>, St::Error> {
        let reply = self.store.check(&self.policy, key, n);
        Check::new(reply.watched(&self.store, &self.policy, key, n), false)
    }

    /// What a call of cost 1 for `key` would be told now, charging nothing:
    /// [`allowed`](Decision::allowed) iff at least one unit remains, and
    /// when not, [`retry_after`](Decision::retry_after) is the time until
    /// the next unit is back ([`replenish_after`](Decision::replenish_after)).
    /// The other figures are the limit's as they stand. A call may still be
    /// refused after a peek said yes, if another caller took the unit first.
    pub fn peek(&self, key: &Key) -> Check<Watched<St>, St::Error> {
        let reply = self.store.peek(&self.policy, key);
        Check::new(reply.watched(&self.store, &self.policy, key, 0), true)
    }

    /// Waits until a call for `key` is allowed, then charges it (and, where
    /// the limit holds calls back, as the leaky bucket does, waits out the
    /// hold). Resolves to the decision that admitted it, or to an error if
    /// the store failed or no call of cost 1 can ever pass.
    pub fn until_ready(&self, key: &Key) -> UntilReady<St> {
        self.until_n_ready(key, 1)
    }

    /// Waits until a call of cost `n` for `key` is allowed, then charges it.
    /// Fails at once, without waiting, if `n` is more than the limits can
    /// ever admit at once.
    pub fn until_n_ready(&self, key: &Key, n: u32) -> UntilReady<St> {
        UntilReady::new(self.store.clone(), self.policy.clone(), key.clone(), n)
    }
}

impl<C: Clock> KeyedLimiter<MemoryStore<C>> {
    /// [`check`](Self::check) without `await`: the memory store answers at
    /// once.
    pub fn check_now(&self, key: &Key) -> Decision {
        self.check_n_now(key, 1)
    }

    /// [`check_n`](Self::check_n) without `await`.
    pub fn check_n_now(&self, key: &Key, n: u32) -> Decision {
        self.store.check_now(&self.policy, key, n).merged()
    }

    /// [`peek`](Self::peek) without `await`.
    pub fn peek_now(&self, key: &Key) -> Decision {
        super::future::peeked(self.store.peek_now(&self.policy, key).merged())
    }
}
