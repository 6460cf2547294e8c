//! [`Split`]: a store that decides each limit at its share, for the
//! instances that shared it elsewhere: the local fallback of a shared
//! store.

use crate::key::Key;
use crate::policy::{NamedLimit, Policy};
use crate::{AdminFuture, Presence, Share, Store, StoreReply, StoreWrapper};
use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tollgate_core::Quota;

/// A store in front of `S` that decides every limit at this instance's
/// share of it, `N` instances sharing the limits (asked at each call): the
/// secondary of a [`Fallback`](crate::Fallback) whose primary is shared,
/// so that while the shared store is away the instances split the limit
/// rather than each admitting all of it.
///
/// Each limit's quota `L` per period (and burst `B`) becomes this
/// instance's [part](Share::part) of it, at least 1: `⌊L / N⌋`, plus one
/// for the instances of rank below `L mod N` when the store counted the
/// instances and ranked them ([`Presence`]), so that `N` instances
/// together admit `L` per period over an outage (3 over 2: 2 and 1), and
/// at most `N × max(1, ⌊L / N⌋)` without ranks — as far as `N` is right.
/// `N` is the number of instances the shared store last counted (the
/// Redis store's [`presence`](https://docs.rs/tollgate-redis), the
/// compare-and-swap store's `CasStore::presence` (the `tollgate-cas` crate):
/// each instance says every second that it shares the store, and is
/// counted for 5 s after), or the operator's count
/// ([`Presence::expecting`]) until the store has counted; an instance
/// that started during the outage, or one that stopped just before it,
/// makes the split a little off; [`Split::fixed`] overrides it with a
/// number you know. Each limit keeps its algorithm; settings beyond the
/// algorithm and the quota (a sliding log's entry bound) take their
/// defaults. The headers report the split quota.
///
/// ```
/// use std::time::Duration;
/// use tollgate_store::MemoryStore;
/// use tollgate_store::{Fallback, Presence, Split, Timeout};
///
/// # let redis = MemoryStore::new(); // a RedisStore in practice
/// # let presence = Presence::expecting(2); // `redis.presence()` in practice
/// let store = Fallback::new(
///     Timeout::new(redis, Duration::from_millis(50)),
///     Split::presence(MemoryStore::new(), presence),
/// );
/// # let _ = store;
/// ```
#[derive(Clone)]
pub struct Split<S> {
    inner: S,
    share: Arc<dyn Fn() -> Share + Send + Sync>,
}

impl<S> std::fmt::Debug for Split<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Split")
            .field("share", &(self.share)())
            .finish_non_exhaustive()
    }
}

impl<S> Split<S> {
    /// `inner`, deciding each limit at `1 / instances()` of its quota
    /// (no rank: the remainder goes to nobody).
    pub fn new(inner: S, instances: impl Fn() -> u32 + Send + Sync + 'static) -> Self {
        Split::shared(inner, move || Share::of(instances()))
    }

    /// `inner`, deciding each limit at this instance's share of it as
    /// `presence` counts the instances and ranks this one.
    pub fn presence(inner: S, presence: Presence) -> Self {
        Split::shared(inner, move || presence.share())
    }

    /// `inner`, deciding each limit at the [`Share`] `share()` gives.
    pub fn shared(inner: S, share: impl Fn() -> Share + Send + Sync + 'static) -> Self {
        Split {
            inner,
            share: Arc::new(share),
        }
    }

    /// `inner`, deciding each limit at `1 / instances` of its quota.
    pub fn fixed(inner: S, instances: u32) -> Self {
        Split::new(inner, move || instances)
    }

    /// How many instances the limits are split between now (at least 1).
    pub fn instances(&self) -> u32 {
        self.share().instances()
    }

    /// This instance's share now.
    pub fn share(&self) -> Share {
        (self.share)()
    }

    /// `policy` with its limits split at this instance's share: the
    /// policy itself for one instance; otherwise a policy made once per
    /// share and kept with it.
    fn split(&self, policy: &Arc<Policy>) -> Arc<Policy> {
        let n = self.share();
        if n.instances() == 1 {
            return policy.clone();
        }
        let kept = policy.prepared(|_| SplitPolicies::default()).into_arc();
        let mut made = kept.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, split)) = made.iter().find(|(of, _)| *of == n) {
            return split.clone();
        }
        let split = Arc::new(Policy::new(
            policy
                .limits()
                .iter()
                .map(|limit| share(limit, n))
                .collect(),
        ));
        made.push((n, split.clone()));
        split
    }

    /// `call` on `policy` and on every split of it made so far, one after
    /// the other (the first error is returned, every call is made).
    fn on_every_split(
        policy: &Arc<Policy>,
        call: impl Fn(&Arc<Policy>) -> AdminFuture,
    ) -> AdminFuture {
        let kept = policy.prepared(|_| SplitPolicies::default()).into_arc();
        let made = kept.0.lock().unwrap_or_else(PoisonError::into_inner);
        made.iter()
            .map(|(_, split)| call(split))
            .fold(call(policy), AdminFuture::and)
    }
}

/// The splits of one policy, by share: a few at most (the number of
/// instances changes rarely).
#[derive(Default)]
struct SplitPolicies(Mutex<Vec<(Share, Arc<Policy>)>>);

/// `limit` at `n`'s part of its quota and burst (at least 1 each), same
/// name and algorithm.
fn share(limit: &NamedLimit, n: Share) -> NamedLimit {
    let quota = limit.quota();
    let part = |units: u64| n.part(units).max(1);
    let split = Quota::new(
        part(quota.limit()),
        Duration::from_nanos(quota.period_nanos()),
    )
    .unwrap_or(quota);
    let split = if quota.burst() != quota.limit() {
        split.with_burst(part(quota.burst())).unwrap_or(split)
    } else {
        split
    };
    NamedLimit::new(limit.name().to_owned(), split).with_algorithm(limit.limiter().algorithm())
}

impl<S: Store> StoreWrapper for Split<S> {
    type Inner = S;
    type Error = S::Error;
    type Future = S::Future;

    fn inner(&self) -> &S {
        &self.inner
    }

    fn relay(
        &self,
        _: &Arc<Policy>,
        _: &Key,
        reply: StoreReply<S::Future, S::Error>,
    ) -> StoreReply<S::Future, S::Error> {
        reply
    }

    /// The policy split as it is now: what every operation asks the store
    /// behind about (a refund under the number of instances as it is
    /// now: one that changed in between gives back to another split's
    /// counts, a little short; a carry as checks are decided).
    fn inner_policy<'a>(&self, policy: &'a Arc<Policy>) -> Cow<'a, Arc<Policy>> {
        Cow::Owned(self.split(policy))
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<S::Future, S::Error> {
        self.inner
            .check_within(&self.inner_policy(policy), key, cost, within)
    }

    /// Resets the key under every split made so far.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        Self::on_every_split(policy, |split| self.inner.reset(split, key))
    }

    /// Unblocks the key under every split made so far.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        Self::on_every_split(policy, |split| self.inner.unblock(split, key))
    }
}
