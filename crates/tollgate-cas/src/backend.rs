//! [`CasBackend`], the contract a key-value backend fills in, and what
//! passes through it: a [`Snapshot`] read, a [`Stored`] value, a [`Swap`]
//! written.

use bytes::Bytes;
use std::future::Future;

/// A key-value backend that reads a key's bytes with a version and writes
/// bytes on condition that the version has not changed: all a
/// [`CasStore`](super::CasStore) needs to share rate limits between the instances of an
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
/// returns [`std::future::Ready`], as [`MemoryBackend`](super::MemoryBackend) does.
///
/// A whole backend, over a map in this process, on the wall clock:
///
/// ```
/// use bytes::Bytes;
/// use std::collections::HashMap;
/// use std::convert::Infallible;
/// use std::future::{Ready, ready};
/// use std::sync::{Arc, Mutex};
/// use tollgate_cas::{CasBackend, CasStore, Snapshot, Stored, Swap};
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
///         ready(Ok(Snapshot::new(WallClock.now(), value)))
///     }
///
///     fn write(&self, key: &str, swap: Swap) -> Self::Write {
///         let mut map = self.0.lock().unwrap();
///         let current = map.get(key).map(|stored| stored.version);
///         let in_time = swap.deadline.is_none_or(|deadline| WallClock.now() <= deadline);
///         if current != swap.expected || !in_time {
///             return ready(Ok(false));
///         }
///         map.insert(key.to_owned(), Stored::new(swap.bytes, swap.version));
///         ready(Ok(true))
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc as A;
/// use tollgate_store::{Key, NamedLimit, Policy, Store};
/// let store = CasStore::new(MapBackend::default());
/// let policy = A::new(Policy::new(vec![NamedLimit::new("api", "2/min".parse().unwrap())]));
/// let key = Key::from("alice");
/// for allowed in [true, true, false] {
///     let decision = store.check(&policy, &key, 1).resolve().await.unwrap();
///     assert_eq!(decision.merged().allowed(), allowed);
/// }
/// # });
/// ```
///
/// (This one keeps every value forever; a real backend sweeps those past
/// their `expires_at`, as [`MemoryBackend::sweep`](super::MemoryBackend::sweep) does.)
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
#[non_exhaustive]
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
#[non_exhaustive]
pub struct Stored {
    /// The states, as the store wrote them (empty: none, after a reset).
    pub bytes: Bytes,
    /// The version the store gave them.
    pub version: u64,
}

/// A conditional write, for [`CasBackend::write`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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

impl Snapshot {
    /// What a read found: the backend's clock `now` (ns since the Unix
    /// epoch) and the value, if the key has one.
    pub fn new(now: u64, value: Option<Stored>) -> Self {
        Snapshot { now, value }
    }
}

impl Stored {
    /// A value's `bytes` at `version`.
    pub fn new(bytes: Bytes, version: u64) -> Self {
        Stored { bytes, version }
    }
}

impl Swap {
    /// A write of `bytes` as `version` of a key that has no value, which
    /// never expires and has no deadline: the store makes its swaps, so
    /// this is for a backend's own tests (set the public fields for the
    /// others).
    pub fn new(bytes: Bytes, version: u64) -> Self {
        Swap {
            bytes,
            version,
            expected: None,
            expires_at: u64::MAX,
            deadline: None,
        }
    }
}
