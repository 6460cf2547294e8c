//! [`Resilient`]: a store and the wrappers that keep it working when it
//! fails, assembled in the one order that works, which the types keep.

use super::block_cache::BlockCache;
use super::breaker::Breaker;
use super::fallback::Fallback;
use super::penalty::{Penalty, PenaltyBox};
use super::timeout::Timeout;
use std::marker::PhantomData;
use std::time::Duration;

/// Assembles a store with the wrappers that keep it working when it fails,
/// from the inside out, in the one order in which each does its work:
///
/// 1. [`timeout`](Self::timeout): a call given up after a bound;
/// 2. [`breaker`](Self::breaker): a store that keeps failing (timeouts
///    included) is not asked for a cool-down;
/// 3. [`fallback`](Self::fallback): a second store decides while the first
///    fails (the breaker's quick failures included);
/// 4. [`block_cache`](Self::block_cache): keys refused stay refused until
///    their retry time, asked first whatever the stores behind do;
/// 5. [`penalty_box`](Self::penalty_box): keys that keep being refused
///    (by the block cache too) are blocked for a while.
///
/// Each step is optional; a step can only be followed by the steps after
/// it, so an order that would silence a wrapper does not compile (a block
/// cache inside a breaker would go unasked for the whole of an outage; a
/// timeout outside a fallback would answer before the second store could).
/// [`build`](Self::build) gives the store, its type the nesting: no boxing,
/// no cost beyond the wrappers chosen.
///
/// ```
/// use std::time::Duration;
/// use tollgate_store::{
///     BlockCache, Breaker, Fallback, MemoryStore, Penalty, PenaltyBox, Resilient, Timeout,
/// };
///
/// # let shared = MemoryStore::new(); // a Redis or compare-and-swap store
/// let penalty = Penalty::new(5, Duration::from_secs(60), Duration::from_secs(600));
/// let store: PenaltyBox<BlockCache<Fallback<Breaker<Timeout<MemoryStore>>, MemoryStore>>> =
///     Resilient::over(shared)
///         .timeout(Duration::from_millis(50))
///         .breaker_with(|breaker| breaker.failures(3))
///         .fallback(MemoryStore::new())
///         .block_cache()
///         .penalty_box(penalty)
///         .build();
/// ```
///
/// Out of order, it does not compile:
///
/// ```compile_fail
/// use std::time::Duration;
/// use tollgate_store::{MemoryStore, Resilient};
///
/// // A breaker outside the block cache would keep the cache unasked
/// // while it is open.
/// let store = Resilient::over(MemoryStore::new()).block_cache().breaker().build();
/// ```
///
/// ```compile_fail
/// use std::time::Duration;
/// use tollgate_store::{MemoryStore, Resilient};
///
/// // A timeout outside the fallback would give up before the second
/// // store answered.
/// let store = Resilient::over(MemoryStore::new())
///     .fallback(MemoryStore::new())
///     .timeout(Duration::from_millis(50))
///     .build();
/// ```
#[derive(Clone, Debug)]
#[must_use = "a store is assembled by `build`"]
pub struct Resilient<S, At = step::Bare> {
    store: S,
    at: PhantomData<At>,
}

/// Where an assembly stands: the last step taken, which says the steps
/// that may still follow. Sealed: only this module's steps exist.
pub mod step {
    /// The store alone.
    #[derive(Clone, Copy, Debug)]
    pub struct Bare;
    /// Behind a timeout.
    #[derive(Clone, Copy, Debug)]
    pub struct Timed;
    /// Behind a breaker.
    #[derive(Clone, Copy, Debug)]
    pub struct Guarded;
    /// The primary of a fallback.
    #[derive(Clone, Copy, Debug)]
    pub struct Backed;
    /// Behind a block cache.
    #[derive(Clone, Copy, Debug)]
    pub struct Cached;
    /// Behind a penalty box: the assembly is whole.
    #[derive(Clone, Copy, Debug)]
    pub struct Penalized;

    mod sealed {
        pub trait Sealed {}
        impl Sealed for super::Bare {}
        impl Sealed for super::Timed {}
        impl Sealed for super::Guarded {}
        impl Sealed for super::Backed {}
        impl Sealed for super::Cached {}
    }

