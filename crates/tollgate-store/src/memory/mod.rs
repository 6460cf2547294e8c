//! [`MemoryStore`]: counters in process memory.

mod keys;
mod pinned;

pub use pinned::PinnedKey;

use super::carry::Carried;
use super::{ChangeReply, PolicyDecision, Store, StoreReply};
use crate::key::Key;
use crate::policy::PackedLimiter;
use crate::policy::Policy;
use keys::{Keys, Slot};
use pinned::{Pinned, PinnedKeys, PinnedState, Release};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tollgate_core::{Clock, Decision, Limiter, MonotonicClock};
use tollgate_internal::bounded::{BoundedMap, Eviction};

/// Rate-limit state in process memory, shared by every clone.
///
/// - **Sharded**: keys are spread over independent shards (4 per CPU), each
///   behind its own short-held lock, so threads rarely wait on each other.
/// - **Lock-free per key where the state is one word**: a policy of a single
///   GCRA or leaky-bucket limit keeps each key's state in an `AtomicU64`; a
///   check takes the shard's lock for reading only and updates the state
///   with a compare-and-swap, so checks on one shard run in parallel. Other
///   policies update their state under the shard's write lock.
/// - **Compact**: entries are keyed by a 64-bit fingerprint of (policy, key),
///   hashed with a random per-process seed, so a key of any length costs 8
///   bytes. Two keys with the same fingerprint would share a budget (never
///   exceed it); with a seeded 64-bit hash, the chance among a million keys
///   is about 3 in 100 million, and it cannot be aimed at.
/// - **Bounded**: at most `max_keys` keys (default 1,000,000). When a shard is
///   full, keys whose state has returned to rest are dropped first (they hold
///   nothing a fresh key would not); if none, of a small sample, the key
///   closest to rest is evicted. No timer or thread per key. A key a
///   tollgate's `DirectLimiter` counts under is held apart
///   while the limiter lives (checked without the hash, the shard lock and
///   the map; every operation of the store finds it there): it is never
///   evicted and is counted by [`len`](Self::len) but not against
///   `max_keys`, one key per live direct limiter.
/// - **Exact under concurrency**: no interleaving of checks admits more than
///   the algorithm allows; a request's limits are charged all-or-nothing.
///
/// Evicting a key that was not at rest forgets its count: with a flood of
/// distinct keys beyond `max_keys`, some keys may be admitted early. Size
/// `max_keys` for the number of clients you expect in one period.
///
/// ```
/// use tollgate_store::MemoryStore;
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
    keys: BoundedMap<Keys>,
    /// The keys direct limiters hold apart (in no shard's map).
    pinned: PinnedKeys,
    clock: C,
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
    /// The most keys the store holds, rounded up to a multiple of the number
    /// of shards. Zero is refused when the store is built.
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
    ///
    /// # Panics
    ///
    /// If `max_keys` is zero, with the message
    /// [`try_build`](Self::try_build) would return.
    pub fn build(self) -> MemoryStore<C> {
        self.try_build()
            .unwrap_or_else(|error| panic!("tollgate: {error}"))
    }

    /// The store, or what is wrong with its settings: for settings read
    /// from configuration.
    ///
    /// ```
    /// use tollgate_store::MemoryStore;
    ///
    /// assert!(MemoryStore::builder().max_keys(0).try_build().is_err());
    /// assert_eq!(MemoryStore::builder().max_keys(5).shards(4).try_build().unwrap().capacity(), 8);
    /// ```
    pub fn try_build(self) -> Result<MemoryStore<C>, crate::ConfigError> {
        if self.max_keys == 0 {
            return Err(crate::ConfigError::new(
                "max_keys is zero: a memory store must hold at least one key; the default \
                 is 1,000,000 (about 36 bytes each for one GCRA limit)",
            ));
        }
        Ok(self.build_checked())
    }

    fn build_checked(self) -> MemoryStore<C> {
        // Read once now: a clock that sets itself up at its first reading
        // (`MonotonicClock` calibrates the time-stamp counter once per
        // process, up to 200 ms) does it here, not at the first request.
        self.clock.now();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = self
            .shards
            .unwrap_or(cpus * 4)
            .clamp(1, 1 << 16)
            .next_power_of_two();
        let per_shard = self.max_keys.div_ceil(shards).max(1);
        MemoryStore {
            inner: Arc::new(Inner {
                keys: BoundedMap::new(shards, per_shard),
                pinned: PinnedKeys::default(),
                clock: self.clock,
            }),
        }
    }
}

