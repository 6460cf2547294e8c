//! The token bucket.

use super::divisor::Divisor;
use super::schedule::{replenish_after, schedule, to_u64};
use super::{Gcra, GcraState, RateAlgorithm, ScriptCall, bucket_window};
use crate::{Decision, DecisionFields, Quota};
use std::time::Duration;

/// How a [`TokenBucket`] gets its tokens back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Refill {
    /// Continuously: `limit` tokens per `period`, spread evenly, exact to the
    /// nanosecond (no rounding of the rate). The default.
    #[default]
    Continuous,
    /// In steps: all `limit` tokens at once at every period boundary
    /// (boundaries aligned to the clock's origin), capped at the capacity.
    Interval,
}

/// A bucket holding at most `burst` tokens, refilled at `limit` per `period`;
/// a request of cost `c` passes iff the bucket holds at least `c` tokens, and
/// takes them.
///
/// With [`Refill::Continuous`] the bucket admits exactly the sequences GCRA
/// would with an unrounded emission interval: the two are the same algorithm
/// seen from two sides. Pick the token bucket when you think in tokens, need
/// exact rates such as 3 per second, or want [`Refill::Interval`]; pick GCRA
/// for the smallest state (8 bytes instead of 24).
///
/// ```
/// use tollgate_core::{Quota, RateAlgorithm, TokenBucket};
///
/// let bucket = TokenBucket::new(Quota::per_second(2).with_burst(10).unwrap());
/// let mut state = Default::default();
/// assert_eq!((0..11).filter(|_| bucket.check(&mut state, 0, 1).allowed()).count(), 10);
/// // Half a second later one token is back.
/// assert!(bucket.check(&mut state, 500_000_000, 1).allowed());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    quota: Quota,
    refill: Refill,
    /// Continuous refill works in units of `1 / scale` ns, `scale = limit / g`
    /// with `g = gcd(limit, period)`, so that one token takes an integer
    /// `unit = period / g` of them: exact, with no rounding.
    scale: u64,
    unit: u64,
    per_scale: Divisor,
    per_unit: Divisor,
    per_period: Divisor,
    /// When `scale` is 1 the units are nanoseconds and the arithmetic is
    /// GCRA's with an exact interval, done in 64 bits.
    as_gcra: Option<Gcra>,
    /// Delay mode's bound, in the scaled units.
    max_delay: u128,
}

/// A key's token-bucket state. `Default` is a full bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenBucketState {
    /// For [`Refill::Continuous`]: the moment the bucket is full again, in
    /// units of `1 / (limit / gcd(limit, period))` ns, which makes the refill
    /// rate an integer (plain nanoseconds when `limit` divides `period`).
    Continuous {
        /// The scaled moment of being full; 0 for a key never seen.
        full_at: ScaledTime,
    },
    /// For [`Refill::Interval`]: tokens taken in the current interval.
    Interval {
        /// The interval index (`now / period`) these counts belong to.
        interval: u64,
        /// Tokens missing from the bucket.
        used: u64,
    },
}

/// A 128-bit time in a token bucket's scaled units, stored as two `u64` so
/// that the state needs 8-byte, not 16-byte, alignment (24 bytes, not 32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScaledTime([u64; 2]);

impl ScaledTime {
    /// Zero: a key never seen.
    pub const ZERO: ScaledTime = ScaledTime([0, 0]);

    /// The value.
    #[inline]
    pub fn get(self) -> u128 {
        (u128::from(self.0[0]) << 64) | u128::from(self.0[1])
    }
}

impl From<u128> for ScaledTime {
    #[inline]
    fn from(value: u128) -> Self {
        ScaledTime([(value >> 64) as u64, value as u64])
    }
}

impl Default for TokenBucketState {
    fn default() -> Self {
        TokenBucketState::Continuous {
            full_at: ScaledTime::ZERO,
        }
    }
}

impl TokenBucket {
    /// A continuously refilled bucket for `quota`: capacity `burst`, refill
    /// `limit` per `period`.
    pub fn new(quota: Quota) -> Self {
        let g = gcd(quota.limit(), quota.period_nanos());
        let (scale, unit) = (quota.limit() / g, quota.period_nanos() / g);
        TokenBucket {
            quota,
            refill: Refill::Continuous,
            scale,
            unit,
            per_scale: Divisor::new(scale),
            per_unit: Divisor::new(unit),
            per_period: Divisor::new(quota.period_nanos()),
            as_gcra: (scale == 1).then(|| Gcra::new(quota)),
            max_delay: 0,
        }
    }

