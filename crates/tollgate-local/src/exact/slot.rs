//! Exact mode: an instance admits only capacity it reserved from Redis.
//!
//! A key's slot holds grants (units Redis charged for this instance, and
//! when they lapse), Redis's last answer (for the headers) and, after Redis
//! refused even one request's cost, that refusal until its retry time. A
//! request spends held units without a call; one that finds too few waits
//! for the reservation in flight (one call shared by every waiting request)
//! or starts one. When the held units run low a reservation starts ahead of
//! need, so that under steady load requests rarely wait.

use crate::answers;
use crate::budget::{Budget, Budgeted, Locked, Signature};
use crate::shared::{Shared, Step, holder};
use crate::table::Evictable;
use crate::{ShareOp, SharedStore};
use smallvec::SmallVec;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tollgate_store::{Key, Policy, PolicyDecision};

/// One key's reservations.
pub(crate) struct ExactSlot {
    state: Mutex<Holdings>,
    /// The held units that requests spend without the lock.
    budget: Budget,
    /// Wakes the requests waiting for a reservation when it ends.
    pub(crate) done: Notify,
    pub(crate) policy: Arc<Policy>,
    pub(crate) key: Key,
}

/// Units granted together, spendable until `lapse_at` (local ns): the end
/// of the window they were charged in, for the window limits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Grant {
    pub(super) units: u64,
    pub(super) lapse_at: u64,
    /// When (local ns) the reservation that granted them was sent: they
    /// were charged in Redis no earlier.
    pub(super) sent: u64,
}

/// Units dropped past their hold, unspent, to give back in Redis.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Returned {
    units: u64,
    /// The reservation whose count of held units holds them.
    recorded: u64,
    /// When (local ns) the earliest of them was granted.
    since: u64,
}

impl Returned {
    /// `share.lua`'s refund that gives them back at `now`, for the holder
    /// of `policy` in `inner`.
    pub(crate) fn op<S: SharedStore>(&self, inner: &Shared<S>, policy: u64, now: u64) -> ShareOp {
        ShareOp::Refund {
            cost: u32::try_from(self.units).unwrap_or(u32::MAX),
            holder: holder(inner.instance, policy),
            report: self.recorded,
            // Charged no earlier than granted: where Redis no longer has
            // the count nor its record of what was spent, it gives back
            // only what of a charge at that time is still ahead, never
            // someone else's.
            ago_micros: now.saturating_sub(self.since) / 1_000,
            resets: SmallVec::new(),
        }
    }
}

/// Redis refused `cost`: so is any request of at least that cost until
/// `until` (local ns).
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) until: u64,
    pub(super) cost: u32,
    pub(super) decision: PolicyDecision,
    pub(super) at: u64,
}

#[derive(Default)]
pub(crate) struct Holdings {
    /// Oldest lapse first.
    pub(super) grants: SmallVec<[Grant; 2]>,
    pub(super) refusal: Option<Refusal>,
    /// Redis's answer to the last grant, and when it came (local ns).
    pub(super) last: Option<(PolicyDecision, u64)>,
    /// Until when (local ns) Redis counts what this slot holds as held (for
    /// the limits that count held units: GCRA and the continuous token
    /// bucket); nothing is spent after it. `u64::MAX` when no limit does.
    pub(super) held_until: u64,
    /// A reservation is in flight.
    pub(crate) reserving: bool,
    /// Reservations ended so far; a waiter compares it with the count it saw.
    pub(crate) round: u64,
    /// Why the last reservation failed, if it did.
    pub(crate) failure: Option<String>,
    /// Units spent since `rate_since` (local ns): the recent rate, which
    /// sizes the next reservation.
    pub(super) spent: u64,
    pub(super) rate_since: u64,
    /// The size of the last grant.
    pub(super) last_grant: u64,
    /// The least the last grant had to be (the cost of the request that
    /// waited for it; 0 ahead of need).
    pub(super) last_need: u64,
    /// The number of the last reservation whose count of held units Redis
    /// recorded (it answered, and did not refuse); 0 before the first.
    pub(super) recorded: u64,
    /// Units dropped past their hold, unspent, to give back in Redis
    /// (see [`give_back`](super::reserve::give_back)), for the lock's holder to send.
    pub(crate) returned: Option<Returned>,
    /// A task watches the hold (see `reserve::watch_hold`).
    pub(super) watching: bool,
    /// The units the budget was last opened with.
    opened: u64,
    /// When (local ns) a charge of this key was last given back in Redis:
    /// a refusal to a reservation sent before it may be untrue, and is
    /// not remembered.
    pub(super) refunded_at: u64,
    /// The number of the last reservation sent (see
    /// [`answers::receipt_word`]); 0 before the first.
    pub(super) report: u64,
    /// When the script of the newest answer applied to `last` ran (the
    /// server's µs): an older answer arriving later is not applied.
    pub(super) last_server: u64,
}

