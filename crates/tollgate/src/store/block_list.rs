//! [`BlockList`]: the refusals a store made, remembered until their retry
//! time: the data of a [`BlockCache`](super::BlockCache), shared with
//! stores that consult it themselves before a round trip (the Redis store
//! does, by default).

use super::PolicyDecision;
use super::bounded::{BoundedMap, Eviction, Idle, default_shards};
use super::fingerprint::ByFingerprint;
use crate::{Key, Policy};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tollgate_core::{Decision, DecisionFields};

/// The default bound of a [`BlockList`].
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

/// The refusals a store made, remembered until their retry time: the data
/// of a block cache, for [`BlockCache`](super::BlockCache) and for stores that consult one
/// themselves before a round trip (the Redis store). Clones share the
/// entries. See [`BlockCache`](super::BlockCache) for what it answers and why that is right.
///
/// Times are nanoseconds of one clock chosen by the caller, the same for
/// [`lookup`](Self::lookup) and [`learn`](Self::learn): a monotonic one
/// ([`MonotonicClock`](tollgate_core::MonotonicClock)), or a [`ManualClock`](tollgate_core::ManualClock)
/// in tests.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::store::BlockList;
/// use tollgate::{Key, NamedLimit, Policy, PolicyDecision};
/// use tollgate_core::{DecisionFields, Quota};
///
/// let policy = Policy::new(vec![NamedLimit::new("api", Quota::per_minute(10))]);
/// let key = Key::from("alice");
/// let refused: tollgate_core::Decision = DecisionFields {
///     retry_after_nanos: 6_000_000_000,
///     ..Default::default()
/// }
/// .into();
/// let verdict = PolicyDecision::single(refused);
///
/// let blocked = BlockList::new();
/// // The store refused a request of cost 1 sent at 0 ns, answered at
/// // once: retry in 6 s.
/// blocked.learn(&policy, &key, 1, 0, 0, &verdict);
/// // 2 s later, the same request is refused here, 4 s before its retry.
/// let cached = blocked.lookup(&policy, &key, 1, 2_000_000_000).unwrap();
/// assert_eq!(cached.merged().retry_after_nanos(), 4_000_000_000);
/// // At 6 s the store is asked again.
/// assert!(blocked.lookup(&policy, &key, 1, 6_000_000_000).is_none());
/// ```
#[derive(Clone)]
pub struct BlockList {
    inner: Arc<ListInner>,
}

struct ListInner {
    /// The refusals; its count is read without a lock, so that a check
    /// finds "nothing is blocked" for the price of one load.
    entries: BoundedMap<ByFingerprint<Entry>>,
    /// Just after a charge was last given back (its time + 1 ns; 0:
    /// never; see [`BlockList::forget`]): a refusal sent before then may no
    /// longer hold, and is not learned.
    refunded_at: AtomicU64,
}

/// One refusal.
struct Entry {
    /// The policy's identity and the key: compared on every hit, so that
    /// two (policy, key) pairs with one fingerprint never share an entry.
    policy: u64,
    key: Key,
    /// The refused cost: requests of this cost or more are refused.
    cost: u32,
    /// When the refused request was sent.
    sent: u64,
    /// When the store's answer came: the figures are counted down from it.
    answered: u64,
    /// `sent` plus the retry time: from then on, the store is asked again.
    until: u64,
    verdict: PolicyDecision,
}

impl BlockList {
    /// An empty list holding at most [`DEFAULT_MAX_ENTRIES`] entries.
    pub fn new() -> Self {
        Self::with_max_entries(DEFAULT_MAX_ENTRIES)
    }

    /// An empty list holding at most `max_entries` entries (0: it
    /// remembers nothing). The bound is split evenly between its shards (4
    /// per available CPU, fewer for a small bound), rounded down:
    /// [`capacity`](Self::capacity) says what it came to.
    pub fn with_max_entries(max_entries: usize) -> Self {
        let shards = default_shards(max_entries);
        BlockList {
            inner: Arc::new(ListInner {
                entries: BoundedMap::new(shards, max_entries / shards),
                refunded_at: AtomicU64::new(0),
            }),
        }
    }

