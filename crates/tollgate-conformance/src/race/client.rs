//! One client of a race: a tokio task that plays its calls through its
//! instance, waiting for each, hearing it out past a deadline (through
//! [`Watched`], counting what it gives back) or dropping it unheard, and
//! tallies what each key's callers saw.

use super::plan::{Kind, Plan};
use crate::checker::Tally;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tollgate_store::{ChangeReply, Key, Policy, PolicyRefund, Store, StoreReply, Watched};

/// Whether an error is one the run explains (a restart, a deadline): for
/// a call whose caller waits `Some(within)`, or as long as it takes.
pub(super) type Explain<E> = Arc<dyn Fn(&E, Option<Duration>) -> bool + Send + Sync>;

/// One client: its instance, and what it needs to play its calls.
pub(super) struct Client<St: Store> {
    pub(super) store: St,
    pub(super) policy: Arc<Policy>,
    pub(super) keys: Vec<Key>,
    pub(super) given_back: Arc<Vec<AtomicU64>>,
    pub(super) explain: Explain<St::Error>,
}

/// How long a call whose caller waits may take before the run fails: far
/// beyond any fault a run injects.
const PATIENCE: Duration = Duration::from_secs(30);

impl<St: Store> Client<St> {
    /// Plays `plan`: what each key's callers saw.
    pub(super) async fn play(&self, plan: &Plan) -> Result<Vec<Tally>, String> {
        let mut tallies = vec![Tally::default(); self.keys.len()];
        for call in &plan.calls {
            let tally = &mut tallies[call.key];
            let key = &self.keys[call.key];
            let within = match call.kind {
                Kind::Waits => None,
                Kind::HeardOut(wait) | Kind::Dropped(wait) => Some(wait),
            };
            let reply = match within {
                None => self.store.check(&self.policy, key, 1),
                Some(wait) => self.store.check_within(&self.policy, key, 1, wait),
            };
            let answer = match (reply, call.kind) {
                (StoreReply::Ready(answer), _) => Some(answer),
                (StoreReply::Pending(future), Kind::Waits) => {
                    match tokio::time::timeout(PATIENCE, future).await {
                        Ok(answer) => Some(answer),
                        Err(_) => {
                            return Err(format!(
                                "a check of key {key:?} did not answer within {PATIENCE:?}"
                            ));
                        }
                    }
                }
                (StoreReply::Pending(future), Kind::HeardOut(wait)) => {
                    let counting = Counting {
                        inner: self.store.clone(),
                        given_back: self.given_back.clone(),
                        index: call.key,
                    };
                    let watched = Watched::new(future, counting, &self.policy, key, 1);
                    tokio::time::timeout(wait, watched).await.ok()
                }
                (StoreReply::Pending(future), Kind::Dropped(wait)) => {
                    tokio::time::timeout(wait, future).await.ok()
                }
            };
            match answer {
                None => tally.given_up += 1,
                Some(Ok(decision)) if decision.merged().allowed() => tally.kept += 1,
                Some(Ok(_)) => tally.refused += 1,
                Some(Err(error)) if (self.explain)(&error, within) => tally.failed += 1,
                Some(Err(error)) => {
                    return Err(format!("the store failed a check of key {key:?}: {error}"));
                }
            }
        }
        Ok(tallies)
    }
}

/// A store in front of a client's instance that counts the admissions of
/// heard-out checks given back through it.
struct Counting<St> {
    inner: St,
    given_back: Arc<Vec<AtomicU64>>,
    index: usize,
}

impl<St: Clone> Clone for Counting<St> {
    fn clone(&self) -> Self {
        Counting {
            inner: self.inner.clone(),
            given_back: self.given_back.clone(),
            index: self.index,
        }
    }
}

// A wrapper by construction: every operation but the refund it counts
// (the check with its deadline included) reaches the store behind as it is.
impl<St: Store> tollgate_store::StoreWrapper for Counting<St> {
    type Inner = St;
    type Error = St::Error;
    type Future = St::Future;

    fn inner(&self) -> &St {
        &self.inner
    }

    fn relay(
        &self,
        _: &std::sync::Arc<tollgate_store::Policy>,
        _: &tollgate_store::Key,
        reply: tollgate_store::StoreReply<
            <Self::Inner as tollgate_store::Store>::Future,
            <Self::Inner as tollgate_store::Store>::Error,
        >,
    ) -> tollgate_store::StoreReply<Self::Future, Self::Error> {
        reply
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<St::Future, St::Error> {
        self.inner.check_within(policy, key, cost, within)
    }

    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        if let Some(count) = self.given_back.get(self.index) {
            count.fetch_add(1, Ordering::AcqRel);
        }
        self.inner.refund(policy, key, refund)
    }
}
