//! A site-wide limit per IP, and a much stricter one on the login route:
//! 5 attempts a minute per IP, answered as `application/problem+json`.
//!
//! `cargo run -p tollgate-examples --example axum_login`, then
//! `for i in $(seq 7); do curl -s -X POST localhost:3000/login; echo; done`

use axum::Router;
use axum::routing::{get, post};
use tollgate::RateLimitLayer;
use tollgate_axum::{ClientIp, ProblemJson};
use tollgate_examples::serving::{ServeLimits, serve};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let login_limit = RateLimitLayer::builder()
        .quota("login", "5/min".parse().expect("a valid quota"))
        .key(ClientIp::default())
        .rejector(ProblemJson)
        .build();
    let site_limit = RateLimitLayer::builder()
        .quota("site", "100/s".parse().expect("a valid quota"))
        .key(ClientIp::default())
        .build();
    let app = Router::new()
        .route("/login", post(|| async { "welcome\n" }))
        // route_layer: only the routes above get the login limit.
        .route_layer(login_limit)
        .route("/", get(|| async { "home\n" }))
        .layer(site_limit);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // A header-read timeout, an idle timeout and a connection cap: the
    // server's defence against slow clients, which no rate limiter sees.
    serve(listener, app, ServeLimits::default()).await
}