    /// The most entries the list holds.
    pub fn capacity(&self) -> usize {
        self.inner.entries.capacity()
    }

    /// How many refusals are remembered now (some may be past their retry
    /// time, not yet dropped).
    pub fn len(&self) -> usize {
        self.inner.entries.len()
    }

    /// Whether no refusal is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every refusal: after the store's state was reset behind its
    /// back (a flushed Redis), so that keys are asked about again at once.
    pub fn clear(&self) {
        self.inner.entries.each_shard(|entries| entries.clear());
    }

    /// Forgets the refusal remembered for `key` under `policy`, if any: a
    /// charge given back at `now` may let the key pass before the
    /// refusal's retry time. A refusal of a request sent before `now`
    /// whose answer comes later is not learned either (for any key: the
    /// list keeps no time per key it does not hold).
    pub fn forget(&self, policy: &Policy, key: &Key, now: u64) {
        let fingerprint = self.inner.fingerprint(policy, key);
        // Under the key's shard lock, as `learn` reads `refunded_at`: a
        // refusal is either learned before (and removed here) or finds the
        // new time (and is not learned).
        let mut shard = self.inner.entries.write(fingerprint);
        self.inner
            .refunded_at
            .fetch_max(now.saturating_add(1), Ordering::AcqRel);
        shard.remove(&fingerprint);
    }

    /// The refusal that answers a request of `cost` for `key` under
    /// `policy` at `now`, if one is remembered and still stands: the store's
    /// decision with its times reduced by the time since its answer came.
    /// `None`: ask the store (then [`learn`](Self::learn)
    /// from its answer). With the `metrics` feature, a hit counts
    /// `tollgate_block_cache_hits_total{policy}`.
    #[inline]
    pub fn lookup(
        &self,
        policy: &Policy,
        key: &Key,
        cost: u32,
        now: u64,
    ) -> Option<PolicyDecision> {
        let inner = &*self.inner;
        if inner.entries.is_empty() {
            return None;
        }
        let fingerprint = inner.fingerprint(policy, key);
        let mut shard = inner.entries.write(fingerprint);
        let entry = shard.get(&fingerprint)?;
        if entry.policy != policy.id() || entry.key != *key {
            return None;
        }
        if now >= entry.until {
            shard.remove(&fingerprint);
            return None;
        }
        // Only the refused cost: a costlier request is refused too, but
        // passes later than the remembered retry time, which would tell
        // its client to come back too early (the store answers it, and
        // its refusal is learned in turn).
        if cost != entry.cost {
            return None;
        }
        let verdict = aged(&entry.verdict, now.saturating_sub(entry.answered));
        drop(shard);
        crate::observe::block_cache_hit(policy.metrics());
        Some(verdict)
    }

    /// Learns from the store's `verdict` on a request of `cost` for `key`
    /// under `policy`, sent at `sent` (read before the store was asked) and
    /// answered at `answered` (read when its answer came; the same instant
    /// for a store that answers at once): remembers a refusal that can pass
    /// some day, forgets the key's refusal when a later request was
    /// admitted.
    pub fn learn(
        &self,
        policy: &Policy,
        key: &Key,
        cost: u32,
        sent: u64,
        answered: u64,
        verdict: &PolicyDecision,
    ) {
        let inner = &*self.inner;
        let merged = &verdict.merged();
        if merged.allowed() {
            // A request of cost 0 (a peek) charged nothing: nothing changed.
            if cost == 0 || inner.entries.is_empty() {
                return;
            }
            let fingerprint = inner.fingerprint(policy, key);
            let mut shard = inner.entries.write(fingerprint);
            let stale = shard.get(&fingerprint).is_some_and(|entry| {
                entry.policy == policy.id() && entry.key == *key && entry.sent <= sent
            });
            if stale {
                shard.remove(&fingerprint);
            }
            return;
        }
        let retry = merged.retry_after_nanos();
        if !merged.can_ever_pass() || retry == 0 || inner.entries.per_shard() == 0 {
            return;
        }
        let fingerprint = inner.fingerprint(policy, key);
        let entry = Entry {
            policy: policy.id(),
            key: key.clone(),
            cost,
            sent,
            answered: answered.max(sent),
            until: sent.saturating_add(stands_for(verdict)),
            verdict: verdict.clone(),
        };
        let mut shard = inner.entries.write(fingerprint);
        // Read under the lock that `forget` holds while it moves it on.
        if sent < inner.refunded_at.load(Ordering::Acquire) {
            return;
        }
        match shard.get_mut(&fingerprint) {
            Some(old) => {
                // A refusal of a request sent later knows more; one sent
                // earlier whose answer came late does not replace it.
                let same = old.policy == entry.policy && old.key == entry.key;
                if !same || old.sent <= sent {
                    *old = entry;
                }
            }
            None => {
                shard.make_room(sent, Eviction::IdleThenSample);
                shard.insert(fingerprint, entry);
            }
        }
    }
}

