//! Support for the cross-crate integration tests in `tests/`: a stand-in
//! app behind a layer, and real `redis-server` processes on free loopback
//! ports, standalone and as a Cluster, stopped when dropped; and an
//! allocator that counts, for tests of what a path allocates; and a
//! capture of `tracing` events, for tests of what reaches the logs; and
//! (feature `metrics`) a recorder of counters and gauges; and real
//! PostgreSQL servers (`postgres.rs`), each a cluster of its own on a free
//! loopback port, run as an unprivileged user when the tests run as root;
//! and a data plane that enforces quota assignments as Envoy's
//! `rate_limit_quota` filter does (`envoy_quota.rs`).

pub mod alloc;
pub mod app;
pub mod checks;
pub mod envoy_quota;
pub mod exposition;
pub mod logs;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod postgres;
pub mod proxy;
pub mod random;
pub mod redis;
pub mod sentinel;
pub mod tls;

/// The workspace README's Rust examples, compiled and run as doctests so
/// that they cannot rot. They are here, in a crate that is never published,
/// because a published crate holds only the files under its own directory
/// and the README is above every crate's.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The guide's pages (`docs/guide/`), one item each, so that every Rust
/// example in them is compiled and run as a doctest as the README's are. A
/// new page gets a line here.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../docs/guide/README.md")]
    pub struct Index;

    #[doc = include_str!("../../docs/guide/admin.md")]
    pub struct Admin;

    #[doc = include_str!("../../docs/guide/algorithms.md")]
    pub struct Algorithms;

    #[doc = include_str!("../../docs/guide/axum.md")]
    pub struct Axum;

    #[doc = include_str!("../../docs/guide/benchmarks.md")]
    pub struct Benchmarks;

    #[doc = include_str!("../../docs/guide/crates.md")]
    pub struct Crates;

    #[doc = include_str!("../../docs/guide/envoy.md")]
    pub struct Envoy;

    #[doc = include_str!("../../docs/guide/examples.md")]
    pub struct Examples;

    #[doc = include_str!("../../docs/guide/failures.md")]
    pub struct Failures;

    #[doc = include_str!("../../docs/guide/headers.md")]
    pub struct Headers;

    #[doc = include_str!("../../docs/guide/in-flight.md")]
    pub struct InFlight;

    #[doc = include_str!("../../docs/guide/local-first.md")]
    pub struct LocalFirst;

    #[doc = include_str!("../../docs/guide/metrics.md")]
    pub struct Metrics;

    #[doc = include_str!("../../docs/guide/outbound.md")]
    pub struct Outbound;

    #[doc = include_str!("../../docs/guide/outcomes.md")]
    pub struct Outcomes;

    #[doc = include_str!("../../docs/guide/pay-after.md")]
    pub struct PayAfter;

    #[doc = include_str!("../../docs/guide/penalties.md")]
    pub struct Penalties;

    #[doc = include_str!("../../docs/guide/proxies.md")]
    pub struct Proxies;

    #[doc = include_str!("../../docs/guide/quotas-and-rules.md")]
    pub struct QuotasAndRules;

    #[doc = include_str!("../../docs/guide/redis.md")]
    pub struct Redis;

    #[doc = include_str!("../../docs/guide/rlqs.md")]
    pub struct Rlqs;

    #[doc = include_str!("../../docs/guide/rollout.md")]
    pub struct Rollout;

    #[doc = include_str!("../../docs/guide/slow-clients.md")]
    pub struct SlowClients;

    #[doc = include_str!("../../docs/guide/streams.md")]
    pub struct Streams;

    #[doc = include_str!("../../docs/guide/testing.md")]
    pub struct Testing;
}
