//! [`Fallback`]: a store that decides with a second store when the first
//! fails.

use super::{PolicyDecision, Store, StoreReply};
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
        },
    }
}

impl<P: Store, S: Store> Future for FallbackFuture<P, S> {
    type Output = Result<PolicyDecision, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            let next = match state.as_mut().project() {
                StateProj::Secondary { check } => return check.poll(cx),
                StateProj::Primary {
                    check,
                    secondary,
                    policy,
                    key,
                    cost,
                    within,
                } => {
                    let error = match ready!(check.poll(cx)) {
                        Ok(verdict) => return Poll::Ready(Ok(verdict)),
                        Err(error) => error,
                    };
                    log_failure(policy, &error);
                    match secondary.check_within(policy, key, *cost, *within) {
                        StoreReply::Ready(answer) => return Poll::Ready(answer),
                        StoreReply::Pending(check) => State::Secondary { check },
                    }
                }
            };
            state.set(next);
        }
    }
}

fn log_failure(policy: &Policy, error: &dyn std::fmt::Display) {
    tracing::warn!(
        policy = policy.label(),
        %error,
        "rate-limit store failed; deciding with the fallback store"
    );
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

    // `peek`: the default, a check of cost 0, so that a peek falls back as
    // a check does.

    /// Resets the key in both stores: the secondary may hold counts from
    /// an outage of the primary, which would outlive the reset. Both are
    /// asked even if the primary fails; the first error is returned.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> super::AdminFuture {
        let primary = self.primary.reset(policy, key);
        primary.and(self.secondary.reset(policy, key))
    }

    /// Unblocks the key in both stores, as [`reset`](Self::reset) does.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> super::AdminFuture {
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
            StoreReply::Ready(Ok(verdict)) => StoreReply::Ready(Ok(verdict)),
            StoreReply::Ready(Err(error)) => {
                log_failure(policy, &error);
                match self.secondary.check_within(policy, key, cost, within) {
                    StoreReply::Ready(answer) => StoreReply::Ready(answer),
                    StoreReply::Pending(check) => StoreReply::Pending(FallbackFuture {
                        state: State::Secondary { check },
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
