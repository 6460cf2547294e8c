//! Giving a charge back: what a refund needs to know of an admission.

/// An admission as a later [`refund`](crate::RateAlgorithm::refund) needs
/// it: when it was charged, how much, and the admission's
/// [`reset_after`](crate::Decision::reset_after) (from which the algorithms
/// that keep a schedule — GCRA, the continuous token bucket, the leaky
/// bucket — tell where the charge left it). Made by
/// [`Limiter::charge`](crate::Limiter::charge); keep it with the request
/// until its outcome is known.
///
/// One limit's refund; `tollgate`'s `store::PolicyRefund` is a whole policy's,
/// which a store turns into one of these per limit.
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
pub struct Refund {
    /// When the request was charged (ns, the limiter's clock).
    pub at: u64,
    /// What it was charged.
    pub cost: u32,
    /// The admission's `reset_after`, in ns from `at`; `None` when unknown.
    /// Unknown, a schedule's refund takes the earliest the charge can have
    /// left it at (`at` plus the cost's time): never more than is due, and
    /// all of it when given back at once, but less than is due once time
    /// has passed on a key that was not whole. An `at` a little early and
    /// a `reset_after` a little short only give back less.
    pub reset_after: Option<u64>,
}

impl Refund {
    /// A refund that knows only when and how much.
    pub fn new(at: u64, cost: u32) -> Self {
        Refund {
            at,
            cost,
            reset_after: None,
        }
    }

    /// Where the charge left a schedule whose `reset_after` is its end
    /// less `slack` ns: that, or, unknown, `at` plus `cost_nanos`.
    pub(crate) fn schedule_end(&self, cost_nanos: u64, slack: u64) -> u64 {
        let earliest = self.at.saturating_add(cost_nanos);
        match self.reset_after {
            Some(reset) => self
                .at
                .saturating_add(reset)
                .saturating_add(slack)
                .max(earliest),
            None => earliest,
        }
    }
}
