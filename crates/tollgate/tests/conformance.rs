//! The conformance kit against every store and wrapper of this crate, on
//! a manual clock: the memory store, a memory store answering later,
//! `Timeout`, `BlockCache`, `PenaltyBox`, `Breaker`, `BoxStore`, and `Fallback`s
//! whose primary is up or down (see `tests/tests/redis_kit.rs` for the
//! Redis stores and the compositions over them).

mod common;

use common::{Later, Outage};
use std::time::Duration;
use tollgate::MemoryStore;
use tollgate::store::{
    BlockCache, BoxStore, Breaker, Fallback, Penalty, PenaltyBox, Store, Timeout,
};
use tollgate_conformance::{Kit, Report};
use tollgate_core::{Algorithm, ManualClock};

/// A clock for one run, and a memory store on it.
fn memory() -> (ManualClock, MemoryStore<ManualClock>) {
    let clock = ManualClock::new(1_000_000_000);
    (clock.clone(), MemoryStore::builder().clock(clock).build())
}

/// Runs the kit on `store` (whose clock is `clock`) and checks that it
/// played every algorithm and left nothing out.
async fn passes<St: Store>(store: St, clock: ManualClock) -> Report {
    let report = Kit::manual(store, clock).run().await.unwrap();
    assert_eq!(report.algorithms, Algorithm::ALL.to_vec());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    report
}

#[tokio::test]
async fn the_memory_store_conforms() {
    let (clock, store) = memory();
    let report = passes(store, clock).await;
    // 20 traces of 40 steps for each algorithm.
    assert_eq!(report.traces, 20 * Algorithm::ALL.len());
    assert_eq!(report.steps, 40 * report.traces);
}

#[tokio::test]
async fn a_memory_store_answering_later_conforms() {
    let (clock, store) = memory();
    passes(Later(store), clock).await;
}

#[tokio::test]
async fn timeout_conforms() {
    let (clock, store) = memory();
    passes(Timeout::new(store, Duration::from_secs(1)), clock).await;
}

#[tokio::test]
async fn block_cache_conforms() {
    let (clock, store) = memory();
    passes(BlockCache::new(store).clock(clock.clone()), clock).await;
}

#[tokio::test]
async fn block_cache_over_a_store_answering_later_conforms() {
    let (clock, store) = memory();
    passes(BlockCache::new(Later(store)).clock(clock.clone()), clock).await;
}

/// A penalty box whose penalty the traces never reach (a thousand
/// refusals in a minute): the store behind decides, and every operation
/// passes through.
#[tokio::test]
async fn penalty_box_conforms() {
    let (clock, store) = memory();
    let penalty = Penalty::new(1_000, Duration::from_secs(60), Duration::from_secs(60));
    passes(PenaltyBox::new(store, penalty).clock(clock.clone()), clock).await;
}

/// A closed breaker (its store answers): every operation passes through.
#[tokio::test]
async fn breaker_conforms() {
    let (clock, store) = memory();
    passes(Breaker::new(store).clock(clock.clone()), clock).await;
}

#[tokio::test]
async fn box_store_conforms() {
    let (clock, store) = memory();
    passes(BoxStore::new(store), clock).await;
}

#[tokio::test]
async fn a_fallback_whose_primary_answers_conforms() {
    let (clock, store) = memory();
    passes(Fallback::new(store, MemoryStore::new()), clock).await;
}

/// The primary down: the secondary decides, and is given back to.
#[tokio::test]
async fn a_fallback_whose_primary_is_down_conforms() {
    let (clock, store) = memory();
    let down = Outage::default();
    down.set_down(true);
    passes(Fallback::new(down, store), clock).await;
}

