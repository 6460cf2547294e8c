//! Exact mode behind the mode seam: a request's turns at a key's
//! reservations, and the store's refunds, debits, resets and carries on
//! them.

use super::reserve::{give_back, reserve};
use super::slot::ExactSlot;
use crate::calls::{Calls, call_ended, round_ended};
use crate::drive::{Slot, Turn, check_slot};
use crate::future::LocalFuture;
use crate::reply::{Reply, forward, spawn_change};
use crate::seam::{Boxed, Mode};
use crate::shared::{Shared, holder};
use crate::table::{Found, Table};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tollgate_internal::ChargeChange;
use tollgate_store::shared::{ShareOp, SharedStore};
use tollgate_store::{ChangeReply, PolicyRefund, Receipt};
use tollgate_store::{Key, Policy, PolicyDecision, StoreReply};

/// The exact mode's keys: one slot of reservations per key in memory.
pub(crate) struct Exact<S> {
    /// What the slots' calls share with the store.
    shared: Arc<Shared<S>>,
    /// The keys' slots.
    table: Table<ExactSlot>,
}

impl<S: SharedStore> Exact<S> {
    /// No key yet, room for `max_keys`.
    pub(crate) fn new(shared: Arc<Shared<S>>, max_keys: usize) -> Self {
        Exact {
            shared,
            table: Table::new(max_keys),
        }
    }

    /// Gives back in the shared store the units an admission decided here
    /// spent: the reservation its receipt names (`report`) held them.
    fn refund_reserved(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        refund: PolicyRefund,
        report: u64,
    ) -> ChangeReply {
        let slot = self.table.find(policy.id(), key);
        let op = ShareOp::Refund {
            cost: refund.cost,
            holder: holder(self.shared.instance, policy.id()),
            report,
            ago_micros: u64::try_from(refund.ago.as_micros()).unwrap_or(u64::MAX),
            resets: refund.resets.clone(),
        };
        let (policy, key) = (policy.clone(), key.clone());
        let shared = self.shared.clone();
        spawn_change(ChargeChange::Refund, async move {
            if policy.limits().is_empty() || refund.cost == 0 {
                return Ok::<(), S::Error>(());
            }
            let reply = shared.store.share(&policy, &key, op).await?;
            if let Some(slot) = slot {
                let at = shared.now();
                // A reservation in flight may be in the reading, not yet
                // in the slot: it lands first.
                if let Some(round) = slot.refunded(at) {
                    round_ended(&*slot, round).await;
                }
                slot.read_refund(at, (reply.decision, reply.server_micros));
            }
            Ok(())
        })
    }

    /// Gives back in the shared store an admission it decided itself (no
    /// receipt of a reservation), as its own `refund` gives it.
    fn refund_decided(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        let slot = self.table.find(policy.id(), key);
        let (policy, key) = (policy.clone(), key.clone());
        let shared = self.shared.clone();
        spawn_change(ChargeChange::Refund, async move {
            // A refund that failed is the store's to log; the slot then
            // counts it as never given back.
            let landed = shared.store.refund(&policy, &key, refund).landed().await;
            if let (true, Some(slot)) = (landed, slot) {
                slot.refunded(shared.now());
            }
            Ok::<(), S::Error>(())
        })
    }
}

impl<S: SharedStore> Mode<S> for Exact<S> {
    fn shared(&self) -> &Shared<S> {
        &self.shared
    }

    fn keys(&self) -> u64 {
        self.table.len() as u64
    }

    fn check(&self, policy: &Arc<Policy>, key: &Key, cost: u32) -> Found<Reply<S>> {
        self.table.with_slot(
            policy.id(),
            key,
            || {
                self.shared
                    .store
                    .shares(policy)
                    .then(|| ExactSlot::new(policy.clone(), key.clone()))
            },
            |slot| check_slot(&self.shared, slot, cost),
        )
    }

