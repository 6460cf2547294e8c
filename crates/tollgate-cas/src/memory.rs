//! [`MemoryBackend`]: a [`CasBackend`] over a map in this process, on a
//! clock of your choice — the reference backend, and the one tests use
//! (a [`ManualClock`](tollgate_core::ManualClock) moves it).

use super::backend::{CasBackend, Snapshot, Stored, Swap};
use bytes::Bytes;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tollgate_core::{Clock, MonotonicClock};

/// A [`CasBackend`] over a map in this process, shared by its clones: what
/// a database does, in a few lines — a value, its version and its expiry
/// per key; a read with the clock; a write on condition that the version
/// is still the one read and the deadline has not passed. A value past its
/// expiry reads as absent and is dropped by [`sweep`](Self::sweep).
///
/// A [`CasStore`](super::CasStore) over it decides as a
/// [`MemoryStore`](tollgate_store::MemoryStore) does, one round trip of the
/// contract at a time: for tests of the store and of backends, not for
/// production (the memory store is faster, and bounded).
///
/// ```
/// use tollgate_cas::{CasStore, MemoryBackend};
/// use tollgate_core::ManualClock;
///
/// let clock = ManualClock::new(0);
/// let backend = MemoryBackend::with_clock(clock.clone());
/// let store = CasStore::new(backend.clone());
/// # let _ = store;
/// assert!(backend.is_empty());
/// ```
#[derive(Debug)]
pub struct MemoryBackend<C = MonotonicClock> {
    map: Arc<Mutex<HashMap<Box<str>, Entry>>>,
    clock: C,
}

/// A value as the backend keeps it.
#[derive(Clone, Debug)]
struct Entry {
    bytes: Bytes,
    version: u64,
    expires_at: u64,
}

impl<C: Clone> Clone for MemoryBackend<C> {
    fn clone(&self) -> Self {
        MemoryBackend {
            map: self.map.clone(),
            clock: self.clock.clone(),
        }
    }
}

impl MemoryBackend {
    /// An empty backend on the monotonic clock (nanoseconds since the Unix
    /// epoch, never running back).
    pub fn new() -> Self {
        // The clock sets itself up at its first reading (up to 200 ms
        // once per process): here, not at the first request.
        tollgate_core::Clock::now(&MonotonicClock);
        Self::with_clock(MonotonicClock)
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock> MemoryBackend<C> {
    /// An empty backend on `clock` (a [`ManualClock`](tollgate_core::ManualClock)
    /// in tests).
    pub fn with_clock(clock: C) -> Self {
        MemoryBackend {
            map: Arc::default(),
            clock,
        }
    }

    /// How many values it holds, expired ones included until swept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every value past its expiry: what a database's sweeper does.
    /// Returns how many it dropped.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        let mut map = self.lock();
        let before = map.len();
        map.retain(|_, entry| entry.expires_at > now);
        before - map.len()
    }

    /// The value under `key` as it is kept, expired or not.
    pub fn get(&self, key: &str) -> Option<Stored> {
        self.lock().get(key).map(|entry| Stored {
            bytes: entry.bytes.clone(),
            version: entry.version,
        })
    }

    /// When the value under `key` may be dropped (ns on the backend's
    /// clock).
    pub fn expires_at(&self, key: &str) -> Option<u64> {
        self.lock().get(key).map(|entry| entry.expires_at)
    }

    /// The names of the keys it holds, in no order.
    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().map(|key| key.to_string()).collect()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, Entry>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<C: Clock> CasBackend for MemoryBackend<C> {
    type Error = Infallible;
    type Read = Ready<Result<Snapshot, Infallible>>;
    type Write = Ready<Result<bool, Infallible>>;

    fn read(&self, key: &str) -> Self::Read {
        let map = self.lock();
        // The clock read under the lock: reads and writes of a key are in
        // the clock's order.
        let now = self.clock.now();
        let value = map
            .get(key)
            .filter(|entry| entry.expires_at > now)
            .map(|entry| Stored {
                bytes: entry.bytes.clone(),
                version: entry.version,
            });
        ready(Ok(Snapshot { now, value }))
    }

    fn write(&self, key: &str, swap: Swap) -> Self::Write {
        let mut map = self.lock();
        let now = self.clock.now();
        let current = map
            .get(key)
            .filter(|entry| entry.expires_at > now)
            .map(|entry| entry.version);
        let in_time = swap.deadline.is_none_or(|deadline| now <= deadline);
        if current != swap.expected || !in_time {
            return ready(Ok(false));
        }
        let entry = Entry {
            bytes: swap.bytes,
            version: swap.version,
            expires_at: swap.expires_at,
        };
        match map.get_mut(key) {
            Some(slot) => *slot = entry,
            None => {
                map.insert(key.into(), entry);
            }
        }
        ready(Ok(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::ManualClock;

    fn swap(bytes: &'static [u8], version: u64, expected: Option<u64>) -> Swap {
        Swap {
            bytes: Bytes::from_static(bytes),
            version,
            expected,
            expires_at: 100,
            deadline: None,
        }
    }

    fn write(backend: &MemoryBackend<ManualClock>, swap: Swap) -> bool {
        let Ok(written) = backend.write("k", swap).into_inner();
        written
    }

    fn read(backend: &MemoryBackend<ManualClock>) -> Snapshot {
        let Ok(snapshot) = backend.read("k").into_inner();
        snapshot
    }

    #[test]
    fn a_write_lands_only_on_the_version_it_expects() {
        let clock = ManualClock::new(10);
        let backend = MemoryBackend::with_clock(clock.clone());
        assert_eq!(read(&backend).value, None);
        assert!(!write(&backend, swap(b"a", 1, Some(7))));
        assert!(write(&backend, swap(b"a", 1, None)));
        assert!(!write(&backend, swap(b"b", 2, None)));
        assert!(write(&backend, swap(b"b", 2, Some(1))));
        assert_eq!(
            read(&backend),
            Snapshot {
                now: 10,
                value: Some(Stored {
                    bytes: Bytes::from_static(b"b"),
                    version: 2
                })
            }
        );
    }

    #[test]
    fn a_value_past_its_expiry_is_absent_and_swept() {
        let clock = ManualClock::new(10);
        let backend = MemoryBackend::with_clock(clock.clone());
        assert!(write(&backend, swap(b"a", 1, None)));
        clock.set(100);
        assert_eq!(read(&backend).value, None);
        // Written over as absent, though not swept yet.
        assert!(!write(&backend, swap(b"b", 2, Some(1))));
        assert_eq!(backend.sweep(), 1);
        assert!(backend.is_empty());
    }

    #[test]
    fn a_write_past_its_deadline_is_not_made() {
        let clock = ManualClock::new(10);
        let backend = MemoryBackend::with_clock(clock.clone());
        let late = Swap {
            deadline: Some(9),
            ..swap(b"a", 1, None)
        };
        assert!(!write(&backend, late));
        let in_time = Swap {
            deadline: Some(10),
            ..swap(b"a", 1, None)
        };
        assert!(write(&backend, in_time));
    }
}
