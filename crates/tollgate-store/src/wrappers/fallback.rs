//! [`Fallback`]: a store that decides with a second store when the first
//! fails.

use crate::key::Key;
use crate::policy::Policy;
use crate::{
    AdminFuture, Branch, Capability, ChangeReply, MissingCapability, PolicyDebit, PolicyDecision,
    PolicyRefund, Store, StoreReply,
};
use pin_project_lite::pin_project;
use smallvec::SmallVec;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tollgate_internal::bounded::{BoundedMap, ByFingerprint, Eviction, Idle, default_shards};

/// A store that asks `primary` and, when it fails (an error, or a
/// [`Timeout`](crate::Timeout) that elapsed), decides with `secondary`
/// instead, logging the primary's error with `tracing`. The usual pairing
/// is a shared store in front of a local one: each instance then still
/// enforces the limit on its own while the shared store is away.
///
/// Every admission remembers which of the two charged it
/// (it rides in the decision), and its refund or debit goes to that
/// one: a request admitted by the secondary during an outage is given
/// back to the secondary, never to the primary, which never counted it.
/// So `charge_when` and `pay_after` work through a fallback when both
/// stores can give charges back (and debit, for `pay_after`); the layer
/// refuses to build otherwise, naming the store that cannot.
///
/// # What the secondary starts from
///
/// The fallback remembers, for the last [`DEFAULT_MAX_KNOWN`] keys the
/// primary answered (a bounded map, idle entries dropped first), each
/// limit's `limit` and `remaining` in the primary's last answer and when
/// it came. The first time the secondary decides a key after the primary
/// failed, that answer is taken out and the secondary is charged (one
/// [`Store::debit`], for a secondary that answers its peek at once: the
/// memory store, a [`Split`](crate::Split) of it) so that what the
/// secondary has left of the key is this instance's part of what the
/// primary had left, plus what refilled since at the limit's rate: for
/// each limit, `left × limit' / limit`, `limit'` being the secondary's own
/// (its share of the quota, in a `Split`), rounded down, so that the
/// instances together have at most what was left. A key nearly spent when
/// the primary went away stays nearly spent, rather than starting from a
/// fresh limit. A policy of several limits is charged one debit, the one
/// that leaves its tightest limit at what was left of it (the others are
/// charged the same units). A key the primary never answered starts from
/// whatever the secondary holds of it.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tollgate_store::{Fallback, Timeout};
/// use tollgate::RateLimitLayer;
/// use tollgate_store::MemoryStore;
///
/// # let redis = MemoryStore::new(); // a RedisStore in practice
/// let store = Fallback::new(Timeout::new(redis, Duration::from_millis(50)), MemoryStore::new());
/// let layer = RateLimitLayer::builder()
///     .quota("api", "100/s".parse()?)
///     .store(store)
///     .build();
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Fallback<P, S> {
    primary: P,
    secondary: S,
    known: Arc<Known>,
}

/// How many keys' last answers a [`Fallback`] remembers by default.
pub const DEFAULT_MAX_KNOWN: usize = 10_000;

impl<P, S> Fallback<P, S> {
    /// `primary`, with `secondary` deciding when it fails.
    pub fn new(primary: P, secondary: S) -> Self {
        Fallback {
            primary,
            secondary,
            known: Arc::new(Known::new(DEFAULT_MAX_KNOWN)),
        }
    }

    /// Remembers the primary's last answer for at most `keys` keys (0:
    /// none, and the secondary starts from what it holds).
    pub fn remembering(mut self, keys: usize) -> Self {
        self.known = Arc::new(Known::new(keys));
        self
    }

    /// The store asked first.
    pub fn primary(&self) -> &P {
        &self.primary
    }

    /// The store that decides when the first fails.
    pub fn secondary(&self) -> &S {
        &self.secondary
    }
}

