//! An operator's handle on the limits: `GET /admin/limits/{key}` shows a
//! key's state (each limit's size, what remains, when it is whole again)
//! without charging it, and `DELETE /admin/limits/{key}` resets it. Keys
//! that keep hitting the limit are blocked for a while (a `PenaltyBox`);
//! a reset lifts that too.
//!
//! `cargo run -p tollgate-examples --example axum_admin`, then a few
//! `curl -H 'x-api-key: k1' localhost:3000/`, and
//! `curl localhost:3000/admin/limits/k1`,
//! `curl -X DELETE localhost:3000/admin/limits/k1`.
//!
//! The admin routes are not limited and not protected here: in an app,
//! put them behind authentication, or serve them on a port of their own.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;
use std::time::Duration;
use tollgate::store::{Penalty, PenaltyBox};
use tollgate::{HeaderKey, Key, MemoryStore, Policy, PolicyDecision, RateLimitLayer, Store};
use tollgate_examples::serving::{ServeLimits, serve};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    serve(listener, app(), ServeLimits::default()).await
}

/// What the admin routes need: the layer's policy and its store.
#[derive(Clone)]
struct Admin {
    policy: Arc<Policy>,
    store: PenaltyBox<MemoryStore>,
}

/// `/` limited per API key (5 a minute and 100 an hour; 10 refusals
/// within a minute block the key for 5 minutes, doubling up to an hour),
/// and the admin routes beside it.
pub fn app() -> Router {
    let penalty = Penalty::new(10, Duration::from_secs(60), Duration::from_secs(300))
        .escalate(2, Duration::from_secs(3600));
    let layer = RateLimitLayer::builder()
        .quota("api", "5/min".parse().expect("a valid quota"))
        .quota("hour", "100/h".parse().expect("a valid quota"))
        .key(HeaderKey::new("x-api-key"))
        .store(PenaltyBox::new(MemoryStore::new(), penalty))
        .build();
    // The same policy and store the layer decides with: a peek or a reset
    // of a key is of the key the layer counts.
    let admin = Admin {
        policy: layer.policy().clone(),
        store: layer.store().clone(),
    };
    let limited = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(layer);
    let handle = Router::new()
        .route("/admin/limits/{key}", get(show).delete(reset))
        .with_state(admin);
    limited.merge(handle)
}

/// The key's state, charging nothing. The key is the `x-api-key` value.
async fn show(State(admin): State<Admin>, Path(key): Path<String>) -> Response {
    let peek = admin.store.peek(&admin.policy, &Key::from(key.as_str()));
    match peek.resolve().await {
        Ok(state) => json(StatusCode::OK, describe(&admin.policy, &key, &state)),
        // The memory store cannot fail; a Redis store's error would be a 503.
        Err(never) => match never {},
    }
}

/// Forgets the key's counts and lifts its block: it is whole again.
async fn reset(State(admin): State<Admin>, Path(key): Path<String>) -> Response {
    match admin
        .store
        .reset(&admin.policy, &Key::from(key.as_str()))
        .await
    {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, error.to_string()).into_response(),
    }
}

/// `{"key", "blocked", "retry_after_ms", "limits": [{"name", "limit",
/// "remaining", "reset_after_ms"}]}`: `blocked` when even a request of cost
/// 0 is refused (the penalty), `retry_after_ms` until a request of cost 1
/// can pass (0: now).
fn describe(policy: &Policy, key: &str, state: &PolicyDecision) -> serde_json::Value {
    let merged = &state.merged();
    let retry = if !merged.allowed() {
        merged.retry_after()
    } else if merged.remaining() == 0 {
        merged.replenish_after()
    } else {
        Duration::ZERO
    };
    let limits: Vec<serde_json::Value> = policy
        .limits()
        .iter()
        .zip(state.each())
        .map(|(limit, decision)| {
            serde_json::json!({
                "name": limit.name(),
                "limit": decision.limit(),
                "remaining": decision.remaining(),
                "reset_after_ms": millis(decision.reset_after()),
            })
        })
        .collect();
    serde_json::json!({
        "key": key,
        "blocked": !merged.allowed(),
        "retry_after_ms": millis(retry),
        "limits": limits,
    })
}

fn json(status: StatusCode, value: serde_json::Value) -> Response {
    let headers = [(header::CONTENT_TYPE, "application/json")];
    (status, headers, value.to_string()).into_response()
}

/// Whole milliseconds, rounded up, so that a wait of 0.4 ms does not read
/// as none.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}
