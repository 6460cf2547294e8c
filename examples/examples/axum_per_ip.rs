//! A global limit per client IP: 10 requests a second, bursts of 20.
//!
//! Every response says so as a bucket of 20 that refills in 2 s, and how
//! much is left: `RateLimit-Policy: "per-ip";q=20;w=2`, then
//! `RateLimit: "per-ip";r=19;t=1` on the first request of a burst (19 left,
//! the next unit back within a second), `r=9;t=1` on the 11th.
//!
//! `cargo run -p tollgate-examples --example axum_per_ip`, then
//! `for i in $(seq 25); do curl -s -o /dev/null -w '%{http_code} ' localhost:3000/; done`

use axum::Router;
use axum::routing::get;
use tollgate::RateLimitLayer;
use tollgate::core::Quota;
use tollgate_axum::ClientIp;
use tollgate_examples::serving::{ServeLimits, serve};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let quota = Quota::per_second(10).with_burst(20).expect("a valid burst");
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        // The default ClientIp keys on the peer address and ignores proxy
        // headers: right for an app that faces the internet directly.
        .layer(
            RateLimitLayer::builder()
                .quota("per-ip", quota)
                .key(ClientIp::default())
                .build(),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // A header-read timeout, an idle timeout and a connection cap: the
    // server's defence against slow clients, which no rate limiter sees.
    serve(listener, app, ServeLimits::default()).await
}