impl<C: Clock> MemoryStore<C> {
    /// How many keys the store holds now.
    pub fn len(&self) -> usize {
        self.inner.keys.len() + self.inner.pinned.len()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys the store will hold.
    pub fn capacity(&self) -> usize {
        self.inner.keys.capacity()
    }

    /// Checks a request synchronously: what [`Store::check`] does.
    pub fn check_now(&self, policy: &Policy, key: &Key, cost: u32) -> PolicyDecision {
        let inner = &*self.inner;
        let now = inner.clock.now_relaxed();
        let fingerprint = inner.fingerprint(policy, key);
        match policy.packed() {
            Some(limiter) => inner.check_cell(fingerprint, limiter, now, cost),
            None => inner.check_slot(fingerprint, policy, now, cost),
        }
    }

    /// Holds `key`'s state under `policy` apart from its shard's map (see
    /// [`PinnedKey`]), moving it there if the store holds it: what a direct
    /// limiter checks through.
    #[doc(hidden)]
    pub fn pin(&self, policy: &Policy, key: &Key) -> PinnedKey {
        let inner = &self.inner;
        let fingerprint = inner.fingerprint(policy, key);
        let mut shard = inner.keys.write(fingerprint);
        let now = inner.clock.now_relaxed();
        let pinned = inner.pinned.hold(fingerprint, || match policy.packed() {
            Some(limiter) => PinnedState::Cell {
                cell: shard.cells.remove(&fingerprint).unwrap_or_default(),
                limiter: *limiter,
            },
            None => PinnedState::Slot(std::sync::Mutex::new(
                shard
                    .slots
                    .remove(&fingerprint)
                    .unwrap_or_else(|| Slot::new(policy, now)),
            )),
        });
        drop(shard);
        PinnedKey {
            pinned,
            store: inner.clone(),
            fingerprint,
        }
    }

    /// [`check_now`](Self::check_now) of the key `pinned` holds under
    /// `policy` (the policy it was pinned under), merged: the store's clock
    /// and the key's state, without the hash, the shard lock or the map.
    #[inline]
    #[doc(hidden)]
    pub fn check_pinned(&self, policy: &Policy, pinned: &PinnedKey, cost: u32) -> Decision {
        let now = self.inner.clock.now_relaxed();
        match &pinned.pinned.state {
            PinnedState::Cell { cell, limiter } => limiter.check(cell, now, cost),
            state => match state.slot() {
                Some(mut slot) => slot.check(policy, now, cost).0,
                None => Decision::default(),
            },
        }
    }
}

/// The last handle of a held key is gone: its state goes back among its
/// shard's keys, unless it is at rest (it then holds nothing a fresh key
/// would not).
impl<C: Clock> Release for Inner<C> {
    fn release(&self, fingerprint: u64, pinned: &Pinned) {
        let mut shard = self.keys.write(fingerprint);
        let Some(released) = self.pinned.release(fingerprint, pinned) else {
            return;
        };
        let now = self.clock.now_relaxed();
        match &released.state {
            PinnedState::Cell { cell, .. } => {
                let rest_at = cell.load(Ordering::Acquire);
                if rest_at > now && shard.make_room(now, Eviction::IdleThenSample) {
                    shard.cells.insert(fingerprint, AtomicU64::new(rest_at));
                }
            }
            state => {
                if let Some(slot) = state.slot()
                    && slot.rest_at > now
                    && shard.make_room(now, Eviction::IdleThenSample)
                {
                    let back = Slot {
                        states: slot.states.clone(),
                        rest_at: slot.rest_at,
                    };
                    drop(slot);
                    shard.slots.insert(fingerprint, back);
                }
            }
        }
    }
}

impl<C: Clock> MemoryStore<C> {
    /// `key`'s state under `policy` now, charging nothing: what
    /// [`Store::peek`] answers. Decided on a copy of the key's state (a
    /// check of cost 0), so nothing in the store changes, and a key the
    /// store does not hold is not added.
    pub fn peek_now(&self, policy: &Policy, key: &Key) -> PolicyDecision {
        let inner = &*self.inner;
        let now = inner.clock.now_relaxed();
        let fingerprint = inner.fingerprint(policy, key);
        let (merged, each) = match policy.packed() {
            Some(limiter) => {
                let shard = inner.keys.read(fingerprint);
                let word = match shard.cells.get(&fingerprint) {
                    Some(cell) => cell.load(Ordering::Acquire),
                    None => inner.pinned.find(fingerprint).map_or(0, |pinned| {
                        pinned.state.cell().map_or(0, |c| c.load(Ordering::Acquire))
                    }),
                };
                drop(shard);
                let decision = limiter.check(&AtomicU64::new(word), now, 0);
                (decision, smallvec::smallvec![decision])
            }
            None => {
                let shard = inner.keys.read(fingerprint);
                let held = inner.pinned.find(fingerprint);
                let mut states = match (shard.slots.get(&fingerprint), &held) {
                    (Some(slot), _) => slot.states.clone(),
                    (None, Some(pinned)) => match pinned.state.slot() {
                        Some(slot) => slot.states.clone(),
                        None => policy.limiters().iter().map(Limiter::new_state).collect(),
                    },
                    (None, None) => policy.limiters().iter().map(Limiter::new_state).collect(),
                };
                drop(shard);
                policy.check_states(&mut states, now, 0)
            }
        };
        PolicyDecision::from_parts(merged, each)
    }

