//! [`MemorySlots`]: in-flight counts in this process.

use super::{Acquired, InFlightLimit, SlotReply, Slots};
use crate::Key;
use std::fmt;
use std::sync::Arc;
use tollgate_internal::bounded::{BoundedMap, Eviction, Idle};
use tollgate_internal::fingerprint::ByFingerprint;
use tollgate_internal::wakeups::{Waiter, Wakeups};

/// How many shards the table is split into, at most (fewer for a bound
/// below it).
const SHARDS: usize = 64;

/// The default bound on keys with requests running ([`MemorySlots::new`]).
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// In-flight counts in this process's memory: a sharded map from (limit,
/// key) to the number of the key's requests running.
///
/// A key is in the map only while it has a request running: the last
/// slot given back removes it, so idle keys cost nothing and there is
/// nothing to evict. The map holds at most [`max_keys`](Self::with_max_keys)
/// keys (100,000 by default): a request of a key not in the map when it is
/// full is not counted, and the store answers [`SlotsFull`], which the
/// layer treats as a store failure (by default it lets the request through
/// without a slot, and logs it; see
/// the layer's `OnStoreError`). Keys already in the map are
/// counted as ever. The bound can only be reached by that many keys with
/// requests running at once.
///
/// Clones share the counts. Each shard is a lock held for one map
/// operation; a request takes it twice (its slot, and giving it back).
#[derive(Clone)]
pub struct MemorySlots {
    table: Arc<Table>,
}

struct Table {
    /// The keys with requests running, bounded in all (not per shard).
    running: BoundedMap<ByFingerprint<Running>>,
    max_keys: usize,
    wakeups: Wakeups,
}

/// A key's requests running under one limit.
struct Running {
    /// The limit's identity and the key, compared on every hit, so that
    /// two pairs with one fingerprint never share a count.
    id: u64,
    key: Key,
    count: u32,
}

/// An entry is in the map exactly while its key has a request running:
/// never idle, never evicted (the last slot given back removes it).
impl Idle for Running {
    fn idle_at(&self) -> u64 {
        u64::MAX
    }
}

impl fmt::Debug for MemorySlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemorySlots")
            .field("keys", &self.keys())
            .field("max_keys", &self.table.max_keys)
            .finish_non_exhaustive()
    }
}

impl Default for MemorySlots {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySlots {
    /// An empty store of at most 100,000 keys with requests running.
    pub fn new() -> Self {
        Self::with_max_keys(DEFAULT_MAX_KEYS)
    }

    /// An empty store of at most `max_keys` keys with requests running (at
    /// least 1).
    pub fn with_max_keys(max_keys: usize) -> Self {
        let max_keys = max_keys.max(1);
        let shards = SHARDS.min(max_keys.next_power_of_two());
        MemorySlots {
            table: Arc::new(Table {
                running: BoundedMap::with_total(shards, max_keys),
                max_keys,
                wakeups: Wakeups::new(),
            }),
        }
    }

    /// How many requests of `key` are running under `limit` now.
    pub fn in_flight(&self, limit: &InFlightLimit, key: &Key) -> u32 {
        let hash = self.table.hash(limit.id(), key);
        let shard = self.table.running.read(hash);
        shard
            .get(&hash)
            .filter(|running| running.id == limit.id() && running.key == *key)
            .map_or(0, |running| running.count)
    }

    /// How many keys have requests running (over every limit).
    pub fn keys(&self) -> usize {
        self.table.running.len()
    }

    /// Takes a slot now: the answer of [`Slots::acquire`], which for this
    /// store never waits.
    pub fn acquire_now(
        &self,
        limit: &InFlightLimit,
        key: &Key,
    ) -> Result<Acquired<MemoryPermit>, SlotsFull> {
        let table = &self.table;
        let id = limit.id();
        let hash = table.hash(id, key);
        let full = SlotsFull {
            max_keys: table.max_keys,
        };
        let mut shard = table.running.write(hash);
        let in_flight = match shard.get_mut(&hash) {
            // Another pair with the same fingerprint (one chance in 2⁶⁴)
            // has requests running: this one cannot be counted beside it.
            Some(running) if running.id != id || running.key != *key => return Err(full),
            Some(running) if running.count >= limit.max() => {
                return Ok(Acquired::Full {
                    in_flight: running.count,
                });
            }
            Some(running) => {
                running.count += 1;
                running.count
            }
            None => {
                if !shard.make_room(0, Eviction::IdleOnly) {
                    return Err(full);
                }
                let running = Running {
                    id,
                    key: key.clone(),
                    count: 1,
                };
                shard.insert(hash, running);
                1
            }
        };
        drop(shard);
        Ok(Acquired::Taken {
            permit: MemoryPermit {
                table: self.table.clone(),
                id,
                key: key.clone(),
                hash,
            },
            in_flight,
        })
    }
}

impl Table {
    fn hash(&self, id: u64, key: &Key) -> u64 {
        self.running.fingerprint(id, key)
    }

    /// Gives back one slot of `key` under the limit `id`.
    fn release(&self, hash: u64, id: u64, key: &Key) {
        let mut shard = self.running.write(hash);
        match shard.get_mut(&hash) {
            Some(running) if running.id != id || running.key != *key => {}
            Some(running) if running.count > 1 => running.count -= 1,
            Some(_) => {
                shard.remove(&hash);
            }
            // Cannot happen: a permit's slot is in the map until the
            // permit gives it back.
            None => {}
        }
        drop(shard);
        self.wakeups.wake(hash);
    }
}

/// A slot of a [`MemorySlots`]: given back when dropped (so its
/// [`release`](super::SlotPermit::release) is done at once).
pub struct MemoryPermit {
    table: Arc<Table>,
    id: u64,
    key: Key,
    hash: u64,
}

impl super::SlotPermit for MemoryPermit {}

impl fmt::Debug for MemoryPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPermit")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Drop for MemoryPermit {
    fn drop(&mut self) {
        self.table.release(self.hash, self.id, &self.key);
    }
}