pin_project! {
    /// The future of a [`Fallback`] check.
    pub struct FallbackFuture<P: Store, S: Store> {
        #[pin]
        state: State<P, S>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<P: Store, S: Store> {
        // Awaiting the primary.
        Primary {
            #[pin]
            check: P::Future,
            secondary: S,
            known: Arc<Known>,
            policy: Arc<Policy>,
            key: Key,
            cost: u32,
            within: Duration,
        },
        // The primary failed; awaiting the secondary.
        Secondary {
            #[pin]
            check: S::Future,
            policy: Arc<Policy>,
        },
    }
}

impl<P: Store, S: Store> Future for FallbackFuture<P, S> {
    type Output = Result<PolicyDecision, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            let next = match state.as_mut().project() {
                StateProj::Secondary { check, policy } => {
                    let answer = ready!(check.poll(cx));
                    return Poll::Ready(secondary_decided(answer, policy));
                }
                StateProj::Primary {
                    check,
                    secondary,
                    known,
                    policy,
                    key,
                    cost,
                    within,
                } => {
                    let error = match ready!(check.poll(cx)) {
                        Ok(verdict) => {
                            known.learn(policy, key, &verdict);
                            return Poll::Ready(Ok(verdict.took(Branch::Primary)));
                        }
                        Err(error) => error,
                    };
                    log_failure(policy, &error);
                    known.seed(secondary, policy, key);
                    match secondary.check_within(policy, key, *cost, *within) {
                        StoreReply::Ready(answer) => {
                            return Poll::Ready(secondary_decided(answer, policy));
                        }
                        StoreReply::Pending(check) => State::Secondary {
                            check,
                            policy: Arc::clone(policy),
                        },
                    }
                }
            };
            state.set(next);
        }
    }
}

/// The secondary's answer, marked as its own and counted
/// (`tollgate_fallback_decisions_total`) when it is a decision.
fn secondary_decided<E>(
    answer: Result<PolicyDecision, E>,
    policy: &Policy,
) -> Result<PolicyDecision, E> {
    if answer.is_ok() {
        crate::observe::fallback_decided(policy.metrics());
    }
    answer.map(|v| v.took(Branch::Secondary))
}

fn log_failure(policy: &Policy, error: &dyn std::fmt::Display) {
    static QUIET: crate::observe::Quiet = crate::observe::Quiet::new();
    if let Some(held_back) = QUIET.pass() {
        tracing::warn!(
            limits = policy.label(),
            %error,
            held_back,
            "rate-limit store failed; deciding with the fallback store (at most one such \
             warning every 10 s: held_back counts the failures since the last)"
        );
    }
}

impl<P: Store, S: Store> Store for Fallback<P, S> {
    type Error = S::Error;
    type Future = FallbackFuture<P, S>;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.check_within(policy, key, cost, Duration::MAX)
    }

    fn supports(&self, policy: &Policy) -> Result<(), crate::ConfigError> {
        self.primary.supports(policy)?;
        self.secondary.supports(policy)
    }

    /// Both stores must: either may have charged an admission.
    fn can(&self, capability: Capability) -> Result<(), MissingCapability> {
        self.primary.can(capability)?;
        self.secondary.can(capability)
    }

    /// Gives the charge back to the store that charged it.
    fn refund(&self, policy: &Arc<Policy>, key: &Key, mut refund: PolicyRefund) -> ChangeReply {
        let (branch, rest) = refund.charged_by.pop();
        refund.charged_by = rest;
        match branch {
            Branch::Primary => self.primary.refund(policy, key, refund),
            Branch::Secondary => self.secondary.refund(policy, key, refund),
        }
    }

    /// Charges the debt to the store that charged the admission.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, mut debit: PolicyDebit) -> ChangeReply {
        let (branch, rest) = debit.charged_by.pop();
        debit.charged_by = rest;
        match branch {
            Branch::Primary => self.primary.debit(policy, key, debit),
            Branch::Secondary => self.secondary.debit(policy, key, debit),
        }
    }

    // `peek`: the default, a check of cost 0, so that a peek falls back as
    // a check does.

    /// Resets the key in both stores: the secondary may hold counts from
    /// an outage of the primary, which would outlive the reset; what the
    /// primary last said of the key is forgotten. Both are
    /// asked even if the primary fails; the first error is returned.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        // What the primary last said of the key is no longer so.
        self.known.forget(policy, key);
        let primary = self.primary.reset(policy, key);
        primary.and(self.secondary.reset(policy, key))
    }

    /// Carries the key's usage in both stores, as [`reset`](Self::reset)
    /// resets it in both: the secondary's counts of an outage move with the
    /// plan too.
    fn carry(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> AdminFuture {
        let primary = self.primary.carry(from, to, key);
        primary.and(self.secondary.carry(from, to, key))
    }

    /// Unblocks the key in both stores, as [`reset`](Self::reset) does.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        let primary = self.primary.unblock(policy, key);
        primary.and(self.secondary.unblock(policy, key))
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        match self.primary.check_within(policy, key, cost, within) {
            StoreReply::Ready(Ok(verdict)) => {
                self.known.learn(policy, key, &verdict);
                StoreReply::Ready(Ok(verdict.took(Branch::Primary)))
            }
            StoreReply::Ready(Err(error)) => {
                log_failure(policy, &error);
                self.known.seed(&self.secondary, policy, key);
                match self.secondary.check_within(policy, key, cost, within) {
                    StoreReply::Ready(answer) => {
                        StoreReply::Ready(secondary_decided(answer, policy))
                    }
                    StoreReply::Pending(check) => StoreReply::Pending(FallbackFuture {
                        state: State::Secondary {
                            check,
                            policy: policy.clone(),
                        },
                    }),
                }
            }
            StoreReply::Pending(check) => StoreReply::Pending(FallbackFuture {
                state: State::Primary {
                    check,
                    secondary: self.secondary.clone(),
                    known: self.known.clone(),
                    policy: policy.clone(),
                    key: key.clone(),
                    cost,
                    within,
                },
            }),
        }
    }
}

