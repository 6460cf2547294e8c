//! Limits that count only some outcomes (`charge_when`): `/login` limited
//! to 3 failures a minute over real HTTP; every algorithm through the
//! layer, with a store that answers at once and one that answers later;
//! and a store that cannot give charges back refused when the layer is
//! built.

mod common;

use axum::Router;
use axum::body::Body;
use axum::extract::RawQuery;
use axum::routing::{get, post};
use common::{Later, http_over_tcp, serve_on_loopback};
use http::{Request, StatusCode};
use tollgate::store::Fallback;
use tollgate::{ChargeWhen, GlobalKey, MemoryStore, RateLimitLayer, Store};
use tollgate_core::{Algorithm, Quota};
use tower::ServiceExt;

/// `/login?ok` succeeds; any other `/login` is a wrong password (401).
async fn login(RawQuery(query): RawQuery) -> StatusCode {
    if query.as_deref() == Some("ok") {
        StatusCode::OK
    } else {
        StatusCode::UNAUTHORIZED
    }
}

#[tokio::test]
async fn login_counts_three_failures_a_minute_over_http() {
    let failures = RateLimitLayer::builder()
        .quota("login", Quota::per_minute(3))
        .key(GlobalKey)
        .charge_when(ChargeWhen::statuses("401,403").unwrap())
        .build();
    let router = Router::new().route("/login", post(login)).layer(failures);
    let (addr, server) = serve_on_loopback(router).await;
    let post = |path: &'static str| http_over_tcp(addr, "POST", path);

    // Any number of successful logins pass.
    for _ in 0..20 {
        assert_eq!(post("/login?ok").await.0, 200);
    }
    // Two failures count; successes in between still pass.
    assert_eq!(post("/login").await.0, 401);
    assert_eq!(post("/login").await.0, 401);
    for _ in 0..5 {
        assert_eq!(post("/login?ok").await.0, 200);
    }
    // The third failure is the last the limit allows; the fourth is
    // refused before it reaches the handler.
    assert_eq!(post("/login").await.0, 401);
    let (status, head) = post("/login").await;
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("retry-after:"), "{head}");
    // Now every attempt waits: whether it would fail is not known before
    // it runs.
    assert_eq!(post("/login?ok").await.0, 429);
    server.abort();
}

async fn status(router: &Router, path: &str) -> StatusCode {
    let request = Request::builder().uri(path).body(Body::empty()).unwrap();
    router.clone().oneshot(request).await.unwrap().status()
}

/// `/ok` answers 200, `/fail` 500; only 5xx counts; limit 4 (a day, so
/// nothing refills): any number of `/ok`, then 4 failures, then refused.
async fn only_failures_count<St: Store>(store: St, algorithm: Algorithm) {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_day(4))
        .algorithm(algorithm)
        .key(GlobalKey)
        .store(store)
        .charge_when(ChargeWhen::statuses("5xx").unwrap())
        .try_build()
        .unwrap();
    let router = Router::new()
        .route("/ok", get(|| async { StatusCode::OK }))
        .route("/fail", get(|| async { StatusCode::INTERNAL_SERVER_ERROR }))
        .layer(layer);
    for _ in 0..30 {
        assert_eq!(status(&router, "/ok").await, StatusCode::OK, "{algorithm}");
    }
    let mut failures = 0;
    while status(&router, "/fail").await == StatusCode::INTERNAL_SERVER_ERROR {
        failures += 1;
        assert!(failures <= 10, "{algorithm}: failures never limited");
    }
    // The leaky bucket admits one more than its burst (its docs); the
    // others exactly the limit.
    let limit = if algorithm == Algorithm::LeakyBucket {
        4..=5
    } else {
        4..=4
    };
    assert!(
        limit.contains(&failures),
        "{algorithm}: {failures} failures counted"
    );
    assert_eq!(
        status(&router, "/ok").await,
        StatusCode::TOO_MANY_REQUESTS,
        "{algorithm}"
    );
}

#[tokio::test]
async fn every_algorithm_gives_back_what_does_not_count() {
    // The leaky bucket shapes: past its burst it holds a request for its
    // slot (hours, at 4 a day) rather than refusing it; its refunds are
    // property-tested in tollgate-core.
    let not_shaping = |a: &Algorithm| *a != Algorithm::LeakyBucket;
    for algorithm in Algorithm::ALL.into_iter().filter(not_shaping) {
        only_failures_count(MemoryStore::new(), algorithm).await;
        // A store that answers later: the layer's waiting path.
        only_failures_count(Later(MemoryStore::new()), algorithm).await;
    }
}

#[test]
fn a_store_that_cannot_give_back_fails_the_build() {
    let error = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(3))
        .store(Fallback::new(MemoryStore::new(), MemoryStore::new()))
        .charge_when(ChargeWhen::statuses("4xx").unwrap())
        .try_build()
        .unwrap_err();
    assert!(error.to_string().contains("charge_when"), "{error}");
}
