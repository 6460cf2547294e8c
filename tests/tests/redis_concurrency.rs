//! No over-admission: four app instances, each a `RateLimitLayer` with its
//! own `RedisStore` client, share one limit of 100 per minute. 200
//! concurrent requests on one key admit exactly 100, for every algorithm.

use http::{Request, StatusCode};
use std::time::Duration;
use tollgate::{GlobalKey, OnStoreError, RateLimitLayer};
use tollgate_core::{Algorithm, ManualClock, Quota};
use tollgate_redis::RedisStore;
use tollgate_tests::app::{App, behind, status};
use tollgate_tests::redis::RedisServer;

/// One app instance limiting on `store`. Store errors answer 503, so a
/// failure can never pass for an admission.
fn instance(algorithm: Algorithm, store: RedisStore) -> App {
    let layer = RateLimitLayer::builder()
        .quota("api", "100/min".parse::<Quota>().unwrap())
        .algorithm(algorithm)
        .key(GlobalKey)
        .store(store)
        .store_timeout(Duration::from_secs(5))
        .on_store_error(OnStoreError::Closed)
        .build();
    behind(layer)
}

/// Sends 200 requests at once, spread over `instances`; returns how many
/// were admitted and answered, admitted and still held, and limited. The leaky bucket shapes: it admits a
/// request and holds it until its slot (one every 600 ms here), so a request
/// still held after a while is counted as admitted; a request denied is
/// answered at once.
async fn flood(instances: &[App]) -> (usize, usize, usize) {
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let mut app = instances[i % instances.len()].clone();
            tokio::spawn(async move { status(&mut app, Request::new(())).await })
        })
        .collect();
    let (mut admitted, mut held, mut limited) = (0, 0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    for task in tasks {
        match tokio::time::timeout_at(deadline, task).await {
            Ok(status) => match status.unwrap() {
                StatusCode::OK => admitted += 1,
                StatusCode::TOO_MANY_REQUESTS => limited += 1,
                other => panic!("unexpected status {other}"),
            },
            // Held for its slot (dropping the handle leaves it to finish).
            Err(_) => held += 1,
        }
    }
    (admitted, held, limited)
}

async fn instances(url: &str, algorithm: Algorithm, clock: Option<&ManualClock>) -> Vec<App> {
    let mut apps = Vec::new();
    for _ in 0..4 {
        let mut builder = RedisStore::builder(url).prefix(format!("flood-{algorithm}"));
        if let Some(clock) = clock {
            builder = builder.test_clock(clock.clone());
        }
        apps.push(instance(algorithm, builder.connect().await.unwrap()));
    }
    apps
}

// The time is held still, so the refills of the continuous algorithms (one
// every 600 ms) cannot blur the count: what is tested is that concurrent
// scripts never admit more than the state allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_instances_admit_exactly_the_limit_for_every_algorithm() {
    let server = RedisServer::start();
    let clock = ManualClock::new(1_700_000_000_123_456_000);
    for algorithm in Algorithm::ALL {
        let apps = instances(&server.url(), algorithm, Some(&clock)).await;
        let (answered, held, limited) = flood(&apps).await;
        assert_eq!((answered + held, limited), (100, 100), "{algorithm}");
        if algorithm != Algorithm::LeakyBucket {
            assert_eq!(held, 0, "{algorithm} holds no request");
        }
    }
}

// The same on the server's own clock (`TIME`), for the fixed window, whose
// count within one window does not depend on how long the flood takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_the_servers_clock_the_fixed_window_admits_exactly_the_limit() {
    let server = RedisServer::start();
    // Stay clear of a minute boundary, where a fresh window would begin.
    let seconds_into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 60;
    if seconds_into_minute >= 50 {
        tokio::time::sleep(Duration::from_secs(61 - seconds_into_minute)).await;
    }
    let apps = instances(&server.url(), Algorithm::FixedWindow, None).await;
    assert_eq!(flood(&apps).await, (100, 0, 100));
}

/// The fault a hostile run found: a sliding log of 5,000 a minute under
/// load from four instances, each failing closed at the default 100 ms
/// store timeout. When a call read the whole log (milliseconds at 5,000
/// entries) calls passed the timeout and failed open or closed by the
/// thousand. Now a call's cost does not grow with the log, and a call that
/// misses its deadline charges nothing: the instances admit exactly the
/// limit, however many requests they refuse with 503 on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_sliding_log_under_load_admits_exactly_its_limit() {
    let server = RedisServer::start();
    let mut apps = Vec::new();
    for _ in 0..4 {
        let store = RedisStore::builder(server.url())
            .prefix("log-flood")
            .connect()
            .await
            .unwrap();
        let layer = RateLimitLayer::builder()
            .quota("api", "5000/min".parse::<Quota>().unwrap())
            .algorithm(Algorithm::SlidingLog)
            .key(GlobalKey)
            .store(store)
            .on_store_error(OnStoreError::Closed)
            .build();
        apps.push(behind(layer));
    }
    // 64 tasks, 125 requests each: 8,000 requests for 5,000 units.
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let mut app = apps[t % apps.len()].clone();
            tokio::spawn(async move {
                let mut counts = [0usize; 3];
                for _ in 0..125 {
                    match status(&mut app, Request::new(())).await {
                        StatusCode::OK => counts[0] += 1,
                        StatusCode::TOO_MANY_REQUESTS => counts[1] += 1,
                        StatusCode::SERVICE_UNAVAILABLE => counts[2] += 1,
                        other => panic!("unexpected status {other}"),
                    }
                }
                counts
            })
        })
        .collect();
    let mut totals = [0usize; 3];
    for task in tasks {
        for (total, n) in totals.iter_mut().zip(task.await.unwrap()) {
            *total += n;
        }
    }
    let [admitted, limited, unavailable] = totals;
    assert_eq!(admitted + limited + unavailable, 8_000);
    assert_eq!(admitted, 5_000, "limited {limited}, 503 {unavailable}");
}
