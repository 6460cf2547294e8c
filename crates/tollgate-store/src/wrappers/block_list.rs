//! [`BlockList`]: the refusals a store made, remembered until their retry
//! time: the data of a [`BlockCache`](crate::BlockCache), shared with
//! stores that consult it themselves before a round trip (the Redis store
//! does, by default).

use crate::PolicyDecision;
use crate::key::Key;
use crate::policy::Policy;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tollgate_core::{Decision, DecisionFields};
use tollgate_internal::bounded::{BoundedMap, Eviction, Idle, default_shards};
use tollgate_internal::fingerprint::ByFingerprint;

/// The default bound of a [`BlockList`].
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

/// The refusals a store made, remembered until their retry time: the data
/// of a block cache, for [`BlockCache`](crate::BlockCache) and for stores that consult one
/// themselves before a round trip (the Redis store). Clones share the
/// entries. See [`BlockCache`](crate::BlockCache) for what it answers and why that is right.
///
/// Times are nanoseconds of one clock chosen by the caller, the same for
/// [`lookup`](Self::lookup) and [`learn`](Self::learn): a monotonic one
/// ([`MonotonicClock`](tollgate_core::MonotonicClock)), or a [`ManualClock`](tollgate_core::ManualClock)
/// in tests.
///
/// ```
/// use std::sync::Arc;
/// use tollgate_store::BlockList;
/// use tollgate_store::{Key, NamedLimit, Policy, PolicyDecision};
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
    /// The keys known to be at or over their limit (see
    /// [`BlockList::failed`]), read only when the store fails. Locked
    /// before `entries` when both are: never the other way round.
    known: BoundedMap<ByFingerprint<Known>>,
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
    /// Not the store's refusal but this list's own: a key at its limit let
    /// through while the store failed, blocked for its period (see
    /// [`BlockList::failed`]). It refuses every cost of at least `cost`.
    local: bool,
}

/// A key known to be at or over its limit: what a failure of the store on
/// it is answered with (see [`BlockList::failed`]).
struct Known {
    policy: u64,
    key: Key,
    /// The decision that showed it (a refusal, or an admission that left
    /// nothing), and when its answer came: the shape of a local block.
    verdict: PolicyDecision,
    answered: u64,
    /// The longest period of the limits that refused or were left empty
    /// (ns): how long a key let through while the store fails is blocked.
    period: u64,
    /// Known until then: a period past the end of its refusal or block.
    until: u64,
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
                known: BoundedMap::new(shards, max_entries / shards),
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

    /// Forgets every refusal, and every key known to be at its limit:
    /// after the store's state was reset behind its back (a flushed
    /// Redis), so that keys are asked about again at once.
    pub fn clear(&self) {
        self.inner.known.each_shard(|known| known.clear());
        self.inner.entries.each_shard(|entries| entries.clear());
    }

