//! The fixed window counter.

use super::divisor::Divisor;
use super::schedule::to_u64;
use super::{RateAlgorithm, ScriptCall};
use crate::{Decision, DecisionFields, Quota};

/// A counter per window of one `period`, windows aligned to the clock's
/// origin (the Unix epoch for the system clocks, so every instance of an app
/// agrees on where a window starts). A request of cost `c` passes iff
/// `count + c ≤ limit`.
///
/// Cheap and easy to explain, but a client can spend a whole window's limit at
/// its end and another at the start of the next: up to `2 × limit` in one
/// period across a boundary. `burst` is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindow {
    quota: Quota,
    per_period: Divisor,
}

/// A key's fixed-window state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FixedWindowState {
    /// The window index, `now / period`, that `count` belongs to.
    pub window: u64,
    /// Cost admitted in that window.
    pub count: u64,
}

impl FixedWindow {
    /// A fixed window for `quota`.
    pub fn new(quota: Quota) -> Self {
        FixedWindow {
            quota,
            per_period: Divisor::new(quota.period_nanos()),
        }
    }
}

impl RateAlgorithm for FixedWindow {
    type State = FixedWindowState;
    type Charge = FixedWindowState;
    const WINDOWED: bool = true;

    #[inline]
    fn evaluate(
        &self,
        state: &FixedWindowState,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<FixedWindowState>) {
        let current = self.per_period.div(now);
        // A state from an older window counts for nothing; one from a later
        // window (the clock went back) is kept, conservatively.
        let (window, count) = if state.window >= current {
            (state.window, state.count)
        } else {
            (current, 0)
        };
        let cost = u64::from(cost);
        let allowed = count.saturating_add(cost) <= self.quota.limit();
        let count_after = if allowed { count + cost } else { count };
        let window_end = (u128::from(window) + 1) * u128::from(self.quota.period_nanos());
        let until_next_window = to_u64(window_end.saturating_sub(u128::from(now)));
        let retry_after = if allowed {
            0
        } else if cost > self.quota.limit() {
            Decision::NEVER_NANOS
        } else {
            until_next_window
        };
        // The whole count comes back at once, at the window's end.
        let reset_after = if count_after == 0 {
            0
        } else {
            until_next_window
        };
        let decision = DecisionFields {
            allowed,
            limit: self.quota.limit(),
            remaining: self.quota.limit().saturating_sub(count_after),
            reset_after_nanos: reset_after,
            replenish_after_nanos: reset_after,
            retry_after_nanos: retry_after,
            wait_nanos: 0,
        };
        let decision = Decision::from(decision)
            .with_over_limit(count_after.saturating_sub(self.quota.limit()));
        (
            decision,
            allowed.then_some(FixedWindowState {
                window,
                count: count_after,
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
            script: "fixed_window",
            state: "fixed-window",
            params: [
                self.quota.limit(),
                ScriptCall::micros(self.quota.period_nanos()),
                0,
                0,
            ],
        }
    }

    #[inline]
    fn commit(&self, state: &mut FixedWindowState, charge: FixedWindowState) {
        *state = charge;
    }

    /// Off the window the request was charged in, while it is the current
    /// one; a later window never counted it.
    fn refund(&self, state: &mut FixedWindowState, refund: crate::Refund, _now: u64) {
        if state.window == self.per_period.div(refund.at) {
            state.count -= u64::from(refund.cost).min(state.count);
        }
    }

    /// Added to the current window's count (the window a clock that went
    /// back left ahead, if any), past the limit if need be.
    fn debit(&self, state: &mut FixedWindowState, now: u64, cost: u32) {
        let current = self.per_period.div(now);
        if state.window < current {
            *state = FixedWindowState {
                window: current,
                count: 0,
            };
        }
        state.count = state.count.saturating_add(u64::from(cost));
    }
}

impl crate::state_bytes::StateEncoding for FixedWindow {
    const TAG: u8 = 5;

    /// `window`, `count`.
    fn encode_state(state: &FixedWindowState, out: &mut Vec<u8>) {
        crate::state_bytes::put_u64(out, state.window);
        crate::state_bytes::put_u64(out, state.count);
    }

    fn decode_state(
        input: &mut crate::state_bytes::Reader<'_>,
    ) -> Result<FixedWindowState, crate::StateBytesError> {
        Ok(FixedWindowState {
            window: input.u64()?,
            count: input.u64()?,
        })
    }
}
