//! tollgate for tonic: rate-limited gRPC calls that gRPC clients can read.
//!
//! The tower layer of [`tollgate`] works in a tonic server as it is; this
//! crate adds what gRPC needs:
//!
//! - [`GrpcRejector`]: a limited call ends with `RESOURCE_EXHAUSTED` (or
//!   `UNAVAILABLE`), a message that names the limit, `google.rpc.RetryInfo`
//!   and `google.rpc.QuotaFailure` details, and the rate-limit fields as
//!   metadata — not with an HTTP 429 that gRPC clients cannot read.
//! - Keys: [`GrpcPeerIp`] (tonic's connection info), [`MetadataKey`] (an
//!   API key), [`BearerToken`], [`GrpcMethod`] (`/package.Service/Method`),
//!   and tuples of them.
//! - Per-method quotas: one layer, a table of method → limits, with the
//!   layer's own limits as the default
//!   ([`RateLimitBuilder::path`](tollgate::RateLimitBuilder::path) with the
//!   method's path, or [`method`]).
//! - Per-message limits on streams: [`MessageLimitLayer`] counts each
//!   message of a client or server stream (see below).
//!
//! ```no_run
//! use tollgate::NamedLimit;
//! use tollgate::core::Quota;
//! use tollgate_tonic::{GrpcPeerIp, MetadataKey};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! # let (_, health) = tonic_health::server::health_reporter();
//!
//! let limits = tollgate_tonic::builder()
//!     // Every method: 100 calls per second per API key...
//!     .quota("api", Quota::per_second(100))
//!     // ...but Check: 5 per second.
//!     .path("/grpc.health.v1.Health/Check", [NamedLimit::new("check", Quota::per_second(5))])
//!     .key(MetadataKey::new("x-api-key"))
//!     .build();
//!
//! tonic::transport::Server::builder()
//!     .layer(limits)
//!     .add_service(health)
//!     .serve("127.0.0.1:50051".parse()?)
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! The rate-limit layer counts a call once, when it starts: a
//! server-streaming call that sends a thousand messages costs what a unary
//! call costs. To count each message of a stream as well, add a
//! [`MessageLimitLayer`] (module [`messages`]): a stream that runs out of
//! budget ends with `RESOURCE_EXHAUSTED` and `RetryInfo`, or waits in
//! delay mode.
//!
//! How many calls of one client run at once is an in-flight limit
//! ([`in_flight`]: tollgate's
//! [`InFlightLayer`] with gRPC
//! defaults). A streaming call holds its slot for the life of the stream:
//! the response body is the stream, and the slot is given back when it
//! ends, fails, or is cancelled (the client dropped it). A refused call
//! gets `RESOURCE_EXHAUSTED` with a `QuotaFailure` and no `RetryInfo`.
//!
//! The layer also wraps one generated service, keeping its name, so
//! `add_service(layer.layer(GreeterServer::new(...)))` limits that service
//! alone.
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

mod key;
pub mod messages;
mod rejection;

pub use key::{BearerToken, GrpcMethod, GrpcPeerIp, MetadataKey};
pub use messages::{MessageLimitBuilder, MessageLimitLayer};
pub use rejection::GrpcRejector;

use tollgate::in_flight::{InFlightBuilder, InFlightLayer, MemorySlots};
use tollgate::{MemoryStore, RateLimitBuilder, RateLimitLayer};

/// A layer builder with gRPC defaults: calls keyed by [`GrpcPeerIp`],
/// rejected with [`GrpcRejector`], counted in memory, and no limit yet. Every
/// setting of [`RateLimitBuilder`] is available; a later
/// [`key`](RateLimitBuilder::key) or
/// [`rejector`](RateLimitBuilder::rejector) replaces these defaults.
pub fn builder() -> RateLimitBuilder<GrpcPeerIp, MemoryStore, GrpcRejector> {
    RateLimitLayer::builder()
        .key(GrpcPeerIp)
        .rejector(GrpcRejector::default())
}

/// An in-flight layer builder with gRPC defaults: at most
/// [`max_in_flight`](tollgate::in_flight::InFlightBuilder::max_in_flight) calls at once
/// per client ([`GrpcPeerIp`]), refused with [`GrpcRejector`]
/// (`RESOURCE_EXHAUSTED`), counted in memory. Every setting of
/// [`InFlightBuilder`] is available.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// # let (_, health) = tonic_health::server::health_reporter();
/// // At most 4 calls (streams included, for as long as they run) per client.
/// let layer = tollgate_tonic::in_flight().max_in_flight(4).build();
/// tonic::transport::Server::builder()
///     .layer(layer)
///     .add_service(health)
///     .serve("127.0.0.1:50051".parse()?)
///     .await?;
/// # Ok(())
/// # }
/// ```
pub fn in_flight() -> InFlightBuilder<GrpcPeerIp, MemorySlots, GrpcRejector> {
    InFlightLayer::builder()
        .key(GrpcPeerIp)
        .rejector(GrpcRejector::default())
}

/// The path of a gRPC method, `/package.Service/Method`, for
/// [`RateLimitBuilder::path`], from a service name (as in the `.proto`
/// file, with its package, or `NamedService::NAME` of a generated server)
/// and a method name as written in the `.proto` file.
///
/// ```
/// assert_eq!(
///     tollgate_tonic::method("grpc.health.v1.Health", "Check"),
///     "/grpc.health.v1.Health/Check"
/// );
/// ```
pub fn method(service: &str, method: &str) -> String {
    format!("/{service}/{method}")
}
