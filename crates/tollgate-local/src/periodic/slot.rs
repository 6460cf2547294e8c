//! Periodic mode: instances count locally and report every interval.
//!
//! A key's slot holds Redis's last reading of the key (for a cost of 0,
//! after this instance's last report), the share of it Redis gave this
//! instance, and the units admitted since. An instance admits while its
//! share, less what it admitted since, covers the cost; every
//! `sync_interval` it reports what it admitted (charged in Redis whatever
//! the state: those requests were let through), reads the key again and
//! takes a new share. Redis gives each instance its part of what remains
//! less what the others' shares may still spend (`give_share` in
//! share.lua), so the shares together never exceed what remains. Reports
//! carry a sequence number, so a report sent again after a lost reply is
//! not counted twice.

use crate::answers;
use crate::budget::{Budget, Budgeted, Locked, Signature};
use crate::shared::Step;
use crate::table::Evictable;

use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tollgate_store::{Key, Policy, PolicyDecision};

/// One key's local counts.
pub(crate) struct PeriodicSlot {
    state: Mutex<Counts>,
    /// What remains to admit here, spent without the lock.
    budget: Budget,
    /// Wakes the requests waiting for the key's first reading.
    pub(crate) done: Notify,
    pub(crate) policy: Arc<Policy>,
    pub(crate) key: Key,
}

/// Redis's last reading of a key, with the share it gave this instance.
pub(super) struct LastReading {
    pub(super) decision: PolicyDecision,
    /// When it came (local ns).
    pub(super) at: u64,
    /// What this instance may admit from it.
    pub(super) share: u64,
    /// The cost of the request it was asked for (0: none waited): a share
    /// too small for a larger request is asked again for that request.
    pub(super) asked: u32,
    /// Until when (local ns) the share may be spent: Redis counts it as
    /// the others' no longer, from the moment the sync was sent.
    pub(super) until: u64,
}

#[derive(Default)]
pub(crate) struct Counts {
    /// Redis's last reading.
    pub(super) last: Option<LastReading>,
    /// Admitted here and not yet reported.
    pub(super) pending: u64,
    /// A charge of the key was given back in Redis since the last reading
    /// was asked for: a refusal waits for a fresh one.
    pub(super) refunded: bool,
    /// A report sent whose answer did not come: (sequence, units). Sent
    /// again, with the same sequence, until Redis answers.
    pub(super) unconfirmed: Option<(u64, u64)>,
    /// The last sequence number used.
    pub(super) sequence: u64,
    pub(crate) syncing: bool,
    /// A request came since the last sync: the key is worth reading again.
    pub(super) touched: bool,
    /// Syncs ended so far; a waiter compares it with the count it saw.
    pub(crate) round: u64,
    /// Why the last sync failed, if it did.
    pub(crate) failure: Option<String>,
    /// The units the budget was last opened with.
    opened: u64,
    /// The largest cost a request waits with: the next sync asks a share
    /// that covers it.
    pub(super) wanted: u32,
    /// How many instances held a live share at the last reading.
    pub(crate) sharing: u64,
    /// The units asked for here since the last sync was sent: admitted,
    /// or refused only by this instance's share (refunds do not take them
    /// off): the rate the next sync sizes the share by.
    pub(super) demand: u64,
    /// When the last sync was sent (local ns; 0: never).
    pub(super) sent: u64,
}

impl Evictable for PeriodicSlot {
    fn settled(&self) -> bool {
        let counts = self.lock();
        counts.pending == 0 && counts.unconfirmed.is_none() && !counts.syncing
    }

    fn is(&self, policy: u64, key: &Key) -> bool {
        self.policy.id() == policy && self.key == *key
    }
}

impl PeriodicSlot {
    pub(crate) fn new(policy: Arc<Policy>, key: Key) -> Self {
        PeriodicSlot {
            state: Mutex::default(),
            budget: Budget::default(),
            done: Notify::new(),
            policy,
            key,
        }
    }

