//! A conformance kit for [`Store`]s: call it from a test of your own with
//! your own store, and it plays random traces of checks, refunds, debits,
//! peeks and late checks against it and against the memory store, for
//! every algorithm your store [supports](Store::supports), and fails with
//! the seed, the trace and the step where they part.
//!
//! What it checks:
//!
//! - **Decisions**: each check is decided as the memory store decides it
//!   (admitted or refused, and each limit's `remaining`; on a manual clock
//!   also `retry_after`, `reset_after` and `replenish_after`), refunds and
//!   debits included ([`Kit::never_more`] relaxes this to "never admits a
//!   request the algorithm would refuse", for stores that may refuse more,
//!   such as the local-first store's reservations).
//! - **Header figures**, the promises of the `RateLimit` fields: `r ≤ q`
//!   for every limit; on a refusal, every refusing limit has `t ≥ 1`
//!   (`replenish_after` > 0) and `t ≤ Retry-After` (`replenish_after ≤
//!   retry_after`); on a manual clock, a retry of the same cost after
//!   `Retry-After` passes.
//! - **Late checks**: a check whose caller stops waiting after 1 ns
//!   ([`Store::check_within`]) and gets an error has charged nothing.
//! - **Peek and reset**: a peek charges nothing and answers as the memory
//!   store's; after [`Store::reset`] the key is whole.
//! - **Plan changes**: now and then the key moves to another plan (the same
//!   limits at other quotas, a per-key quota changing) through
//!   [`Store::carry`], on both stores; every later step is decided under
//!   the new plan, so the usage the store carried over is checked as any
//!   count is.
//!
//! Refunds are played only if the store says it gives charges back
//! ([`Store::can`] [`Capability::Refund`]), debits only if it charges into
//! debt; the [`Report`] says what was left out.
//!
//! ```
//! use tollgate_conformance::Kit;
//! use tollgate_store::MemoryStore;
//! use tollgate_core::ManualClock;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let clock = ManualClock::new(0);
//! let store = MemoryStore::builder().clock(clock.clone()).build();
//! let report = Kit::manual(store, clock).traces(5).run().await.unwrap();
//! assert!(report.skipped.is_empty());
//! # });
//! ```
//!
//! A store on its own clock (a database's, Redis's `TIME`) is checked
//! with [`Kit::real_time`]: quotas of a day, so that nothing refills while
//! a trace runs and the decisions depend on counts alone (a run waits out
//! the last half minute of a UTC day, when day-long windows turn over).
//! The kit awaits the store's futures and, on a real clock, tokio's
//! timer: run it in a tokio runtime with time enabled
//! (`#[tokio::test]`).
//!
//! # Races, lateness and faults: [`Race`]
//!
//! [`Kit`] plays one step at a time against one instance: it cannot see a
//! race between two instances, nor what a reply that comes late does.
//! [`Race`] can: several clients (tokio tasks) send checks for a few
//! shared keys through several instances of the store at once, some
//! stopping waiting after a short deadline (heard out as the layer does,
//! through [`Watched`](tollgate_store::Watched), or dropped unheard), and a
//! checker asks of each key whether *some* order of the calls, decided by
//! the reference algorithm, explains the admissions the callers kept, the
//! refusals, and the key's count once every late check has been heard
//! out. Over a compare-and-swap backend ([`Race::cas`], feature `cas`) it
//! puts [`Faults`] in front of the backend: replies late and with jitter,
//! writes made just before their deadline and answered after it, writes
//! held until their deadline has passed, restarts that refuse calls for a
//! while. A failure names what went wrong, the seed, and the shortest
//! trace that still fails.
//!
//! Run both on a backend of your own (a `CasBackend` over your database):
//!
//! ```
//! # #[cfg(feature = "cas")] {
//! use tollgate_conformance::{Kit, Race};
//! use tollgate_cas::{CasStore, MemoryBackend};
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let backend = MemoryBackend::new(); // yours: MyBackend::connect(..).await
//! // One step at a time, every operation, against the memory store.
//! Kit::real_time(CasStore::new(backend.clone())).traces(2).run().await.unwrap();
//! // Racing instances over it, through injected faults.
//! let report = Race::cas(backend).runs(1).run().await.unwrap();
//! assert!(report.skipped.is_empty());
//! # });
//! # }
//! ```
//!
//! # Its reach, and its limits
//!
//! The kit sees what a store decides and how it counts: a decision unlike
//! the memory store's, a header figure that breaks its promise, a charge
//! a refund or a reset did not undo, a lost update, a charge made after
//! its caller's deadline, a value served after its expiry, a late answer
//! not given back. It does not see:
//!
//! - how fast a store is, or how it behaves past its own bounds (the
//!   number of keys, the late checks heard out at once);
//! - in a race, the timings of a single decision (`retry_after`,
//!   `reset_after`): races use day-long quotas, so that their verdicts
//!   rest on counts, and the one-step kit checks timings on a manual
//!   clock; nor refunds and debits sent by callers themselves;
//! - a fault it does not inject: a reply lost after its write was made
//!   (no store can tell what such a write did), a clock that runs back, a
//!   network partition between instances of a store that keeps counts
//!   of its own;
//! - an interleaving the scheduler does not make: a seed replays the
//!   plan of a race, not its interleaving, so a bug that needs a rare
//!   one may need more runs ([`Race::runs`]) to show.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature
// then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
// tower's lint set, as in tollgate.
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]

// The README's examples are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod checker;
#[cfg(feature = "cas")]
mod faults;
mod kit;
mod ledger;
mod play;
mod race;
mod real_time;
mod report;
mod trace;

#[cfg(feature = "cas")]
#[cfg_attr(docsrs, doc(cfg(feature = "cas")))]
pub use faults::Faults;
pub use kit::Kit;
pub use ledger::{FaultError, KeyLedger, Ledger};
pub use race::Race;
pub use report::{Failure, RaceReport, Report};

// The names the crate's documentation links to.
#[cfg(doc)]
use tollgate_store::{Capability, Store};