    /// The steps a timeout may follow: none but the store.
    pub trait BeforeTimeout: sealed::Sealed {}
    impl BeforeTimeout for Bare {}

    /// The steps a breaker may follow.
    pub trait BeforeBreaker: sealed::Sealed {}
    impl BeforeBreaker for Bare {}
    impl BeforeBreaker for Timed {}

    /// The steps a fallback may follow.
    pub trait BeforeFallback: sealed::Sealed {}
    impl BeforeFallback for Bare {}
    impl BeforeFallback for Timed {}
    impl BeforeFallback for Guarded {}

    /// The steps a block cache may follow.
    pub trait BeforeBlockCache: sealed::Sealed {}
    impl BeforeBlockCache for Bare {}
    impl BeforeBlockCache for Timed {}
    impl BeforeBlockCache for Guarded {}
    impl BeforeBlockCache for Backed {}

    /// The steps a penalty box may follow.
    pub trait BeforePenaltyBox: sealed::Sealed {}
    impl BeforePenaltyBox for Bare {}
    impl BeforePenaltyBox for Timed {}
    impl BeforePenaltyBox for Guarded {}
    impl BeforePenaltyBox for Backed {}
    impl BeforePenaltyBox for Cached {}
}

impl<S> Resilient<S> {
    /// Starts from `store`, the one that keeps the counts (a Redis store,
    /// a compare-and-swap store, local-first, or a store of your own).
    pub fn over(store: S) -> Self {
        Resilient::at(store)
    }
}

impl<S, At> Resilient<S, At> {
    fn at(store: S) -> Self {
        Resilient {
            store,
            at: PhantomData,
        }
    }

    /// The store assembled.
    pub fn build(self) -> S {
        self.store
    }
}

impl<S, At: step::BeforeTimeout> Resilient<S, At> {
    /// Gives up on a call after `timeout` ([`Timeout`]). Keep it below the
    /// layer's `store_timeout`, so that a fallback answers before the
    /// layer stops waiting.
    pub fn timeout(self, timeout: Duration) -> Resilient<Timeout<S>, step::Timed> {
        Resilient::at(Timeout::new(self.store, timeout))
    }
}

impl<S, At: step::BeforeBreaker> Resilient<S, At> {
    /// Stops asking a store that keeps failing, for a cool-down
    /// ([`Breaker`], with its defaults).
    pub fn breaker(self) -> Resilient<Breaker<S>, step::Guarded> {
        self.breaker_with(|breaker| breaker)
    }

    /// [`breaker`](Self::breaker), set up by `setup` (its thresholds:
    /// [`Breaker::failures`], [`Breaker::cool_down`], …).
    pub fn breaker_with(
        self,
        setup: impl FnOnce(Breaker<S>) -> Breaker<S>,
    ) -> Resilient<Breaker<S>, step::Guarded> {
        Resilient::at(setup(Breaker::new(self.store)))
    }
}

impl<S, At: step::BeforeFallback> Resilient<S, At> {
    /// Decides with `secondary` while the store fails ([`Fallback`]); for
    /// a store shared by several instances, a
    /// [`Split`](crate::Split) of a memory store.
    pub fn fallback<T>(self, secondary: T) -> Resilient<Fallback<S, T>, step::Backed> {
        self.fallback_with(secondary, |fallback| fallback)
    }

    /// [`fallback`](Self::fallback), set up by `setup`
    /// ([`Fallback::remembering`]).
    pub fn fallback_with<T>(
        self,
        secondary: T,
        setup: impl FnOnce(Fallback<S, T>) -> Fallback<S, T>,
    ) -> Resilient<Fallback<S, T>, step::Backed> {
        Resilient::at(setup(Fallback::new(self.store, secondary)))
    }
}

impl<S, At: step::BeforeBlockCache> Resilient<S, At> {
    /// Refuses the keys the stores behind refused until their retry time,
    /// without a call, and keeps keys known at their limit refused while
    /// they fail ([`BlockCache`]).
    pub fn block_cache(self) -> Resilient<BlockCache<S>, step::Cached> {
        self.block_cache_with(|cache| cache)
    }

