//! Costs known only once the response is over (`pay_after`, `Meter`,
//! `MeterLayer`): 500 units after each response against 1,000 a minute,
//! over real HTTP, for every algorithm (the third request refused with a
//! `Retry-After` that, honoured, is enough); a streamed body settles when
//! it ends, a dropped one when it goes; bytes counted; a cheaper response
//! gives back; nothing reported keeps the estimate; `charge_when` voids;
//! requests the layer does not charge still find a meter; the end of a
//! metered body waits for a settlement that lands later, at most the
//! store timeout; stores that cannot charge into debt refused when the
//! layer is built.

mod common;

use axum::body::Body;
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use common::{http_over_tcp, serve_on_loopback};
use http::{Request, StatusCode};
use http_body::{Body as HttpBody, Frame};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tollgate::pay_after::{Meter, MeterLayer};
use tollgate::store::{ChangeReply, Fallback, PolicyDebit, StoreWrapper};
use tollgate::{
    GlobalKey, Key, MemoryStore, Policy, RateLimitLayer, Store, StoreReply, settings::ChargeWhen,
};
use tollgate_core::{Algorithm, ManualClock, Quota};
use tower::ServiceExt;

const MINUTE: u64 = 60_000_000_000;

/// A store on a manual clock, a quarter into a minute (windows do not roll
/// over between requests a test sends together).
fn store_at_quarter_past() -> (MemoryStore<ManualClock>, ManualClock) {
    let clock = ManualClock::new(10 * MINUTE + MINUTE / 4);
    (MemoryStore::builder().clock(clock.clone()).build(), clock)
}

/// What `key` has left under `policy` now.
fn remaining(store: &MemoryStore<ManualClock>, policy: &Arc<Policy>) -> u64 {
    store.peek_now(policy, &Key::GLOBAL).merged().remaining()
}

/// The number in a `retry-after: N` line of a response head.
fn retry_after_secs(head: &str) -> u64 {
    head.lines()
        .find_map(|line| line.strip_prefix("retry-after: "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no retry-after in {head}"))
}

async fn generate(Extension(meter): Extension<Meter>) -> &'static str {
    meter.add(500);
    "tokens"
}

async fn five_hundred_units_after_each_response(algorithm: Algorithm) {
    let (store, clock) = store_at_quarter_past();
    let limit = RateLimitLayer::builder()
        .quota("tokens", Quota::per_minute(1_000))
        .algorithm(algorithm)
        .key(GlobalKey)
        .store(store.clone())
        .pay_after()
        .try_build()
        .unwrap();
    let policy = limit.policy().clone();
    let router = Router::new()
        .route("/generate", post(generate))
        .layer(MeterLayer::new())
        .layer(limit);
    let (addr, server) = serve_on_loopback(router).await;

    for request in 1..=2 {
        let (status, head) = http_over_tcp(addr, "POST", "/generate").await;
        assert_eq!(status, 200, "{algorithm}: request {request}: {head}");
    }
    assert_eq!(remaining(&store, &policy), 0, "{algorithm}: 1,000 charged");
    let (status, head) = http_over_tcp(addr, "POST", "/generate").await;
    assert_eq!(status, 429, "{algorithm}: the third request: {head}");
    assert!(
        head.contains("ratelimit: \"tokens\";r=0"),
        "{algorithm}: {head}"
    );
    let retry = retry_after_secs(&head);
    assert!(
        (1..=61).contains(&retry),
        "{algorithm}: retry after {retry} s"
    );

    // Honoured, it is enough.
    clock.advance(Duration::from_secs(retry));
    let (status, head) = http_over_tcp(addr, "POST", "/generate").await;
    assert_eq!(status, 200, "{algorithm}: after its Retry-After: {head}");
    server.abort();
}

#[tokio::test]
async fn five_hundred_units_against_a_thousand_a_minute_over_http() {
    // The leaky bucket shapes: it holds the third request until the debt
    // has drained (a minute) rather than refusing it; its debt is
    // property-tested in tollgate-core (tests/debts.rs).
    let not_shaping = |a: &Algorithm| *a != Algorithm::LeakyBucket;
    for algorithm in Algorithm::ALL.into_iter().filter(not_shaping) {
        five_hundred_units_after_each_response(algorithm).await;
    }
}

/// The layer under test over `store`: 100 a day, one key, pay after.
fn day_limit(
    store: &MemoryStore<ManualClock>,
) -> RateLimitLayer<GlobalKey, MemoryStore<ManualClock>> {
    RateLimitLayer::builder()
        .quota("units", Quota::per_day(100))
        .key(GlobalKey)
        .store(store.clone())
        .pay_after()
        .build()
}

async fn get_body(router: &Router, path: &str) -> (StatusCode, Bytes) {
    let request = Request::builder().uri(path).body(Body::empty()).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, body)
}

