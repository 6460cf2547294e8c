//! [`Decision`]: the answer to one check.

use std::time::Duration;

/// The outcome of checking one request against one limit.
///
/// A denied request consumes nothing: the state is left exactly as it was.
///
/// ```
/// use tollgate_core::{Decision, Gcra, Quota, RateAlgorithm};
///
/// let gcra = Gcra::new(Quota::per_second(2));
/// let mut state = Default::default();
/// let first: Decision = gcra.check(&mut state, 0, 1);
/// assert!(first.allowed);
/// assert_eq!(first.remaining, 1);
/// gcra.check(&mut state, 0, 1);
/// let third = gcra.check(&mut state, 0, 1);
/// assert!(!third.allowed);
/// assert_eq!(third.retry_after.as_millis(), 500);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// The most that `remaining` can ever be: the quota's limit for the
    /// window algorithms, its burst (bucket capacity) for the bucket ones.
    pub limit: u64,
    /// How many more requests of cost 1 would pass right now, after this one.
    pub remaining: u64,
    /// How long until the limit is whole again (`remaining == limit`) if no
    /// further request arrives.
    pub reset_after: Duration,
    /// For a denied request, the earliest moment a retry of the same cost
    /// can pass; [`Duration::ZERO`] when allowed, and [`Decision::NEVER`] when
    /// the cost is larger than the limit can ever admit.
    pub retry_after: Duration,
    /// For an allowed request under the leaky bucket (a shaper), how long to
    /// hold the request before forwarding it; zero for every other algorithm.
    pub wait: Duration,
}

impl Decision {
    /// The `retry_after` of a request whose cost exceeds what the limit can
    /// ever admit: no retry of that cost will pass.
    pub const NEVER: Duration = Duration::MAX;

    /// Whether a retry of the same cost can ever pass.
    pub fn can_ever_pass(&self) -> bool {
        self.retry_after != Self::NEVER
    }

    /// Folds the decisions of several limits on one request into one: allowed
    /// only if all are, with the smallest `remaining` (and its `limit`) and the
    /// longest of each wait.
    #[inline]
    pub fn merge(self, other: Decision) -> Decision {
        let (limit, remaining) = if other.remaining < self.remaining {
            (other.limit, other.remaining)
        } else {
            (self.limit, self.remaining)
        };
        Decision {
            allowed: self.allowed && other.allowed,
            limit,
            remaining,
            reset_after: self.reset_after.max(other.reset_after),
            retry_after: self.retry_after.max(other.retry_after),
            wait: self.wait.max(other.wait),
        }
    }
}

/// A duration from nanoseconds that may exceed `u64`.
pub(crate) fn duration_from_nanos(nanos: u128) -> Duration {
    match u64::try_from(nanos) {
        Ok(nanos) => Duration::from_nanos(nanos),
        Err(_) => Decision::NEVER,
    }
}