    /// Forgets `key`'s state under `policy`: what [`Store::reset`] does.
    pub fn reset_now(&self, policy: &Policy, key: &Key) {
        let fingerprint = self.inner.fingerprint(policy, key);
        let mut shard = self.inner.keys.write(fingerprint);
        // A policy keeps a key in one map or the other; removing from both
        // costs nothing and needs no second look at the policy.
        shard.cells.remove(&fingerprint);
        shard.slots.remove(&fingerprint);
        // A key a direct limiter holds stays held, its state made fresh.
        if let Some(pinned) = self.inner.pinned.find(fingerprint) {
            if let Some(cell) = pinned.state.cell() {
                cell.store(0, Ordering::Release);
            }
            if let Some(mut slot) = pinned.state.slot() {
                *slot = Slot::new(policy, 0);
            }
        }
    }
}

impl<C: Clock> MemoryStore<C> {
    /// Gives a charge back at once: what [`Store::refund`] does. A key the
    /// store no longer holds (dropped at rest, or to make room) has nothing
    /// to give back.
    pub fn refund_now(&self, policy: &Policy, key: &Key, refund: super::PolicyRefund) {
        let inner = &*self.inner;
        let now = inner.clock.now_relaxed();
        let fingerprint = inner.fingerprint(policy, key);
        match policy.packed() {
            Some(limiter) => {
                let shard = inner.keys.read(fingerprint);
                let held;
                let cell = match shard.cells.get(&fingerprint) {
                    Some(cell) => Some(cell),
                    None => {
                        held = inner.pinned.find(fingerprint);
                        held.as_ref().and_then(|pinned| pinned.state.cell())
                    }
                };
                if let Some(cell) = cell {
                    limiter.refund(cell, refund.for_limit(0, now), now);
                }
            }
            None => {
                let give_back = |slot: &mut Slot| {
                    let limits = policy.limiters().iter().zip(slot.states.iter_mut());
                    for (index, (limiter, state)) in limits.enumerate() {
                        limiter.refund(state, refund.for_limit(index, now), now);
                    }
                };
                let mut shard = inner.keys.write(fingerprint);
                match shard.slots.get_mut(&fingerprint) {
                    Some(slot) => give_back(slot),
                    None => {
                        let held = inner.pinned.find(fingerprint);
                        if let Some(mut slot) = held.as_ref().and_then(|p| p.state.slot()) {
                            give_back(&mut slot);
                        }
                    }
                }
            }
        }
    }
}

impl<C: Clock> MemoryStore<C> {
    /// Charges `key` `cost` more under every limit of `policy`, whatever
    /// they say: what [`Store::debit`] does. A key the store does not hold
    /// is added (a debt must be remembered).
    pub fn debit_now(&self, policy: &Policy, key: &Key, cost: u32) {
        let inner = &*self.inner;
        let now = inner.clock.now_relaxed();
        let fingerprint = inner.fingerprint(policy, key);
        match policy.packed() {
            Some(limiter) => inner.with_cell(fingerprint, now, |cell| {
                limiter.debit(cell, now, cost);
            }),
            None => {
                inner.with_slot(fingerprint, policy, now, |slot| {
                    let limits = policy.limiters().iter().zip(slot.states.iter_mut());
                    for (limiter, state) in limits {
                        limiter.debit(state, now, cost);
                    }
                    // Kept at least until the debt is paid off.
                    let (rest, _) = policy.check_states(&mut slot.states, now, 0);
                    slot.rest_at = slot.rest_at.max(
                        now.saturating_add(rest.reset_after_nanos())
                            .saturating_add(policy.rest_slack_nanos()),
                    );
                });
            }
        }
    }
}

impl<C: Clock> MemoryStore<C> {
    /// Moves `key`'s usage from `from` to `to` at once: what
    /// [`Store::carry`] does, read as every store reads it ([`Carried`]):
    /// each limit of `to` is charged what its partner in `from` used; the
    /// moved limits' states in `from` are made fresh (all of `from`
    /// forgotten when all moved), the others kept for their period.
    pub fn carry_now(&self, from: &Policy, to: &Policy, key: &Key) {
        let carried = Carried::read(from, &self.peek_now(from, key), to, 0);
        if carried.moves_all() {
            self.reset_now(from, key);
        } else {
            self.release(from, key, &carried.from);
        }
        if carried.charges() {
            self.charge_each(to, key, &carried.to);
        }
    }

