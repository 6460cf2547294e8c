//! Profiling aid: the allowed path of the layer scenario in a loop, for
//! `perf record`, `valgrind --tool=callgrind` or timing whole processes.
//!
//! `cargo run --release -p tollgate-bench --example prof_layer -- VARIANT [N]`:
//! VARIANT is `bare` (no layer), `none` (tollgate, no headers), `draft`
//! (tollgate's default headers), `gov` or `govh` (tower_governor without and
//! with its headers); three rounds of N requests (default 5,000,000).
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::Request;
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tollgate::{HeaderStyle, PeerIp, RateLimitLayer};
use tollgate_core::Quota;
use tower::Service;

fn request() -> Request<Body> {
    let mut request = Request::builder().uri("/").body(Body::empty()).unwrap();
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([10, 0, 0, 1], 4000))));
    request
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "none".into());
    let n: u64 = std::env::args()
        .nth(2)
        .map_or(5_000_000, |s| s.parse().unwrap());
    let quota = Quota::new(1_000_000_000, Duration::from_secs(1)).unwrap();
    let app = || Router::new().route("/", get(|| async { "ok" }));
    let router = match which.as_str() {
        "bare" => app(),
        "draft" => app().layer(
            RateLimitLayer::builder()
                .quota("api", quota)
                .key(PeerIp)
                .build(),
        ),
        "govh" => {
            let config = tower_governor::governor::GovernorConfigBuilder::default()
                .period(Duration::from_nanos(1))
                .burst_size(1_000_000_000)
                .use_headers()
                .finish()
                .unwrap();
            app().layer(tower_governor::GovernorLayer::new(std::sync::Arc::new(
                config,
            )))
        }
        "gov" => {
            let config = tower_governor::governor::GovernorConfigBuilder::default()
                .period(Duration::from_nanos(1))
                .burst_size(1_000_000_000)
                .finish()
                .unwrap();
            app().layer(tower_governor::GovernorLayer::new(std::sync::Arc::new(
                config,
            )))
        }
        _ => app().layer(
            RateLimitLayer::builder()
                .quota("api", quota)
                .key(PeerIp)
                .headers(HeaderStyle::NONE)
                .build(),
        ),
    };
    {
        use tower::Layer;
        // The layers' own share of the future: around a 1-byte inner future.
        let inner = tower::service_fn(|_r: Request<Body>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::empty()))
        });
        let mut t = RateLimitLayer::builder()
            .quota("api", quota)
            .key(PeerIp)
            .headers(HeaderStyle::NONE)
            .build()
            .layer(inner);
        let config = tower_governor::governor::GovernorConfigBuilder::default()
            .finish()
            .unwrap();
        let mut g = tower_governor::GovernorLayer::new(std::sync::Arc::new(config)).layer(inner);
        let ft = t.call(request());
        let fg = g.call(request());
        let fi = inner.clone().call(request());
        println!(
            "future sizes: tollgate {} governor {} inner {}",
            std::mem::size_of_val(&ft),
            std::mem::size_of_val(&fg),
            std::mem::size_of_val(&fi)
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut service = router.with_state::<()>(());
        for _ in 0..3 {
            let start = Instant::now();
            for _ in 0..n {
                black_box(service.call(request()).await.unwrap());
            }
            println!(
                "{which}: {:.1} ns/request",
                start.elapsed().as_nanos() as f64 / n as f64
            );
        }
    });
}
