//! The store of a user's own (`tollgate_examples::custom_store`) proved by
//! the conformance kit, as a user would prove theirs: every algorithm,
//! random traces of checks, refunds, debits, peeks and late checks decided
//! as the memory store decides them, the header promises kept, and reset.

use tollgate_conformance::Kit;
use tollgate_core::ManualClock;
use tollgate_examples::custom_store::HashMapStore;

#[tokio::test]
async fn a_store_of_your_own_passes_the_conformance_kit() {
    let clock = ManualClock::new(1_000_000_000);
    let store = HashMapStore::with_clock(clock.clone());
    let report = Kit::manual(store, clock).run().await.unwrap();
    assert_eq!(report.algorithms.len(), tollgate_core::Algorithm::ALL.len());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
}
