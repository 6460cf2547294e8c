//! The scenarios, one module each. Every scenario runs tollgate and its
//! anchor back to back in alternating rounds and returns one
//! [`Outcome`](crate::report::Outcome) per row of the table; but
//! [`accuracy`], which compares decisions with the exact sliding log's and
//! has a table of its own, and [`local`], whose Redis call counts and
//! over-admission have tables of their own beside its rows, and
//! [`postgres`], whose hot key's contention has a table beside its rows.

pub mod accuracy;
pub mod contention;
pub mod core;
pub mod http;
pub mod layer;
pub mod local;
pub mod memory;
pub mod postgres;
pub mod redis;
pub mod redis_scripts;
pub mod rlqs;
pub mod rls;
pub mod rls_core;

/// Every scenario's name, in the order they run (cheap and short first, so
/// that a broken build fails fast).
pub const ALL: [&str; 13] = [
    "accuracy",
    "core",
    "memory",
    "contention",
    "layer",
    "http",
    "redis",
    "redis-scripts",
    "local",
    "postgres",
    "rls",
    "rls-core",
    "rlqs",
];
