//! A key's units that requests may spend without its slot's lock.
//!
//! A slot's state lives under a mutex; the common request — units are
//! there, nothing to start — needs none of it. The slot puts what may be
//! spent now in a [`Budget`]: a count of units in one atomic word, and the
//! reading the answers are made from. A request takes its cost from the
//! count with a compare-and-swap and answers from the reading. Anything
//! else (too few units, a lapse, a call to start) goes to the slot's lock,
//! which first [closes](Budget::close) the budget: from then on only the
//! lock's holder changes the count, until it [opens](Budget::open) it
//! again with what the slot then holds.
//!
//! The reading is kept in atomics behind a sequence number (a seqlock):
//! a request copies it and checks that the number did not move meanwhile.
//! It changes only when Redis answers, so a request almost never retries,
//! and copying a few words costs less than any shared pointer's bookkeeping.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Mutex, MutexGuard, PoisonError};
use tollgate_core::Decision;
use tollgate_store::PolicyDecision;

/// Set in the word while the slot's lock holder reconciles.
const CLOSED: u64 = 1 << 63;

/// The most limits a policy may have for its requests to be decided
/// without the lock; a policy with more is decided under it.
pub(crate) const MAX_LIMITS: usize = 4;

/// `low` when there is none.
const NO_LOW: u64 = u64::MAX;

/// What requests answer from, as the slot last opened the budget.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Reading {
    /// When Redis's answer came (local ns).
    pub(crate) at: u64,
    /// The units may be spent until then (local ns); later, the slot
    /// decides (a grant lapses).
    pub(crate) until: u64,
    /// A request that leaves this many units or fewer also tells the slot
    /// (exact mode: time to reserve ahead); `None`: never.
    pub(crate) low: Option<u64>,
    /// The word of the receipt an admission answered from this reading
    /// carries (exact mode: naming the last reservation sent; 0: none; see
    /// `answers::receipt_word`).
    pub(crate) receipt: u64,
    /// Periodic mode: the units the slot may spend from this reading (its
    /// share), which the budget's count falls from as requests spend
    /// (exact mode: 0, unused).
    pub(crate) base: u64,
    /// Each limit as Redis last answered, in the policy's order.
    pub(crate) limits: [LimitReading; MAX_LIMITS],
    /// How many of `limits` there are.
    pub(crate) count: usize,
}

/// What an admission's answer takes from one limit's last decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LimitReading {
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) reset_after_nanos: u64,
    pub(crate) replenish_after_nanos: u64,
}

/// What tells readings apart, short of the limits' figures: a slot opens
/// its budget after every request its lock decides (a refusal, under a
/// flood), and the reading is rewritten only when this changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Signature {
    /// When Redis's answer came (local ns): a new answer, a new reading.
    pub(crate) at: u64,
    /// See [`Reading::until`].
    pub(crate) until: u64,
    /// See [`Reading::low`].
    pub(crate) low: Option<u64>,
    /// See [`Reading::receipt`].
    pub(crate) receipt: u64,
    /// See [`Reading::base`].
    pub(crate) base: u64,
}

impl Reading {
    /// The limits read.
    pub(crate) fn limits(&self) -> &[LimitReading] {
        &self.limits[..self.count]
    }
}

/// The reading, one word per figure.
#[derive(Default)]
struct Words {
    at: AtomicU64,
    until: AtomicU64,
    low: AtomicU64,
    receipt: AtomicU64,
    base: AtomicU64,
    count: AtomicU64,
    limits: [[AtomicU64; 4]; MAX_LIMITS],
}

/// Units spendable without the slot's lock, and the reading to answer
/// from.
///
/// The count and the reading sit on cache lines of their own: every
/// request writes the count, and on a line it shared with the reading each
/// request's copy of the reading missed the cache after another core's
/// spend (measured: a quarter of a local decision's time, on 2 cores).
#[derive(Default)]
pub(crate) struct Budget {
    word: Line<AtomicU64>,
    seqlock: Line<Seqlock>,
}

/// The reading behind its sequence number.
#[derive(Default)]
struct Seqlock {
    /// Odd while the reading is being rewritten.
    sequence: AtomicU64,
    reading: Words,
}

