//! The sliding window of sub-window counters.

use super::divisor::Divisor;
use super::schedule::to_u64;
use super::{RateAlgorithm, ScriptCall};
use crate::{Decision, DecisionFields, Quota};

/// A rolling window kept as `n` small fixed windows (sub-windows) of length
/// `s`, aligned to the clock's origin, each with its own counter. A request
/// of cost `c` at `now`, in sub-window `k = ⌊now / s⌋`, passes iff
///
/// ```text
/// Σ count(i) for k − n ≤ i ≤ k,  plus c,  ≤ limit
/// ```
///
/// The sub-window the period's start falls in (`k − n`) is counted whole,
/// so the counters cover `[(k − n)·s, now]`: never less than the last
/// `period` (`n·s ≥ period`), at most one sub-window more. Hence, exactly:
///
/// - **Never over the limit**: in any span of `n·s` (so in any span of one
///   `period`) at most `limit` is admitted, as with the sliding log.
/// - **Under-admission of at most one sub-window**: with the same admitted
///   history, a request the exact sliding log over `(n + 1)·s` would admit is
///   always admitted; only requests that a log over the last `period` would
///   admit but whose sub-window-rounded window (up to `s` longer) is full are
///   refused. With the default 60 sub-windows that is a window up to 1/60th
///   longer than the period.
///
/// `s` is `⌈period / n⌉` rounded up to a whole microsecond (the unit of the
/// Redis scripts, so both stores cut time at the same instants), and `n` is
/// then `⌈period / s⌉`: at most the `n` asked for, fewer only for periods of
/// under `n` µs. The default is [`DEFAULT_SUB_WINDOWS`](Self::DEFAULT_SUB_WINDOWS)
/// (60: a minute's sub-windows for an hourly limit).
///
/// State: the `n + 1` counters as a ring of `u64` and the index of the
/// newest sub-window, `8·(n + 1)` bytes on the heap plus 24 inline: 512
/// bytes per key at the default 60, whatever the limit (the sliding log
/// keeps 16 bytes per admitted request). On Redis, one hash per key with a
/// field per non-empty sub-window. `burst` is ignored.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{Quota, RateAlgorithm, SlidingWindowBuckets};
///
/// // 3 per minute in 60 one-second sub-windows.
/// let buckets = SlidingWindowBuckets::new(Quota::per_minute(3));
/// assert_eq!(buckets.sub_window(), Duration::from_secs(1));
/// let second = 1_000_000_000;
/// let mut state = Default::default();
/// assert!(buckets.check(&mut state, 10 * second + 500_000_000, 1).allowed());
/// assert!(buckets.check(&mut state, 30 * second, 2).allowed());
/// let refused = buckets.check(&mut state, 60 * second, 1);
/// assert!(!refused.allowed());
/// // The request at 10.5 s counts until its whole sub-window, [10 s, 11 s),
/// // has left the minute: at 71 s, 60.5 s after it (the log would say 70.5 s).
/// assert_eq!(refused.retry_after(), Duration::from_secs(11));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindowBuckets {
    quota: Quota,
    /// `s`, in nanoseconds: a whole number of microseconds, at least one.
    sub_window: u64,
    /// `n = ⌈period / s⌉`.
    sub_windows: u64,
    per_sub_window: Divisor,
}

/// A key's state under [`SlidingWindowBuckets`]: the counters of the
/// `n + 1` newest sub-windows, as a ring.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingWindowBucketsState {
    /// The index (`now / s`) of the newest sub-window counted.
    newest: u64,
    /// `counts[i % (n + 1)]` is the cost admitted in sub-window `i`, for
    /// `newest − n ≤ i ≤ newest`; empty for a key never charged.
    counts: Box<[u64]>,
}

impl SlidingWindowBucketsState {
    /// The cost admitted in sub-window `index`, as far as the state knows
    /// (0 outside the `n + 1` it keeps).
    pub fn count(&self, index: u64) -> u64 {
        let slots = self.counts.len() as u64;
        if slots == 0 || index > self.newest || self.newest - index >= slots {
            return 0;
        }
        self.counts[(index % slots) as usize]
    }

    /// The index of the newest sub-window counted (0 for a key never
    /// charged).
    pub fn newest(&self) -> u64 {
        self.newest
    }
}

/// What a [`SlidingWindowBuckets`] charge adds: `cost` to sub-window
/// `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubWindowCharge {
    index: u64,
    cost: u32,
}

impl SlidingWindowBuckets {
    /// How many sub-windows a period is cut into, unless set otherwise.
    pub const DEFAULT_SUB_WINDOWS: u32 = 60;

