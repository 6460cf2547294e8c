//! In-flight limits in Redis (`tollgate_redis::RedisSlots`), on a real
//! redis-server: two instances sharing one limit never run more than it
//! between them; the lease is what the docs say and is renewed while a
//! request runs; the slots of an instance that died come back after the
//! lease, and not before; a slot taken by an answer that came too late is
//! given back; a Redis that is away gets the configured behaviour.

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tollgate::in_flight::{Acquired, InFlightLayer, InFlightLimit, SlotReply, Slots};
use tollgate::{HeaderKey, Key, OnStoreError};
use tollgate_redis::{RedisPermit, RedisSlots};
use tollgate_tests::redis::RedisServer;
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt, service_fn};

/// How long any one wait may take before a test fails.
const STEP: Duration = Duration::from_secs(15);

type App = BoxCloneSyncService<Request<()>, StatusCode, Infallible>;

/// Requests running in the handlers of every instance now, and the most at
/// once.
#[derive(Clone, Default)]
struct Gauge {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

/// An instance: a handler that counts itself in `gauge` for `hold`, behind
/// an in-flight limit of `limit` per `x-key` in `slots`. The response body
/// (which holds the slot) is dropped when the call returns its status.
fn instance(slots: RedisSlots, limit: u32, wait: Option<Duration>, gauge: &Gauge) -> App {
    let gauge = gauge.clone();
    let handler = service_fn(move |request: Request<()>| {
        let gauge = gauge.clone();
        async move {
            let now = gauge.running.fetch_add(1, Ordering::SeqCst) + 1;
            gauge.most.fetch_max(now, Ordering::SeqCst);
            let hold = request
                .headers()
                .get("x-hold-ms")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(hold)).await;
            gauge.running.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, Infallible>(Response::new(String::new()))
        }
    });
    let mut builder = InFlightLayer::builder()
        .max_in_flight(limit)
        .key(HeaderKey::new("x-key"))
        .slots(slots)
        .store_timeout(Duration::from_secs(2));
    if let Some(wait) = wait {
        builder = builder.max_delay(wait);
    }
    let service = builder
        .build()
        .layer(handler)
        .map_response(|response| response.status());
    BoxCloneSyncService::new(service)
}

async fn send(app: &App, key: &str, hold_ms: u64) -> StatusCode {
    let request = Request::builder()
        .header("x-key", key)
        .header("x-hold-ms", hold_ms.to_string())
        .body(())
        .unwrap();
    app.clone().oneshot(request).await.unwrap()
}

async fn slots(server: &RedisServer, lease: Duration) -> RedisSlots {
    RedisSlots::builder(server.url())
        .lease(lease)
        .connect()
        .await
        .expect("connect to redis-server")
}

/// The bulk strings and integers of a RESP reply, in order.
fn values(reply: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = reply.split("\r\n");
    while let Some(line) = lines.next() {
        if let Some(int) = line.strip_prefix(':') {
            out.push(int.to_owned());
        } else if line.starts_with('$') && line != "$-1" {
            out.push(lines.next().unwrap_or_default().to_owned());
        }
    }
    out
}

/// The server's clock in ms.
fn server_ms(server: &RedisServer) -> i64 {
    let time = values(&server.command(&["TIME"]));
    time[0].parse::<i64>().unwrap() * 1000 + time[1].parse::<i64>().unwrap() / 1000
}

/// Takes a slot, which must be free.
async fn take(slots: &RedisSlots, limit: &InFlightLimit, key: &Key) -> RedisPermit {
    match answer(slots, limit, key).await {
        Acquired::Taken { permit, .. } => permit,
        Acquired::Full { in_flight } => panic!("full, with {in_flight} held"),
    }
}

async fn answer(slots: &RedisSlots, limit: &InFlightLimit, key: &Key) -> Acquired<RedisPermit> {
    match slots.acquire(limit, key) {
        SlotReply::Pending(future) => future.await.expect("Redis answers"),
        SlotReply::Ready(answer) => answer.expect("Redis answers"),
    }
}

