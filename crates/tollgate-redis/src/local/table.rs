//! The local-first store's keys: a bounded, sharded map from (policy, key)
//! to the key's slot.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};
use tollgate::Key;

const SHARDS: usize = 16;

/// One shard: the slots of some keys, by (policy id, key).
type Shard<S> = Mutex<HashMap<(u64, Key), Arc<S>>>;

/// The slots of every key the store decides, at most `max_keys` of them.
pub(crate) struct Table<S> {
    shards: Box<[Shard<S>]>,
    per_shard: usize,
    hasher: RandomState,
}

/// What a table asks of a slot before dropping it to make room.
pub(crate) trait Evictable {
    /// Whether dropping the slot loses nothing the store still owes Redis
    /// (counts not yet reported) and no request waits on it.
    fn settled(&self) -> bool;
}

impl<S: Evictable> Table<S> {
    pub(crate) fn new(max_keys: usize) -> Self {
        Table {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, policy: u64, key: &Key) -> &Shard<S> {
        let mut hasher = self.hasher.build_hasher();
        policy.hash(&mut hasher);
        key.hash(&mut hasher);
        // SHARDS is a power of two.
        &self.shards[(hasher.finish() as usize) & (SHARDS - 1)]
    }

    /// The slot of `key` under policy `policy`, made by `make` if it has
    /// none; `None` when the table is full of slots that cannot be dropped
    /// (the caller then asks Redis directly).
    pub(crate) fn get_or_insert(
        &self,
        policy: u64,
        key: &Key,
        make: impl FnOnce() -> S,
    ) -> Option<Arc<S>> {
        let mut shard = self
            .shard(policy, key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A borrowed lookup would need the tuple; keys are cheap to clone
        // (IPs and short keys inline) and only a miss keeps the clone.
        let probe = (policy, key.clone());
        if let Some(slot) = shard.get(&probe) {
            return Some(slot.clone());
        }
        if shard.len() >= self.per_shard {
            shard.retain(|_, slot| Arc::strong_count(slot) > 1 || !slot.settled());
            if shard.len() >= self.per_shard {
                return None;
            }
        }
        let slot = Arc::new(make());
        shard.insert(probe, slot.clone());
        Some(slot)
    }

    /// Every slot, for the periodic sync (cloned out, so that no shard
    /// stays locked while Redis answers).
    pub(crate) fn all(&self) -> Vec<Arc<S>> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            all.extend(shard.values().cloned());
        }
        all
    }

    /// How many keys the table holds.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Slot(AtomicBool);
    impl Evictable for Slot {
        fn settled(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn a_full_table_drops_settled_slots_and_never_unsettled_ones() {
        let table = Table::new(SHARDS); // one slot per shard
        let mut kept = Vec::new();
        let mut refused = 0;
        for i in 0..1_000u64 {
            match table.get_or_insert(1, &Key::from(i), || Slot(AtomicBool::new(false))) {
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
                    .get_or_insert(1, &Key::from(i), || Slot(AtomicBool::new(true)))
                    .is_some()
            );
        }
        assert!(table.len() <= SHARDS);
    }
}