    /// Makes fresh the states of `policy`'s limits that moved (`None` in
    /// `kept`), keeping the others.
    fn release(&self, policy: &Policy, key: &Key, kept: &[Option<u32>]) {
        let inner = &*self.inner;
        let now = inner.clock.now_relaxed();
        let fingerprint = inner.fingerprint(policy, key);
        if policy.packed().is_some() {
            // One limit, and it did not move: nothing to release.
            return;
        }
        inner.with_slot(fingerprint, policy, now, |slot| {
            let limits = policy.limiters().iter().zip(slot.states.iter_mut());
            for ((limiter, state), kept) in limits.zip(kept) {
                if kept.is_none() {
                    *state = limiter.new_state();
                }
            }
        });
    }

    /// Charges each limit of `policy` its own units, whatever the limits
    /// say.
    fn charge_each(&self, policy: &Policy, key: &Key, units: &[u32]) {
        let units = |index: usize| units.get(index).copied().unwrap_or(0);
        let inner = &*self.inner;
        let now = inner.clock.now_relaxed();
        let fingerprint = inner.fingerprint(policy, key);
        match policy.packed() {
            Some(limiter) => inner.with_cell(fingerprint, now, |cell| {
                limiter.debit(cell, now, units(0));
            }),
            None => inner.with_slot(fingerprint, policy, now, |slot| {
                let limits = policy.limiters().iter().zip(slot.states.iter_mut());
                for (index, (limiter, state)) in limits.enumerate() {
                    if units(index) > 0 {
                        limiter.debit(state, now, units(index));
                    }
                }
                // Kept at least until the usage has come back.
                let (rest, _) = policy.check_states(&mut slot.states, now, 0);
                slot.rest_at = slot.rest_at.max(
                    now.saturating_add(rest.reset_after_nanos())
                        .saturating_add(policy.rest_slack_nanos()),
                );
            }),
        }
    }
}

/// A one-limit policy's answer: `decision`, taken at `now`.
#[inline(always)]
fn verdict_of(decision: Decision, now: u64) -> PolicyDecision {
    PolicyDecision::checked(decision, smallvec::smallvec![decision], now)
}

impl<C> Inner<C> {
    /// The fingerprint of `key` under `policy`.
    #[inline]
    fn fingerprint(&self, policy: &Policy, key: &Key) -> u64 {
        self.keys.fingerprint(policy.id(), key)
    }