/// A streaming body of `chunks` chunks, each adding 3 units to `meter` as
/// it is sent (as a model's tokens would).
fn metered_stream(meter: Meter, chunks: usize) -> Body {
    Body::new(ChunkBody {
        meter,
        left: chunks,
    })
}

struct ChunkBody {
    meter: Meter,
    left: usize,
}

impl HttpBody for ChunkBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        self.left -= 1;
        self.meter.add(3);
        std::task::Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"chunk")))))
    }
}

/// `/stream` streams `chunks` chunks of 3 units each, behind a
/// `MeterLayer` and a day's limit of 100: the store, the app, its policy.
fn streaming_app(chunks: usize) -> (MemoryStore<ManualClock>, Router, Arc<Policy>) {
    let (store, _clock) = store_at_quarter_past();
    let limit = day_limit(&store);
    let policy = limit.policy().clone();
    let stream =
        move |Extension(meter): Extension<Meter>| async move { metered_stream(meter, chunks) };
    let router = Router::new()
        .route("/stream", get(stream))
        .layer(MeterLayer::new())
        .layer(limit);
    (store, router, policy)
}

#[tokio::test]
async fn a_streamed_body_settles_when_it_ends() {
    let (store, router, policy) = streaming_app(7);
    let (status, body) = get_body(&router, "/stream").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.len(), 7 * 5);
    assert_eq!(remaining(&store, &policy), 100 - 21, "7 chunks of 3 units");
}

#[tokio::test]
async fn a_body_dropped_midway_pays_for_what_was_sent() {
    let (store, router, policy) = streaming_app(1_000);
    let request = Request::builder()
        .uri("/stream")
        .body(Body::empty())
        .unwrap();
    let mut body = router.oneshot(request).await.unwrap().into_body();
    for _ in 0..4 {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx));
        assert!(frame.await.is_some());
    }
    assert_eq!(
        remaining(&store, &policy),
        99,
        "still running: the estimate"
    );
    drop(body); // the client is gone
    assert_eq!(remaining(&store, &policy), 100 - 12, "4 chunks of 3 units");
}

#[tokio::test]
async fn bytes_are_counted_when_asked() {
    let (store, _clock) = store_at_quarter_past();
    let limit = day_limit(&store);
    let policy = limit.policy().clone();
    let router = Router::new()
        .route("/page", get(|| async { "x".repeat(1_001) }))
        .layer(MeterLayer::new().count_bytes(100))
        .layer(limit);
    let (status, body) = get_body(&router, "/page").await;
    assert_eq!((status, body.len()), (StatusCode::OK, 1_001));
    assert_eq!(
        remaining(&store, &policy),
        100 - 11,
        "1,001 bytes, 100 a unit"
    );
}

#[tokio::test]
async fn the_reported_cost_replaces_the_estimate() {
    let (store, _clock) = store_at_quarter_past();
    let limit = RateLimitLayer::builder()
        .quota("units", Quota::per_day(100))
        .key(GlobalKey)
        .store(store.clone())
        .cost(|_| 10)
        .pay_after()
        .build();
    let policy = limit.policy().clone();
    let router = Router::new()
        .route(
            "/cheap",
            get(|Extension(meter): Extension<Meter>| async move {
                meter.set(2);
            }),
        )
        .route("/silent", get(|| async {}))
        .route(
            "/dear",
            get(|Extension(meter): Extension<Meter>| async move {
                meter.set(35);
            }),
        )
        .layer(limit);
    // No MeterLayer: settled when the response's head is ready.
    assert_eq!(get_body(&router, "/cheap").await.0, StatusCode::OK);
    assert_eq!(remaining(&store, &policy), 98, "10 estimated, 2 reported");
    assert_eq!(get_body(&router, "/silent").await.0, StatusCode::OK);
    assert_eq!(
        remaining(&store, &policy),
        88,
        "nothing reported: the estimate"
    );
    assert_eq!(get_body(&router, "/dear").await.0, StatusCode::OK);
    assert_eq!(remaining(&store, &policy), 53, "10 estimated, 35 reported");
}

#[tokio::test]
async fn a_response_that_does_not_count_pays_nothing() {
    let (store, _clock) = store_at_quarter_past();
    let limit = RateLimitLayer::builder()
        .quota("units", Quota::per_day(100))
        .key(GlobalKey)
        .store(store.clone())
        .charge_when(ChargeWhen::statuses("2xx").unwrap())
        .pay_after()
        .build();
    let policy = limit.policy().clone();
    let router = Router::new()
        .route(
            "/fails",
            get(|Extension(meter): Extension<Meter>| async move {
                meter.add(40);
                StatusCode::BAD_GATEWAY
            }),
        )
        .route(
            "/works",
            get(|Extension(meter): Extension<Meter>| async move {
                meter.add(40);
            }),
        )
        .layer(MeterLayer::new())
        .layer(limit);
    assert_eq!(get_body(&router, "/fails").await.0, StatusCode::BAD_GATEWAY);
    assert_eq!(remaining(&store, &policy), 100);
    assert_eq!(get_body(&router, "/works").await.0, StatusCode::OK);
    assert_eq!(remaining(&store, &policy), 60);
}

