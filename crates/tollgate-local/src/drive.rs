//! A request at its key's slot, in either mode: decided at once from what
//! the slot holds, or waiting, turn after turn, for the one call in flight.

use crate::calls::Calls;
use crate::future::LocalFuture;
use crate::reply::Reply;
use crate::shared::{Shared, Step};
use std::pin::pin;
use std::sync::Arc;
use tollgate_store::shared::SharedStore;
use tollgate_store::{PolicyDecision, StoreReply};

/// A key's local state in either mode, as a request drives it.
pub(crate) trait Slot<S: SharedStore>: Calls + Send + Sync + Sized + 'static {
    /// What the slot's turns and calls read beside the slot: a handle on
    /// the mode's state (an `Arc`), which a waiting request keeps alive.
    type Mode: Clone + Send + Sync + 'static;

    /// The part of `mode` that every mode shares: the shared store, the
    /// settings, the counts, the clock.
    fn shared(mode: &Self::Mode) -> &Shared<S>;

    /// Decides a request of `cost` under the slot's lock. A waiter passes
    /// the round it last saw: if a call ended since and failed, and the
    /// request still cannot be decided, its step is `Fail`.
    fn turn(&self, mode: &Self::Mode, cost: u32, seen: Option<u64>) -> Turn;

    /// The call a turn asked for: a reservation of at least `need` units,
    /// or a sync.
    fn call(mode: Self::Mode, slot: Arc<Self>, need: u32) -> impl Future<Output = ()> + Send;

    /// Decides a request of `cost` at `now` without the slot's lock, when
    /// it can: the answer, and a call to start (its argument).
    fn spend(&self, now: u64, cost: u32) -> Option<(PolicyDecision, Option<u32>)>;
}

/// One turn of a request at its slot.
pub(crate) struct Turn {
    /// What the slot says of the request.
    pub(crate) step: Step,
    /// Start a call, with this argument.
    pub(crate) start: Option<u32>,
    /// The calls ended so far.
    pub(crate) round: u64,
}

impl Turn {
    /// `step`, or `Fail` if a call ended after `seen` with `failure` and
    /// the request still waits.
    pub(crate) fn new(
        step: Step,
        start: Option<u32>,
        round: u64,
        seen: Option<u64>,
        failure: Option<&String>,
    ) -> Turn {
        let step = match (step, seen, failure) {
            (Step::Wait, Some(seen), Some(failure)) if round > seen => Step::Fail(failure.clone()),
            (step, _, _) => step,
        };
        Turn { step, start, round }
    }
}

/// A request at its key's slot: decided at once, or waiting for the call
/// in flight, turn after turn, until the slot can decide it.
pub(crate) fn check_slot<S: SharedStore, T: Slot<S>>(
    mode: &T::Mode,
    slot: &Arc<T>,
    cost: u32,
) -> Reply<S> {
    let shared = T::shared(mode);
    if let Some((decision, start)) = slot.spend(shared.now(), cost) {
        if let Some(need) = start {
            tokio::spawn(T::call(mode.clone(), slot.clone(), need));
        }
        shared.stats.decided(shared.mode_name());
        return StoreReply::Ready(Ok(decision));
    }
    let turn = slot.turn(mode, cost, None);
    if let Some(need) = turn.start {
        tokio::spawn(T::call(mode.clone(), slot.clone(), need));
    }
    match turn.step {
        Step::Answer(decision) => {
            shared.stats.decided(shared.mode_name());
            StoreReply::Ready(Ok(decision))
        }
        Step::Fail(message) => StoreReply::Ready(Err(S::spent_error(message))),
        Step::Wait => StoreReply::Pending(LocalFuture::boxed(wait(
            mode.clone(),
            slot.clone(),
            cost,
            turn.round,
        ))),
    }
}

/// A request that waits at its slot, from round `seen` on: a turn each
/// time a call ends, until one decides it.
async fn wait<S: SharedStore, T: Slot<S>>(
    mode: T::Mode,
    slot: Arc<T>,
    cost: u32,
    mut seen: u64,
) -> Result<PolicyDecision, S::Error> {
    loop {
        // Listening before looking: a call that ends in between still
        // wakes this request.
        let mut done = pin!(slot.done().notified());
        done.as_mut().enable();
        let turn = slot.turn(&mode, cost, Some(seen));
        if let Some(need) = turn.start {
            tokio::spawn(T::call(mode.clone(), slot.clone(), need));
        }
        seen = turn.round;
        match turn.step {
            Step::Answer(decision) => {
                let shared = T::shared(&mode);
                shared.stats.waited(shared.mode_name());
                return Ok(decision);
            }
            Step::Fail(message) => return Err(S::spent_error(message)),
            Step::Wait => done.await,
        }
    }
}
