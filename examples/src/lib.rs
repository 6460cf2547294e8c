//! Shared pieces of the example programs.
//!
//! The demo (`cargo run --release -p tollgate-demo`) is a package of its
//! own, `demo/`, so that it builds only what it needs. [`serving`] serves
//! an axum app with a header-read timeout, an idle timeout and a cap on open
//! connections: the playground `server` and the examples serve through it.
//! [`custom_store`] is a store of a user's own, proved by the conformance
//! kit in a test. The playground's followed files ([`limits`], [`plans`],
//! [`access`]) share one watcher, [`watched`], and read keys in the
//! extractor's form through [`keys`].

#![warn(missing_docs)]

pub mod access;
pub mod custom_store;
pub mod keys;
pub mod limits;
pub mod plans;
pub mod serving;
pub mod watched;
