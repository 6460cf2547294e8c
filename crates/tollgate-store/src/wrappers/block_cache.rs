//! [`BlockCache`]: a store that refuses on its own, until their retry
//! time, the keys the store behind it refused; [`BlockList`]: what it
//! remembers, shared with stores that consult it themselves (the Redis
//! store does, by default).
//!
//! See [`BlockCache`] for what is remembered, what a cached refusal says,
//! why it is right, and what it costs.

use super::block_list::BlockList;
use super::observed::{Observed, Observer};
use crate::key::Key;
use crate::policy::Policy;
use crate::{ChangeReply, PolicyDecision, Store, StoreReply, StoreWrapper};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tollgate_core::{Clock, MonotonicClock};

/// A store in front of `S` that refuses on its own, until their retry
/// time, the keys `S` refused, without asking `S` again. Clones share what
/// they remember.
///
/// Under attack most requests are refused, and most refusals are the same
/// few keys asking again and again. A shared store answers each of them
/// with a round trip; a block cache answers all but the first from memory:
/// a flood of 10,000 requests on a refused key costs Redis one call per
/// retry period per instance, instead of 10,000.
///
/// # What is remembered, and what a hit answers
///
/// When the store behind answers a refusal (`merged.allowed()` is false)
/// whose retry time is finite ([`Decision::can_ever_pass`](tollgate_core::Decision::can_ever_pass)), the cache
/// remembers, for (policy, key), the refused cost, the store's whole
/// [`PolicyDecision`], and two instants of a [`Clock`]: when the request
/// was *sent* (read before the store was asked) and when its answer came.
/// Until the sending plus the retry time, a request for the same policy
/// and key whose cost is at least the remembered one is answered
/// [`StoreReply::Ready`] with that decision, without asking the store; its
/// times (`retry_after`, `reset_after`, `replenish_after`, and an allowed
/// limit's `wait`, of the merged decision and of each limit's) are reduced
/// by the time elapsed since the answer came, saturating at zero, so that
/// `Retry-After` and `t` keep falling as they would have. Then:
///
/// - A cheaper request goes to the store: it might pass.
/// - An allowed answer for the key (of a cost above 0, for a request sent
///   no earlier than the remembered one) removes the entry: the store has
///   charged the key since, so the remembered figures are out of date.
/// - An entry whose retry time has come is dropped when it is read, and
///   the request goes to the store.
/// - A request that can never pass (its cost exceeds what a limit can ever
///   admit: `retry_after` is [`Decision::NEVER`](tollgate_core::Decision::NEVER)), a store error, a late
///   answer ([`Store::check_within`]): nothing is remembered.
///
/// # Why a cached refusal is right
///
/// A refusal's `retry_after` is the earliest moment at which the refused
/// request could pass, given the key's state when the store decided
/// (tollgate's algorithms are exact about it: 1 ns earlier it would not).
/// From then on the state can only take more charges: other requests, from
/// this instance or from others sharing the store, add to it, and a
/// refused request adds nothing. More charges never make a request pass
/// sooner, and a costlier request never passes sooner than a cheaper one,
/// so no request of at least the refused cost can pass before that moment;
/// answering them "refused" without asking changes no decision. Only
/// requests of the refused cost are answered, though: a costlier one
/// passes later still, and the remembered retry time would tell its
/// client to come back too early (found by the conformance kit); the store
/// answers it. The store
/// decided after the request was sent and before its answer came, so the
/// entry, which expires at the sending plus the retry time, expires up to
/// a round trip *early*, never late (the first request after it just asks
/// the store again); and the times it reports, counted down from the
/// answer, are up to a round trip *late*, never early: a client that
/// waits out a cached `Retry-After` is not refused for waiting too little.
///
/// # While the store fails
///
/// A store error (any: an error of the store, a [`Timeout`](crate::Timeout)'s
/// `Elapsed`, an open [`Breaker`](crate::Breaker)) teaches the cache
/// nothing, and a refusal it holds is answered as ever. Past a refusal's
/// retry time, though, the key goes to the store, and a store that fails
/// then would leave it to the layer's store-error behaviour: under
/// fail-open, an open gate for a key known to be over its limit, on every
/// request for as long as the outage lasts. So the cache keeps, beside
/// its refusals, the keys it saw at their limit (refused, or admitted with
/// nothing left) until a period of their quota past that, and answers a
/// failure on such a key itself ([`BlockList::failed`]): refused while a
/// refusal stands; otherwise the failure passes (fail-open lets this one
/// request through) and the key is blocked here for its quota's period,
/// every cost, with `Retry-After` at the block's end. However long the
/// store fails, such a key is let through at most once per period by each
/// instance on top of what the store admitted: its limit plus one per
/// instance per period. The block is the cache's own figure, not the
/// store's: it holds its period even if the store is back sooner (the
/// request let through was charged nowhere), until a refund, a reset, an
/// unblock or [`BlockList::clear`]. A key not known (never seen at its
/// limit, or a period past it, or dropped for the bound) is left to the
/// store-error behaviour.
///
/// For this, and for refusals to stand at all while a breaker is open,
/// the cache must be asked before anything that fails in its place: put
/// it **outermost**, `BlockCache<Breaker<Timeout<S>>>`, around a
/// [`Fallback`](crate::Fallback) too. A breaker that is open answers at
/// once without asking what is inside it, so
/// `Breaker<Timeout<BlockCache<S>>>` fails open for every key during the
/// outage; the Redis store's own block cache sits inside the store, and
/// so inside any breaker around it: turn it off and put this one in front.
/// Inside a `Fallback` the first failure falls back and the block then
/// refuses the key without asking the fallback's store: stricter than the
/// fallback alone.
///
/// This reasoning holds while the store's state only grows between
/// decisions. It does not cover state changed behind the store's back: a
/// Redis `FLUSHALL` or a deleted key, or a fallback store (see
/// [`Fallback`](crate::Fallback)) whose refusal is remembered as any other
/// and outlives the primary's return. Such a key stays refused until the
/// remembered retry time, no longer; [`BlockList::clear`] forgets
/// everything at once.
///
/// The figures are the store's: an entry answers only until the first
/// moment any of them would change (the retry time, or a limit's next
/// replenishment if sooner: a unit of a cost-3 refusal, a limit of several
/// that did not refuse), counted down from the store's answer; then the
/// store is asked and its new refusal learned. A request costlier than the
/// remembered one is not answered (it would be told a retry time too
/// early for it); the store answers it, and a flood of one cost is
/// answered from memory. The conformance kit checks that a block cache
/// decides, figure for figure, as the store behind it.
///
/// # Bounded
///
/// At most [`max_entries`](BlockList::with_max_entries) entries (default
/// 100,000), in shards behind short-held locks, and as many keys known at
/// their limit (see "While the store fails") in a second map of the same
/// bound. An entry takes 249 bytes of its map (its key inline, the
/// decisions of up to two limits inline), a known key 241, and a map grows
/// only as entries come: about 50 MB of entries with 100,000 keys refused
/// at once, nothing with none. When a shard is full, entries past their retry time are swept
/// (at most once a second a shard), and if none, the entry closest to its
/// retry time of a small sample makes room. A flood of distinct refused
/// keys therefore costs at most the bound; an entry lost to it costs one
/// call to the store. With no entry at all (no key refused, the usual
/// case) a check reads one atomic and takes no lock.
///
/// A std map rather than moka (a dependency of the `quotas` feature only):
/// an entry's lifetime is known exactly when it is made, so expiry on read
/// and a sweep when full do all an eviction policy would; the hit path is
/// one lock and one lookup by a 64-bit fingerprint, comparing the stored
/// key without cloning it; and the crate's default features stay free of a
/// cache crate.
///
/// # Observability
///
/// With the `metrics` feature, each request answered from the cache counts
/// `tollgate_block_cache_hits_total{limits}` (the policy's
/// [`label`](crate::Policy::label)). The layer counts the refusal itself
/// as it counts any other (`tollgate_decisions_total{decision="limited"}`).
///
/// The Redis store has one built in (on by default, see
/// `RedisStoreBuilder::block_cache`); put this one in front of any other
/// store that makes a round trip, or of a Redis store whose own is off,
/// to choose the bound or the clock, or to stand in front of a breaker
/// (see "While the store fails").
///
/// ```
/// use tollgate_store::BlockCache;
/// use tollgate::RateLimitLayer;
/// use tollgate_store::MemoryStore;
/// use tollgate_core::Quota;
///
/// # let slow_store = MemoryStore::new(); // a store that makes round trips
/// let store = BlockCache::new(slow_store).max_entries(10_000);
/// assert_eq!(store.block_list().capacity(), 10_000);
/// let layer = RateLimitLayer::builder()
///     .quota("api", Quota::per_minute(100))
///     .store(store)
///     .build();
/// # let _ = layer;
/// ```
#[derive(Clone, Debug)]
pub struct BlockCache<S, C = MonotonicClock> {
    inner: S,
    blocked: BlockList,
    clock: C,
}

