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
