//! tollgate for axum.
//!
//! - [`ClientIp`]: the client's address behind proxies, with an explicit
//!   trust model (trusted networks or a hop count; `X-Forwarded-For`,
//!   `Forwarded`, `X-Real-IP` read right to left), as a key extractor; and
//!   [`ClientAddr`], the same answer as a handler argument.
//! - [`RouteKey`]: one limit per matched route; [`matched_path`]: one layer
//!   with a table of route → limits.
//! - [`RateLimitInfo`]: the decision, for a handler (`request_info(true)`
//!   on the layer).
//! - [`ProblemJson`] and [`respond_with`]: rejections as
//!   `application/problem+json` or as any `IntoResponse`.

// tower's lint set: every public item documented and printable, and no
// `pub` where nothing outside the crate can reach it.
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]
// docs.rs builds with `--cfg docsrs` on nightly (see Cargo.toml): items behind
// a feature then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The README's examples are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod client_ip;
mod rejection;
mod route;

pub use client_ip::{ClientAddr, ClientIp, InvalidPrefix, NoConnectInfo, ProxyHeader};
/// The parser of one `Forwarded`/`X-Forwarded-For` node, for the fuzz
/// target and the property tests: not part of the API.
#[doc(hidden)]
pub use client_ip::{Node, parse_node};
/// A network in CIDR form (`"10.0.0.0/8".parse()`), for
/// [`ClientIp::trusting`]; re-exported so an app need not depend on `ipnet`.
pub use ipnet::IpNet;
pub use rejection::{KEY_DENIED, ProblemJson, QUOTA_EXCEEDED, RespondWith, respond_with};
pub use route::{RouteKey, matched_path};
pub use tollgate::RateLimitInfo;