impl<S> BlockCache<S> {
    /// `inner`, behind a block cache of [`DEFAULT_MAX_ENTRIES`](crate::DEFAULT_MAX_ENTRIES) entries on
    /// the monotonic clock.
    pub fn new(inner: S) -> Self {
        crate::set_up_default_clock();
        BlockCache {
            inner,
            blocked: BlockList::new(),
            clock: MonotonicClock,
        }
    }
}

impl<S, C> BlockCache<S, C> {
    /// Remembers at most `max_entries` refusals (a fresh, empty list; see
    /// [`BlockList::with_max_entries`]).
    pub fn max_entries(self, max_entries: usize) -> Self {
        self.with_block_list(BlockList::with_max_entries(max_entries))
    }

    /// Remembers refusals in `blocked`, which may be shared (with another
    /// cache, or kept to [`clear`](BlockList::clear) it).
    pub fn with_block_list(self, blocked: BlockList) -> Self {
        BlockCache { blocked, ..self }
    }

    /// Measures retry times on `clock` (a
    /// [`ManualClock`](tollgate_core::ManualClock) in tests; the same one
    /// as the store behind, when it has one).
    pub fn clock<C2: Clock>(self, clock: C2) -> BlockCache<S, C2> {
        BlockCache {
            inner: self.inner,
            blocked: self.blocked,
            clock,
        }
    }

    /// What the cache remembers.
    pub fn block_list(&self) -> &BlockList {
        &self.blocked
    }

    /// The store behind.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

pin_project! {
    /// The future of a [`BlockCache`] check that asked the store behind:
    /// its answer, learnt from when it comes.
    pub struct BlockCacheFuture<F, C = MonotonicClock> {
        #[pin]
        observed: Observed<F, Learn<C>>,
    }
}

/// What a pending check needs to learn from its answer.
struct Learn<C> {
    blocked: BlockList,
    clock: C,
    policy: Arc<Policy>,
    key: Key,
    cost: u32,
    sent: u64,
}

impl<C: Clock, E> Observer<E> for Learn<C> {
    type Error = E;

