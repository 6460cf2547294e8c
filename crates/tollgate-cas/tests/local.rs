//! The local-first store (`tollgate_local::LocalFirst`) in front of the
//! compare-and-swap store, over the in-memory backend: the conformance kit
//! in both modes (never more than the memory store admits), bare and
//! under the wrappers a production stack puts around it (a timeout, a
//! breaker, the block cache, the penalty box, a fallback to the memory
//! store with the backend up and down), and instances racing for shared
//! keys, each its own local-first store over one backend.

use std::time::Duration;
use tollgate::MemoryStore;
use tollgate::store::{BlockCache, Breaker, Fallback, Penalty, PenaltyBox, Store, Timeout};
use tollgate_cas::{CasBackend, CasStore, MemoryBackend};
use tollgate_conformance::{Faults, Kit, Race};
use tollgate_core::Algorithm;
use tollgate_local::{LocalFirst, LocalMode};

/// The algorithms the local-first store decides: all but the sliding log
/// and the leaky bucket.
fn local_first() -> usize {
    Algorithm::ALL.iter().filter(|a| a.local_first()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_first_store_over_cas_conforms_in_both_modes() {
    for mode in [LocalMode::Exact, LocalMode::periodic()] {
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

/// Runs the kit on `store` in `never_more` mode (late checks left out
/// where `late` is false): every local-first algorithm played.
async fn conforms<St: Store>(store: St, late: bool) {
    let name = tollgate::store::short_type_name::<St>();
    let kit = Kit::real_time(store).never_more().traces(6);
    let kit = if late { kit } else { kit.no_late_checks() };
    let report = kit
        .run()
        .await
        .unwrap_or_else(|failure| panic!("{name}: {failure}"));
    assert_eq!(report.algorithms.len(), local_first(), "{name}: {report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrappers_around_local_first_over_cas_conform() {
    for mode in [LocalMode::Exact, LocalMode::periodic()] {
        let local = || LocalFirst::builder(CasStore::new(MemoryBackend::new()), mode).build();
        conforms(
            Breaker::new(Timeout::new(local(), Duration::from_secs(2))),
            true,
        )
        .await;
        // Late checks left out, as over Redis (`tests/tests/redis_kit.rs`):
        // the block cache answers a failure on a key it knows at its
        // limit with a block of its own, no figure of the store's.
        conforms(BlockCache::new(local()), false).await;
        let penalty = Penalty::new(1_000, Duration::from_secs(60), Duration::from_secs(60));
        conforms(PenaltyBox::new(local(), penalty), true).await;
    }
}

/// The fallback of docs/guide/failures.md with local-first over the
/// compare-and-swap store as its primary. Backend up: local-first decides
/// (never more than the memory store would). Backend down from the start:
/// every call of the primary fails, the memory store decides, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_whose_primary_is_local_first_over_cas_conforms_up_and_down() {
    for mode in [LocalMode::Exact, LocalMode::periodic()] {
        // A timeout no busy machine reaches while the backend is up: a
        // check that timed out would be the memory store's. A late check is
        // the secondary's to decide (`Kit::no_late_checks`).
        let up = fallback_to_memory(MemoryBackend::new(), mode, Duration::from_secs(2));
        conforms(up, false).await;

        let backend = Faults::new(MemoryBackend::new());
        backend.restart(Duration::from_secs(3_600));
        let down = fallback_to_memory(backend.clone(), mode, Duration::from_millis(30));
        // Reset and a plan change fail while the backend is away (the
        // primary's failure reported, the secondary's part done): left out,
        // as over Redis.
        let report = Kit::real_time(down)
            .no_reset()
            .no_carry()
            .steps(20)
            .run()
            .await
            .unwrap_or_else(|failure| panic!("{mode:?}, down: {failure}"));
        assert_eq!(report.algorithms.len(), local_first(), "{report:?}");
        // The memory store decided all of it: nothing reached the backend.
        assert!(
            backend.inner().is_empty(),
            "{mode:?}: {:?}",
            backend.inner().keys()
        );
    }
}

/// `Fallback<Timeout<LocalFirst<CasStore>>, MemoryStore>` over `backend`.
fn fallback_to_memory<B: CasBackend + Clone + std::fmt::Debug>(
    backend: B,
    mode: LocalMode,
    timeout: Duration,
) -> Fallback<Timeout<LocalFirst<CasStore<B>>>, MemoryStore> {
    let local = LocalFirst::builder(CasStore::new(backend), mode).build();
    Fallback::new(Timeout::new(local, timeout), MemoryStore::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_first_instances_over_one_cas_backend_race_in_both_modes() {
    for mode in [LocalMode::Exact, LocalMode::periodic()] {
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
