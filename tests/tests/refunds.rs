//! Refunds through the `Store` trait: 64 tasks at once on one key, half of
//! them ending every admission in an outcome that does not count (given
//! back), half in one that counts; limit 10 counted outcomes: exactly what
//! each algorithm admits without refunds, in the memory store, through the
//! wrappers that pass refunds on, in Redis (a real server) and in the
//! local-first store in front of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tollgate::store::{BlockCache, Capability, Fallback, PolicyRefund, Timeout};
use tollgate::{Key, MemoryStore, NamedLimit, Policy, Store, StoreReply};
use tollgate_core::{Algorithm, Limiter, Quota, Refill, TokenBucket};
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
    let decision = match store.check(policy, &Key::GLOBAL, 1) {
        StoreReply::Ready(decision) => decision,
        StoreReply::Pending(future) => future.await,
    };
    let Ok(decision) = decision else {
        return false;
    };
    if !decision.merged().allowed() {
        return false;
    }
    if refunds {
        // The outcome arrives a moment later (a handler ran).
        tokio::task::yield_now().await;
        let refund = PolicyRefund::of(&decision, 1, asked.elapsed());
        // As the layer does: the next request waits for the refund to land.
        store.refund(policy, &Key::GLOBAL, refund).landed().await;
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
    let modes = [LocalMode::Exact, LocalMode::periodic()];
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
                // Exact mode: a refund is given back in Redis, and off the
                // count of units the instance holds when that count still
                // has it: exactly the limit.
                LocalMode::Exact => assert_eq!(counted, 10, "{algorithm}, exact"),
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
    let decision = match store.check(&policy, &Key::GLOBAL, 1) {
        StoreReply::Ready(decision) => decision,
        StoreReply::Pending(future) => future.await,
    }
    .unwrap();
    assert!(decision.merged().allowed());
    assert!(
        !request(&store, &policy, false, &seen).await,
        "the day's one is spent"
    );
    drop(store.refund(
        &policy,
        &Key::GLOBAL,
        PolicyRefund::of(&decision, 1, asked.elapsed()),
    ));
    // Given back within a moment, with nobody waiting for it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !request(&store, &policy, false, &seen).await {
        assert!(Instant::now() < deadline, "the dropped refund never landed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The limits the local-first store decides, 3 an hour each (nothing
/// refills during a test), named for the messages: GCRA, both token
/// buckets, the three window counters.
fn three_an_hour() -> Vec<(&'static str, Arc<Policy>)> {
    let quota = Quota::per_hour(3);
    let policy = |limit: NamedLimit| Arc::new(Policy::new(vec![limit]));
    let with = |algorithm| policy(NamedLimit::new("login", quota).with_algorithm(algorithm));
    let interval = Limiter::TokenBucket(TokenBucket::new(quota).with_refill(Refill::Interval));
    vec![
        ("gcra", with(Algorithm::Gcra)),
        ("token bucket", with(Algorithm::TokenBucket)),
        (
            "interval token bucket",
            policy(NamedLimit::new("login", quota).with_limiter(interval)),
        ),
        ("fixed window", with(Algorithm::FixedWindow)),
        ("sliding window", with(Algorithm::SlidingWindow)),
        (
            "sliding window buckets",
            with(Algorithm::SlidingWindowBuckets),
        ),
    ]
}

/// Windows of an hour end on the hour: a test that crosses one sees a
/// fresh window. Waits until at least a minute is left in this one.
async fn clear_of_the_hour() {
    let into = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 3_600;
    if into >= 3_600 - 60 {
        tokio::time::sleep(Duration::from_secs(3_600 - into + 1)).await;
    }
}

async fn decide<St: Store>(
    store: &St,
    policy: &Arc<Policy>,
    cost: u32,
) -> tollgate::PolicyDecision {
    match store.check(policy, &Key::GLOBAL, cost) {
        StoreReply::Ready(decision) => decision,
        StoreReply::Pending(future) => future.await,
    }
    .expect("decided")
}

/// `n` admissions of cost 1, each given back as the layer gives back a
/// response that does not count (a correct password under `charge_when`).
async fn admit_and_give_back<St: Store>(store: &St, policy: &Arc<Policy>, n: usize, label: &str) {
    for i in 0..n {
        let asked = Instant::now();
        let decision = decide(store, policy, 1).await;
        assert!(
            decision.merged().allowed(),
            "{label}: admission {i} refused"
        );
        let refund = PolicyRefund::of(&decision, 1, asked.elapsed());
        store.refund(policy, &Key::GLOBAL, refund).landed().await;
    }
}

/// How many of `n` requests of cost 1 pass, one after another.
async fn passes<St: Store>(store: &St, policy: &Arc<Policy>, n: usize) -> usize {
    let mut passed = 0;
    for _ in 0..n {
        if decide(store, policy, 1).await.merged().allowed() {
            passed += 1;
        }
    }
    passed
}

async fn exact_store(server: &RedisServer, prefix: &str) -> LocalFirst<RedisStore> {
    let redis = RedisStore::builder(server.url())
        .prefix(prefix)
        .connect()
        .await
        .unwrap();
    LocalFirst::builder(redis, LocalMode::Exact).build()
}

/// Issue 38, one instance: five logins that do not count (each charge
/// given back), a pause past the hold, then the whole limit of failures
/// passes and the next is refused. Given-back units are Redis's again, not
/// this instance's held units that lapse after the hold while Redis keeps
/// them charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_mode_refunds_leave_the_whole_limit_to_the_same_instance() {
    let mut failures = Vec::new();
    let server = RedisServer::start();
    clear_of_the_hour().await;
    for (name, policy) in three_an_hour() {
        let store = exact_store(&server, &format!("same-{name}")).await;
        admit_and_give_back(&store, &policy, 5, name).await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let passed = passes(&store, &policy, 3).await;
        let over = decide(&store, &policy, 1).await.merged().allowed();
        if (passed, over) != (3, false) {
            failures.push(format!(
                "{name}: {passed} of 3 passed, the 4th passed: {over}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Whether `b` admits the whole limit of 3 and refuses a 4th, and `a`
/// refuses one too: `None`, or what went wrong.
async fn b_takes_the_whole_limit(
    a: &LocalFirst<RedisStore>,
    b: &LocalFirst<RedisStore>,
    policy: &Arc<Policy>,
    name: &str,
) -> Option<String> {
    let passed = passes(b, policy, 3).await;
    let over_b = decide(b, policy, 1).await.merged().allowed();
    let over_a = decide(a, policy, 1).await.merged().allowed();
    ((passed, over_b, over_a) != (3, false, false)).then(|| {
        format!("{name}: {passed} of 3 passed on B, a 4th passed on B: {over_b}, on A: {over_a}")
    })
}

/// Issue 38, two instances on one Redis: five logins given back on A, then
/// B, at once, admits the whole limit and refuses the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_mode_refunds_on_one_instance_are_the_others_at_once() {
    let mut failures = Vec::new();
    let server = RedisServer::start();
    clear_of_the_hour().await;
    for (name, policy) in three_an_hour() {
        let prefix = format!("two-{name}");
        let (a, b) = (
            exact_store(&server, &prefix).await,
            exact_store(&server, &prefix).await,
        );
        admit_and_give_back(&a, &policy, 5, name).await;
        failures.extend(b_takes_the_whole_limit(&a, &b, &policy, name).await);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The interleaving behind the flaky test above, driven on a test clock:
/// A admits a unit, A's next reservation runs in Redis 100 ms later (for
/// a second request: after a grant no larger than the request that waited
/// for it, none starts ahead of need) and, reporting the unit spent,
/// charges it; only then does A's refund of it land (and of the second
/// request, whose count is live). The
/// refund names the reservation before, whose count of held units the
/// later one replaced: the unit must still come back whole, not less the
/// 100 ms between the admission and the reservation that charged it
/// (which left the bucket short of a unit for 100 ms: B admitted 2 of 3).
#[tokio::test]
async fn exact_mode_refund_after_the_next_reservation_gives_the_whole_unit_back() {
    let mut failures = Vec::new();
    let server = RedisServer::start();
    let quota = Quota::per_hour(3);
    for (name, algorithm) in [
        ("gcra", Algorithm::Gcra),
        ("token bucket", Algorithm::TokenBucket),
    ] {
        let policy = Arc::new(Policy::new(vec![
            NamedLimit::new("login", quota).with_algorithm(algorithm),
        ]));
        // Well inside an hour, on the test clock.
        let clock = tollgate_core::ManualClock::new(1_700_000_000 * 1_000_000_000 + 60_000_000_000);
        let prefix = format!("replaced-{name}");
        let store = || async {
            let redis = RedisStore::builder(server.url())
                .prefix(prefix.as_str())
                .test_clock(clock.clone())
                .connect()
                .await
                .unwrap();
            LocalFirst::builder(redis, LocalMode::Exact).build()
        };
        let (a, b) = (store().await, store().await);
        // A's only reservation so far, for this request.
        let decision = decide(&a, &policy, 1).await;
        assert!(decision.merged().allowed(), "{name}");
        clock.advance(Duration::from_millis(100));
        // The reply's strings, without RESP's headers.
        let strings = |reply: String| -> Vec<String> {
            reply
                .lines()
                .filter(|line| !line.starts_with(['*', '$']))
                .map(str::to_owned)
                .collect()
        };
        let recorded = || {
            let keys = strings(server.command(&["KEYS", &format!("{prefix}*~held")]));
            let values = keys
                .first()
                .map(|held| strings(server.command(&["HVALS", held])));
            // A count is "units expiry report": its report.
            values?.iter().find_map(|value| {
                let words: Vec<&str> = value.split(' ').collect();
                let numbers = words.iter().all(|w| w.parse::<u64>().is_ok());
                (words.len() == 3 && numbers).then(|| words[2].to_owned())
            })
        };
        assert_eq!(recorded().as_deref(), Some("1"), "{name}: not yet replaced");
        // A's second reservation, for a second request, replaced the count
        // of held units the first recorded.
        let second = decide(&a, &policy, 1).await;
        assert!(second.merged().allowed(), "{name}");
        assert_eq!(recorded().as_deref(), Some("2"), "{name}: replaced");
        let refund = PolicyRefund::of(&decision, 1, Duration::from_millis(100));
        a.refund(&policy, &Key::GLOBAL, refund).landed().await;
        let refund = PolicyRefund::of(&second, 1, Duration::ZERO);
        a.refund(&policy, &Key::GLOBAL, refund).landed().await;
        // A moment later, as on a real clock: a refusal to a reservation
        // sent at the very time a refund landed is not remembered (it may
        // predate the refund), so on a clock that stands still a refused
        // request would reserve again and again.
        clock.advance(Duration::from_millis(1));
        failures.extend(b_takes_the_whole_limit(&a, &b, &policy, name).await);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Issue 38, pay after: an estimate of 100 charged at admission, 50 given
/// back once the actual cost is known (`refund_part`, as the layer sends
/// it); the next decision of each round says what the Redis store's says
/// for the same sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_mode_settles_a_partial_refund_as_redis_does() {
    let mut failures = Vec::new();
    let server = RedisServer::start();
    clear_of_the_hour().await;
    let quota = Quota::per_hour(1_000);
    let interval = Limiter::TokenBucket(TokenBucket::new(quota).with_refill(Refill::Interval));
    for (name, limit) in [
        ("gcra", NamedLimit::new("tokens", quota)),
        (
            "token bucket",
            NamedLimit::new("tokens", quota).with_algorithm(Algorithm::TokenBucket),
        ),
        (
            "interval token bucket",
            NamedLimit::new("tokens", quota).with_limiter(interval),
        ),
        (
            "fixed window",
            NamedLimit::new("tokens", quota).with_algorithm(Algorithm::FixedWindow),
        ),
        (
            "sliding window",
            NamedLimit::new("tokens", quota).with_algorithm(Algorithm::SlidingWindow),
        ),
        (
            "sliding window buckets",
            NamedLimit::new("tokens", quota).with_algorithm(Algorithm::SlidingWindowBuckets),
        ),
    ] {
        let policy = Arc::new(Policy::new(vec![limit]));
        let redis = RedisStore::builder(server.url())
            .prefix(format!("settle-redis-{name}"))
            .connect()
            .await
            .unwrap();
        let local = exact_store(&server, &format!("settle-local-{name}")).await;
        let (mut plain, mut first) = (Vec::new(), Vec::new());
        for (store, seen) in [(&local as &dyn Settles, &mut first), (&redis, &mut plain)] {
            for _ in 0..6 {
                seen.push(store.round(&policy).await);
            }
        }
        if first != plain {
            failures.push(format!("{name}: local-first {first:?}, Redis {plain:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// One round of pay after: admit 100, give back 50, then peek at what the
/// next request (cost 1) is told remains.
trait Settles {
    fn round<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64> + Send + 'a>>;
}

impl<St: Store + Sync> Settles for St {
    fn round<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64> + Send + 'a>> {
        Box::pin(async move {
            let asked = Instant::now();
            let decision = decide(self, policy, 100).await;
            assert!(decision.merged().allowed());
            let refund = PolicyRefund::of(&decision, 50, asked.elapsed());
            self.refund(policy, &Key::GLOBAL, refund).landed().await;
            let next = decide(self, policy, 1).await;
            assert!(next.merged().allowed());
            next.merged().remaining()
        })
    }
}
