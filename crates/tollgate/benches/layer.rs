//! The cost of the layer in an axum `Router`, in process, beside
//! tower_governor with the same quota and the same key (the peer IP from
//! axum's `ConnectInfo`).
//!
//! Every row sends a `GET /` through the same router shape and awaits the
//! response; `no-layer` is the baseline, so the layer's added cost is a row
//! minus the baseline. Rows come in pairs: without rate-limit headers on
//! allowed responses (tower_governor's default), and with them (tollgate's
//! default: the IETF draft's two fields; tower_governor's `use_headers`: its
//! x-ratelimit fields). The allowed rows use a quota no request exhausts; the
//! rejected rows one that every request after the first exceeds.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tollgate::{HeaderStyle, PeerIp, RateLimitLayer};
use tollgate_core::Quota;
use tower::{Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

fn request() -> Request<Body> {
    let mut request = Request::builder().uri("/").body(Body::empty()).unwrap();
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([10, 0, 0, 1], 4000))));
    request
}

fn app() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

fn ours(quota: Quota, headers: HeaderStyle) -> Router {
    app().layer(
        RateLimitLayer::builder()
            .quota("api", quota)
            .key(PeerIp)
            .headers(headers)
            .build(),
    )
}

/// tower_governor with `burst` at once and one more every `interval`.
fn theirs(interval: Duration, burst: u32) -> Router {
    let config = GovernorConfigBuilder::default()
        .period(interval)
        .burst_size(burst)
        .finish()
        .unwrap();
    app().layer(GovernorLayer::new(Arc::new(config)))
}

/// The same, with its `x-ratelimit-limit/remaining` headers on every response.
fn theirs_with_headers(interval: Duration, burst: u32) -> Router {
    let config = GovernorConfigBuilder::default()
        .period(interval)
        .burst_size(burst)
        .use_headers()
        .finish()
        .unwrap();
    app().layer(GovernorLayer::new(Arc::new(config)))
}

fn bench(c: &mut Criterion, group: &str, routers: Vec<(&str, Router)>, expect: u16) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group(group);
    for (name, router) in routers {
        // Warm the limiter (and, for the rejected rows, exhaust it).
        for _ in 0..2 {
            runtime.block_on(router.clone().oneshot(request())).unwrap();
        }
        let status = runtime
            .block_on(router.clone().oneshot(request()))
            .unwrap()
            .status();
        assert!(
            name == "no-layer" || status.as_u16() == expect,
            "{name}: {status}"
        );
        group.bench_function(name, |b| {
            let mut service = router.clone();
            b.to_async(&runtime).iter(|| {
                let future = service.call(request());
                async move { black_box(future.await.unwrap()) }
            })
        });
    }
    group.finish();
}

fn allowed(c: &mut Criterion) {
    let plenty = Quota::new(1_000_000_000, Duration::from_secs(1)).unwrap();
    bench(
        c,
        "layer-allowed",
        vec![
            ("no-layer", app()),
            (
                "tower_governor",
                theirs(Duration::from_nanos(1), 1_000_000_000),
            ),
            (
                "tower_governor-headers",
                theirs_with_headers(Duration::from_nanos(1), 1_000_000_000),
            ),
            ("tollgate", ours(plenty, HeaderStyle::default())),
            ("tollgate-no-headers", ours(plenty, HeaderStyle::NONE)),
        ],
        200,
    );
}

fn rejected(c: &mut Criterion) {
    let scarce = Quota::per_hour(1).with_burst(1).unwrap();
    bench(
        c,
        "layer-rejected",
        vec![
            ("no-layer", app()),
            ("tower_governor", theirs(Duration::from_secs(3600), 1)),
            (
                "tower_governor-headers",
                theirs_with_headers(Duration::from_secs(3600), 1),
            ),
            ("tollgate", ours(scarce, HeaderStyle::default())),
            ("tollgate-no-headers", ours(scarce, HeaderStyle::NONE)),
        ],
        429,
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = allowed, rejected
}
criterion_main!(benches);
