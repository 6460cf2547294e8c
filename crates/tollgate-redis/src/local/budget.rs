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

use arc_swap::ArcSwapOption;
use arc_swap::Guard;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tollgate::PolicyDecision;

/// Set in the word while the slot's lock holder reconciles.
const CLOSED: u64 = 1 << 63;

/// What requests answer from, as the slot last opened the budget.
#[derive(Debug)]
pub(crate) struct Reading {
    /// Redis's last answer for the key.
    pub(crate) decision: PolicyDecision,
    /// When it came (local ns).
    pub(crate) at: u64,
    /// The units may be spent until then (local ns); later, the slot
    /// decides (a grant lapses).
    pub(crate) until: u64,
    /// A request that leaves this many units or fewer also tells the slot
    /// (exact mode: time to reserve ahead); `None`: never.
    pub(crate) low: Option<u64>,
}

/// What tells readings apart, short of the decision: a slot opens its
/// budget after every request its lock decides (a refusal, under a flood),
/// and the reading is replaced only when this changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Signature {
    /// When Redis's answer came (local ns): a new answer, a new reading.
    pub(crate) at: u64,
    /// See [`Reading::until`].
    pub(crate) until: u64,
    /// See [`Reading::low`].
    pub(crate) low: Option<u64>,
}

/// Units spendable without the slot's lock, and the reading to answer
/// from.
#[derive(Default)]
pub(crate) struct Budget {
    word: AtomicU64,
    reading: ArcSwapOption<Reading>,
}

impl Reading {
    fn signature(&self) -> Signature {
        Signature {
            at: self.at,
            until: self.until,
            low: self.low,
        }
    }
}

/// A spend from the budget: the reading, and the units left after it.
pub(crate) struct Spent {
    pub(crate) reading: Guard<Option<Arc<Reading>>>,
    pub(crate) left: u64,
}

impl Spent {
    /// Whether the slot should hear of this spend (see [`Reading::low`]).
    pub(crate) fn low(&self) -> bool {
        self.reading
            .as_ref()
            .and_then(|r| r.low)
            .is_some_and(|low| self.left <= low)
    }
}

impl Budget {
    /// Takes `cost` units at `now` if the budget is open, its units still
    /// spendable and enough.
    pub(crate) fn try_spend(&self, now: u64, cost: u64) -> Option<Spent> {
        let reading = self.reading.load();
        if reading.as_ref().is_none_or(|r| now >= r.until) {
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
                Ok(_) => {
                    return Some(Spent {
                        reading,
                        left: word - cost,
                    });
                }
                Err(seen) => word = seen,
            }
        }
    }

    /// Closes the budget; returns the units it held. Called under the
    /// slot's lock, which then owns the count until [`open`](Self::open).
    pub(crate) fn close(&self) -> u64 {
        self.word.fetch_or(CLOSED, Ordering::AcqRel) & !CLOSED
    }

    /// Opens the budget with `units` and the reading `signature` names
    /// (`None`: nothing to answer from, so nothing is spent here); the
    /// reading's decision is made by `decision` only when the reading
    /// changed.
    pub(crate) fn open(
        &self,
        units: u64,
        signature: Option<Signature>,
        decision: impl FnOnce() -> Option<PolicyDecision>,
    ) {
        let current = self.reading.load();
        let same = match (current.as_ref(), signature) {
            (Some(reading), Some(signature)) => reading.signature() == signature,
            (None, None) => true,
            _ => false,
        };
        if !same {
            let reading = signature.zip(decision()).map(|(s, decision)| {
                Arc::new(Reading {
                    decision,
                    at: s.at,
                    until: s.until,
                    low: s.low,
                })
            });
            self.reading.store(reading);
        }
        let units = match signature {
            Some(_) => units.min(CLOSED - 1),
            None => 0,
        };
        self.word.store(units, Ordering::Release);
    }
}

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

    fn decision() -> Option<PolicyDecision> {
        Some(PolicyDecision {
            merged: tollgate_core::DecisionFields::default().into(),
            each: Default::default(),
        })
    }

    fn reading(until: u64, low: Option<u64>) -> Option<Signature> {
        Some(Signature { at: 0, until, low })
    }

    #[test]
    fn spends_only_while_open_unexpired_and_enough() {
        let budget = Budget::default();
        assert!(budget.try_spend(0, 1).is_none(), "never opened");
        budget.open(10, reading(100, Some(3)), decision);
        let spent = budget.try_spend(5, 6).unwrap();
        assert_eq!(spent.left, 4);
        assert!(!spent.low());
        assert!(budget.try_spend(5, 5).is_none(), "4 left");
        let spent = budget.try_spend(5, 1).unwrap();
        assert!(spent.low(), "3 left, at the low mark");
        assert!(budget.try_spend(100, 1).is_none(), "past its time");
        assert_eq!(budget.close(), 3);
        assert!(budget.try_spend(5, 1).is_none(), "closed");
        budget.open(7, None, decision);
        assert!(budget.try_spend(5, 1).is_none(), "no reading");
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
                    while budget.try_spend(1, 3).is_some() {
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
}