/// `T` alone on its cache lines (128 bytes: two lines, as adjacent-line
/// prefetchers pair them).
#[derive(Default)]
#[repr(align(128))]
struct Line<T>(T);

impl<T> Deref for Line<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl Reading {
    /// Whether a spend that left `left` units should be told to the slot
    /// (see [`Reading::low`]).
    pub(crate) fn is_low(&self, left: u64) -> bool {
        self.low.is_some_and(|low| left <= low)
    }
}

impl Budget {
    /// Takes `cost` units at `now` if the budget is open, its units still
    /// spendable and enough, and answers with `answer` (given the reading
    /// and the units left), made where the reading was copied to rather
    /// than moved out.
    #[inline]
    pub(crate) fn try_spend<R>(
        &self,
        now: u64,
        cost: u64,
        answer: impl FnOnce(&Reading, u64) -> R,
    ) -> Option<R> {
        let reading = self.read()?;
        if now >= reading.until {
            return None;
        }
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & CLOSED != 0 || word < cost {
                return None;
            }
            match self.word.compare_exchange_weak(
                word,
                word - cost,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(answer(&reading, word - cost)),
                Err(seen) => word = seen,
            }
        }
    }

    /// A consistent copy of the reading; `None` when there is none, or it
    /// is being rewritten right now (the request then takes the lock).
    #[inline]
    fn read(&self) -> Option<Reading> {
        let before = self.seqlock.sequence.load(Ordering::Acquire);
        if before & 1 == 1 {
            return None;
        }
        let words = &self.seqlock.reading;
        let count = (words.count.load(Ordering::Relaxed) as usize).min(MAX_LIMITS);
        let mut reading = Reading {
            at: words.at.load(Ordering::Relaxed),
            until: words.until.load(Ordering::Relaxed),
            low: Some(words.low.load(Ordering::Relaxed)).filter(|&low| low != NO_LOW),
            receipt: words.receipt.load(Ordering::Relaxed),
            base: words.base.load(Ordering::Relaxed),
            count,
            ..Reading::default()
        };
        for (limit, w) in reading.limits.iter_mut().zip(&words.limits).take(count) {
            *limit = LimitReading {
                limit: w[0].load(Ordering::Relaxed),
                remaining: w[1].load(Ordering::Relaxed),
                reset_after_nanos: w[2].load(Ordering::Relaxed),
                replenish_after_nanos: w[3].load(Ordering::Relaxed),
            };
        }
        // The copy's loads complete before the sequence is read again.
        fence(Ordering::Acquire);
        (count > 0 && self.seqlock.sequence.load(Ordering::Relaxed) == before).then_some(reading)
    }

    /// Closes the budget; returns the units it held. Called under the
    /// slot's lock, which then owns the count until [`open`](Self::open).
    pub(crate) fn close(&self) -> u64 {
        self.word.fetch_or(CLOSED, Ordering::AcqRel) & !CLOSED
    }

    /// Opens the budget with `units` and the reading `signature` names
    /// (`None`: nothing to answer from, so nothing is spent here); the
    /// limits' figures are taken from `decision` only when the reading
    /// changed. Called under the slot's lock, the only writer.
    pub(crate) fn open(
        &self,
        units: u64,
        signature: Option<Signature>,
        decision: impl FnOnce() -> Option<PolicyDecision>,
    ) {
        let written = self.written();
        let units = match signature {
            // A policy of more limits than a reading holds is decided
            // under the lock.
            Some(signature) if signature != written.unwrap_or(NEVER_WRITTEN) => {
                match decision().filter(|d| !d.each().is_empty() && d.each().len() <= MAX_LIMITS) {
                    Some(decision) => {
                        self.write(signature, decision.each());
                        units
                    }
                    None => {
                        self.write_none();
                        0
                    }
                }
            }
            Some(_) if self.seqlock.reading.count.load(Ordering::Relaxed) > 0 => units,
            Some(_) => 0,
            None => {
                if written.is_some() {
                    self.write_none();
                }
                0
            }
        };
        self.word.store(units.min(CLOSED - 1), Ordering::Release);
    }

    /// The signature of the reading written last (read by the writer).
    fn written(&self) -> Option<Signature> {
        let words = &self.seqlock.reading;
        let at = words.at.load(Ordering::Relaxed);
        (words.count.load(Ordering::Relaxed) > 0 || at != 0).then(|| Signature {
            at,
            until: words.until.load(Ordering::Relaxed),
            low: Some(words.low.load(Ordering::Relaxed)).filter(|&low| low != NO_LOW),
            receipt: words.receipt.load(Ordering::Relaxed),
            base: words.base.load(Ordering::Relaxed),
        })
    }

    fn write(&self, signature: Signature, each: &[Decision]) {
        let words = &self.seqlock.reading;
        self.begin_write();
        words.at.store(signature.at, Ordering::Relaxed);
        words.until.store(signature.until, Ordering::Relaxed);
        words
            .low
            .store(signature.low.unwrap_or(NO_LOW), Ordering::Relaxed);
        words.receipt.store(signature.receipt, Ordering::Relaxed);
        words.base.store(signature.base, Ordering::Relaxed);
        words.count.store(each.len() as u64, Ordering::Relaxed);
        for (w, d) in words.limits.iter().zip(each) {
            w[0].store(d.limit(), Ordering::Relaxed);
            w[1].store(d.remaining(), Ordering::Relaxed);
            w[2].store(d.reset_after_nanos(), Ordering::Relaxed);
            w[3].store(d.replenish_after_nanos(), Ordering::Relaxed);
        }
        self.end_write();
    }

    fn write_none(&self) {
        self.begin_write();
        self.seqlock.reading.count.store(0, Ordering::Relaxed);
        self.seqlock.reading.at.store(0, Ordering::Relaxed);
        self.end_write();
    }

    fn begin_write(&self) {
        let sequence = self.seqlock.sequence.load(Ordering::Relaxed);
        self.seqlock.sequence.store(sequence + 1, Ordering::Relaxed);
        // The odd number is seen before any figure changes.
        fence(Ordering::Release);
    }

    fn end_write(&self) {
        let sequence = self.seqlock.sequence.load(Ordering::Relaxed);
        self.seqlock.sequence.store(sequence + 1, Ordering::Release);
    }
}

