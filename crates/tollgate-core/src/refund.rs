//! Giving a charge back: what a refund needs to know of an admission.

/// An admission as a later [`refund`](crate::RateAlgorithm::refund) needs
/// it: when it was charged, how much, and, for the algorithms that keep a
/// schedule (GCRA, the continuous token bucket, the leaky bucket), where
/// the charge left it. Made by [`Limiter::charge`](crate::Limiter::charge)
/// (or [`RateAlgorithm::receipt`](crate::RateAlgorithm::receipt)); keep it
/// with the request until its outcome is known.
///
/// ```
/// use tollgate_core::{Algorithm, Limiter, Quota};
///
/// let limiter = Limiter::new(Algorithm::FixedWindow, Quota::per_minute(2));
/// let mut state = limiter.new_state();
/// let (_, first) = limiter.charge(&mut state, 0, 1);
/// limiter.charge(&mut state, 0, 1);
/// assert!(!limiter.check(&mut state, 0, 1).allowed());
/// // The first request's outcome says it does not count: its unit is back.
/// limiter.refund(&mut state, first.unwrap(), 1_000);
/// assert!(limiter.check(&mut state, 1_000, 1).allowed());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// When the request was charged (ns, the limiter's clock).
    pub at: u64,
    /// What it was charged.
    pub cost: u32,
    /// Where the charge left the key's schedule, in the algorithm's own
    /// units (GCRA: the theoretical arrival time after it); 0 when unknown
    /// (a store that keeps only when and how much) or for the algorithms
    /// that keep none. Unknown, the refund takes the earliest the schedule
    /// can have been left at (`at` plus the cost's time): never more than
    /// is due, and all of it when given back at once.
    pub mark: u128,
}

impl Receipt {
    /// A receipt that knows only when and how much: what a store that
    /// keeps no more of a request can refund with.
    pub fn new(at: u64, cost: u32) -> Self {
        Receipt { at, cost, mark: 0 }
    }
}
