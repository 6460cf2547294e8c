//! Support for the cross-crate integration tests in `tests/`: a stand-in
//! app behind a layer, and real `redis-server` processes on free loopback
//! ports, standalone and as a Cluster, stopped when dropped.

pub mod app;
pub mod redis;
