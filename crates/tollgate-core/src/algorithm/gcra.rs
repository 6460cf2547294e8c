//! GCRA, the generic cell rate algorithm.

use super::schedule::schedule;
use super::{RateAlgorithm, ScriptCall};
use crate::{Decision, Quota};
use std::time::Duration;

/// GCRA: a smooth rate of `limit` per `period` with a tolerance of `burst`
/// requests, in 8 bytes of state per key.
///
/// With emission interval `T = period / limit` (rounded up to the nanosecond)
/// and tolerance `τ = burst·T`, a request of cost `c` moves the key's
/// theoretical arrival time to `TAT' = max(TAT, now) + c·T` and passes iff
/// `TAT' − now ≤ τ`. Over any interval of length `w` it admits at most
/// `burst + w / T` units of cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    interval: u64,
    tolerance: u64,
    quota: Quota,
    /// How far beyond the tolerance a request may be scheduled, held back
    /// until its conformance time (delay mode); 0 to reject instead.
    max_delay: u64,
    /// `tolerance + max_delay`: how far ahead an admitted request may leave
    /// the state.
    bound: u64,
}

/// A key's GCRA state: its theoretical arrival time, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GcraState {
    /// The moment the key is fully rested; 0 for a key never seen.
    pub tat: u64,
}

impl Gcra {
    /// GCRA for `quota`.
    pub fn new(quota: Quota) -> Self {
        let interval = quota.emission_interval_nanos();
        // Quota guarantees burst·T ≤ 2^61.
        let tolerance = interval * quota.burst();
        Gcra {
            interval,
            tolerance,
            quota,
            max_delay: 0,
            bound: tolerance,
        }
    }

    /// Delay mode: a request that would be rejected but conforms within
    /// `max_delay` is admitted with [`Decision::wait`] set to the time until
    /// it conforms, and charged now. Requests so delayed leave in arrival
    /// order at the quota's rate. Capped at 2^61 ns.
    pub fn with_max_delay(self, max_delay: Duration) -> Self {
        let max_delay = u64::try_from(max_delay.as_nanos())
            .unwrap_or(u64::MAX)
            .min(crate::MAX_TOLERANCE_NANOS);
        Gcra {
            max_delay,
            bound: self.tolerance + max_delay,
            ..self
        }
    }

    /// The emission interval `T`, in nanoseconds.
    pub fn interval_nanos(&self) -> u64 {
        self.interval
    }

    /// How long a request may be held in delay mode (zero when off).
    pub fn max_delay(&self) -> Duration {
        Duration::from_nanos(self.max_delay)
    }
}

impl RateAlgorithm for Gcra {
    type State = GcraState;
    type Charge = GcraState;

    #[inline]
    fn evaluate(&self, state: &GcraState, now: u64, cost: u32) -> (Decision, Option<GcraState>) {
        let s = schedule(
            state.tat,
            now,
            u64::from(cost).saturating_mul(self.interval),
            self.tolerance,
            self.bound,
        );
        // The counts (`remaining`, when the next unit is back) and, in delay
        // mode, the wait follow from how far ahead the state lies, and are
        // computed only if read.
        if s.allowed {
            (
                Decision::spaced_allowed(self.quota.burst(), self.interval, s.ahead_after),
                Some(GcraState { tat: s.end }),
            )
        } else {
            (
                Decision::spaced_denied(
                    self.quota.burst(),
                    self.interval,
                    s.ahead_before,
                    s.retry().unwrap_or(Decision::NEVER_NANOS),
                ),
                None,
            )
        }
    }

    fn quota(&self) -> Quota {
        self.quota
    }

    fn from_quota(quota: Quota) -> Self {
        Self::new(quota)
    }

    /// Delay mode kept.
    fn with_quota(&self, quota: Quota) -> Self {
        Self::new(quota).with_max_delay(Duration::from_nanos(self.max_delay))
    }

    fn with_max_delay(self, max_delay: Duration) -> Self {
        Gcra::with_max_delay(self, max_delay)
    }

    fn script(&self) -> ScriptCall {
        let q = self.quota;
        let interval = ScriptCall::micros(self.interval);
        ScriptCall {
            script: "gcra",
            state: "gcra",
            // burst × interval ≤ 2^61 ns (Quota's bound).
            params: [
                interval,
                interval * q.burst(),
                q.burst(),
                ScriptCall::micros_of(self.max_delay()),
            ],
        }
    }

    #[inline]
    fn commit(&self, state: &mut GcraState, charge: GcraState) {
        *state = charge;
    }

    /// The request's units occupy the schedule up to the TAT it left (its
    /// time plus its `reset_after`); those still ahead of `now` are taken
    /// off the TAT, at most its cost's worth and never below `now` (a
    /// bucket already full stays full).
    fn refund(&self, state: &mut GcraState, refund: crate::Refund, now: u64) {
        let cost = self.interval.saturating_mul(u64::from(refund.cost));
        let mark = refund.schedule_end(cost, 0);
        let give = cost
            .min(mark.saturating_sub(now))
            .min(state.tat.saturating_sub(now));
        state.tat -= give;
    }

    /// The schedule moves on by the cost, from now or from where it stands.
    fn debit(&self, state: &mut GcraState, now: u64, cost: u32) {
        let cost = self.interval.saturating_mul(u64::from(cost));
        state.tat = state.tat.max(now).saturating_add(cost);
    }
}

/// One word: the memory store keeps it in an atomic cell (the
/// registry's `one_word`).
impl crate::PackedState for GcraState {
    fn pack(&self) -> u64 {
        self.tat
    }
    fn unpack(bits: u64) -> Self {
        GcraState { tat: bits }
    }
}

impl crate::state_bytes::StateEncoding for Gcra {
    const TAG: u8 = 1;

    /// `tat`.
    fn encode_state(state: &GcraState, out: &mut Vec<u8>) {
        crate::state_bytes::put_u64(out, state.tat);
    }

    fn decode_state(
        input: &mut crate::state_bytes::Reader<'_>,
    ) -> Result<GcraState, crate::StateBytesError> {
        Ok(GcraState { tat: input.u64()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn admits_the_burst_then_one_per_interval() {
        let gcra = Gcra::new(Quota::per_second(10).with_burst(3).unwrap());
        let mut state = GcraState::default();
        let now = 5 * SECOND;
        let remaining: Vec<_> = (0..3)
            .map(|_| gcra.check(&mut state, now, 1).remaining())
            .collect();
        assert_eq!(remaining, [2, 1, 0]);
        let denied = gcra.check(&mut state, now, 1);
        assert!(!denied.allowed());
        assert_eq!(denied.retry_after(), Duration::from_millis(100));
        assert_eq!(denied.reset_after(), Duration::from_millis(300));
        assert!(!gcra.check(&mut state, now + SECOND / 10 - 1, 1).allowed());
        assert!(gcra.check(&mut state, now + SECOND / 10, 1).allowed());
    }

    #[test]
    fn a_cost_above_the_burst_never_passes() {
        let gcra = Gcra::new(Quota::per_second(10));
        let d = gcra.check(&mut GcraState::default(), 0, 11);
        assert!(!d.allowed());
        assert!(!d.can_ever_pass());
    }
}
