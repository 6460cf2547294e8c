//! Redis failures: a killed server, a restarted one, a stalled one. Every
//! request is answered within the store timeout (plus 50 ms) with the
//! configured behaviour, and limiting resumes by itself when Redis is back.

use http::{Request, StatusCode};
use std::time::{Duration, Instant};
use tollgate::store::{Fallback, Timeout};
use tollgate::{HeaderKey, MemoryStore, OnStoreError, RateLimitLayer, Store};
use tollgate_core::Quota;
use tollgate_redis::RedisStore;
use tollgate_tests::app::{App, behind};
use tollgate_tests::redis::RedisServer;
use tower::ServiceExt;

const TIMEOUT: Duration = Duration::from_millis(100);
const SLACK: Duration = Duration::from_millis(50);

fn app(store: impl Store, quota: &str, on_error: OnStoreError) -> App {
    let layer = RateLimitLayer::builder()
        .quota("api", quota.parse::<Quota>().unwrap())
        .key(HeaderKey::new("x-user"))
        .store(store)
        .store_timeout(TIMEOUT)
        .on_store_error(on_error)
        .build();
    behind(layer)
}

/// Sends one request for `user`; returns its status and how long it took.
async fn send(app: &App, user: &str) -> (StatusCode, Duration) {
    let request = Request::builder().header("x-user", user).body(()).unwrap();
    let started = Instant::now();
    let response = app.clone().oneshot(request).await.unwrap();
    (response.status(), started.elapsed())
}

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::builder(server.url())
        .reconnect_max_delay(Duration::from_millis(200))
        .connect()
        .await
        .unwrap()
}

