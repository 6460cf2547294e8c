//! Periodic mode behind the mode seam: a request's turns at a key's
//! counts, and the store's peeks, refunds, debits, resets and carries on
//! them.

use super::keys::Keys;
use super::slot::PeriodicSlot;
use super::sync::{depart, sync};
use super::tick::ensure_ticking;
use crate::calls::{Calls, call_ended, round_ended};
use crate::drive::{Slot, Turn, check_slot};
use crate::future::LocalFuture;
use crate::reply::{Reply, forward, spawn_change};
use crate::seam::{Boxed, Mode};
use crate::shared::Shared;
use crate::table::Found;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tollgate_internal::ChargeChange;
use tollgate_store::shared::SharedStore;
use tollgate_store::{ChangeReply, PolicyRefund};
use tollgate_store::{Key, Policy, PolicyDecision, StoreReply};

/// The periodic mode: its keys, which its tick holds only weakly, so that
/// the tick ends with the store.
pub(crate) struct Periodic<S> {
    /// The keys' slots and the tick's schedule.
    keys: Arc<Keys<S>>,
}

impl<S: SharedStore> Periodic<S> {
    /// No key yet, room for `max_keys`.
    pub(crate) fn new(shared: Arc<Shared<S>>, max_keys: usize) -> Self {
        Periodic {
            keys: Arc::new(Keys::new(shared, max_keys)),
        }
    }
}

impl<S: SharedStore> Mode<S> for Periodic<S> {
    fn shared(&self) -> &Shared<S> {
        &self.keys.shared
    }

    fn keys(&self) -> u64 {
        self.keys.table.len() as u64
    }

    fn check(&self, policy: &Arc<Policy>, key: &Key, cost: u32) -> Found<Reply<S>> {
        self.keys.table.with_slot(
            policy.id(),
            key,
            || {
                self.keys
                    .shared
                    .store
                    .shares(policy)
                    .then(|| PeriodicSlot::new(policy.clone(), key.clone()))
            },
            |slot| check_slot(&self.keys, slot, cost),
        )
    }

    /// By the plain script: periodic mode holds nothing in the shared
    /// store.
    fn decide_in_store(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> Reply<S> {
        forward::<S>(
            self.keys
                .shared
                .store
                .check_within(policy, key, cost, within),
        )
    }

    /// What this instance admitted since its last report, and what a debit
    /// added, is not in the shared store's counts yet: it is taken off its
    /// answer (and what was given back after it was reported is added), so
    /// that a peek never shows more than this instance would admit, and
    /// its own admissions and debits show at once.
    fn peek(&self, policy: &Arc<Policy>, key: &Key, within: Duration) -> Reply<S> {
        let slot = if policy.limits().is_empty() {
            None
        } else {
            self.keys.table.find(policy.id(), key)
        };
        let before = slot.as_ref().map_or(0, |slot| slot.unreported());
        let reply = self.keys.shared.store.check_within(policy, key, 0, within);
        let Some(slot) = slot else {
            return forward::<S>(reply);
        };
        match reply {
            StoreReply::Ready(answer) => {
                StoreReply::Ready(answer.map(|d| slot.counted(&d, before)))
            }
            StoreReply::Pending(future) => StoreReply::Pending(LocalFuture::boxed(async move {
                future.await.map(|d| slot.counted(&d, before))
            })),
        }
    }

    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        // Decisions made here carry no receipt; those Redis made carry the
        // script's charge time, and were charged there, not in a report.
        let (refund, slot, wait) = match self.keys.table.find(policy.id(), key) {
            Some(slot) if refund.receipt.is_none() => match slot.give_back(refund.cost) {
                (0, _) => return ChangeReply::Done,
                (reported, wait) => (refund.part(reported), Some(slot), wait),
            },
            slot => (refund, slot, None),
        };
        let (store, policy, key) = (self.keys.shared.store.clone(), policy.clone(), key.clone());
        spawn_change(ChargeChange::Refund, async move {
            // The report that may carry the units lands first (see
            // `PeriodicSlot::give_back`); no other sync is waited for.
            if let (Some(slot), Some(round)) = (&slot, wait) {
                round_ended(&**slot, round).await;
            }
            // A refund that failed is the store's to log; the slot then
            // counts it as never given back.
            let landed = store.refund(&policy, &key, refund).landed().await;
            if let (true, Some(slot)) = (landed, slot) {
                slot.refunded();
            }
            Ok::<(), S::Error>(())
        })
    }

    /// Counted here at once and sent with the next report, which the
    /// shared store charges whatever the state.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, cost: u32) -> u32 {
        match self.keys.table.find(policy.id(), key) {
            Some(slot) => {
                slot.charge(cost);
                0
            }
            None => cost,
        }
    }

    /// What the slot admitted and did not report yet is reported now, with
    /// its share given back (see [`depart`]); what that call could not
    /// report is left for the carry to count.
    fn take_slot<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a Key,
    ) -> Boxed<'a, Result<i64, S::Error>> {
        Box::pin(async move {
            let slot = self.keys.table.remove(policy.id(), key);
            call_ended(slot.as_deref()).await;
            let Some(slot) = slot else {
                return Ok(0);
            };
            let unseen = depart(&self.keys.shared, &slot).await;
            Ok(unseen.min(i64::MAX as u64) as i64)
        })
    }

    /// The counts not yet reported go with the slot.
    fn forget_slot<'a>(&'a self, policy: &'a Policy, key: &'a Key) -> Boxed<'a, ()> {
        Box::pin(async move {
            let slot = self.keys.table.remove(policy.id(), key);
            call_ended(slot.as_deref()).await;
        })
    }

    /// Nothing here: a slot's refusals come from its last reading, which
    /// is counts, not a block.
    fn unblock(&self, _: &Policy, _: &Key) {}
}

impl Calls for PeriodicSlot {
    fn done(&self) -> &Notify {
        &self.done
    }

    fn calling(&self) -> bool {
        self.lock().syncing
    }

    fn round(&self) -> u64 {
        self.lock().round
    }
}

impl<S: SharedStore> Slot<S> for PeriodicSlot {
    /// The keys, whose tick a request's turn starts.
    type Mode = Arc<Keys<S>>;

    fn shared(keys: &Arc<Keys<S>>) -> &Shared<S> {
        &keys.shared
    }

    fn turn(&self, keys: &Arc<Keys<S>>, cost: u32, seen: Option<u64>) -> Turn {
        ensure_ticking(keys);
        let now = keys.shared.now();
        let mut counts = self.lock();
        let interval = keys.shared.settings.mode.sync_nanos();
        let (step, start) = counts.decide(now, cost, interval);
        let start = start.then_some(0);
        Turn::new(step, start, counts.round, seen, counts.failure.as_ref())
    }

    fn call(keys: Arc<Keys<S>>, slot: Arc<Self>, _: u32) -> impl Future<Output = ()> + Send {
        // Only the shared part: a sync in flight does not keep the store's
        // keys (nor its tick) alive.
        let shared = keys.shared.clone();
        sync(shared, slot)
    }

    fn spend(&self, now: u64, cost: u32) -> Option<(PolicyDecision, Option<u32>)> {
        PeriodicSlot::spend(self, now, cost).map(|answer| (answer, None))
    }
}
