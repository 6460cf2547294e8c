//! An app behind a load balancer in 10.0.0.0/8 (or on this machine): the
//! client is the right-most address in `X-Forwarded-For` that
//! the trusted proxies did not write. A client's own forged header changes
//! nothing.
//!
//! `cargo run -p tollgate-examples --example axum_behind_proxy`, then (as
//! if from the proxy on 127.0.0.1)
//! `curl -H 'x-forwarded-for: 6.6.6.6, 203.0.113.7' localhost:3000/`
//! is counted for 203.0.113.7.

use axum::Router;
use axum::routing::get;
use tollgate::RateLimitLayer;
use tollgate_axum::ClientIp;
use tollgate_examples::serving::{ServeLimits, serve};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let client_ip = ClientIp::trusting([
        "10.0.0.0/8".parse().expect("a valid network"),
        "127.0.0.1/32".parse().expect("a valid network"),
    ]);
    let layer = RateLimitLayer::builder()
        .quota("per-client", "5/min".parse().expect("a valid quota"))
        .key(client_ip)
        .build();
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // A header-read timeout, an idle timeout and a connection cap: the
    // server's defence against slow clients, which no rate limiter sees.
    serve(listener, app, ServeLimits::default()).await
}
