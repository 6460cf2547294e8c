//! The six algorithms, one module each, behind one trait.
//!
//! Every algorithm is a pure state machine: [`RateAlgorithm::evaluate`] looks
//! at a key's state, the time and the cost and says what would happen without
//! changing anything; [`RateAlgorithm::commit`] applies an admission. Keeping
//! the two apart is what lets several limits on one request be charged
//! all-or-nothing, and lets a store apply an admission with a compare-and-swap.

mod divisor;
mod fixed_window;
mod gcra;
mod leaky_bucket;
mod schedule;
mod sliding_log;
mod sliding_window;
mod token_bucket;

pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use sliding_log::{LogAdmission, SlidingLog, SlidingLogState};
pub use sliding_window::{SlidingWindow, SlidingWindowState};
pub use token_bucket::{Refill, ScaledTime, TokenBucket, TokenBucketState};

use crate::{Decision, Quota};

/// What [`RateAlgorithm::evaluate`] found: the decision, and for an allowed
/// request the admission to [`commit`](RateAlgorithm::commit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evaluation<A> {
    /// The decision for this request.
    pub decision: Decision,
    /// `Some` exactly when the request is allowed.
    pub admission: Option<A>,
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
    /// What `commit` needs to apply an admission.
    type Admission: Copy;

    /// Decides a request without changing the state.
    fn evaluate(&self, state: &Self::State, now: u64, cost: u32) -> Evaluation<Self::Admission>;

    /// The quota this algorithm enforces: where headers and shared stores
    /// read the limit, period and burst, so that they always describe the
    /// limit the algorithm applies.
    fn quota(&self) -> Quota;

    /// Applies an admission that `evaluate` returned for this state.
    fn commit(&self, state: &mut Self::State, admission: Self::Admission);

    /// Evaluates and, if allowed, commits: one check of one request.
    #[inline]
    fn check(&self, state: &mut Self::State, now: u64, cost: u32) -> Decision {
        let Evaluation {
            decision,
            admission,
        } = self.evaluate(state, now, cost);
        if let Some(admission) = admission {
            self.commit(state, admission);
        }
        decision
    }
}

/// The algorithm kinds, for configuration.
///
/// Parses from (and displays as) `gcra`, `token-bucket`, `leaky-bucket`,
/// `fixed-window`, `sliding-log` and `sliding-window`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Generic cell rate algorithm: a smooth rate with a burst tolerance, in 8
    /// bytes per key. The default.
    #[default]
    Gcra,
    /// A bucket of `burst` tokens refilled at `limit` per `period`.
    TokenBucket,
    /// A shaper: requests leave at a constant rate, a queue of `burst` waits.
    LeakyBucket,
    /// A counter per period-long window aligned to the clock's origin.
    FixedWindow,
    /// Exact: the timestamps of every admitted request in the last period.
    SlidingLog,
    /// Two fixed-window counters weighted into an estimate of the last period.
    SlidingWindow,
}

impl Algorithm {
    /// Every kind, in documentation order.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
    ];

    /// The configuration name, e.g. `"token-bucket"`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::TokenBucket => "token-bucket",
            Algorithm::LeakyBucket => "leaky-bucket",
            Algorithm::FixedWindow => "fixed-window",
            Algorithm::SlidingLog => "sliding-log",
            Algorithm::SlidingWindow => "sliding-window",
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = text.trim().to_ascii_lowercase().replace('_', "-");
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == wanted)
            .ok_or_else(|| UnknownAlgorithm(text.to_owned()))
    }
}

/// An algorithm name that is not one of the six.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl std::fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown algorithm {:?}: use one of gcra, token-bucket, leaky-bucket, fixed-window, sliding-log, sliding-window",
            self.0
        )
    }
}

impl std::error::Error for UnknownAlgorithm {}
