//! The local-first store: four app instances (four layers, each with its
//! own Redis connection) share one limit through one Redis or a 3-master
//! Cluster, 16 concurrent clients each. Exact mode admits exactly the limit
//! however the load is split; periodic mode stays within its documented
//! bound; Redis is reached once per many decisions; a refused key costs
//! Redis almost nothing; a Redis restart is survived.

use http::{Request, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tollgate::{GlobalKey, OnStoreError, RateLimitLayer};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::app::{App, behind, status};
use tollgate_tests::redis::{RedisCluster, RedisServer};

/// The algorithms both modes support.
const SUPPORTED: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingWindowBuckets,
];

/// 1,000 a day: nothing refills during a test, so "admitted" is exact.
fn limit() -> Quota {
    "1000/day".parse().unwrap()
}

async fn local_store(url: &str, prefix: &str, mode: LocalMode) -> LocalFirst<RedisStore> {
    let redis = RedisStore::builder(url)
        .prefix(prefix)
        .connect()
        .await
        .unwrap();
    LocalFirst::builder(redis, mode).build()
}

/// An app instance limiting on `store`; store errors answer 503, so a
/// failure never passes for an admission.
fn instance(algorithm: Algorithm, quota: Quota, store: LocalFirst<RedisStore>) -> App {
    let layer = RateLimitLayer::builder()
        .quota("api", quota)
        .algorithm(algorithm)
        .key(GlobalKey)
        .store(store)
        .store_timeout(Duration::from_secs(5))
        .on_store_error(OnStoreError::Closed)
        .try_build()
        .unwrap();
    behind(layer)
}

/// What clients saw.
#[derive(Default)]
struct Seen {
    admitted: AtomicUsize,
    limited: AtomicUsize,
    failed: AtomicUsize,
}

