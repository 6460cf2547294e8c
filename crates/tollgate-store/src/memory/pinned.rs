//! Keys held apart from the shards' maps while a
//! [`DirectLimiter`](crate::DirectLimiter) counts under them: the limiter
//! reaches its key's state without the store's hash, shard lock and map,
//! and every operation of the store finds the same state here, so both
//! decide on one count.

use super::keys::Slot;
use crate::policy::PackedLimiter;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use tollgate_internal::fingerprint::ByFingerprint;

/// A held key's state.
#[derive(Debug)]
pub(super) enum PinnedState {
    /// A one-word state and its policy's limit, as in the shards' cells.
    Cell {
        cell: AtomicU64,
        limiter: PackedLimiter,
    },
    /// Any other policy's states, as in the shards' slots.
    Slot(Mutex<Slot>),
}

impl PinnedState {
    /// The one-word state, if it is one.
    pub(super) fn cell(&self) -> Option<&AtomicU64> {
        match self {
            PinnedState::Cell { cell, .. } => Some(cell),
            PinnedState::Slot(_) => None,
        }
    }

    /// The slot, locked, if it is one. Every update is whole (a check, a
    /// refund, a debit), so a lock poisoned by a panic elsewhere still
    /// holds a consistent state.
    pub(super) fn slot(&self) -> Option<MutexGuard<'_, Slot>> {
        match self {
            PinnedState::Slot(slot) => Some(slot.lock().unwrap_or_else(PoisonError::into_inner)),
            PinnedState::Cell { .. } => None,
        }
    }
}

/// A held key: its state and how many [`PinnedKey`]s hold it.
#[derive(Debug)]
pub(super) struct Pinned {
    pub(super) state: PinnedState,
    /// Changed under the key's shard write lock, except by a clone of a
    /// live handle (which keeps it above 0).
    handles: AtomicUsize,
}

/// The held keys of one store. Read and changed under the key's shard
/// lock (read to use a key, write to hold or release one), so that a key
/// is either in its shard's map or here, never both, for every operation.
#[derive(Debug, Default)]
pub(super) struct PinnedKeys {
    /// How many keys are held: an operation that misses its shard's map
    /// looks here only when it is not zero.
    count: AtomicUsize,
    keys: RwLock<ByFingerprint<Arc<Pinned>>>,
}

impl PinnedKeys {
    /// How many keys are held.
    pub(super) fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// The held key of `fingerprint`, if there is one. Call under the
    /// key's shard lock.
    #[inline]
    pub(super) fn find(&self, fingerprint: u64) -> Option<Arc<Pinned>> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        keys.get(&fingerprint).cloned()
    }

    /// Holds `fingerprint`'s key once more, or for the first time with
    /// `state` (which `make` gives: the state taken out of the shard).
    /// Call under the key's shard write lock.
    pub(super) fn hold(&self, fingerprint: u64, make: impl FnOnce() -> PinnedState) -> Arc<Pinned> {
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(pinned) = keys.get(&fingerprint) {
            pinned.handles.fetch_add(1, Ordering::Relaxed);
            return pinned.clone();
        }
        let pinned = Arc::new(Pinned {
            state: make(),
            handles: AtomicUsize::new(1),
        });
        keys.insert(fingerprint, pinned.clone());
        self.count.fetch_add(1, Ordering::Relaxed);
        pinned
    }

    /// One handle of `fingerprint`'s key is gone: the state to put back in
    /// the shard when it was the last. Call under the key's shard write
    /// lock.
    pub(super) fn release(&self, fingerprint: u64, pinned: &Pinned) -> Option<Arc<Pinned>> {
        if pinned.handles.fetch_sub(1, Ordering::AcqRel) != 1 {
            return None;
        }
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        let released = keys.remove(&fingerprint);
        if released.is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        released
    }
}

/// What a [`PinnedKey`] needs of its store, whatever the store's clock.
pub(super) trait Release: Send + Sync {
    /// One handle of `pinned` is gone; the last one puts its state back
    /// among the shard's keys.
    fn release(&self, fingerprint: u64, pinned: &Pinned);
}

/// One key of one policy held apart in a memory store: what a
/// tollgate's `DirectLimiter` checks through. While a handle
/// lives the key is never evicted; when the last one is dropped, its state
/// goes back among the shard's other keys (unless it is at rest).
pub struct PinnedKey {
    pub(super) pinned: Arc<Pinned>,
    /// The store, to give the key back when the last handle goes.
    pub(super) store: Arc<dyn Release>,
    pub(super) fingerprint: u64,
}

impl Clone for PinnedKey {
    fn clone(&self) -> Self {
        // From a live handle: the count is at least 1 and stays so.
        self.pinned.handles.fetch_add(1, Ordering::Relaxed);
        PinnedKey {
            pinned: self.pinned.clone(),
            store: self.store.clone(),
            fingerprint: self.fingerprint,
        }
    }
}

impl Drop for PinnedKey {
    fn drop(&mut self) {
        self.store.release(self.fingerprint, &self.pinned);
    }
}

impl std::fmt::Debug for PinnedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedKey")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}