    pub(crate) fn lock(&self) -> Locked<'_, Counts> {
        Locked::new(&self.state, &self.budget)
    }

    /// Gives back `cost` units admitted here, as far as they are not yet
    /// reported (taken off the next report: exact, as if the requests had
    /// not come); says how many are left to give back, reported already
    /// (or on their way), which Redis must give back itself: only Redis
    /// knows whether they still count (a key in debt, a window ended), so
    /// they are never put back here.
    ///
    /// And, when some are left and a report is unconfirmed (on its way, or
    /// to be sent again after a failure), the round the refund waits for
    /// before it goes to Redis: that report may carry them, and given back
    /// before it landed they would find nothing to take off, then be
    /// charged. The sync that carries it is the next to end (one is in
    /// flight, or the next starts with it). A refund whose units Redis has
    /// confirmed waits for nothing.
    pub(crate) fn give_back(&self, cost: u32) -> (u32, Option<u64>) {
        let mut counts = self.lock();
        let unreported = u64::from(cost).min(counts.pending);
        counts.pending -= unreported;
        // At most `cost`, a u32.
        let reported = cost - unreported as u32;
        let wait = (reported > 0 && counts.unconfirmed.is_some()).then_some(counts.round);
        (reported, wait)
    }

    /// A charge of the key was given back in Redis: this instance's next
    /// refusal waits for a fresh reading, which shows it.
    pub(crate) fn refunded(&self) {
        let mut counts = self.lock();
        counts.refunded = true;
        counts.touched = true;
    }

    /// Charges `cost` units more (pay after: a cost learned once the
    /// request was over), whatever remains: added to the next report,
    /// which Redis charges whatever the state. This instance counts them
    /// at once.
    pub(crate) fn charge(&self, cost: u32) {
        let mut counts = self.lock();
        counts.pending += u64::from(cost);
        counts.touched = true;
    }

    /// A peek Redis answered for the key, counting what this instance
    /// admitted and has not reported yet (or whose report is on its way),
    /// and what it was given back since it reported it: what this instance
    /// would decide with. A report that landed in Redis before the peek
    /// read, and is not confirmed here yet, is counted twice: the peek
    /// then shows less than remains, never more.
    ///
    /// `before`: what was unreported when the peek was sent (see
    /// [`unreported`](Self::unreported)). A sync whose report reached Redis
    /// after the peek read, and whose answer came before the peek's, has
    /// confirmed those units here: they are taken off all the same.
    pub(crate) fn counted(&self, decision: &PolicyDecision, before: u64) -> PolicyDecision {
        let counts = self.lock();
        let unreported = counts.unreported().max(before);
        answers::counted(decision, |r| r.saturating_sub(unreported))
    }

    /// What this instance admitted (or was debited) that Redis's counts
    /// may not show yet: not reported, or reported and not confirmed.
    pub(crate) fn unreported(&self) -> u64 {
        self.lock().unreported()
    }

    /// A request of `cost` at `now` admitted from what remains without the
    /// lock; `None`: the request needs the lock.
    pub(crate) fn spend(&self, now: u64, cost: u32) -> Option<PolicyDecision> {
        self.budget
            .try_spend(now, u64::from(cost), |reading, left| {
                // Admitted here since Redis read what remains: all of the
                // share but what is left. (The reading may be a moment older than the count, when
                // the lock holder opened the budget in between: the headers are
                // then a little off, never the count.)
                let since = reading.base.saturating_sub(left);
                answers::admitted_from(reading, now.saturating_sub(reading.at), |r| {
                    r.saturating_sub(since)
                })
            })
    }
}

impl Budgeted for Counts {
    fn reconcile(&mut self, left: u64) {
        let spent = self.opened.saturating_sub(left);
        self.pending += spent;
        self.demand = self.demand.saturating_add(spent);
        self.opened = left;
    }

    fn decision(&self) -> Option<PolicyDecision> {
        self.last.as_ref().map(|last| last.decision.clone())
    }

    fn opening(&mut self) -> (u64, Option<Signature>) {
        let Some(last) = &self.last else {
            self.opened = 0;
            return (0, None);
        };
        let left = self.spendable(last);
        self.opened = left;
        let signature = Signature {
            at: last.at,
            until: last.until,
            low: None,
            receipt: 0,
            base: last.share,
        };
        (left, Some(signature))
    }
}

