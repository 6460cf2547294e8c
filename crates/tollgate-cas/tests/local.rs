//! The local-first store (`tollgate_local::LocalFirst`) in front of the
//! compare-and-swap store, over the in-memory backend: the conformance kit
//! in both modes (never more than the memory store admits), and instances
//! racing for shared keys, each its own local-first store over one
//! backend.

use tollgate_cas::{CasStore, MemoryBackend};
use tollgate_conformance::{Kit, Race};
use tollgate_core::Algorithm;
use tollgate_local::{LocalFirst, LocalMode};

/// The algorithms the local-first store decides: all but the sliding log
/// and the leaky bucket.
fn local_first() -> usize {
    Algorithm::ALL.iter().filter(|a| a.local_first()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_first_store_over_cas_conforms_in_both_modes() {
    for mode in [LocalMode::Exact, LocalMode::PERIODIC] {
        let store = LocalFirst::builder(CasStore::new(MemoryBackend::new()), mode).build();
        // Reservations (exact) and readings (periodic) may refuse, and show
        // as spent, units the memory store would still have: never more.
        let report = Kit::real_time(store)
            .never_more()
            .traces(6)
            .run()
            .await
            .unwrap_or_else(|failure| panic!("{mode:?}: {failure}"));
        assert_eq!(report.algorithms.len(), local_first(), "{report:?}");
        assert!(
            report
                .skipped
                .iter()
                .all(|s| ["reset", "carry"].contains(s)),
            "{:?}",
            report.skipped
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_first_instances_over_one_cas_backend_race_in_both_modes() {
    for mode in [LocalMode::Exact, LocalMode::PERIODIC] {
        let backend = MemoryBackend::new();
        // Each instance its own local-first store (its own held units,
        // reports and shares) over the one backend.
        let race =
            Race::new(move || LocalFirst::builder(CasStore::new(backend.clone()), mode).build());
        let report = race
            .never_more()
            .run()
            .await
            .unwrap_or_else(|failure| panic!("{mode:?}: {failure}"));
        assert_eq!(report.algorithms.len(), local_first(), "{report:?}");
        assert!(report.kept > 0, "{report:?}");
    }
}
