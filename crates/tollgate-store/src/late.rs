//! Late answers: a check its caller stopped waiting on is heard out, and an
//! admission it brings is given back.
//!
//! A store that does I/O may decide after the layer stopped waiting (its
//! `store_timeout` passed, the client went away, the future was dropped).
//! The request was then answered by the store-error behaviour, so the
//! store's charge must not stand. No estimate of the round trip can tell
//! whether the store charged (a reply held back at random is late whatever
//! the guess), so the outcome is learned: the check's future is driven to
//! its end on a task of its own, and an admission is given back through
//! the same store ([`Store::refund`], which a [`Fallback`](super::Fallback)
//! routes to the store that charged).
//!
//! # The bound
//!
//! At most [`MAX_LATE_CHECKS`] such checks are heard out at once in a
//! process, each for at most [`LATE_CHECK_BOUND`] (its refund too). A check
//! past either bound is dropped unheard: a store with a deadline of its own
//! (Redis, the compare-and-swap store: see [`Store::check_within`]) still
//! charges nothing for a decision made after it; otherwise the charge may
//! stand. Each late check ends in one outcome of the metric
//! `tollgate_late_checks_total{outcome}` (feature `metrics`):
//!
//! - `given_back`: it admitted, and the admission was given back;
//! - `not_charged`: it refused, failed, or charged nothing;
//! - `kept`: it admitted, and the store cannot give charges back
//!   ([`Store::can`] says so): the charge stands;
//! - `abandoned`: past the bound, no tokio runtime to hear it out on, or
//!   its refund failed (the store logs why): whatever the store decided
//!   stands.
//!
//! `kept` and `abandoned` are also logged (one WARN every 10 s at most).

use super::{Capability, PolicyDecision, PolicyRefund, Store, StoreReply};
use crate::key::Key;
use crate::policy::Policy;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How many late checks a process hears out at once; past it, a late
/// check is abandoned (see the [module docs](self)).
pub const MAX_LATE_CHECKS: usize = 4096;

/// How long a late check, and then its refund, is waited for at most.
pub const LATE_CHECK_BOUND: Duration = Duration::from_secs(30);

/// Late checks being heard out now, in this process.
static HEARING: AtomicUsize = AtomicUsize::new(0);

/// How many late checks are being heard out now, in this process (at most
/// [`MAX_LATE_CHECKS`]).
pub fn late_checks_in_progress() -> usize {
    HEARING.load(Ordering::Relaxed)
}

/// Registers `tollgate_late_checks_total` at 0 for every outcome, on the
/// recorder installed now: a layer being built does it, so that a
/// dashboard's rate of late checks does not lose the first one of an
/// outage.
#[cfg(feature = "metrics")]
pub fn register_late_checks() {
    for outcome in LateOutcome::ALL {
        crate::observe::register_late_check(outcome.label());
    }
}

/// How a late check ended (the `outcome` label of
/// `tollgate_late_checks_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LateOutcome {
    GivenBack,
    NotCharged,
    Kept,
    Abandoned,
}

impl LateOutcome {
    /// Every outcome, for the series registered at 0.
    pub(crate) const ALL: [LateOutcome; 4] = [
        LateOutcome::GivenBack,
        LateOutcome::NotCharged,
        LateOutcome::Kept,
        LateOutcome::Abandoned,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            LateOutcome::GivenBack => "given_back",
            LateOutcome::NotCharged => "not_charged",
            LateOutcome::Kept => "kept",
            LateOutcome::Abandoned => "abandoned",
        }
    }
}

/// What gives back a check's admission: the store asked, and what it was
/// asked.
struct Asked<St> {
    store: St,
    policy: Arc<Policy>,
    key: Key,
    cost: u32,
    at: Instant,
}

/// A store's pending check that is heard out if its caller lets go of it
/// before it answers: dropped unanswered (or [`give_up`](Self::give_up)),
/// its future goes on, on a task of its own, and an admission it brings is
/// given back through `store` (see the [module docs](self)). A future
/// polled to its answer hands it to the caller, who then owns the charge.
///
/// For middleware of your own over a [`Store`]: wrap a
/// [`StoreReply::Pending`] future in it, await
/// it under your deadline, and drop it when you stop waiting.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::sync::Arc;
/// use tollgate_store::{Key, MemoryStore, NamedLimit, Policy};
/// use tollgate_store::{Store, StoreReply, Watched};
///
/// let store = MemoryStore::new();
/// let policy = Arc::new(Policy::new(vec![NamedLimit::new("api", "10/s".parse().unwrap())]));
/// let key = Key::from("alice");
/// if let StoreReply::Pending(future) = store.check(&policy, &key, 1) {
///     let watched = Watched::new(future, store.clone(), &policy, &key, 1);
///     match tokio::time::timeout(std::time::Duration::from_millis(50), watched).await {
///         Ok(answer) => { /* the caller's answer, and its charge */ }
///         Err(_) => { /* dropped: heard out, any admission given back */ }
///     }
/// }
/// # }
/// ```
#[must_use = "a watched check does nothing unless polled; dropped, it is heard out"]
pub struct Watched<St: Store> {
    future: Option<Pin<Box<St::Future>>>,
    asked: Asked<St>,
}

impl<St: Store> std::fmt::Debug for Watched<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("answered", &self.future.is_none())
            .field("cost", &self.asked.cost)
            .finish_non_exhaustive()
    }
}

