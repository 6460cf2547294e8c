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
//!   feature `tollgate_store_cas_conflicts_total{policy}`).
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
//!   ([`Store::check_within`](crate::Store::check_within)) writes with a
//!   deadline on the backend's clock ([`Swap::deadline`]), which the
//!   backend enforces: a write that would land after the caller gave up
//!   is not made, and the check fails with [`CasError::Late`], having
//!   charged nothing.
//! - **Names.** A value's key is the store's prefix, the policy's limit
//!   names, its plan ([`Policy::plan`](crate::Policy::plan)) and the
//!   user's key, escaped so that no two (policy, key) pairs share one
//!   (see [`CasStore::key_name`]). Two layers whose policies name their
//!   limits alike share counts, as with the Redis store.
//!
//! # Writing a backend
//!
//! Two methods, each one statement of a database, one small file: see
//! [`CasBackend`] for the contract and an example, [`MemoryBackend`] for
//! the in-memory backend the tests use, and `docs/ARCHITECTURE.md`
//! ("Writing a compare-and-swap backend") for the steps. Then run the
//! conformance kit over `CasStore<YourBackend>`.

mod error;
mod future;
mod memory;
mod name;
mod retry;
mod shared;
mod step;
mod store;

pub use error::CasError;
pub use future::CasFuture;
pub use memory::MemoryBackend;
pub use store::{CasStore, CasStoreBuilder};

use bytes::Bytes;
use std::future::Future;

/// A key-value backend that reads a key's bytes with a version and writes
/// bytes on condition that the version has not changed: all a
/// [`CasStore`] needs to share rate limits between the instances of an
/// app.
///
/// - [`read`](Self::read): the key's value and version, if it holds one,
///   and the backend's clock ([`Snapshot`]). One statement:
///   `SELECT value, version, now() … WHERE key = $1` (a row for the clock
///   even when the key has none).
/// - [`write`](Self::write): the [`Swap`]'s bytes and version, if and only
///   if the key's version is still [`Swap::expected`] (`None`: it holds no
///   value) and the backend's clock has not passed [`Swap::deadline`];
///   `Ok(true)` if written, `Ok(false)` if not (the store reads again).
///   One statement: an `UPDATE … WHERE key = $1 AND version = $2 AND
///   now() <= $deadline`, or for `None` an `INSERT … ON CONFLICT DO
///   NOTHING` under the same deadline.
///
/// The store chooses each new version (random, never the one it
/// replaces): a backend keeps it beside the value and compares it, nothing
/// more. A value past its [`Swap::expires_at`] may be dropped at any
/// time, or read as absent; whichever the backend does, `read` and
/// `write` must agree (a value `read` would not return is not the one
/// `expected` names). The futures are the backend's own: a backend that
/// writes `async` code boxes it (`Pin<Box<dyn Future + Send>>`, one
/// allocation a call beside a round trip); one that answers at once
/// returns [`std::future::Ready`], as [`MemoryBackend`] does.
///
/// A whole backend, over a map in this process, on the wall clock:
///
/// ```
/// use bytes::Bytes;
/// use std::collections::HashMap;
/// use std::convert::Infallible;
/// use std::future::{Ready, ready};
/// use std::sync::{Arc, Mutex};
/// use tollgate::store::cas::{CasBackend, CasStore, Snapshot, Stored, Swap};
/// use tollgate_core::{Clock, WallClock};
///
/// #[derive(Clone, Default)]
/// struct MapBackend(Arc<Mutex<HashMap<String, Stored>>>);
///
/// impl CasBackend for MapBackend {
///     type Error = Infallible;
///     type Read = Ready<Result<Snapshot, Infallible>>;
///     type Write = Ready<Result<bool, Infallible>>;
///
///     fn read(&self, key: &str) -> Self::Read {
///         let value = self.0.lock().unwrap().get(key).cloned();
///         ready(Ok(Snapshot { now: WallClock.now(), value }))
///     }
///
///     fn write(&self, key: &str, swap: Swap) -> Self::Write {
///         let mut map = self.0.lock().unwrap();
///         let current = map.get(key).map(|stored| stored.version);
///         let in_time = swap.deadline.is_none_or(|deadline| WallClock.now() <= deadline);
///         if current != swap.expected || !in_time {
///             return ready(Ok(false));
///         }
///         map.insert(key.to_owned(), Stored { bytes: swap.bytes, version: swap.version });
///         ready(Ok(true))
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc as A;
/// use tollgate::{Key, NamedLimit, Policy, Store};
/// let store = CasStore::new(MapBackend::default());
/// let policy = A::new(Policy::new(vec![NamedLimit::new("api", "2/min".parse().unwrap())]));
/// let key = Key::from("alice");
/// for allowed in [true, true, false] {
///     let decision = store.check(&policy, &key, 1).resolve().await.unwrap();
///     assert_eq!(decision.merged.allowed(), allowed);
/// }
/// # });
/// ```
///
/// (This one keeps every value forever; a real backend sweeps those past
/// their `expires_at`, as [`MemoryBackend::sweep`] does.)
pub trait CasBackend: Send + Sync + 'static {
    /// What can go wrong (`Infallible` for a map in memory).
    type Error: std::error::Error + Send + Sync + 'static;
    /// The future of a [`read`](Self::read).
    type Read: Future<Output = Result<Snapshot, Self::Error>> + Send + 'static;
    /// The future of a [`write`](Self::write).
    type Write: Future<Output = Result<bool, Self::Error>> + Send + 'static;

    /// The value `key` holds, with its version, and the backend's clock.
    fn read(&self, key: &str) -> Self::Read;

    /// Writes `swap.bytes` with `swap.version` under `key` if its version
    /// is still `swap.expected` and the backend's clock has not passed
    /// `swap.deadline`: `Ok(true)` if written, `Ok(false)` if not.
    fn write(&self, key: &str, swap: Swap) -> Self::Write;
}

/// What a [`CasBackend::read`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The backend's clock when it read, in nanoseconds since the Unix
    /// epoch (the window algorithms align their windows to it): every
    /// decision is made at this time, and expiries and deadlines are on
    /// this clock. It must not run back as seen by successive reads of
    /// one key (a database's clock, a monotonic clock).
    pub now: u64,
    /// The key's value and version; `None` if it holds none.
    pub value: Option<Stored>,
}

/// A value as a backend keeps it: the bytes and their version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The states, as the store wrote them (empty: none, after a reset).
    pub bytes: Bytes,
    /// The version the store gave them.
    pub version: u64,
}

/// A conditional write, for [`CasBackend::write`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swap {
    /// The new value.
    pub bytes: Bytes,
    /// Its version, to keep beside it: chosen by the store, random and
    /// never the one it replaces.
    pub version: u64,
    /// The version the key must still hold; `None`: the key must hold no
    /// value.
    pub expected: Option<u64>,
    /// When the states written are back at rest, on the backend's clock
    /// (ns since the Unix epoch): from then on the value may be dropped.
    pub expires_at: u64,
    /// The moment after which, on the backend's clock, the write must not
    /// be made: the caller has stopped waiting for it. `None`: no
    /// deadline.
    pub deadline: Option<u64>,
}
