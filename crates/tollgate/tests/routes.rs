//! One layer, a table of routes: each route's limits apply to its requests,
//! the layer's own to the rest, all under the same key and store.

mod common;

use common::{BrokenStore, send};
use http::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::time::Duration;
use tollgate::store::Fallback;
use tollgate::{GlobalKey, MemoryStore, NamedLimit, OnStoreError, RateLimitLayer};
use tollgate_core::{Algorithm, ManualClock, Quota};
use tower::{ServiceBuilder, service_fn};

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

fn request(method: Method, path: &str) -> Request<()> {
    Request::builder()
        .method(method)
        .uri(path)
        .body(())
        .unwrap()
}

fn header(response: &Response<String>, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

fn frozen_store() -> MemoryStore<ManualClock> {
    MemoryStore::builder()
        .clock(ManualClock::new(1_700_000_000_000_000_000))
        .build()
}

#[tokio::test]
async fn each_route_has_its_own_limits_and_the_rest_share_the_default() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(5))
        .path("/login", [NamedLimit::new("login", Quota::per_minute(2))])
        .path("/health", [])
        .key(GlobalKey)
        .store(frozen_store())
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);

    let mut login = Vec::new();
    for _ in 0..3 {
        let response = send(&mut service, request(Method::POST, "/login")).await;
        login.push(response.status());
        if response.status() == StatusCode::OK {
            assert_eq!(header(&response, "ratelimit-policy"), "\"login\";q=2;w=60");
        }
    }
    assert_eq!(
        login,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );

    // The login limit being spent takes nothing from the default's budget,
    // and two different paths share the default.
    let mut rest = Vec::new();
    for path in ["/a", "/b", "/a", "/b", "/a", "/b"] {
        let response = send(&mut service, request(Method::GET, path)).await;
        rest.push(response.status().as_u16());
        if response.status() == StatusCode::OK {
            assert_eq!(header(&response, "ratelimit-policy"), "\"api\";q=5;w=60");
        }
    }
    assert_eq!(rest, [200, 200, 200, 200, 200, 429]);

    // A route with no limits is never limited and carries no fields.
    for _ in 0..20 {
        let response = send(&mut service, request(Method::GET, "/health")).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), "");
    }
}

#[tokio::test]
async fn the_first_matching_route_wins_and_builder_wide_settings_apply_to_routes() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(100))
        .route(
            |r| r.method == Method::POST,
            [NamedLimit::new("writes", Quota::per_minute(1))],
        )
        .path(
            "/upload",
            [NamedLimit::new("uploads", Quota::per_minute(50))],
        )
        .algorithm(Algorithm::FixedWindow)
        .key(GlobalKey)
        .store(frozen_store())
        .build();
    let kinds: Vec<Vec<Algorithm>> = layer
        .policies()
        .map(|p| p.limits().iter().map(|l| l.limiter().algorithm()).collect())
        .collect();
    assert_eq!(
        kinds,
        [[Algorithm::FixedWindow]; 3].map(Vec::from).to_vec(),
        "the builder's algorithm applies to every route"
    );
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    // POST /upload matches the POST route first.
    let first = send(&mut service, request(Method::POST, "/upload")).await;
    assert_eq!(header(&first, "ratelimit-policy"), "\"writes\";q=1;w=60");
    let second = send(&mut service, request(Method::POST, "/upload")).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    // Fixed windows align to the epoch: the clock is 20 s into its minute.
    assert_eq!(header(&second, "ratelimit"), "\"writes\";r=0;t=40");
    // GET /upload reaches the /upload route.
    let get = send(&mut service, request(Method::GET, "/upload")).await;
    assert_eq!(get.status(), StatusCode::OK);
    assert_eq!(header(&get, "ratelimit-policy"), "\"uploads\";q=50;w=60");
}

#[tokio::test]
async fn routes_with_several_limits_merge_them_and_failures_name_the_route() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(100))
        .path(
            "/search",
            [
                NamedLimit::new("search-minute", Quota::per_minute(3)),
                NamedLimit::new("search-second", Quota::per_second(2)),
            ],
        )
        .key(GlobalKey)
        .store(frozen_store())
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    let statuses = {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let response = send(&mut service, request(Method::GET, "/search")).await;
            statuses.push(response.status().as_u16());
            if response.status() == StatusCode::TOO_MANY_REQUESTS {
                assert_eq!(
                    header(&response, "ratelimit-policy"),
                    "\"search-minute\";q=3;w=60, \"search-second\";q=2;w=1"
                );
            }
        }
        statuses
    };
    // The per-second limit binds first (the clock stands still).
    assert_eq!(statuses, [200, 200, 429]);

    // A failing store on a route falls back to a local store holding the
    // route's own limits.
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(100))
        .path("/login", [NamedLimit::new("login", Quota::per_minute(1))])
        .key(GlobalKey)
        .store(Fallback::new(BrokenStore::Failing, MemoryStore::new()))
        .on_store_error(OnStoreError::Closed)
        .store_timeout(Duration::from_millis(50))
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service(service_fn(ok));
    let a = send(&mut service, request(Method::POST, "/login")).await;
    let b = send(&mut service, request(Method::POST, "/login")).await;
    assert_eq!(
        (a.status(), b.status()),
        (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS)
    );
    assert_eq!(header(&b, "ratelimit-policy"), "\"login\";q=1;w=60");
}
