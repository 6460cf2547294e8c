//! [`BoundedMap`]: the one bounded, sharded map of the workspace. The
//! memory store's states, the block list's refusals, the penalty box's
//! offences, the in-flight counts and the local-first store's slots all
//! live in one, so that how a full map makes room is written once
//! ([`make_room`](Room::make_room)).
//!
//! A map is split into shards by the entries' fingerprints, each behind
//! its own `RwLock`, and holds at most a fixed number of entries per
//! shard. When a shard is full, the entries that are [idle](Idle) (they
//! hold nothing a fresh entry would not) are dropped first, at most once
//! a second; if that frees nothing, either one entry of a small sample is
//! evicted, the one idle soonest ([`Eviction::IdleThenSample`]), or the
//! insert is refused ([`Eviction::IdleOnly`], for entries whose loss would
//! lose a count).
//!
//! It is public for the tollgate crates (the memory store, the wrappers,
//! the in-flight slots, the local-first store in `tollgate-local`) and for
//! stores of your own.

pub use crate::fingerprint::{ByFingerprint, FingerprintHasher};
use std::hash::{BuildHasher, Hash};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// How many entries are looked at to pick one to evict from a full shard.
pub const EVICTION_SAMPLE: usize = 8;

/// A full shard drops its idle entries at most this often (ns of the
/// caller's clock), so that a flood of new keys cannot make every insert
/// scan the shard.
pub const SWEEP_INTERVAL: u64 = 1_000_000_000;

/// An entry of a [`BoundedMap`]: when it holds nothing a fresh entry would
/// not.
pub trait Idle {
    /// From this time on (ns, the map user's clock) the entry is idle,
    /// unless something happens to it. Of a sample, the entry idle soonest
    /// is the one evicted: it loses least.
    fn idle_at(&self) -> u64;

    /// Whether the entry can be dropped at `now` without losing anything:
    /// by default, once [`idle_at`](Self::idle_at) has come.
    fn is_idle(&self, now: u64) -> bool {
        self.idle_at() <= now
    }
}

/// What a full shard may drop to make room for a new entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// The idle entries, then, if none was, one entry of a sample: the one
    /// idle soonest. An insert always finds room.
    IdleThenSample,
    /// The idle entries only (looked for at every insert into a full
    /// shard): an insert finds no room while every entry is busy.
    IdleOnly,
}

/// A one-word state whose value is the moment its key is at rest (the
/// memory store's GCRA and leaky-bucket cells) is idle from that value on.
impl Idle for std::sync::atomic::AtomicU64 {
    #[inline]
    fn idle_at(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

/// What one shard of a [`BoundedMap`] holds: one map of [`Idle`] entries
/// (`ByFingerprint<V>`), or several maps that share the shard's bound
/// (the memory store keeps one-word and other states apart).
pub trait Contents: Default {
    /// How many entries it holds.
    fn len(&self) -> usize;

    /// Whether it holds nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry idle at `now`.
    fn drop_idle(&mut self, now: u64);

    /// Evicts one entry of a sample of about [`EVICTION_SAMPLE`]: the one
    /// idle soonest. Whether it evicted one.
    fn evict_one(&mut self) -> bool;
}

impl<V: Idle> Contents for ByFingerprint<V> {
    fn len(&self) -> usize {
        self.len()
    }

    fn drop_idle(&mut self, now: u64) {
        self.retain(|_, entry| !entry.is_idle(now));
    }

    fn evict_one(&mut self) -> bool {
        match soonest_idle(self) {
            Some((_, fingerprint)) => self.remove(&fingerprint).is_some(),
            None => false,
        }
    }
}

/// Of a sample of `map`'s entries, the one idle soonest: its
/// [`idle_at`](Idle::idle_at) and fingerprint. For a [`Contents`] of
/// several maps, which compares their candidates.
pub fn soonest_idle<V: Idle>(map: &ByFingerprint<V>) -> Option<(u64, u64)> {
    map.iter()
        .take(EVICTION_SAMPLE)
        .map(|(fingerprint, entry)| (entry.idle_at(), *fingerprint))
        .min()
}

/// One shard's contents, with when its idle entries were last dropped.
///
/// Aligned to 128 bytes (two cache lines, the unit adjacent-line
/// prefetchers fetch): inside its `RwLock` the contents start on lines of
/// their own, so the lock's reader count, which every reader writes, does
/// not evict the map's header from other threads' caches; and no two
/// shards' locks share a line, so threads on different shards never
/// contend.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Room<C> {
    contents: C,
    last_sweep: u64,
}

impl<C> Deref for Room<C> {
    type Target = C;