    /// [`block_cache`](Self::block_cache), set up by `setup`
    /// ([`BlockCache::max_entries`], [`BlockCache::with_block_list`]).
    pub fn block_cache_with(
        self,
        setup: impl FnOnce(BlockCache<S>) -> BlockCache<S>,
    ) -> Resilient<BlockCache<S>, step::Cached> {
        Resilient::at(setup(BlockCache::new(self.store)))
    }
}

impl<S, At: step::BeforePenaltyBox> Resilient<S, At> {
    /// Blocks the keys that keep being refused, as `penalty` says
    /// ([`PenaltyBox`]).
    pub fn penalty_box(self, penalty: Penalty) -> Resilient<PenaltyBox<S>, step::Penalized> {
        self.penalty_box_with(penalty, |penalty_box| penalty_box)
    }

    /// [`penalty_box`](Self::penalty_box), set up by `setup`
    /// ([`PenaltyBox::max_entries`]).
    pub fn penalty_box_with(
        self,
        penalty: Penalty,
        setup: impl FnOnce(PenaltyBox<S>) -> PenaltyBox<S>,
    ) -> Resilient<PenaltyBox<S>, step::Penalized> {
        Resilient::at(setup(PenaltyBox::new(self.store, penalty)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Key, MemoryStore, NamedLimit, Policy, Store};
    use std::sync::Arc;

    #[test]
    fn every_subset_of_steps_nests_in_the_one_order() {
        let memory = MemoryStore::new;
        let d = Duration::from_millis(50);
        let penalty = Penalty::new(2, Duration::from_secs(60), Duration::from_secs(60));
        let _: Breaker<Timeout<MemoryStore>> =
            Resilient::over(memory()).timeout(d).breaker().build();
        let _: BlockCache<Breaker<Timeout<MemoryStore>>> = Resilient::over(memory())
            .timeout(d)
            .breaker()
            .block_cache()
            .build();
        let _: BlockCache<Fallback<Timeout<MemoryStore>, MemoryStore>> = Resilient::over(memory())
            .timeout(d)
            .fallback(memory())
            .block_cache()
            .build();
        let _: PenaltyBox<MemoryStore> = Resilient::over(memory()).penalty_box(penalty).build();
        let _: PenaltyBox<Fallback<Breaker<MemoryStore>, MemoryStore>> = Resilient::over(memory())
            .breaker()
            .fallback(memory())
            .penalty_box(penalty)
            .build();
        let _: MemoryStore = Resilient::over(memory()).build();
    }

    #[test]
    fn the_setups_reach_the_wrappers() {
        let store = Resilient::over(MemoryStore::new())
            .breaker_with(|breaker| breaker.failures(2))
            .fallback_with(MemoryStore::new(), |fallback| fallback.remembering(0))
            .block_cache_with(|cache| cache.max_entries(64))
            .build();
        // The capacity a list of 64 has (its shards round it), not the
        // default's.
        let expected = crate::BlockList::with_max_entries(64).capacity();
        assert_eq!(store.block_list().capacity(), expected);
        assert_ne!(expected, crate::BlockList::new().capacity());
    }

    #[tokio::test]
    async fn an_assembled_store_decides_as_its_store() {
        let policy = Arc::new(Policy::new(vec![NamedLimit::new(
            "api",
            "2/min".parse().unwrap(),
        )]));
        let penalty = Penalty::new(3, Duration::from_secs(60), Duration::from_secs(600));
        let store = Resilient::over(MemoryStore::new())
            .timeout(Duration::from_secs(1))
            .breaker()
            .fallback(MemoryStore::new())
            .block_cache()
            .penalty_box(penalty)
            .build();
        let key = Key::from("alice");
        let mut admitted = 0;
        for _ in 0..5 {
            let verdict = store.check(&policy, &key, 1).resolve().await.unwrap();
            admitted += u32::from(verdict.merged().allowed());
        }
        assert_eq!(admitted, 2);
    }
}
