//! The Redis store's block cache against a real redis-server: a flood on
//! a key Redis refused costs Redis a handful of calls per instance per
//! retry period (counted by the server, `INFO commandstats`), where
//! without the cache every request is a call; and a cached refusal's
//! `Retry-After` and `RateLimit` fields fall with time as Redis's own
//! would.
//!
//! `cargo test -p tollgate-tests --test redis_block_cache -- --nocapture`
//! prints the counts.

mod common;

use http::{Request, StatusCode};
use std::time::{Duration, Instant};
use tollgate::{GlobalKey, RateLimitLayer};
use tollgate_core::{ManualClock, Quota};
use tollgate_redis::RedisStore;
use tollgate_tests::app::{App, behind};
use tollgate_tests::redis::RedisServer;
use tower::{Service, ServiceExt};

/// Requests in a flood.
const FLOOD: usize = 10_000;
/// Tasks sending them, per instance.
const TASKS: usize = 16;
/// The limit, and the time one unit of it takes to come back (GCRA).
const LIMIT: &str = "10/min";
const RETRY_PERIOD: Duration = Duration::from_secs(6);

/// One instance of an app: its own connection to `server` (and so its own
/// block cache), its layer of 10 a minute on one global key.
async fn instance(server: &RedisServer, block_cache: bool) -> App {
    let store = RedisStore::builder(server.url())
        .block_cache(block_cache)
        .connect()
        .await
        .expect("connect to the redis-server just started");
    behind(
        RateLimitLayer::builder()
            .quota("api", LIMIT.parse::<Quota>().unwrap())
            .key(GlobalKey)
            .store(store)
            // A loaded two-core machine can be slow: no request should
            // fail open for want of time.
            .store_timeout(Duration::from_secs(5))
            .build(),
    )
}

async fn status(app: &mut App) -> StatusCode {
    let response = app.ready().await.unwrap().call(Request::new(())).await;
    match response {
        Ok(response) => response.status(),
        Err(never) => match never {},
    }
}

/// What a flood saw: statuses counted, the script calls it cost Redis, and
/// how long it took.
struct Flood {
    ok: usize,
    limited: usize,
    calls: u64,
    took: Duration,
}

/// Spends the limit through the first instance.
async fn spend(instances: &[App]) {
    let mut first = instances[0].clone();
    for _ in 0..10 {
        assert_eq!(status(&mut first).await, StatusCode::OK);
    }
}

/// Sends [`FLOOD`] requests spread over `instances`, [`TASKS`] at a time
/// on each.
async fn flood(server: &RedisServer, instances: &[App]) -> Flood {
    let before = server.script_calls();
    let started = Instant::now();
    let n = TASKS * instances.len();
    let mut tasks = Vec::new();
    for (i, app) in instances.iter().cycle().take(n).enumerate() {
        // FLOOD in all, shared as evenly as it goes.
        let requests = FLOOD / n + usize::from(i < FLOOD % n);
        let mut app = app.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::with_capacity(requests);
            for _ in 0..requests {
                seen.push(status(&mut app).await);
            }
            seen
        }));
    }
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.extend(task.await.unwrap());
    }
    let took = started.elapsed();
    assert_eq!(statuses.len(), FLOOD);
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let limited = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(ok + limited, FLOOD, "every request admitted or limited");
    Flood {
        ok,
        limited,
        calls: server.script_calls() - before,
        took,
    }
}

/// Retry periods the flood overlapped (a unit may come back in each).
fn periods(took: Duration) -> u64 {
    took.as_nanos().div_ceil(RETRY_PERIOD.as_nanos()) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_a_refused_key_costs_redis_a_handful_of_calls_per_instance() {
    let server = RedisServer::start();
    let instances = [instance(&server, true).await, instance(&server, true).await];
    spend(&instances).await;
    // The first flood: each task's first request may leave before any
    // refusal has come back. The second: the instances know the key.
    let started = Instant::now();
    for wave in ["first", "second"] {
        let seen = flood(&server, &instances).await;
        let periods = periods(seen.took);
        println!(
            "block cache on, {wave} flood: {FLOOD} requests from {} instances, {TASKS} tasks each, \
             in {:?} ({periods} retry period(s) of {RETRY_PERIOD:?}): {} admitted, {} limited, \
             {} script calls to Redis",
            instances.len(),
            seen.took,
            seen.ok,
            seen.limited,
            seen.calls
        );
        // Per instance and period: at most one call per task while its
        // entry is missing (each task's request may be in flight before
        // the refusal comes back), and then an admission and a refusal
        // when the period's unit comes back.
        let bound = instances.len() as u64 * periods * (TASKS as u64 + 2);
        assert!(
            seen.calls <= bound,
            "{} calls for {FLOOD} requests; at most {bound} expected",
            seen.calls
        );
        // At most one admission per unit that came back.
        assert!(seen.ok as u64 <= periods, "{} admitted", seen.ok);
        if wave == "second" && started.elapsed() < RETRY_PERIOD {
            assert_eq!(seen.calls, 0, "a known refusal costs no call");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_block_cache_every_request_is_a_call() {
    let server = RedisServer::start();
    let instances = [
        instance(&server, false).await,
        instance(&server, false).await,
    ];
    spend(&instances).await;
    let seen = flood(&server, &instances).await;
    println!(
        "block cache off: {FLOOD} requests in {:?}: {} admitted, {} limited, {} script calls to Redis",
        seen.took, seen.ok, seen.limited, seen.calls
    );
    assert_eq!(seen.calls, FLOOD as u64);
}

/// `Retry-After` and the `RateLimit` field's `r` and `t` of a response.
fn fields(response: &http::Response<String>) -> (u64, String) {
    let retry = response.headers()["retry-after"].to_str().unwrap();
    let state = response.headers()["ratelimit"].to_str().unwrap();
    (retry.parse().unwrap(), state.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_refusal_tells_the_time_left_as_redis_would() {
    let server = RedisServer::start();
    // The scripts and the block cache read one manual clock.
    let clock = ManualClock::new(1_700_000_000_000_000_000);
    let store = RedisStore::builder(server.url())
        .test_clock(clock.clone())
        .connect()
        .await
        .unwrap();
    let mut app = behind(
        RateLimitLayer::builder()
            .quota("api", LIMIT.parse::<Quota>().unwrap())
            .key(GlobalKey)
            .store(store.clone())
            .store_timeout(Duration::from_secs(5))
            .build(),
    );
    let mut send = async || {
        app.ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap()
    };
    for _ in 0..10 {
        assert_eq!(send().await.status(), StatusCode::OK);
    }
    let refused = send().await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(fields(&refused), (6, r#""api";r=0;t=6"#.to_owned()));
    let calls = server.script_calls();
    assert_eq!(store.block_list().map(|b| b.len()), Some(1));

    // 2 s on: refused from the cache, 4 s to wait.
    clock.advance(Duration::from_secs(2));
    let cached = send().await;
    assert_eq!(cached.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(fields(&cached), (4, r#""api";r=0;t=4"#.to_owned()));
    // 5.5 s on: half a second left, rounded up.
    clock.advance(Duration::from_millis(3_500));
    let cached = send().await;
    assert_eq!(fields(&cached), (1, r#""api";r=0;t=1"#.to_owned()));
    assert_eq!(server.script_calls(), calls, "no call while cached");

    // 6 s on: Redis is asked again, and admits.
    clock.advance(Duration::from_millis(500));
    assert_eq!(send().await.status(), StatusCode::OK);
    assert_eq!(server.script_calls(), calls + 1);
    assert_eq!(store.block_list().map(|b| b.len()), Some(0));
}
