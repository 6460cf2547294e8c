//! The sliding log.

use super::schedule::to_u64;
use super::{RateAlgorithm, ScriptCall};
use crate::{Decision, DecisionFields, Quota};
use std::collections::VecDeque;

/// Exact: a request of cost `c` passes iff the summed cost of the requests
/// admitted in `(now − period, now]` plus `c` is at most `limit`.
///
/// The price of exactness is memory: one entry (16 bytes) per admitted
/// request still inside the period, so up to `limit` entries per key. Use it
/// for small limits that must never be exceeded ("500 per hour" on a login
/// form), and a counter algorithm for large ones. `burst` is ignored.
///
/// A key's log holds at most [`max_entries`](Self::max_entries) entries
/// (default [`SlidingLog::DEFAULT_MAX_ENTRIES`]), so a large limit cannot make
/// one key's state grow without bound. Beyond it, the oldest entry is merged
/// into the next one: its cost is counted as if admitted at the later time.
/// That only ever keeps cost in the window longer, so the log never admits
/// more than the exact log would; it may refuse some requests the exact log
/// would admit, only while a key holds more entries than the bound (limits
/// above it, with requests spread over distinct instants).
///
/// ```
/// use tollgate_core::{Quota, RateAlgorithm, SlidingLog};
///
/// let log = SlidingLog::new(Quota::per_second(1_000)).with_max_entries(4);
/// let mut state = Default::default();
/// for i in 0..10 {
///     assert!(log.check(&mut state, i, 1).allowed());
/// }
/// assert_eq!(state.len(), 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingLog {
    quota: Quota,
    max_entries: usize,
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

/// Merges the oldest entry into the next one, at the next one's time (its
/// cost then stays in the window longer: never an over-admission). Costs
/// that would overflow `u32` stay apart; the log is then one over its bound
/// until they leave.
fn merge_oldest(state: &mut SlidingLogState) {
    let (Some(&oldest), Some(next)) = (state.entries.front(), state.entries.get(1)) else {
        return;
    };
    if let Some(cost) = next.cost.checked_add(oldest.cost) {
        state.entries.pop_front();
        if let Some(next) = state.entries.front_mut() {
            next.cost = cost;
        }
    }
}

impl SlidingLogState {
    /// How many admitted requests the log holds (some may have expired since
    /// the last charge; they are dropped at the next one).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What a sliding log charge appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogCharge {
    at: u64,
    cost: u32,
}

impl SlidingLog {
    /// How many entries a key's log holds at most, unless set otherwise:
    /// 64 KiB per key in memory.
    pub const DEFAULT_MAX_ENTRIES: usize = 4_096;

    /// A sliding log for `quota`.
    pub fn new(quota: Quota) -> Self {
        SlidingLog {
            quota,
            max_entries: Self::DEFAULT_MAX_ENTRIES,
        }
    }

    /// The same log holding at most `max_entries` entries per key (at least
    /// 2; smaller values are raised to 2). See the type's docs for what
    /// happens at the bound.
    pub fn with_max_entries(self, max_entries: usize) -> Self {
        SlidingLog {
            max_entries: max_entries.max(2),
            ..self
        }
    }

    /// How many entries a key's log holds at most.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Whether an entry admitted at `at` still counts at `now`.
    fn in_window(&self, at: u64, now: u64) -> bool {
        now.saturating_sub(at) < self.quota.period_nanos()
    }

    /// The summed cost of the entries that have left the window at `now`,
    /// and how many they are (the index of the oldest entry still in it).
    fn expired(&self, state: &SlidingLogState, now: u64) -> (u64, usize) {
        let mut cost = 0;
        for (i, entry) in state.entries.iter().enumerate() {
            if self.in_window(entry.at, now) {
                return (cost, i);
            }
            cost += u64::from(entry.cost);
        }
        (cost, state.entries.len())
    }

