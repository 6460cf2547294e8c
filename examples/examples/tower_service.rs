//! tollgate on a plain tower `Service`, no axum and no server: the same
//! layer in front of any `Service<http::Request<_>>` (hyper, a proxy, a
//! test double). Runs by itself and prints each decision.
//!
//! `cargo run -p tollgate-examples --example tower_service`

use http::{Request, Response};
use std::convert::Infallible;
use tollgate::{HeaderKey, RateLimitLayer};
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// The service being protected: answers every request with `ok`.
async fn handle(_request: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

/// Sends five requests for client `a` and two for `b` through a limit of
/// three a minute per client, and prints what each got.
#[tokio::main]
async fn main() {
    let layer = RateLimitLayer::builder()
        .quota("api", "3/min".parse().expect("a valid quota"))
        // No connection here to take a peer address from: key on a header.
        .key(HeaderKey::new("x-client"))
        .build();
    let service = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(handle));
    for client in ["a", "a", "a", "a", "a", "b", "b"] {
        let request = Request::builder()
            .header("x-client", client)
            .body(())
            .expect("a valid request");
        // Clones share the counters, so each oneshot sees the ones before.
        let response = service.clone().oneshot(request).await.expect("infallible");
        let field = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        println!(
            "client {client}: {} RateLimit: {} Retry-After: {}",
            response.status(),
            field("ratelimit"),
            field("retry-after"),
        );
    }
}