/// Polls until `key` has `n` slots held; fails after `STEP`.
async fn wait_for_held(slots: &RedisSlots, limit: &InFlightLimit, key: &Key, n: u32) {
    let deadline = Instant::now() + STEP;
    loop {
        let held = slots.in_flight(limit, key).await.expect("Redis answers");
        if held == n {
            return;
        }
        assert!(Instant::now() < deadline, "{held} held, not {n}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_never_run_more_than_the_limit_between_them() {
    let server = RedisServer::start();
    let gauge = Gauge::default();
    let a = instance(
        slots(&server, Duration::from_secs(30)).await,
        5,
        None,
        &gauge,
    );
    let b = instance(
        slots(&server, Duration::from_secs(30)).await,
        5,
        None,
        &gauge,
    );
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let app = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { send(&app, "alice", 500).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    let passed = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(passed + refused, 100, "{statuses:?}");
    let most = gauge.most.load(Ordering::SeqCst);
    assert!(most <= 5, "{most} ran at once");
    assert_eq!(most, 5, "the limit was reached");
    assert!(passed >= 5, "{passed} passed");
    // Every slot was given back: the key's set is gone.
    let limit = InFlightLimit::new("inflight", 5).unwrap();
    let probe = slots(&server, Duration::from_secs(30)).await;
    wait_for_held(&probe, &limit, &Key::from("alice"), 0).await;
    let name = probe.redis_key(&limit, &Key::from("alice"));
    assert_eq!(values(&server.command(&["EXISTS", &name])), ["0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_over_redis_every_request_passes_and_never_more_than_the_limit() {
    let server = RedisServer::start();
    let gauge = Gauge::default();
    let wait = Some(Duration::from_secs(60));
    let a = instance(
        slots(&server, Duration::from_secs(30)).await,
        5,
        wait,
        &gauge,
    );
    let b = instance(
        slots(&server, Duration::from_secs(30)).await,
        5,
        wait,
        &gauge,
    );
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let app = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { send(&app, "alice", 20).await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    let most = gauge.most.load(Ordering::SeqCst);
    assert!(most <= 5, "{most} ran at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_is_taken_for_the_lease_the_docs_give_and_the_set_expires_with_it() {
    let server = RedisServer::start();
    // The default is what the docs say.
    let default = RedisSlots::connect(server.url()).await.unwrap();
    assert_eq!(default.lease(), Duration::from_secs(30));
    assert_eq!(RedisSlots::DEFAULT_LEASE, Duration::from_secs(30));
    assert_eq!(default.renew_every(), Duration::from_secs(10));
    assert_eq!(RedisSlots::DEFAULT_POLL_INTERVAL, Duration::from_millis(50));
    assert_eq!(RedisSlots::MIN_LEASE, Duration::from_millis(100));
    let limit = InFlightLimit::new("inflight", 2).unwrap();
    let key = Key::from("alice");
    let before = server_ms(&server);
    let permit = take(&default, &limit, &key).await;
    let after = server_ms(&server);
    let name = default.redis_key(&limit, &key);
    assert_eq!(name, "tollgate:{alice}:inflight:inflight");
    let members = values(&server.command(&["ZRANGE", &name, "0", "-1", "WITHSCORES"]));
    assert_eq!(members.len(), 2, "{members:?}");
    assert_eq!(members[0], permit.id());
    let ends: i64 = members[1].parse().unwrap();
    // The lease ends 30 s after the slot was taken, on the server's clock.
    assert!(
        (before + 30_000..=after + 30_000).contains(&ends),
        "{before} {ends} {after}"
    );
    let ttl: i64 = values(&server.command(&["PTTL", &name]))[0]
        .parse()
        .unwrap();
    assert!((29_000..=30_000).contains(&ttl), "{ttl}");
    drop(permit);
    wait_for_held(&default, &limit, &key, 0).await;
    assert_eq!(values(&server.command(&["EXISTS", &name])), ["0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_longer_than_its_lease_is_renewed_and_kept() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let slots = slots(&server, lease).await;
    let limit = InFlightLimit::new("inflight", 1).unwrap();
    let key = Key::from("long");
    let permit = take(&slots, &limit, &key).await;
    // Three leases later it is still held (renewed every 200 ms), so the
    // key is full.
    tokio::time::sleep(lease * 3).await;
    assert!(matches!(
        answer(&slots, &limit, &key).await,
        Acquired::Full { in_flight: 1 }
    ));
    let name = slots.redis_key(&limit, &key);
    let ends: i64 = values(&server.command(&["ZSCORE", &name, permit.id()]))[0]
        .parse()
        .unwrap();
    let left = ends - server_ms(&server);
    assert!((0..=600).contains(&left), "{left} ms of lease left");
    drop(permit);
    wait_for_held(&slots, &limit, &key, 0).await;
    drop(take(&slots, &limit, &key).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slots_of_an_instance_that_died_come_back_after_the_lease_and_not_before() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1_500);
    let limit = InFlightLimit::new("inflight", 2).unwrap();
    let key = Key::from("alice");
    // The instance that dies: its own runtime, gone with everything on it
    // (renewals, and the give-back its permits would have sent).
    let url = server.url();
    let (limit2, key2) = (limit.clone(), key.clone());
    let died_at = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let slots = RedisSlots::builder(url)
                .lease(lease)
                .connect()
                .await
                .unwrap();
            for _ in 0..2 {
                std::mem::forget(take(&slots, &limit2, &key2).await);
            }
            // Renewed a few times while it lived.
            tokio::time::sleep(lease).await;
        });
        let died_at = Instant::now();
        drop(runtime);
        died_at
    })
    .join()
    .unwrap();
    let survivor = slots(&server, lease).await;
    // Before the lease has passed, the dead instance's slots still count.
    assert!(matches!(
        answer(&survivor, &limit, &key).await,
        Acquired::Full { in_flight: 2 }
    ));
    assert!(
        died_at.elapsed() < lease,
        "the check came too late to mean anything"
    );
    // Within a lease (and a little) of its death, they are back.
    let deadline = died_at + lease + Duration::from_millis(500);
    let back = take_by(&survivor, &limit, &key, deadline).await;
    // Not before its last renewal's lease ended: it renewed every 500 ms
    // while it lived, the last time at most 500 ms before its death, so
    // its slots counted for at least 1 s after it (less a little: the
    // death is timed here, after the runtime stopped).
    assert!(
        died_at.elapsed() >= lease * 2 / 3 - Duration::from_millis(100),
        "back {:?} after the death",
        died_at.elapsed()
    );
    // Both: each slot was renewed on its own, so the second may come back
    // a little after the first (on a busy machine, found so).
    let _second = take_by(&survivor, &limit, &key, deadline).await;
    drop(back);
}

/// Takes a slot of `key` as soon as one is free; fails if none is by
/// `deadline`.
async fn take_by(
    slots: &RedisSlots,
    limit: &InFlightLimit,
    key: &Key,
    deadline: Instant,
) -> RedisPermit {
    loop {
        match answer(slots, limit, key).await {
            Acquired::Taken { permit, .. } => return permit,
            Acquired::Full { .. } => {
                assert!(
                    Instant::now() < deadline,
                    "not back a lease after the death"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_taken_by_an_answer_that_came_too_late_is_given_back() {
    let server = RedisServer::start();
    let slots = slots(&server, Duration::from_secs(30)).await;
    let limit = InFlightLimit::new("inflight", 1).unwrap();
    let key = Key::from("late");
    // The server stalls; the layer gives up after 100 ms and lets the
    // request through (fail open), without a slot.
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(HeaderKey::new("x-key"))
        .slots(slots.clone())
        .store_timeout(Duration::from_millis(100))
        .build();
    let app = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let zrem = |server: &RedisServer| {
        server
            .command_calls()
            .into_iter()
            .find(|(name, _)| name == "zrem")
            .map_or(0, |(_, calls)| calls)
    };
    // The scripts loaded first (a first call meets NOSCRIPT and is sent
    // again, which would let a later call overtake it), and a ZREM with it.
    drop(take(&slots, &limit, &Key::from("warm-up")).await);
    wait_for_held(&slots, &limit, &Key::from("warm-up"), 0).await;
    let deadline = Instant::now() + STEP;
    while zrem(&server) < 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let port = server.port();
    let stall = std::thread::spawn(move || {
        tollgate_tests::redis::command(port, &["DEBUG", "SLEEP", "3"]);
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let request = Request::builder().header("x-key", "late").body(()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(!response.body().holds_slot());
    // Well before the server wakes (3 s): the layer did not wait for it.
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(response);
    stall.join().unwrap();
    // The script ran when the server woke and took the slot; the task
    // that sent it gave it back, as nobody waited for it any more.
    let deadline = Instant::now() + STEP;
    while zrem(&server) < 2 {
        assert!(
            Instant::now() < deadline,
            "the late slot was never given back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_for_held(&slots, &limit, &key, 0).await;
    assert_eq!(zrem(&server), 2, "given back once");
    drop(take(&slots, &limit, &key).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_away_requests_get_the_configured_behaviour() {
    let mut server = RedisServer::start();
    let slots = slots(&server, Duration::from_secs(30)).await;
    server.kill();
    for (on_error, expected) in [
        (OnStoreError::Open, StatusCode::OK),
        (OnStoreError::Closed, StatusCode::SERVICE_UNAVAILABLE),
    ] {
        let layer = InFlightLayer::builder()
            .max_in_flight(1)
            .key(HeaderKey::new("x-key"))
            .slots(slots.clone())
            .on_store_error(on_error)
            .store_timeout(Duration::from_millis(200))
            .build();
        let app = layer.layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
        let started = Instant::now();
        let request = Request::builder().header("x-key", "k").body(()).unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), expected);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}

#[tokio::test]
async fn settings_that_cannot_work_are_refused() {
    let server = RedisServer::start();
    let short = RedisSlots::builder(server.url())
        .lease(Duration::from_millis(99))
        .connect()
        .await
        .unwrap_err();
    assert!(short.is_config(), "{short}");
    assert!(short.to_string().contains("lease"), "{short}");
    let brace = RedisSlots::builder(server.url())
        .prefix("a{b")
        .connect()
        .await
        .unwrap_err();
    assert!(brace.is_config(), "{brace}");
}
