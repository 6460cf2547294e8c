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
/// assert_eq!(third.retry_after().as_millis(), 500);
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
    /// Nanoseconds until the limit is whole again (`remaining == limit`) if
    /// no further request arrives. See [`reset_after`](Self::reset_after).
    pub reset_after_nanos: u64,
    /// For a denied request, nanoseconds until a retry of the same cost can
    /// pass; 0 when allowed, [`Decision::NEVER_NANOS`] when the cost is larger
    /// than the limit can ever admit. See [`retry_after`](Self::retry_after).
    pub retry_after_nanos: u64,
    /// For an allowed request that must be held (the leaky bucket, delay
    /// mode), nanoseconds to hold it before forwarding; otherwise 0. See
    /// [`wait`](Self::wait).
    pub wait_nanos: u64,
}

impl Decision {
    /// What [`retry_after`](Self::retry_after) returns for a request whose
    /// cost exceeds what the limit can ever admit.
    pub const NEVER: Duration = Duration::MAX;

    /// `retry_after_nanos` of a request that can never pass.
    pub const NEVER_NANOS: u64 = u64::MAX;

    /// How long until the limit is whole again.
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_nanos)
    }

    /// For a denied request, the earliest moment a retry of the same cost can
    /// pass; zero when allowed, [`Decision::NEVER`] when it never can.
    pub fn retry_after(&self) -> Duration {
        if self.can_ever_pass() {
            Duration::from_nanos(self.retry_after_nanos)
        } else {
            Self::NEVER
        }
    }

    /// How long to hold an allowed request before forwarding it.
    pub fn wait(&self) -> Duration {
        Duration::from_nanos(self.wait_nanos)
    }

    /// Whether a retry of the same cost can ever pass.
    pub fn can_ever_pass(&self) -> bool {
        self.retry_after_nanos != Self::NEVER_NANOS
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
            reset_after_nanos: self.reset_after_nanos.max(other.reset_after_nanos),
            retry_after_nanos: self.retry_after_nanos.max(other.retry_after_nanos),
            wait_nanos: self.wait_nanos.max(other.wait_nanos),
        }
    }
}
