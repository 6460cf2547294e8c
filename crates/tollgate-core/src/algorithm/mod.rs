//! The algorithms, one module each, behind one trait.
//!
//! Every algorithm is a pure state machine: [`RateAlgorithm::evaluate`] looks
//! at a key's state, the time and the cost and says what would happen without
//! changing anything; [`RateAlgorithm::commit`] applies a charge. Keeping
//! the two apart is what lets several limits on one request be charged
//! all-or-nothing, and lets a store apply a charge with a compare-and-swap.

mod divisor;
mod fixed_window;
mod gcra;
mod leaky_bucket;
mod schedule;
mod sliding_log;
mod sliding_window;
mod sliding_window_buckets;
mod token_bucket;

pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use sliding_log::{LogCharge, SlidingLog, SlidingLogState};
pub use sliding_window::{SlidingWindow, SlidingWindowState};
pub use sliding_window_buckets::{
    SlidingWindowBuckets, SlidingWindowBucketsState, SubWindowCharge,
};
pub use token_bucket::{IntervalTokenBucket, Refill, ScaledTime, TokenBucket, TokenBucketState};

use crate::{Decision, Quota};
use std::time::Duration;

/// How a shared store runs an algorithm in a server-side script (the
/// Redis store's Lua, one file per script under `tollgate-redis/scripts`):
/// which script decides it, what its per-key state is called, and four
/// integer parameters, times in whole microseconds rounded up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptCall {
    /// The script's name: the stem of its Lua file, which registers its
    /// functions under that name. Several algorithms may share one (the
    /// continuous token bucket runs GCRA's).
    pub script: &'static str,
    /// The name of the key's state, the last part of its key: two
    /// configurations whose states differ must not share it.
    pub state: &'static str,
    /// The parameters the script reads, in its order.
    pub params: [u64; 4],
}

impl ScriptCall {
    /// Nanoseconds as the scripts' microseconds, rounded up and at least 1:
    /// a rate is never made faster by the coarser unit.
    pub fn micros(nanos: u64) -> u64 {
        nanos.div_ceil(1_000).max(1)
    }

    /// A duration in whole microseconds, rounded down (a delay bound is
    /// never made longer), saturating.
    pub fn micros_of(duration: Duration) -> u64 {
        u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
    }
}

