//! Support for the cross-crate integration tests in `tests/`: a stand-in
//! app behind a layer, and real `redis-server` processes on free loopback
//! ports, standalone and as a Cluster, stopped when dropped; and an
//! allocator that counts, for tests of what a path allocates; and a
//! capture of `tracing` events, for tests of what reaches the logs; and
//! (feature `metrics`) a recorder of counters and gauges.

pub mod alloc;
pub mod app;
pub mod logs;
#[cfg(feature = "metrics")]
pub mod metrics;
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
