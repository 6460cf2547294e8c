//! The layer unchanged under axum: `Router::layer`, `route_layer`, a custom
//! rejection, a boxed store, and the peer address over real TCP.

mod common;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use std::net::SocketAddr;
use tollgate::store::BoxStore;
use tollgate::{GlobalKey, MemoryStore, PeerIp, RateLimitLayer, key::PeerAddr, rejection::Limited};
use tollgate_core::Quota;
use tower::ServiceExt;

async fn status(router: &Router, path: &str) -> StatusCode {
    let request = Request::builder().uri(path).body(Body::empty()).unwrap();
    router.clone().oneshot(request).await.unwrap().status()
}

#[tokio::test]
async fn router_layer_limits_every_route() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(2))
        .key(GlobalKey)
        .build();
    let router = Router::new()
        .route("/a", get(|| async { "a" }))
        .route("/b", get(|| async { "b" }))
        .layer(layer);
    assert_eq!(status(&router, "/a").await, StatusCode::OK);
    assert_eq!(status(&router, "/b").await, StatusCode::OK);
    assert_eq!(status(&router, "/a").await, StatusCode::TOO_MANY_REQUESTS);
    // Unknown routes are limited too under `layer` (the 404 is produced inside).
    assert_eq!(
        status(&router, "/nope").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn route_layer_limits_only_its_routes() {
    let login_limit = RateLimitLayer::builder()
        .quota("login", Quota::per_minute(1))
        .key(GlobalKey)
        .build();
    let router = Router::new()
        .route("/login", get(|| async { "login" }))
        .route_layer(login_limit)
        .route("/home", get(|| async { "home" }));
    assert_eq!(status(&router, "/login").await, StatusCode::OK);
    assert_eq!(
        status(&router, "/login").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    for _ in 0..3 {
        assert_eq!(status(&router, "/home").await, StatusCode::OK);
    }
}

#[tokio::test]
async fn a_custom_rejection_keeps_the_fields() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(1))
        .key(GlobalKey)
        .store(BoxStore::new(MemoryStore::new()))
        .reject_with(|rejection: Limited<'_>| {
            let mut response = http::Response::new(Body::from("slow down"));
            *response.status_mut() = rejection.status;
            *response.headers_mut() = rejection.headers;
            response
        })
        .build();
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    assert_eq!(status(&router, "/").await, StatusCode::OK);
    let request = Request::builder().uri("/").body(Body::empty()).unwrap();
    let response = router.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key("retry-after"));
    let body = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .unwrap();
    assert_eq!(&body[..], b"slow down");
}

#[tokio::test]
async fn peer_ip_keys_each_client_apart() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(1))
        .key(PeerIp)
        .build();
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let from = |ip: [u8; 4]| {
        let mut request = Request::builder().uri("/").body(Body::empty()).unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr(SocketAddr::from((ip, 4000))));
        request
    };
    let send = |r| router.clone().oneshot(r);
    assert_eq!(
        send(from([10, 0, 0, 1])).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        send(from([10, 0, 0, 1])).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(from([10, 0, 0, 2])).await.unwrap().status(),
        StatusCode::OK
    );
}

/// Served without connection info, `PeerIp` finds no address: the
/// requests share the missing-key limit, and the layer says so once, at
/// WARN, naming the fix; a second layer says so too, once.
#[test]
fn peer_ip_without_an_address_warns_once_per_layer_naming_the_fix() {
    let (logs, _guard) = tollgate_tests::logs::Captured::install();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let router = |limit| {
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(limit))
            .key(PeerIp)
            .build();
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer)
    };
    let bare = || Request::builder().uri("/").body(Body::empty()).unwrap();
    let (first, second) = (router(2), router(100));
    let statuses: Vec<StatusCode> = runtime.block_on(async {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(first.clone().oneshot(bare()).await.unwrap().status());
        }
        for _ in 0..2 {
            second.clone().oneshot(bare()).await.unwrap();
        }
        statuses
    });
    // Every client shares one limit: the third request is refused.
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let lines = logs.lines();
    let warnings: Vec<&String> = lines
        .iter()
        .filter(|line| line.starts_with("WARN") && line.contains("PeerIp"))
        .collect();
    assert_eq!(warnings.len(), 2, "{lines:#?}");
    assert!(
        warnings[0].contains("into_make_service_with_connect_info"),
        "{lines:#?}"
    );
}

/// Over real TCP on loopback: axum's `ConnectInfo<SocketAddr>` gives the key.
#[cfg(feature = "axum")]
#[tokio::test]
async fn peer_ip_from_axum_connect_info_over_tcp() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(2))
        .key(PeerIp)
        .build();
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let (addr, server) = common::serve_on_loopback(router).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(common::http_over_tcp(addr, "GET", "/").await.0);
    }
    server.abort();
    assert_eq!(statuses, [200, 200, 429]);
}

/// Over real HTTP, for every algorithm (the interval token bucket too): on
/// the first refusal the refusing limit's `t` is at most `Retry-After`, and
/// `r ≤ q` on every response (the property test in `header_fields.rs`
/// covers every quota, burst, cost and arrival pattern in process).
#[tokio::test]
async fn over_http_each_algorithms_fields_agree() {
    use tollgate::NamedLimit;
    use tollgate_core::{Algorithm, Limiter, Refill, TokenBucket};
    // Per second: the leaky bucket holds each request for its slot, a
    // third of a second here.
    let quota = Quota::per_second(3);
    let mut limiters: Vec<Limiter> = Algorithm::ALL
        .iter()
        .map(|&a| Limiter::new(a, quota))
        .collect();
    limiters.push(Limiter::TokenBucket(
        TokenBucket::new(quota).with_refill(Refill::Interval),
    ));
    for limiter in limiters {
        let layer = RateLimitLayer::builder()
            .limit(NamedLimit::new("api", quota).with_limiter(limiter))
            .key(GlobalKey)
            .build();
        let router = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer);
        let (addr, server) = common::serve_on_loopback(router).await;
        // At once, so that the leaky bucket's queue fills too.
        let tasks: Vec<_> = (0..8)
            .map(|_| tokio::spawn(common::http_over_tcp(addr, "GET", "/")))
            .collect();
        let mut refused = None;
        for task in tasks {
            let (status, head) = task.await.expect("a response");
            let number = |field: &str, key: &str| -> u64 {
                let line = head
                    .lines()
                    .find(|l| l.starts_with(&format!("{field}:")))
                    .unwrap_or_else(|| panic!("{field} in {head}"));
                let value = line.split_once(&format!("{key}=")).expect(key).1;
                value
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("a number")
            };
            assert!(
                number("ratelimit", "r") <= number("ratelimit-policy", "q"),
                "{head}"
            );
            if status == 429 && refused.is_none() {
                let retry_after: u64 = head
                    .lines()
                    .find_map(|l| l.strip_prefix("retry-after:"))
                    .and_then(|v| v.trim().parse().ok())
                    .expect("Retry-After");
                refused = Some((number("ratelimit", "t"), retry_after));
            }
        }
        let (t, retry_after) = refused.unwrap_or_else(|| panic!("{limiter:?} refused nothing"));
        assert!(
            t <= retry_after,
            "{limiter:?}: t {t} > Retry-After {retry_after}"
        );
        assert!(t >= 1, "{limiter:?}: something is spent, so t > 0");
        server.abort();
    }
}