/// A [`MemorySlots`] at its bound of keys with requests running: a request
/// of a key not among them cannot be counted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotsFull {
    /// The bound.
    pub max_keys: usize,
}

impl fmt::Display for SlotsFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the in-flight table holds its bound of {} keys with requests running; a request \
             of another key cannot be counted",
            self.max_keys
        )
    }
}

impl std::error::Error for SlotsFull {}

impl Slots for MemorySlots {
    type Permit = MemoryPermit;
    type Error = SlotsFull;
    // Never pending: the table answers at once.
    type Future = std::future::Ready<Result<Acquired<MemoryPermit>, SlotsFull>>;
    type Freed = Waiter;

    #[inline]
    fn acquire(
        &self,
        limit: &InFlightLimit,
        key: &Key,
    ) -> SlotReply<Self::Future, MemoryPermit, SlotsFull> {
        SlotReply::Ready(self.acquire_now(limit, key))
    }

    fn freed(&self, limit: &InFlightLimit, key: &Key) -> Waiter {
        self.table.wakeups.waiter(self.table.hash(limit.id(), key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn limit(max: u32) -> InFlightLimit {
        InFlightLimit::new("inflight", max).unwrap()
    }

    fn taken(answer: Result<Acquired<MemoryPermit>, SlotsFull>) -> (MemoryPermit, u32) {
        match answer {
            Ok(Acquired::Taken { permit, in_flight }) => (permit, in_flight),
            other => panic!("expected a slot, got {other:?}"),
        }
    }

    #[test]
    fn at_most_the_limit_per_key_and_a_dropped_permit_gives_its_slot_back() {
        let slots = MemorySlots::new();
        let (a, b) = (Key::from("a"), Key::from("b"));
        let limit = limit(2);
        let (first, n1) = taken(slots.acquire_now(&limit, &a));
        let (_second, n2) = taken(slots.acquire_now(&limit, &a));
        assert_eq!((n1, n2), (1, 2));
        assert!(matches!(
            slots.acquire_now(&limit, &a),
            Ok(Acquired::Full { in_flight: 2 })
        ));
        // Another key has its own slots.
        let (_other, n) = taken(slots.acquire_now(&limit, &b));
        assert_eq!(n, 1);
        drop(first);
        assert_eq!(slots.in_flight(&limit, &a), 1);
        let (_again, n) = taken(slots.acquire_now(&limit, &a));
        assert_eq!(n, 2);
    }

    #[test]
    fn limits_of_other_names_count_apart_and_keys_at_zero_leave_the_map() {
        let slots = MemorySlots::new();
        let key = Key::from("k");
        let one = InFlightLimit::new("one", 1).unwrap();
        let two = InFlightLimit::new("two", 1).unwrap();
        let p1 = taken(slots.acquire_now(&one, &key)).0;
        let p2 = taken(slots.acquire_now(&two, &key)).0;
        assert_eq!(slots.keys(), 2);
        drop((p1, p2));
        assert_eq!(slots.keys(), 0);
        assert_eq!(slots.in_flight(&one, &key), 0);
    }

    #[test]
    fn the_default_bound_is_the_documented_one() {
        assert_eq!(DEFAULT_MAX_KEYS, 100_000);
        assert_eq!(MemorySlots::new().table.max_keys, 100_000);
        assert_eq!(MemorySlots::with_max_keys(0).table.max_keys, 1);
    }

    #[test]
    fn the_bound_refuses_new_keys_only() {
        let slots = MemorySlots::with_max_keys(2);
        let limit = limit(5);
        let a = taken(slots.acquire_now(&limit, &Key::from("a"))).0;
        let _b = taken(slots.acquire_now(&limit, &Key::from("b"))).0;
        assert_eq!(
            slots.acquire_now(&limit, &Key::from("c")).err(),
            Some(SlotsFull { max_keys: 2 })
        );
        // A key in the map is counted as ever.
        let _a2 = taken(slots.acquire_now(&limit, &Key::from("a"))).0;
        drop(a);
        assert_eq!(slots.keys(), 2);
        assert_eq!(slots.in_flight(&limit, &Key::from("a")), 1);
    }

    #[test]
    fn many_threads_never_hold_more_than_the_limit() {
        let slots = MemorySlots::new();
        let limit = limit(3);
        let key = Key::from("hot");
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..2_000 {
                        if let Ok(Acquired::Taken { permit, .. }) = slots.acquire_now(&limit, &key)
                        {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::hint::spin_loop();
                            running.fetch_sub(1, Ordering::SeqCst);
                            drop(permit);
                        }
                    }
                });
            }
        });
        assert!(most.load(Ordering::SeqCst) <= 3);
        assert_eq!(slots.keys(), 0);
    }

    #[tokio::test]
    async fn a_slot_given_back_wakes_a_waiter_of_its_key() {
        let slots = MemorySlots::new();
        let limit = limit(1);
        let key = Key::from("k");
        let held = taken(slots.acquire_now(&limit, &key)).0;
        let freed = slots.freed(&limit, &key);
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), freed)
            .await
            .expect("the waiter is woken");
    }
}
