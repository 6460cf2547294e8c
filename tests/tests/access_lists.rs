//! Allow and deny lists (`tollgate::access::AccessLists`): an allowed key passes
//! every limit uncounted, a denied key gets 403 whatever its budget (with
//! tollgate-axum's problem+json: a type of its own), charging nothing;
//! the lists change while the layer runs. On the memory store, Redis and
//! the local-first store.

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use std::time::Duration;
use tollgate::store::BoxStore;
use tollgate::{HeaderKey, Key, MemoryStore, RateLimitLayer, access::AccessLists};
use tollgate_axum::{KEY_DENIED, ProblemJson};
use tollgate_core::Quota;
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::redis::RedisServer;
use tower::ServiceExt;

/// An app of 5 a minute per `x-api-key`, over `store`, with `lists`.
fn app(store: BoxStore, lists: &AccessLists) -> Router {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(5))
        .key(HeaderKey::new("x-api-key"))
        .store(store)
        .rejector(ProblemJson)
        .access(lists.clone())
        .build();
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// One request as `key`: its status, its `RateLimit` field, its body.
async fn call(app: &Router, key: &str) -> (StatusCode, Option<String>, String) {
    let request = Request::builder()
        .uri("/")
        .header("x-api-key", key)
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let field = response
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .unwrap();
    (status, field, String::from_utf8(body.to_vec()).unwrap())
}

async fn stores(redis: &RedisServer) -> Vec<BoxStore> {
    let shared = || async { RedisStore::connect(redis.url()).await.unwrap() };
    let periodic = LocalMode::Periodic {
        sync_interval: Duration::from_millis(50),
    };
    vec![
        BoxStore::new(MemoryStore::new()),
        BoxStore::new(shared().await),
        BoxStore::new(LocalFirst::builder(shared().await, LocalMode::Exact).build()),
        BoxStore::new(LocalFirst::builder(shared().await, periodic).build()),
    ]
}

#[tokio::test]
async fn allowed_keys_pass_uncounted_and_denied_keys_get_403_whatever_their_budget() {
    let redis = RedisServer::start();
    for (n, store) in stores(&redis).await.into_iter().enumerate() {
        let (friend, foe, other) = (format!("friend{n}"), format!("foe{n}"), format!("other{n}"));
        let lists = AccessLists::new()
            .with_allowed([friend.as_str()])
            .with_denied([foe.as_str()]);
        let app = app(store, &lists);
        // Allowed: 20 pass on a limit of 5, unlimited (no fields).
        for _ in 0..20 {
            assert_eq!(call(&app, &friend).await.0, StatusCode::OK, "store {n}");
        }
        assert_eq!(call(&app, &friend).await.1, None, "store {n}");
        // Denied with its whole budget: 403, a problem of its own type.
        let (status, field, body) = call(&app, &foe).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "store {n}");
        assert_eq!(field, None);
        assert!(body.contains(KEY_DENIED), "{body}");
        assert!(body.contains("\"status\":403"), "{body}");
        // A key on neither list is limited as usual.
        let statuses: Vec<u16> = futures_statuses(&app, &other, 6).await;
        assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "store {n}");
        // Off the lists, neither was charged while on them: 5 each.
        lists.remove(&Key::from(friend.as_str()));
        lists.remove(&Key::from(foe.as_str()));
        for key in [&friend, &foe] {
            let statuses = futures_statuses(&app, key, 6).await;
            assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "store {n}, {key}");
        }
    }
}

/// `n` requests as `key`, one after the other: their statuses.
async fn futures_statuses(app: &Router, key: &str, n: usize) -> Vec<u16> {
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        statuses.push(call(app, key).await.0.as_u16());
    }
    statuses
}

#[tokio::test]
async fn the_lists_change_while_the_layer_runs() {
    let lists = AccessLists::new();
    let app = app(BoxStore::new(MemoryStore::new()), &lists);
    assert_eq!(call(&app, "k").await.0, StatusCode::OK);
    lists.deny("k");
    assert_eq!(call(&app, "k").await.0, StatusCode::FORBIDDEN);
    // Allowing a denied key takes it off the deny list.
    lists.allow("k");
    assert_eq!(lists.denied(), Vec::<Key>::new());
    for _ in 0..10 {
        assert_eq!(call(&app, "k").await.0, StatusCode::OK);
    }
    // A reload replaces both lists at once; a key on both is denied.
    lists.replace([Key::from("a"), Key::from("k")], [Key::from("k")]);
    assert_eq!(lists.allowed(), vec![Key::from("a")]);
    assert_eq!(call(&app, "k").await.0, StatusCode::FORBIDDEN);
}
