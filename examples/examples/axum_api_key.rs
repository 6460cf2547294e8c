//! A limit per API key, falling back to the client IP for requests without
//! one (they share nothing with keyed requests: an IP key and a byte key
//! never collide). The handler reads its remaining quota.
//!
//! `cargo run -p tollgate-examples --example axum_api_key`, then
//! `curl -H 'x-api-key: k1' localhost:3000/` and `curl localhost:3000/`

use axum::Router;
use axum::routing::get;
use tollgate::{HeaderKey, KeyExtractor, RateLimitInfo, RateLimitLayer, key_fn};
use tollgate_axum::ClientIp;
use tollgate_examples::serving::{ServeLimits, serve};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let api_key = HeaderKey::new("x-api-key");
    let client_ip = ClientIp::default();
    let key = key_fn(move |request| {
        api_key
            .extract(request)
            .or_else(|| client_ip.extract(request))
    });
    let layer = RateLimitLayer::builder()
        .quota("api", "60/min".parse().expect("a valid quota"))
        .key(key)
        .request_info(true)
        .build();
    let app = Router::new()
        .route(
            "/",
            // An Option: a request passed unchecked (say, while a store is
            // down and the layer fails open) carries no info.
            get(|info: Option<RateLimitInfo>| async move {
                match info {
                    Some(info) => format!(
                        "{} of {} requests left this minute\n",
                        info.remaining(),
                        info.limit()
                    ),
                    None => "not counted\n".to_owned(),
                }
            }),
        )
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // A header-read timeout, an idle timeout and a connection cap: the
    // server's defence against slow clients, which no rate limiter sees.
    serve(listener, app, ServeLimits::default()).await
}
