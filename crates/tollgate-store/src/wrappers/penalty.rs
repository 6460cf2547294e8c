//! [`PenaltyBox`]: a store in front of another that blocks, for a while,
//! the keys that keep being refused; [`Penalty`]: when, and for how long.

use super::observed::{Observed, Observer};
use crate::key::Key;
use crate::policy::Policy;
use crate::{AdminFuture, PolicyDecision, Store, StoreReply, StoreWrapper};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tollgate_core::{Clock, Decision, DecisionFields, MonotonicClock};
use tollgate_internal::bounded::{BoundedMap, Eviction, Idle, default_shards};
use tollgate_internal::fingerprint::ByFingerprint;

/// The default bound of a [`PenaltyBox`]: keys with refusals counted, a
/// block, or offences remembered.
pub const DEFAULT_MAX_PENALTIES: usize = 100_000;

/// When a key is blocked, and for how long: after `refusals` refusals
/// within `within`, the key is refused for `block`; each further offence
/// (a block earned again before the offences are forgotten) can block it
/// longer, up to a bound.
///
/// ```
/// use std::time::Duration;
/// use tollgate_store::Penalty;
///
/// // 5 refusals within a minute: blocked 10 min, then 20, 40, at most 4 h;
/// // forgotten after a day without an offence.
/// let penalty = Penalty::new(5, Duration::from_secs(60), Duration::from_secs(600))
///     .escalate(2, Duration::from_secs(4 * 3600))
///     .forget_after(Duration::from_secs(24 * 3600));
/// assert_eq!(penalty.block_for(1), Duration::from_secs(600));
/// assert_eq!(penalty.block_for(3), Duration::from_secs(2400));
/// assert_eq!(penalty.block_for(9), Duration::from_secs(4 * 3600));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Penalty {
    refusals: u32,
    within: u64,
    block: u64,
    factor: u32,
    max_block: u64,
    forget_after: u64,
}

impl Penalty {
    /// Blocks a key for `block` once it has been refused `refusals` times
    /// (at least 1) within `within` (counted from the first refusal of a
    /// run: a run older than `within` starts again). Without
    /// [`escalate`](Self::escalate) every block lasts `block`. Offences are
    /// forgotten an hour after a block ends, unless
    /// [`forget_after`](Self::forget_after) says otherwise.
    pub fn new(refusals: u32, within: Duration, block: Duration) -> Self {
        let block = nanos(block);
        Penalty {
            refusals: refusals.max(1),
            within: nanos(within),
            block,
            factor: 1,
            max_block: block,
            forget_after: 3_600_000_000_000,
        }
    }

    /// Multiplies the block by `factor` for each offence after the first
    /// (block, block × factor, block × factor², …), never beyond `max`
    /// (nor below the first block).
    pub fn escalate(self, factor: u32, max: Duration) -> Self {
        Penalty {
            factor: factor.max(1),
            max_block: nanos(max).max(self.block),
            ..self
        }
    }

    /// How long after its last block ends a key's offences are remembered
    /// (default 1 h): an offence after that is a first one again.
    pub fn forget_after(self, after: Duration) -> Self {
        Penalty {
            forget_after: nanos(after),
            ..self
        }
    }

    /// How long the `offence`th offence (1 for the first) blocks a key.
    pub fn block_for(&self, offence: u32) -> Duration {
        Duration::from_nanos(self.block_nanos(offence))
    }

