//! Limiters to call directly: for throttling the calls a program makes
//! (to an API with a quota, a database, a partner's service), where there is
//! no request to put a layer on.
//!
//! A [`DirectLimiter`] is one stream of calls against one limit (or
//! several, charged together); a [`KeyedLimiter`] is many, one per
//! [`Key`](crate::Key) (per tenant, per host). Both are cheap to clone (an
//! `Arc` inside) and safe to share between tasks and threads, work with
//! every algorithm and every [`Store`](crate::Store) (the memory store, or
//! Redis when several processes share one quota), and offer:
//!
//! - [`check`](DirectLimiter::check) / [`check_n`](DirectLimiter::check_n):
//!   charge one call (or `n` units) now if the limit allows it, and say so;
//! - [`peek`](DirectLimiter::peek): what a call of cost 1 would be told,
//!   without charging anything;
//! - [`until_ready`](DirectLimiter::until_ready) /
//!   [`until_n_ready`](DirectLimiter::until_n_ready): wait until a call is
//!   allowed, charge it, and return.
//!
//! On the memory store the same answers are also there without `await`
//! ([`DirectLimiter::check_now`], [`DirectLimiter::peek_now`]).
//!
//! ```
//! use tollgate::DirectLimiter;
//! use tollgate_core::Quota;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // The partner's API takes 10 calls a second.
//! let limiter = DirectLimiter::new(Quota::per_second(10));
//! for page in 0..3 {
//!     limiter.until_ready().await.expect("a call of cost 1 always fits");
//!     // call the API for `page` here
//!     # let _ = page;
//! }
//! assert_eq!(limiter.peek_now().remaining(), 7);
//! # }
//! ```
//!
//! To throttle every call a tower client makes (a tonic `Channel`, a hyper
//! client), wrap it in [`ThrottleLayer`](crate::ThrottleLayer) instead.

mod builder;
mod call;
mod future;
mod keyed;
mod single;

pub use builder::LimiterBuilder;
pub use future::{Check, UntilReady, UntilReadyError};
pub use keyed::KeyedLimiter;
pub use single::DirectLimiter;