/// `clients` clients on `app`, each sending until it has seen 5 refusals
/// in a row (or 3,000 requests), `pause` apart.
async fn clients(app: &App, clients: usize, pause: Duration, seen: &Arc<Seen>) {
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let mut app = app.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut refusals = 0;
                for _ in 0..3_000 {
                    match status(&mut app, Request::new(())).await {
                        StatusCode::OK => {
                            refusals = 0;
                            seen.admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        StatusCode::TOO_MANY_REQUESTS => {
                            refusals += 1;
                            seen.limited.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            refusals += 1;
                            seen.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if refusals >= 5 {
                        return;
                    }
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// How the load is spread over the four instances.
#[derive(Clone, Copy, Debug)]
enum Split {
    /// 16 clients each, all at once.
    Even,
    /// 16 clients on the first, one slow client on each other.
    Hot,
    /// 16 clients on the first three; the fourth starts once 600 passed.
    Late,
}

/// Runs `split` over `apps`; returns what clients saw.
async fn run(apps: &[App], split: Split) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    match split {
        Split::Even => {
            let runs = apps
                .iter()
                .map(|app| clients(app, 16, Duration::ZERO, &seen));
            futures_join_all(runs).await;
        }
        Split::Hot => {
            let hot = clients(&apps[0], 16, Duration::ZERO, &seen);
            let cold = apps[1..]
                .iter()
                .map(|app| clients(app, 1, Duration::from_millis(2), &seen));
            tokio::join!(hot, futures_join_all(cold));
        }
        Split::Late => {
            let early = apps[..3]
                .iter()
                .map(|app| clients(app, 16, Duration::from_millis(1), &seen));
            let late = async {
                while seen.admitted.load(Ordering::Relaxed) < 600 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                clients(&apps[3], 16, Duration::ZERO, &seen).await;
            };
            tokio::join!(futures_join_all(early), late);
        }
    }
    seen
}

async fn futures_join_all<F: Future<Output = ()>>(runs: impl Iterator<Item = F>) {
    let handles: Vec<_> = runs.collect();
    for run in handles {
        run.await;
    }
}

/// Four instances on `url`, each with its own connection, in `mode`.
async fn apps(url: &str, prefix: &str, algorithm: Algorithm, mode: LocalMode) -> Vec<App> {
    let mut apps = Vec::new();
    for _ in 0..4 {
        let store = local_store(url, prefix, mode).await;
        apps.push(instance(algorithm, limit(), store));
    }
    apps
}

async fn exact_admits_the_limit(url: &str, name: &str) {
    for algorithm in SUPPORTED {
        for split in [Split::Even, Split::Hot, Split::Late] {
            let prefix = format!("{name}-{algorithm}-{split:?}");
            let apps = apps(url, &prefix, algorithm, LocalMode::Exact).await;
            let seen = run(&apps, split).await;
            let admitted = seen.admitted.load(Ordering::Relaxed);
            println!(
                "{name} exact {algorithm} {split:?}: admitted {admitted}, limited {}, failed {}",
                seen.limited.load(Ordering::Relaxed),
                seen.failed.load(Ordering::Relaxed)
            );
            assert_eq!(admitted, 1000, "{name} {algorithm} {split:?}");
            assert_eq!(seen.failed.load(Ordering::Relaxed), 0);
        }
    }
}

// Fixed windows of a day end at midnight UTC: a run that crosses one would
// see a fresh window. The tests take well under a minute.
fn clear_of_midnight() -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    now % 86_400 < 86_400 - 120
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_mode_admits_exactly_the_limit_on_one_server() {
    if !clear_of_midnight() {
        return;
    }
    let server = RedisServer::start();
    exact_admits_the_limit(&server.url(), "one").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_mode_admits_exactly_the_limit_on_a_cluster() {
    if !clear_of_midnight() {
        return;
    }
    let cluster = RedisCluster::start(3);
    exact_admits_the_limit(&cluster.url(), "cluster").await;
}

/// Periodic mode's documented bound: each instance admits its share of
/// what remains, less what the others' shares may still spend, so the four
/// together pass the limit by rounding at most (a unit per instance), how
/// ever the load is spread; and they leave little of it unspent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn periodic_mode_stays_within_its_bound() {
    if !clear_of_midnight() {
        return;
    }
    let server = RedisServer::start();
    let mode = LocalMode::Periodic {
        sync_interval: Duration::from_millis(50),
    };
    for split in [Split::Even, Split::Hot, Split::Late] {
        for algorithm in SUPPORTED {
            let apps = apps(
                &server.url(),
                &format!("periodic-{algorithm}-{split:?}"),
                algorithm,
                mode,
            )
            .await;
            let seen = run(&apps, split).await;
            let admitted = seen.admitted.load(Ordering::Relaxed);
            println!("periodic {algorithm} {split:?}: admitted {admitted} of 1000");
            assert!(admitted >= 950, "{algorithm} {split:?}: {admitted}");
            assert!(admitted <= 1000 + 4, "{algorithm} {split:?}: {admitted}");
            assert_eq!(seen.failed.load(Ordering::Relaxed), 0);
        }
    }
}

/// `INFO commandstats`' count of script calls (EVALSHA and EVAL).

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn below_the_limit_exact_mode_calls_redis_once_per_twenty_decisions_or_fewer() {
    let server = RedisServer::start();
    // 64 clients, each one request every 200 ms: 320 a second, about half
    // of 40,000 a minute (667 a second).
    let quota: Quota = "40000/min".parse().unwrap();
    let mut apps = Vec::new();
    let mut stores = Vec::new();
    for _ in 0..4 {
        let store = local_store(&server.url(), "steady", LocalMode::Exact).await;
        stores.push(store.clone());
        apps.push(instance(Algorithm::Gcra, quota, store));
    }
    let before = server.script_calls();
    let decisions = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let mut app = apps[i % 4].clone();
            let decisions = decisions.clone();
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(Duration::from_millis(200));
                for _ in 0..20 {
                    ticks.tick().await;
                    assert_eq!(status(&mut app, Request::new(())).await, StatusCode::OK);
                    decisions.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let calls = server.script_calls() - before;
    let decisions = decisions.load(Ordering::Relaxed) as u64;
    println!("steady: {decisions} decisions, {calls} Redis calls");
    assert!(calls * 20 <= decisions, "{calls} calls for {decisions}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_on_a_refused_key_makes_a_handful_of_redis_calls() {
    let server = RedisServer::start();
    let quota: Quota = "10/min".parse().unwrap();
    let mut apps = Vec::new();
    for _ in 0..4 {
        let store = local_store(&server.url(), "flood", LocalMode::Exact).await;
        apps.push(instance(Algorithm::Gcra, quota, store));
    }
    // Spend the limit.
    let seen = run(&apps, Split::Even).await;
    assert_eq!(seen.admitted.load(Ordering::Relaxed), 10);
    let before = server.script_calls();
    let mut limited = 0;
    for i in 0..10_000 {
        let mut app = apps[i % 4].clone();
        if status(&mut app, Request::new(())).await == StatusCode::TOO_MANY_REQUESTS {
            limited += 1;
        }
    }
    let calls = server.script_calls() - before;
    println!("flood: 10,000 requests, {limited} limited, {calls} Redis calls");
    assert_eq!(limited, 10_000);
    // A retry period here is 6 s, longer than the flood: a handful each.
    assert!(calls <= 4 * 3, "{calls}");
}

/// A bucket refills while instances hold units they reserved: a unit held
/// past its refill must not be spent on top of the refilled one. GCRA and
/// the token bucket (both refills), 100 a second (burst 100): two instances at half the
/// rate for 0.6 s, reserving a second ahead (so each holds a few dozen
/// units while Redis's bucket is full again), then a flood of 16 clients
/// each. Whatever they held, the flood gets at most what a bucket gives
/// over its length: the burst, plus the rate × the flood's duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_mode_never_spends_a_held_unit_on_top_of_its_refill() {
    let server = RedisServer::start();
    let quota = Quota::per_second(100);
    let unix_secs = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::TokenBucketInterval,
    ] {
        let mut apps = Vec::new();
        for _ in 0..2 {
            let redis = RedisStore::builder(server.url())
                .prefix(format!("refill-{algorithm}"))
                .connect()
                .await
                .unwrap();
            let store = LocalFirst::builder(redis, LocalMode::Exact)
                .reserve_ahead(Duration::from_secs(1))
                .fanout(2)
                .build();
            apps.push(instance(algorithm, quota, store));
        }
        // Half the rate: every request passes, and each instance reserves
        // ahead of what it spends.
        let mut ticks = tokio::time::interval(Duration::from_millis(20));
        for i in 0..30 {
            ticks.tick().await;
            let mut app = apps[i % 2].clone();
            assert_eq!(status(&mut app, Request::new(())).await, StatusCode::OK);
        }
        let seen = Arc::new(Seen::default());
        let (flood, first_second) = (std::time::Instant::now(), unix_secs());
        tokio::join!(
            clients(&apps[0], 16, Duration::ZERO, &seen),
            clients(&apps[1], 16, Duration::ZERO, &seen)
        );
        let lasted = flood.elapsed();
        let admitted = seen.admitted.load(Ordering::Relaxed);
        let refilled = if algorithm == Algorithm::TokenBucketInterval {
            // 100 at once at every whole second of the server's clock.
            100 * (unix_secs() - first_second) as usize
        } else {
            (lasted.as_secs_f64() * 100.0).ceil() as usize
        };
        println!("{algorithm}: the flood admitted {admitted} in {lasted:?}");
        assert_eq!(seen.failed.load(Ordering::Relaxed), 0);
        assert!(
            admitted <= 100 + refilled,
            "{algorithm}: {admitted} admitted in {lasted:?}: more than the burst (100) and \
             {refilled} refilled"
        );
        assert!(admitted >= 50, "{algorithm}: {admitted}");
    }
}

/// The requests `apps` admit out of `n` sent one after another, spread
/// over the instances; and how many failed (503: the store-error
/// behaviour).
async fn send(apps: &[App], n: usize) -> (usize, usize) {
    let (mut admitted, mut failed) = (0, 0);
    for i in 0..n {
        let mut app = apps[i % apps.len()].clone();
        match status(&mut app, Request::new(())).await {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            _ => failed += 1,
        }
    }
    (admitted, failed)
}

/// Exact mode through a Redis restart: while Redis is away an instance
/// admits only units it already held (the store-error behaviour answers
/// the rest), and once Redis is back limiting resumes within a second.
/// A Redis that restarts empty has forgotten every count, so the limit
/// starts afresh (as it does for the plain Redis store).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_mode_through_a_redis_restart() {
    let mut server = RedisServer::start();
    let mut apps = Vec::new();
    let mut stores = Vec::new();
    for _ in 0..4 {
        let redis = RedisStore::builder(server.url())
            .prefix("restart")
            .reconnect_max_delay(Duration::from_millis(100))
            .connect()
            .await
            .unwrap();
        let store = LocalFirst::builder(redis, LocalMode::Exact).build();
        stores.push(store.clone());
        let layer = RateLimitLayer::builder()
            .quota("api", limit())
            .key(GlobalKey)
            .store(store)
            .store_timeout(Duration::from_millis(50))
            .on_store_error(OnStoreError::Closed)
            .build();
        apps.push(behind(layer));
    }
    let (before, failed) = send(&apps, 400).await;
    assert_eq!((before, failed), (400, 0));

    server.kill();
    let (during, failed) = send(&apps, 300).await;
    // Every grant ever made (none can be while Redis is away).
    let reserved: u64 = stores.iter().map(|s| s.stats().reserved_units).sum();
    let first_reserved = stores[0].stats().reserved_units;
    println!(
        "restart: {before} admitted before, {during} while Redis was away ({failed} failed), {reserved} units reserved"
    );
    // Only what was reserved before Redis went away.
    assert!(
        before + during <= reserved as usize,
        "{before} + {during} > {reserved}"
    );
    assert!(failed > 0);

    server.restart();
    let back = std::time::Instant::now();
    let mut app = apps[0].clone();
    loop {
        // Admitted from a grant made after Redis came back.
        let got = status(&mut app, Request::new(())).await;
        if got == StatusCode::OK && stores[0].stats().reserved_units > first_reserved {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(1),
            "limiting resumed late"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "restart: limiting resumed {:?} after Redis came back",
        back.elapsed()
    );
}

/// What remains of the key's 1,000 in Redis, read with a plain store.
async fn remaining(url: &str) -> u64 {
    let policy = Arc::new(tollgate::Policy::new(vec![tollgate::NamedLimit::new(
        "api",
        limit(),
    )]));
    let store = RedisStore::builder(url)
        .prefix("catch-up")
        .connect()
        .await
        .unwrap();
    let decision = match tollgate::Store::check(&store, &policy, &tollgate::Key::GLOBAL, 0) {
        tollgate::StoreReply::Pending(f) => f.await.unwrap(),
        tollgate::StoreReply::Ready(r) => r.unwrap(),
    };
    decision.merged().remaining()
}

/// Periodic mode through a Redis that goes away and comes back with its
/// data (append-only file): what an instance admitted meanwhile is
/// reported once, not lost and not twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn periodic_mode_reports_what_it_admitted_while_redis_was_away_once() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let redis = RedisStore::builder(server.url())
        .prefix("catch-up")
        .reconnect_max_delay(Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let mode = LocalMode::Periodic {
        sync_interval: Duration::from_millis(50),
    };
    let store = LocalFirst::builder(redis, mode).build();
    let layer = RateLimitLayer::builder()
        .quota("api", limit())
        .key(GlobalKey)
        .store(store)
        .store_timeout(Duration::from_millis(200))
        .on_store_error(OnStoreError::Closed)
        .build();
    let apps = [behind(layer)];
    let url = server.url();
    assert_eq!(send(&apps, 100).await, (100, 0));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(remaining(&url).await, 900);

    server.kill();
    // Within what it last read: decided here, Redis or not.
    assert_eq!(send(&apps, 50).await, (50, 0));
    // Syncs fail meanwhile; the report waits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.restart();
    let back = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Ok(left) = tokio::time::timeout(Duration::from_millis(500), remaining(&url)).await
            && left == 850
        {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(2), "not reported");
    }
    // And no later sync counts it again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(remaining(&url).await, 850);
}

/// Issue 38, periodic mode's figures: one instance, 5 a second (GCRA, a
/// fixed window), hammered until refused. The refusal keeps the memory
/// store's contract as the headers round it: `1 ≤ t ≤ Retry-After` (`t`
/// from `replenish_after`), `remaining ≤ limit`, `retry_after ≤
/// reset_after`; and a retry after `Retry-After` passes (nothing else
/// spends the key). Three rounds each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_mode_refusals_say_honestly_when_to_retry() {
    // Whole seconds, rounded up, as the headers write them.
    let ceil_seconds = |d: std::time::Duration| d.as_secs() + u64::from(d.subsec_nanos() > 0);
    use tollgate::{Key, NamedLimit, Policy, Store, StoreReply};
    let server = RedisServer::start();
    for algorithm in [Algorithm::Gcra, Algorithm::FixedWindow] {
        let store = local_store(
            &server.url(),
            &format!("periodic-headers-{algorithm}"),
            LocalMode::Periodic {
                sync_interval: Duration::from_millis(100),
            },
        )
        .await;
        let policy = Arc::new(Policy::new(vec![
            NamedLimit::new("api", Quota::per_second(5)).with_algorithm(algorithm),
        ]));
        let decide = || async {
            match store.check(&policy, &Key::GLOBAL, 1) {
                StoreReply::Ready(decision) => decision,
                StoreReply::Pending(future) => future.await,
            }
            .expect("decided")
            .merged()
        };
        for round in 0..3 {
            let mut admitted = 0;
            let refusal = loop {
                let decision = decide().await;
                assert!(decision.remaining() <= decision.limit(), "{algorithm}");
                if !decision.allowed() {
                    break decision;
                }
                admitted += 1;
                assert!(admitted < 100, "{algorithm}: never refused");
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            let (t, retry) = (
                ceil_seconds(refusal.replenish_after()),
                ceil_seconds(refusal.retry_after()).max(1),
            );
            let label = format!("{algorithm}, round {round}: {refusal:?}");
            assert!(t >= 1, "{label}: t=0 on a refusal");
            assert!(t <= retry, "{label}: t={t} after Retry-After {retry}");
            assert!(refusal.reset_after() > Duration::ZERO, "{label}");
            assert!(refusal.retry_after() <= refusal.reset_after(), "{label}");
            tokio::time::sleep(Duration::from_secs(retry)).await;
            let retried = decide().await;
            assert!(
                retried.allowed(),
                "{label}: refused after Retry-After: {retried:?}"
            );
        }
    }
}

/// A decision of `store`, waited for.
async fn decided<St: tollgate::Store>(
    store: &St,
    policy: &Arc<tollgate::Policy>,
    cost: u32,
) -> tollgate::PolicyDecision {
    match store.check(policy, &tollgate::Key::GLOBAL, cost) {
        tollgate::StoreReply::Ready(decision) => decision,
        tollgate::StoreReply::Pending(future) => future.await,
    }
    .expect("decided")
}

/// A periodic-mode store syncing every `interval` under `prefix`, and a
/// policy of one limit of `quota` by `algorithm`.
async fn periodic_key(
    server: &RedisServer,
    prefix: &str,
    interval: Duration,
    quota: Quota,
    algorithm: Algorithm,
) -> (LocalFirst<RedisStore>, Arc<tollgate::Policy>) {
    let mode = LocalMode::Periodic {
        sync_interval: interval,
    };
    let store = local_store(&server.url(), prefix, mode).await;
    let limit = tollgate::NamedLimit::new("api", quota).with_algorithm(algorithm);
    (store, Arc::new(tollgate::Policy::new(vec![limit])))
}

/// Periodic mode: a peek right after admissions and a debit, before the
/// next sync reports them, shows them (what remains counts the units this
/// instance has not reported yet), as the memory store's peek would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_mode_peeks_count_what_is_not_reported_yet() {
    use tollgate::store::PolicyDebit;
    use tollgate::{Key, Store};
    if !clear_of_midnight() {
        return;
    }
    let server = RedisServer::start();
    for algorithm in SUPPORTED {
        // No sync between the admissions and the peek.
        let (store, policy) = periodic_key(
            &server,
            &format!("periodic-peek-{algorithm}"),
            Duration::from_secs(30),
            Quota::per_day(100),
            algorithm,
        )
        .await;
        // The first request waits for the key's first reading; the tick's
        // first sync (at once) may report it.
        assert!(decided(&store, &policy, 1).await.merged().allowed());
        tokio::time::sleep(Duration::from_millis(100)).await;
        for _ in 0..9 {
            assert!(decided(&store, &policy, 1).await.merged().allowed());
        }
        store
            .debit(&policy, &Key::GLOBAL, PolicyDebit::new(5))
            .landed()
            .await;
        let peek = store
            .peek(&policy, &Key::GLOBAL)
            .resolve()
            .await
            .expect("peeked");
        assert_eq!(
            peek.merged().remaining(),
            100 - 10 - 5,
            "{algorithm}: the peek misses what was not reported yet"
        );
    }
}

/// Periodic mode: a key in debt (a debit beyond the limit) whose reported
/// admissions are then refunded stays refused: Redis gives the units back
/// (still in debt), where this instance would have credited them to
/// itself and admitted them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_mode_refunds_of_reported_units_leave_a_key_in_debt_refused() {
    use tollgate::store::{PolicyDebit, PolicyRefund};
    use tollgate::{Key, Store};
    if !clear_of_midnight() {
        return;
    }
    let server = RedisServer::start();
    for algorithm in SUPPORTED {
        let (store, policy) = periodic_key(
            &server,
            &format!("periodic-debt-{algorithm}"),
            Duration::from_millis(20),
            Quota::per_day(10),
            algorithm,
        )
        .await;
        let mut admitted = Vec::new();
        for _ in 0..5 {
            let asked = std::time::Instant::now();
            let decision = decided(&store, &policy, 1).await;
            assert!(decision.merged().allowed(), "{algorithm}");
            admitted.push((decision, asked));
        }
        // 20 more than the 5 admitted: 15 beyond the limit.
        store
            .debit(&policy, &Key::GLOBAL, PolicyDebit::new(20))
            .landed()
            .await;
        // Both reported.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for (decision, asked) in &admitted {
            let refund = PolicyRefund::of(decision, 1, asked.elapsed());
            store.refund(&policy, &Key::GLOBAL, refund).landed().await;
        }
        // 20 of 10 spent: nothing passes.
        let mut passed = 0;
        for _ in 0..10 {
            if decided(&store, &policy, 1).await.merged().allowed() {
                passed += 1;
            }
        }
        assert_eq!(passed, 0, "{algorithm}: a key in debt admitted again");
    }
}