    /// When the oldest entry in the window was admitted, once a charge
    /// of `cost` at `now` (if `admitted`) is committed: the first in-window
    /// entry (at index `first`), or the next one if the commit merges the
    /// first into it at the bound; the charge itself in an empty window.
    fn oldest_after(
        &self,
        state: &SlidingLogState,
        first: usize,
        now: u64,
        cost: u32,
        admitted: bool,
    ) -> Option<u64> {
        let entries = &state.entries;
        let Some(oldest) = entries.get(first) else {
            return (admitted && cost > 0).then_some(now);
        };
        let joins_last = entries
            .back()
            .is_some_and(|last| last.at == now && last.cost.checked_add(cost).is_some());
        let appended = admitted && cost > 0 && !joins_last;
        let count = entries.len() - first + usize::from(appended);
        match entries.get(first + 1) {
            Some(next)
                if count > self.max_entries && next.cost.checked_add(oldest.cost).is_some() =>
            {
                Some(next.at)
            }
            _ => Some(oldest.at),
        }
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
    type Charge = LogCharge;
    const WINDOWED: bool = true;

    #[inline]
    fn evaluate(
        &self,
        state: &SlidingLogState,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<LogCharge>) {
        let (expired, first) = self.expired(state, now);
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
        // The oldest entry in the window is the first to give its cost back.
        let oldest = self.oldest_after(state, first, now, cost, allowed);
        let leaves_after = |at: Option<u64>| at.map_or(0, |at| self.leaves_after(at, now));
        let decision = DecisionFields {
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
        let decision =
            Decision::from(decision).with_over_limit(in_window.saturating_sub(self.quota.limit()));
        (decision, allowed.then_some(LogCharge { at: now, cost }))
    }

    fn quota(&self) -> Quota {
        self.quota
    }

    fn from_quota(quota: Quota) -> Self {
        Self::new(quota)
    }

    /// The entry bound kept.
    fn with_quota(&self, quota: Quota) -> Self {
        Self::new(quota).with_max_entries(self.max_entries)
    }

    fn script(&self) -> ScriptCall {
        ScriptCall {
            script: "sliding_log",
            state: "sliding-log",
            params: [
                self.quota.limit(),
                ScriptCall::micros(self.quota.period_nanos()),
                u64::try_from(self.max_entries()).unwrap_or(u64::MAX),
                0,
            ],
        }
    }

    #[inline]
    fn commit(&self, state: &mut SlidingLogState, charge: LogCharge) {
        while let Some(oldest) = state.entries.front() {
            if self.in_window(oldest.at, charge.at) {
                break;
            }
            state.total -= u64::from(oldest.cost);
            state.entries.pop_front();
        }
        if charge.cost == 0 {
            return;
        }
        state.total += u64::from(charge.cost);
        // Requests admitted in the same nanosecond share one entry.
        match state.entries.back_mut() {
            Some(last) if last.at == charge.at && last.cost.checked_add(charge.cost).is_some() => {
                last.cost += charge.cost;
            }
            _ => state.entries.push_back(Entry {
                at: charge.at,
                cost: charge.cost,
            }),
        }
        if state.entries.len() > self.max_entries {
            merge_oldest(state);
        }
    }

    /// Off the entry the request was logged in: the one of its time, or
    /// else the latest before it (a refund's time may be a little early,
    /// never late; an earlier entry leaves the window sooner, so taking
    /// from it is never more lenient than taking from the request's own).
    /// Entries of checks that raced each other to a store's lock may be a
    /// little out of order: the exact time is looked for first.
    fn refund(&self, state: &mut SlidingLogState, refund: crate::Refund, _now: u64) {
        let exact = state.entries.iter().rposition(|e| e.at == refund.at);
        let index = exact.or_else(|| state.entries.iter().rposition(|e| e.at <= refund.at));
        if let Some(entry) = index.and_then(|i| state.entries.get_mut(i)) {
            let give = refund.cost.min(entry.cost);
            entry.cost -= give;
            state.total -= u64::from(give);
        }
        state.entries.retain(|e| e.cost > 0);
    }

    /// Logged at `now`, past the limit if need be.
    fn debit(&self, state: &mut SlidingLogState, now: u64, cost: u32) {
        self.commit(state, LogCharge { at: now, cost });
    }
}

impl crate::state_bytes::StateEncoding for SlidingLog {
    const TAG: u8 = 6;

    /// The entry count; the first entry's time and cost; then each next
    /// entry's time as its difference from the one before, modulo 2^64 and
    /// zigzagged (entries of racing checks may be a little out of order,
    /// and cost a byte or two too), and its cost.
    fn encode_state(state: &SlidingLogState, out: &mut Vec<u8>) {
        use crate::state_bytes::{put_u64, zigzag};
        put_u64(out, state.entries.len() as u64);
        let mut previous = 0u64;
        for (i, entry) in state.entries.iter().enumerate() {
            match i {
                0 => put_u64(out, entry.at),
                _ => put_u64(out, zigzag(entry.at.wrapping_sub(previous))),
            }
            put_u64(out, u64::from(entry.cost));
            previous = entry.at;
        }
    }

    /// The total is summed here, never read.
    fn decode_state(
        input: &mut crate::state_bytes::Reader<'_>,
    ) -> Result<SlidingLogState, crate::StateBytesError> {
        let count = input.u64()?;
        // Two bytes an entry at least: a count beyond that is refused
        // before anything is allocated for it.
        input.can_hold(count, 2)?;
        let mut entries = VecDeque::with_capacity(usize::try_from(count).unwrap_or(0));
        let mut total = 0u64;
        let mut previous = 0u64;
        for i in 0..count {
            let at = match i {
                0 => input.u64()?,
                _ => previous.wrapping_add(crate::state_bytes::unzigzag(input.u64()?)),
            };
            let cost = input.u32()?;
            total += u64::from(cost);
            entries.push_back(Entry { at, cost });
            previous = at;
        }
        Ok(SlidingLogState { entries, total })
    }
}