/// The kit fails a store that parts from the memory store: a wrapper that
/// drops every refund (claiming it can give back) is caught.
#[tokio::test]
async fn the_kit_catches_a_store_that_loses_refunds() {
    #[derive(Clone)]
    struct LosesRefunds(MemoryStore<ManualClock>);
    impl tollgate::store::StoreWrapper for LosesRefunds {
        type Inner = MemoryStore<ManualClock>;
        type Error = std::convert::Infallible;
        type Future = <MemoryStore<ManualClock> as Store>::Future;
        fn inner(&self) -> &Self::Inner {
            &self.0
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
            reply
        }
        fn check_within(
            &self,
            policy: &std::sync::Arc<tollgate::Policy>,
            key: &tollgate::Key,
            cost: u32,
            within: Duration,
        ) -> tollgate::StoreReply<Self::Future, Self::Error> {
            self.0.check_within(policy, key, cost, within)
        }
        fn refund(
            &self,
            _: &std::sync::Arc<tollgate::Policy>,
            _: &tollgate::Key,
            _: tollgate::store::PolicyRefund,
        ) -> tollgate::store::ChangeReply {
            tollgate::store::ChangeReply::Done
        }
    }
    let (clock, store) = memory();
    let failure = Kit::manual(LosesRefunds(store), clock)
        .run()
        .await
        .expect_err("refunds are lost");
    assert!(failure.to_string().contains("seed"), "{failure}");
}

// The racing kit: clients on tokio tasks racing for shared keys through
// several instances, callers that stop waiting, and (over a
// compare-and-swap backend) injected faults.

use tollgate_conformance::{Race, RaceReport};

