//! The leaky bucket, as a shaper.

use super::divisor::Divisor;
use super::schedule::{replenish_after, schedule};
use super::{RateAlgorithm, ScriptCall};
use crate::{Decision, DecisionFields, Quota};
use std::time::Duration;

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
/// So at one instant `burst` requests pass (waits `0` to `(burst − 1)·T`),
/// and any time later one more: the first has left by then, and the queue
/// again holds `burst` waiting behind the one leaving. Under a burst spread
/// over a few microseconds (a shared store, whose clock moves between
/// calls) that is `burst + 1`.
///
/// [`Decision::remaining`] counts the requests of cost 1 that would be
/// admitted now (`burst − ⌊wait / T⌋`, where `wait` is what the next one
/// would wait), so the bucket is whole ([`Decision::reset_after`]) once that
/// wait is under one interval: up to `T − 1` ns before the last admitted
/// request leaves. Stores keep a key until it has left
/// ([`Limiter::rest_slack`](crate::Limiter::rest_slack)).
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{LeakyBucket, Quota, RateAlgorithm};
///
/// // Leaks 2 per second, holds 10.
/// let bucket = LeakyBucket::new(Quota::per_second(2).with_burst(10).unwrap());
/// let mut state = Default::default();
/// let waits: Vec<_> = (0..3).map(|_| bucket.check(&mut state, 0, 1).wait()).collect();
/// assert_eq!(waits, [Duration::ZERO, Duration::from_millis(500), Duration::from_secs(1)]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeakyBucket {
    interval: u64,
    per_interval: Divisor,
    quota: Quota,
    /// "The last slot's wait is under `burst·T`" is "its end lies at most
    /// `(burst + 1)·T − 1` ahead of now".
    tolerance: u64,
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
        let interval = quota.emission_interval_nanos();
        LeakyBucket {
            interval,
            per_interval: Divisor::new(interval),
            quota,
            // Quota guarantees burst·T ≤ 2^61, so this cannot overflow.
            tolerance: (quota.burst() + 1) * interval - 1,
        }
    }
}

impl RateAlgorithm for LeakyBucket {
    type State = LeakyBucketState;
    type Charge = LeakyBucketState;

    #[inline]
    fn evaluate(
        &self,
        state: &LeakyBucketState,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<LeakyBucketState>) {
        let s = schedule(
            state.next_free,
            now,
            u64::from(cost).saturating_mul(self.interval),
            self.tolerance,
            self.tolerance,
        );
        let ahead = s.ahead();
        // The next request's wait would be `ahead`, and requests whose wait
        // is under burst·T pass: burst − ⌊ahead / T⌋ of them.
        let remaining = self
            .quota
            .burst()
            .saturating_sub(self.per_interval.div(ahead));
        // So the bucket counts as whole once the next wait is under one
        // interval, T − 1 ns before the queue is empty (`next_free`).
        let whole_after = ahead.saturating_add(1).saturating_sub(self.interval);
        let decision = DecisionFields {
            allowed: s.allowed,
            limit: self.quota.burst(),
            remaining,
            reset_after_nanos: whole_after,
            replenish_after_nanos: replenish_after(
                whole_after,
                remaining,
                self.quota.burst(),
                1,
                self.interval,
            ),
            retry_after_nanos: s.retry().unwrap_or(Decision::NEVER_NANOS),
            wait_nanos: if s.allowed { s.ahead_before } else { 0 },
        }
        .into();
        (
            decision,
            s.allowed.then_some(LeakyBucketState { next_free: s.end }),
        )
    }

    fn quota(&self) -> Quota {
        self.quota
    }

    fn from_quota(quota: Quota) -> Self {
        Self::new(quota)
    }

    /// No options: as [`new`](Self::new).
    fn with_quota(&self, quota: Quota) -> Self {
        Self::new(quota)
    }

    fn rest_slack(&self) -> Duration {
        // Whole once the next request's wait is under one interval, but
        // the wait must be remembered until it has passed, to keep
        // releases evenly spaced.
        Duration::from_nanos(self.quota.emission_interval_nanos().saturating_sub(1))
    }

    fn script(&self) -> ScriptCall {
        let q = self.quota;
        let interval = ScriptCall::micros(q.emission_interval_nanos());
        ScriptCall {
            script: "leaky_bucket",
            state: "leaky-bucket",
            params: [interval, (q.burst() + 1) * interval - 1, q.burst(), 0],
        }
    }

    #[inline]
    fn commit(&self, state: &mut LeakyBucketState, charge: LeakyBucketState) {
        *state = charge;
    }

    /// As GCRA's: the request's slots still ahead of `now` are freed, at
    /// most its cost's worth, never before `now`. (`reset_after` is the
    /// queue's end less `T − 1`.)
    fn refund(&self, state: &mut LeakyBucketState, refund: crate::Refund, now: u64) {
        let cost = self.interval.saturating_mul(u64::from(refund.cost));
        let mark = refund.schedule_end(cost, self.interval - 1);
        let give = cost
            .min(mark.saturating_sub(now))
            .min(state.next_free.saturating_sub(now));
        state.next_free -= give;
    }

    /// The queue grows by the cost's slots, from now or from its end.
    fn debit(&self, state: &mut LeakyBucketState, now: u64, cost: u32) {
        let cost = self.interval.saturating_mul(u64::from(cost));
        state.next_free = state.next_free.max(now).saturating_add(cost);
    }
}

/// One word: the memory store keeps it in an atomic cell (the
/// registry's `one_word`).
impl crate::PackedState for LeakyBucketState {
    fn pack(&self) -> u64 {
        self.next_free
    }
    fn unpack(bits: u64) -> Self {
        LeakyBucketState { next_free: bits }
    }
}

impl crate::state_bytes::StateEncoding for LeakyBucket {
    const TAG: u8 = 4;

    /// `next_free`.
    fn encode_state(state: &LeakyBucketState, out: &mut Vec<u8>) {
        crate::state_bytes::put_u64(out, state.next_free);
    }

    fn decode_state(
        input: &mut crate::state_bytes::Reader<'_>,
    ) -> Result<LeakyBucketState, crate::StateBytesError> {
        Ok(LeakyBucketState {
            next_free: input.u64()?,
        })
    }
}
