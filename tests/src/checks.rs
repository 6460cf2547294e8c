//! A check of a store, awaited, for tests that only ask whether it passed.

use std::sync::Arc;
use tollgate::{Key, Policy, Store};

/// Whether `store` admits a request of `cost` for `key` under `policy`,
/// awaiting its answer. A store error fails the test, naming the error.
pub async fn admits<St: Store>(store: &St, policy: &Arc<Policy>, key: &Key, cost: u32) -> bool {
    match store.check(policy, key, cost).resolve().await {
        Ok(decision) => decision.merged().allowed(),
        Err(error) => panic!("the store failed a check: {error}"),
    }
}
