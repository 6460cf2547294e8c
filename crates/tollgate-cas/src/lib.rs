//! A store over any key-value backend that can compare and swap: a
//! [`CasBackend`] reads a key's bytes with a version and writes new bytes
//! only if the version is still the one read; [`CasStore`] runs the
//! algorithms of `tollgate-core` over it — checks of every limit of a
//! policy all-or-nothing, refunds, debits, peeks, resets — and retries a
//! race it lost.
//!
//! # How it works
//!
//! - **One value per (policy, key)**, holding every limit's state
//!   ([`tollgate_core::encode_states`]): a request's limits are charged
//!   together by one conditional write, so all-or-nothing needs nothing
//!   more of the backend.
//! - **Read, decide, write if unchanged.** A check reads the value, its
//!   version and the backend's clock, decides with the core's
//!   [`check_all`](tollgate_core::check_all) as the memory store does, and
//!   writes the new states on condition that the version is still the one
//!   read. A refusal, and a peek, write nothing. A write that finds
//!   another version lost a race: the store reads again and decides again,
//!   after a short random pause (jittered, doubling: see
//!   [`CasStoreBuilder::backoff`]), at most
//!   [`CasStoreBuilder::max_attempts`] times (8 by default), then fails
//!   with [`CasError::Contended`] — never admits without a write. Each
//!   lost race is counted ([`CasStore::conflicts`], and with the `metrics`
//!   feature `tollgate_store_cas_conflicts_total{limits}`).
//! - **The backend's clock.** The time of every decision is the one the
//!   backend read with the value ([`Snapshot::now`]): a database's
//!   `now()`, so that every instance sharing it decides on one clock, as
//!   the Redis store does with the server's `TIME`.
//! - **Expiry.** Each write carries the moment its states are back at rest
//!   ([`Swap::expires_at`], on the backend's clock: when every limit is
//!   whole again and the state holds nothing a fresh one would not). From
//!   then on the backend may drop the value; reading it or finding nothing
//!   decides the same.
//! - **Late checks.** A check whose caller waits only `within`
//!   ([`Store::check_within`](tollgate_store::Store::check_within)) writes with a
//!   deadline on the backend's clock ([`Swap::deadline`]), which the
//!   backend enforces: a write that would land after the caller gave up
//!   is not made, and the check fails with [`CasError::Late`], having
//!   charged nothing.
//! - **Names.** A value's key is the store's prefix, the policy's limit
//!   names, its plan ([`Policy::plan`](tollgate_store::Policy::plan)) and the
//!   user's key, escaped so that no two (policy, key) pairs share one
//!   (see [`CasStore::key_name`]). Two layers whose policies name their
//!   limits alike share counts, as with the Redis store.
//! - **Presence.** [`CasStore::presence`] starts a beat that says, every
//!   second, in one value of the backend (`{prefix}:instances`, read and
//!   written as a check is), that this instance shares it, and counts the
//!   instances whose word has not ended and this one's rank: what a
//!   [`Split`](tollgate_store::Split) fallback divides the limits by. Any
//!   backend has it; it asks nothing more of one.
//!
//! # Writing a backend
//!
//! Two methods, each one statement of a database, one small file: see
//! [`CasBackend`] for the contract and an example, [`MemoryBackend`] for
//! the in-memory backend the tests use, and `docs/ARCHITECTURE.md`
//! ("Writing a compare-and-swap backend") for the steps. Then run the
//! conformance kit over `CasStore<YourBackend>`, and race it through
//! injected faults: `tollgate_conformance::Race::cas(your_backend)`
//! (the `tollgate-conformance` crate, its feature `cas`).
//!
//! A backend whose `read` and `write` disagree about what a key holds
//! (most often: a read that returns a value past its expiry, which the
//! write treats as absent) is named as such: a write over the version a
//! read had just returned is not made, the next read returns that version
//! again, and the call fails with [`CasError::Disagreeing`] at once,
//! having charged nothing, rather than being retried as a lost race.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature
// then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
// tower's lint set, as in tollgate.
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]

// The README's examples are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod backend;
mod error;
mod future;
mod local;
mod memory;
mod name;
mod observe;
mod presence;
mod retry;
mod share;
mod shared;
mod step;
mod store;
mod value;

pub use backend::{CasBackend, Snapshot, Stored, Swap};
pub use error::CasError;
pub use future::CasFuture;
pub use memory::MemoryBackend;
pub use store::{CasStore, CasStoreBuilder};
