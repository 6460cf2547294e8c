//! The random traces the kit plays: a seeded generator (so that a failure
//! names a seed that plays the same trace again) and the steps of a trace.

use std::time::Duration;
use tollgate_core::{Algorithm, Quota};
use tollgate_store::NamedLimit;

/// A small seeded generator (SplitMix64): the same seed gives the same
/// traces on every machine. Statistical quality matters little here; a
/// failure being replayable matters a lot.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `percent` %.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One step of a trace.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    /// A check of this cost.
    Check(u32),
    /// A check whose caller gives up after 1 ns (`Store::check_within`).
    LateCheck,
    /// The clock moves on (manual clock only).
    Advance(u64),
    /// Gives back `cost` units of the `n`-th admission still held
    /// (modulo how many there are).
    Refund { n: u64, cost: u32 },
    /// Charges `cost` more for the `n`-th admission (modulo).
    Debit { n: u64, cost: u32 },
    /// A peek, twice: charges nothing, answers as the reference does.
    Peek,
    /// After a refusal, waits its `Retry-After` and retries the same cost
    /// (manual clock only): it must pass.
    RetryAfterRefusal,
    /// The key moves to another plan (`Store::carry`): the same limits at
    /// other quotas, drawn from this seed; its usage comes along.
    Carry { seed: u64 },
}

/// How a trace's quotas are sized.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Timing {
    /// A manual clock the kit moves: short periods, refills within a trace.
    Manual,
    /// The store's own clock: a day's quota, so that nothing refills while
    /// a trace runs and decisions depend on counts alone.
    Real,
}

/// The limits of one trace: one or two limits of `algorithm` (two: the
/// all-or-nothing charge of several limits).
pub(crate) fn limits(rng: &mut Rng, algorithm: Algorithm, timing: Timing) -> Vec<NamedLimit> {
    let count = if rng.chance(30) { 2 } else { 1 };
    (0..count)
        .map(|i| {
            let quota = quota(rng, timing);
            NamedLimit::new(["conformance-a", "conformance-b"][i], quota).with_algorithm(algorithm)
        })
        .collect()
}

pub(crate) fn quota(rng: &mut Rng, timing: Timing) -> Quota {
    let (limit, period) = match timing {
        Timing::Manual => {
            let period = [1, 10, 60][rng.below(3) as usize];
            (1 + rng.below(8), Duration::from_secs(period))
        }
        Timing::Real => (3 + rng.below(8), Duration::from_secs(86_400)),
    };
    let quota = Quota::new(limit, period).unwrap_or_else(|_| Quota::per_second(limit));
    if rng.chance(25) {
        // A burst above the limit, for the buckets (the window algorithms
        // take no burst: kept only where the quota accepts it).
        quota.with_burst(limit * 2).unwrap_or(quota)
    } else {
        quota
    }
}

/// The next step, for a quota whose shortest period is `period_nanos`
/// and whose smallest limit is `limit`.
pub(crate) fn step(rng: &mut Rng, timing: Timing, period_nanos: u64, limit: u64) -> Step {
    let roll = rng.below(100);
    match (roll, timing) {
        (0..=44, _) => Step::Check(1),
        (45..=54, _) => Step::Check(rng.below(4) as u32),
        (55..=69, Timing::Manual) => {
            // Up to three emission intervals at a time, sometimes a period.
            let interval = (period_nanos / limit.max(1)).max(1);
            let by = if rng.chance(10) {
                period_nanos
            } else {
                rng.below(interval * 3) + 1
            };
            Step::Advance(by)
        }
        (55..=69, Timing::Real) | (70..=79, _) => Step::Refund {
            n: rng.next(),
            cost: 1 + rng.below(2) as u32,
        },
        (80..=84, _) => Step::Debit {
            n: rng.next(),
            cost: 1 + rng.below(3) as u32,
        },
        (85..=91, _) => Step::Peek,
        (92..=95, _) => Step::LateCheck,
        (96..=97, _) => Step::Carry { seed: rng.next() },
        (_, Timing::Manual) => Step::RetryAfterRefusal,
        (_, Timing::Real) => Step::Check(1),
    }
}