impl Evictable for ExactSlot {
    fn settled(&self) -> bool {
        // Held units are lost with the slot, but owe Redis nothing: they
        // were charged when granted.
        !self.lock().reserving
    }

    fn is(&self, policy: u64, key: &Key) -> bool {
        self.policy.id() == policy && self.key == *key
    }
}

impl ExactSlot {
    pub(crate) fn new(policy: Arc<Policy>, key: Key) -> Self {
        ExactSlot {
            state: Mutex::default(),
            budget: Budget::default(),
            done: Notify::new(),
            policy,
            key,
        }
    }

    /// Drops the refusal Redis made, if one is remembered (an operator's
    /// unblock): the next request reserves again.
    pub(crate) fn forget_refusal(&self) {
        self.lock().refusal = None;
    }

    pub(crate) fn lock(&self) -> Locked<'_, Holdings> {
        Locked::new(&self.state, &self.budget)
    }

    /// Takes what this instance was granted of the key and no request
    /// spent at `now` (charged in Redis already, used by no request), to
    /// give back (see [`give_back`](super::reserve::give_back)): none when Redis recorded no count of
    /// them. A window's grant after its window ended is not counted (its
    /// units are not the window Redis counts now); a grant past its hold
    /// is (the hold only keeps the instance from spending it: Redis may
    /// still count its units, unused). What a carry gives back before it
    /// reads Redis; the slot keeps nothing after it.
    pub(crate) fn unspent(&self, now: u64) -> Option<Returned> {
        let mut state = self.lock();
        let unspent = state.grants.iter().filter(|g| g.lapse_at > now);
        // A window's units are given back in the window counted now, theirs
        // (they lapse at its end, `now` is before it); a bucket's bounded
        // by when they were granted.
        let since = match unspent.clone().any(|g| g.lapse_at != u64::MAX) {
            true => now,
            false => unspent.clone().map(|g| g.sent).min().unwrap_or(now),
        };
        let units: u64 = unspent.map(|g| g.units).sum();
        state.retire();
        (units > 0 && state.recorded > 0).then_some(Returned {
            units,
            recorded: state.recorded,
            since,
        })
    }

    /// The slot is out of its table (a carry, a reset): nothing it holds
    /// is spent or given back later (a request still at it reserves
    /// again).
    pub(crate) fn retire(&self) {
        self.lock().retire();
    }

    /// Spends up to `cost` of the units held (not lapsed at `now`) for a
    /// cost learned after the request (pay after), as an admission here
    /// would; says how many. Redis already counts them charged; the rest
    /// of the cost is Redis's to charge.
    pub(crate) fn spend_held(&self, now: u64, cost: u32) -> u32 {
        let mut state = self.lock();
        let held_until = state.held_until;
        let held: u64 = state
            .grants
            .iter()
            .filter(|g| g.lapse_at.min(held_until) > now)
            .map(|g| g.units)
            .sum();
        let units = held.min(u64::from(cost));
        if units > 0 {
            let state = &mut *state;
            state.grants.retain(|g| g.lapse_at.min(held_until) > now);
            take(&mut state.grants, units);
            state.spent = state.spent.saturating_add(units);
        }
        // At most `cost`, a u32.
        units as u32
    }

    /// A charge of the key was given back in Redis at `now`: the refusal
    /// remembered may no longer hold (the next request asks Redis). Says
    /// the round of the reservation in flight, if one is: the refund's
    /// reading must wait for it to land (see [`read_refund`]).
    ///
    /// [`read_refund`]: Self::read_refund
    pub(crate) fn refunded(&self, now: u64) -> Option<u64> {
        let mut state = self.lock();
        state.refunded_at = state.refunded_at.max(now.saturating_add(1));
        state.refusal = None;
        state.reserving.then_some(state.round)
    }

    /// Takes the refund's reading (`share.lua`'s: what remains after it,
    /// and when its script ran, the server's µs), which came at `at`: what
    /// remains is Redis's again for the answers made here, unless a newer
    /// answer came first.
    ///
    /// Called once the reservation in flight when the refund's reply came,
    /// if any, has landed: it may have run in Redis before the refund, so
    /// that the reading counts its grant spent while the slot does not
    /// hold it yet, and the answers would say up to that grant less than
    /// remains. Landed, its grant is held (the reading then holds), or it
    /// ran after the refund and its own answer, newer, stands.
    pub(crate) fn read_refund(&self, at: u64, (decision, server): (PolicyDecision, u64)) {
        let mut state = self.lock();
        if state.last.is_some() && server >= state.last_server {
            state.last = Some((decision, at));
            state.last_server = server;
        }
    }

    /// A request of `cost` at `now` decided from held units without the
    /// lock: the answer, and whether a reservation ahead of need was
    /// started (its argument). `None`: the request needs the lock.
    pub(crate) fn spend(&self, now: u64, cost: u32) -> Option<(PolicyDecision, Option<u32>)> {
        let (answer, low) = self
            .budget
            .try_spend(now, u64::from(cost), |reading, left| {
                let answer = answers::admitted_from(reading, now.saturating_sub(reading.at), |r| {
                    r.saturating_add(left)
                });
                (answer, reading.is_low(left))
            })?;
        let start = if low { self.lock().ahead(now) } else { None };
        Some((answer, start))
    }
}

