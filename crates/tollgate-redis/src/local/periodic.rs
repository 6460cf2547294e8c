//! Periodic mode: instances count locally and report every interval.
//!
//! A key's slot holds Redis's last reading of the key (for a cost of 0,
//! after this instance's last report) and the units admitted since. An
//! instance admits while what Redis said remains, less what it admitted
//! since, covers the cost; every `sync_interval` it reports what it
//! admitted (charged in Redis whatever the state: those requests were
//! let through) and reads the key again. Reports carry a sequence number,
//! so a report sent again after a lost reply is not counted twice.

use super::answers;
use super::budget::{Budget, Budgeted, Locked, Signature};
use super::table::Evictable;
use super::{Inner, Step};
use crate::script::ShareOp;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tollgate::{Key, Policy, PolicyDecision};

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

#[derive(Default)]
pub(crate) struct Counts {
    /// Redis's last reading, and when it came (local ns).
    last: Option<(PolicyDecision, u64)>,
    /// Admitted here and not yet reported.
    pending: u64,
    /// A charge of the key was given back in Redis since the last reading
    /// was asked for: a refusal waits for a fresh one.
    refunded: bool,
    /// A report sent whose answer did not come: (sequence, units). Sent
    /// again, with the same sequence, until Redis answers.
    unconfirmed: Option<(u64, u64)>,
    /// The last sequence number used.
    sequence: u64,
    pub(crate) syncing: bool,
    /// A request came since the last sync: the key is worth reading again.
    touched: bool,
    /// Syncs ended so far; a waiter compares it with the count it saw.
    pub(crate) round: u64,
    /// Why the last sync failed, if it did.
    pub(crate) failure: Option<String>,
    /// The units the budget was last opened with.
    opened: u64,
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
                // Admitted here since Redis read what remains: all but what is
                // left. (The reading may be a moment older than the count, when
                // the lock holder opened the budget in between: the headers are
                // then a little off, never the count.)
                let since = reading.remaining().saturating_sub(left);
                answers::admitted_from(reading, now.saturating_sub(reading.at), |r| {
                    r.saturating_sub(since)
                })
            })
    }
}

impl Budgeted for Counts {
    fn reconcile(&mut self, left: u64) {
        self.pending += self.opened.saturating_sub(left);
        self.opened = left;
    }

    fn decision(&self) -> Option<PolicyDecision> {
        self.last.as_ref().map(|(decision, _)| decision.clone())
    }

    fn opening(&mut self) -> (u64, Option<Signature>) {
        let Some((decision, at)) = &self.last else {
            self.opened = 0;
            return (0, None);
        };
        let left = self.left(decision.merged.remaining());
        self.opened = left;
        let signature = Signature {
            at: *at,
            until: u64::MAX,
            low: None,
            receipt: 0,
        };
        (left, Some(signature))
    }
}

impl Counts {
    /// Decides a request of `cost` at `now`. Says whether a sync should
    /// start now (the key has never been read, or a refusal needs a fresh
    /// reading).
    pub(crate) fn decide(&mut self, now: u64, cost: u32) -> (Step, bool) {
        self.touched = true;
        let Some((last, at)) = &self.last else {
            let start = !self.syncing;
            self.syncing = true;
            return (Step::Wait, start);
        };
        let elapsed = now.saturating_sub(*at);
        if self.left(last.merged.remaining()) >= u64::from(cost) {
            let answer = answers::admitted(last, elapsed, 0, |r| {
                self.left(r).saturating_sub(u64::from(cost))
            });
            self.pending += u64::from(cost);
            return (Step::Answer(answer), false);
        }
        if let Some(failure) = &self.failure {
            // Redis is away and this instance has spent what it last read.
            return (Step::Fail(failure.clone()), false);
        }
        // Refused. A reading that misses what this instance admitted since
        // (a report is due) cannot say when a retry passes, and one taken
        // before a limit it refuses on was due to give quota back is out
        // of date: a fresh reading decides instead (one call, shared by
        // every request that waits for it). So a retry after the time a
        // refusal gave is decided on what Redis says then.
        let unreported = self.pending > 0 || self.unconfirmed.is_some();
        let out_of_date = last.each.iter().any(|d| {
            let short = self.left(d.remaining()) < u64::from(cost);
            let due = d.replenish_after_nanos();
            short && due > 0 && elapsed >= due
        });
        if unreported || out_of_date || self.refunded {
            let start = !self.syncing;
            self.syncing = true;
            return (Step::Wait, start);
        }
        let answer = answers::spent(last, elapsed, u64::from(cost), |r| self.left(r));
        (Step::Answer(answer), false)
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
            .map_or(0, |(_, at)| now.saturating_sub(*at))
    }