    /// The most sub-windows a period can be cut into: 8 KiB of counters per
    /// key.
    pub const MAX_SUB_WINDOWS: u32 = 1_023;

    /// A sliding window of [`DEFAULT_SUB_WINDOWS`](Self::DEFAULT_SUB_WINDOWS)
    /// sub-windows for `quota`.
    pub fn new(quota: Quota) -> Self {
        Self::cut(quota, Self::DEFAULT_SUB_WINDOWS)
    }

    /// The same limit with its period cut into `n` sub-windows (clamped to
    /// `1..=`[`MAX_SUB_WINDOWS`](Self::MAX_SUB_WINDOWS); fewer when the
    /// period is under `n` µs, see the type's docs). More sub-windows refuse
    /// less (the window is at most `period / n` longer than the period) and
    /// cost `8` bytes a key each.
    pub fn with_sub_windows(self, n: u32) -> Self {
        Self::cut(self.quota, n)
    }

    fn cut(quota: Quota, n: u32) -> Self {
        let n = u64::from(n.clamp(1, Self::MAX_SUB_WINDOWS));
        let period = quota.period_nanos();
        // Whole microseconds, at least one: the Redis scripts' unit.
        let sub_window = period.div_ceil(n).div_ceil(1_000).max(1) * 1_000;
        SlidingWindowBuckets {
            quota,
            sub_window,
            sub_windows: period.div_ceil(sub_window).max(1),
            per_sub_window: Divisor::new(sub_window),
        }
    }

    /// `n`: how many sub-windows cover the period (the state keeps one more,
    /// the oldest, which the period's start falls in).
    pub fn sub_windows(&self) -> u32 {
        // ≤ MAX_SUB_WINDOWS by construction.
        self.sub_windows as u32
    }

    /// `s`: the length of a sub-window.
    pub fn sub_window(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.sub_window)
    }

    /// The ring's length: `n + 1` counters.
    fn slots(&self) -> u64 {
        self.sub_windows + 1
    }

    /// The moment, from `now`, when sub-window `index` leaves the window:
    /// the start of sub-window `index + n + 1`.
    fn leaves_after(&self, index: u64, now: u64) -> u64 {
        let at = (u128::from(index) + u128::from(self.slots())) * u128::from(self.sub_window);
        to_u64(at.saturating_sub(u128::from(now)))
    }
}

impl RateAlgorithm for SlidingWindowBuckets {
    type State = SlidingWindowBucketsState;
    type Charge = SubWindowCharge;
    const WINDOWED: bool = true;

    fn evaluate(
        &self,
        state: &SlidingWindowBucketsState,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<SubWindowCharge>) {
        let current = self.per_sub_window.div(now);
        // A ring of another length was written under another configuration:
        // as a key never seen (as for a state of another algorithm).
        let known = state.counts.len() as u64 == self.slots();
        // A newest sub-window after `now`'s (the clock went back) is kept,
        // conservatively: the request counts as in it.
        let index = if known {
            current.max(state.newest)
        } else {
            current
        };
        // The window: sub-windows `index − n ..= index`.
        let first = index.saturating_sub(self.sub_windows);
        let count = |i: u64| if known { state.count(i) } else { 0 };
        let in_window: u64 = (first..=index).map(count).fold(0, u64::saturating_add);
        let limit = self.quota.limit();
        let wanted = in_window.saturating_add(u64::from(cost));
        let allowed = wanted <= limit;
        // The counts once the charge is made (if allowed).
        // Saturating: a count decoded from a store may be anything.
        let after = |i: u64| {
            count(i).saturating_add(if allowed && i == index {
                u64::from(cost)
            } else {
                0
            })
        };
        let oldest = (first..=index).find(|&i| after(i) > 0);
        let newest = (first..=index).rev().find(|&i| after(i) > 0);
        let retry_after = if allowed {
            0
        } else if u64::from(cost) > limit {
            Decision::NEVER_NANOS
        } else {
            // The oldest sub-windows leave first: wait for enough of them.
            let mut left = in_window;
            let mut retry = 0;
            for i in first..=index {
                left -= count(i).min(left);
                if left.saturating_add(u64::from(cost)) <= limit {
                    retry = self.leaves_after(i, now);
                    break;
                }
            }
            retry
        };
        let decision = DecisionFields {
            allowed,
            limit,
            remaining: limit
                - if allowed {
                    wanted
                } else {
                    in_window.min(limit)
                },
            reset_after_nanos: newest.map_or(0, |i| self.leaves_after(i, now)),
            replenish_after_nanos: oldest.map_or(0, |i| self.leaves_after(i, now)),
            retry_after_nanos: retry_after,
            wait_nanos: 0,
        };
        let decision = Decision::from(decision).with_over_limit(in_window.saturating_sub(limit));
        (decision, allowed.then_some(SubWindowCharge { index, cost }))
    }

