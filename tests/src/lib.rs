//! Support for the cross-crate integration tests in `tests/`: real
//! `redis-server` processes on free loopback ports, standalone and as a
//! Cluster, stopped when dropped.

pub mod redis;