    /// A refusal is remembered until its retry time; a failure answers
    /// from what the block list knew of the key, if anything.
    fn observe(self, answer: Result<PolicyDecision, E>) -> Result<PolicyDecision, E> {
        let answered = self.clock.now();
        let Learn {
            blocked,
            policy,
            key,
            cost,
            sent,
            ..
        } = self;
        match answer {
            Ok(verdict) => {
                blocked.learn(&policy, &key, cost, sent, answered, &verdict);
                Ok(verdict)
            }
            Err(error) => blocked.failed(&policy, &key, cost, answered).ok_or(error),
        }
    }

    fn pass(error: E) -> E {
        error
    }
}

impl<F, C, E> Future for BlockCacheFuture<F, C>
where
    F: Future<Output = Result<PolicyDecision, E>>,
    C: Clock,
{
    type Output = Result<PolicyDecision, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().observed.poll(cx)
    }
}

impl<S, C> BlockCache<S, C>
where
    S: Store,
    C: Clock + Clone,
{
    /// The cached refusal, or `ask`'s answer, learnt from.
    #[inline]
    fn decide(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        ask: impl FnOnce(&S) -> StoreReply<S::Future, S::Error>,
    ) -> StoreReply<BlockCacheFuture<S::Future, C>, S::Error> {
        let sent = self.clock.now();
        if let Some(verdict) = self.blocked.lookup(policy, key, cost, sent) {
            return StoreReply::Ready(Ok(verdict));
        }
        match ask(&self.inner) {
            StoreReply::Ready(Ok(verdict)) => {
                // The clock is read again only for a refusal, the one
                // answer the list keeps.
                let answered = if verdict.merged().allowed() {
                    sent
                } else {
                    self.clock.now()
                };
                self.blocked
                    .learn(policy, key, cost, sent, answered, &verdict);
                StoreReply::Ready(Ok(verdict))
            }
            // A store that failed (an open breaker, at once): a key known
            // at its limit is refused, or let through once and blocked.
            StoreReply::Ready(Err(error)) => StoreReply::Ready(
                self.blocked
                    .failed(policy, key, cost, self.clock.now())
                    .ok_or(error),
            ),
            StoreReply::Pending(inner) => {
                let learn = Learn {
                    blocked: self.blocked.clone(),
                    clock: self.clock.clone(),
                    policy: policy.clone(),
                    key: key.clone(),
                    cost,
                    sent,
                };
                StoreReply::Pending(BlockCacheFuture {
                    observed: Observed::new(inner, learn),
                })
            }
        }
    }
}

impl<S, C> BlockCache<S, C>
where
    C: Clock + Clone,
{
    /// `reply` (a refund or a debit of the store behind), with the key's
    /// refusal forgotten now and again when it lands: given back (or
    /// charged) first, then forgotten, so that a refusal of a request sent
    /// in between, decided without the change, is not learned; forgotten
    /// now too, should the reply be dropped before it lands.
    fn forgetting(&self, reply: ChangeReply, policy: &Arc<Policy>, key: &Key) -> ChangeReply {
        self.blocked.forget(policy, key, self.clock.now());
        match reply {
            ChangeReply::Done => ChangeReply::Done,
            ChangeReply::Pending(landed) => {
                let (blocked, clock) = (self.blocked.clone(), self.clock.clone());
                let (policy, key) = (policy.clone(), key.clone());
                ChangeReply::Pending(Box::pin(async move {
                    let landed = landed.await;
                    blocked.forget(&policy, &key, clock.now());
                    landed
                }))
            }
        }
    }

    /// Forgets the key's refusal once the store behind has reset it: a
    /// refusal of a request sent before then is not learned afterwards.
    fn forget_after(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        let (blocked, clock) = (self.blocked.clone(), self.clock.clone());
        let (policy, key) = (policy.clone(), key.clone());
        crate::AdminFuture::new(async move {
            blocked.forget(&policy, &key, clock.now());
            Ok(())
        })
    }
}