    fn quota(&self) -> Quota {
        self.quota
    }

    fn from_quota(quota: Quota) -> Self {
        Self::new(quota)
    }

    /// The number of sub-windows kept (as asked for: fewer when the new
    /// period is under that many µs).
    fn with_quota(&self, quota: Quota) -> Self {
        Self::cut(quota, u32::try_from(self.sub_windows).unwrap_or(u32::MAX))
    }

    fn script(&self) -> ScriptCall {
        ScriptCall {
            script: "sliding_window_buckets",
            state: "sliding-window-buckets",
            params: [
                self.quota.limit(),
                self.sub_window / 1_000,
                self.sub_windows,
                0,
            ],
        }
    }

    fn commit(&self, state: &mut SlidingWindowBucketsState, charge: SubWindowCharge) {
        if charge.cost == 0 {
            return;
        }
        let slots = self.slots();
        if state.counts.len() as u64 != slots {
            // Allocated on the first charge: a key only ever refused, or
            // charged nothing, costs no heap.
            state.counts = vec![0; slots as usize].into_boxed_slice();
            state.newest = charge.index;
        }
        if charge.index > state.newest {
            // Clear the sub-windows that left the ring since the newest:
            // their slots now stand for the ones up to `charge.index`.
            let stale = (charge.index - state.newest).min(slots);
            for i in state.newest + 1..=state.newest + stale {
                state.counts[(i % slots) as usize] = 0;
            }
            state.newest = charge.index;
        }
        // `charge.index` is the newest (evaluate never charges an older one).
        let slot = &mut state.counts[(charge.index % slots) as usize];
        *slot = slot.saturating_add(u64::from(charge.cost));
    }

    /// Off the sub-window the request was charged in, while the ring still
    /// holds it.
    fn refund(&self, state: &mut SlidingWindowBucketsState, refund: crate::Refund, _now: u64) {
        let slots = self.slots();
        let index = self.per_sub_window.div(refund.at);
        if state.counts.len() as u64 != slots
            || index > state.newest
            || state.newest - index >= slots
        {
            return;
        }
        let slot = &mut state.counts[(index % slots) as usize];
        *slot -= u64::from(refund.cost).min(*slot);
    }

    /// Added to the sub-window a request would be charged in now, past the
    /// limit if need be.
    fn debit(&self, state: &mut SlidingWindowBucketsState, now: u64, cost: u32) {
        let current = self.per_sub_window.div(now);
        let index = if state.counts.len() as u64 == self.slots() {
            current.max(state.newest)
        } else {
            current
        };
        self.commit(state, SubWindowCharge { index, cost });
    }
}

impl crate::state_bytes::StateEncoding for SlidingWindowBuckets {
    const TAG: u8 = 8;

    /// `newest`, the ring's length, each count.
    fn encode_state(state: &SlidingWindowBucketsState, out: &mut Vec<u8>) {
        use crate::state_bytes::put_u64;
        put_u64(out, state.newest);
        put_u64(out, state.counts.len() as u64);
        for count in &state.counts {
            put_u64(out, *count);
        }
    }