impl<St: Store> Watched<St> {
    /// `future`, a check of `cost` for `key` under `policy` that `store`
    /// is deciding.
    pub fn new(future: St::Future, store: St, policy: &Arc<Policy>, key: &Key, cost: u32) -> Self {
        Watched {
            future: Some(Box::pin(future)),
            asked: Asked {
                store,
                policy: policy.clone(),
                key: key.clone(),
                cost,
                at: Instant::now(),
            },
        }
    }

    /// Stops waiting: the check is heard out on a task of its own (as when
    /// this is dropped unanswered). Polled after this, it answers as a
    /// store that failed would not: it stays pending.
    pub fn give_up(&mut self) {
        if let Some(future) = self.future.take() {
            hear_out(future, &self.asked);
        }
    }
}

impl<F, E> StoreReply<F, E> {
    /// This reply, its future (if it has one) [`Watched`]: the answer of a
    /// check of `cost` for `key` under `policy` that `store` gave.
    pub fn watched<St>(
        self,
        store: &St,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Watched<St>, E>
    where
        St: Store<Future = F, Error = E>,
    {
        match self {
            StoreReply::Ready(answer) => StoreReply::Ready(answer),
            StoreReply::Pending(future) => {
                StoreReply::Pending(Watched::new(future, store.clone(), policy, key, cost))
            }
        }
    }
}

// Nothing in it is pinned in place: the future is boxed.
impl<St: Store> Unpin for Watched<St> {}

impl<St: Store> Future for Watched<St> {
    type Output = Result<PolicyDecision, St::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(future) = self.future.as_mut() else {
            return Poll::Pending;
        };
        let answer = std::task::ready!(future.as_mut().poll(cx));
        self.future = None;
        Poll::Ready(answer)
    }
}

impl<St: Store> Drop for Watched<St> {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// Drives `future` to its end on a task of its own, within the bounds, and
/// gives back the admission it brings.
fn hear_out<St: Store>(future: Pin<Box<St::Future>>, asked: &Asked<St>) {
    // A check of nothing (a peek) has nothing to give back.
    if asked.cost == 0 {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        abandon(&asked.policy, "no tokio runtime to hear it out on");
        return;
    };
    let Some(place) = Place::take() else {
        abandon(&asked.policy, "too many late checks at once");
        return;
    };
    let asked = Asked {
        store: asked.store.clone(),
        policy: asked.policy.clone(),
        key: asked.key.clone(),
        cost: asked.cost,
        at: asked.at,
    };
    runtime.spawn(async move {
        let _place = place;
        let outcome = match tokio::time::timeout(LATE_CHECK_BOUND, future).await {
            Err(_) => LateOutcome::Abandoned,
            Ok(Err(_)) => LateOutcome::NotCharged,
            Ok(Ok(verdict)) => give_back(&asked, &verdict).await,
        };
        report(&asked.policy, outcome);
    });
}

/// Gives back `verdict`'s admission, if it admitted.
async fn give_back<St: Store>(asked: &Asked<St>, verdict: &PolicyDecision) -> LateOutcome {
    if !verdict.merged().allowed() {
        return LateOutcome::NotCharged;
    }
    if asked.store.can(Capability::Refund).is_err() {
        return LateOutcome::Kept;
    }
    let refund = PolicyRefund::of(verdict, asked.cost, asked.at.elapsed());
    let landing = asked.store.refund(&asked.policy, &asked.key, refund);
    match tokio::time::timeout(LATE_CHECK_BOUND, landing.landed()).await {
        Ok(true) => LateOutcome::GivenBack,
        // The refund failed (the store logged why) or took too long.
        Ok(false) | Err(_) => LateOutcome::Abandoned,
    }
}

/// Counts `outcome`, and logs the ones that leave a charge standing.
fn report(policy: &Policy, outcome: LateOutcome) {
    match outcome {
        LateOutcome::Abandoned => abandon(policy, "no answer within the bound"),
        LateOutcome::Kept => {
            static QUIET: crate::observe::Quiet = crate::observe::Quiet::new();
            if let Some(held_back) = QUIET.pass() {
                tracing::warn!(
                    limits = policy.label(),
                    held_back,
                    "a check that came back after the layer stopped waiting admitted, and the \
                     store cannot give charges back: the charge stands (a store that does I/O \
                     should implement Store::refund)"
                );
            }
            crate::observe::late_check(outcome.label());
        }
        LateOutcome::GivenBack | LateOutcome::NotCharged => {
            crate::observe::late_check(outcome.label())
        }
    }
}

/// Logs (quietly) that a late check is not heard out: whatever the store
/// decided stands.
fn abandon(policy: &Policy, why: &str) {
    static QUIET: crate::observe::Quiet = crate::observe::Quiet::new();
    if let Some(held_back) = QUIET.pass() {
        tracing::warn!(
            limits = policy.label(),
            why,
            held_back,
            "a check the layer stopped waiting on is not heard out: a charge it made may stand \
             (see tollgate::store::late)"
        );
    }
    crate::observe::late_check(LateOutcome::Abandoned.label());
}

/// One of the [`MAX_LATE_CHECKS`] places, given back when dropped.
struct Place;

impl Place {
    fn take() -> Option<Place> {
        HEARING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_LATE_CHECKS).then_some(n + 1)
            })
            .ok()
            .map(|_| Place)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        HEARING.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_more_than_the_bound_are_heard_at_once() {
        let mut places = Vec::new();
        while let Some(place) = Place::take() {
            places.push(place);
            assert!(places.len() <= MAX_LATE_CHECKS);
        }
        assert_eq!(late_checks_in_progress(), MAX_LATE_CHECKS);
        places.pop();
        assert!(Place::take().is_some(), "a place given back is free again");
    }
}