    /// The same bucket with another refill style.
    pub fn with_refill(self, refill: Refill) -> Self {
        TokenBucket { refill, ..self }
    }

    /// Delay mode for the continuous refill: a request for which the tokens
    /// will be there within `max_delay` is admitted, takes them now, and gets
    /// [`Decision::wait`] until they would have been there. See
    /// [`Gcra::with_max_delay`]. No effect on [`Refill::Interval`].
    pub fn with_max_delay(self, max_delay: Duration) -> Self {
        let nanos = u64::try_from(max_delay.as_nanos())
            .unwrap_or(u64::MAX)
            .min(crate::MAX_TOLERANCE_NANOS);
        TokenBucket {
            max_delay: u128::from(nanos) * u128::from(self.scale),
            as_gcra: self.as_gcra.map(|g| g.with_max_delay(max_delay)),
            ..self
        }
    }

    /// The refill style.
    pub fn refill(&self) -> Refill {
        self.refill
    }

    /// How long a request may be held in delay mode (zero when off).
    pub fn max_delay(&self) -> Duration {
        let nanos = self.max_delay / u128::from(self.scale);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    #[inline]
    fn evaluate_continuous(
        &self,
        full_at: u128,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<TokenBucketState>) {
        if let (Some(gcra), Ok(tat)) = (&self.as_gcra, u64::try_from(full_at)) {
            let e = gcra.evaluate(&GcraState { tat }, now, cost);
            return (
                e.0,
                e.1.map(|a| TokenBucketState::Continuous {
                    full_at: ScaledTime::from(u128::from(a.tat)),
                }),
            );
        }
        self.evaluate_scaled(full_at, now, cost)
    }

    /// The general path, in 128-bit scaled units: kept out of line so the
    /// common case above stays small enough to inline.
    #[inline(never)]
    fn evaluate_scaled(
        &self,
        full_at: u128,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<TokenBucketState>) {
        let unit = u128::from(self.unit);
        let capacity = u128::from(self.quota.burst()) * unit;
        let s = schedule(
            full_at,
            u128::from(now) * u128::from(self.scale),
            u128::from(cost) * unit,
            capacity,
            capacity.saturating_add(self.max_delay),
        );
        let missing = s.ahead();
        let to_nanos = |scaled: u128| to_u64(self.per_scale.div_ceil_wide(scaled));
        let remaining = self.per_unit.div_wide(capacity - missing.min(capacity));
        let decision = DecisionFields {
            allowed: s.allowed,
            limit: self.quota.burst(),
            remaining: to_u64(remaining),
            reset_after_nanos: to_nanos(missing),
            replenish_after_nanos: to_nanos(replenish_after(
                missing,
                remaining,
                u128::from(self.quota.burst()),
                1,
                unit,
            )),
            retry_after_nanos: s.retry().map_or(Decision::NEVER_NANOS, to_nanos),
            wait_nanos: if s.allowed {
                to_nanos(s.ahead_after.saturating_sub(capacity))
            } else {
                0
            },
        }
        .into();
        (
            decision,
            s.allowed.then_some(TokenBucketState::Continuous {
                full_at: ScaledTime::from(s.end),
            }),
        )
    }

    /// An interval bucket's `(interval, used)` at `now`: the refills since
    /// its interval taken off (a state from a later interval, the clock
    /// having gone back, is kept as it is; one of the other style is a
    /// full bucket).
    fn refilled(&self, state: &TokenBucketState, now: u64) -> (u64, u64) {
        let current = self.per_period.div(now);
        match *state {
            TokenBucketState::Interval { interval, used } if interval >= current => {
                (interval, used)
            }
            TokenBucketState::Interval { interval, used } => {
                let refilled = u128::from(current - interval) * u128::from(self.quota.limit());
                (current, to_u64(u128::from(used).saturating_sub(refilled)))
            }
            TokenBucketState::Continuous { .. } => (current, 0),
        }
    }

    fn evaluate_interval(
        &self,
        state: &TokenBucketState,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<TokenBucketState>) {
        let (interval, used) = self.refilled(state, now);
        let available = self.quota.burst().saturating_sub(used);
        let allowed = u64::from(cost) <= available;
        let used_after = if allowed {
            used + u64::from(cost)
        } else {
            used
        };
        // The moment `n` refills from now have happened.
        let after_refills = |n: u64| {
            let boundary =
                (u128::from(interval) + u128::from(n)) * u128::from(self.quota.period_nanos());
            to_u64(boundary.saturating_sub(u128::from(now)))
        };
        let retry_after = if allowed {
            0
        } else if u64::from(cost) > self.quota.burst() {
            Decision::NEVER_NANOS
        } else {
            // Tokens missing for the request: past a debt (more used than
            // the bucket holds), all of it comes first.
            let missing = used.saturating_add(u64::from(cost)) - self.quota.burst();
            after_refills(missing.div_ceil(self.quota.limit()))
        };
        let decision = DecisionFields {
            allowed,
            limit: self.quota.burst(),
            remaining: self.quota.burst().saturating_sub(used_after),
            reset_after_nanos: after_refills(used_after.div_ceil(self.quota.limit())),
            // Tokens come back only at boundaries, the next one first.
            replenish_after_nanos: if used_after == 0 { 0 } else { after_refills(1) },
            retry_after_nanos: retry_after,
            wait_nanos: 0,
        };
        let decision =
            Decision::from(decision).with_over_limit(used_after.saturating_sub(self.quota.burst()));
        (
            decision,
            allowed.then_some(TokenBucketState::Interval {
                interval,
                used: used_after,
            }),
        )
    }
}

/// The token bucket with interval refill, under a name of its own: `limit`
/// tokens come back all at once at each period boundary (aligned to the
/// clock's origin), up to `burst`. It is
/// `TokenBucket::new(quota).with_refill(Refill::Interval)`, selectable as
/// [`Algorithm::TokenBucketInterval`](crate::Algorithm::TokenBucketInterval)
/// (`"token-bucket-interval"`) wherever an algorithm is chosen by name.
///
/// ```
/// use tollgate_core::{IntervalTokenBucket, Quota, RateAlgorithm};
///
/// let bucket = IntervalTokenBucket::new(Quota::per_second(2));
/// let mut state = Default::default();
/// let second = 1_000_000_000;
/// assert!(bucket.check(&mut state, second + 100, 1).allowed());
/// assert!(bucket.check(&mut state, second + 200, 1).allowed());
/// let refused = bucket.check(&mut state, second + 300, 1);
/// assert!(!refused.allowed());
/// // Both tokens come back at the next boundary, not one every 500 ms.
/// assert_eq!(refused.retry_after_nanos(), second - 300);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntervalTokenBucket(TokenBucket);

impl IntervalTokenBucket {
    /// An interval-refilled bucket for `quota`.
    pub fn new(quota: Quota) -> Self {
        IntervalTokenBucket(TokenBucket::new(quota).with_refill(Refill::Interval))
    }

