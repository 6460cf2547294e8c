//! The leaky bucket, as a shaper.

use super::schedule::{schedule, to_u64};
use super::{Evaluation, RateAlgorithm, dur};
use crate::{Decision, Quota};

/// A leaky bucket used as a shaper: requests leave at a constant rate of one
/// every `T = period / limit`, and at most `burst` wait in the queue.
///
/// A request gets the slot `max(last_slot + T, now)`. If its wait
/// (`slot − now`) would be `burst·T` or more it is rejected; otherwise it is
/// admitted with [`Decision::wait`] set to that wait, and the caller holds it
/// until its slot. Requests therefore leave evenly spaced, in arrival order.
/// A request of cost `c` occupies `c` consecutive slots and is admitted iff its
/// last slot's wait is under `burst·T`.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{LeakyBucket, Quota, RateAlgorithm};
///
/// // Leaks 2 per second, holds 10.
/// let bucket = LeakyBucket::new(Quota::per_second(2).with_burst(10).unwrap());
/// let mut state = Default::default();
/// let waits: Vec<_> = (0..3).map(|_| bucket.check(&mut state, 0, 1).wait).collect();
/// assert_eq!(waits, [Duration::ZERO, Duration::from_millis(500), Duration::from_secs(1)]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeakyBucket {
    interval: u64,
    burst: u64,
}

/// A key's leaky-bucket state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeakyBucketState {
    /// The earliest free slot, `last_slot + T`, in nanoseconds; 0 for a key
    /// never seen.
    pub next_free: u64,
}

impl LeakyBucket {
    /// A leaky bucket for `quota`: leaks `limit` per `period`, holds `burst`.
    pub fn new(quota: Quota) -> Self {
        LeakyBucket {
            interval: quota.emission_interval_nanos(),
            burst: quota.burst(),
        }
    }
}

impl RateAlgorithm for LeakyBucket {
    type State = LeakyBucketState;
    type Admission = LeakyBucketState;

    fn evaluate(&self, state: &LeakyBucketState, now: u64, cost: u32) -> Evaluation<LeakyBucketState> {
        let interval = u128::from(self.interval);
        // "wait of the last slot < burst·T" is "its end − now ≤ (burst+1)·T − 1".
        let tolerance = (u128::from(self.burst) + 1) * interval - 1;
        let s = schedule(
            u128::from(state.next_free),
            u128::from(now),
            u128::from(cost) * interval,
            tolerance,
        );
        let ahead = if s.allowed {
            s.ahead_after
        } else {
            s.ahead_before
        };
        let queued = ahead.div_ceil(interval);
        let decision = Decision {
            allowed: s.allowed,
            limit: self.burst,
            remaining: to_u64(u128::from(self.burst).saturating_sub(queued)),
            reset_after: dur(ahead),
            retry_after: s.retry.map_or(Decision::NEVER, dur),
            wait: if s.allowed {
                dur(s.start - u128::from(now))
            } else {
                std::time::Duration::ZERO
            },
        };
        Evaluation {
            decision,
            admission: s.allowed.then(|| LeakyBucketState {
                next_free: to_u64(s.end),
            }),
        }
    }

    fn commit(&self, state: &mut LeakyBucketState, admission: LeakyBucketState) {
        *state = admission;
    }
}
