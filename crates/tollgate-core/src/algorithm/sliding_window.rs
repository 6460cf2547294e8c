//! The sliding window counter.

use super::divisor::Divisor;
use super::schedule::to_u64;
use super::{RateAlgorithm, ScriptCall};
use crate::{Decision, DecisionFields, Quota};

/// Two fixed-window counters, the previous window's weighted by how much of
/// it still overlaps the last `period`: with `elapsed` the time into the
/// current window, the estimate is
/// `E = cur + ⌊prev · (period − elapsed) / period⌋` and a request of cost `c`
/// passes iff `E + c ≤ limit`.
///
/// An approximation of the sliding log in 24 bytes per key. It assumes the
/// previous window's requests were spread evenly; when they were bunched at
/// its end, up to `2 × limit` can pass in one period in the worst case, though
/// far less in practice. Never more than `limit` in one aligned window.
/// `burst` is ignored.
///
/// ```
/// use tollgate_core::{Quota, RateAlgorithm, SlidingWindow, SlidingWindowState};
///
/// // limit 7, previous window 5, current 3, 30% into the window: E = 3 + ⌊5·0.7⌋ = 6.
/// let sw = SlidingWindow::new(Quota::per_second(7));
/// let mut state = SlidingWindowState { window: 10, previous: 5, current: 3 };
/// assert!(sw.check(&mut state, 10_300_000_000, 1).allowed());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindow {
    quota: Quota,
    per_period: Divisor,
}

/// A key's sliding-window state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlidingWindowState {
    /// The index (`now / period`) of the window `current` counts.
    pub window: u64,
    /// Cost admitted in window `window − 1`.
    pub previous: u64,
    /// Cost admitted in window `window`.
    pub current: u64,
}

impl SlidingWindow {
    /// A sliding window counter for `quota`.
    pub fn new(quota: Quota) -> Self {
        SlidingWindow {
            quota,
            per_period: Divisor::new(quota.period_nanos()),
        }
    }

    /// The counters as they stand at window `current`.
    fn rolled(&self, state: &SlidingWindowState, current: u64) -> SlidingWindowState {
        match current.checked_sub(state.window) {
            // Same window, or the clock went back: keep the counts.
            Some(0) | None => *state,
            Some(1) => SlidingWindowState {
                window: current,
                previous: state.current,
                current: 0,
            },
            Some(_) => SlidingWindowState {
                window: current,
                previous: 0,
                current: 0,
            },
        }
    }

    /// `⌊previous · (period − elapsed) / period⌋`.
    fn weighted(&self, previous: u64, elapsed: u64) -> u64 {
        let remaining = u128::from(self.quota.period_nanos() - elapsed);
        // ≤ previous, so it fits in u64.
        self.per_period.div_wide(u128::from(previous) * remaining) as u64
    }

    /// The least `elapsed` at which `⌊previous · (period − elapsed) / period⌋ ≤ budget`.
    fn first_elapsed_within(&self, previous: u64, budget: u64) -> u64 {
        if previous <= budget {
            return 0;
        }
        // previous·(P − e) < (budget + 1)·P  ⟺  P − e < ⌈(budget + 1)·P / previous⌉.
        let period = u128::from(self.quota.period_nanos());
        let span = ((u128::from(budget) + 1) * period).div_ceil(u128::from(previous));
        (period + 1).saturating_sub(span) as u64
    }

    /// How long from `now`, at `elapsed` into the window, until the estimate
    /// is 0 (the limit is whole) if no request arrives: once the current
    /// window's count, weighted in the next window, has fallen to nothing;
    /// else once the previous window's has.
    fn reset_nanos(&self, previous: u64, current: u64, elapsed: u64) -> u128 {
        let to_window_end = u128::from(self.quota.period_nanos() - elapsed);
        if current > 0 {
            to_window_end + u128::from(self.first_elapsed_within(current, 0))
        } else {
            u128::from(
                self.first_elapsed_within(previous, 0)
                    .saturating_sub(elapsed),
            )
        }
    }

    /// How long from `now`, at `elapsed` into the window, until the estimate
    /// next falls by one if no request arrives: when the previous window's
    /// weight, `previous_weight` now, next drops; when it weighs nothing
    /// already, 1 ns into the next window, where the current count starts
    /// to lose weight. 0 when the estimate is already 0.
    fn replenish_nanos(
        &self,
        previous: u64,
        previous_weight: u64,
        current: u64,
        elapsed: u64,
    ) -> u128 {
        if previous_weight > 0 {
            u128::from(self.first_elapsed_within(previous, previous_weight - 1) - elapsed)
        } else if current > 0 {
            let to_window_end = u128::from(self.quota.period_nanos() - elapsed);
            to_window_end + u128::from(self.first_elapsed_within(current, current - 1))
        } else {
            0
        }
    }