impl Budgeted for Holdings {
    fn reconcile(&mut self, left: u64) {
        let spent = self.opened.saturating_sub(left);
        self.opened = left;
        if spent > 0 {
            take(&mut self.grants, spent);
            self.spent = self.spent.saturating_add(spent);
        }
    }

    fn decision(&self) -> Option<PolicyDecision> {
        self.last.as_ref().map(|(decision, _)| decision.clone())
    }

    fn opening(&mut self) -> (u64, Option<Signature>) {
        let Some((_, at)) = &self.last else {
            self.opened = 0;
            return (0, None);
        };
        let held: u64 = self.grants.iter().map(|g| g.units).sum();
        let until = self
            .grants
            .iter()
            .map(|g| g.lapse_at)
            .min()
            .unwrap_or(u64::MAX)
            .min(self.held_until);
        // Low: time to reserve ahead, unless one is on its way, Redis has
        // just said there is none, or none starts ahead of need (see
        // `ahead`): then no spend here needs the lock to ask.
        let ahead = !self.reserving && self.refusal.is_none() && self.last_grant > self.last_need;
        let low = ahead.then_some(self.last_grant / 4);
        let signature = Signature {
            at: *at,
            until,
            low,
            receipt: answers::receipt_word(self.report),
            base: 0,
        };
        self.opened = held;
        (held, Some(signature))
    }
}

impl Holdings {
    /// Decides a request of `cost` at `now` from what the slot holds, and
    /// says whether a reservation should start: for this request (it then
    /// waits) or ahead of need.
    pub(crate) fn decide<S: SharedStore>(
        &mut self,
        inner: &Shared<S>,
        now: u64,
        cost: u32,
    ) -> (Step, Option<u32>) {
        // A reservation in flight may count the units in Redis again
        // (they were spendable when it was sent): then none is given back.
        self.drop_lapsed(inner, now, !self.reserving);
        let held: u64 = self.grants.iter().map(|g| g.units).sum();
        if let Some((last, at)) = &self.last
            && held >= u64::from(cost)
        {
            take(&mut self.grants, u64::from(cost));
            self.spent = self.spent.saturating_add(u64::from(cost));
            let left = held - u64::from(cost);
            let answer = answers::admitted(
                last,
                now.saturating_sub(*at),
                answers::receipt_word(self.report),
                |r| r.saturating_add(left),
            );
            let ahead = if left.saturating_mul(4) <= self.last_grant {
                self.ahead(now)
            } else {
                None
            };
            return (Step::Answer(answer), ahead);
        }
        if let Some(refusal) = &self.refusal
            && now < refusal.until
            && cost >= refusal.cost
        {
            let answer = answers::refused(&refusal.decision, now.saturating_sub(refusal.at));
            inner.stats.blocked("exact");
            return (Step::Answer(answer), None);
        }
        let start = (!self.reserving).then(|| self.start(cost));
        (Step::Wait, start)
    }