/// No signature matches it: a reading is always written the first time.
const NEVER_WRITTEN: Signature = Signature {
    at: u64::MAX,
    until: 0,
    low: None,
    receipt: u64::MAX,
    base: u64::MAX,
};

/// A slot's state as the budget sees it.
pub(crate) trait Budgeted {
    /// The budget had `left` units of those it was opened with: count the
    /// rest as spent.
    fn reconcile(&mut self, left: u64);

    /// What the budget opens with now: units and the reading's signature
    /// (`None`: nothing may be spent without the lock).
    fn opening(&mut self) -> (u64, Option<Signature>);

    /// The reading's decision: Redis's last answer.
    fn decision(&self) -> Option<PolicyDecision>;
}

/// A slot's state under its lock, with the budget closed: what was spent
/// from it is counted when the lock is taken, and it opens again with the
/// state as the holder left it when the lock is released.
pub(crate) struct Locked<'a, T: Budgeted> {
    state: MutexGuard<'a, T>,
    budget: &'a Budget,
}

impl<'a, T: Budgeted> Locked<'a, T> {
    pub(crate) fn new(state: &'a Mutex<T>, budget: &'a Budget) -> Self {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.reconcile(budget.close());
        Locked { state, budget }
    }
}

impl<T: Budgeted> Deref for Locked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.state
    }
}

impl<T: Budgeted> DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.state
    }
}

