//! Shared pieces of the example programs.
//!
//! [`demo`] is the logic of the `demo` program (`cargo run --release -p
//! tollgate-examples --bin demo`), kept in the library so that a test can
//! run it with a short trace and check what it reports. [`serving`] serves
//! an axum app with a header-read timeout, an idle timeout and a cap on open
//! connections: the playground `server` and the examples serve through it.
//! [`custom_store`] is a store of a user's own, proved by the conformance
//! kit in a test.

#![warn(missing_docs)]

pub mod custom_store;
pub mod demo;
pub mod plans;
pub mod serving;