impl Counts {
    /// Decides a request of `cost` at `now`. Says whether a sync should
    /// start now (the key has never been read, or a refusal needs a fresh
    /// reading). `interval`: the sync interval (ns), when a request that
    /// only this instance's share refuses may retry.
    pub(crate) fn decide(&mut self, now: u64, cost: u32, interval: u64) -> (Step, bool) {
        self.touched = true;
        let Some(last) = &self.last else {
            return self.wait(cost);
        };
        let elapsed = now.saturating_sub(last.at);
        let live = now < last.until;
        let units = u64::from(cost);
        if live && self.spendable(last) >= units {
            let answer = answers::admitted(&last.decision, elapsed, 0, |r| {
                self.left(r).saturating_sub(units)
            });
            self.pending += units;
            self.demand = self.demand.saturating_add(units);
            return (Step::Answer(answer), false);
        }
        if let Some(failure) = &self.failure {
            // Redis is away and this instance has spent its share.
            return (Step::Fail(failure.clone()), false);
        }
        // Refused. A reading that misses what this instance admitted since
        // (a report is due) cannot say when a retry passes, and one taken
        // before a limit it refuses on was due to give quota back is out
        // of date: a fresh reading decides instead (one call, shared by
        // every request that waits for it). So a retry after the time a
        // refusal gave is decided on what Redis says then. The same when
        // the limits would take the request and the share would not, if
        // the share lapsed or was asked for a smaller cost.
        let unreported = self.pending > 0 || self.unconfirmed.is_some();
        let out_of_date = last.decision.each().iter().any(|d| {
            let short = self.left(d.remaining()) < units;
            let due = d.replenish_after_nanos();
            short && due > 0 && elapsed >= due
        });
        let limits_allow = self.left(last.decision.merged().remaining()) >= units;
        // And when only the share refuses and the reading is half an
        // interval old: the others' syncs since may have left some free
        // (an idle one gives its share back when this one wants it), so a
        // refusal of that kind lasts about an interval, not two.
        let share_short = limits_allow && (!live || last.asked < cost || elapsed >= interval / 2);
        if unreported || out_of_date || self.refunded || share_short {
            return self.wait(cost);
        }
        let share = self.spendable(last);
        let answer = answers::spent(&last.decision, elapsed, units, |r| self.left(r).min(share));
        if limits_allow {
            // The next reading may find some of it back, and asks for it
            // (what this instance wants counts this request).
            self.demand = self.demand.saturating_add(units);
            return (
                Step::Answer(answers::held_elsewhere(answer, interval)),
                false,
            );
        }
        (Step::Answer(answer), false)
    }

    /// The request waits for a sync that asks a share covering `cost`;
    /// says whether to start it.
    fn wait(&mut self, cost: u32) -> (Step, bool) {
        self.wanted = self.wanted.max(cost);
        let start = !self.syncing;
        self.syncing = true;
        (Step::Wait, start)
    }

    /// What this instance may still admit of its share of `last`.
    pub(super) fn spendable(&self, last: &LastReading) -> u64 {
        last.share.saturating_sub(self.unreported())
    }

    /// What this instance may still admit of `remaining`, Redis's last
    /// reading: less what it admitted that the reading does not know of.
    fn left(&self, remaining: u64) -> u64 {
        remaining.saturating_sub(self.unreported())
    }

    /// Admitted here and not in Redis's last reading.
    fn unreported(&self) -> u64 {
        self.pending
            .saturating_add(self.unconfirmed.map_or(0, |(_, units)| units))
    }

    /// How long ago (ns) Redis last read the key; 0 if never.
    pub(crate) fn age(&self, now: u64) -> u64 {
        self.last
            .as_ref()
            .map_or(0, |last| now.saturating_sub(last.at))
    }

    /// Whether the periodic tick should sync this key at `now`; marks it
    /// syncing. A key with requests since the last sync is due; so is one
    /// without any that still holds some of a live share: its sync gives
    /// that back (see [`sync`](super::sync::sync)).
    pub(crate) fn due(&mut self, now: u64) -> bool {
        let holding = self
            .last
            .as_ref()
            .is_some_and(|last| now < last.until && self.spendable(last) > 0);
        let due = !self.syncing
            && (self.pending > 0 || self.unconfirmed.is_some() || self.touched || holding);
        self.syncing |= due;
        due
    }

    /// What this instance wants to spend until its next sync, `now`, for a
    /// sync every `interval` (ns): twice what it was asked for since its
    /// last sync, at that rate over an interval (a sync sooner than half
    /// an interval counts as that long: a share spent in a burst is
    /// followed by one four times as large, not without bound). 0 when
    /// nothing was asked.
    pub(super) fn want(&self, now: u64, interval: u64) -> u64 {
        if self.demand == 0 {
            return 0;
        }
        let since = now.saturating_sub(self.sent).max(interval / 2).max(1);
        let want = u128::from(self.demand) * 2 * u128::from(interval.max(1));
        u64::try_from(want.div_ceil(u128::from(since))).unwrap_or(u64::MAX)
    }
}
