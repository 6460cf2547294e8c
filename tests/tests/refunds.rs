//! Refunds through the `Store` trait: 64 tasks at once on one key, half of
//! them ending every admission in an outcome that does not count (given
//! back), half in one that counts; limit 10 counted outcomes: exactly what
//! each algorithm admits without refunds, in the memory store, through the
//! wrappers that pass refunds on, in Redis (a real server) and in the
//! local-first store in front of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tollgate::store::{BlockCache, Capability, Fallback, Refund, Timeout};
use tollgate::{Key, MemoryStore, NamedLimit, Policy, Store, StoreReply};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::redis::RedisServer;

/// What the tasks saw.
#[derive(Default)]
struct Counted {
    /// Admissions whose outcome counts.
    counted: AtomicUsize,
    /// Admissions given back.
    refunded: AtomicUsize,
}

/// One request: checked, and if admitted, given back when `refunds`.
/// Returns whether it was admitted.
async fn request<St: Store>(
    store: &St,
    policy: &Arc<Policy>,
    refunds: bool,
    seen: &Counted,
) -> bool {
    let asked = Instant::now();
    let decision = match store.check(policy, &Key::Global, 1) {
        StoreReply::Ready(decision) => decision,
        StoreReply::Pending(future) => future.await,
    };
    let Ok(decision) = decision else {
        return false;
    };
    if !decision.merged.allowed() {
        return false;
    }
    if refunds {
        // The outcome arrives a moment later (a handler ran).
        tokio::task::yield_now().await;
        let refund = Refund::of(&decision, 1, asked.elapsed());
        // As the layer does: the next request waits for the refund to land.
        store.refund(policy, &Key::Global, refund).landed().await;
        seen.refunded.fetch_add(1, Ordering::Relaxed);
    } else {
        seen.counted.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// `tasks` tasks at once, each sending `requests` requests one after
/// another; task `i` gives its admissions back when `refunds(i)`.
async fn tasks<St: Store>(
    store: &St,
    policy: &Arc<Policy>,
    seen: &Arc<Counted>,
    (tasks, requests): (usize, usize),
    refunds: fn(usize) -> bool,
) {
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (store, policy, seen) = (store.clone(), policy.clone(), seen.clone());
            tokio::spawn(async move {
                for _ in 0..requests {
                    request(&store, &policy, refunds(task), &seen).await;
                    // A pause as between a client's requests: a store that
                    // remembers a refusal (the local-first store) is asked
                    // again once a refund landed, not a few µs later.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
}

/// First 32 tasks whose outcomes are all given back (20 requests each:
/// far more than 10 pass), then 64 tasks at once, odd ones giving back,
/// 100 requests each; what they saw.
/// How many of the first phase's outcomes must have been given back and
/// taken up again: far more than the limit where a refund is back at once
/// for every instance; more than the limit at all for the local-first
/// store, whose instance remembers Redis's refusal until a refund lands.
const REUSED: usize = 50;
const REUSED_LOCAL_FIRST: usize = 10;

async fn run<St: Store>(store: St, algorithm: Algorithm, reused: usize) -> Arc<Counted> {
    // A day: nothing refills during the test, so "admitted" is exact.
    let quota = Quota::per_day(10);
    let policy = Arc::new(Policy::new(vec![
        NamedLimit::new("api", quota).with_algorithm(algorithm),
    ]));
    let seen = Arc::new(Counted::default());
    tasks(&store, &policy, &seen, (32, 20), |_| true).await;
    // At most 10 at a time (a unit is back only when its outcome is), but
    // far more than 10 in all.
    let refunded = seen.refunded.load(Ordering::Relaxed);
    assert!(
        refunded > reused,
        "{algorithm}: outcomes given back used the limit up ({refunded} passed)"
    );
    tasks(&store, &policy, &seen, (64, 100), |task| task % 2 == 1).await;
    // Then a counted request every millisecond for a fifth of a second. A
    // GCRA-like schedule refunded for a request charged on a full bucket
    // keeps, for a moment, the time until the next charge came (the
    // refund cannot know when that was, and never gives back more than is
    // due): a unit held back so comes free within microseconds, or
    // milliseconds on a loaded machine.
    for _ in 0..200 {
        request(&store, &policy, false, &seen).await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    seen
}

/// What `algorithm` admits of the same load with no outcome given back:
/// its own count for a burst spread over a few microseconds (the leaky
/// bucket's is one more than its burst, as its docs say).
async fn admitted_without_refunds(algorithm: Algorithm) -> usize {
    let store = MemoryStore::new();
    let policy = Arc::new(Policy::new(vec![
        NamedLimit::new("api", Quota::per_day(10)).with_algorithm(algorithm),
    ]));
    let seen = Arc::new(Counted::default());
    tasks(&store, &policy, &seen, (32, 100), |_| false).await;
    seen.counted.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_limit_of_counted_outcomes_pass_for_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let limit = admitted_without_refunds(algorithm).await;
        let seen = run(MemoryStore::new(), algorithm, REUSED).await;
        let (counted, refunded) = (
            seen.counted.load(Ordering::Relaxed),
            seen.refunded.load(Ordering::Relaxed),
        );
        // Exactly what the algorithm admits without refunds: the memory
        // store says when it charged (`PolicyDecision::charged_at`), so a
        // refund gives back exactly that charge.
        assert_eq!(counted, limit, "{algorithm}: {refunded} refunded");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_wrappers_pass_refunds_on() {
    let store = BlockCache::new(Timeout::new(MemoryStore::new(), Duration::from_secs(1)));
    assert!(store.can(Capability::Refund).is_ok());
    let seen = run(store, Algorithm::FixedWindow, REUSED).await;
    assert_eq!(seen.counted.load(Ordering::Relaxed), 10);
    assert!(MemoryStore::new().can(Capability::Refund).is_ok());
    // A fallback gives back to whichever of its stores charged.
    let fallback = Fallback::new(MemoryStore::new(), MemoryStore::new());
    assert!(fallback.can(Capability::Refund).is_ok());
}

/// Every algorithm in Redis (`refund.lua`, sent from a spawned task: the
/// task awaits its landing, as the layer does).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_gives_back_exactly_what_was_refunded() {
    let server = RedisServer::start();
    for algorithm in Algorithm::ALL {
        let limit = admitted_without_refunds(algorithm).await;
        let store = RedisStore::builder(server.url())
            .prefix(format!("refunds-{algorithm}"))
            .connect()
            .await
            .unwrap();
        assert!(store.can(Capability::Refund).is_ok());
        let seen = run(store, algorithm, REUSED).await;
        let (counted, refunded) = (
            seen.counted.load(Ordering::Relaxed),
            seen.refunded.load(Ordering::Relaxed),
        );
        assert_eq!(counted, limit, "{algorithm}: {refunded} refunded");
    }
}

/// The same without the block cache (on by default, and then a refund also
/// forgets the refusal it remembered for the key: otherwise the test above
/// would be refused until tomorrow in its last phase).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_without_the_block_cache_gives_back_too() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .prefix("refunds-uncached")
        .block_cache(false)
        .connect()
        .await
        .unwrap();
    let seen = run(store, Algorithm::Gcra, REUSED).await;
    assert_eq!(seen.counted.load(Ordering::Relaxed), 10);
}

/// The local-first store, both modes, for the algorithms it decides: units
/// spent here and given back return to Redis for every instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_first_gives_back_through_redis() {
    let server = RedisServer::start();
    let modes = [LocalMode::Exact, LocalMode::PERIODIC];
    for (m, mode) in modes.into_iter().enumerate() {
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::TokenBucket,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::SlidingWindowBuckets,
        ] {
            let redis = RedisStore::builder(server.url())
                .prefix(format!("refunds-local-{m}-{algorithm}"))
                .connect()
                .await
                .unwrap();
            let store = LocalFirst::builder(redis, mode).build();
            assert!(store.can(Capability::Refund).is_ok());
            let seen = run(store, algorithm, REUSED_LOCAL_FIRST).await;
            let counted = seen.counted.load(Ordering::Relaxed);
            match mode {
                // Exact mode: never over the limit. A refund that races a
                // reservation reporting its unit spent is given back in
                // Redis, where the instance's report re-counts it (see
                // `LocalFirst::refund`): a little under.
                LocalMode::Exact => assert!(
                    (8..=10).contains(&counted),
                    "{algorithm}, exact: {counted} counted"
                ),
                // Periodic: refunds come off this instance's reports, so
                // one instance counts exactly the limit.
                _ => assert_eq!(counted, 10, "{algorithm}, periodic"),
            }
        }
    }
}

/// A refund's reply dropped unawaited: the refund still lands (it runs in
/// a task of its own), as `Store::refund` promises.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_redis_refund_reply_still_gives_back() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .prefix("refunds-dropped")
        .connect()
        .await
        .unwrap();
    let policy = Arc::new(Policy::new(vec![NamedLimit::new("api", Quota::per_day(1))]));
    let seen = Counted::default();
    let asked = Instant::now();
    let decision = match store.check(&policy, &Key::Global, 1) {
        StoreReply::Ready(decision) => decision,
        StoreReply::Pending(future) => future.await,
    }
    .unwrap();
    assert!(decision.merged.allowed());
    assert!(
        !request(&store, &policy, false, &seen).await,
        "the day's one is spent"
    );
    drop(store.refund(
        &policy,
        &Key::Global,
        Refund::of(&decision, 1, asked.elapsed()),
    ));
    // Given back within a moment, with nobody waiting for it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !request(&store, &policy, false, &seen).await {
        assert!(Instant::now() < deadline, "the dropped refund never landed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