/// Asserts a race played every algorithm and the kinds of call it can.
fn raced(report: &RaceReport, skipped: &[&str]) {
    assert_eq!(report.algorithms, Algorithm::ALL.to_vec());
    assert_eq!(report.runs, 2 * Algorithm::ALL.len());
    assert_eq!(report.skipped, skipped, "{report:?}");
    // Keys filled up and refused: the exact count was checked.
    assert!(report.kept > 0 && report.refused > 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_memory_store_races() {
    let store = MemoryStore::new();
    let report = Race::new(move || store.clone()).run().await.unwrap();
    raced(&report, &["dropped give-ups"]);
}

/// The memory store behind the wrappers, each instance a wrapper of its
/// own over one store; answering later (a future), so that callers can
/// give up and be heard out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrappers_over_the_memory_store_race() {
    let store = MemoryStore::new();
    let skipped = ["dropped give-ups"];
    let shared = store.clone();
    let report = Race::new(move || Timeout::new(Later(shared.clone()), Duration::from_secs(5)))
        .run()
        .await
        .unwrap();
    raced(&report, &skipped);
    let shared = store.clone();
    let report = Race::new(move || BlockCache::new(Later(shared.clone())))
        .run()
        .await
        .unwrap();
    raced(&report, &skipped);
    let shared = store.clone();
    let penalty = Penalty::new(1_000, Duration::from_secs(60), Duration::from_secs(60));
    let report = Race::new(move || PenaltyBox::new(Later(shared.clone()), penalty))
        .run()
        .await
        .unwrap();
    raced(&report, &skipped);
    let shared = store.clone();
    let report = Race::new(move || Breaker::new(Later(shared.clone())))
        .run()
        .await
        .unwrap();
    raced(&report, &skipped);
    let report = Race::new(move || BoxStore::new(Later(store.clone())))
        .run()
        .await
        .unwrap();
    raced(&report, &skipped);
}

mod cas {
    use super::*;
    use std::future::{Ready, ready};
    use tollgate_cas::{CasBackend, CasStore, MemoryBackend, Snapshot, Swap};
    use tollgate_conformance::Faults;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_cas_store_races_through_faults() {
        // Restarts ten times in a thousand calls: some in every race.
        let faults = Faults::new(MemoryBackend::new()).restarts(10, Duration::from_millis(5));
        let report = Race::cas_with(faults).run().await.unwrap();
        raced(&report, &[]);
        assert!(report.given_up > 0, "{report:?}");
        assert!(report.refused_by_restarts > 0, "{report:?}");
    }

    /// Wrappers over compare-and-swap stores over one backend behind
    /// faults, as a user races a composition of their own with
    /// `Race::new`: latency and jitter only (a restart's error would fail
    /// a caller that waits, and a write held until the `Timeout`'s
    /// deadline of seconds would only make the run slow).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn wrappers_over_cas_stores_race() {
        let faults = Faults::new(MemoryBackend::new())
            .restarts(0, Duration::ZERO)
            .held_writes(0)
            .late_replies(0);
        let over = faults.clone();
        let report =
            Race::new(move || Timeout::new(CasStore::new(over.clone()), Duration::from_secs(5)))
                .run()
                .await
                .unwrap();
        raced(&report, &["dropped give-ups"]);
        let over = faults.clone();
        let report = Race::new(move || BlockCache::new(CasStore::new(over.clone())))
            .run()
            .await
            .unwrap();
        raced(&report, &["dropped give-ups"]);
        let report = Race::new(move || BoxStore::new(CasStore::new(faults.clone())))
            .run()
            .await
            .unwrap();
        raced(&report, &["dropped give-ups"]);
    }

    /// Three backends a user might write, each with one bug, over the
    /// memory backend.
    #[derive(Clone, Copy, Debug)]
    enum Bug {
        /// Writes past `Swap::deadline`.
        IgnoresDeadline,
        /// Writes whatever version the key holds.
        IgnoresVersion,
        /// Reads return values past their expiry (which writes, as the
        /// memory backend does, treat as absent).
        ServesExpired,
    }

    #[derive(Clone)]
    struct Buggy(MemoryBackend, Bug);

    impl CasBackend for Buggy {
        type Error = std::convert::Infallible;
        type Read = Ready<Result<Snapshot, Self::Error>>;
        type Write = Ready<Result<bool, Self::Error>>;

        fn read(&self, key: &str) -> Self::Read {
            let Ok(snapshot) = self.0.read(key).into_inner();
            match self.1 {
                Bug::ServesExpired => ready(Ok(Snapshot::new(snapshot.now, self.0.get(key)))),
                _ => ready(Ok(snapshot)),
            }
        }

        fn write(&self, key: &str, swap: Swap) -> Self::Write {
            let mut swap = swap;
            match self.1 {
                Bug::IgnoresDeadline => swap.deadline = None,
                Bug::IgnoresVersion => {
                    let Ok(now) = self.0.read(key).into_inner();
                    swap.expected = now.value.map(|value| value.version);
                }
                Bug::ServesExpired => {}
            }
            self.0.write(key, swap)
        }
    }

    /// Races `bug`'s backend: the failure's message. Callers wait up to
    /// 50 ms before they give up, so that on a loaded machine too their
    /// writes are sent before their deadlines; half the writes with a
    /// deadline are held past it, over six keys, so that some are not
    /// overtaken by another writer while held (a write over a stale
    /// version is not made, deadline or not).
    async fn caught(bug: Bug) -> String {
        let faults = Faults::new(Buggy(MemoryBackend::new(), bug)).held_writes(50);
        let failure = Race::cas_with(faults)
            .give_up_after(Duration::from_millis(50))
            .keys(6)
            .run()
            .await
            .expect_err("the bug is caught");
        let message = failure.to_string();
        assert!(message.contains("seed"), "{message}");
        assert!(
            message.contains("shortest failing trace found"),
            "{message}"
        );
        message
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_backend_that_ignores_the_deadline_is_caught() {
        let message = caught(Bug::IgnoresDeadline).await;
        eprintln!("{message}");
        assert!(message.contains("ignores `Swap::deadline`"), "{message}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_backend_that_ignores_the_version_is_caught() {
        let message = caught(Bug::IgnoresVersion).await;
        eprintln!("{message}");
        assert!(message.contains("writes over a newer version"), "{message}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_backend_that_serves_expired_values_is_caught() {
        let message = caught(Bug::ServesExpired).await;
        eprintln!("{message}");
        assert!(message.contains("read and write disagree"), "{message}");
        assert!(!message.contains("lost the race"), "{message}");
        // Any call shows it: shrunk to one.
        let shortest =
            "shortest failing trace found: 1 instance(s), 1 client(s) of 1 call(s), 1 key(s)";
        assert!(message.contains(shortest), "{message}");
    }
}