    /// Forgets the refusal remembered for `key` under `policy`, if any,
    /// and that the key is at its limit: a charge given back at `now` may
    /// let the key pass before the refusal's retry time. A refusal of a
    /// request sent before `now` whose answer comes later is not learned
    /// either (for any key: the list keeps no time per key it does not
    /// hold).
    pub fn forget(&self, policy: &Policy, key: &Key, now: u64) {
        let fingerprint = self.inner.fingerprint(policy, key);
        if !self.inner.known.is_empty() {
            self.inner.known.write(fingerprint).remove(&fingerprint);
        }
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
    /// `tollgate_block_cache_hits_total{limits}`.
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
        if !entry.is_for(policy, key) {
            return None;
        }
        if now >= entry.until {
            shard.remove(&fingerprint);
            return None;
        }
        let verdict = entry.refusal(cost, now)?;
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
            if cost == 0 {
                return;
            }
            self.learn_known(policy, key, sent, answered, verdict);
            if inner.entries.is_empty() {
                return;
            }
            let fingerprint = inner.fingerprint(policy, key);
            let mut shard = inner.entries.write(fingerprint);
            let stale = shard
                .get(&fingerprint)
                .is_some_and(|entry| entry.is_for(policy, key) && entry.sent <= sent);
            if stale {
                shard.remove(&fingerprint);
            }
            return;
        }
        let retry = merged.retry_after_nanos();
        if !merged.can_ever_pass() || retry == 0 || inner.entries.per_shard() == 0 {
            return;
        }
        // A refusal sent before a refund is not learned (checked again
        // below, under the lock that `forget` holds).
        if sent < inner.refunded_at.load(Ordering::Acquire) {
            return;
        }
        self.learn_known(policy, key, sent, answered, verdict);
        let fingerprint = inner.fingerprint(policy, key);
        let entry = Entry {
            policy: policy.id(),
            key: key.clone(),
            cost,
            sent,
            answered: answered.max(sent),
            until: sent.saturating_add(stands_for(verdict)),
            verdict: verdict.clone(),
            local: false,
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

impl BlockList {
    /// Tells the list that the store failed (an error, a timeout, an open
    /// breaker: no verdict) at `now` on a request for `key` under
    /// `policy`; what to answer instead of the failure, if anything.
    ///
    /// A key is *known to be at its limit* from a refusal the list learned
    /// (or an admission that left a limit empty) until a period of that
    /// limit's quota past the refusal's retry time (or the admission's next
    /// replenishment); a store answer that leaves it room again forgets it.
    /// For such a key:
    ///
    /// - while a block of the list's own stands, or a refusal of the
    ///   store's for this `cost`, the failure is answered with it (`Some`,
    ///   what [`lookup`](Self::lookup) answers now): a request sent before
    ///   it was made or learned, failing after, is refused all the same;
    /// - otherwise `None` (the failure stands: the layer's store-error
    ///   behaviour decides this request, and fail-open lets it through),
    ///   and the key is blocked here for the longest period of the limits
    ///   that showed it at its limit, every cost from 1 up: refused
    ///   without a call to the store, with `Retry-After` at the block's
    ///   end, and known for a period beyond it.
    ///
    /// So while the store fails, a key at its limit gets through at most
    /// once per period, wherever the failure is answered: a refusal that
    /// went stale cannot turn into an open gate. The block is the list's
    /// own, not the store's figures: it holds for its period even if the
    /// store comes back sooner (the request let through was charged
    /// nowhere), and [`forget`](Self::forget), [`clear`](Self::clear) or a
    /// refund lift it. A key the list never saw at its limit (or forgot,
    /// for the bound) is not known: its failures stand.
    pub fn failed(
        &self,
        policy: &Policy,
        key: &Key,
        cost: u32,
        now: u64,
    ) -> Option<PolicyDecision> {
        let inner = &*self.inner;
        if inner.known.is_empty() || inner.entries.per_shard() == 0 {
            return None;
        }
        let fingerprint = inner.fingerprint(policy, key);
        // `known` before `entries`, as everywhere both are held.
        let mut known_shard = inner.known.write(fingerprint);
        let known = known_shard.get_mut(&fingerprint)?;
        if !known.is_for(policy, key) {
            return None;
        }
        if now >= known.until {
            known_shard.remove(&fingerprint);
            return None;
        }
        let mut shard = inner.entries.write(fingerprint);
        // What a lookup would answer: the store's refusal of this cost
        // (figure for figure), or a block of the list's own (every cost).
        if let Some(entry) = shard.get(&fingerprint)
            && entry.is_for(policy, key)
            && now < entry.until
            && let Some(refusal) = entry.refusal(cost, now)
        {
            return Some(refusal);
        }
        let period = known.period;
        let block = Entry {
            policy: policy.id(),
            key: key.clone(),
            cost: 1,
            sent: now,
            answered: now,
            until: now.saturating_add(period),
            verdict: blocked_for(&known.verdict, period, now.saturating_sub(known.answered)),
            local: true,
        };
        known.until = known.until.max(block.until.saturating_add(period));
        match shard.get_mut(&fingerprint) {
            Some(old) => *old = block,
            None => {
                shard.make_room(now, Eviction::IdleThenSample);
                shard.insert(fingerprint, block);
            }
        }
        drop(shard);
        drop(known_shard);
        tracing::debug!(
            limits = policy.label(),
            block_ms = period / 1_000_000,
            "the store failed on a key at its limit: let through once, then blocked here \
             for its period"
        );
        None
    }

    /// Learns whether `verdict` (of a request of a cost above 0, sent at
    /// `sent`, answered at `answered`) shows the key at or over its limit
    /// (remembered, see [`failed`](Self::failed)) or with room (forgotten).
    fn learn_known(
        &self,
        policy: &Policy,
        key: &Key,
        sent: u64,
        answered: u64,
        verdict: &PolicyDecision,
    ) {
        let inner = &*self.inner;
        if inner.known.per_shard() == 0 {
            return;
        }
        let at_limit = at_limit(policy, verdict);
        // The usual case, an admission with room while no key is known:
        // nothing to hash, nothing to lock.
        if at_limit.is_none() && inner.known.is_empty() {
            return;
        }
        let fingerprint = inner.fingerprint(policy, key);
        let same = |known: &Known| known.is_for(policy, key);
        let Some((ends, period)) = at_limit else {
            // Room again, for a request sent after the key was seen at its
            // limit: no longer known. A read lock first: an admission of a
            // key not known writes nothing.
            let stale = |known: &Known| same(known) && known.answered <= sent;
            if !inner
                .known
                .read(fingerprint)
                .get(&fingerprint)
                .is_some_and(stale)
            {
                return;
            }
            let mut shard = inner.known.write(fingerprint);
            if shard.get(&fingerprint).is_some_and(stale) {
                shard.remove(&fingerprint);
            }
            return;
        };
        let answered = answered.max(sent);
        let until = sent.saturating_add(ends).saturating_add(period);
        let mut shard = inner.known.write(fingerprint);
        match shard.get_mut(&fingerprint) {
            Some(old) if same(old) => {
                // The later answer shapes a block; the longer knowledge
                // (a block of the list's own) stands.
                if old.answered <= answered {
                    old.verdict = verdict.clone();
                    old.answered = answered;
                    old.period = period;
                }
                old.until = old.until.max(until);
            }
            Some(old) => {
                *old = Known {
                    policy: policy.id(),
                    key: key.clone(),
                    verdict: verdict.clone(),
                    answered,
                    period,
                    until,
                };
            }
            None => {
                shard.make_room(sent, Eviction::IdleThenSample);
                shard.insert(
                    fingerprint,
                    Known {
                        policy: policy.id(),
                        key: key.clone(),
                        verdict: verdict.clone(),
                        answered,
                        period,
                        until,
                    },
                );
            }
        }
    }
}

/// Whether a limit's decision leaves the key at or over it: refused, or
/// admitted with nothing left.
fn spent(decision: &Decision) -> bool {
    !decision.allowed() || decision.remaining() == 0
}

/// If `verdict` shows the key at or over a limit: how long until that
/// ends as the store saw it (a refusal's retry time, an admission's next
/// replenishment) and the longest period of those limits (ns).
fn at_limit(policy: &Policy, verdict: &PolicyDecision) -> Option<(u64, u64)> {
    let (each, limits) = (verdict.each(), policy.limits());
    let longest = || {
        limits
            .iter()
            .map(|limit| limit.quota().period_nanos())
            .max()
            .unwrap_or(0)
    };
    each.iter()
        .enumerate()
        .filter(|(_, decision)| spent(decision))
        .map(|(i, decision)| {
            let ends = if decision.allowed() {
                decision.replenish_after_nanos()
            } else {
                decision.retry_after_nanos()
            };
            let period = match limits.get(i) {
                Some(limit) if each.len() == limits.len() => limit.quota().period_nanos(),
                _ => longest(),
            };
            (ends, period)
        })
        .reduce(|(a, p), (b, q)| (a.max(b), p.max(q)))
}

/// The refusal of a block of `period` ns made `elapsed` ns after
/// `verdict`'s answer: each limit it showed spent refuses until the
/// block's end (its retry, replenishment and reset times), the others read
/// as `verdict` aged by `elapsed`.
fn blocked_for(verdict: &PolicyDecision, period: u64, elapsed: u64) -> PolicyDecision {
    PolicyDecision::new(verdict.each().iter().map(|decision| {
        if spent(decision) {
            DecisionFields {
                allowed: false,
                remaining: 0,
                reset_after_nanos: period,
                replenish_after_nanos: period,
                retry_after_nanos: period,
                wait_nanos: 0,
                ..decision.fields()
            }
            .into()
        } else {
            aged_decision(decision, elapsed)
        }
    }))
}

impl Known {
    /// Whether this is `key` under `policy` (see [`Entry::is_for`]).
    fn is_for(&self, policy: &Policy, key: &Key) -> bool {
        self.policy == policy.id() && self.key == *key
    }
}

/// A known key is idle (may be dropped) once it is no longer known.
impl Idle for Known {
    fn idle_at(&self) -> u64 {
        self.until
    }
}

impl ListInner {
    #[inline]
    fn fingerprint(&self, policy: &Policy, key: &Key) -> u64 {
        self.entries.fingerprint(policy.id(), key)
    }
}

impl Entry {
    /// Whether this is the entry of `key` under `policy` (not another pair
    /// with the same fingerprint).
    fn is_for(&self, policy: &Policy, key: &Key) -> bool {
        self.policy == policy.id() && self.key == *key
    }

    /// Its answer to a request of `cost` at `now`, if it refuses that
    /// cost: the remembered decision, aged. Only the refused cost: a
    /// costlier request is refused too, but passes later than the
    /// remembered retry time, which would tell its client to come back too
    /// early (the store answers it, and its refusal is learned in turn). A
    /// block of this list's own refuses every cost from its own up.
    fn refusal(&self, cost: u32, now: u64) -> Option<PolicyDecision> {
        let refuses = cost == self.cost || (self.local && cost >= self.cost);
        refuses.then(|| aged(&self.verdict, now.saturating_sub(self.answered)))
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

    /// The sizes `BlockCache`'s docs give: a slot of each map (its
    /// fingerprint, its value and the table's control byte).
    #[test]
    fn entries_take_the_bytes_the_docs_say() {
        assert_eq!(std::mem::size_of::<(u64, Entry)>() + 1, 249);
        assert_eq!(std::mem::size_of::<(u64, Known)>() + 1, 241);
    }
}
