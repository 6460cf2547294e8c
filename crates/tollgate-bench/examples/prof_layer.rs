//! Profiling aid: the allowed path of the layer scenario in a loop, for
//! `perf record`, `valgrind --tool=callgrind` or timing whole processes.
//!
//! `cargo run --release -p tollgate-bench --example prof_layer -- VARIANT [N]`:
//! VARIANT is `bare` (no layer), `empty` (a layer that does nothing:
//! axum's share of any layer), `none` (tollgate, no headers), `draft`
//! (tollgate's default headers), `gov` or `govh` (tower_governor without and
//! with its headers); three rounds of N requests (default 5,000,000), through
//! the scenario's own routers. `sizes` prints the size of each layer's
//! response future around a 1-byte inner future instead.
use axum::body::Body;
use http::Request;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;
use tollgate::{PeerIp, RateLimitLayer, headers::HeaderStyle};
use tollgate_bench::scenario::layer::{Path, Variant, request, router};
use tower::{Layer, Service};

fn main() -> ExitCode {
    let which = std::env::args().nth(1).unwrap_or_else(|| "none".into());
    let n = match std::env::args().nth(2).map(|s| s.parse::<u64>()) {
        None => 5_000_000,
        Some(Ok(n)) => n,
        Some(Err(error)) => return usage(&format!("N: {error}")),
    };
    let variant = match which.as_str() {
        "bare" => Variant::NoLayer,
        "empty" => Variant::EmptyLayer,
        "none" => Variant::Tollgate(HeaderStyle::NONE),
        "draft" => Variant::Tollgate(HeaderStyle::DRAFT),
        "gov" => Variant::TowerGovernor(false),
        "govh" => Variant::TowerGovernor(true),
        "sizes" => {
            print_future_sizes();
            return ExitCode::SUCCESS;
        }
        other => return usage(&format!("unknown variant {other:?}")),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let mut service = router(variant, Path::Allowed).with_state::<()>(());
        // The first request alone: what a process's first caller waits
        // (a clock set up at its first reading would show here).
        let start = Instant::now();
        black_box(service.call(request()).await.expect("infallible"));
        println!(
            "{which}: first request {:.1} µs",
            start.elapsed().as_secs_f64() * 1e6
        );
        for _ in 0..3 {
            let start = Instant::now();
            for _ in 0..n {
                black_box(service.call(request()).await.expect("infallible"));
            }
            println!(
                "{which}: {:.1} ns/request",
                start.elapsed().as_nanos() as f64 / n as f64
            );
        }
    });
    ExitCode::SUCCESS
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("prof_layer: {problem}\nusage: prof_layer bare|empty|none|draft|gov|govh|sizes [N]");
    ExitCode::from(2)
}

/// The layers' own share of a response future: each around the same 1-byte
/// inner future.
fn print_future_sizes() {
    let inner = tower::service_fn(|_: Request<Body>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Body::empty()))
    });
    let quota = "1000/s".parse().expect("a valid quota");
    let mut tollgate = RateLimitLayer::builder()
        .quota("api", quota)
        .key(PeerIp)
        .build()
        .layer(inner);
    let config = tower_governor::governor::GovernorConfigBuilder::default()
        .finish()
        .expect("a valid config");
    let mut governor = tower_governor::GovernorLayer::new(std::sync::Arc::new(config)).layer(inner);
    println!(
        "future sizes: tollgate {} tower_governor {} inner {}",
        std::mem::size_of_val(&tollgate.call(request())),
        std::mem::size_of_val(&governor.call(request())),
        std::mem::size_of_val(&inner.clone().call(request())),
    );
}
