//! A login limit keyed by the user name in the request's body: 3 attempts
//! a minute per user, whatever address they come from; the body still
//! reaches the handler.
//!
//! ```sh
//! cargo run -p tollgate-examples --example login_by_user
//! for i in $(seq 4); do
//!   curl -s -X POST localhost:3000/login -d '{"user":"alice","password":"x"}'; echo
//! done
//! ```
//!
//! A key extractor sees a request's head, not its body (which is read
//! once, as it arrives). So a small middleware in front of the limit reads
//! the body whole (at most 16 KiB: a larger one is answered 413, a body
//! without a user name 400), puts the user name in the request's
//! extensions, and hands the request on with the same bytes; the limit
//! keys on that extension (`key_fn`), and the handler reads the body as if
//! nothing had touched it.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tollgate::{Key, RateLimitLayer, key_fn};
use tollgate_examples::serving::{ServeLimits, serve};

/// The largest login body read (and kept in memory) before the limit.
const MAX_BODY: usize = 16 * 1024;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    serve(listener, app(), ServeLimits::default()).await
}

/// The app: `POST /login`, 3 attempts a minute per user name.
pub fn app() -> Router {
    let per_user = RateLimitLayer::builder()
        .quota("login", "3/min".parse().expect("a valid quota"))
        .key(key_fn(|request| {
            let user = request.extensions.get::<LoginUser>()?;
            Some(Key::from(user.0.as_str()))
        }))
        .build();
    Router::new()
        .route("/login", post(login))
        // Layers added later wrap those added before: the body is read
        // first, then the limit is checked.
        .route_layer(per_user)
        .route_layer(middleware::from_fn(read_user))
}

/// The user name a login's body names, for the limit's key.
#[derive(Clone, Debug)]
pub struct LoginUser(pub String);

/// Reads the body (at most [`MAX_BODY`]), notes its `user`, and hands the
/// request on with the same body.
async fn read_user(request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "a login body is 16 KiB at most\n",
        )
            .into_response();
    };
    let Some(user) = user_of(&bytes) else {
        return (
            StatusCode::BAD_REQUEST,
            "expected {\"user\": ..., \"password\": ...}\n",
        )
            .into_response();
    };
    parts.extensions.insert(LoginUser(user));
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The `user` field of a JSON body, if it has one, trimmed and in lower
/// case: as the login backend matches names, so that `Alice ` and `alice`
/// share one limit (else each spelling would get attempts of its own).
fn user_of(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let user = value.get("user")?.as_str()?.trim().to_lowercase();
    (!user.is_empty()).then_some(user)
}

/// The handler: it gets the body as the client sent it.
async fn login(body: Bytes) -> String {
    let user = user_of(&body).unwrap_or_default();
    // Check the password here.
    format!("welcome {user}\n")
}
