//! [`Kit`], the one-step conformance kit: its builder, and its run, which
//! plays each trace against the store and a reference memory store
//! (the playing of one trace is `play.rs`'s).

use crate::play::{Bench, Play};
use crate::real_time::clear_of_a_day_boundary;
use crate::report::{Failure, Report};
use crate::trace::{self, Rng, Timing};
use tollgate_core::{Algorithm, ManualClock};
use tollgate_store::{Capability, Key, Policy, Store};

/// A run of the kit against one store. Build it with [`Kit::manual`] or
/// [`Kit::real_time`], then [`run`](Kit::run) it.
#[must_use = "a kit checks nothing until it is run"]
pub struct Kit<St> {
    store: St,
    clock: Option<ManualClock>,
    algorithms: Option<Vec<Algorithm>>,
    traces: usize,
    steps: usize,
    seed: u64,
    exact: bool,
    late_checks: bool,
    reset: bool,
    carry: bool,
}

impl<St> std::fmt::Debug for Kit<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kit").finish_non_exhaustive()
    }
}

impl<St: Store> Kit<St> {
    /// A kit for `store`, whose clock is `clock`: the kit moves it, and a
    /// reference memory store's, between steps.
    pub fn manual(store: St, clock: ManualClock) -> Self {
        Kit::new(store, Some(clock))
    }

    /// A kit for `store` on its own clock: quotas of a day, nothing moved.
    /// Keys are fresh for each run (a random part in each), so a store
    /// that keeps its state between runs (Redis) can be run again.
    pub fn real_time(store: St) -> Self {
        Kit::new(store, None)
    }

    fn new(store: St, clock: Option<ManualClock>) -> Self {
        Kit {
            store,
            clock,
            algorithms: None,
            traces: 20,
            steps: 40,
            seed: 0x7011_6a7e,
            exact: true,
            late_checks: true,
            reset: true,
            carry: true,
        }
    }

    /// Only these algorithms (default: every one the store supports).
    pub fn algorithms(mut self, algorithms: impl IntoIterator<Item = Algorithm>) -> Self {
        self.algorithms = Some(algorithms.into_iter().collect());
        self
    }

    /// Traces per algorithm (default 20).
    pub fn traces(mut self, traces: usize) -> Self {
        self.traces = traces;
        self
    }

    /// Steps per trace (default 40).
    pub fn steps(mut self, steps: usize) -> Self {
        self.steps = steps;
        self
    }

    /// The seed of the traces (a failure names the one to replay).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Accepts a store that refuses more than the memory store, never
    /// less: each admission must be one the algorithm allows given what
    /// the store admitted before; a refusal the memory store would not
    /// make is accepted, and a peek may show less remaining than the
    /// memory store's, and less than the peek before it (the store's own
    /// calls, such as the local-first store's reservations, land between
    /// steps).
    pub fn never_more(mut self) -> Self {
        self.exact = false;
        self
    }

    /// Leaves out the late checks. For a [`Fallback`](tollgate_store::Fallback):
    /// a check its primary answers too late is decided by its secondary,
    /// which keeps counts of its own, so the trace's counts would be split
    /// between two stores (run its primary, and its secondary alone, with
    /// them).
    pub fn no_late_checks(mut self) -> Self {
        self.late_checks = false;
        self
    }

    /// Leaves out the reset at the end of each trace: for a composition
    /// whose store is away on purpose, which cannot reset (the report
    /// names it among what was skipped).
    pub fn no_reset(mut self) -> Self {
        self.reset = false;
        self
    }

    /// Leaves out the plan changes (`Store::carry`): for a composition
    /// whose store is away on purpose, which cannot move a key's usage
    /// (the report names it among what was skipped).
    pub fn no_carry(mut self) -> Self {
        self.carry = false;
        self
    }

    /// Plays every trace; the first failure ends the run.
    pub async fn run(self) -> Result<Report, Failure> {
        let timing = match self.clock {
            Some(_) => Timing::Manual,
            None => Timing::Real,
        };
        let mut report = Report::default();
        if self.store.can(Capability::Refund).is_err() {
            report.skipped.push("refunds");
        }
        if self.store.can(Capability::Debit).is_err() {
            report.skipped.push("debits");
        }
        if !self.reset {
            report.skipped.push("reset");
        }
        if !self.carry {
            report.skipped.push("carry");
        }
        let run_id = std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), self.seed);
        let asked = self.algorithms.clone().unwrap_or(Algorithm::ALL.to_vec());
        for algorithm in asked {
            let probe = Policy::new(trace::limits(&mut Rng::new(0), algorithm, timing));
            if self.store.supports(&probe).is_err() {
                continue;
            }
            report.algorithms.push(algorithm);
            for n in 0..self.traces {
                if matches!(timing, Timing::Real) {
                    clear_of_a_day_boundary().await;
                }
                let seed = self
                    .seed
                    .wrapping_add(n as u64)
                    .wrapping_mul(31)
                    .wrapping_add(algorithm as u64);
                let key = Key::from(format!("conformance-{run_id:x}-{algorithm}-{n}").as_str());
                let mut play = Play::new(self.bench(), seed, algorithm, key, timing);
                report.steps += play.run(self.steps, &mut report).await?;
                report.traces += 1;
            }
        }
        Ok(report)
    }

    /// What each trace is played with: the store, the clock, the switches.
    fn bench(&self) -> Bench<'_, St> {
        Bench {
            store: &self.store,
            clock: self.clock.as_ref(),
            exact: self.exact,
            late_checks: self.late_checks,
            reset: self.reset,
            carry: self.carry,
        }
    }
}
