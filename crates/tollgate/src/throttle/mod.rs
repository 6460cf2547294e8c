//! A rate limit for the client side of a tower service: calls wait their
//! turn instead of being refused.
//!
//! [`ThrottleLayer`] wraps any tower client (a tonic `Channel`, a hyper
//! client, a `tower::service_fn`) so that each call first waits until a
//! [`DirectLimiter`](crate::DirectLimiter) admits it, then goes out. It is
//! the outbound twin of [`RateLimitLayer`](crate::RateLimitLayer), which
//! refuses: a program calling an API with a quota would rather wait than
//! be refused by the API.
//!
//! ```
//! use std::convert::Infallible;
//! use tollgate::{DirectLimiter, ThrottleLayer};
//! use tollgate_core::Quota;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let api = service_fn(|page: u32| async move { Ok::<_, Infallible>(page * 10) });
//! let client = ServiceBuilder::new()
//!     .layer(ThrottleLayer::new(DirectLimiter::new(Quota::per_second(50))))
//!     .service(api);
//! assert_eq!(client.oneshot(4).await.unwrap(), 40);
//! # }
//! ```
//!
//! The wait happens in the call's future, before the inner service is
//! asked whether it is ready: a waiting call holds none of the inner
//! service's capacity (a buffer slot, a connection). The service itself is
//! always ready, and clones the inner service into each call, as tower's
//! guide for services that wait does; the inner service must be `Clone`.

pub mod future;
mod layer;
mod service;

pub use layer::ThrottleLayer;
pub use service::Throttle;
