//! A key extractor of your own: the API key when the request has one, else
//! the user an auth middleware put in the request's extensions, else the
//! client IP (anonymous visitors share their address's budget).
//!
//! `cargo run -p tollgate-examples --example axum_custom_key`, then
//! `curl -i -H 'x-api-key: k1' localhost:3000/` (counted for the key),
//! `curl -i -H 'authorization: Bearer user-7' localhost:3000/` (for user 7),
//! `curl -i localhost:3000/` (for 127.0.0.1). Each has its own 5 a minute.

use axum::Router;
use axum::extract::Request;
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use tollgate::{HeaderKey, Key, KeyExtractor, RateLimitLayer, key::RequestView};
use tollgate_axum::ClientIp;
use tollgate_examples::serving::{ServeLimits, serve};

/// The signed-in user, as the auth middleware found it.
#[derive(Clone, Copy, Debug)]
struct UserId(u64);

/// API key, then user, then client IP.
struct ApiKeyOrUser {
    api_key: HeaderKey,
    client_ip: ClientIp,
}

impl KeyExtractor for ApiKeyOrUser {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        // Tagged, so that API key "7" and user 7 are different budgets.
        if let Some(key) = self.api_key.extract(request) {
            return Some(Key::composite(&[Key::from("key"), key]));
        }
        if let Some(UserId(id)) = request.extensions.get::<UserId>() {
            return Some(Key::composite(&[Key::from("user"), Key::from(*id)]));
        }
        // An IP key never equals a byte key, so no tag is needed here.
        self.client_ip.extract(request)
    }
}

/// A stand-in for real authentication: `Authorization: Bearer user-<id>`
/// signs in as user `<id>`. A real app verifies a token here.
async fn auth(mut request: Request, next: Next) -> Response {
    let user = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer user-"))
        .and_then(|id| id.parse().ok());
    if let Some(id) = user {
        request.extensions_mut().insert(UserId(id));
    }
    next.run(request).await
}

/// Serves `/` on port 3000 with the limit keyed by [`ApiKeyOrUser`].
#[tokio::main]
async fn main() -> std::io::Result<()> {
    let key = ApiKeyOrUser {
        api_key: HeaderKey::new("x-api-key"),
        client_ip: ClientIp::default(),
    };
    let limit = RateLimitLayer::builder()
        .quota("api", "5/min".parse().expect("a valid quota"))
        .key(key)
        .build();
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit)
        // Added last, so it runs first: the user is known before the limit
        // looks for it.
        .layer(middleware::from_fn(auth));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // A header-read timeout, an idle timeout and a connection cap: the
    // server's defence against slow clients, which no rate limiter sees.
    serve(listener, app, ServeLimits::default()).await
}
