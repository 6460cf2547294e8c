//! Costs known only once the response is over ("pay after"): bytes sent,
//! rows scanned, tokens a model generated.
//!
//! Turn it on with [`RateLimitBuilder::pay_after`](crate::RateLimitBuilder::pay_after).
//! A request is still checked when it arrives, for its usual cost (1, or
//! an estimate from [`cost`](crate::RateLimitBuilder::cost)), so a key in
//! debt is refused before your handler runs. Each admitted request then
//! carries a [`Meter`] in its extensions; the handler (or the stream that
//! makes its body) reports what the request really cost, and when the
//! request is over the meter's total replaces the admission's charge: the
//! difference is charged whatever the limit says — the key may go into
//! debt, and its next requests are refused (or delayed) until the debt is
//! paid off at the quota's rate, with `Retry-After` saying when — or given
//! back.
//!
//! "Over" is when the last handle on the meter is gone. The rate-limit
//! layer holds one until the response's head is ready; put a
//! [`MeterLayer`] inside it to hold one until the response's body has been
//! sent (or has failed, or the client has gone), and optionally to count
//! the body's bytes.
//!
//! ```
//! use axum::{Extension, Router, routing::post};
//! use tollgate::RateLimitLayer;
//! use tollgate::pay_after::{Meter, MeterLayer};
//!
//! async fn generate(Extension(meter): Extension<Meter>) -> String {
//!     let tokens = 420; // what the model produced
//!     meter.add(tokens);
//!     "…".repeat(tokens as usize)
//! }
//!
//! let app: Router = Router::new()
//!     .route("/generate", post(generate))
//!     .layer(MeterLayer::new())
//!     .layer(
//!         RateLimitLayer::builder()
//!             .quota("tokens", "1000/min".parse().unwrap())
//!             .pay_after()
//!             .build(),
//!     );
//! ```

mod body;
pub mod future;
mod layer;
mod meter;
mod service;

pub use body::MeteredBody;
pub use layer::MeterLayer;
pub use meter::Meter;
pub use service::MeterService;
