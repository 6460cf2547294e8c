//! The local-first store's keys: a bounded, sharded map from (policy, key)
//! to the key's slot.

use std::hash::BuildHasher;
use std::sync::{Arc, PoisonError, RwLock};
use tollgate::Key;
use tollgate::store::ByFingerprint;

const SHARDS: usize = 16;

/// One shard: the fingerprint of (policy id, key) → slot, read-locked to
/// find a slot (so requests for keys of one shard do not wait for each
/// other), write-locked to add one. Aligned to 128 bytes (two cache lines,
/// the unit adjacent-line prefetchers fetch), so that no two shards' locks
/// share a line.
#[repr(align(128))]
struct Shard<S>(RwLock<ByFingerprint<Arc<S>>>);

/// The slots of every key the store decides, at most `max_keys` of them.
pub(crate) struct Table<S> {
    shards: Box<[Shard<S>]>,
    per_shard: usize,
    hasher: foldhash::fast::RandomState,
}

/// What a table asks of a slot.
pub(crate) trait Evictable {
    /// Whether dropping the slot loses nothing the store still owes Redis
    /// (counts not yet reported) and no request waits on it.
    fn settled(&self) -> bool;

    /// Whether the slot is `key`'s under policy `policy`: a slot is found
    /// by a 64-bit fingerprint, and checked.
    fn is(&self, policy: u64, key: &Key) -> bool;
}

impl<S: Evictable> Table<S> {
    pub(crate) fn new(max_keys: usize) -> Self {
        Table {
            shards: (0..SHARDS).map(|_| Shard(RwLock::default())).collect(),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// Calls `decide` with the slot of `key` under policy `policy` (made by
    /// `make` if it has none), under its shard's read lock, so that a
    /// request decided at once touches no reference count. `None` when the
    /// table is full of slots that cannot be dropped, or when another key
    /// has the same fingerprint (one chance in 2⁶⁴ per pair): the caller
    /// then asks Redis directly.
    pub(crate) fn with_slot<R>(
        &self,
        policy: u64,
        key: &Key,
        make: impl FnOnce() -> S,
        decide: impl FnOnce(&Arc<S>) -> R,
    ) -> Option<R> {
        let (fingerprint, shard) = self.place(policy, key);
        {
            let slots = shard.0.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(slot) = slots.get(&fingerprint) {
                return slot.is(policy, key).then(|| decide(slot));
            }
        }
        let mut slots = shard.0.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get(&fingerprint) {
            // Added by another request in between.
            return slot.is(policy, key).then(|| decide(slot));
        }
        if slots.len() >= self.per_shard {
            slots.retain(|_, slot| Arc::strong_count(slot) > 1 || !slot.settled());
            if slots.len() >= self.per_shard {
                return None;
            }
        }
        let slot = slots.entry(fingerprint).or_insert_with(|| Arc::new(make()));
        Some(decide(slot))
    }

    /// The fingerprint of `key` under policy `policy`, and its shard.
    fn place(&self, policy: u64, key: &Key) -> (u64, &Shard<S>) {
        let fingerprint = self.hasher.hash_one((policy, key));
        // Bits the shard's map does not use to place entries (its low bits)
        // or to tell them apart in a group (its top seven).
        let shard = &self.shards[(fingerprint >> 32) as usize & (SHARDS - 1)];
        (fingerprint, shard)
    }

    /// The slot of `key` under policy `policy`, if the table holds one.
    pub(crate) fn find(&self, policy: u64, key: &Key) -> Option<Arc<S>> {
        let (fingerprint, shard) = self.place(policy, key);
        let slots = shard.0.read().unwrap_or_else(PoisonError::into_inner);
        slots
            .get(&fingerprint)
            .filter(|slot| slot.is(policy, key))
            .cloned()
    }

    /// Takes `key`'s slot under policy `policy` out of the table (an
    /// operator's reset or unblock); requests that hold it finish with it,
    /// the next ones make a fresh one.
    pub(crate) fn remove(&self, policy: u64, key: &Key) -> Option<Arc<S>> {
        let (fingerprint, shard) = self.place(policy, key);
        let mut slots = shard.0.write().unwrap_or_else(PoisonError::into_inner);
        let ours = slots
            .get(&fingerprint)
            .is_some_and(|slot| slot.is(policy, key));
        if ours {
            slots.remove(&fingerprint)
        } else {
            None
        }
    }

    /// Every slot, for the periodic sync (cloned out, so that no shard
    /// stays locked while Redis answers).
    pub(crate) fn all(&self) -> Vec<Arc<S>> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            let slots = shard.0.read().unwrap_or_else(PoisonError::into_inner);
            all.extend(slots.values().cloned());
        }
        all
    }

    /// How many keys the table holds.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.read().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Slot(AtomicBool, u64);
    impl Evictable for Slot {
        fn settled(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
        fn is(&self, _: u64, key: &Key) -> bool {
            *key == Key::from(self.1)
        }
    }

    #[test]
    fn a_full_table_drops_settled_slots_and_never_unsettled_ones() {
        let table = Table::new(SHARDS); // one slot per shard
        let mut kept = Vec::new();
        let mut refused = 0;
        for i in 0..1_000u64 {
            let slot = || Slot(AtomicBool::new(false), i);
            match table.with_slot(1, &Key::from(i), slot, Arc::clone) {
                Some(slot) => kept.push(slot),
                None => refused += 1,
            }
        }
        assert!(table.len() <= SHARDS);
        assert!(refused > 0);
        // Once settled, they make room.
        for slot in &kept {
            slot.0.store(true, Ordering::Relaxed);
        }
        drop(kept);
        for i in 1_000..2_000u64 {
            assert!(
                table
                    .with_slot(
                        1,
                        &Key::from(i),
                        || Slot(AtomicBool::new(true), i),
                        Arc::clone
                    )
                    .is_some()
            );
        }
        assert!(table.len() <= SHARDS);
    }
}