/// Polls until Redis decides again for a fresh user under a 1-per-minute
/// limit (a second request is refused, which failing open never does);
/// returns how long that took.
async fn time_until_limiting_resumes(app: &App) -> Duration {
    let started = Instant::now();
    for attempt in 0.. {
        let user = format!("probe-{attempt}");
        let first = send(app, &user).await.0;
        let second = send(app, &user).await.0;
        if first == StatusCode::OK && second == StatusCode::TOO_MANY_REQUESTS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "limiting never resumed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_gets_the_configured_behaviour_within_the_timeout() {
    let behaviours = [
        ("open", OnStoreError::Open),
        ("closed", OnStoreError::Closed),
        // Decided by a memory store while Redis is away: a store wrapping
        // stores, with the timeout inside so that the fallback answers.
        ("fallback", OnStoreError::Closed),
    ];
    for (name, behaviour) in behaviours {
        let mut server = RedisServer::start();
        let redis = store(&server).await;
        let app = if name == "fallback" {
            let local = Fallback::new(Timeout::new(redis, TIMEOUT), MemoryStore::new());
            app(local, "5/min", behaviour)
        } else {
            app(redis, "5/min", behaviour)
        };
        // Load from four tasks; Redis dies in the middle of it.
        let load: Vec<_> = (0..4)
            .map(|task| {
                let app = app.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    for i in 0..40 {
                        seen.push(send(&app, &format!("user-{task}-{i}")).await);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    seen
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(150)).await;
        server.kill();
        for task in load {
            for (status, took) in task.await.unwrap() {
                assert!(took <= TIMEOUT + SLACK, "{name}: a request took {took:?}");
                assert!(
                    status == StatusCode::OK
                        || (name == "closed" && status == StatusCode::SERVICE_UNAVAILABLE),
                    "{name}: {status}"
                );
            }
        }
        // With Redis gone: open lets everything through, closed refuses
        // with 503, fallback limits in memory (5 per minute per user).
        let statuses: Vec<StatusCode> = {
            let mut statuses = Vec::new();
            for _ in 0..7 {
                let (status, took) = send(&app, "after").await;
                assert!(took <= TIMEOUT + SLACK, "{name}: a request took {took:?}");
                statuses.push(status);
            }
            statuses
        };
        let expected: Vec<StatusCode> = match name {
            "open" => vec![StatusCode::OK; 7],
            "closed" => vec![StatusCode::SERVICE_UNAVAILABLE; 7],
            _ => [
                vec![StatusCode::OK; 5],
                vec![StatusCode::TOO_MANY_REQUESTS; 2],
            ]
            .concat(),
        };
        assert_eq!(statuses, expected, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiting_resumes_within_two_seconds_of_a_restart() {
    let mut server = RedisServer::start();
    let app = app(store(&server).await, "1/min", OnStoreError::Open);
    assert!(time_until_limiting_resumes(&app).await < Duration::from_secs(1));
    server.kill();
    // Down for a while: requests fail open meanwhile.
    for _ in 0..5 {
        assert_eq!(send(&app, "while-down").await.0, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.restart();
    let resumed = time_until_limiting_resumes(&app).await;
    assert!(
        resumed < Duration::from_secs(2),
        "limiting resumed after {resumed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_times_out_without_a_pile_up() {
    let server = RedisServer::start();
    let app = app(store(&server).await, "1/min", OnStoreError::Open);
    assert!(time_until_limiting_resumes(&app).await < Duration::from_secs(1));
    // DEBUG SLEEP blocks the server (and this connection) for a second.
    let port = server.port();
    let stall =
        std::thread::spawn(move || tollgate_tests::redis::command(port, &["DEBUG", "SLEEP", "1"]));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stalled: Vec<_> = (0..100)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(async move { send(&app, &format!("stalled-{i}")).await })
        })
        .collect();
    for task in stalled {
        let (status, took) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "fails open");
        assert!(took <= TIMEOUT + SLACK, "a request took {took:?}");
    }
    assert!(stall.join().unwrap().starts_with("+OK"));
    // Once the server wakes, decisions come from Redis again, promptly.
    let resumed = time_until_limiting_resumes(&app).await;
    assert!(
        resumed < Duration::from_secs(2),
        "limiting resumed after {resumed:?}"
    );
    for i in 0..20 {
        let (_, took) = send(&app, &format!("after-{i}")).await;
        assert!(took < TIMEOUT, "a request after the stall took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_response_timeout_fails_a_call_on_its_own() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .response_timeout(Duration::from_millis(50))
        .connect()
        .await
        .unwrap();
    // The layer would wait 5 s; the client gives up after 50 ms, and the
    // request gets the fail-closed answer long before the layer's timeout.
    let layer = RateLimitLayer::builder()
        .quota("api", "1/min".parse::<Quota>().unwrap())
        .key(HeaderKey::new("x-user"))
        .store(store)
        .store_timeout(Duration::from_secs(5))
        .on_store_error(OnStoreError::Closed)
        .build();
    let app = behind(layer);
    let port = server.port();
    let stall =
        std::thread::spawn(move || tollgate_tests::redis::command(port, &["DEBUG", "SLEEP", "1"]));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, took) = send(&app, "someone").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(took < Duration::from_millis(500), "took {took:?}");
    stall.join().unwrap();
}

/// Requests answered by the fail-closed behaviour during a stall: once the
/// server wakes and runs their queued scripts, none of them charges, so the
/// key's whole budget is still there. (Before deadlines, every one of them
/// took a unit: the budget was gone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_made_after_the_layer_gave_up_charges_nothing() {
    let server = RedisServer::start();
    let app = app(store(&server).await, "10/min", OnStoreError::Closed);
    // The connection and the script are warm; the budget is untouched.
    assert_eq!(send(&app, "warm-up").await.0, StatusCode::OK);
    let port = server.port();
    let stall = std::thread::spawn(move || {
        tollgate_tests::redis::command(port, &["DEBUG", "SLEEP", "0.8"])
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stalled: Vec<_> = (0..30)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { send(&app, "victim").await })
        })
        .collect();
    for task in stalled {
        let (status, took) = task.await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "fails closed");
        assert!(took <= TIMEOUT + SLACK, "a request took {took:?}");
    }
    assert!(stall.join().unwrap().starts_with("+OK"));
    // The server has run the 30 queued scripts by the time it answers this.
    let mut statuses = Vec::new();
    for _ in 0..11 {
        statuses.push(send(&app, "victim").await.0);
    }
    let expected = [
        vec![StatusCode::OK; 10],
        vec![StatusCode::TOO_MANY_REQUESTS],
    ]
    .concat();
    assert_eq!(statuses, expected, "the whole budget is left");
}

/// Redis restarted between two requests (killed, started again on its
/// port, answering before the next request): the first request after it
/// is decided by Redis on a fresh connection, under a fail-closed layer
/// (never a 503 while Redis is back), every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_after_a_restart_is_decided_by_redis() {
    let mut server = RedisServer::start();
    let app = app(store(&server).await, "2/min", OnStoreError::Closed);
    for round in 0..5 {
        let user = format!("user-{round}");
        assert_eq!(send(&app, &user).await.0, StatusCode::OK, "round {round}");
        server.restart();
        // Redis restarted empty: the user's count starts again.
        let statuses = [
            send(&app, &user).await.0,
            send(&app, &user).await.0,
            send(&app, &user).await.0,
        ];
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS
            ],
            "round {round}: the requests after the restart"
        );
    }
}