    #[inline]
    fn deref(&self) -> &C {
        &self.contents
    }
}

impl<C> DerefMut for Room<C> {
    #[inline]
    fn deref_mut(&mut self) -> &mut C {
        &mut self.contents
    }
}

impl<C: Contents> Room<C> {
    /// Makes room for one more entry in a shard of at most `capacity`:
    /// see the [module docs](self). Whether there is room now.
    pub fn make_room(&mut self, capacity: usize, now: u64, eviction: Eviction) -> bool {
        if self.contents.len() < capacity {
            return true;
        }
        let sweep_due = now.saturating_sub(self.last_sweep) >= SWEEP_INTERVAL;
        if sweep_due || eviction == Eviction::IdleOnly {
            self.last_sweep = now;
            self.contents.drop_idle(now);
            if self.contents.len() < capacity {
                return true;
            }
        }
        eviction == Eviction::IdleThenSample && self.contents.evict_one()
    }
}

/// A map from fingerprints of (policy, key) to entries, split into shards
/// of at most a fixed number of entries each; see the module docs.
/// `C` is what a shard holds, a `ByFingerprint<V>` of [`Idle`] entries for
/// most users.
#[derive(Debug)]
pub struct BoundedMap<C> {
    shards: Box<[RwLock<Room<C>>]>,
    per_shard: usize,
    /// A bound on the whole map instead ([`with_total`](Self::with_total)).
    total: Option<usize>,
    /// Entries over every shard, kept by the write guards: read without a
    /// lock, so that "the map is empty" costs one load.
    len: AtomicUsize,
    hasher: foldhash::fast::RandomState,
}

/// Four shards per available CPU, a power of two, and no more shards than
/// `max_entries` (at least one): the sharding of most maps.
pub fn default_shards(max_entries: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let wanted = cpus.saturating_mul(4).clamp(1, 1 << 16).next_power_of_two();
    let fit = match max_entries {
        0 => 1,
        n => 1 << n.ilog2(),
    };
    wanted.min(fit)
}

impl<C: Contents> BoundedMap<C> {
    /// An empty map of `shards` shards (rounded up to a power of two, at
    /// least 1) of at most `per_shard` entries each.
    pub fn new(shards: usize, per_shard: usize) -> Self {
        let shards = shards.clamp(1, 1 << 16).next_power_of_two();
        BoundedMap {
            shards: (0..shards).map(|_| RwLock::default()).collect(),
            per_shard,
            total: None,
            len: AtomicUsize::new(0),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// An empty map of `shards` shards holding at most `total` entries in
    /// all, however they fall on the shards: for a map whose entries are
    /// never idle while they are in it (the in-flight counts), where a
    /// shard's own bound would refuse a key while others have room. Its
    /// inserts count against the one total, exactly, however many threads
    /// insert at once.
    pub fn with_total(shards: usize, total: usize) -> Self {
        BoundedMap {
            total: Some(total),
            ..Self::new(shards, total)
        }
    }

    /// The fingerprint of `key` under the policy (or limit) `id`: a seeded
    /// 64-bit hash, random per map.
    #[inline]
    pub fn fingerprint<K: Hash + ?Sized>(&self, id: u64, key: &K) -> u64 {
        self.hasher.hash_one((id, key))
    }

    /// The shard of `fingerprint`, chosen by middle bits: a shard's map
    /// uses the low bits for the bucket and the top seven as a tag, which
    /// must not be the same for a whole shard.
    #[inline]
    fn shard(&self, fingerprint: u64) -> &RwLock<Room<C>> {
        &self.shards[(fingerprint >> 32) as usize & (self.shards.len() - 1)]
    }

    /// The shard of `fingerprint`, read-locked.
    #[inline]
    pub fn read(&self, fingerprint: u64) -> RwLockReadGuard<'_, Room<C>> {
        // A panic elsewhere under the lock leaves the contents whole
        // (their users update them by whole inserts, removals and field
        // writes): carry on with them.
        self.shard(fingerprint)
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard of `fingerprint`, write-locked.
    #[inline]
    pub fn write(&self, fingerprint: u64) -> Write<'_, C> {
        let room = self
            .shard(fingerprint)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let before = room.contents.len();
        Write {
            room,
            before,
            reserved: 0,
            per_shard: self.per_shard,
            total: self.total,
            len: &self.len,
        }
    }

    /// The most entries the map holds.
    pub fn capacity(&self) -> usize {
        self.total
            .unwrap_or_else(|| self.per_shard.saturating_mul(self.shards.len()))
    }

    /// The most entries one shard holds.
    pub fn per_shard(&self) -> usize {
        self.per_shard
    }

    /// How many entries the map holds.
    #[inline]
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether the map holds nothing.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with every shard in turn, read-locked.
    pub fn each_shard_read(&self, mut f: impl FnMut(&C)) {
        for shard in self.shards.iter() {
            f(&shard
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contents);
        }
    }

    /// Calls `f` with every shard in turn, write-locked.
    pub fn each_shard(&self, mut f: impl FnMut(&mut C)) {
        for shard in self.shards.iter() {
            let mut room = shard.write().unwrap_or_else(PoisonError::into_inner);
            let before = room.contents.len();
            f(&mut room.contents);
            adjust(&self.len, before, room.contents.len());
        }
    }
}

/// A shard of a [`BoundedMap`], write-locked: the map's count follows
/// what is inserted and removed through it.
pub struct Write<'a, C: Contents> {
    room: RwLockWriteGuard<'a, Room<C>>,
    before: usize,
    /// Entries counted in the total ahead of their insert.
    reserved: usize,
    per_shard: usize,
    total: Option<usize>,
    len: &'a AtomicUsize,
}

impl<C: Contents> std::fmt::Debug for Write<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Write").finish_non_exhaustive()
    }
}

