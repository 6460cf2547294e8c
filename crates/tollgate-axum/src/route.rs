//! Keys from the matched route.

use axum::extract::MatchedPath;
use tollgate::{Key, KeyExtractor, RequestInfo};

/// The route template the request matched, e.g. `/users/{id}`: one limit
/// per route, shared by every client (combine with a client key in a tuple,
/// `(RouteKey, ClientIp::default())`, for one limit per route and client).
///
/// axum records the matched route before it runs the route's middleware,
/// so this works under both `Router::layer` and `Router::route_layer`. A
/// request that matched no route (the fallback) has no key; the layer's
/// `MissingKey` behaviour applies.
#[derive(Clone, Copy, Debug, Default)]
pub struct RouteKey;

impl KeyExtractor for RouteKey {
    fn extract(&self, request: &RequestInfo<'_>) -> Option<Key> {
        let path = request.extensions.get::<MatchedPath>()?;
        Some(Key::from_bytes(path.as_str().as_bytes()))
    }
}
