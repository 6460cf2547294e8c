//! The conformance kit against the Redis stores and the compositions over
//! them, on a real server and the server's clock (`Kit::real_time`: a day's
//! quotas, decisions by counts): the Redis store with its block cache and
//! without, the local-first store in both modes, and the wrappers and the
//! fallback a production setup stacks on them, Redis up and Redis killed;
//! and the racing kit: clients racing for shared keys through several
//! connections (instances) of the Redis store and of the local-first
//! store.

use std::time::Duration;
use tollgate::MemoryStore;
use tollgate::store::{
    BlockCache, BoxStore, Fallback, Penalty, PenaltyBox, Resilient, Store, Timeout,
};
use tollgate_conformance::{Kit, Race, RaceReport, Report};
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::redis::RedisServer;

/// Fewer traces than on a manual clock: each step is a round trip.
const TRACES: usize = 6;

async fn redis(server: &RedisServer, prefix: &str, block_cache: bool) -> RedisStore {
    RedisStore::builder(server.url())
        .prefix(prefix)
        .block_cache(block_cache)
        .connect()
        .await
        .unwrap()
}

/// Runs the kit on `store`, which must play `algorithms` algorithms and
/// leave nothing out.
async fn passes<St: Store>(kit: Kit<St>, algorithms: usize) -> Report {
    let name = tollgate::store::short_type_name::<St>();
    let report = kit
        .traces(TRACES)
        .run()
        .await
        .unwrap_or_else(|failure| panic!("{name}: {failure}"));
    assert_eq!(
        report.algorithms.len(),
        algorithms,
        "{:?}",
        report.algorithms
    );
    assert!(
        report
            .skipped
            .iter()
            .all(|s| ["reset", "carry"].contains(s)),
        "{:?}",
        report.skipped
    );
    report
}

/// Every algorithm the core has.
fn all() -> usize {
    tollgate_core::Algorithm::ALL.len()
}

/// The local-first store's: all but the sliding log and the leaky bucket.
fn local_first() -> usize {
    all() - 2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_conforms_with_and_without_its_block_cache() {
    let server = RedisServer::start();
    for block_cache in [true, false] {
        let store = redis(&server, &format!("kit-{block_cache}"), block_cache).await;
        passes(Kit::real_time(store), all()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_first_store_conforms_in_both_modes() {
    let server = RedisServer::start();
    for mode in [LocalMode::Exact, LocalMode::periodic()] {
        let store = LocalFirst::builder(redis(&server, "kit-local", true).await, mode).build();
        // Reservations (exact) and readings (periodic) may refuse, and show
        // as spent, units the memory store would still have: never more.
        passes(Kit::real_time(store).never_more(), local_first()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrappers_over_redis_conform() {
    let server = RedisServer::start();
    let store = redis(&server, "kit-wrapped", false).await;
    let timeout = Timeout::new(store.clone(), Duration::from_secs(2));
    passes(Kit::real_time(timeout), all()).await;
    // Late checks (which fail here) left out: a block cache answers a
    // failure on a key it knows at its limit by a refusal or a block of
    // its own (`BlockList::failed`), no figure of the store's; the store's
    // late checks are proved bare, above, and the block cache's answers
    // to failures in its unit tests and `examples/tests/server_overload.rs`.
    passes(
        Kit::real_time(BlockCache::new(store.clone())).no_late_checks(),
        all(),
    )
    .await;
    let penalty = Penalty::new(1_000, Duration::from_secs(60), Duration::from_secs(60));
    passes(
        Kit::real_time(PenaltyBox::new(store.clone(), penalty)),
        all(),
    )
    .await;
    // Every wrapper at once, as `Resilient` assembles them (the guide's
    // docs/guide/failures.md): Redis decides, through all of them. Late
    // checks left out as for the block cache and the fallback.
    let assembled = Resilient::over(store.clone())
        .timeout(Duration::from_secs(2))
        .breaker()
        .fallback(MemoryStore::new())
        .block_cache()
        .penalty_box(penalty)
        .build();
    passes(Kit::real_time(assembled).no_late_checks(), all()).await;
    let local = LocalFirst::builder(store, LocalMode::Exact).build();
    passes(
        Kit::real_time(BoxStore::new(local)).never_more(),
        local_first(),
    )
    .await;
}

/// The composition the guide recommends (docs/guide/failures.md), Redis up
/// (Redis decides) and Redis killed (the memory store decides, and is given
/// back to).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_to_memory_conforms_with_redis_up_and_killed() {
    let mut server = RedisServer::start();
    let store = redis(&server, "kit-fallback", true).await;
    // A timeout no busy machine reaches while Redis is up: a check that
    // timed out would be the memory store's, splitting the trace's counts.
    let up = Fallback::new(
        Timeout::new(store.clone(), Duration::from_secs(2)),
        MemoryStore::new(),
    );
    // A late check is the secondary's to decide (see `Kit::no_late_checks`).
    passes(Kit::real_time(up).no_late_checks(), all()).await;
    server.kill();
    // Every call waits out the timeout (no breaker yet): a short one, and
    // short traces.
    let down = Fallback::new(
        Timeout::new(store, Duration::from_millis(30)),
        MemoryStore::new(),
    );
    // Reset and a plan change fail while Redis is away (the primary's
    // failure is reported, the secondary's part done): reset checked in
    // `tests/admin.rs`, both left out here.
    passes(Kit::real_time(down).no_reset().no_carry().steps(20), all()).await;
}

/// `n` Redis stores, each its own connection, as `n` instances of an app.
async fn instances(server: &RedisServer, prefix: &str, n: usize) -> Vec<RedisStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        stores.push(redis(server, prefix, false).await);
    }
    stores
}

/// Runs `race`, which must play `algorithms` algorithms, each twice.
async fn races<St: Store>(race: Race<St>, algorithms: usize) -> RaceReport {
    let name = tollgate::store::short_type_name::<St>();
    let report = race
        .run()
        .await
        .unwrap_or_else(|failure| panic!("{name}: {failure}"));
    assert_eq!(report.algorithms.len(), algorithms, "{report:?}");
    assert_eq!(report.runs, 2 * algorithms, "{report:?}");
    assert!(report.kept > 0, "{report:?}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_races_through_several_connections() {
    let server = RedisServer::start();
    let stores = instances(&server, "race", 4).await;
    let mut next = 0;
    let race = Race::new(move || {
        next += 1;
        stores[next % stores.len()].clone()
    });
    let report = races(race, all()).await;
    // Every key filled up: the counts were checked exactly.
    assert!(report.refused > 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_first_store_races_in_both_modes() {
    let server = RedisServer::start();
    for mode in [LocalMode::Exact, LocalMode::periodic()] {
        let stores = instances(&server, "race-local", 4).await;
        let mut next = 0;
        let race = Race::new(move || {
            next += 1;
            LocalFirst::builder(stores[next % stores.len()].clone(), mode).build()
        });
        // Reservations and readings may refuse what the memory store would
        // admit: never more.
        races(race.never_more(), local_first()).await;
    }
}
