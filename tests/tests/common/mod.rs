//! Helpers shared by the Redis test files (`mod common;` in each). They
//! name `tollgate` types, so they cannot live in the `tollgate-tests`
//! library, which `tollgate`'s own tests depend on.

// Each test file uses some of these.
#![allow(dead_code)]

use std::sync::Arc;
use tollgate::{Key, Policy, PolicyDecision, Store, StoreReply};
use tollgate_core::{Decision, DecisionFields};

/// `store`'s decision for one request of `cost`, awaited if it is not
/// immediate; panics if the store fails (these tests need a working one).
pub async fn decide<S: Store>(
    store: &S,
    policy: &Arc<Policy>,
    key: &Key,
    cost: u32,
) -> PolicyDecision {
    match store.check(policy, key, cost) {
        StoreReply::Pending(future) => future.await.expect("the store answers"),
        StoreReply::Ready(result) => result.expect("the store answers"),
    }
}

/// A core decision at the scripts' resolution: times rounded up to whole
/// microseconds (the leaky bucket's "1 ns later" is "1 µs later" there).
pub fn in_micros(d: Decision) -> Decision {
    let up = |nanos: u64| {
        if nanos == Decision::NEVER_NANOS {
            nanos
        } else {
            nanos.div_ceil(1_000) * 1_000
        }
    };
    DecisionFields {
        reset_after_nanos: up(d.reset_after_nanos()),
        retry_after_nanos: up(d.retry_after_nanos()),
        wait_nanos: up(d.wait_nanos()),
        replenish_after_nanos: up(d.replenish_after_nanos()),
        ..d.fields()
    }
    .into()
}
