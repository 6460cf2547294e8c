//! Limits that count only some outcomes (`charge_when`): `/login` limited
//! to 3 failures a minute over real HTTP; every algorithm through the
//! layer, with a store that answers at once and one that answers later;
//! a refund that lands later holds the response until it lands, at most
//! the store timeout; and a store that cannot give charges back refused
//! when the layer is built.

mod common;

use axum::Router;
use axum::body::Body;
use axum::extract::RawQuery;
use axum::routing::{get, post};
use common::{Later, http_over_tcp, serve_on_loopback};
use http::{Request, StatusCode};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate::store::{ChangeReply, Fallback, PolicyRefund, StoreWrapper};
use tollgate::{
    GlobalKey, Key, MemoryStore, NamedLimit, Policy, RateLimitLayer, Store, StoreReply,
    settings::ChargeWhen,
};
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

/// The error names the feature, the store of the composition that cannot
/// give back, the composition, and the fix.
#[test]
fn a_store_that_cannot_give_back_fails_the_build() {
    let error = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(3))
        .store(Fallback::new(
            MemoryStore::new(),
            common::BrokenStore::Failing,
        ))
        .charge_when(ChargeWhen::statuses("4xx").unwrap())
        .try_build()
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with(
            "charge_when needs a store that gives charges back (`Store::refund`): \
             `BrokenStore` (in `Fallback<MemoryStore, BrokenStore>`) does not \
             say that it does. help: if `BrokenStore` wraps another store, implement \
             `StoreWrapper`"
        ),
        "{error}"
    );
}

/// A fallback of two stores that give back gives back to the one that
/// charged: the primary down, the secondary's charges of responses that
/// do not count (only 4xx count here) are given back to it, even when the
/// primary is back by the time the response is known; the primary up, the
/// secondary is never charged.
#[tokio::test]
async fn a_fallback_gives_back_to_the_store_that_charged() {
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let (primary, secondary) = (common::Outage::default(), MemoryStore::new());
        let app = statuses_app(Fallback::new(primary.clone(), secondary.clone()), algorithm);
        primary.set_down(true);
        for _ in 0..5 {
            assert_eq!(status_of(&app, 200).await, StatusCode::OK, "{algorithm}");
        }
        // Back before the response of this admission by the secondary.
        let back = Router::new().route(
            "/",
            get({
                let primary = primary.clone();
                move || async move {
                    primary.set_down(false);
                    StatusCode::OK
                }
            }),
        );
        let app_back = back.layer(statuses_layer(
            Fallback::new(primary.clone(), secondary.clone()),
            algorithm,
        ));
        let request = Request::get("/").body(Body::empty()).unwrap();
        assert_eq!(
            app_back.oneshot(request).await.unwrap().status(),
            StatusCode::OK
        );
        // Not one refund went to the primary, which never charged.
        assert!(
            primary.store.is_empty(),
            "{algorithm}: the primary was touched"
        );
        primary.set_down(true);
        three_failures_pass(&app, algorithm).await;

        let (primary, secondary) = (MemoryStore::new(), MemoryStore::new());
        let app = statuses_app(Fallback::new(primary.clone(), secondary.clone()), algorithm);
        for _ in 0..5 {
            assert_eq!(status_of(&app, 200).await, StatusCode::OK, "{algorithm}");
        }
        three_failures_pass(&app, algorithm).await;
        assert!(
            secondary.is_empty(),
            "{algorithm}: the secondary was charged"
        );
    }
}

fn login_limit(algorithm: Algorithm) -> NamedLimit {
    NamedLimit::new("login", Quota::per_minute(3)).with_algorithm(algorithm)
}

/// 3 a minute of the responses that count (4xx), by a global key, over
/// `store`.
fn statuses_layer<St: Store>(store: St, algorithm: Algorithm) -> RateLimitLayer<GlobalKey, St> {
    RateLimitLayer::builder()
        .limit(login_limit(algorithm))
        .key(GlobalKey)
        .store(store)
        .charge_when(ChargeWhen::statuses("4xx").unwrap())
        .build()
}

/// Three 401s pass, the fourth is refused: 3 a minute counting 4xx.
async fn three_failures_pass(app: &Router, algorithm: Algorithm) {
    for _ in 0..3 {
        let status = status_of(app, 401).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{algorithm}");
    }
    let fourth = status_of(app, 401).await;
    assert_eq!(fourth, StatusCode::TOO_MANY_REQUESTS, "{algorithm}");
}

/// [`statuses_layer`] over a router whose `/?status=N` answers N.
fn statuses_app<St: Store>(store: St, algorithm: Algorithm) -> Router {
    Router::new()
        .route(
            "/",
            get(|RawQuery(query): RawQuery| async move {
                let status = query
                    .as_deref()
                    .and_then(|q| q.strip_prefix("status="))
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(200);
                StatusCode::from_u16(status).unwrap_or(StatusCode::OK)
            }),
        )
        .layer(statuses_layer(store, algorithm))
}

