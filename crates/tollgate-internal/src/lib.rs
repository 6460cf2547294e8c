//! Pieces the tollgate crates share, kept out of their public APIs: the one
//! bounded map ([`bounded`]), maps keyed by fingerprints ([`fingerprint`]),
//! wake-ups for requests queued for an in-flight slot ([`wakeups`]), and
//! what a change to a charge is called in a store's log
//! ([`ChargeChange`]).
//!
//! Not an API of its own: it follows tollgate's versions and may change in
//! any release. A store of your own may use the bounded map, on those
//! terms.

// tower's lint set, as in the other crates.
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]

pub mod bounded;
mod charge_change;
pub mod fingerprint;
pub mod wakeups;

pub use charge_change::ChargeChange;