    /// A one-word state: the shard's read lock and a compare-and-swap; the
    /// write lock only to add a key.
    #[inline]
    fn check_cell(
        &self,
        fingerprint: u64,
        limiter: &PackedLimiter,
        now: u64,
        cost: u32,
    ) -> PolicyDecision {
        // A held key is checked here, and each way builds its own answer:
        // a decision handed from one place to another through memory (out
        // of a call, or where two ways meet) is read back in wider words
        // than it was written, which stalls the load (see `PeerIp`'s
        // `extract`).
        if let Some(cell) = self.keys.read(fingerprint).cells.get(&fingerprint) {
            return verdict_of(limiter.check(cell, now, cost), now);
        }
        self.check_missed_cell(fingerprint, limiter, now, cost)
    }

    /// [`check_cell`](Self::check_cell) for a key its shard does not hold.
    #[inline(never)]
    fn check_missed_cell(
        &self,
        fingerprint: u64,
        limiter: &PackedLimiter,
        now: u64,
        cost: u32,
    ) -> PolicyDecision {
        let decision =
            self.with_cell_missed(fingerprint, now, |cell| limiter.check(cell, now, cost));
        verdict_of(decision, now)
    }

    /// Runs `f` on the key's cell, adding the key if the shard does not
    /// hold it (making room if need be).
    #[inline]
    fn with_cell<R>(&self, fingerprint: u64, now: u64, f: impl FnOnce(&AtomicU64) -> R) -> R {
        if let Some(cell) = self.keys.read(fingerprint).cells.get(&fingerprint) {
            return f(cell);
        }
        self.with_cell_missed(fingerprint, now, f)
    }

    /// [`with_cell`](Self::with_cell) for a key not in its shard's cells:
    /// one a direct limiter holds (looked for here only, so that a hit
    /// costs nothing more, and under the shard's lock, under whose write
    /// lock held keys change), or a new one, added.
    #[cold]
    #[inline(never)]
    fn with_cell_missed<R>(
        &self,
        fingerprint: u64,
        now: u64,
        f: impl FnOnce(&AtomicU64) -> R,
    ) -> R {
        let mut shard = self.keys.write(fingerprint);
        if !shard.cells.contains_key(&fingerprint) {
            if let Some(pinned) = self.pinned.find(fingerprint)
                && let Some(cell) = pinned.state.cell()
            {
                return f(cell);
            }
            shard.make_room(now, Eviction::IdleThenSample);
        }
        f(shard.cells.entry(fingerprint).or_default())
    }

    /// Runs `f` on the key's slot under the shard's write lock, adding the
    /// key if the shard does not hold it (making room if need be).
    fn with_slot<R>(
        &self,
        fingerprint: u64,
        policy: &Policy,
        now: u64,
        f: impl FnOnce(&mut Slot) -> R,
    ) -> R {
        let mut shard = self.keys.write(fingerprint);
        if !shard.slots.contains_key(&fingerprint) {
            if let Some(pinned) = self.pinned.find(fingerprint)
                && let Some(mut slot) = pinned.state.slot()
            {
                return f(&mut slot);
            }
            shard.make_room(now, Eviction::IdleThenSample);
        }
        let slot = shard
            .slots
            .entry(fingerprint)
            .or_insert_with(|| Slot::new(policy, now));
        f(slot)
    }