/// Issue 48: exact mode admits what the algorithm allows at a steady
/// pace, from one instance or several, as the plain Redis store does. On
/// 100/min (burst 100), each pace stays inside what every algorithm
/// allows, so every request passes:
///
/// - 4 a second for 20 s (80 requests) over four instances, one request a
///   second each, and all on one instance;
/// - 4 a second for 30 s (120: 100 of burst and 50 refilled) over four
///   instances, for the buckets (a window of a minute takes 100 of them);
/// - 80 requests at 20 a second over four instances (5 each), and at 100
///   a second over two (where each reserves ahead of need).
///
/// Every supported algorithm at once, each case on its own key. Units
/// reserved ahead and not spent (an instance idle until its next
/// request, a second later) would be charged and lost to every instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_mode_admits_every_request_at_a_steady_pace() {
    use tollgate::{Key, NamedLimit, Policy};
    let server = RedisServer::start();
    let quota: Quota = "100/min".parse().unwrap();
    // (instances, ms between two requests, requests, algorithms)
    let buckets = [Algorithm::Gcra, Algorithm::TokenBucket];
    let cases: [(usize, u64, usize, &[Algorithm]); 5] = [
        (4, 250, 80, &SUPPORTED),
        (1, 250, 80, &SUPPORTED),
        (4, 250, 120, &buckets),
        (4, 50, 80, &SUPPORTED),
        (2, 10, 80, &SUPPORTED),
    ];
    let mut handles = Vec::new();
    for (case, (instances, pause, requests, algorithms)) in cases.into_iter().enumerate() {
        for &algorithm in algorithms {
            let url = server.url();
            handles.push(tokio::spawn(async move {
                let prefix = format!("steady-{case}-{algorithm}");
                let mut stores = Vec::new();
                for _ in 0..instances {
                    stores.push(local_store(&url, &prefix, LocalMode::Exact).await);
                }
                let policy = Arc::new(Policy::new(vec![
                    NamedLimit::new("api", quota).with_algorithm(algorithm),
                ]));
                let mut ticks = tokio::time::interval(Duration::from_millis(pause));
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut admitted = 0;
                for i in 0..requests {
                    ticks.tick().await;
                    let store = &stores[i % instances];
                    if tollgate_tests::checks::admits(store, &policy, &Key::GLOBAL, 1).await {
                        admitted += 1;
                    }
                }
                let what = format!("{instances} instance(s), a request every {pause} ms");
                (what, algorithm, admitted, requests)
            }));
        }
    }
    let mut failures = Vec::new();
    for handle in handles {
        let (what, algorithm, admitted, requests) = handle.await.unwrap();
        println!("steady exact, {what}, {algorithm}: admitted {admitted} of {requests}");
        if admitted != requests {
            failures.push(format!("{what}, {algorithm}: {admitted} of {requests}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A reservation ahead of need is sent from a spawned task, which on a
/// busy machine may run after the units the instance holds passed their
/// hold. Those units are not in the count that reservation records in
/// Redis (it reports only what is still spendable when it is sent), so
/// the hold it brings back must not cover them: spent after it, they
/// would be spent on top of their own refill. Driven on a test clock
/// (Redis's time too), GCRA at 100/s: the instance spends down to the
/// quarter of its grant that starts a reservation ahead, the clock moves
/// 2 s (past the hold, the bucket full again) before that reservation
/// runs; then a flood at one instant gets the burst, 100, and no more.
#[tokio::test]
async fn exact_mode_never_spends_units_past_their_hold_after_a_late_reservation() {
    let server = RedisServer::start();
    let clock = tollgate_core::ManualClock::new(1_700_000_000 * 1_000_000_000);
    let redis = RedisStore::builder(server.url())
        .prefix("late-ahead")
        .test_clock(clock.clone())
        .connect()
        .await
        .unwrap();
    let store = LocalFirst::builder(redis, LocalMode::Exact).build();
    let policy = Arc::new(tollgate::Policy::new(vec![
        tollgate::NamedLimit::new("api", Quota::per_second(100)).with_algorithm(Algorithm::Gcra),
    ]));
    // Two requests wait for their reservations: 1 unit, then an eighth of
    // the 99 left (12: sized by the rate of the first, at one instant,
    // more than it needs); eight more spend the grant down to 3, a
    // quarter of it, which starts a reservation ahead of need (on this
    // one-thread runtime it runs once the test waits).
    for _ in 0..10 {
        assert!(decided(&store, &policy, 1).await.merged().allowed());
    }
    assert_eq!(
        store.stats().redis_calls,
        2,
        "the reservation ahead already ran"
    );
    let reserved = store.stats().reserved_units;
    clock.advance(Duration::from_secs(2));
    for _ in 0..5_000 {
        if store.stats().reserved_units > reserved {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        store.stats().reserved_units > reserved,
        "the reservation ahead granted nothing"
    );
    let mut flood = 0;
    for _ in 0..150 {
        if decided(&store, &policy, 1).await.merged().allowed() {
            flood += 1;
        }
    }
    assert!(
        flood <= 100,
        "{flood} admitted at one instant: more than the burst"
    );
    assert!(flood >= 90, "{flood}");
}

/// Issue 48: periodic shares move to where the traffic is (demand-sized
/// shares; an idle instance offers its share back at its next tick), and
/// the documented bound still holds: four instances on one key of 1,000 a
/// day, in turns of four intervals, two at a time busy (4 clients each,
/// a request a millisecond) and two idle, so that shares are taken, left
/// idle, offered back and taken elsewhere all through: all together admit
/// at most the limit plus one unit per instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn periodic_shares_that_move_keep_the_bound() {
    if !clear_of_midnight() {
        return;
    }
    let server = RedisServer::start();
    let interval = Duration::from_millis(20);
    let mode = LocalMode::Periodic {
        sync_interval: interval,
    };
    for algorithm in SUPPORTED {
        let apps = apps(
            &server.url(),
            &format!("periodic-moving-{algorithm}"),
            algorithm,
            mode,
        )
        .await;
        let seen = Arc::new(Seen::default());
        let started = std::time::Instant::now();
        let mut tasks = Vec::new();
        for (a, app) in apps.iter().enumerate() {
            for _ in 0..4 {
                let (mut app, seen) = (app.clone(), seen.clone());
                tasks.push(tokio::spawn(async move {
                    let mut refusals = 0;
                    // Bounded: 3,000 steps at most.
                    for _ in 0..3_000 {
                        let turn = started.elapsed().as_millis() / (4 * interval.as_millis());
                        if (turn as usize + a) % 2 == 1 {
                            // This instance's idle turn.
                            tokio::time::sleep(interval).await;
                            continue;
                        }
                        match status(&mut app, Request::new(())).await {
                            StatusCode::OK => {
                                refusals = 0;
                                seen.admitted.fetch_add(1, Ordering::Relaxed);
                            }
                            StatusCode::TOO_MANY_REQUESTS => {
                                refusals += 1;
                                seen.limited.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => {
                                refusals += 1;
                                seen.failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // The key spent: refused for longer than the
                        // shares live.
                        if refusals >= 100 {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }));
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
        let admitted = seen.admitted.load(Ordering::Relaxed);
        println!(
            "periodic moving {algorithm}: admitted {admitted} of 1000, limited {}",
            seen.limited.load(Ordering::Relaxed)
        );
        assert!(admitted <= 1000 + 4, "{algorithm}: {admitted}");
        // Not vacuous: the key was spent.
        assert!(admitted >= 900, "{algorithm}: {admitted}");
        assert_eq!(seen.failed.load(Ordering::Relaxed), 0);
    }
}

/// Issue 48, item 5: every periodic admission that leaves a limit short
/// of whole says when its next unit is back (`replenish_after > 0`, the
/// headers' `t` at least 1), never `t=0` (a whole limit) with `r < q`:
/// two instances on one key, for every algorithm, admissions on both
/// (each instance's first reading of a whole key included), until refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_admissions_short_of_whole_say_t_above_0() {
    let server = RedisServer::start();
    for algorithm in SUPPORTED {
        let prefix = format!("periodic-t-{algorithm}");
        let (a, policy) = periodic_key(
            &server,
            &prefix,
            Duration::from_millis(50),
            "40/min".parse().unwrap(),
            algorithm,
        )
        .await;
        let (b, _) = periodic_key(
            &server,
            &prefix,
            Duration::from_millis(50),
            "40/min".parse().unwrap(),
            algorithm,
        )
        .await;
        let mut admitted = 0;
        // Bounded: 40 a minute, 200 tries, a little spread in time so that
        // syncs come between them.
        for i in 0..200 {
            let store = if i % 3 == 0 { &b } else { &a };
            let decision = decided(store, &policy, 1).await;
            if decision.merged().allowed() {
                admitted += 1;
                for limit in decision.each() {
                    if limit.remaining() < limit.limit() {
                        assert!(
                            limit.replenish_after_nanos() > 0,
                            "{algorithm}, admission {admitted}: t=0 with r < q: {limit:?}"
                        );
                    }
                }
            }
            if i % 10 == 0 {
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
        assert!(admitted >= 20, "{algorithm}: {admitted} admitted");
    }
}

/// Issue 48: a busy instance does not keep a key well inside its limit
/// from another. Instance A is hammered (8 tasks) on one key of a million
/// a day; meanwhile instance B, new to the key, gets a request every 5 ms:
/// neither refuses one (B's first reading finds A's share sized by A's
/// rate, or half of what was free, and the rest free for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_periodic_instance_leaves_a_key_inside_its_limit_to_another() {
    let server = RedisServer::start();
    for algorithm in SUPPORTED {
        let prefix = format!("periodic-busy-{algorithm}");
        let quota: Quota = "1000000/day".parse().unwrap();
        let (a, policy) = periodic_key(
            &server,
            &prefix,
            Duration::from_millis(50),
            quota,
            algorithm,
        )
        .await;
        let (b, _) = periodic_key(
            &server,
            &prefix,
            Duration::from_millis(50),
            quota,
            algorithm,
        )
        .await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let refused_on_a = Arc::new(AtomicUsize::new(0));
        let mut busy = Vec::new();
        for _ in 0..8 {
            let (a, policy) = (a.clone(), policy.clone());
            let (stop, refused) = (stop.clone(), refused_on_a.clone());
            busy.push(tokio::spawn(async move {
                // Bounded: 5,000 requests each at most.
                for _ in 0..5_000 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if !decided(&a, &policy, 1).await.merged().allowed() {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::task::yield_now().await;
                }
            }));
        }
        // A holds a share before B comes.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut refused_on_b = 0;
        for _ in 0..40 {
            if !decided(&b, &policy, 1).await.merged().allowed() {
                refused_on_b += 1;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.store(true, Ordering::Relaxed);
        for task in busy {
            task.await.unwrap();
        }
        let refused_on_a = refused_on_a.load(Ordering::Relaxed);
        println!("busy {algorithm}: refused on A {refused_on_a}, on B {refused_on_b} of 40");
        assert_eq!(refused_on_b, 0, "{algorithm}: B refused");
        assert_eq!(refused_on_a, 0, "{algorithm}: A refused");
    }
}

/// Issue 48: a plan change on the local-first store in exact mode carries
/// what requests used, not what the instance reserved. Driven on a test
/// clock: GCRA at 100/h, five requests at one instant (the second's grant
/// is an eighth of what remains, 12: eight of its units unspent), then
/// the key moves to 200/h — at once, within the hold, and 2 s later, past
/// it (Redis still counts the units, the instance may no longer spend
/// them) — and its next request there leaves 194, as on the memory store;
/// moved down to 100/h, 93. A key in debt (110 of 200/h, debited) moved
/// to 100/h and back keeps its 110.
#[tokio::test]
async fn exact_mode_plan_changes_carry_what_requests_used() {
    use tollgate::store::PolicyDebit;
    use tollgate::{Key, NamedLimit, Policy, Store};
    let server = RedisServer::start();
    let plan = |quota: &str| {
        Arc::new(Policy::new(vec![
            NamedLimit::new("api", quota.parse().unwrap()).with_algorithm(Algorithm::Gcra),
        ]))
    };
    let (small, large) = (plan("100/h"), plan("200/h"));
    for (case, pause) in [("past the hold", 2), ("within the hold", 0)] {
        let clock = tollgate_core::ManualClock::new(1_700_000_000 * 1_000_000_000);
        let redis = RedisStore::builder(server.url())
            .prefix(format!("carry-{pause}"))
            .test_clock(clock.clone())
            .connect()
            .await
            .unwrap();
        let store = LocalFirst::builder(redis, LocalMode::Exact).build();
        for _ in 0..5 {
            assert!(
                decided(&store, &small, 1).await.merged().allowed(),
                "{case}"
            );
        }
        clock.advance(Duration::from_secs(pause));
        store.carry(&small, &large, &Key::GLOBAL).await.unwrap();
        let up = decided(&store, &large, 1).await;
        assert_eq!(up.merged().remaining(), 194, "{case}: 6 used of 200");
        store.carry(&large, &small, &Key::GLOBAL).await.unwrap();
        let down = decided(&store, &small, 1).await;
        assert_eq!(down.merged().remaining(), 93, "{case}: 7 used of 100");

        // In debt: 110 of 200/h; down to 100/h (refused), back up (89
        // left after the next request).
        let debt = Key::from("debt");
        store
            .debit(&large, &debt, PolicyDebit::new(110))
            .landed()
            .await;
        store.carry(&large, &small, &debt).await.unwrap();
        let refused = match store.check(&small, &debt, 1) {
            tollgate::StoreReply::Ready(decision) => decision,
            tollgate::StoreReply::Pending(future) => future.await,
        }
        .expect("decided");
        assert!(!refused.merged().allowed(), "{case}: in debt");
        // GCRA at 100/h gives a unit back every 36 s: 11 units of debt.
        assert_eq!(refused.merged().retry_after().as_secs(), 11 * 36, "{case}");
        store.carry(&small, &large, &debt).await.unwrap();
        let after = match store.check(&large, &debt, 1) {
            tollgate::StoreReply::Ready(decision) => decision,
            tollgate::StoreReply::Pending(future) => future.await,
        }
        .expect("decided");
        assert_eq!(after.merged().remaining(), 89, "{case}: the debt kept");
    }
}

/// Units an instance reserved ahead and then did not spend before their
/// hold ended (it went idle) are given back in Redis, not left charged
/// until they refill. Driven on a test clock: GCRA at 100/h (a unit every
/// 36 s), two requests at one instant (the second's grant is 12: 11
/// unspent), then 2 s later (past the 1 s hold) a third: 3 used, and
/// Redis says 97 remain (86 if the 11 stayed charged). A plain Redis
/// store reads it (it does not read the held counts).
#[tokio::test]
async fn exact_mode_gives_back_units_unspent_past_their_hold() {
    use tollgate::{Key, NamedLimit, Policy, Store};
    let server = RedisServer::start();
    let clock = tollgate_core::ManualClock::new(1_700_000_000 * 1_000_000_000);
    let redis = || {
        RedisStore::builder(server.url())
            .prefix("unheld")
            .test_clock(clock.clone())
            .connect()
    };
    let store = LocalFirst::builder(redis().await.unwrap(), LocalMode::Exact).build();
    let plain = redis().await.unwrap();
    let policy = Arc::new(Policy::new(vec![
        NamedLimit::new("api", "100/h".parse().unwrap()).with_algorithm(Algorithm::Gcra),
    ]));
    for _ in 0..2 {
        assert!(decided(&store, &policy, 1).await.merged().allowed());
    }
    assert_eq!(store.stats().reserved_units, 13, "a grant of 1, then of 12");
    clock.advance(Duration::from_secs(2));
    assert!(decided(&store, &policy, 1).await.merged().allowed());
    let mut remaining = 0;
    for _ in 0..5_000 {
        let peek = plain.peek(&policy, &Key::GLOBAL).resolve().await.unwrap();
        remaining = peek.merged().remaining();
        if remaining >= 97 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(remaining, 97, "the 11 unspent units stayed charged");
}

/// An instance that reserved ahead and then went idle gives the units it
/// did not spend back once their hold has passed, without a request of
/// its own. GCRA at 100/h, a hold of 200 ms: two requests (the second's
/// grant is 12: 11 unspent), then nothing; Redis soon says 98 remain (87
/// while the 11 are held or charged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_mode_an_idle_instance_gives_back_what_it_held() {
    use tollgate::{Key, NamedLimit, Policy, Store};
    let server = RedisServer::start();
    let redis = || RedisStore::builder(server.url()).prefix("idle").connect();
    let store = LocalFirst::builder(redis().await.unwrap(), LocalMode::Exact)
        .hold(Duration::from_millis(200))
        .build();
    let plain = redis().await.unwrap();
    let policy = Arc::new(Policy::new(vec![
        NamedLimit::new("api", "100/h".parse().unwrap()).with_algorithm(Algorithm::Gcra),
    ]));
    for _ in 0..2 {
        assert!(decided(&store, &policy, 1).await.merged().allowed());
    }
    assert_eq!(store.stats().reserved_units, 13, "a grant of 1, then of 12");
    let mut remaining = 0;
    for _ in 0..500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let peek = plain.peek(&policy, &Key::GLOBAL).resolve().await.unwrap();
        remaining = peek.merged().remaining();
        if remaining >= 98 {
            break;
        }
    }
    assert_eq!(remaining, 98, "the 11 units held were not given back");
}