/// The time an empty bucket of `quota` takes to fill again at its rate:
/// `burst × period / limit`, rounded up to the nanosecond.
pub(crate) fn bucket_window(quota: Quota) -> Duration {
    let (burst, limit) = (u128::from(quota.burst()), u128::from(quota.limit()));
    let nanos = (burst * u128::from(quota.period_nanos())).div_ceil(limit);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// A rate-limiting algorithm: a pure state machine over `(state, now, cost)`.
///
/// `now` is in nanoseconds from the clock's origin; window algorithms align
/// their windows to multiples of the period from that origin (the Unix epoch
/// for [`MonotonicClock`](crate::MonotonicClock) and
/// [`WallClock`](crate::WallClock)). A clock that goes backwards never causes a
/// panic; the algorithms treat such a `now` as no time having passed, or as an
/// older window, conservatively: never admitting more than without the step.
/// For GCRA and the buckets, a request whose `now` lies `δ` before an
/// earlier request's is judged as though `δ` of the burst's time had been
/// spent: until the clock catches up, up to `⌈δ / T⌉` fewer requests pass
/// (`T` the emission interval), which is why the default clock never steps
/// back (see [`MonotonicClock`](crate::MonotonicClock)).
pub trait RateAlgorithm {
    /// The per-key state. `Default` is the state of a key never seen.
    type State: Default;
    /// What `commit` needs to apply a charge.
    type Charge: Copy;

    /// Decides a request without changing the state: the decision, and
    /// for an allowed request (`Some` exactly then) the charge to
    /// [`commit`](Self::commit).
    fn evaluate(
        &self,
        state: &Self::State,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<Self::Charge>);

    /// The quota this algorithm enforces: where headers and shared stores
    /// read the limit, period and burst, so that they always describe the
    /// limit the algorithm applies.
    fn quota(&self) -> Quota;

    /// Applies a charge that `evaluate` returned for this state.
    fn commit(&self, state: &mut Self::State, charge: Self::Charge);

    /// Gives back, at `now`, the charge `refund` describes, as far as it
    /// still counts. Afterwards the state is never more lenient than if
    /// the request had never been admitted (every other admission kept):
    /// a charge whose window has moved on, or that the bucket has already
    /// refilled, changes nothing. Given back at once, with nothing charged
    /// in between, it leaves the state as if the request had never come.
    fn refund(&self, state: &mut Self::State, refund: crate::Refund, now: u64);

    /// Charges `cost` at `now` whatever the state says: a cost learned only
    /// after the request was admitted ("pay after"). The state may go past
    /// the limit — into debt — and later requests are then refused (or
    /// delayed) until the debt has been paid off at the quota's rate, with
    /// `retry_after` saying when. Windowed algorithms hold a debt only as
    /// long as the window that holds it: what is still over the limit when
    /// that window has left is forgiven.
    fn debit(&self, state: &mut Self::State, now: u64, cost: u32);

    /// This algorithm over `quota`, with its default options: what
    /// [`Limiter::new`](crate::Limiter::new) builds.
    fn from_quota(quota: Quota) -> Self
    where
        Self: Sized;

    /// This algorithm over another quota, its options kept (delay mode,
    /// refill style, entry bound, sub-windows): what reads a state written
    /// under `quota` ([`Limiter::read_as`](crate::Limiter::read_as)).
    fn with_quota(&self, quota: Quota) -> Self
    where
        Self: Sized;

    /// Whether the algorithm counts requests in period-long windows (its
    /// capacity is the quota's limit, measured over the period) rather than
    /// holding a bucket (the burst, measured over the time an empty bucket
    /// takes to fill). Decides the defaults of [`capacity`](Self::capacity)
    /// and [`window`](Self::window).
    const WINDOWED: bool = false;

    /// The most quota units a key can hold at once; see
    /// [`Limiter::capacity`](crate::Limiter::capacity): the limit for a
    /// windowed algorithm, the burst for a bucket.
    fn capacity(&self) -> u64 {
        if Self::WINDOWED {
            self.quota().limit()
        } else {
            self.quota().burst()
        }
    }

    /// The span over which [`capacity`](Self::capacity) is measured; see
    /// [`Limiter::window`](crate::Limiter::window): the period for a
    /// windowed algorithm, the time an empty bucket takes to fill at the
    /// quota's rate for a bucket.
    fn window(&self) -> Duration {
        if Self::WINDOWED {
            Duration::from_nanos(self.quota().period_nanos())
        } else {
            bucket_window(self.quota())
        }
    }

    /// How long after `reset_after` a key's state may still differ from a
    /// fresh one's; see [`Limiter::rest_slack`](crate::Limiter::rest_slack).
    /// Zero by default.
    fn rest_slack(&self) -> Duration {
        Duration::ZERO
    }

    /// Delay mode, where the algorithm has future slots to reserve; see
    /// [`Limiter::with_max_delay`](crate::Limiter::with_max_delay).
    /// Unchanged by default.
    fn with_max_delay(self, max_delay: Duration) -> Self
    where
        Self: Sized,
    {
        let _ = max_delay;
        self
    }

    /// How a shared store's server-side script runs this algorithm.
    fn script(&self) -> ScriptCall;

    /// Evaluates and, if allowed, commits: one check of one request.
    #[inline]
    fn check(&self, state: &mut Self::State, now: u64, cost: u32) -> Decision {
        let (decision, charge) = self.evaluate(state, now, cost);
        if let Some(charge) = charge {
            self.commit(state, charge);
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_times_round_up_to_whole_microseconds_and_delays_down() {
        assert_eq!(ScriptCall::micros(0), 1);
        assert_eq!(ScriptCall::micros(1), 1);
        assert_eq!(ScriptCall::micros(1_000), 1);
        assert_eq!(ScriptCall::micros(1_001), 2);
        assert_eq!(ScriptCall::micros_of(Duration::from_nanos(1_999)), 1);
        assert_eq!(ScriptCall::micros_of(Duration::MAX), u64::MAX);
    }
}
