//! One limit shared by every instance of an app: the counters live in
//! Redis, so two servers together admit what one would.
//!
//! Start Redis (`redis-server`), then two instances:
//! `cargo run -p tollgate-examples --example axum_redis` and
//! `PORT=3001 cargo run -p tollgate-examples --example axum_redis`.
//! `for p in 3000 3001 3000 3001 3000 3001 3000; do curl -s -o /dev/null -w '%{http_code} ' localhost:$p/; done`
//! prints five 200s, then 429s: the instances share the 5 a minute.
//!
//! The Redis URL is the first argument, else `REDIS_URL`, else
//! `redis://127.0.0.1:6379`; `redis+cluster://host:port,host:port` for a
//! cluster. Without Redis the example stops with a message. Once running,
//! a Redis outage lets requests through (fail open, the default) until it
//! is back.

use axum::Router;
use axum::routing::get;
use std::process::ExitCode;
use tollgate::RateLimitLayer;
use tollgate_axum::ClientIp;
use tollgate_examples::serving::{self, ServeLimits};
use tollgate_redis::RedisStore;

/// The Redis URL: the first argument, `REDIS_URL`, or a local server.
fn redis_url() -> String {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("REDIS_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
}

/// Connects to Redis, then serves `/` on `PORT` (default 3000).
#[tokio::main]
async fn main() -> ExitCode {
    let url = redis_url();
    let store = match RedisStore::connect(url.as_str()).await {
        Ok(store) => store,
        Err(error) => {
            eprintln!(
                "cannot use Redis at {}: {error}",
                tollgate_redis::redacted(&url)
            );
            eprintln!("start one with `redis-server`, or pass its URL as the argument");
            return ExitCode::FAILURE;
        }
    };
    let limit = RateLimitLayer::builder()
        .quota("shared", "5/min".parse().expect("a valid quota"))
        .key(ClientIp::default())
        .store(store)
        .build();
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit);
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".to_owned());
    match listen(app, &format!("127.0.0.1:{port}")).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cannot serve on port {port}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Serves `app` on `addr` with the peer address, for the per-IP key.
async fn listen(app: Router, addr: &str) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // A header-read timeout, an idle timeout and a connection cap: the
    // server's defence against slow clients, which no rate limiter sees.
    serving::serve(listener, app, ServeLimits::default()).await
}