    /// Through a reservation of exactly `cost` that holds nothing, so that
    /// the units other instances hold count (the plain script does not
    /// read them).
    fn decide_in_store(&self, policy: &Arc<Policy>, key: &Key, cost: u32, _: Duration) -> Reply<S> {
        let op = ShareOp::Reserve {
            need: cost,
            want: u64::from(cost),
            fanout: 1,
            holder: holder(self.shared.instance, policy.id()),
            held: 0,
            hold_micros: 0,
            ahead_micros: 0,
            report: 0,
        };
        let (store, policy, key) = (self.shared.store.clone(), policy.clone(), key.clone());
        StoreReply::Pending(LocalFuture::boxed(async move {
            Ok(store.share(&policy, &key, op).await?.decision)
        }))
    }

    /// What this instance spent is charged in the shared store already
    /// (at its reservation, or by a debit): its counts as they are.
    fn peek(&self, policy: &Arc<Policy>, key: &Key, within: Duration) -> Reply<S> {
        forward::<S>(self.shared.store.check_within(policy, key, 0, within))
    }

    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        match refund.receipt.and_then(Receipt::as_token) {
            Some(report) => self.refund_reserved(policy, key, refund, report),
            None => self.refund_decided(policy, key, refund),
        }
    }

    /// Paid first from the units this instance holds, which the shared
    /// store counts charged already.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, cost: u32) -> u32 {
        match self.table.find(policy.id(), key) {
            Some(slot) => cost - slot.spend_held(self.shared.now(), cost),
            None => cost,
        }
    }

    /// The units the slot was granted and no request spent are given back
    /// in the shared store (`share.lua`'s refund, naming its last recorded
    /// reservation, as far as the store still counts them), so that the
    /// reading afterwards counts only what requests used; nothing is left
    /// for the carry to count.
    fn take_slot<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a Key,
    ) -> Boxed<'a, Result<i64, S::Error>> {
        Box::pin(async move {
            let slot = self.table.remove(policy.id(), key);
            call_ended(slot.as_deref()).await;
            let Some(slot) = slot else {
                return Ok(0);
            };
            let now = self.shared.now();
            if let Some(unspent) = slot.unspent(now)
                && !policy.limits().is_empty()
            {
                let op = unspent.op(&self.shared, policy.id(), now);
                self.shared.store.share(policy, key, op).await?;
            }
            Ok(0)
        })
    }

    /// The slot retires: a request still holding it spends nothing more.
    fn forget_slot<'a>(&'a self, policy: &'a Policy, key: &'a Key) -> Boxed<'a, ()> {
        Box::pin(async move {
            let slot = self.table.remove(policy.id(), key);
            call_ended(slot.as_deref()).await;
            if let Some(slot) = slot {
                slot.retire();
            }
        })
    }

    fn unblock(&self, policy: &Policy, key: &Key) {
        if let Some(slot) = self.table.find(policy.id(), key) {
            slot.forget_refusal();
        }
    }
}

impl Calls for ExactSlot {
    fn done(&self) -> &Notify {
        &self.done
    }

    fn calling(&self) -> bool {
        self.lock().reserving
    }

    fn round(&self) -> u64 {
        self.lock().round
    }
}

impl<S: SharedStore> Slot<S> for ExactSlot {
    /// The shared part alone: a reservation needs nothing else.
    type Mode = Arc<Shared<S>>;

    fn shared(mode: &Arc<Shared<S>>) -> &Shared<S> {
        mode
    }

    fn turn(&self, shared: &Arc<Shared<S>>, cost: u32, seen: Option<u64>) -> Turn {
        let now = shared.now();
        let mut holdings = self.lock();
        let (step, start) = holdings.decide(shared, now, cost);
        if let Some(returned) = holdings.returned.take() {
            give_back(shared, self, returned, now);
        }
        Turn::new(step, start, holdings.round, seen, holdings.failure.as_ref())
    }

    fn call(shared: Arc<Shared<S>>, slot: Arc<Self>, need: u32) -> impl Future<Output = ()> + Send {
        reserve(shared, slot, need)
    }

    fn spend(&self, now: u64, cost: u32) -> Option<(PolicyDecision, Option<u32>)> {
        ExactSlot::spend(self, now, cost)
    }
}