/// The status `app` answers to `/?status=status`.
async fn status_of(app: &Router, status: u16) -> StatusCode {
    let request = Request::get(format!("/?status={status}"))
        .body(Body::empty())
        .unwrap();
    app.clone().oneshot(request).await.unwrap().status()
}

/// The memory store, whose refunds land `delay` after they are asked for
/// (as a store over the network answers `ChangeReply::Pending`).
#[derive(Clone)]
struct SlowRefunds {
    store: MemoryStore,
    delay: Duration,
}

impl StoreWrapper for SlowRefunds {
    type Inner = MemoryStore;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<tollgate::PolicyDecision, Self::Error>>;

    fn inner(&self) -> &MemoryStore {
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
    ) -> StoreReply<Self::Future, Self::Error> {
        self.store.check_within(policy, key, cost, within)
    }

    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        let (store, delay) = (self.store.clone(), self.delay);
        let (policy, key) = (policy.clone(), key.clone());
        ChangeReply::Pending(Box::pin(async move {
            tokio::time::sleep(delay).await;
            store.refund(&policy, &key, refund).landed().await
        }))
    }
}

/// One a day, only 5xx counts: a router over `store`.
fn one_failure_a_day(store: SlowRefunds, store_timeout: Duration) -> Router {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_day(1))
        .key(GlobalKey)
        .store(store)
        .store_timeout(store_timeout)
        .charge_when(ChargeWhen::statuses("5xx").unwrap())
        .build();
    Router::new()
        .route("/ok", get(|| async { StatusCode::OK }))
        .layer(layer)
}

#[tokio::test]
async fn a_refunded_response_waits_for_its_refund_to_land() {
    let delay = Duration::from_millis(30);
    let store = SlowRefunds {
        store: MemoryStore::new(),
        delay,
    };
    let router = one_failure_a_day(store, Duration::from_secs(5));
    // Each response comes once its refund has landed, so the next request
    // of a limit of one finds the unit back.
    for i in 0..5 {
        let started = Instant::now();
        assert_eq!(status(&router, "/ok").await, StatusCode::OK, "request {i}");
        assert!(started.elapsed() >= delay, "request {i} did not wait");
    }
}

#[tokio::test]
async fn a_refund_that_does_not_land_holds_the_response_only_for_the_store_timeout() {
    let store = SlowRefunds {
        store: MemoryStore::new(),
        delay: Duration::from_secs(3_600),
    };
    let timeout = Duration::from_millis(50);
    let router = one_failure_a_day(store, timeout);
    let started = Instant::now();
    assert_eq!(status(&router, "/ok").await, StatusCode::OK);
    let waited = started.elapsed();
    assert!(
        waited >= timeout && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    // The charge stands meanwhile: the next request finds the limit spent.
    assert_eq!(status(&router, "/ok").await, StatusCode::TOO_MANY_REQUESTS);
}

/// `r` of the `RateLimit` field of `response`.
fn remaining_field(response: &http::Response<Body>) -> u64 {
    let field = response.headers()["ratelimit"].to_str().unwrap();
    let r = field.split(';').find_map(|p| p.strip_prefix("r=")).unwrap();
    r.parse().unwrap()
}

/// The documented figures: a response whose charge is given back reports
/// its admission (its `r` counts its own charge); the next response shows
/// the refund.
#[tokio::test]
async fn a_given_back_response_reports_its_admission_and_the_next_shows_the_refund() {
    let app = statuses_app(MemoryStore::new(), Algorithm::FixedWindow);
    // (x-status asked, status answered, r), 3 a minute counting 4xx.
    let expected = [
        (200, 200, 2), // charged: r counts it; given back as it leaves
        (200, 200, 2), // the first's refund shows: 3 left, this one charged
        (401, 401, 2), // counts
        (200, 200, 1),
        (401, 401, 1),
        (401, 401, 0),
        (401, 429, 0),
        (200, 429, 0),
    ];
    for (i, (asked, status, r)) in expected.into_iter().enumerate() {
        let request = Request::get(format!("/?status={asked}"))
            .body(Body::empty())
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status().as_u16(), status, "request {i}");
        assert_eq!(remaining_field(&response), r, "request {i}");
    }
}

/// A request whose client goes away before its response keeps its charge:
/// three abandoned requests spend a limit of 3, even of responses that
/// would not have counted.
#[tokio::test]
async fn a_request_whose_client_goes_away_keeps_its_charge() {
    let layer = statuses_layer(MemoryStore::new(), Algorithm::Gcra);
    let app = Router::new()
        .route("/hang", get(std::future::pending::<StatusCode>))
        .route("/", get(|| async { StatusCode::OK }))
        .layer(layer);
    for _ in 0..3 {
        let request = Request::get("/hang").body(Body::empty()).unwrap();
        let abandoned =
            tokio::time::timeout(Duration::from_millis(20), app.clone().oneshot(request));
        assert!(abandoned.await.is_err(), "the request hangs until dropped");
    }
    let request = Request::get("/").body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
}
