//! [`Fallback`]: a store that decides with a second store when the first
//! fails.

use super::{
    AdminFuture, Branch, Capability, ChangeReply, Debit, Missing, PolicyDecision, Refund, Store,
    StoreReply,
};
use crate::{Key, Policy};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

/// A store that asks `primary` and, when it fails (an error, or a
/// [`Timeout`](super::Timeout) that elapsed), decides with `secondary`
/// instead, logging the primary's error with `tracing`. The usual pairing
/// is a shared store in front of a local one: each instance then still
/// enforces the limit on its own while the shared store is away.
///
/// Every admission remembers which of the two charged it
/// ([`PolicyDecision::charged_by`]), and its refund or debit goes to that
/// one: a request admitted by the secondary during an outage is given
/// back to the secondary, never to the primary, which never counted it.
/// So `charge_when` and `pay_after` work through a fallback when both
/// stores can give charges back (and debit, for `pay_after`); the layer
/// refuses to build otherwise, naming the store that cannot.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tollgate::store::{Fallback, Timeout};
/// use tollgate::{MemoryStore, RateLimitLayer};
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
}

impl<P, S> Fallback<P, S> {
    /// `primary`, with `secondary` deciding when it fails.
    pub fn new(primary: P, secondary: S) -> Self {
        Fallback { primary, secondary }
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
                    policy,
                    key,
                    cost,
                    within,
                } => {
                    let error = match ready!(check.poll(cx)) {
                        Ok(verdict) => return Poll::Ready(Ok(verdict.took(Branch::Primary))),
                        Err(error) => error,
                    };
                    log_failure(policy, &error);
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
            policy = policy.label(),
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
    fn can(&self, capability: Capability) -> Result<(), Missing> {
        self.primary.can(capability)?;
        self.secondary.can(capability)
    }

    /// Gives the charge back to the store that charged it.
    fn refund(&self, policy: &Arc<Policy>, key: &Key, mut refund: Refund) -> ChangeReply {
        let (branch, rest) = refund.charged_by.pop();
        refund.charged_by = rest;
        match branch {
            Branch::Primary => self.primary.refund(policy, key, refund),
            Branch::Secondary => self.secondary.refund(policy, key, refund),
        }
    }

    /// Charges the debt to the store that charged the admission.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, mut debit: Debit) -> ChangeReply {
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
    /// an outage of the primary, which would outlive the reset. Both are
    /// asked even if the primary fails; the first error is returned.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
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
            StoreReply::Ready(Ok(verdict)) => StoreReply::Ready(Ok(verdict.took(Branch::Primary))),
            StoreReply::Ready(Err(error)) => {
                log_failure(policy, &error);
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
                    policy: policy.clone(),
                    key: key.clone(),
                    cost,
                    within,
                },
            }),
        }
    }
}
