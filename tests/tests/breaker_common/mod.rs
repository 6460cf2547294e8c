//! A store that fails while it is down: fault injection for the circuit
//! breaker's tests (`breaker.rs`, `breaker_logs.rs`).

#![allow(dead_code)] // each test binary uses part of it

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tollgate::store::StoreWrapper;
use tollgate::{Key, MemoryStore, Policy, PolicyDecision, StoreReply};

/// A memory store that fails every call while it is down, and counts the
/// calls that reach it.
#[derive(Clone, Default)]
pub struct Flaky {
    /// The store behind.
    pub store: MemoryStore,
    /// Whether it is down.
    pub down: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
}

#[derive(Debug)]
pub struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the store is down")
    }
}

impl std::error::Error for Down {}

impl Flaky {
    /// Down (every call fails) or up.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    /// The calls that reached it.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

impl StoreWrapper for Flaky {
    type Inner = MemoryStore;
    type Error = Down;
    type Future = std::future::Ready<Result<PolicyDecision, Down>>;

    fn inner(&self) -> &MemoryStore {
        &self.store
    }

    fn relay(
        &self,
        _: &std::sync::Arc<tollgate::Policy>,
        _: &tollgate::Key,
        reply: tollgate::store::StoreReply<
            <Self::Inner as tollgate::Store>::Future,
            <Self::Inner as tollgate::Store>::Error,
        >,
    ) -> tollgate::store::StoreReply<Self::Future, Self::Error> {
        reply.map(
            |ready| std::future::ready(ready.into_inner().map_err(|never| match never {})),
            |never| match never {},
        )
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        _: Duration,
    ) -> StoreReply<Self::Future, Down> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.down.load(Ordering::Relaxed) {
            return StoreReply::Ready(Err(Down));
        }
        StoreReply::Ready(Ok(self.store.check_now(policy, key, cost)))
    }
}