    /// The same bucket as a [`TokenBucket`] with [`Refill::Interval`].
    pub fn bucket(&self) -> &TokenBucket {
        &self.0
    }
}

impl RateAlgorithm for IntervalTokenBucket {
    type State = TokenBucketState;
    type Charge = TokenBucketState;

    #[inline]
    fn evaluate(
        &self,
        state: &TokenBucketState,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<TokenBucketState>) {
        self.0.evaluate(state, now, cost)
    }

    fn quota(&self) -> Quota {
        self.0.quota
    }

    #[inline]
    fn commit(&self, state: &mut TokenBucketState, charge: TokenBucketState) {
        self.0.commit(state, charge);
    }

    fn refund(&self, state: &mut TokenBucketState, refund: crate::Refund, now: u64) {
        self.0.refund(state, refund, now);
    }

    fn debit(&self, state: &mut TokenBucketState, now: u64, cost: u32) {
        self.0.debit(state, now, cost);
    }

    fn from_quota(quota: Quota) -> Self {
        Self::new(quota)
    }

    fn with_quota(&self, quota: Quota) -> Self {
        IntervalTokenBucket(self.0.with_quota(quota))
    }

    fn window(&self) -> Duration {
        self.0.window()
    }

    fn script(&self) -> ScriptCall {
        self.0.script()
    }