#[tokio::test]
async fn requests_the_layer_does_not_charge_still_find_a_meter() {
    let (store, _clock) = store_at_quarter_past();
    let limit = RateLimitLayer::builder()
        .quota("units", Quota::per_day(100))
        .key(GlobalKey)
        .store(store.clone())
        .allow(|request| request.uri.path() == "/free")
        .pay_after()
        .build();
    let policy = limit.policy().clone();
    let handler = |Extension(meter): Extension<Meter>| async move {
        meter.add(50);
    };
    let router = Router::new()
        .route("/free", get(handler))
        .layer(MeterLayer::new())
        .layer(limit);
    // Without the meter the extractor would answer 500.
    assert_eq!(get_body(&router, "/free").await.0, StatusCode::OK);
    assert_eq!(
        remaining(&store, &policy),
        100,
        "allow-listed: nothing charged"
    );
}

#[tokio::test]
async fn a_store_that_cannot_charge_into_debt_is_refused() {
    let store = Fallback::new(MemoryStore::new(), common::BrokenStore::Failing);
    let built = RateLimitLayer::builder()
        .quota("units", Quota::per_day(100))
        .store(store)
        .pay_after()
        .try_build();
    let error = built.expect_err("BrokenStore cannot refund").to_string();
    assert!(
        error.starts_with(
            "pay_after needs a store that gives charges back (`Store::refund`): `BrokenStore` \
             (in `Fallback<MemoryStore, BrokenStore>`)"
        ),
        "{error}"
    );
}

/// A memory store whose debits land `delay` after they are asked for, as
/// a networked store's do.
#[derive(Clone)]
struct SlowDebits {
    store: MemoryStore<ManualClock>,
    delay: Duration,
}

impl StoreWrapper for SlowDebits {
    type Inner = MemoryStore<ManualClock>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<tollgate::PolicyDecision, Infallible>>;

    fn inner(&self) -> &Self::Inner {
        &self.store
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
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Infallible> {
        self.store.check_within(policy, key, cost, within)
    }

    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: PolicyDebit) -> ChangeReply {
        let (store, delay) = (self.store.clone(), self.delay);
        let (policy, key) = (policy.clone(), key.clone());
        ChangeReply::Pending(Box::pin(async move {
            tokio::time::sleep(delay).await;
            store.debit_now(&policy, &key, debit.cost);
            true
        }))
    }
}

/// `/stream` (7 chunks of 3 units) behind a `MeterLayer` and a day's
/// limit of 100 over a store whose debits land `delay` late.
fn slow_debit_app(
    delay: Duration,
    store_timeout: Duration,
) -> (MemoryStore<ManualClock>, Router, Arc<Policy>) {
    let (store, _clock) = store_at_quarter_past();
    let limit = RateLimitLayer::builder()
        .quota("units", Quota::per_day(100))
        .key(GlobalKey)
        .store(SlowDebits {
            store: store.clone(),
            delay,
        })
        .store_timeout(store_timeout)
        .pay_after()
        .build();
    let policy = limit.policy().clone();
    let stream = |Extension(meter): Extension<Meter>| async move { metered_stream(meter, 7) };
    let router = Router::new()
        .route("/stream", get(stream))
        .layer(MeterLayer::new())
        .layer(limit);
    (store, router, policy)
}

#[tokio::test]
async fn the_body_ends_once_its_settlement_has_landed() {
    let delay = Duration::from_millis(30);
    let (store, router, policy) = slow_debit_app(delay, Duration::from_secs(5));
    let started = std::time::Instant::now();
    let (status, _) = get_body(&router, "/stream").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        started.elapsed() >= delay,
        "the body ended before its debit"
    );
    assert_eq!(
        remaining(&store, &policy),
        100 - 21,
        "charged before the end"
    );
}

#[tokio::test]
async fn a_settlement_that_does_not_land_holds_the_body_only_for_the_store_timeout() {
    let timeout = Duration::from_millis(50);
    let (store, router, policy) = slow_debit_app(Duration::from_secs(3_600), timeout);
    let started = std::time::Instant::now();
    assert_eq!(get_body(&router, "/stream").await.0, StatusCode::OK);
    let waited = started.elapsed();
    assert!(waited >= timeout, "did not wait: {waited:?}");
    assert!(waited < Duration::from_secs(60), "held for {waited:?}");
    assert_eq!(remaining(&store, &policy), 99, "the debit has not landed");
}