impl ListInner {
    #[inline]
    fn fingerprint(&self, policy: &Policy, key: &Key) -> u64 {
        self.entries.fingerprint(policy.id(), key)
    }
}

/// A refusal is idle from its retry time on; of a full shard's sample,
/// the one closest to it goes first (it saves the fewest calls).
impl Idle for Entry {
    fn idle_at(&self) -> u64 {
        self.until
    }
}

/// `decision` as it reads `elapsed` ns later: every time reduced by
/// `elapsed`, saturating at zero ("never" stays never).
fn aged_decision(decision: &Decision, elapsed: u64) -> Decision {
    let f = decision.fields();
    let less = |nanos: u64| nanos.saturating_sub(elapsed);
    DecisionFields {
        reset_after_nanos: less(f.reset_after_nanos),
        replenish_after_nanos: less(f.replenish_after_nanos),
        retry_after_nanos: if f.retry_after_nanos == Decision::NEVER_NANOS {
            Decision::NEVER_NANOS
        } else {
            less(f.retry_after_nanos)
        },
        wait_nanos: less(f.wait_nanos),
        ..f
    }
    .into()
}

/// How long after it was decided a refusal answers for the store, figure
/// for figure: until its retry time, or until a limit gives quota back
/// (its next replenishment: a unit of a costlier refusal, a limit that did
/// not refuse), if sooner. After that the store's figures differ from the
/// aged ones (more remaining, a limit that passes), so the store is asked
/// again and its new refusal learned.
fn stands_for(verdict: &PolicyDecision) -> u64 {
    verdict
        .each()
        .iter()
        .map(Decision::replenish_after_nanos)
        .filter(|nanos| *nanos > 0)
        .fold(verdict.merged().retry_after_nanos(), u64::min)
}

/// `verdict` as it reads `elapsed` ns later.
fn aged(verdict: &PolicyDecision, elapsed: u64) -> PolicyDecision {
    if elapsed == 0 {
        return verdict.clone();
    }
    verdict.map_each(|d| aged_decision(d, elapsed))
}

impl Default for BlockList {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for BlockList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockList")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn times_fall_with_the_elapsed_time_and_stop_at_zero() {
        let fields = DecisionFields {
            allowed: false,
            limit: 10,
            remaining: 0,
            reset_after_nanos: 9 * SECOND,
            replenish_after_nanos: SECOND,
            retry_after_nanos: 3 * SECOND,
            wait_nanos: 0,
        };
        let never = DecisionFields {
            retry_after_nanos: Decision::NEVER_NANOS,
            ..fields
        };
        let verdict = PolicyDecision::new([fields.into(), never.into()]);
        let later = aged(&verdict, 2 * SECOND);
        let expected = DecisionFields {
            reset_after_nanos: 7 * SECOND,
            replenish_after_nanos: 0,
            retry_after_nanos: SECOND,
            ..fields
        };
        assert_eq!(later.each()[0].fields(), expected);
        assert_eq!(later.each()[1].retry_after(), Decision::NEVER);
        // The merge of both: the longer retry, never.
        assert_eq!(later.merged().retry_after(), Decision::NEVER);
        assert_eq!(later.merged().reset_after_nanos(), 7 * SECOND);
        assert_eq!(aged(&verdict, 0), verdict);
    }
}