impl<C: Contents> Write<'_, C> {
    /// Makes room for one more entry (see [`Room::make_room`]): whether
    /// there is room now. In a map with a total bound, the room is
    /// counted at once, so that no other thread takes it too.
    #[inline]
    pub fn make_room(&mut self, now: u64, eviction: Eviction) -> bool {
        let Some(total) = self.total else {
            return self.room.make_room(self.per_shard, now, eviction);
        };
        // What this guard removed so far leaves the total now.
        let held = self.room.contents.len();
        if held < self.before {
            self.len.fetch_sub(self.before - held, Ordering::AcqRel);
            self.before = held;
        }
        let reserve = |len: &AtomicUsize| {
            len.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < total).then_some(n + 1)
            })
            .is_ok()
        };
        if reserve(self.len) {
            self.reserved += 1;
            return true;
        }
        // Full: what this shard holds idle goes (its count with it).
        let before = self.room.contents.len();
        self.room.contents.drop_idle(now);
        let dropped = before - self.room.contents.len();
        if dropped > 0 {
            self.before -= dropped;
            self.len.fetch_sub(dropped, Ordering::AcqRel);
        }
        let reserved = reserve(self.len);
        self.reserved += usize::from(reserved);
        reserved
    }
}

impl<C: Contents> Deref for Write<'_, C> {
    type Target = C;

    #[inline]
    fn deref(&self) -> &C {
        &self.room.contents
    }
}

impl<C: Contents> DerefMut for Write<'_, C> {
    #[inline]
    fn deref_mut(&mut self) -> &mut C {
        &mut self.room.contents
    }
}

impl<C: Contents> Drop for Write<'_, C> {
    #[inline]
    fn drop(&mut self) {
        adjust(
            self.len,
            self.before + self.reserved,
            self.room.contents.len(),
        );
    }
}

