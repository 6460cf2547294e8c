//! The sliding log.

use super::schedule::to_u64;
use super::{Evaluation, RateAlgorithm};
use crate::{Decision, Quota};
use std::collections::VecDeque;

/// Exact: a request of cost `c` passes iff the summed cost of the requests
/// admitted in `(now − period, now]` plus `c` is at most `limit`.
///
/// The price of exactness is memory: one entry (16 bytes) per admitted
/// request still inside the period, so up to `limit` entries per key. Use it
/// for small limits that must never be exceeded ("500 per hour" on a login
/// form), and a counter algorithm for large ones. `burst` is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingLog {
    quota: Quota,
}

/// A key's sliding-log state: the admitted requests, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    entries: VecDeque<Entry>,
    /// The summed cost of `entries`.
    total: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    at: u64,
    cost: u32,
}

impl SlidingLogState {
    /// How many admitted requests the log holds (some may have expired since
    /// the last admission; they are dropped at the next one).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What a sliding log admission appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogAdmission {
    at: u64,
    cost: u32,
}

impl SlidingLog {
    /// A sliding log for `quota`.
    pub fn new(quota: Quota) -> Self {
        SlidingLog { quota }
    }

    /// Whether an entry admitted at `at` still counts at `now`.
    fn in_window(&self, at: u64, now: u64) -> bool {
        now.saturating_sub(at) < self.quota.period_nanos()
    }

    /// The summed cost of the entries that have left the window at `now`,
    /// and when the oldest entry still in it was admitted.
    fn expired_cost(&self, state: &SlidingLogState, now: u64) -> (u64, Option<u64>) {
        let mut expired = 0;
        for entry in &state.entries {
            if self.in_window(entry.at, now) {
                return (expired, Some(entry.at));
            }
            expired += u64::from(entry.cost);
        }
        (expired, None)
    }

    /// How long from `now` until an entry admitted at `at` leaves the window.
    fn leaves_after(&self, at: u64, now: u64) -> u64 {
        to_u64(
            (u128::from(at) + u128::from(self.quota.period_nanos()))
                .saturating_sub(u128::from(now)),
        )
    }

    /// How long until enough cost leaves the window for `excess` more to fit.
    fn retry_nanos(&self, state: &SlidingLogState, now: u64, excess: u64) -> u128 {
        let mut freed = 0;
        for entry in state.entries.iter().filter(|e| self.in_window(e.at, now)) {
            freed += u64::from(entry.cost);
            if freed >= excess {
                let leaves_at = u128::from(entry.at) + u128::from(self.quota.period_nanos());
                return leaves_at - u128::from(now);
            }
        }
        0
    }
}

impl RateAlgorithm for SlidingLog {
    type State = SlidingLogState;
    type Admission = LogAdmission;

    #[inline]
    fn evaluate(&self, state: &SlidingLogState, now: u64, cost: u32) -> Evaluation<LogAdmission> {
        let (expired, oldest) = self.expired_cost(state, now);
        let in_window = state.total - expired;
        let wanted = in_window + u64::from(cost);
        let allowed = wanted <= self.quota.limit();
        let retry_after = if allowed {
            0
        } else if u64::from(cost) > self.quota.limit() {
            Decision::NEVER_NANOS
        } else {
            to_u64(self.retry_nanos(state, now, wanted - self.quota.limit()))
        };
        let newest = if allowed && cost > 0 {
            Some(now)
        } else {
            state
                .entries
                .back()
                .filter(|e| self.in_window(e.at, now))
                .map(|e| e.at)
        };
        // The oldest entry in the window is the first to give its cost back;
        // a request admitted into an empty window is its own oldest entry.
        let oldest = oldest.or(newest);
        let leaves_after = |at: Option<u64>| at.map_or(0, |at| self.leaves_after(at, now));
        let decision = Decision {
            allowed,
            limit: self.quota.limit(),
            remaining: self.quota.limit()
                - if allowed {
                    wanted
                } else {
                    in_window.min(self.quota.limit())
                },
            reset_after_nanos: leaves_after(newest),
            replenish_after_nanos: leaves_after(oldest),
            retry_after_nanos: retry_after,
            wait_nanos: 0,
        };
        Evaluation {
            decision,
            admission: allowed.then_some(LogAdmission { at: now, cost }),
        }
    }

    fn quota(&self) -> Quota {
        self.quota
    }

    #[inline]
    fn commit(&self, state: &mut SlidingLogState, admission: LogAdmission) {
        while let Some(oldest) = state.entries.front() {
            if self.in_window(oldest.at, admission.at) {
                break;
            }
            state.total -= u64::from(oldest.cost);
            state.entries.pop_front();
        }
        if admission.cost == 0 {
            return;
        }
        state.total += u64::from(admission.cost);
        // Requests admitted in the same nanosecond share one entry.
        match state.entries.back_mut() {
            Some(last)
                if last.at == admission.at && last.cost.checked_add(admission.cost).is_some() =>
            {
                last.cost += admission.cost;
            }
            _ => state.entries.push_back(Entry {
                at: admission.at,
                cost: admission.cost,
            }),
        }
    }
}
