//! The layer unchanged under axum: `Router::layer`, `route_layer`, a custom
//! rejection, a boxed store, and the peer address over real TCP.

mod common;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use std::net::SocketAddr;
use tollgate::store::BoxStore;
use tollgate::{GlobalKey, MemoryStore, PeerAddr, PeerIp, RateLimitLayer, Rejection};
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
        .on_rejection(|rejection: Rejection<'_>| {
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
