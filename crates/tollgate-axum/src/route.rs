//! Keys from the matched route, and route predicates for a layer's route
//! table.

use axum::extract::MatchedPath;
use tollgate::{Key, KeyExtractor, key::RequestView};

/// The route template the request matched, e.g. `/users/{id}`: one limit
/// per route, shared by every client (combine with a client key in a tuple,
/// `(RouteKey, ClientIp::default())`, for one limit per route and client).
///
/// axum records the matched route before it runs the route's middleware,
/// so this works under both `Router::layer` and `Router::route_layer`. A
/// request that matched no route (the fallback) has no key; the layer's
/// `OnMissingKey` behaviour applies.
#[derive(Clone, Copy, Debug, Default)]
pub struct RouteKey;

impl KeyExtractor for RouteKey {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        let path = request.extensions.get::<MatchedPath>()?;
        Some(Key::from_bytes(path.as_str().as_bytes()))
    }
}

/// A route predicate for
/// [`RateLimitBuilder::route`](tollgate::RateLimitBuilder::route): the
/// request matched the axum route `template` (as written in
/// `Router::route`, e.g. `/users/{id}`). One layer then holds a table of
/// route → limits.
///
/// ```
/// use axum::{Router, routing::{get, post}};
/// use tollgate::{NamedLimit, RateLimitLayer};
/// use tollgate_axum::{ClientIp, matched_path};
/// use tollgate::core::Quota;
///
/// let limits = RateLimitLayer::builder()
///     .quota("api", Quota::per_second(20))
///     .route(matched_path("/login"), [NamedLimit::new("login", Quota::per_minute(5))])
///     .route(matched_path("/users/{id}"), [NamedLimit::new("users", Quota::per_second(5))])
///     .key(ClientIp::default())
///     .build();
/// let app: Router = Router::new()
///     .route("/login", post(|| async { "welcome" }))
///     .route("/users/{id}", get(|| async { "a user" }))
///     .route("/", get(|| async { "home" }))
///     .layer(limits);
/// ```
///
/// axum records the matched route before the route's middleware runs, so
/// this works under `Router::layer` and `Router::route_layer`. Requests that
/// matched no route (the fallback) never match.
pub fn matched_path(template: &str) -> impl Fn(&RequestView<'_>) -> bool + Send + Sync + 'static {
    let template: Box<str> = template.into();
    move |request: &RequestView<'_>| {
        request
            .extensions
            .get::<MatchedPath>()
            .is_some_and(|path| path.as_str() == &*template)
    }
}