    /// Forgets every grant, and units to give back.
    fn retire(&mut self) {
        self.grants.clear();
        self.returned = None;
    }

    /// Drops the grants lapsed at `now` (their window ended, or their
    /// hold). With `returning`, the units dropped past their hold are
    /// marked to be given back in Redis (see [`give_back`](super::reserve::give_back)) when no limit
    /// of the policy has a window (a window's units belong to it: given
    /// back after it ended they would land in the next one), and Redis
    /// recorded a count that holds them.
    pub(super) fn drop_lapsed<S: SharedStore>(
        &mut self,
        inner: &Shared<S>,
        now: u64,
        returning: bool,
    ) {
        let held_until = self.held_until;
        let lapsed: u64 = self
            .grants
            .iter()
            .filter(|g| g.lapse_at.min(held_until) <= now)
            .map(|g| g.units)
            .sum();
        if lapsed == 0 {
            return;
        }
        let unheld = self
            .grants
            .iter()
            .filter(|g| g.lapse_at == u64::MAX && held_until <= now);
        let since = unheld.clone().map(|g| g.sent).min().unwrap_or(now);
        let unheld: u64 = unheld.map(|g| g.units).sum();
        self.grants.retain(|g| g.lapse_at.min(held_until) > now);
        inner.stats.lapsed(lapsed);
        if returning && unheld > 0 && self.recorded > 0 {
            let returned = self.returned.get_or_insert(Returned {
                units: 0,
                recorded: self.recorded,
                since,
            });
            returned.units = returned.units.saturating_add(unheld);
            returned.since = returned.since.min(since);
        }
    }

    fn start(&mut self, need: u32) -> u32 {
        self.reserving = true;
        need
    }

    /// Starts a reservation ahead of need (the held units run low), unless
    /// one is on its way or Redis has just said there is none.
    fn ahead(&mut self, now: u64) -> Option<u32> {
        if self.reserving || self.refusal.as_ref().is_some_and(|r| now < r.until) {
            return None;
        }
        // The last grant was no more than the request that waited for it:
        // the key is spent too slowly here for units reserved now to be
        // spent before they lapse, or it is near its limit (a fan-out
        // share is below the request's cost). Units held unspent would be
        // charged and lost to every instance: the next request reserves
        // for itself instead.
        if self.last_grant <= self.last_need {
            return None;
        }
        self.refusal = None;
        // Ahead of need: none is needed, and near the limit (a fan-out
        // share below one unit) none is held back from the other instances.
        Some(self.start(0))
    }

    /// How many units to ask for: enough for `ahead` nanoseconds at the
    /// rate the key was spent at since the last grant, at least `need`
    /// and one, at most `max`.
    pub(super) fn want(&self, now: u64, need: u32, ahead: u64, max: u64) -> u64 {
        let elapsed = now.saturating_sub(self.rate_since).max(1_000_000);
        let at_rate = u128::from(self.spent) * u128::from(ahead) / u128::from(elapsed);
        let least = u64::from(need.max(1));
        u64::try_from(at_rate)
            .unwrap_or(u64::MAX)
            .clamp(least, max.max(least))
    }
}

/// Spends `units` from the grants that lapse first.
fn take(grants: &mut SmallVec<[Grant; 2]>, mut units: u64) {
    for grant in grants.iter_mut() {
        let taken = grant.units.min(units);
        grant.units -= taken;
        units -= taken;
    }
    grants.retain(|g| g.units > 0);
}
