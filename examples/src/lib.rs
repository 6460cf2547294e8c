//! Shared pieces of the example programs.
//!
//! [`demo`] is the logic of the `demo` program (`cargo run --release -p
//! tollgate-examples --bin demo`), kept in the library so that a test can
//! run it with a short trace and check what it reports.

#![warn(missing_docs)]

pub mod demo;