impl<T: Budgeted> Drop for Locked<'_, T> {
    fn drop(&mut self) {
        // Still under the lock: the state cannot change before the budget
        // shows it.
        let (units, signature) = self.state.opening();
        let state = &self.state;
        self.budget.open(units, signature, || state.decision());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn decision() -> Option<PolicyDecision> {
        let limit: Decision = tollgate_core::DecisionFields {
            allowed: true,
            limit: 10,
            remaining: 7,
            ..Default::default()
        }
        .into();
        Some(PolicyDecision::single(limit))
    }

    fn reading(until: u64, low: Option<u64>) -> Option<Signature> {
        Some(Signature {
            at: 1,
            until,
            low,
            receipt: 0,
            base: 0,
        })
    }

    #[test]
    fn spends_only_while_open_unexpired_and_enough() {
        let budget = Budget::default();
        let spend = |budget: &Budget, now, cost| budget.try_spend(now, cost, |r, left| (*r, left));
        assert!(spend(&budget, 0, 1).is_none(), "never opened");
        budget.open(10, reading(100, Some(3)), decision);
        let (reading, left) = spend(&budget, 5, 6).unwrap();
        assert_eq!(left, 4);
        assert_eq!(reading.limits()[0].limit, 10);
        assert_eq!(reading.limits()[0].remaining, 7);
        assert!(!reading.is_low(left));
        assert!(spend(&budget, 5, 5).is_none(), "4 left");
        let (reading, left) = spend(&budget, 5, 1).unwrap();
        assert!(reading.is_low(left), "3 left, at the low mark");
        assert!(spend(&budget, 100, 1).is_none(), "past its time");
        assert_eq!(budget.close(), 3);
        assert!(spend(&budget, 5, 1).is_none(), "closed");
        budget.open(7, None, decision);
        assert!(spend(&budget, 5, 1).is_none(), "no reading");
        assert_eq!(budget.close(), 0);
    }

    #[test]
    fn concurrent_spends_never_take_more_than_it_holds() {
        let budget = Arc::new(Budget::default());
        budget.open(10_000, reading(u64::MAX, None), decision);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    let mut taken = 0;
                    while budget.try_spend(1, 3, |_, _| ()).is_some() {
                        taken += 3;
                    }
                    taken
                })
            })
            .collect();
        let taken: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(taken + budget.close(), 10_000);
        assert!(taken >= 9_998);
    }

    /// A reading is never seen half rewritten: a writer switches between
    /// two readings whose figures are all 1 or all 2, and every reading a
    /// spender gets has one value throughout.
    #[test]
    fn a_reading_is_seen_whole_or_not_at_all() {
        let budget = Arc::new(Budget::default());
        let figures = |n: u64| {
            let limit: Decision = tollgate_core::DecisionFields {
                allowed: true,
                limit: n,
                remaining: n,
                reset_after_nanos: n,
                replenish_after_nanos: n,
                ..Default::default()
            }
            .into();
            Some(PolicyDecision::new([limit, limit]))
        };
        let signature = |n: u64| {
            Some(Signature {
                at: n,
                until: u64::MAX,
                low: None,
                receipt: 0,
                base: 0,
            })
        };
        budget.open(u64::MAX >> 2, signature(1), || figures(1));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The reader's tries so far. After each rewrite the writer waits
        // for two more: the second began after the rewrite and ended before
        // the next, so it must see a reading, however the threads are
        // scheduled (a writer rewriting flat out on a loaded machine left
        // the reader none in 200,000 tries). The first may overlap a
        // rewrite, which is what the test is about.
        let tries = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let rewrites = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let writer = {
            let (budget, stop, tries) = (budget.clone(), stop.clone(), tries.clone());
            let rewrites = rewrites.clone();
            std::thread::spawn(move || {
                let mut n = 1;
                while !stop.load(Ordering::Relaxed) {
                    let from = tries.load(Ordering::Acquire);
                    while tries.load(Ordering::Acquire) < from + 2 && !stop.load(Ordering::Relaxed)
                    {
                        std::thread::yield_now();
                    }
                    n = 3 - n;
                    budget.close();
                    budget.open(u64::MAX >> 2, signature(n), || figures(n));
                    rewrites.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let mut seen = 0;
        // 200,000 tries and 1,000 rewrites at least, whichever comes later
        // (bounded: a writer starved for good ends the test all the same).
        for done in 0..50_000_000u64 {
            if done >= 200_000 && rewrites.load(Ordering::Relaxed) >= 1_000 {
                break;
            }
            if let Some(r) = budget.try_spend(0, 1, |r, _| *r) {
                let r = &r;
                let n = r.at;
                assert!(n == 1 || n == 2);
                for l in r.limits() {
                    assert_eq!(
                        [
                            l.limit,
                            l.remaining,
                            l.reset_after_nanos,
                            l.replenish_after_nanos
                        ],
                        [n; 4]
                    );
                }
                assert_eq!(r.limits().len(), 2);
                seen += 1;
            }
            tries.fetch_add(1, Ordering::Release);
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        assert!(seen > 0);
    }
}