    /// How long from `now` (at `elapsed` into the window) until a request of
    /// `cost` fits. `cost ≤ limit`.
    fn retry_nanos(&self, s: &SlidingWindowState, elapsed: u64, cost: u64) -> u128 {
        let period = u128::from(self.quota.period_nanos());
        let to_window_end = period - u128::from(elapsed);
        let budget = self.quota.limit() - cost;
        if s.current <= budget {
            // The previous window is what blocks: wait for its weight to fall.
            let e = self.first_elapsed_within(s.previous, budget - s.current);
            u128::from(e - elapsed)
        } else {
            // Only the next window can help; there `current` is the weighted one.
            to_window_end + u128::from(self.first_elapsed_within(s.current, budget))
        }
    }
}

impl RateAlgorithm for SlidingWindow {
    type State = SlidingWindowState;
    type Charge = SlidingWindowState;
    const WINDOWED: bool = true;

    #[inline]
    fn evaluate(
        &self,
        state: &SlidingWindowState,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<SlidingWindowState>) {
        let (current_window, into_window) = self.per_period.div_rem(now);
        let s = self.rolled(state, current_window);
        let elapsed = if s.window == current_window {
            into_window
        } else {
            0
        };
        let previous_weight = self.weighted(s.previous, elapsed);
        let estimate = s.current.saturating_add(previous_weight);
        let cost = u64::from(cost);
        let allowed = estimate.saturating_add(cost) <= self.quota.limit();
        let current_after = if allowed { s.current + cost } else { s.current };
        let retry_after = if allowed {
            0
        } else if cost > self.quota.limit() {
            Decision::NEVER_NANOS
        } else {
            to_u64(self.retry_nanos(&s, elapsed, cost))
        };
        let decision = DecisionFields {
            allowed,
            limit: self.quota.limit(),
            remaining: self
                .quota
                .limit()
                .saturating_sub(estimate.saturating_add(if allowed { cost } else { 0 })),
            reset_after_nanos: to_u64(self.reset_nanos(s.previous, current_after, elapsed)),
            replenish_after_nanos: to_u64(self.replenish_nanos(
                s.previous,
                previous_weight,
                current_after,
                elapsed,
            )),
            retry_after_nanos: retry_after,
            wait_nanos: 0,
        };
        // Only a count past the limit (a debt) can be over it: an allowed
        // request never is.
        let decision =
            Decision::from(decision).with_over_limit(estimate.saturating_sub(self.quota.limit()));
        (
            decision,
            allowed.then_some(SlidingWindowState {
                current: current_after,
                ..s
            }),
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

    fn script(&self) -> ScriptCall {
        ScriptCall {
            script: "sliding_window",
            state: "sliding-window",
            params: [
                self.quota.limit(),
                ScriptCall::micros(self.quota.period_nanos()),
                0,
                0,
            ],
        }
    }

    #[inline]
    fn commit(&self, state: &mut SlidingWindowState, charge: SlidingWindowState) {
        *state = charge;
    }

    /// Off the window the request was charged in: the current one's
    /// count, or the previous one's while it still weighs.
    fn refund(&self, state: &mut SlidingWindowState, refund: crate::Refund, _now: u64) {
        let charged = self.per_period.div(refund.at);
        let cost = u64::from(refund.cost);
        if state.window == charged {
            state.current -= cost.min(state.current);
        } else if state.window == charged.saturating_add(1) {
            state.previous -= cost.min(state.previous);
        }
    }

    /// Added to the current window's count, past the limit if need be.
    fn debit(&self, state: &mut SlidingWindowState, now: u64, cost: u32) {
        let mut rolled = self.rolled(state, self.per_period.div(now));
        rolled.current = rolled.current.saturating_add(u64::from(cost));
        *state = rolled;
    }
}

impl crate::state_bytes::StateEncoding for SlidingWindow {
    const TAG: u8 = 7;

    /// `window`, `previous`, `current`.
    fn encode_state(state: &SlidingWindowState, out: &mut Vec<u8>) {
        crate::state_bytes::put_u64(out, state.window);
        crate::state_bytes::put_u64(out, state.previous);
        crate::state_bytes::put_u64(out, state.current);
    }

    fn decode_state(
        input: &mut crate::state_bytes::Reader<'_>,
    ) -> Result<SlidingWindowState, crate::StateBytesError> {
        Ok(SlidingWindowState {
            window: input.u64()?,
            previous: input.u64()?,
            current: input.u64()?,
        })
    }
}
