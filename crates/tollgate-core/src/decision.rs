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
    /// Nanoseconds until the limit next gives quota back (`remaining`, or
    /// for a refused request the room it lacked, starts to grow) if no
    /// further request arrives; 0 when the limit is whole. See
    /// [`replenish_after`](Self::replenish_after).
    pub replenish_after_nanos: u64,
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

    /// How long until the limit next gives quota back, if no further request
    /// arrives: the end of the window for a fixed window (and the interval
    /// token bucket's next refill); the moment the next unit comes back for
    /// GCRA, the token and leaky buckets and the sliding window; the moment
    /// the oldest admitted request leaves the log for the sliding log. Zero
    /// when the limit is whole.
    ///
    /// Never later than [`reset_after`](Self::reset_after), and for a denied
    /// request never later than [`retry_after`](Self::retry_after): a retry
    /// needs at least the first unit back. This is what the `RateLimit`
    /// field's `t` reports.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_core::{Gcra, Quota, RateAlgorithm};
    ///
    /// // 10 per second with a burst of 20: one unit back every 100 ms.
    /// let gcra = Gcra::new(Quota::per_second(10).with_burst(20).unwrap());
    /// let mut state = Default::default();
    /// let first = gcra.check(&mut state, 0, 1);
    /// assert_eq!(first.remaining, 19);
    /// assert_eq!(first.replenish_after(), Duration::from_millis(100));
    /// assert_eq!(first.reset_after(), Duration::from_millis(100));
    /// let second = gcra.check(&mut state, 0, 1);
    /// assert_eq!(second.replenish_after(), Duration::from_millis(100));
    /// assert_eq!(second.reset_after(), Duration::from_millis(200));
    /// ```
    pub fn replenish_after(&self) -> Duration {
        Duration::from_nanos(self.replenish_after_nanos)
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
    /// only if all are, with the smallest `remaining` (and its `limit` and
    /// `replenish_after`) and the longest of each wait.
    #[inline]
    pub fn merge(self, other: Decision) -> Decision {
        let (limit, remaining, replenish_after_nanos) = if other.remaining < self.remaining {
            (other.limit, other.remaining, other.replenish_after_nanos)
        } else {
            (self.limit, self.remaining, self.replenish_after_nanos)
        };
        Decision {
            allowed: self.allowed && other.allowed,
            limit,
            remaining,
            reset_after_nanos: self.reset_after_nanos.max(other.reset_after_nanos),
            replenish_after_nanos,
            retry_after_nanos: self.retry_after_nanos.max(other.retry_after_nanos),
            wait_nanos: self.wait_nanos.max(other.wait_nanos),
        }
    }
}
