//! [`MemoryStore`]: counters in process memory.

use super::{Store, StoreCheck, Verdict};
use crate::{Key, Policy};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::convert::Infallible;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_core::{Clock, Decision, Limiter, MonotonicClock, State, check_all};

/// How many entries are looked at to pick one to evict from a full shard.
const EVICTION_SAMPLE: usize = 8;

/// A full shard drops its keys at rest at most this often (ns), so that a
/// flood of new keys cannot make every insert scan the shard.
const SWEEP_INTERVAL: u64 = 1_000_000_000;

/// Rate-limit state in process memory, shared by every clone.
///
/// - **Sharded**: keys are spread over independent shards (4 per CPU), each
///   behind its own short-held lock, so threads rarely wait on each other.
/// - **Bounded**: at most `max_keys` keys (default 1,000,000). When a shard is
///   full, keys whose state has returned to rest are dropped first (they hold
///   nothing a fresh key would not); if none, the least recently used of a
///   small sample is evicted. No timer or thread per key.
/// - **Exact under concurrency**: a request's limits are checked and charged
///   under one lock, so no interleaving admits more than the algorithm allows.
///
/// Evicting a key that was not at rest forgets its count: with a flood of
/// distinct keys beyond `max_keys`, some keys may be admitted early. Size
/// `max_keys` for the number of clients you expect in one period.
///
/// ```
/// use tollgate::MemoryStore;
///
/// let store = MemoryStore::builder().max_keys(10_000).build();
/// # let _ = store;
/// ```
#[derive(Debug)]
pub struct MemoryStore<C = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for MemoryStore<C> {
    fn clone(&self) -> Self {
        MemoryStore {
            inner: self.inner.clone(),
        }
    }
}

#[derive(Debug)]
struct Inner<C> {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: foldhash::fast::RandomState,
    clock: C,
}

type Entries = HashMap<(u64, Key), Slot, foldhash::fast::RandomState>;

#[derive(Debug)]
struct Shard {
    entries: Entries,
    last_sweep: u64,
}

#[derive(Debug)]
struct Slot {
    states: SmallVec<[State; 1]>,
    /// When every limit of this key is whole again if no request comes: from
    /// then on the key holds nothing a fresh key would not, and may go.
    rest_at: u64,
}

impl MemoryStore {
    /// A store with the defaults: up to 1,000,000 keys, the system clock.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder to set the bound and the clock.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder {
            max_keys: 1_000_000,
            shards: None,
            clock: MonotonicClock,
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

/// Builds a [`MemoryStore`].
#[derive(Clone, Debug)]
pub struct MemoryStoreBuilder<C = MonotonicClock> {
    max_keys: usize,
    shards: Option<usize>,
    clock: C,
}

impl<C: Clock> MemoryStoreBuilder<C> {
    /// The most keys the store holds (at least one per shard).
    pub fn max_keys(self, max_keys: usize) -> Self {
        MemoryStoreBuilder { max_keys, ..self }
    }

    /// The number of shards, rounded up to a power of two (default: 4 per
    /// available CPU).
    pub fn shards(self, shards: usize) -> Self {
        MemoryStoreBuilder {
            shards: Some(shards),
            ..self
        }
    }

    /// The clock (a [`ManualClock`](tollgate_core::ManualClock) in tests).
    pub fn clock<C2: Clock>(self, clock: C2) -> MemoryStoreBuilder<C2> {
        MemoryStoreBuilder {
            max_keys: self.max_keys,
            shards: self.shards,
            clock,
        }
    }

    /// The store.
    pub fn build(self) -> MemoryStore<C> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = self
            .shards
            .unwrap_or(cpus * 4)
            .clamp(1, 1 << 16)
            .next_power_of_two();
        let per_shard = self.max_keys.div_ceil(shards).max(1);
        let shards = (0..shards)
            .map(|_| {
                Mutex::new(Shard {
                    entries: HashMap::with_hasher(Default::default()),
                    last_sweep: 0,
                })
            })
            .collect();
        MemoryStore {
            inner: Arc::new(Inner {
                shards,
                per_shard,
                hasher: Default::default(),
                clock: self.clock,
            }),
        }
    }
}

impl<C: Clock> MemoryStore<C> {
    /// How many keys the store holds now.
    pub fn len(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entries
                    .len()
            })
            .sum()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys the store will hold.
    pub fn capacity(&self) -> usize {
        self.inner.per_shard * self.inner.shards.len()
    }

    /// Checks a request synchronously: what [`Store::check`] does.
    pub fn check_now(&self, policy: &Policy, key: &Key, cost: u32) -> Verdict {
        let inner = &*self.inner;
        let now = inner.clock.now();
        let shard_index =
            inner.hasher.hash_one((policy.id(), key)) as usize & (inner.shards.len() - 1);
        let mut shard = inner.shards[shard_index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let map_key = (policy.id(), key.clone());
        if shard.entries.len() >= inner.per_shard && !shard.entries.contains_key(&map_key) {
            shard.make_room(inner.per_shard, now);
        }
        let slot = shard.entries.entry(map_key).or_insert_with(|| Slot {
            states: policy.limiters().iter().map(Limiter::new_state).collect(),
            rest_at: now,
        });
        let (merged, each) = match (policy.limiters(), slot.states.as_mut_slice()) {
            // One limit, the common case: no pairing, no merging.
            ([limiter], [state]) => {
                let decision = limiter.check(state, now, cost);
                (decision, smallvec::smallvec![decision])
            }
            (limiters, states) => {
                let mut pairs: SmallVec<[(&Limiter, &mut State); 2]> =
                    limiters.iter().zip(states.iter_mut()).collect();
                let mut each: SmallVec<[Decision; 2]> =
                    smallvec::smallvec![Decision::default(); pairs.len()];
                let merged = check_all(&mut pairs, now, cost, &mut each);
                (merged, each)
            }
        };
        let rest_after = u64::try_from(merged.reset_after().as_nanos()).unwrap_or(u64::MAX);
        slot.rest_at = now.saturating_add(rest_after);
        Verdict { merged, each }
    }
}

impl Shard {
    /// Makes room for one more entry in a shard holding at most `capacity`.
    fn make_room(&mut self, capacity: usize, now: u64) {
        if self.entries.len() < capacity {
            return;
        }
        if now.saturating_sub(self.last_sweep) >= SWEEP_INTERVAL {
            self.last_sweep = now;
            self.entries.retain(|_, slot| slot.rest_at > now);
            if self.entries.len() < capacity {
                return;
            }
        }
        // Evict, of a small sample, the key closest to rest: it loses least.
        let victim = self
            .entries
            .iter()
            .take(EVICTION_SAMPLE)
            .min_by_key(|(_, slot)| slot.rest_at)
            .map(|(key, _)| key.clone());
        if let Some(key) = victim {
            self.entries.remove(&key);
        }
    }
}

impl<C: Clock> Store for MemoryStore<C> {
    type Error = Infallible;
    type Future = std::future::Ready<Result<Verdict, Infallible>>;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreCheck<Self::Future, Infallible> {
        StoreCheck::Ready(Ok(self.check_now(policy, key, cost)))
    }
}
