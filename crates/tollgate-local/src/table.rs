//! The local-first store's keys: a bounded, sharded map from (policy, key)
//! to the key's slot.

use std::sync::Arc;
use tollgate_internal::bounded::{BoundedMap, ByFingerprint, Eviction, Idle};
use tollgate_store::Key;

const SHARDS: usize = 16;

/// The slots of every key the store decides, at most `max_keys` of them:
/// the fingerprint of (policy id, key) → slot, in tollgate's bounded map,
/// read-locked to find a slot (so requests for keys of one shard do not
/// wait for each other), write-locked to add one.
pub(crate) struct Table<S> {
    slots: BoundedMap<ByFingerprint<Held<S>>>,
}

/// What [`Table::with_slot`] did.
pub(crate) enum Found<R> {
    /// The key's slot decided: its answer.
    Decided(R),
    /// The key had no slot, and none was made for it.
    Refused,
    /// No room for the key's slot.
    Full,
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

/// A slot in the table; idle when it is settled and no request holds it.
/// A slot that is not idle is never dropped: its counts are owed to Redis.
struct Held<S>(Arc<S>);

impl<S: Evictable> Idle for Held<S> {
    fn idle_at(&self) -> u64 {
        u64::MAX
    }

    fn is_idle(&self, _now: u64) -> bool {
        Arc::strong_count(&self.0) == 1 && self.0.settled()
    }
}

impl<S: Evictable> Table<S> {
    pub(crate) fn new(max_keys: usize) -> Self {
        Table {
            slots: BoundedMap::new(SHARDS, max_keys.div_ceil(SHARDS).max(1)),
        }
    }

    /// Calls `decide` with the slot of `key` under policy `policy` (made by
    /// `make` if it has none), under its shard's read lock, so that a
    /// request decided at once touches no reference count. `make` is asked
    /// only for a key with no slot, and may refuse (a policy this store
    /// does not decide): [`Found::Refused`]. [`Found::Full`] when the table
    /// is full of slots that cannot be dropped, or when another key has the
    /// same fingerprint (one chance in 2⁶⁴ per pair): the caller then asks
    /// the shared store directly.
    pub(crate) fn with_slot<R, D: FnOnce(&Arc<S>) -> R>(
        &self,
        policy: u64,
        key: &Key,
        make: impl FnOnce() -> Option<S>,
        decide: D,
    ) -> Found<R> {
        let fingerprint = self.slots.fingerprint(policy, key);
        let found = |slot: &Arc<S>, decide: D| {
            if slot.is(policy, key) {
                Found::Decided(decide(slot))
            } else {
                Found::Full
            }
        };
        {
            let slots = self.slots.read(fingerprint);
            if let Some(Held(slot)) = slots.get(&fingerprint) {
                return found(slot, decide);
            }
        }
        let Some(made) = make() else {
            return Found::Refused;
        };
        let mut slots = self.slots.write(fingerprint);
        if let Some(Held(slot)) = slots.get(&fingerprint) {
            // Added by another request in between.
            return found(slot, decide);
        }
        if !slots.make_room(0, Eviction::IdleOnly) {
            return Found::Full;
        }
        let Held(slot) = slots
            .entry(fingerprint)
            .or_insert_with(|| Held(Arc::new(made)));
        found(slot, decide)
    }

    /// The slot of `key` under policy `policy`, if the table holds one.
    pub(crate) fn find(&self, policy: u64, key: &Key) -> Option<Arc<S>> {
        let fingerprint = self.slots.fingerprint(policy, key);
        let slots = self.slots.read(fingerprint);
        slots
            .get(&fingerprint)
            .filter(|Held(slot)| slot.is(policy, key))
            .map(|Held(slot)| slot.clone())
    }

    /// Takes `key`'s slot under policy `policy` out of the table (an
    /// operator's reset or unblock); requests that hold it finish with it,
    /// the next ones make a fresh one.
    pub(crate) fn remove(&self, policy: u64, key: &Key) -> Option<Arc<S>> {
        let fingerprint = self.slots.fingerprint(policy, key);
        let mut slots = self.slots.write(fingerprint);
        let ours = slots
            .get(&fingerprint)
            .is_some_and(|Held(slot)| slot.is(policy, key));
        if ours {
            slots.remove(&fingerprint).map(|Held(slot)| slot)
        } else {
            None
        }
    }

    /// Every slot, for the periodic sync (cloned out, so that no shard
    /// stays locked while Redis answers).
    pub(crate) fn all(&self) -> Vec<Arc<S>> {
        let mut all = Vec::new();
        self.slots
            .each_shard_read(|slots| all.extend(slots.values().map(|Held(slot)| slot.clone())));
        all
    }

    /// How many keys the table holds.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
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
            let slot = || Some(Slot(AtomicBool::new(false), i));
            match table.with_slot(1, &Key::from(i), slot, Arc::clone) {
                Found::Decided(slot) => kept.push(slot),
                Found::Full => refused += 1,
                Found::Refused => unreachable!("every slot is made"),
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
            assert!(matches!(
                table.with_slot(
                    1,
                    &Key::from(i),
                    || Some(Slot(AtomicBool::new(true), i)),
                    Arc::clone
                ),
                Found::Decided(_)
            ));
        }
        assert!(table.len() <= SHARDS);
    }

    #[test]
    fn a_slot_refused_is_not_made_and_an_existing_one_is_not_asked_again() {
        let table = Table::new(SHARDS);
        let refused = table.with_slot(1, &Key::from(7u64), || None::<Slot>, Arc::clone);
        assert!(matches!(refused, Found::Refused));
        assert_eq!(table.len(), 0);
        let made = || Some(Slot(AtomicBool::new(false), 7));
        assert!(matches!(
            table.with_slot(1, &Key::from(7u64), made, Arc::clone),
            Found::Decided(_)
        ));
        // Found: `make` is not called.
        let found = table.with_slot(
            1,
            &Key::from(7u64),
            || -> Option<Slot> { panic!("asked to make a slot that exists") },
            Arc::clone,
        );
        assert!(matches!(found, Found::Decided(_)));
    }
}