    fn block_nanos(&self, offence: u32) -> u64 {
        let mut block = self.block;
        // At most 64 doublings take any block to the bound: stop there.
        for _ in 1..offence.min(64) {
            block = block.saturating_mul(u64::from(self.factor));
            if block >= self.max_block {
                break;
            }
        }
        block.min(self.max_block)
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// What is remembered of one key under one policy.
struct Entry {
    /// The policy's identity and the key, compared on every hit, so that
    /// two pairs with one fingerprint never share an entry.
    policy: u64,
    key: Key,
    /// Refusals counted in the current run, and when the run began.
    refusals: u32,
    run_start: u64,
    /// Blocks earned and not yet forgotten.
    offences: u32,
    /// The end of the last block (0: none yet).
    blocked_until: u64,
    /// The refusal that earned the block: its figures (limits, counts)
    /// are what a blocked request is told, with the block's times.
    refusal: Option<PolicyDecision>,
    /// [`matters_until`](Self::matters_until), kept at each change: from
    /// then on the entry is idle.
    idle_at: u64,
}

impl Idle for Entry {
    fn idle_at(&self) -> u64 {
        self.idle_at
    }
}

impl Entry {
    /// Until when the entry holds something: a block, a run of refusals,
    /// or offences to remember. After that it is dropped when room is
    /// needed.
    fn matters_until(&self, penalty: &Penalty) -> u64 {
        let run_end = self.run_start.saturating_add(penalty.within);
        let memory = if self.offences > 0 {
            self.blocked_until.saturating_add(penalty.forget_after)
        } else {
            0
        };
        run_end.max(self.blocked_until).max(memory)
    }

    /// Counts a refusal at `now`; blocks the key when it makes the run
    /// long enough.
    fn offend(&mut self, penalty: &Penalty, now: u64, refusal: &PolicyDecision) {
        // A refusal of a request sent before the block began, answered
        // during it: the block already punishes that run.
        if now < self.blocked_until {
            return;
        }
        if now.saturating_sub(self.run_start) >= penalty.within || self.refusals == 0 {
            self.run_start = now;
            self.refusals = 0;
        }
        self.refusals += 1;
        if self.refusals < penalty.refusals {
            return;
        }
        if self.offences > 0 && now >= self.blocked_until.saturating_add(penalty.forget_after) {
            self.offences = 0;
        }
        self.offences = self.offences.saturating_add(1);
        self.blocked_until = now.saturating_add(penalty.block_nanos(self.offences));
        self.refusals = 0;
        self.refusal = Some(refusal.clone());
    }
}

/// The entries, sharded by fingerprint, bounded; their count is read
/// without a lock, so that a check finds "nothing here" for one load.
struct Book {
    entries: BoundedMap<ByFingerprint<Entry>>,
    penalty: Penalty,
}

impl Book {
    fn new(penalty: Penalty, max_entries: usize) -> Self {
        let shards = default_shards(max_entries);
        Book {
            entries: BoundedMap::new(shards, max_entries / shards),
            penalty,
        }
    }

    fn fingerprint(&self, policy: &Policy, key: &Key) -> u64 {
        self.entries.fingerprint(policy.id(), key)
    }

    /// The block's answer for `key` at `now`, if it is blocked.
    fn blocked(&self, policy: &Policy, key: &Key, now: u64) -> Option<PolicyDecision> {
        if self.entries.is_empty() {
            return None;
        }
        let fingerprint = self.fingerprint(policy, key);
        let shard = self.entries.read(fingerprint);
        let entry = shard.get(&fingerprint)?;
        if entry.policy != policy.id() || entry.key != *key || now >= entry.blocked_until {
            return None;
        }
        let left = entry.blocked_until - now;
        let refusal = entry.refusal.as_ref()?;
        Some(blocked_answer(refusal, left))
    }

    /// Counts a refusal of `key` at `now`.
    fn offend(&self, policy: &Policy, key: &Key, now: u64, refusal: &PolicyDecision) {
        if self.entries.per_shard() == 0 {
            return;
        }
        let fingerprint = self.fingerprint(policy, key);
        let mut shard = self.entries.write(fingerprint);
        let same = shard
            .get(&fingerprint)
            .map(|entry| entry.policy == policy.id() && entry.key == *key);
        if same == Some(false) {
            // Another pair with the same fingerprint (one chance in 2⁶⁴):
            // the newer one takes the place.
            shard.remove(&fingerprint);
        }
        if same != Some(true) {
            shard.make_room(now, Eviction::IdleThenSample);
            shard.insert(
                fingerprint,
                Entry {
                    policy: policy.id(),
                    key: key.clone(),
                    refusals: 0,
                    run_start: now,
                    offences: 0,
                    blocked_until: 0,
                    refusal: None,
                    idle_at: 0,
                },
            );
        }
        if let Some(entry) = shard.get_mut(&fingerprint) {
            entry.offend(&self.penalty, now, refusal);
            entry.idle_at = entry.matters_until(&self.penalty);
        }
    }

    /// Forgets `key`: its block, its run of refusals, its offences.
    fn forget(&self, policy: &Policy, key: &Key) {
        let fingerprint = self.fingerprint(policy, key);
        let mut shard = self.entries.write(fingerprint);
        let ours = shard
            .get(&fingerprint)
            .is_some_and(|entry| entry.policy == policy.id() && entry.key == *key);
        if ours {
            shard.remove(&fingerprint);
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// What a blocked key is told: the refusal that blocked it, every limit
/// refused, nothing remaining, and `left` (the rest of the block) as its
/// retry and replenish times, so that `Retry-After` and the `RateLimit`
/// field's `t` both say when the block ends; `reset_after` is the later of
/// the block's end and the limit's own.
fn blocked_answer(refusal: &PolicyDecision, left: u64) -> PolicyDecision {
    let block = |decision: &Decision| -> Decision {
        let f = decision.fields();
        DecisionFields {
            allowed: false,
            remaining: 0,
            reset_after_nanos: f.reset_after_nanos.max(left),
            replenish_after_nanos: left,
            retry_after_nanos: left,
            wait_nanos: 0,
            ..f
        }
        .into()
    };
    refusal.map_each(block)
}

/// A store in front of `S` that blocks the keys `S` keeps refusing: after
/// [`Penalty`]'s number of refusals within its period, a key is refused
/// for the block's duration, growing with repeat offences if the penalty
/// escalates. Clones share what they remember.
///
/// - **A blocked key costs no store call**: it is answered here, at once,
///   with the refusal that earned the block, whose `retry_after` (and so
///   `Retry-After`) and `replenish_after` (the `RateLimit` field's `t`)
///   are the time left in the block, and whose `reset_after` is at least
///   that. Its requests are not counted as refusals again.
/// - **What counts**: refusals by the store behind of requests of a cost
///   above 0 (a peek never offends), per policy and key. Admissions do not
///   clear a run: "5 refusals within a minute" means five, however many
///   passed between them.
/// - **Escalation and forgetting**: each block earned while earlier
///   offences are remembered is an offence more ([`Penalty::escalate`]);
///   offences are forgotten [`Penalty::forget_after`] after the last block
///   ended.
/// - **Operators**: [`Store::unblock`] lifts the block and forgets the
///   offences and the run; [`Store::reset`] does that and resets the store
///   behind. [`Store::peek`] of a blocked key answers the block.
/// - **Bounded**: at most [`max_entries`](Self::max_entries) keys
///   (default [`DEFAULT_MAX_PENALTIES`]) in shards behind short-held
///   locks; with no key counted (the usual case) a check reads one atomic
///   and takes no lock. When a shard is full, entries that hold nothing
///   any more are swept (at most once a second a shard), and if none, of a
///   small sample, the one that matters for the shortest time is evicted:
///   a flood of distinct offending keys costs at most the bound, and a key
///   evicted loses its run or its block (it is decided by the store again).
/// - **Where the state lives**: in this process. Instances sharing Redis
///   each count the refusals they see and block on their own; a key
///   refused on several instances offends on each.
///
/// ```
/// use std::time::Duration;
/// use tollgate_store::{Penalty, PenaltyBox};
/// use tollgate::RateLimitLayer;
/// use tollgate_store::MemoryStore;
/// use tollgate_core::Quota;
///
/// let penalty = Penalty::new(3, Duration::from_secs(60), Duration::from_secs(300))
///     .escalate(2, Duration::from_secs(3600));
/// let layer = RateLimitLayer::builder()
///     .quota("login", Quota::per_minute(5))
///     .store(PenaltyBox::new(MemoryStore::new(), penalty))
///     .build();
/// # let _ = layer;
/// ```
pub struct PenaltyBox<S, C = MonotonicClock> {
    inner: S,
    book: Arc<Book>,
    clock: C,
}

impl<S: Clone, C: Clone> Clone for PenaltyBox<S, C> {
    fn clone(&self) -> Self {
        PenaltyBox {
            inner: self.inner.clone(),
            book: self.book.clone(),
            clock: self.clock.clone(),
        }
    }
}

impl<S: std::fmt::Debug, C> std::fmt::Debug for PenaltyBox<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PenaltyBox")
            .field("inner", &self.inner)
            .field("penalty", &self.book.penalty)
            .field("entries", &self.book.len())
            .finish_non_exhaustive()
    }
}

impl<S> PenaltyBox<S> {
    /// `inner`, with keys it keeps refusing blocked as `penalty` says, at
    /// most [`DEFAULT_MAX_PENALTIES`] keys remembered, on the monotonic
    /// clock.
    pub fn new(inner: S, penalty: Penalty) -> Self {
        crate::set_up_default_clock();
        PenaltyBox {
            inner,
            book: Arc::new(Book::new(penalty, DEFAULT_MAX_PENALTIES)),
            clock: MonotonicClock,
        }
    }
}

impl<S, C> PenaltyBox<S, C> {
    /// Remembers at most `max_entries` keys (a fresh, empty book; 0
    /// remembers nothing and so never blocks).
    pub fn max_entries(self, max_entries: usize) -> Self {
        let penalty = self.book.penalty;
        PenaltyBox {
            book: Arc::new(Book::new(penalty, max_entries)),
            ..self
        }
    }

    /// Measures runs and blocks on `clock` (a
    /// [`ManualClock`](tollgate_core::ManualClock) in tests).
    pub fn clock<C2: Clock>(self, clock: C2) -> PenaltyBox<S, C2> {
        PenaltyBox {
            inner: self.inner,
            book: self.book,
            clock,
        }
    }

    /// The penalty.
    pub fn penalty(&self) -> Penalty {
        self.book.penalty
    }

    /// The most keys it remembers.
    pub fn capacity(&self) -> usize {
        self.book.entries.capacity()
    }

    /// How many keys are remembered now (counted, blocked, or with
    /// offences; some may hold nothing any more, not yet dropped).
    pub fn len(&self) -> usize {
        self.book.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The store behind.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

pin_project! {
    /// The future of a [`PenaltyBox`] check that asked the store behind:
    /// its answer, a refusal counted when it comes.
    pub struct PenaltyFuture<F, C = MonotonicClock> {
        #[pin]
        observed: Observed<F, Count<C>>,
    }
}

/// What a pending check needs to count its refusal.
struct Count<C> {
    book: Arc<Book>,
    clock: C,
    policy: Arc<Policy>,
    key: Key,
}

impl<C: Clock, E> Observer<E> for Count<C> {
    type Error = E;

    /// A refusal is an offence of the key.
    fn observe(self, answer: Result<PolicyDecision, E>) -> Result<PolicyDecision, E> {
        if let Ok(verdict) = &answer
            && !verdict.merged().allowed()
        {
            let now = self.clock.now();
            self.book.offend(&self.policy, &self.key, now, verdict);
        }
        answer
    }

    fn pass(error: E) -> E {
        error
    }
}

impl<F, C, E> Future for PenaltyFuture<F, C>
where
    F: Future<Output = Result<PolicyDecision, E>>,
    C: Clock,
{
    type Output = Result<PolicyDecision, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().observed.poll(cx)
    }
}

impl<S, C> PenaltyBox<S, C>
where
    S: Store,
    C: Clock + Clone,
{
    /// The block's answer, or `ask`'s, its refusal counted.
    fn decide(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        ask: impl FnOnce(&S) -> StoreReply<S::Future, S::Error>,
    ) -> StoreReply<PenaltyFuture<S::Future, C>, S::Error> {
        if let Some(answer) = self.book.blocked(policy, key, self.clock.now()) {
            return StoreReply::Ready(Ok(answer));
        }
        match ask(&self.inner) {
            StoreReply::Ready(answer) => {
                if let Ok(verdict) = &answer
                    && cost > 0
                    && !verdict.merged().allowed()
                {
                    self.book.offend(policy, key, self.clock.now(), verdict);
                }
                StoreReply::Ready(answer)
            }
            StoreReply::Pending(inner) => {
                let observed = match cost {
                    0 => Observed::unobserved(inner),
                    _ => Observed::new(
                        inner,
                        Count {
                            book: self.book.clone(),
                            clock: self.clock.clone(),
                            policy: policy.clone(),
                            key: key.clone(),
                        },
                    ),
                };
                StoreReply::Pending(PenaltyFuture { observed })
            }
        }
    }
}

impl<S, C> StoreWrapper for PenaltyBox<S, C>
where
    S: Store,
    C: Clock + Clone,
{
    type Inner = S;
    type Error = S::Error;
    type Future = PenaltyFuture<S::Future, C>;

    fn inner(&self) -> &S {
        &self.inner
    }

    /// A blocked key is answered at once, whatever `within`; otherwise the
    /// store behind is asked with the same `within`.
    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.decide(policy, key, cost, |inner| {
            inner.check_within(policy, key, cost, within)
        })
    }

    // `refund` and `debit`: forwarded. A block stands after a refund: it
    // punishes the refusals, which a refund of an admission does not undo.

    /// A forwarded operation's answer counts no offence.
    fn relay(
        &self,
        _: &Arc<Policy>,
        _: &Key,
        reply: StoreReply<S::Future, S::Error>,
    ) -> StoreReply<Self::Future, Self::Error> {
        reply.map(
            |inner| PenaltyFuture {
                observed: Observed::unobserved(inner),
            },
            |error| error,
        )
    }

    /// The block, for a blocked key; else the store behind's peek.
    fn peek(&self, policy: &Arc<Policy>, key: &Key) -> StoreReply<Self::Future, Self::Error> {
        if let Some(answer) = self.book.blocked(policy, key, self.clock.now()) {
            return StoreReply::Ready(Ok(answer));
        }
        self.relay(policy, key, self.inner.peek(policy, key))
    }

    /// Lifts the key's block and forgets its offences, then resets it in
    /// the store behind.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        self.book.forget(policy, key);
        self.inner.reset(policy, key)
    }

    /// Lifts the key's block and forgets its offences and its run of
    /// refusals, and passes the call on.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        self.book.forget(policy, key);
        self.inner.unblock(policy, key)
    }
}
