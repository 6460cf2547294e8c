//! Rate limiting middleware for tower, and so for axum and tonic.
//!
//! ```
//! use tollgate::RateLimitLayer;
//! use tollgate_core::Quota;
//! use tower::ServiceBuilder;
//! # use tower::service_fn;
//! # async fn handle(_: http::Request<()>) -> Result<http::Response<String>, std::convert::Infallible> {
//! #     Ok(http::Response::new("ok".into()))
//! # }
//!
//! let service = ServiceBuilder::new()
//!     .layer(RateLimitLayer::new(Quota::per_second(10)))
//!     .service_fn(handle);
//! # let _ = service;
//! ```
//!
//! - [`RateLimitLayer`] wraps a service; its builder sets the limits, the
//!   algorithm, the [`KeyExtractor`], the [`Store`], the cost of a request and
//!   the behaviours below.
//! - A limited request gets `429 Too Many Requests` (or another
//!   [`rejection_status`](RateLimitBuilder::rejection_status)) with
//!   `Retry-After` in whole seconds, rounded up and never 0, and the
//!   draft-ietf-httpapi-ratelimit-headers-10 fields `RateLimit-Policy` and
//!   `RateLimit`, which allowed responses carry too (see [`HeaderStyle`](headers::HeaderStyle);
//!   what each figure means, and why they never contradict each other, is
//!   in [`headers`]).
//! - A request whose key cannot be extracted is counted under one shared key
//!   by default ([`OnMissingKey`]), so a missing header is no way around a
//!   limit.
//! - Store failures and timeouts let requests through by default
//!   ([`OnStoreError`]), and are logged with `tracing`.
//! - With the leaky bucket, admitted requests are held until their slot, so
//!   they reach the service evenly spaced (this needs a tokio runtime).
//! - [`InFlightLayer`], a layer of its own, limits how many requests of one
//!   key run at once: a slot is held from admission until the response
//!   body ends (or fails, or the client goes away); see [`in_flight`].
//!
//! # Testing your app
//!
//! Give the store a [`TokioClock`](crate::core::TokioClock) and run the test
//! under a paused tokio runtime (tokio's `test-util` feature):
//! `tokio::time::advance` then moves every limit, and the test waits no
//! real time.
//!
//! ```
//! use axum::{Router, body::Body, routing::get};
//! use http::{Request, StatusCode};
//! use std::time::Duration;
//! use tollgate::core::{Quota, TokioClock};
//! use tollgate::{GlobalKey, MemoryStore, RateLimitLayer};
//! use tower::ServiceExt;
//!
//! async fn status(app: &Router) -> StatusCode {
//!     app.clone().oneshot(Request::new(Body::empty())).await.unwrap().status()
//! }
//!
//! #[tokio::main(flavor = "current_thread", start_paused = true)] // a test: #[tokio::test(start_paused = true)]
//! async fn main() {
//!     let limit = RateLimitLayer::builder()
//!         .quota("api", Quota::per_second(10).with_burst(20).unwrap())
//!         .key(GlobalKey)
//!         .store(MemoryStore::builder().clock(TokioClock::new()).build())
//!         .build();
//!     let app = Router::new().route("/", get(|| async { "ok" })).layer(limit);
//!     for _ in 0..20 {
//!         assert_eq!(status(&app).await, StatusCode::OK);
//!     }
//!     assert_eq!(status(&app).await, StatusCode::TOO_MANY_REQUESTS);
//!     tokio::time::advance(Duration::from_millis(100)).await; // one unit back, at once
//!     assert_eq!(status(&app).await, StatusCode::OK);
//! }
//! ```
// docs.rs builds with `--cfg docsrs` on nightly (see Cargo.toml): items behind
// a feature then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
// tower's lint set: every public item documented and printable, and no
// `pub` where nothing outside the crate can reach it.
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]

pub mod access;
pub mod direct;
pub mod headers;
pub mod in_flight;
pub mod key;
use tollgate_store::__private::observe;
pub mod pay_after;
#[cfg(feature = "quotas")]
pub use rate_limit::quotas;
mod rate_limit;
pub mod rejection;
#[cfg(feature = "rules")]
pub mod rules;
pub mod settings;
/// Where the counters live: the store contract, the memory store and the
/// wrappers that compose stores, from [`tollgate_store`] (this path and
/// that crate's are the same items).
pub use tollgate_store as store;
use tollgate_store::__private::shadow;
pub mod throttle;
pub mod watched;

/// The futures of the rate-limit middleware at the crate's root
/// ([`RateLimit`]), as tower keeps each middleware's futures in its own
/// `future` module; the other middlewares' are in theirs
/// ([`in_flight::future`], [`throttle::future`], …).
pub mod future {
    pub use crate::rate_limit::future::ResponseFuture;
}

pub use direct::{DirectLimiter, KeyedLimiter};
pub use in_flight::InFlightLayer;
pub use key::{GlobalKey, HeaderKey, Key, KeyExtractor, OnMissingKey, PeerIp, key_fn};
pub use rate_limit::info::RateLimitInfo;
pub use rate_limit::layer::{RateLimitBuilder, RateLimitLayer};
pub use rate_limit::service::RateLimit;
pub use rejection::{Rejection, Rejector, STORE_FAILED_RETRY_AFTER};
pub use settings::OnStoreError;
pub use tollgate_store::SHADOW_LOG_INTERVAL;
#[cfg(feature = "metrics")]
pub use tollgate_store::describe_metrics;
pub use tollgate_store::{BoxError, ConfigError};
pub use tollgate_store::{NamedLimit, Policy};

/// What the crates beside this one (tollgate-tonic, tollgate-redis) share
/// with it and users do not need: not part of the API, and may change in
/// any release. (What does not lean on this crate's types lives in
/// `tollgate-internal`.)
#[doc(hidden)]
pub mod __private {
    pub use crate::headers::fields_for;
    pub use tollgate_store::__private::shadow::ShadowLog;
}
pub use store::{MemoryStore, PolicyDecision, Store, StoreReply};
pub use throttle::ThrottleLayer;
pub use tollgate_core as core;