/// Moves `len` by the change from `before` to `after`.
#[inline]
fn adjust(len: &AtomicUsize, before: usize, after: usize) {
    if after > before {
        len.fetch_add(after - before, Ordering::Relaxed);
    } else if before > after {
        len.fetch_sub(before - after, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry idle from `.0` on.
    struct At(u64);

    impl Idle for At {
        fn idle_at(&self) -> u64 {
            self.0
        }
    }

    fn insert(
        map: &BoundedMap<ByFingerprint<At>>,
        n: u64,
        idle_at: u64,
        now: u64,
        how: Eviction,
    ) -> bool {
        let fingerprint = map.fingerprint(1, &n);
        let mut shard = map.write(fingerprint);
        if !shard.make_room(now, how) {
            return false;
        }
        shard.insert(fingerprint, At(idle_at));
        true
    }

    #[test]
    fn a_full_shard_drops_its_idle_entries_first() {
        let map = BoundedMap::new(1, 4);
        let busy = 2 * SWEEP_INTERVAL;
        for n in 0..4 {
            // Two idle at 10, two busy until after the sweep.
            assert!(insert(
                &map,
                n,
                if n < 2 { 10 } else { busy },
                0,
                Eviction::IdleThenSample
            ));
        }
        assert_eq!(map.len(), 4);
        assert!(insert(
            &map,
            4,
            busy,
            SWEEP_INTERVAL,
            Eviction::IdleThenSample
        ));
        // Both idle ones went, none of the busy.
        assert_eq!(map.len(), 3);
        let shard = map.read(0);
        assert!(shard.values().all(|entry| entry.0 == busy));
    }

    #[test]
    fn with_none_idle_the_one_idle_soonest_of_a_sample_is_evicted() {
        let map = BoundedMap::new(1, 4);
        for n in 0..4 {
            assert!(insert(&map, n, 100 + n, 0, Eviction::IdleThenSample));
        }
        assert!(insert(&map, 9, 500, 1, Eviction::IdleThenSample));
        assert_eq!(map.len(), 4);
        let shard = map.read(0);
        let mut left: Vec<u64> = shard.values().map(|entry| entry.0).collect();
        left.sort();
        assert_eq!(left, [101, 102, 103, 500]);
    }

    #[test]
    fn idle_only_refuses_rather_than_evict_a_busy_entry() {
        let map = BoundedMap::new(1, 2);
        assert!(insert(&map, 0, u64::MAX, 0, Eviction::IdleOnly));
        assert!(insert(&map, 1, 5, 0, Eviction::IdleOnly));
        // Nothing idle yet: refused, even long after a sweep was due.
        assert!(!insert(&map, 2, u64::MAX, 1, Eviction::IdleOnly));
        // Idle at 5, dropped at once (no sweep interval to wait out).
        assert!(insert(&map, 3, u64::MAX, 5, Eviction::IdleOnly));
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn the_count_follows_inserts_and_removals_and_the_bound_holds() {
        let map = BoundedMap::new(4, 8);
        for n in 0..1_000 {
            insert(&map, n, n, n, Eviction::IdleThenSample);
        }
        assert!(map.len() <= map.capacity(), "{}", map.len());
        let counted: usize = {
            let mut sum = 0;
            map.each_shard(|shard| sum += shard.len());
            sum
        };
        assert_eq!(counted, map.len());
        map.each_shard(|shard| shard.clear());
        assert!(map.is_empty());
    }

    #[test]
    fn a_total_bound_holds_over_every_shard_and_refuses_only_new_entries() {
        let map = BoundedMap::with_total(8, 3);
        for n in 0..3 {
            assert!(insert(&map, n, u64::MAX, 0, Eviction::IdleOnly));
        }
        assert!(!insert(&map, 3, u64::MAX, 0, Eviction::IdleOnly));
        assert_eq!((map.len(), map.capacity()), (3, 3));
        // A room made and not used is given back.
        let fingerprint = map.fingerprint(1, &0u64);
        {
            let mut shard = map.write(fingerprint);
            shard.remove(&fingerprint);
            assert!(shard.make_room(0, Eviction::IdleOnly));
        }
        assert_eq!(map.len(), 2);
        // Threads inserting at once never pass the total.
        let map = BoundedMap::with_total(8, 100);
        std::thread::scope(|scope| {
            for t in 0..4 {
                let map = &map;
                scope.spawn(move || {
                    for n in 0..200 {
                        insert(map, t * 1_000 + n, u64::MAX, 0, Eviction::IdleOnly);
                    }
                });
            }
        });
        let mut held = 0;
        map.each_shard(|shard| held += shard.len());
        assert_eq!((held, map.len()), (100, 100));
    }

    #[test]
    fn shards_do_not_share_cache_lines() {
        let map: BoundedMap<ByFingerprint<At>> = BoundedMap::new(4, 1);
        let addresses: Vec<usize> = map.shards.iter().map(|s| s as *const _ as usize).collect();
        for pair in addresses.windows(2) {
            assert!(
                pair[1] - pair[0] >= 128,
                "shards {pair:?} are closer than 128 bytes"
            );
        }
        let lock = &map.shards[0] as *const _ as usize;
        let room = &*map.read(0) as *const Room<_> as usize;
        assert!(room - lock >= 64, "the contents share the lock's line");
    }
}
