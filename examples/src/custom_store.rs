//! A store of a user's own, written as one would write a store over a
//! key-value table of their own: one map of each key's state, the
//! algorithms from `tollgate_core`, and the clock injected. It keeps counts,
//! so it implements [`Store`] (a store in front of another would implement
//! `StoreWrapper` instead); `tests/custom_store.rs` proves it with
//! `tollgate-conformance`, as a user would prove theirs. It names only
//! `tollgate-store` (the store contract) and `tollgate-core`, as a store
//! crate of one's own would: no http, no tower.
//!
//! `cargo run -p tollgate-examples --example custom_store` puts it under a
//! layer.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_core::{Clock, Decision, MonotonicClock, State, check_all};
use tollgate_store::{
    AdminFuture, Capability, Carried, ChangeReply, Key, MissingCapability, Policy, PolicyDebit,
    PolicyDecision, PolicyRefund, Store, StoreReply,
};

/// Each key's limit states under each policy (by its id).
type States = HashMap<(u64, Key), Vec<State>>;

/// Each key's state under each policy, in one map behind one lock: simple
/// rather than fast (the memory store shards its map and keeps one-word
/// states in atomics).
#[derive(Clone)]
pub struct HashMapStore<C = MonotonicClock> {
    states: Arc<Mutex<States>>,
    clock: C,
}

impl HashMapStore {
    /// An empty store on the monotonic clock.
    pub fn new() -> Self {
        HashMapStore::with_clock(MonotonicClock)
    }
}

impl Default for HashMapStore {
    fn default() -> Self {
        HashMapStore::new()
    }
}

impl<C: Clock + Clone> HashMapStore<C> {
    /// An empty store on `clock` (a `ManualClock` in tests).
    pub fn with_clock(clock: C) -> Self {
        HashMapStore {
            states: Arc::default(),
            clock,
        }
    }

    /// Runs `f` on the states of `key` under `policy` (created fresh if
    /// absent), under the lock.
    fn with_states<T>(&self, policy: &Policy, key: &Key, f: impl FnOnce(&mut [State]) -> T) -> T {
        let mut map = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        let states = map
            .entry((policy.id(), key.clone()))
            .or_insert_with(|| policy.limiters().iter().map(|l| l.new_state()).collect());
        f(states)
    }

    /// Decides a request of `cost`, all limits or none.
    fn decide(&self, policy: &Policy, key: &Key, cost: u32) -> PolicyDecision {
        let now = self.clock.now();
        self.with_states(policy, key, |states| {
            let mut limits: Vec<_> = policy.limiters().iter().zip(states.iter_mut()).collect();
            let mut each = vec![Decision::default(); limits.len()];
            let merged = check_all(&mut limits, now, cost, &mut each);
            // Said when charged, so that a refund gives back exactly this
            // charge.
            let verdict = PolicyDecision::new(each);
            if merged.allowed() && cost > 0 {
                verdict.charged(now)
            } else {
                verdict
            }
        })
    }
}

impl<C: Clock + Clone> Store for HashMapStore<C> {
    type Error = Infallible;
    type Future = std::future::Ready<Result<PolicyDecision, Infallible>>;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Infallible> {
        StoreReply::Ready(Ok(self.decide(policy, key, cost)))
    }

    /// It gives charges back and charges into debt: the core's algorithms
    /// do both.
    fn can(&self, _: Capability) -> Result<(), MissingCapability> {
        Ok(())
    }

    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        let now = self.clock.now();
        self.with_states(policy, key, |states| {
            for (i, (limiter, state)) in policy.limiters().iter().zip(states).enumerate() {
                limiter.refund(state, refund.for_limit(i, now), now);
            }
        });
        ChangeReply::Done
    }

    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: PolicyDebit) -> ChangeReply {
        let now = self.clock.now();
        self.with_states(policy, key, |states| {
            for (limiter, state) in policy.limiters().iter().zip(states) {
                limiter.debit(state, now, debit.cost);
            }
        });
        ChangeReply::Done
    }

    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        let mut map = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        map.remove(&(policy.id(), key.clone()));
        AdminFuture::ready(Ok(()))
    }

    /// A plan change, read as every store reads it
    /// ([`Carried`]): each limit of `to` charged
    /// what the limit of its name in `from` used; the limits that moved
    /// made fresh, the ones `to` lacks kept for when `from` returns.
    /// Overridden because this store names states by policy: the default
    /// moves usage limit by limit through `Policy::limit_alone`, right for
    /// a store that names states by limit (Redis), but here it would
    /// charge states no policy reads.
    fn carry(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> AdminFuture {
        let peek = self.decide(from, key, 0);
        let carried = Carried::read(from, &peek, to, 0);
        let now = self.clock.now();
        self.with_states(from, key, |states| {
            for ((limiter, state), kept) in from.limiters().iter().zip(states).zip(&carried.from) {
                if kept.is_none() {
                    *state = limiter.new_state();
                }
            }
        });
        self.with_states(to, key, |states| {
            for ((limiter, state), units) in to.limiters().iter().zip(states).zip(&carried.to) {
                if *units > 0 {
                    limiter.debit(state, now, *units);
                }
            }
        });
        AdminFuture::ready(Ok(()))
    }

    // `peek`: the default, a check of cost 0, which charges nothing.
    // `unblock`: the default; this store remembers no refusal.
}