    /// Whether the periodic tick should sync this key; marks it syncing.
    pub(crate) fn due(&mut self) -> bool {
        let due = !self.syncing && (self.pending > 0 || self.unconfirmed.is_some() || self.touched);
        self.syncing |= due;
        due
    }
}

/// Reports what `slot`'s key admitted since its last report and reads the
/// key again, then wakes the requests waiting for a first reading.
pub(crate) async fn sync(inner: Arc<Inner>, slot: Arc<PeriodicSlot>) {
    let (spent, sequence) = {
        let mut counts = slot.lock();
        counts.touched = false;
        // Read after every refund that landed so far.
        counts.refunded = false;
        match counts.unconfirmed {
            Some(report) => (report.1, report.0),
            None if counts.pending > 0 => {
                counts.sequence += 1;
                let report = (counts.sequence, counts.pending);
                counts.unconfirmed = Some(report);
                counts.pending = 0;
                (report.1, report.0)
            }
            None => (0, 0),
        }
    };
    let op = ShareOp::Sync {
        spent,
        instance: super::holder(inner.instance, slot.policy.id()),
        sequence,
    };
    inner.stats.call();
    let result = inner.redis.share(&slot.policy, &slot.key, op).await;
    let now = inner.now();
    {
        let mut counts = slot.lock();
        counts.syncing = false;
        counts.round += 1;
        match result {
            Ok(reply) => {
                counts.unconfirmed = None;
                counts.last = Some((reply.decision, now));
                if counts.failure.take().is_some() {
                    tracing::info!(
                        policy = slot.policy.label(),
                        "local-first store: Redis answers again; counts reported"
                    );
                }
            }
            Err(error) => {
                if counts.failure.is_none() {
                    tracing::warn!(
                        policy = slot.policy.label(),
                        %error,
                        "local-first store: a sync failed; requests are decided with what \
                         this instance last read, then by the store-error behaviour"
                    );
                }
                counts.failure = Some(error.to_string());
            }
        }
    }
    slot.done.notify_waiters();
}

#[cfg(test)]
mod tests {
    use crate::RedisStore;
    use crate::script::ShareOp;
    use tollgate::{Key, NamedLimit, Policy};
    use tollgate_core::{Algorithm, Quota};
    use tollgate_tests::redis::RedisServer;

    /// A report sent again after a lost reply (same instance, same
    /// sequence) is not counted twice; the next report is.
    #[tokio::test]
    async fn a_report_sent_again_is_counted_once() {
        let server = RedisServer::start();
        let redis = RedisStore::connect(server.url()).await.unwrap();
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::SlidingWindowBuckets,
        ] {
            let quota: Quota = "100/day".parse().unwrap();
            let policy = Policy::new(vec![
                NamedLimit::new(algorithm.name(), quota).with_algorithm(algorithm),
            ]);
            let instance = super::super::holder(7, policy.id());
            let report = |spent, sequence| ShareOp::Sync {
                spent,
                instance,
                sequence,
            };
            let key = Key::from("k");
            let first = redis.share(&policy, &key, report(10, 1)).await.unwrap();
            assert_eq!((first.first, first.decision.merged.remaining()), (1, 90));
            let again = redis.share(&policy, &key, report(10, 1)).await.unwrap();
            assert_eq!((again.first, again.decision.merged.remaining()), (0, 90));
            let next = redis.share(&policy, &key, report(5, 2)).await.unwrap();
            assert_eq!(
                (next.first, next.decision.merged.remaining()),
                (1, 85),
                "{algorithm}"
            );
            // Another instance's (or policy's) report of the same sequence
            // counts.
            let other = ShareOp::Sync {
                spent: 5,
                instance: super::super::holder(8, policy.id()),
                sequence: 1,
            };
            let other = redis.share(&policy, &key, other).await.unwrap();
            assert_eq!(other.decision.merged.remaining(), 80, "{algorithm}");
        }
    }
}