    /// Any other policy: its states under the shard's write lock.
    fn check_slot(&self, fingerprint: u64, policy: &Policy, now: u64, cost: u32) -> PolicyDecision {
        self.with_slot(fingerprint, policy, now, |slot| {
            let (merged, each) = slot.check(policy, now, cost);
            PolicyDecision::checked(merged, each, now)
        })
    }
}

impl<C: Clock> Store for MemoryStore<C> {
    type Error = Infallible;
    type Future = std::future::Ready<Result<PolicyDecision, Infallible>>;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Infallible> {
        StoreReply::Ready(Ok(self.check_now(policy, key, cost)))
    }

    /// Refunds and debits, both.
    fn can(&self, _: super::Capability) -> Result<(), super::MissingCapability> {
        Ok(())
    }

    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: super::PolicyRefund) -> ChangeReply {
        self.refund_now(policy, key, refund);
        ChangeReply::Done
    }

    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: super::PolicyDebit) -> ChangeReply {
        self.debit_now(policy, key, debit.cost);
        ChangeReply::Done
    }

    fn peek(&self, policy: &Arc<Policy>, key: &Key) -> StoreReply<Self::Future, Infallible> {
        StoreReply::Ready(Ok(self.peek_now(policy, key)))
    }

    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> super::AdminFuture {
        self.reset_now(policy, key);
        super::AdminFuture::ready(Ok(()))
    }

    fn carry(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> super::AdminFuture {
        self.carry_now(from, to, key);
        super::AdminFuture::ready(Ok(()))
    }

    // `unblock`: the default. The memory store remembers no refusal; a
    // key refused here is refused by its counts, which `reset` forgets.
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::NamedLimit;
    use std::time::Duration;
    use tollgate_core::{Algorithm, ManualClock, Quota};

    const SECOND: u64 = 1_000_000_000;

    fn store(clock: &ManualClock) -> MemoryStore<ManualClock> {
        MemoryStore::builder()
            .shards(1)
            .max_keys(100)
            .clock(clock.clone())
            .build()
    }

    #[test]
    fn a_full_store_drops_keys_at_rest_before_busy_ones() {
        for algorithm in [Algorithm::Gcra, Algorithm::SlidingLog] {
            let clock = ManualClock::new(1_000 * SECOND);
            let store = store(&clock);
            let policy = Policy::new(vec![
                NamedLimit::new("api", Quota::per_second(10)).with_algorithm(algorithm),
            ]);
            let busy = Policy::new(vec![
                NamedLimit::new("busy", Quota::per_hour(1)).with_algorithm(algorithm),
            ]);
            for n in 0..50u64 {
                store.check_now(&policy, &Key::from(n), 1);
                store.check_now(&busy, &Key::from(n), 1);
            }
            assert_eq!(store.len(), 100);
            // After 2 s the "api" keys are whole again, the "busy" ones are
            // not: a new key sweeps out exactly the keys at rest.
            clock.advance(Duration::from_secs(2));
            store.check_now(&policy, &Key::from(1_000u64), 1);
            assert_eq!(store.len(), 51, "{algorithm}");
            // The busy keys kept their counts.
            assert!(
                !store
                    .check_now(&busy, &Key::from(7u64), 1)
                    .merged()
                    .allowed()
            );
        }
    }

    #[test]
    fn a_full_store_of_busy_keys_evicts_one_per_new_key() {
        let clock = ManualClock::new(1_000 * SECOND);
        let store = store(&clock);
        let policy = Policy::new(vec![NamedLimit::new("api", Quota::per_minute(1))]);
        for n in 0..150u64 {
            store.check_now(&policy, &Key::from(n), 1);
        }
        assert_eq!(store.len(), 100);
    }

    #[test]
    fn different_policies_count_the_same_key_apart() {
        let clock = ManualClock::new(1_000 * SECOND);
        let store = store(&clock);
        let one = Policy::new(vec![NamedLimit::new("a", Quota::per_minute(1))]);
        let other = Policy::new(vec![NamedLimit::new("b", Quota::per_minute(1))]);
        let key = Key::from("client");
        assert!(store.check_now(&one, &key, 1).merged().allowed());
        assert!(store.check_now(&other, &key, 1).merged().allowed());
        assert!(!store.check_now(&one, &key, 1).merged().allowed());
    }
}