    #[inline]
    fn check(&self, state: &mut TokenBucketState, now: u64, cost: u32) -> Decision {
        self.0.check(state, now, cost)
    }
}

impl RateAlgorithm for TokenBucket {
    type State = TokenBucketState;
    type Charge = TokenBucketState;

    #[inline]
    fn evaluate(
        &self,
        state: &TokenBucketState,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<TokenBucketState>) {
        match (self.refill, state) {
            (Refill::Continuous, TokenBucketState::Continuous { full_at }) => {
                self.evaluate_continuous(full_at.get(), now, cost)
            }
            // A state of the other style (the refill was reconfigured) is
            // treated as a full bucket.
            (Refill::Continuous, TokenBucketState::Interval { .. }) => {
                self.evaluate_continuous(0, now, cost)
            }
            (Refill::Interval, state) => self.evaluate_interval(state, now, cost),
        }
    }

    fn quota(&self) -> Quota {
        self.quota
    }

    fn from_quota(quota: Quota) -> Self {
        Self::new(quota)
    }

    /// The refill style and delay mode kept.
    fn with_quota(&self, quota: Quota) -> Self {
        let delay = self.max_delay / u128::from(self.scale.max(1));
        let bucket = TokenBucket::new(quota).with_refill(self.refill);
        match u64::try_from(delay) {
            Ok(0) => bucket,
            Ok(nanos) => bucket.with_max_delay(Duration::from_nanos(nanos)),
            Err(_) => bucket.with_max_delay(Duration::MAX),
        }
    }

    fn window(&self) -> Duration {
        match self.refill {
            // All tokens back at period boundaries: whole periods.
            Refill::Interval => {
                let (burst, limit) = (self.quota.burst(), self.quota.limit());
                let periods = u128::from(burst.div_ceil(limit));
                let nanos = periods * u128::from(self.quota.period_nanos());
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
            }
            Refill::Continuous => bucket_window(self.quota),
        }
    }

    fn with_max_delay(self, max_delay: Duration) -> Self {
        TokenBucket::with_max_delay(self, max_delay)
    }

    fn script(&self) -> ScriptCall {
        let q = self.quota;
        match self.refill {
            Refill::Interval => ScriptCall {
                script: "token_bucket",
                state: "token-bucket-interval",
                params: [
                    q.limit(),
                    ScriptCall::micros(q.period_nanos()),
                    q.burst(),
                    0,
                ],
            },
            // The continuous bucket admits what GCRA admits: its script.
            Refill::Continuous => {
                let interval = ScriptCall::micros(q.emission_interval_nanos());
                ScriptCall {
                    script: "gcra",
                    state: "token-bucket",
                    params: [
                        interval,
                        interval * q.burst(),
                        q.burst(),
                        ScriptCall::micros_of(self.max_delay()),
                    ],
                }
            }
        }
    }

    #[inline]
    fn commit(&self, state: &mut TokenBucketState, charge: TokenBucketState) {
        *state = charge;
    }

    /// Continuous: as GCRA's refund, in the scaled units. Interval: the
    /// tokens still missing because of the charge (its cost, less what
    /// the refills since could have brought back) are put back, never
    /// more than are missing now.
    fn refund(&self, state: &mut TokenBucketState, refund: crate::Refund, now: u64) {
        match state {
            TokenBucketState::Continuous { full_at } => {
                let now = u128::from(now) * u128::from(self.scale);
                let scale = u128::from(self.scale);
                let cost = u128::from(self.unit) * u128::from(refund.cost);
                let at = u128::from(refund.at) * scale;
                // `reset_after` is the scaled moment of being full rounded
                // up to the ns: one ns less, scaled, is never past it.
                let mark = refund
                    .reset_after
                    .map_or(0, |reset| {
                        u128::from(refund.at.saturating_add(reset).saturating_sub(1)) * scale
                    })
                    .max(at.saturating_add(cost));
                let give = cost
                    .min(mark.saturating_sub(now))
                    .min(full_at.get().saturating_sub(now));
                *full_at = ScaledTime::from(full_at.get() - give);
            }
            TokenBucketState::Interval { interval, used } => {
                let current = self.per_period.div(now).max(*interval);
                let limit = u128::from(self.quota.limit());
                let refilled = u128::from(current - *interval) * limit;
                let used_now = to_u64(u128::from(*used).saturating_sub(refilled));
                let charged = u128::from(self.per_period.div(refund.at));
                let since = u128::from(current).saturating_sub(charged);
                let still = to_u64(u128::from(refund.cost).saturating_sub(since * limit));
                *interval = current;
                *used = used_now - still.min(used_now);
            }
        }
    }

