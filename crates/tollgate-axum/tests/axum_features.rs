//! Route keys, `RateLimitInfo` for handlers, and axum-native rejections.

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::ConnectInfo;
use axum::response::Html;
use axum::routing::get;
use http::{Request, StatusCode};
use std::net::SocketAddr;
use tollgate::{GlobalKey, NamedLimit, OnMissingKey, RateLimitInfo, RateLimitLayer};
use tollgate_axum::{ClientIp, ProblemJson, RouteKey, matched_path, respond_with};
use tower::ServiceExt;

async fn get_path(app: &Router, path: &str) -> (StatusCode, http::HeaderMap, String) {
    let mut request = Request::builder().uri(path).body(Body::empty()).unwrap();
    let peer: SocketAddr = "203.0.113.1:1".parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, 64 * 1024).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn route_keys_give_each_route_its_own_limit_under_layer_and_route_layer() {
    let limit = || {
        RateLimitLayer::builder()
            .quota("route", "2/min".parse().unwrap())
            .key(RouteKey)
            .build()
    };
    let with_layer = Router::new()
        .route("/users/{id}", get(|| async { "user" }))
        .route("/health", get(|| async { "ok" }))
        .layer(limit());
    let with_route_layer = Router::new()
        .route("/users/{id}", get(|| async { "user" }))
        .route("/health", get(|| async { "ok" }))
        .route_layer(limit());
    for app in [with_layer, with_route_layer] {
        // Different ids, one route: one limit.
        assert_eq!(get_path(&app, "/users/1").await.0, StatusCode::OK);
        assert_eq!(get_path(&app, "/users/2").await.0, StatusCode::OK);
        assert_eq!(
            get_path(&app, "/users/3").await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(get_path(&app, "/health").await.0, StatusCode::OK);
    }
}

#[tokio::test]
async fn a_request_that_matched_no_route_has_no_route_key() {
    let layer = RateLimitLayer::builder()
        .quota("route", "1/min".parse().unwrap())
        .key(RouteKey)
        .on_missing_key(OnMissingKey::Reject(StatusCode::BAD_REQUEST))
        .build();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .fallback(|| async { (StatusCode::NOT_FOUND, "nothing here") })
        .layer(layer);
    // The fallback's requests reach the layer without a route: no key, so
    // the OnMissingKey behaviour answers. The route's requests are limited.
    assert_eq!(get_path(&app, "/nope").await.0, StatusCode::BAD_REQUEST);
    assert_eq!(get_path(&app, "/").await.0, StatusCode::OK);
    assert_eq!(get_path(&app, "/").await.0, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn one_layer_holds_a_table_of_route_limits() {
    let quota = |text: &str| text.parse().unwrap();
    let layer = RateLimitLayer::builder()
        .quota("api", quota("3/min"))
        .route(
            matched_path("/login"),
            [NamedLimit::new("login", quota("1/min"))],
        )
        .route(
            matched_path("/users/{id}"),
            [NamedLimit::new("users", quota("2/min"))],
        )
        .route(matched_path("/health"), [])
        .key(ClientIp::default())
        .build();
    let app = Router::new()
        .route("/login", get(|| async { "welcome" }))
        .route("/users/{id}", get(|| async { "user" }))
        .route("/health", get(|| async { "ok" }))
        .route("/", get(|| async { "home" }))
        .route("/about", get(|| async { "about" }))
        .fallback(|| async { (StatusCode::NOT_FOUND, "nothing here") })
        .layer(layer);
    let statuses = async |paths: &[&str]| {
        let mut out = Vec::new();
        for path in paths {
            out.push(get_path(&app, path).await.0.as_u16());
        }
        out
    };
    assert_eq!(statuses(&["/login", "/login"]).await, [200, 429]);
    // One template, whatever the id.
    assert_eq!(
        statuses(&["/users/1", "/users/2", "/users/3"]).await,
        [200, 200, 429]
    );
    let (_, headers, _) = get_path(&app, "/users/9").await;
    assert_eq!(headers["ratelimit-policy"], "\"users\";q=2;w=60");
    assert_eq!(statuses(&["/health"; 10]).await, [200; 10]);
    // The other routes and the fallback share the layer's own limit.
    assert_eq!(
        statuses(&["/", "/about", "/nope", "/"]).await,
        [200, 200, 404, 429]
    );
}

#[tokio::test]
async fn per_route_limits_with_route_layer_and_per_client_keys() {
    let login_limit = RateLimitLayer::builder()
        .quota("login", "1/min".parse().unwrap())
        .key((RouteKey, ClientIp::default()))
        .build();
    let app = Router::new()
        .route("/login", get(|| async { "welcome" }))
        .route_layer(login_limit)
        .route("/", get(|| async { "home" }));
    assert_eq!(get_path(&app, "/login").await.0, StatusCode::OK);
    assert_eq!(
        get_path(&app, "/login").await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Routes added after route_layer are not limited by it.
    for _ in 0..3 {
        assert_eq!(get_path(&app, "/").await.0, StatusCode::OK);
    }
}

#[tokio::test]
async fn handlers_read_the_decision() {
    let layer = RateLimitLayer::builder()
        .quota("api", "3/min".parse().unwrap())
        .key(GlobalKey)
        .request_info(true)
        .build();
    let app = Router::new()
        .route(
            "/",
            get(|info: RateLimitInfo| async move {
                let names: Vec<&str> = info.limits().map(|(name, _)| name).collect();
                format!(
                    "{} of {} left ({})",
                    info.remaining(),
                    info.limit(),
                    names.join(",")
                )
            }),
        )
        .route(
            "/optional",
            get(|info: Option<RateLimitInfo>| async move { format!("{}", info.is_some()) }),
        )
        .layer(layer);
    assert_eq!(get_path(&app, "/").await.2, "2 of 3 left (api)");
    assert_eq!(get_path(&app, "/").await.2, "1 of 3 left (api)");
    assert_eq!(get_path(&app, "/optional").await.2, "true");

    // Without request_info the extractor explains itself; the optional form
    // sees nothing.
    let bare = Router::new()
        .route("/", get(|_: RateLimitInfo| async { "unreachable" }))
        .route(
            "/optional",
            get(|info: Option<RateLimitInfo>| async move { format!("{}", info.is_some()) }),
        );
    let (status, _, body) = get_path(&bare, "/").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.contains("request_info(true)"), "{body}");
    assert_eq!(get_path(&bare, "/optional").await.2, "false");
}

#[tokio::test]
async fn problem_json_rejections_follow_rfc_9457_and_the_draft() {
    // Two limits, one of which refuses: only that one is a violated policy.
    let layer = RateLimitLayer::builder()
        .quota("api", "1/min".parse().unwrap())
        .quota("daily", "100/day".parse().unwrap())
        .key(GlobalKey)
        .rejector(ProblemJson)
        .build();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    assert_eq!(get_path(&app, "/").await.0, StatusCode::OK);
    let (status, headers, body) = get_path(&app, "/").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(headers["retry-after"], "60");
    assert!(
        headers["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with("\"api\";r=0;t=60, \"daily\";r=99;")
    );
    assert_eq!(
        body,
        "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
         \"title\":\"Request cannot be satisfied as assigned quota has been exceeded\",\
         \"status\":429,\"detail\":\"Too many requests: retry in 60 s.\",\
         \"violated-policies\":[\"api\"]}"
    );
}

#[tokio::test]
async fn any_into_response_can_be_the_rejection() {
    let layer = RateLimitLayer::builder()
        .quota("api", "1/min".parse().unwrap())
        .key(GlobalKey)
        .rejector(respond_with(|_| Html("<h1>Slow down</h1>")))
        .build();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    get_path(&app, "/").await;
    let (status, headers, body) = get_path(&app, "/").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(headers["retry-after"], "60");
    assert_eq!(body, "<h1>Slow down</h1>");

    // A response with a status of its own keeps it.
    let teapot = RateLimitLayer::builder()
        .quota("api", "1/min".parse().unwrap())
        .key(GlobalKey)
        .rejector(respond_with(|_| (StatusCode::IM_A_TEAPOT, "no")))
        .build();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(teapot);
    get_path(&app, "/").await;
    assert_eq!(get_path(&app, "/").await.0, StatusCode::IM_A_TEAPOT);

    // A field the response sets itself is kept; the others are added.
    let own = RateLimitLayer::builder()
        .quota("api", "1/min".parse().unwrap())
        .key(GlobalKey)
        .rejector(respond_with(|_| ([("retry-after", "5")], "later")))
        .build();
    let app = Router::new().route("/", get(|| async { "ok" })).layer(own);
    get_path(&app, "/").await;
    let (_, headers, _) = get_path(&app, "/").await;
    assert_eq!(headers.get_all("retry-after").iter().count(), 1);
    assert_eq!(headers["retry-after"], "5");
    assert_eq!(headers["ratelimit"], "\"api\";r=0;t=60");
}

#[tokio::test]
async fn problem_json_says_when_a_request_can_never_pass() {
    let layer = RateLimitLayer::builder()
        .quota("api", "2/min".parse().unwrap())
        .key(GlobalKey)
        .cost(|_| 5)
        .rejector(ProblemJson)
        .build();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let (status, _, body) = get_path(&app, "/").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        body.contains(
            "\"detail\":\"This request costs more than the whole quota: it can never pass.\""
        ),
        "{body}"
    );
}