    /// A ring no configuration keeps (longer than `MAX_SUB_WINDOWS + 1`)
    /// is refused.
    fn decode_state(
        input: &mut crate::state_bytes::Reader<'_>,
    ) -> Result<SlidingWindowBucketsState, crate::StateBytesError> {
        let newest = input.u64()?;
        let at = input.at();
        let len = input.u64()?;
        if len > u64::from(Self::MAX_SUB_WINDOWS) + 1 {
            return Err(crate::StateBytesError::Malformed {
                at,
                what: "a ring of sub-windows longer than 1,024",
            });
        }
        input.can_hold(len, 1)?;
        let counts = (0..len)
            .map(|_| input.u64())
            .collect::<Result<Box<[u64]>, _>>()?;
        Ok(SlidingWindowBucketsState { newest, counts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn sub_windows_are_whole_microseconds_and_cover_the_period() {
        let hourly = SlidingWindowBuckets::new("500/h".parse().unwrap());
        assert_eq!(hourly.sub_window(), Duration::from_secs(60));
        assert_eq!(hourly.sub_windows(), 60);
        // 1 s / 60 = 16,666.67 µs: rounded up, still 60 of them.
        let second = SlidingWindowBuckets::new(Quota::per_second(8));
        assert_eq!(second.sub_window(), Duration::from_micros(16_667));
        assert_eq!(second.sub_windows(), 60);
        // A 10 µs period has 10 sub-windows of 1 µs; 1 ns, one.
        let tiny = SlidingWindowBuckets::new(Quota::new(5, Duration::from_micros(10)).unwrap());
        assert_eq!(
            (tiny.sub_windows(), tiny.sub_window()),
            (10, Duration::from_micros(1))
        );
        let tinier = SlidingWindowBuckets::new(Quota::new(5, Duration::from_nanos(1)).unwrap());
        assert_eq!(tinier.sub_windows(), 1);
        let coarse = hourly.with_sub_windows(0);
        assert_eq!(
            (coarse.sub_windows(), coarse.sub_window()),
            (1, Duration::from_secs(3_600))
        );
        let fine = hourly.with_sub_windows(u32::MAX);
        assert_eq!(fine.sub_windows(), SlidingWindowBuckets::MAX_SUB_WINDOWS);
        assert!(fine.sub_window() * fine.sub_windows() >= Duration::from_secs(3_600));
    }

    #[test]
    fn the_oldest_sub_window_counts_whole_until_it_leaves() {
        // 2 per 10 s in 10 sub-windows of 1 s.
        let buckets = SlidingWindowBuckets::new("2/10s".parse().unwrap()).with_sub_windows(10);
        let mut state = SlidingWindowBucketsState::default();
        assert!(
            buckets
                .check(&mut state, 3 * SECOND + 900_000_000, 1)
                .allowed()
        );
        assert!(buckets.check(&mut state, 5 * SECOND, 1).allowed());
        // Sub-window 3 leaves at 14 s (the log's 13.9 s).
        let refused = buckets.check(&mut state, 13 * SECOND + 950_000_000, 1);
        assert!(!refused.allowed());
        assert_eq!(refused.retry_after(), Duration::from_millis(50));
        assert_eq!(refused.replenish_after(), Duration::from_millis(50));
        assert_eq!(refused.reset_after(), Duration::from_millis(2_050));
        let allowed = buckets.check(&mut state, 14 * SECOND, 1);
        assert!(allowed.allowed());
        assert_eq!(allowed.remaining(), 0);
        assert_eq!(allowed.reset_after(), Duration::from_secs(11));
        assert_eq!(state.count(14), 1);
        assert_eq!(state.count(5), 1);
        assert_eq!(state.count(3), 0);
    }

    #[test]
    fn a_denial_and_a_free_request_change_nothing() {
        let buckets = SlidingWindowBuckets::new(Quota::per_second(1));
        let mut state = SlidingWindowBucketsState::default();
        assert!(buckets.check(&mut state, SECOND, 0).allowed());
        assert_eq!(
            state,
            SlidingWindowBucketsState::default(),
            "no heap for nothing"
        );
        assert!(buckets.check(&mut state, SECOND, 1).allowed());
        let before = state.clone();
        assert!(!buckets.check(&mut state, SECOND, 1).allowed());
        assert_eq!(state, before);
        let never = buckets.check(&mut state, SECOND, 2);
        assert_eq!(never.retry_after(), Decision::NEVER);
    }

    #[test]
    fn a_clock_that_goes_back_counts_in_the_newest_sub_window() {
        let buckets = SlidingWindowBuckets::new(Quota::per_minute(2));
        let mut state = SlidingWindowBucketsState::default();
        assert!(buckets.check(&mut state, 100 * SECOND, 1).allowed());
        assert!(buckets.check(&mut state, 50 * SECOND, 1).allowed());
        assert_eq!((state.newest(), state.count(100)), (100, 2));
        assert!(!buckets.check(&mut state, 60 * SECOND, 1).allowed());
        assert!(buckets.check(&mut state, 161 * SECOND, 2).allowed());
    }

    #[test]
    fn a_long_gap_clears_the_ring() {
        let buckets = SlidingWindowBuckets::new(Quota::per_minute(3));
        let mut state = SlidingWindowBucketsState::default();
        for t in [0, 20, 40] {
            assert!(buckets.check(&mut state, t * SECOND, 1).allowed());
        }
        assert!(buckets.check(&mut state, 10_000 * SECOND, 3).allowed());
        assert_eq!(state.counts.iter().sum::<u64>(), 3);
    }
}