/// The primary's last answer for each key lately answered: each limit's
/// `limit` and `remaining`, and when (ns since the map was made).
struct Known {
    entries: Option<BoundedMap<ByFingerprint<Last>>>,
    started: std::time::Instant,
}

struct Last {
    at: u64,
    /// When the key is whole again: the entry says nothing more.
    whole_at: u64,
    each: SmallVec<[(u64, u64); 2]>,
}

impl Idle for Last {
    fn idle_at(&self) -> u64 {
        self.whole_at
    }
}

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Known")
            .field("keys", &self.entries.as_ref().map_or(0, BoundedMap::len))
            .finish_non_exhaustive()
    }
}

impl Known {
    fn new(max_keys: usize) -> Self {
        let entries = (max_keys > 0).then(|| {
            let shards = default_shards(max_keys);
            BoundedMap::new(shards, max_keys.div_ceil(shards).max(1))
        });
        Known {
            entries,
            started: std::time::Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Remembers the primary's answer `verdict` for `key`.
    fn learn(&self, policy: &Policy, key: &Key, verdict: &PolicyDecision) {
        let Some(entries) = &self.entries else {
            return;
        };
        let now = self.now();
        let each: SmallVec<[(u64, u64); 2]> = verdict
            .each()
            .iter()
            .map(|d| (d.limit(), d.remaining()))
            .collect();
        let whole_in = verdict
            .each()
            .iter()
            .map(|d| d.reset_after_nanos())
            .max()
            .unwrap_or(0);
        let fingerprint = entries.fingerprint(policy.id(), key);
        let mut shard = entries.write(fingerprint);
        let last = Last {
            at: now,
            whole_at: now.saturating_add(whole_in),
            each,
        };
        if let Some(entry) = shard.get_mut(&fingerprint) {
            *entry = last;
        } else if shard.make_room(now, Eviction::IdleThenSample) {
            shard.insert(fingerprint, last);
        }
    }

    /// Forgets what the primary last said of `key`.
    fn forget(&self, policy: &Policy, key: &Key) {
        if let Some(entries) = &self.entries {
            let fingerprint = entries.fingerprint(policy.id(), key);
            entries.write(fingerprint).remove(&fingerprint);
        }
    }

    /// Charges `secondary` so that what it has left of `key` is this
    /// instance's part of what the primary last had left (see
    /// [`Fallback`]), once per answer remembered.
    fn seed<S: Store>(&self, secondary: &S, policy: &Arc<Policy>, key: &Key) {
        let Some(entries) = &self.entries else {
            return;
        };
        let fingerprint = entries.fingerprint(policy.id(), key);
        let Some(last) = entries.write(fingerprint).remove(&fingerprint) else {
            return;
        };
        let elapsed = self.now().saturating_sub(last.at);
        if elapsed >= last.whole_at.saturating_sub(last.at) {
            return;
        }
        let StoreReply::Ready(Ok(there)) = secondary.peek(policy, key) else {
            return;
        };
        if there.each().len() != last.each.len() {
            return;
        }
        let (mut has, mut mine) = (u64::MAX, u64::MAX);
        for (index, (decision, &(limit, remaining))) in
            there.each().iter().zip(&last.each).enumerate()
        {
            let period = policy
                .limits()
                .get(index)
                .map_or(1, |l| l.quota().period_nanos())
                .max(1);
            let refilled = u128::from(elapsed) * u128::from(limit) / u128::from(period);
            let left = u128::from(remaining)
                .saturating_add(refilled)
                .min(u128::from(limit));
            let part = left * u128::from(decision.limit()) / u128::from(limit.max(1));
            has = has.min(decision.remaining());
            mine = mine.min(u64::try_from(part).unwrap_or(u64::MAX));
        }
        let debit = has.saturating_sub(mine);
        if debit > 0 {
            let units = u32::try_from(debit).unwrap_or(u32::MAX);
            // The memory store and a split of it debit at once; a store
            // that sends it lands it on its own.
            drop(secondary.debit(policy, key, PolicyDebit::new(units)));
        }
    }
}