    /// Continuous: the moment of being full moves on by the cost, from now
    /// or from where it stands. Interval: the cost is added to the tokens
    /// missing, past the bucket's size if need be.
    fn debit(&self, state: &mut TokenBucketState, now: u64, cost: u32) {
        *state = match (self.refill, *state) {
            (Refill::Continuous, state) => {
                let full_at = match state {
                    TokenBucketState::Continuous { full_at } => full_at.get(),
                    TokenBucketState::Interval { .. } => 0,
                };
                let now = u128::from(now) * u128::from(self.scale);
                let cost = u128::from(self.unit) * u128::from(cost);
                TokenBucketState::Continuous {
                    full_at: ScaledTime::from(full_at.max(now).saturating_add(cost)),
                }
            }
            (Refill::Interval, state) => {
                let (interval, used) = self.refilled(&state, now);
                TokenBucketState::Interval {
                    interval,
                    used: used.saturating_add(u64::from(cost)),
                }
            }
        };
    }

    #[inline]
    fn check(&self, state: &mut TokenBucketState, now: u64, cost: u32) -> Decision {
        // The common case (`limit` divides `period`) is GCRA with an exact
        // interval: run it on the state in place.
        if let (Refill::Continuous, Some(gcra), TokenBucketState::Continuous { full_at }) =
            (self.refill, &self.as_gcra, &mut *state)
            && let Ok(tat) = u64::try_from(full_at.get())
        {
            let mut gcra_state = GcraState { tat };
            let decision = gcra.check(&mut gcra_state, now, cost);
            *full_at = ScaledTime::from(u128::from(gcra_state.tat));
            return decision;
        }
        let e = self.evaluate(state, now, cost);
        if let Some(charge) = e.1 {
            *state = charge;
        }
        e.0
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl crate::state_bytes::StateEncoding for TokenBucket {
    const TAG: u8 = 2;

    /// See [`encode_bucket`].
    fn encode_state(state: &TokenBucketState, out: &mut Vec<u8>) {
        encode_bucket(state, out);
    }

    fn decode_state(
        input: &mut crate::state_bytes::Reader<'_>,
    ) -> Result<TokenBucketState, crate::StateBytesError> {
        decode_bucket(input)
    }
}

impl crate::state_bytes::StateEncoding for IntervalTokenBucket {
    const TAG: u8 = 3;

    /// See [`encode_bucket`].
    fn encode_state(state: &TokenBucketState, out: &mut Vec<u8>) {
        encode_bucket(state, out);
    }

    fn decode_state(
        input: &mut crate::state_bytes::Reader<'_>,
    ) -> Result<TokenBucketState, crate::StateBytesError> {
        decode_bucket(input)
    }
}

/// Either refill's state, for either bucket (a bucket may hold the other
/// style's, after a change of configuration; it reads it as full): `0`
/// and `full_at` (128 bits), or `1`, `interval` and `used`.
fn encode_bucket(state: &TokenBucketState, out: &mut Vec<u8>) {
    use crate::state_bytes::{put_u64, put_u128};
    match *state {
        TokenBucketState::Continuous { full_at } => {
            out.push(0);
            put_u128(out, full_at.get());
        }
        TokenBucketState::Interval { interval, used } => {
            out.push(1);
            put_u64(out, interval);
            put_u64(out, used);
        }
    }
}

fn decode_bucket(
    input: &mut crate::state_bytes::Reader<'_>,
) -> Result<TokenBucketState, crate::StateBytesError> {
    let at = input.at();
    match input.byte()? {
        0 => Ok(TokenBucketState::Continuous {
            full_at: ScaledTime::from(input.u128()?),
        }),
        1 => Ok(TokenBucketState::Interval {
            interval: input.u64()?,
            used: input.u64()?,
        }),
        _ => Err(crate::StateBytesError::Malformed {
            at,
            what: "a token bucket's refill that is neither 0 nor 1",
        }),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_interval_bucket_by_name_is_the_bucket_refilled_per_period() {
        let quota = Quota::per_second(10).with_burst(15).unwrap();
        let named = crate::Limiter::new(crate::Algorithm::TokenBucketInterval, quota);
        let by_hand = TokenBucket::new(quota).with_refill(Refill::Interval);
        // Whole periods: 15 tokens at 10 a period take 2 periods to refill,
        // where the continuous bucket takes 1.5 s.
        assert_eq!(named.window(), Duration::from_secs(2));
        assert_eq!(
            crate::Limiter::TokenBucket(TokenBucket::new(quota)).window(),
            Duration::from_millis(1_500)
        );
        assert_eq!(named.script(), by_hand.script());
        assert_eq!(named.script().state, "token-bucket-interval");
        let (mut a, mut b) = (named.new_state(), TokenBucketState::default());
        for now in (0..40).map(|i| i * 77_000_000) {
            assert_eq!(
                named.check(&mut a, now, 1),
                by_hand.check(&mut b, now, 1),
                "at {now}"
            );
        }
    }

    #[test]
    fn max_delay_reads_back_what_was_set() {
        let delay = Duration::from_millis(300);
        // 10/s: the GCRA fast path; 7/s: the scaled path.
        for quota in [Quota::per_second(10), Quota::per_second(7)] {
            let bucket = TokenBucket::new(quota);
            assert_eq!(bucket.max_delay(), Duration::ZERO);
            assert_eq!(bucket.with_max_delay(delay).max_delay(), delay);
        }
        let gcra = Gcra::new(Quota::per_second(7));
        assert_eq!(gcra.max_delay(), Duration::ZERO);
        assert_eq!(gcra.with_max_delay(delay).max_delay(), delay);
    }
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn continuous_refill_is_exact_for_rates_that_do_not_divide_the_period() {
        // 3 per second: a token every 333.33… ms.
        let bucket = TokenBucket::new(Quota::per_second(3).with_burst(1).unwrap());
        let mut state = TokenBucketState::default();
        assert!(bucket.check(&mut state, 0, 1).allowed());
        let denied = bucket.check(&mut state, 0, 1);
        assert_eq!(denied.retry_after(), Duration::from_nanos(333_333_334));
        assert!(!bucket.check(&mut state, 333_333_333, 1).allowed());
        assert!(bucket.check(&mut state, 333_333_334, 1).allowed());
        // A drained bucket of 10 has exactly 3 tokens back after 1 s and 6
        // after 2 s: no rounding of 1/3 s accumulates (GCRA, which rounds its
        // interval up to 333 333 334 ns, has only 2 back after 1 s).
        let bucket = TokenBucket::new(Quota::per_second(3).with_burst(10).unwrap());
        let mut state = TokenBucketState::default();
        let take_all = |state: &mut TokenBucketState, now| {
            (0..20)
                .filter(|_| bucket.check(state, now, 1).allowed())
                .count()
        };
        assert_eq!(take_all(&mut state, 0), 10);
        assert_eq!(take_all(&mut state, 1_000 * MS), 3);
        assert_eq!(take_all(&mut state, 3_000 * MS), 6);
    }

    #[test]
    fn interval_refill_adds_the_whole_limit_at_each_boundary() {
        let bucket = TokenBucket::new(Quota::per_second(5).with_burst(8).unwrap())
            .with_refill(Refill::Interval);
        let mut state = TokenBucketState::default();
        let now = 10_000 * MS + 200 * MS;
        assert_eq!(
            (0..9)
                .filter(|_| bucket.check(&mut state, now, 1).allowed())
                .count(),
            8
        );
        let denied = bucket.check(&mut state, now, 1);
        assert_eq!(denied.retry_after(), Duration::from_millis(800));
        assert_eq!(denied.reset_after(), Duration::from_millis(1800));
        // At the boundary 5 tokens come back, not 8.
        let later = 11_000 * MS;
        assert_eq!(
            (0..9)
                .filter(|_| bucket.check(&mut state, later, 1).allowed())
                .count(),
            5
        );
    }
}