impl<S, C> StoreWrapper for BlockCache<S, C>
where
    S: Store,
    C: Clock + Clone,
{
    type Inner = S;
    type Error = S::Error;
    type Future = BlockCacheFuture<S::Future, C>;

    fn inner(&self) -> &S {
        &self.inner
    }

    /// Charged to the store behind; the key's remembered refusal is
    /// forgotten: it stays true (a debit only makes the key stricter), but
    /// its retry time is too early now. The next refusal is learned with
    /// the debt's.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: crate::PolicyDebit) -> ChangeReply {
        let reply = self.inner.debit(policy, key, debit);
        self.forgetting(reply, policy, key)
    }

    /// Gives the charge back to the store behind, and forgets the key's
    /// remembered refusal, which the refund may have made untrue.
    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: crate::PolicyRefund) -> ChangeReply {
        let reply = self.inner.refund(policy, key, refund);
        self.forgetting(reply, policy, key)
    }

    /// A forwarded operation's answer teaches the cache nothing (a peek,
    /// of cost 0, is never answered by a cached refusal either: it might
    /// pass).
    fn relay(
        &self,
        _: &Arc<Policy>,
        _: &Key,
        reply: StoreReply<S::Future, S::Error>,
    ) -> StoreReply<Self::Future, Self::Error> {
        reply.map(
            |inner| BlockCacheFuture {
                observed: Observed::unobserved(inner),
            },
            |error| error,
        )
    }

    /// Resets the key in the store behind and forgets its remembered
    /// refusal, which no longer holds.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        let reset = self.inner.reset(policy, key);
        let forget = self.forget_after(policy, key);
        reset.and(forget)
    }

    /// Forgets the key's remembered refusal, and passes the call on.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        self.blocked.forget(policy, key, self.clock.now());
        self.inner.unblock(policy, key)
    }

    /// A cached refusal is answered at once, whatever `within`; otherwise
    /// the store behind is asked with the same `within`.
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use crate::policy::NamedLimit;
    use std::convert::Infallible;
    use std::fmt;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering;
    use tollgate_core::Decision;
    use tollgate_core::{Algorithm, ManualClock};

    const SECOND: u64 = 1_000_000_000;

    /// A memory store that answers later (a future, as a network store
    /// does) and counts the checks it is asked for.
    #[derive(Clone)]
    struct Remote {
        store: MemoryStore<ManualClock>,
        calls: Arc<AtomicUsize>,
    }

    impl Remote {
        fn calls(&self) -> usize {
            self.calls.load(Ordering::Relaxed)
        }
    }

    impl Store for Remote {
        type Error = Infallible;
        type Future = std::future::Ready<Result<PolicyDecision, Infallible>>;

        fn check(
            &self,
            policy: &Arc<Policy>,
            key: &Key,
            cost: u32,
        ) -> StoreReply<Self::Future, Infallible> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            StoreReply::Pending(std::future::ready(Ok(self
                .store
                .check_now(policy, key, cost))))
        }
    }

    /// A clock, a remote store on it, and a block cache in front.
    fn setup() -> (ManualClock, Remote, BlockCache<Remote, ManualClock>) {
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let remote = Remote {
            store: MemoryStore::builder().clock(clock.clone()).build(),
            calls: Arc::default(),
        };
        let cache = BlockCache::new(remote.clone()).clock(clock.clone());
        (clock, remote, cache)
    }

    fn policy(limits: &[(&str, &str, Algorithm)]) -> Arc<Policy> {
        Arc::new(Policy::new(
            limits
                .iter()
                .map(|(name, quota, algorithm)| {
                    NamedLimit::new(*name, quota.parse().unwrap()).with_algorithm(*algorithm)
                })
                .collect(),
        ))
    }

    fn ten_a_minute() -> Arc<Policy> {
        policy(&[("api", "10/min", Algorithm::Gcra)])
    }

    async fn decide<S: Store>(
        store: &S,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> PolicyDecision
    where
        S::Error: fmt::Debug,
    {
        match store.check(policy, key, cost) {
            StoreReply::Ready(answer) => answer.unwrap(),
            StoreReply::Pending(future) => future.await.unwrap(),
        }
    }

    /// Whether `store` answers at once (from the cache) with a refusal.
    fn refused_at_once<S: Store>(store: &S, policy: &Arc<Policy>, key: &Key, cost: u32) -> bool {
        matches!(
            store.check(policy, key, cost),
            StoreReply::Ready(Ok(verdict)) if !verdict.merged().allowed()
        )
    }

    #[tokio::test]
    async fn a_refused_key_is_refused_here_until_its_retry_time() {
        let (clock, remote, cache) = setup();
        let (policy, key) = (ten_a_minute(), Key::from("alice"));
        for _ in 0..10 {
            assert!(decide(&cache, &policy, &key, 1).await.merged().allowed());
        }
        let refusal = decide(&cache, &policy, &key, 1).await;
        assert!(!refusal.merged().allowed());
        assert_eq!(refusal.merged().retry_after(), Duration::from_secs(6));
        assert_eq!(remote.calls(), 11);
        assert_eq!(cache.block_list().len(), 1);
        // Up to 1 ns before the retry time: refused here, the store not asked.
        for _ in 0..1_000 {
            assert!(refused_at_once(&cache, &policy, &key, 1));
        }
        clock.advance(Duration::from_nanos(6 * SECOND - 1));
        assert!(refused_at_once(&cache, &policy, &key, 1));
        assert_eq!(remote.calls(), 11);
        // At the retry time the store is asked again, and admits.
        clock.advance(Duration::from_nanos(1));
        assert!(decide(&cache, &policy, &key, 1).await.merged().allowed());
        assert_eq!(remote.calls(), 12);
        assert!(cache.block_list().is_empty());
    }

    #[tokio::test]
    async fn a_cached_refusal_reads_as_the_store_would_read_it_later() {
        // GCRA, two limits: the store's own refusal 2.5 s later has the
        // same figures as the cached one, every time reduced by 2.5 s.
        let (clock, remote, cache) = setup();
        let policy = policy(&[
            ("minute", "10/min", Algorithm::Gcra),
            ("hour", "100/h", Algorithm::Gcra),
        ]);
        let key = Key::from("bob");
        for _ in 0..11 {
            decide(&cache, &policy, &key, 1).await;
        }
        clock.advance(Duration::from_millis(2_500));
        let cached = decide(&cache, &policy, &key, 1).await;
        assert_eq!(remote.calls(), 11);
        let fresh = remote.store.check_now(&policy, &key, 1);
        assert!(!fresh.merged().allowed());
        assert_eq!(cached, fresh);
        assert_eq!(cached.merged().retry_after(), Duration::from_millis(3_500));
        // The limit that allowed (the hour) is read 2.5 s on too.
        assert_eq!(
            cached.each()[1].reset_after(),
            Duration::from_secs(10 * 36) - Duration::from_millis(2_500)
        );
    }

    #[tokio::test]
    async fn an_entry_ends_a_retry_time_after_the_sending_and_counts_down_from_the_answer() {
        let (clock, remote, cache) = setup();
        let (policy, key) = (ten_a_minute(), Key::from("ken"));
        for _ in 0..10 {
            decide(&cache, &policy, &key, 1).await;
        }
        // Sent (and decided) now; its answer comes 100 ms later.
        let StoreReply::Pending(refusal) = cache.check(&policy, &key, 1) else {
            panic!("the remote store answers later");
        };
        clock.advance(Duration::from_millis(100));
        let refusal = refusal.await.unwrap();
        assert_eq!(refusal.merged().retry_after(), Duration::from_secs(6));
        // The cache cannot tell when in those 100 ms the store decided: its
        // times count down from the answer (never early), ...
        let cached = decide(&cache, &policy, &key, 1).await;
        assert_eq!(cached.merged().retry_after(), Duration::from_secs(6));
        // ... and it stops refusing 6 s after the sending (never late).
        clock.advance(Duration::from_nanos(6 * SECOND - 100_000_000 - 1));
        let last = decide(&cache, &policy, &key, 1).await;
        assert_eq!(last.merged().retry_after_nanos(), 100_000_001);
        assert_eq!(remote.calls(), 11);
        clock.advance(Duration::from_nanos(1));
        assert!(decide(&cache, &policy, &key, 1).await.merged().allowed());
        assert_eq!(remote.calls(), 12);
    }

    /// A store that refuses from memory, or, when `down`, fails late (as a
    /// Redis call that missed its deadline does); it keeps the `within`
    /// it was last given.
    #[derive(Clone)]
    struct Flaky {
        store: MemoryStore<ManualClock>,
        down: Arc<std::sync::atomic::AtomicBool>,
        within: Arc<Mutex<Option<Duration>>>,
    }

    impl Store for Flaky {
        type Error = std::io::Error;
        type Future = std::future::Ready<Result<PolicyDecision, std::io::Error>>;

        fn check(
            &self,
            policy: &Arc<Policy>,
            key: &Key,
            cost: u32,
        ) -> StoreReply<Self::Future, Self::Error> {
            let answer = if self.down.load(Ordering::Relaxed) {
                Err(std::io::Error::other("late: charged nothing"))
            } else {
                Ok(self.store.check_now(policy, key, cost))
            };
            StoreReply::Pending(std::future::ready(answer))
        }

        fn check_within(
            &self,
            policy: &Arc<Policy>,
            key: &Key,
            cost: u32,
            within: Duration,
        ) -> StoreReply<Self::Future, Self::Error> {
            *self.within.lock().unwrap() = Some(within);
            self.check(policy, key, cost)
        }
    }

    #[tokio::test]
    async fn while_the_store_fails_known_refusals_stand_and_failures_teach_nothing() {
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let flaky = Flaky {
            store: MemoryStore::builder().clock(clock.clone()).build(),
            down: Arc::default(),
            within: Arc::default(),
        };
        let cache = BlockCache::new(flaky.clone()).clock(clock.clone());
        let policy = policy(&[("api", "1/min", Algorithm::Gcra)]);
        let (known, other) = (Key::from("mallory"), Key::from("niaj"));
        let within = Duration::from_millis(100);
        for _ in 0..2 {
            let StoreReply::Pending(answer) =
                Store::check_within(&cache, &policy, &known, 1, within)
            else {
                panic!("the store answers later");
            };
            answer.await.unwrap();
        }
        // The store is asked with the caller's `within`.
        assert_eq!(*flaky.within.lock().unwrap(), Some(within));
        flaky.down.store(true, Ordering::Relaxed);
        // A refusal it knows is answered at once, whatever `within`.
        assert!(matches!(
            Store::check_within(&cache, &policy, &known, 1, Duration::ZERO),
            StoreReply::Ready(Ok(verdict)) if !verdict.merged().allowed()
        ));
        // A failure (an error, a late answer) teaches the cache nothing.
        let StoreReply::Pending(answer) = Store::check_within(&cache, &policy, &other, 1, within)
        else {
            panic!("an unknown key goes to the store");
        };
        assert!(answer.await.is_err());
        assert_eq!(cache.block_list().len(), 1);
    }

    /// A clock, a [`Flaky`] store on it (up), a block cache in front.
    fn flaky_setup() -> (ManualClock, Flaky, BlockCache<Flaky, ManualClock>) {
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let flaky = Flaky {
            store: MemoryStore::builder().clock(clock.clone()).build(),
            down: Arc::default(),
            within: Arc::default(),
        };
        let cache = BlockCache::new(flaky.clone()).clock(clock.clone());
        (clock, flaky, cache)
    }

    /// What a check through the cache came to: the store's (or the
    /// cache's) verdict, or the store's failure, which a fail-open layer
    /// lets through.
    #[derive(Debug, PartialEq)]
    enum Came {
        Admitted,
        Refused(Duration),
        Failed,
    }

    async fn came<S: Store>(store: &S, policy: &Arc<Policy>, key: &Key, cost: u32) -> Came {
        let answer = match store.check(policy, key, cost) {
            StoreReply::Ready(answer) => answer,
            StoreReply::Pending(future) => future.await,
        };
        match answer {
            Ok(verdict) if verdict.merged().allowed() => Came::Admitted,
            Ok(verdict) => Came::Refused(verdict.merged().retry_after()),
            Err(_) => Came::Failed,
        }
    }

    #[tokio::test]
    async fn while_the_store_fails_a_key_refused_gets_through_once_a_period() {
        let (clock, flaky, cache) = flaky_setup();
        let policy = policy(&[("api", "3/min", Algorithm::Gcra)]);
        let (victim, other) = (Key::from("victim"), Key::from("other"));
        for _ in 0..3 {
            assert_eq!(came(&cache, &policy, &victim, 1).await, Came::Admitted);
        }
        let retry = Duration::from_secs(20);
        assert_eq!(
            came(&cache, &policy, &victim, 1).await,
            Came::Refused(retry)
        );
        flaky.down.store(true, Ordering::Relaxed);
        // The store's refusal stands until its retry time.
        assert_eq!(
            came(&cache, &policy, &victim, 1).await,
            Came::Refused(retry)
        );
        // A costlier request, which the cache leaves to the store, fails:
        // let through once, and the key blocked for its period, any cost.
        assert_eq!(came(&cache, &policy, &victim, 2).await, Came::Failed);
        for cost in [1, 2, 3] {
            assert_eq!(
                came(&cache, &policy, &victim, cost).await,
                Came::Refused(Duration::from_secs(60))
            );
        }
        // A key never refused: its failures stand (fail open decides).
        for _ in 0..5 {
            assert_eq!(came(&cache, &policy, &other, 1).await, Came::Failed);
        }
        // A request every second for ten minutes: let through once a
        // period (a minute) as each block ends, refused between.
        let mut through = Vec::new();
        for second in 0..600 {
            match came(&cache, &policy, &victim, 1).await {
                Came::Failed => through.push(second),
                Came::Refused(after) => assert!(after <= Duration::from_secs(60)),
                Came::Admitted => panic!("the store is down"),
            }
            // Every cost is refused during the block.
            if through.last().is_some_and(|at| *at < second) {
                assert!(matches!(
                    came(&cache, &policy, &victim, 5).await,
                    Came::Refused(_)
                ));
            }
            clock.advance(Duration::from_secs(1));
        }
        assert_eq!(through, (1..10).map(|n| n * 60).collect::<Vec<_>>());
        // Ten minutes on, the tenth block ends: through once more, then
        // the block counts down its minute.
        assert_eq!(came(&cache, &policy, &victim, 1).await, Came::Failed);
        clock.advance(Duration::from_millis(500));
        assert_eq!(
            came(&cache, &policy, &victim, 1).await,
            Came::Refused(Duration::from_millis(59_500))
        );
        // The store back: the block of the cache's own holds to its end,
        // then the store decides again (it charged the key 10 min ago).
        flaky.down.store(false, Ordering::Relaxed);
        assert!(matches!(
            came(&cache, &policy, &victim, 1).await,
            Came::Refused(_)
        ));
        clock.advance(Duration::from_millis(59_500));
        assert_eq!(came(&cache, &policy, &victim, 1).await, Came::Admitted);
    }

    #[tokio::test]
    async fn requests_sent_before_the_block_that_fail_after_it_are_refused() {
        let (clock, flaky, cache) = flaky_setup();
        let policy = policy(&[("api", "1/min", Algorithm::Gcra)]);
        let key = Key::from("victim");
        assert_eq!(came(&cache, &policy, &key, 1).await, Came::Admitted);
        assert!(matches!(
            came(&cache, &policy, &key, 1).await,
            Came::Refused(_)
        ));
        clock.advance(Duration::from_secs(60));
        flaky.down.store(true, Ordering::Relaxed);
        // Ten requests out at once, past the retry time: all go to the
        // store, all fail. One gets through; the others find the block.
        let pending: Vec<_> = (0..10)
            .map(|_| match cache.check(&policy, &key, 1) {
                StoreReply::Pending(future) => future,
                StoreReply::Ready(_) => panic!("past its retry time the key goes to the store"),
            })
            .collect();
        let mut failed = 0;
        for future in pending {
            match future.await {
                Err(_) => failed += 1,
                Ok(verdict) => {
                    assert!(!verdict.merged().allowed());
                    assert_eq!(verdict.merged().retry_after(), Duration::from_secs(60));
                }
            }
        }
        assert_eq!(failed, 1);
    }

    #[tokio::test]
    async fn an_admission_that_spends_a_limit_makes_the_key_known_and_one_with_room_forgets_it() {
        let (clock, flaky, cache) = flaky_setup();
        let policy = policy(&[("api", "2/min", Algorithm::FixedWindow)]);
        let (spent, roomy) = (Key::from("spent"), Key::from("roomy"));
        clock.advance(Duration::from_secs(60 - 1_700_000_000 % 60));
        for _ in 0..2 {
            assert_eq!(came(&cache, &policy, &spent, 1).await, Came::Admitted);
        }
        assert_eq!(came(&cache, &policy, &roomy, 1).await, Came::Admitted);
        flaky.down.store(true, Ordering::Relaxed);
        // Never refused, but left with nothing: through once, then held.
        assert_eq!(came(&cache, &policy, &spent, 1).await, Came::Failed);
        assert_eq!(
            came(&cache, &policy, &spent, 1).await,
            Came::Refused(Duration::from_secs(60))
        );
        assert_eq!(came(&cache, &policy, &roomy, 1).await, Came::Failed);
        assert_eq!(came(&cache, &policy, &roomy, 1).await, Came::Failed);
        // A new window: the store gives the key room again, and forgets it.
        clock.advance(Duration::from_secs(60));
        flaky.down.store(false, Ordering::Relaxed);
        assert_eq!(came(&cache, &policy, &spent, 1).await, Came::Admitted);
        flaky.down.store(true, Ordering::Relaxed);
        for _ in 0..3 {
            assert_eq!(came(&cache, &policy, &spent, 1).await, Came::Failed);
        }
    }

    #[tokio::test]
    async fn a_key_is_known_for_a_period_past_its_refusal_and_forgotten_when_unblocked() {
        let (clock, flaky, cache) = flaky_setup();
        let policy = policy(&[("api", "1/min", Algorithm::Gcra)]);
        let (quiet, unblocked) = (Key::from("quiet"), Key::from("unblocked"));
        for key in [&quiet, &unblocked] {
            assert_eq!(came(&cache, &policy, key, 1).await, Came::Admitted);
            assert!(matches!(
                came(&cache, &policy, key, 1).await,
                Came::Refused(_)
            ));
        }
        flaky.down.store(true, Ordering::Relaxed);
        Store::unblock(&cache, &policy, &unblocked).await.unwrap();
        assert_eq!(came(&cache, &policy, &unblocked, 1).await, Came::Failed);
        assert_eq!(came(&cache, &policy, &unblocked, 1).await, Came::Failed);
        // A reset and a cleared list forget a key as an unblock does.
        for forget in 0..2 {
            let key = Key::from(format!("forgotten-{forget}"));
            flaky.down.store(false, Ordering::Relaxed);
            assert_eq!(came(&cache, &policy, &key, 1).await, Came::Admitted);
            flaky.down.store(true, Ordering::Relaxed);
            assert_eq!(came(&cache, &policy, &key, 1).await, Came::Failed);
            assert!(matches!(
                came(&cache, &policy, &key, 1).await,
                Came::Refused(_)
            ));
            if forget == 0 {
                // The store behind is down: its reset fails, the cache
                // forgets all the same.
                let _ = Store::reset(&cache, &policy, &key).await;
            } else {
                cache.block_list().clear();
            }
            assert_eq!(came(&cache, &policy, &key, 1).await, Came::Failed);
            assert_eq!(came(&cache, &policy, &key, 1).await, Came::Failed);
        }
        // Refused for 60 s, known for a minute more: quiet until then, it
        // is a key like any other.
        clock.advance(Duration::from_secs(120));
        assert_eq!(came(&cache, &policy, &quiet, 1).await, Came::Failed);
        assert_eq!(came(&cache, &policy, &quiet, 1).await, Came::Failed);
        assert!(cache.block_list().is_empty());
    }

    #[tokio::test]
    async fn inside_a_fallback_the_first_failure_falls_back_and_the_block_then_refuses() {
        let (clock, flaky, cache) = flaky_setup();
        let local = MemoryStore::builder().clock(clock.clone()).build();
        // A fallback that remembers no answer: its secondary starts from
        // a fresh limit.
        let store = crate::Fallback::new(cache, local).remembering(0);
        let policy = policy(&[("api", "3/min", Algorithm::Gcra)]);
        let key = Key::from("victim");
        for _ in 0..3 {
            assert_eq!(came(&store, &policy, &key, 1).await, Came::Admitted);
        }
        flaky.down.store(true, Ordering::Relaxed);
        // Left with nothing by the store: its first failure is the
        // fallback's to decide (admitted there), then the block refuses.
        assert_eq!(came(&store, &policy, &key, 1).await, Came::Admitted);
        assert_eq!(
            came(&store, &policy, &key, 1).await,
            Came::Refused(Duration::from_secs(60))
        );
    }

    #[tokio::test]
    async fn a_fallback_that_knew_the_key_spent_refuses_it_from_the_first_failure() {
        let (clock, flaky, cache) = flaky_setup();
        let local = MemoryStore::builder().clock(clock.clone()).build();
        let store = crate::Fallback::new(cache, local);
        let policy = policy(&[("api", "3/min", Algorithm::Gcra)]);
        let key = Key::from("victim");
        for _ in 0..3 {
            assert_eq!(came(&store, &policy, &key, 1).await, Came::Admitted);
        }
        flaky.down.store(true, Ordering::Relaxed);
        // The fallback starts from the store's last answer (nothing left):
        // refused there, until a unit comes back (20 s at 3/min); then
        // the block refuses, as after a fallback's admission.
        let first = came(&store, &policy, &key, 1).await;
        assert_eq!(first, Came::Refused(Duration::from_secs(20)));
        assert_eq!(
            came(&store, &policy, &key, 1).await,
            Came::Refused(Duration::from_secs(60))
        );
    }

    #[tokio::test]
    async fn a_cheaper_request_asks_the_store_and_its_admission_clears_the_entry() {
        let (_clock, remote, cache) = setup();
        let (policy, key) = (ten_a_minute(), Key::from("carol"));
        for _ in 0..8 {
            decide(&cache, &policy, &key, 1).await;
        }
        // 2 left: a cost of 3 is refused and remembered.
        assert!(!decide(&cache, &policy, &key, 3).await.merged().allowed());
        assert_eq!(remote.calls(), 9);
        assert!(refused_at_once(&cache, &policy, &key, 3));
        assert_eq!(remote.calls(), 9);
        // A costlier request is refused too, but later than the remembered
        // retry time: the store answers it, with its own retry time.
        assert!(!refused_at_once(&cache, &policy, &key, 5));
        assert_eq!(remote.calls(), 10);
        // A cost of 2 might pass: the store is asked, and admits it.
        let StoreReply::Pending(asked) = cache.check(&policy, &key, 2) else {
            panic!("a cheaper request is the store's to decide");
        };
        assert_eq!(remote.calls(), 11);
        assert!(asked.await.unwrap().merged().allowed());
        // That admission changed the key: the refusal is forgotten.
        assert!(cache.block_list().is_empty());
        assert!(matches!(
            cache.check(&policy, &key, 3),
            StoreReply::Pending(_)
        ));
    }

    #[tokio::test]
    async fn a_peek_of_cost_zero_leaves_the_refusal_standing() {
        let (_clock, _remote, cache) = setup();
        let (policy, key) = (ten_a_minute(), Key::from("dan"));
        for _ in 0..11 {
            decide(&cache, &policy, &key, 1).await;
        }
        decide(&cache, &policy, &key, 0).await;
        assert!(refused_at_once(&cache, &policy, &key, 1));
    }

    #[tokio::test]
    async fn a_request_that_can_never_pass_is_not_remembered() {
        let (_clock, remote, cache) = setup();
        let (policy, key) = (ten_a_minute(), Key::from("eve"));
        for _ in 0..3 {
            let verdict = decide(&cache, &policy, &key, 11).await;
            assert_eq!(verdict.merged().retry_after(), Decision::NEVER);
        }
        assert_eq!(remote.calls(), 3);
        assert!(cache.block_list().is_empty());
    }

    #[tokio::test]
    async fn policies_and_keys_are_kept_apart() {
        let (_clock, remote, cache) = setup();
        let (a, b) = (ten_a_minute(), ten_a_minute());
        let key = Key::from("frank");
        for _ in 0..11 {
            decide(&cache, &a, &key, 1).await;
        }
        assert!(refused_at_once(&cache, &a, &key, 1));
        let calls = remote.calls();
        assert!(decide(&cache, &b, &key, 1).await.merged().allowed());
        assert!(
            decide(&cache, &a, &Key::from("grace"), 1)
                .await
                .merged()
                .allowed()
        );
        assert_eq!(remote.calls(), calls + 2);
    }

    #[tokio::test]
    async fn a_refusal_in_delay_mode_is_remembered_too() {
        // A leaky bucket holds admitted requests until their slot; once its
        // queue is full, a request would wait too long and is refused
        // (`allowed` false, as any refusal) until a slot is within reach.
        let (clock, remote, cache) = setup();
        let policy = policy(&[("shape", "1/s", Algorithm::LeakyBucket)]);
        let key = Key::from("heidi");
        let mut refusal = None;
        for _ in 0..10 {
            let verdict = decide(&cache, &policy, &key, 1).await;
            if !verdict.merged().allowed() {
                refusal = Some(verdict);
                break;
            }
        }
        let refusal = refusal.expect("the bucket refuses once full");
        let retry = refusal.merged().retry_after();
        assert!(retry > Duration::ZERO && retry < Decision::NEVER);
        let calls = remote.calls();
        assert!(refused_at_once(&cache, &policy, &key, 1));
        clock.advance(retry);
        let verdict = decide(&cache, &policy, &key, 1).await;
        assert!(verdict.merged().allowed());
        assert_eq!(remote.calls(), calls + 1);
    }

    #[test]
    fn a_flood_of_refused_keys_stays_within_the_bound() {
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let cache = BlockCache::new(store).clock(clock.clone()).max_entries(100);
        assert!(cache.block_list().capacity() <= 100);
        let policy = policy(&[("api", "1/min", Algorithm::Gcra)]);
        let refuse = |i: u64| {
            let key = Key::from(i);
            let _ = cache.check(&policy, &key, 1);
            let _ = cache.check(&policy, &key, 1);
        };
        for i in 0..10_000 {
            refuse(i);
            assert!(cache.block_list().len() <= cache.block_list().capacity());
        }
        assert!(cache.block_list().len() >= cache.block_list().capacity() / 2);
        // Past every retry time, a full list sweeps its expired entries:
        // the new refusals find room without evicting one another.
        clock.advance(Duration::from_secs(61));
        for i in 10_000..10_050 {
            refuse(i);
        }
        assert!(cache.block_list().len() <= cache.block_list().capacity());
        let recent = (10_000..10_050)
            .filter(|&i| refused_at_once(&cache, &policy, &Key::from(i), 1))
            .count();
        assert_eq!(recent, 50);
    }

    #[test]
    fn expired_entries_go_when_read_and_a_list_of_zero_remembers_nothing() {
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let cache = BlockCache::new(store.clone()).clock(clock.clone());
        let policy = policy(&[("api", "1/min", Algorithm::Gcra)]);
        let key = Key::from("ivan");
        let _ = cache.check(&policy, &key, 1);
        assert!(refused_at_once(&cache, &policy, &key, 1));
        assert_eq!(cache.block_list().len(), 1);
        clock.advance(Duration::from_secs(60));
        // Read at its retry time: dropped, and the store (which admits) asked.
        assert!(matches!(
            cache.check(&policy, &key, 1),
            StoreReply::Ready(Ok(verdict)) if verdict.merged().allowed()
        ));
        assert!(cache.block_list().is_empty());

        let none = BlockCache::new(store).clock(clock.clone()).max_entries(0);
        assert_eq!(none.block_list().capacity(), 0);
        let _ = none.check(&policy, &key, 1);
        let _ = none.check(&policy, &key, 1);
        assert!(none.block_list().is_empty());
    }

    #[test]
    fn clear_forgets_every_refusal_and_clones_share_them() {
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let cache = BlockCache::new(store).clock(clock);
        let clone = cache.clone();
        let policy = policy(&[("api", "1/min", Algorithm::Gcra)]);
        let key = Key::from("judy");
        let _ = cache.check(&policy, &key, 1);
        let _ = cache.check(&policy, &key, 1);
        assert_eq!(clone.block_list().len(), 1);
        clone.block_list().clear();
        assert!(cache.block_list().is_empty());
    }
}
