//! Lock-free checks for the algorithms whose state is one `u64`.
//!
//! GCRA and the leaky bucket keep one timestamp per key, so a key's state can
//! live in an [`AtomicU64`] shared by every thread, and a check is a
//! compare-and-swap loop over [`RateAlgorithm::evaluate`]: no lock, and a
//! denied request does not write at all.

use crate::Decision;
use crate::algorithm::RateAlgorithm;
use std::sync::atomic::{AtomicU64, Ordering};

/// A state that is exactly one `u64`.
pub trait PackedState: Sized {
    /// The state as a `u64`.
    fn pack(&self) -> u64;
    /// The state from a `u64` made by [`pack`](Self::pack).
    fn unpack(bits: u64) -> Self;
}

/// Checks a request against a state held in an atomic cell shared by many
/// threads. Admissions are linearizable: concurrent callers never admit more
/// than one caller checking in sequence would.
///
/// ```
/// use std::sync::atomic::AtomicU64;
/// use tollgate_core::{check_atomic, Gcra, Quota};
///
/// let gcra = Gcra::new(Quota::per_second(5));
/// let cell = AtomicU64::new(0); // a key never seen
/// let passed = (0..10).filter(|_| check_atomic(&gcra, &cell, 0, 1).allowed()).count();
/// assert_eq!(passed, 5);
/// ```
#[inline(always)]
pub fn check_atomic<A>(algorithm: &A, cell: &AtomicU64, now: u64, cost: u32) -> Decision
where
    A: RateAlgorithm<Charge = <A as RateAlgorithm>::State>,
    A::State: PackedState,
{
    let mut current = cell.load(Ordering::Acquire);
    loop {
        let evaluation = algorithm.evaluate(&A::State::unpack(current), now, cost);
        let Some(admitted) = evaluation.1 else {
            return evaluation.0;
        };
        match cell.compare_exchange_weak(
            current,
            admitted.pack(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return evaluation.0,
            Err(actual) => current = actual,
        }
    }
}

/// Gives back, at `now`, the charge `refund` describes, to a state held in
/// an atomic cell (see [`RateAlgorithm::refund`]).
pub fn refund_atomic<A>(algorithm: &A, cell: &AtomicU64, refund: crate::Refund, now: u64)
where
    A: RateAlgorithm,
    A::State: PackedState,
{
    update_atomic::<A>(cell, |state| algorithm.refund(state, refund, now));
}

/// Charges `cost` at `now` whatever the limit says, to a state held in an
/// atomic cell (see [`RateAlgorithm::debit`]).
pub fn debit_atomic<A>(algorithm: &A, cell: &AtomicU64, now: u64, cost: u32)
where
    A: RateAlgorithm,
    A::State: PackedState,
{
    update_atomic::<A>(cell, |state| algorithm.debit(state, now, cost));
}

/// Applies `change` to the state in `cell`, again on a fresh copy
/// whenever another thread changed the cell in between.
fn update_atomic<A>(cell: &AtomicU64, change: impl Fn(&mut A::State))
where
    A: RateAlgorithm,
    A::State: PackedState,
{
    let mut current = cell.load(Ordering::Acquire);
    loop {
        let mut state = A::State::unpack(current);
        change(&mut state);
        let changed = state.pack();
        if changed == current {
            return;
        }
        match cell.compare_exchange_weak(current, changed, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Gcra, LeakyBucket, Quota};
    use std::sync::Arc;

    #[test]
    fn threads_sharing_a_cell_admit_exactly_the_limit() {
        let gcra = Gcra::new(Quota::per_minute(100));
        let leaky = LeakyBucket::new(Quota::per_minute(100));
        let (gcra_cell, leaky_cell) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (g, l) = (gcra_cell.clone(), leaky_cell.clone());
                std::thread::spawn(move || {
                    let mut passed = (0, 0);
                    for _ in 0..50 {
                        passed.0 += usize::from(check_atomic(&gcra, &g, 1_000, 1).allowed());
                        passed.1 += usize::from(check_atomic(&leaky, &l, 1_000, 1).allowed());
                    }
                    passed
                })
            })
            .collect();
        let totals = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        assert_eq!(totals, (100, 100));
    }
}
