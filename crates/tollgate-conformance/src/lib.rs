//! A conformance kit for [`Store`]s: call it from a test of your own with
//! your own store, and it plays random traces of checks, refunds, debits,
//! peeks and late checks against it and against the memory store, for
//! every algorithm your store [supports](Store::supports), and fails with
//! the seed, the trace and the step where they part.
//!
//! What it checks:
//!
//! - **Decisions**: each check is decided as the memory store decides it
//!   (admitted or refused, and each limit's `remaining`; on a manual clock
//!   also `retry_after`, `reset_after` and `replenish_after`), refunds and
//!   debits included ([`Kit::never_more`] relaxes this to "never admits a
//!   request the algorithm would refuse", for stores that may refuse more,
//!   such as the local-first store's reservations).
//! - **Header figures**, the promises of the `RateLimit` fields: `r ≤ q`
//!   for every limit; on a refusal, every refusing limit has `t ≥ 1`
//!   (`replenish_after` > 0) and `t ≤ Retry-After` (`replenish_after ≤
//!   retry_after`); on a manual clock, a retry of the same cost after
//!   `Retry-After` passes.
//! - **Late checks**: a check whose caller stops waiting after 1 ns
//!   ([`Store::check_within`]) and gets an error has charged nothing.
//! - **Peek and reset**: a peek charges nothing and answers as the memory
//!   store's; after [`Store::reset`] the key is whole.
//! - **Plan changes**: now and then the key moves to another plan (the same
//!   limits at other quotas, a per-key quota changing) through
//!   [`Store::carry`], on both stores; every later step is decided under
//!   the new plan, so the usage the store carried over is checked as any
//!   count is.
//!
//! Refunds are played only if the store says it gives charges back
//! ([`Store::can`] [`Capability::Refund`]), debits only if it charges into
//! debt; the [`Report`] says what was left out.
//!
//! ```
//! use tollgate_conformance::Kit;
//! use tollgate_store::MemoryStore;
//! use tollgate_core::ManualClock;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let clock = ManualClock::new(0);
//! let store = MemoryStore::builder().clock(clock.clone()).build();
//! let report = Kit::manual(store, clock).traces(5).run().await.unwrap();
//! assert!(report.skipped.is_empty());
//! # });
//! ```
//!
//! A store on its own clock (a database's, Redis's `TIME`) is checked
//! with [`Kit::real_time`]: quotas of a day, so that nothing refills while
//! a trace runs and the decisions depend on counts alone (a run waits out
//! the last half minute of a UTC day, when day-long windows turn over).
//! The kit awaits the store's futures and, on a real clock, tokio's
//! timer: run it in a tokio runtime with time enabled
//! (`#[tokio::test]`).
//!
//! # Races, lateness and faults: [`Race`]
//!
//! [`Kit`] plays one step at a time against one instance: it cannot see a
//! race between two instances, nor what a reply that comes late does.
//! [`Race`] can: several clients (tokio tasks) send checks for a few
//! shared keys through several instances of the store at once, some
//! stopping waiting after a short deadline (heard out as the layer does,
//! through [`Watched`](tollgate_store::Watched), or dropped unheard), and a
//! checker asks of each key whether *some* order of the calls, decided by
//! the reference algorithm, explains the admissions the callers kept, the
//! refusals, and the key's count once every late check has been heard
//! out. Over a compare-and-swap backend ([`Race::cas`], feature `cas`) it
//! puts [`Faults`] in front of the backend: replies late and with jitter,
//! writes made just before their deadline and answered after it, writes
//! held until their deadline has passed, restarts that refuse calls for a
//! while. A failure names what went wrong, the seed, and the shortest
//! trace that still fails.
//!
//! Run both on a backend of your own (a `CasBackend` over your database):
//!
//! ```
//! # #[cfg(feature = "cas")] {
//! use tollgate_conformance::{Kit, Race};
//! use tollgate_cas::{CasStore, MemoryBackend};
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let backend = MemoryBackend::new(); // yours: MyBackend::connect(..).await
//! // One step at a time, every operation, against the memory store.
//! Kit::real_time(CasStore::new(backend.clone())).traces(2).run().await.unwrap();
//! // Racing instances over it, through injected faults.
//! let report = Race::cas(backend).runs(1).run().await.unwrap();
//! assert!(report.skipped.is_empty());
//! # });
//! # }
//! ```
//!
//! # Its reach, and its limits
//!
//! The kit sees what a store decides and how it counts: a decision unlike
//! the memory store's, a header figure that breaks its promise, a charge
//! a refund or a reset did not undo, a lost update, a charge made after
//! its caller's deadline, a value served after its expiry, a late answer
//! not given back. It does not see:
//!
//! - how fast a store is, or how it behaves past its own bounds (the
//!   number of keys, the late checks heard out at once);
//! - in a race, the timings of a single decision (`retry_after`,
//!   `reset_after`): races use day-long quotas, so that their verdicts
//!   rest on counts, and the one-step kit checks timings on a manual
//!   clock; nor refunds and debits sent by callers themselves;
//! - a fault it does not inject: a reply lost after its write was made
//!   (no store can tell what such a write did), a clock that runs back, a
//!   network partition between instances of a store that keeps counts
//!   of its own;
//! - an interleaving the scheduler does not make: a seed replays the
//!   plan of a race, not its interleaving, so a bug that needs a rare
//!   one may need more runs ([`Race::runs`]) to show.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature
// then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
// tower's lint set, as in tollgate.
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]

// The README's examples are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod checker;
#[cfg(feature = "cas")]
mod faults;
mod ledger;
mod race;
mod trace;

#[cfg(feature = "cas")]
#[cfg_attr(docsrs, doc(cfg(feature = "cas")))]
pub use faults::Faults;
pub use ledger::{FaultError, KeyLedger, Ledger};
pub use race::{Race, RaceReport};

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_core::{Algorithm, Clock, ManualClock};
use tollgate_store::Key;
use tollgate_store::{
    Capability, MemoryStore, PolicyDebit, PolicyDecision, PolicyRefund, Store, StoreReply,
};
use tollgate_store::{NamedLimit, Policy};
use trace::{Rng, Step, Timing};

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

/// What a run of the kit checked.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Report {
    /// The algorithms played (those the store supports, of those asked).
    pub algorithms: Vec<Algorithm>,
    /// Traces played, over all algorithms.
    pub traces: usize,
    /// Steps played, over all traces.
    pub steps: usize,
    /// What the store does not do, so was not played (`"refunds"`,
    /// `"debits"`, `"reset"`, `"carry"`).
    pub skipped: Vec<&'static str>,
}

/// Where a store and the memory store parted, or a promise it broke.
#[derive(Clone, Debug)]
pub struct Failure {
    message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

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
                let mut play = Play::new(&self, seed, algorithm, key, timing);
                report.steps += play.run(self.steps, &mut report).await?;
                report.traces += 1;
            }
        }
        Ok(report)
    }
}

/// An admission of both stores, kept for refunds and debits.
struct Admission {
    subject: PolicyDecision,
    reference: PolicyDecision,
    cost: u32,
    /// Units not given back yet.
    held: u32,
    at: Instant,
    /// On the manual clock, ns.
    at_nanos: u64,
}

/// One trace being played.
struct Play<'k, St> {
    kit: &'k Kit<St>,
    rng: Rng,
    policy: Arc<Policy>,
    key: Key,
    reference: MemoryStore<ManualClock>,
    reference_clock: ManualClock,
    timing: Timing,
    admissions: Vec<Admission>,
    /// The last check, if refused: its cost and its decision.
    refused: Option<(u32, PolicyDecision)>,
    /// What the trace is, for a failure's message.
    context: String,
    /// The steps played so far.
    played: Vec<Step>,
    /// The plan a limit was left out of by the last carry, to go back to.
    left: Option<Arc<Policy>>,
    /// When the trace started, for the reference's clock on a real clock.
    started: Instant,
}

impl<'k, St: Store> Play<'k, St> {
    fn new(kit: &'k Kit<St>, seed: u64, algorithm: Algorithm, key: Key, timing: Timing) -> Self {
        let mut rng = Rng::new(seed);
        let limits = trace::limits(&mut rng, algorithm, timing);
        let quotas: Vec<String> = limits.iter().map(|l| format!("{:?}", l.quota())).collect();
        let reference_clock =
            ManualClock::new(kit.clock.as_ref().map_or(REAL_TIME_BASE, |c| c.now()));
        Play {
            kit,
            rng,
            policy: Arc::new(Policy::new(limits)),
            key,
            reference: MemoryStore::builder()
                .clock(reference_clock.clone())
                .build(),
            reference_clock,
            timing,
            admissions: Vec::new(),
            refused: None,
            context: format!("seed {seed}, {algorithm}, quotas {}", quotas.join(" and ")),
            played: Vec::new(),
            left: None,
            started: Instant::now(),
        }
    }

    /// Plays `steps` steps, then a reset: the steps played.
    async fn run(&mut self, steps: usize, report: &mut Report) -> Result<usize, Failure> {
        let (period, limit) = self.shortest();
        for _ in 0..steps {
            // A limit left out comes back soon: its kept state is then
            // checked by the steps after.
            let step = match self.left.is_some() && self.rng.chance(25) {
                true => Step::Carry {
                    seed: self.rng.next(),
                },
                false => trace::step(&mut self.rng, self.timing, period, limit),
            };
            let step = match step {
                Step::LateCheck if !self.kit.late_checks => Step::Check(1),
                step => step,
            };
            self.played.push(step);
            self.follow_real_time();
            self.play(step).await?;
        }
        self.reset(report).await?;
        Ok(steps)
    }

    /// The shortest period and the smallest limit of the policy.
    fn shortest(&self) -> (u64, u64) {
        let limits = self.policy.limits();
        let period = limits.iter().map(|l| l.quota().period_nanos()).min();
        let limit = limits.iter().map(|l| l.quota().limit()).min();
        (period.unwrap_or(1), limit.unwrap_or(1))
    }

    /// On a real clock, the reference's clock follows the time since the
    /// trace started, so that both stores age alike (a day's quotas refill
    /// nothing in a trace, but a refund's age is real).
    fn follow_real_time(&self) {
        if matches!(self.timing, Timing::Real) {
            let elapsed = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.reference_clock
                .set(REAL_TIME_BASE.saturating_add(elapsed));
        }
    }

    fn fail(&self, what: impl fmt::Display) -> Failure {
        let (current, before) = match self.played.split_last() {
            Some((current, before)) => (format!("{current:?}"), before),
            None => (String::from("none"), &[][..]),
        };
        Failure {
            message: format!(
                "{what} ({}; step {}: {current}; the steps before it: {before:?})",
                self.context,
                before.len(),
            ),
        }
    }

    async fn play(&mut self, step: Step) -> Result<(), Failure> {
        match step {
            Step::Check(cost) => self.check(cost).await,
            Step::LateCheck => self.late_check().await,
            Step::Advance(by) => {
                self.advance(by);
                Ok(())
            }
            Step::Refund { n, cost } => self.refund(n, cost).await,
            Step::Debit { n, cost } => self.debit(n, cost).await,
            Step::Peek => self.peek().await,
            Step::RetryAfterRefusal => self.retry_after_refusal().await,
            Step::Carry { seed } => self.carry(seed).await,
        }
    }

    /// Moves the key to another plan in both stores (`Store::carry`): the
    /// same limits at other quotas; or, for a plan of two limits, the
    /// first alone (the second left out, its state kept where it is);
    /// or back to the plan a limit was left out of. Later steps are
    /// decided under it, so the usage each store carried (and kept) is
    /// checked as every count is.
    async fn carry(&mut self, seed: u64) -> Result<(), Failure> {
        if !self.kit.carry {
            return Ok(());
        }
        let mut rng = Rng::new(seed);
        let to = match self.left.take() {
            Some(whole) => whole,
            None if self.policy.limits().len() == 2 && rng.chance(50) => {
                let first = self.policy.limits()[0].clone();
                self.left = Some(self.policy.clone());
                Arc::new(Policy::for_plan(seed, vec![first]))
            }
            None => {
                let limits: Vec<NamedLimit> = self
                    .policy
                    .limits()
                    .iter()
                    .map(|limit| {
                        NamedLimit::new(limit.name(), trace::quota(&mut rng, self.timing))
                            .with_algorithm(limit.limiter().algorithm())
                    })
                    .collect();
                Arc::new(Policy::for_plan(seed, limits))
            }
        };
        if to.plan() == self.policy.plan() || self.kit.store.supports(&to).is_err() {
            self.left = None;
            return Ok(());
        }
        self.kit
            .store
            .carry(&self.policy, &to, &self.key)
            .await
            .map_err(|e| self.fail(format_args!("the store failed a carry: {e}")))?;
        self.reference.carry_now(&self.policy, &to, &self.key);
        let quotas: Vec<String> = to
            .limits()
            .iter()
            .map(|l| format!("{:?}", l.quota()))
            .collect();
        self.context.push_str(&format!(
            "; from Carry {{ seed: {seed} }} on, quotas {}",
            quotas.join(" and ")
        ));
        self.policy = to;
        // Admissions under the old plan are no longer this plan's to give
        // back; a refusal's retry time was the old plan's.
        self.admissions.clear();
        self.refused = None;
        Ok(())
    }

    fn advance(&self, by: u64) {
        if let Some(clock) = &self.kit.clock {
            clock.advance(Duration::from_nanos(by));
            self.reference_clock.advance(Duration::from_nanos(by));
        }
    }

    fn now_nanos(&self) -> u64 {
        self.reference_clock.now()
    }

    async fn check(&mut self, cost: u32) -> Result<(), Failure> {
        let at = Instant::now();
        let subject = answer(self.kit.store.check(&self.policy, &self.key, cost))
            .await
            .map_err(|e| self.fail(format_args!("the store failed a check: {e}")))?;
        self.judge(cost, subject, at)
    }

    /// Compares a decision of the store with the reference's, and keeps
    /// the admission.
    fn judge(&mut self, cost: u32, subject: PolicyDecision, at: Instant) -> Result<(), Failure> {
        self.honest(&subject, cost)?;
        let reference = if self.kit.exact || subject.merged().allowed() {
            let reference = self.reference.check_now(&self.policy, &self.key, cost);
            self.agree(&subject, &reference)?;
            Some(reference)
        } else {
            None
        };
        self.refused = None;
        match reference {
            // An admission of cost 0 charged nothing: nothing to give back.
            Some(reference) if subject.merged().allowed() && cost > 0 => {
                self.admissions.push(Admission {
                    subject,
                    reference,
                    cost,
                    held: cost,
                    at,
                    at_nanos: self.now_nanos(),
                });
            }
            _ if !subject.merged().allowed() => self.refused = Some((cost, subject)),
            _ => {}
        }
        Ok(())
    }

    /// The header promises, on the store's own decision of a request of
    /// `cost` (a peek's is 0: `Retry-After` is a request's, so only
    /// `r ≤ q` holds of it).
    fn honest(&self, decision: &PolicyDecision, cost: u32) -> Result<(), Failure> {
        for (i, each) in decision.each().iter().enumerate() {
            if each.remaining() > each.limit() {
                return Err(self.fail(format_args!(
                    "limit {i}: remaining {} above the limit {} (r > q)",
                    each.remaining(),
                    each.limit()
                )));
            }
            // A cost above a limit's capacity never passes: no retry time
            // to keep.
            if cost == 0 || decision.merged().allowed() || each.allowed() || !each.can_ever_pass() {
                continue;
            }
            let (replenish, retry) = (
                each.replenish_after_nanos(),
                decision.merged().retry_after_nanos(),
            );
            if replenish == 0 || replenish > retry {
                return Err(self.fail(format_args!(
                    "limit {i} refused with replenish_after {replenish} ns and retry_after \
                     {retry} ns: the headers' t must be at least 1 and at most Retry-After"
                )));
            }
        }
        Ok(())
    }

    /// The store's decision against the reference's.
    fn agree(&self, subject: &PolicyDecision, reference: &PolicyDecision) -> Result<(), Failure> {
        if !self.kit.exact {
            return match reference.merged().allowed() {
                true => Ok(()),
                false => Err(self.fail(
                    "the store admitted a request the algorithm refuses, given what it \
                     admitted before",
                )),
            };
        }
        let manual = matches!(self.timing, Timing::Manual);
        let figures = |d: &PolicyDecision| -> Vec<(bool, u64, u64, u64, u64)> {
            d.each()
                .iter()
                .map(|e| {
                    let times = if manual {
                        (
                            e.retry_after_nanos(),
                            e.reset_after_nanos(),
                            e.replenish_after_nanos(),
                        )
                    } else {
                        (0, 0, 0)
                    };
                    (e.allowed(), e.remaining(), times.0, times.1, times.2)
                })
                .collect()
        };
        let (got, want) = (figures(subject), figures(reference));
        if subject.merged().allowed() != reference.merged().allowed() || got != want {
            return Err(self.fail(format_args!(
                "the store decided {} where the memory store decided {} (each limit: \
                 allowed, remaining, retry, reset, replenish ns: {got:?} vs {want:?})",
                verdict(subject),
                verdict(reference),
            )));
        }
        Ok(())
    }

    async fn late_check(&mut self) -> Result<(), Failure> {
        let at = Instant::now();
        let within = Duration::from_nanos(1);
        match self
            .kit
            .store
            .check_within(&self.policy, &self.key, 1, within)
        {
            // Answered at once: no deadline to pass.
            StoreReply::Ready(answer) => {
                let subject = answer.map_err(|e| self.fail(format_args!("check failed: {e}")))?;
                self.judge(1, subject, at)
            }
            StoreReply::Pending(future) => match future.await {
                Ok(subject) => self.judge(1, subject, at),
                // Late: nothing charged, which the next steps see.
                Err(_) => Ok(()),
            },
        }
    }

    /// The admission `n` picks, modulo those still held.
    fn pick(&mut self, n: u64) -> Option<&mut Admission> {
        let held: Vec<usize> = (0..self.admissions.len())
            .filter(|i| self.admissions[*i].held > 0)
            .collect();
        let index = *held.get((n % held.len().max(1) as u64) as usize)?;
        self.admissions.get_mut(index)
    }

    async fn refund(&mut self, n: u64, cost: u32) -> Result<(), Failure> {
        if self.kit.store.can(Capability::Refund).is_err() {
            return Ok(());
        }
        let now = self.now_nanos();
        let timing = self.timing;
        let Some(admission) = self.pick(n) else {
            return Ok(());
        };
        let cost = cost.min(admission.held);
        admission.held -= cost;
        let ago = match timing {
            Timing::Manual => Duration::from_nanos(now - admission.at_nanos),
            Timing::Real => admission.at.elapsed(),
        };
        let subject = PolicyRefund::of(&admission.subject, admission.cost, ago).part(cost);
        let reference = PolicyRefund::of(&admission.reference, admission.cost, ago).part(cost);
        self.kit
            .store
            .refund(&self.policy, &self.key, subject)
            .landed()
            .await;
        self.reference
            .refund_now(&self.policy, &self.key, reference);
        Ok(())
    }

    async fn debit(&mut self, n: u64, cost: u32) -> Result<(), Failure> {
        if self.kit.store.can(Capability::Debit).is_err() {
            return Ok(());
        }
        let Some(admission) = self.pick(n) else {
            return Ok(());
        };
        let subject = PolicyDebit::of(&admission.subject, cost);
        // A debit spends quota: a refusal before it may not pass at its
        // retry time any more.
        self.refused = None;
        self.kit
            .store
            .debit(&self.policy, &self.key, subject)
            .landed()
            .await;
        self.reference.debit_now(&self.policy, &self.key, cost);
        Ok(())
    }

    async fn peek(&mut self) -> Result<(), Failure> {
        let first = self.peek_once().await?;
        let second = self.peek_once().await?;
        let remaining = |d: &PolicyDecision| -> Vec<u64> {
            d.each()
                .iter()
                .map(tollgate_core::Decision::remaining)
                .collect()
        };
        // A peek charges nothing: the second finds what the first did. Not
        // asked of a store that refuses more than the memory store: its own
        // calls (a reservation, a sync) may land between the two.
        if self.kit.exact && remaining(&first) != remaining(&second) {
            return Err(self.fail(format_args!(
                "a peek charged: remaining {:?}, then {:?}",
                remaining(&first),
                remaining(&second)
            )));
        }
        let reference = self.reference.peek_now(&self.policy, &self.key);
        let (got, want) = (remaining(&first), remaining(&reference));
        let fits = match self.kit.exact {
            true => got == want,
            false => got.iter().zip(&want).all(|(g, w)| g <= w),
        };
        if !fits {
            return Err(self.fail(format_args!(
                "a peek said remaining {got:?} where the memory store says {want:?}"
            )));
        }
        Ok(())
    }

    async fn peek_once(&self) -> Result<PolicyDecision, Failure> {
        let decision = answer(self.kit.store.peek(&self.policy, &self.key))
            .await
            .map_err(|e| self.fail(format_args!("the store failed a peek: {e}")))?;
        self.honest(&decision, 0)?;
        Ok(decision)
    }

    async fn retry_after_refusal(&mut self) -> Result<(), Failure> {
        let Some((cost, refusal)) = self.refused.take() else {
            return Ok(());
        };
        if !refusal.merged().can_ever_pass() {
            return Ok(());
        }
        self.advance(refusal.merged().retry_after_nanos());
        let at = Instant::now();
        let retry = answer(self.kit.store.check(&self.policy, &self.key, cost))
            .await
            .map_err(|e| self.fail(format_args!("the store failed a check: {e}")))?;
        if !retry.merged().allowed() {
            return Err(self.fail(format_args!(
                "a retry of cost {cost} after its Retry-After ({} ns) was refused",
                refusal.merged().retry_after_nanos()
            )));
        }
        self.judge(cost, retry, at)
    }

    /// Resets the key: a peek then finds it whole.
    async fn reset(&mut self, report: &mut Report) -> Result<(), Failure> {
        if !self.kit.reset {
            return Ok(());
        }
        self.context.push_str(", after a reset");
        // What a limit left out kept goes too: the store holds nothing of
        // the trace's key after it.
        if let Some(left) = self.left.take() {
            let _ = self.kit.store.reset(&left, &self.key).await;
        }
        match self.kit.store.reset(&self.policy, &self.key).await {
            Ok(()) => {}
            Err(tollgate_store::AdminError::Unsupported { .. }) => {
                if !report.skipped.contains(&"reset") {
                    report.skipped.push("reset");
                }
                return Ok(());
            }
            Err(e) => return Err(self.fail(format_args!("the store failed a reset: {e}"))),
        }
        let decision = self.peek_once().await?;
        for (i, each) in decision.each().iter().enumerate() {
            if each.remaining() != each.limit() {
                return Err(self.fail(format_args!(
                    "after a reset, limit {i} has {} of {} remaining",
                    each.remaining(),
                    each.limit()
                )));
            }
        }
        Ok(())
    }
}

/// Where the reference's clock starts on a real clock (ns): past 0, so
/// that a charge at the start has a time of its own.
const REAL_TIME_BASE: u64 = 1_000_000_000;

/// On a real clock, waits out the last half minute of a UTC day: the
/// window algorithms' day-long windows are aligned to the epoch, and a
/// trace across their boundary would see a fresh window the reference
/// (on its own clock) does not.
async fn clear_of_a_day_boundary() {
    const DAY: u64 = 86_400;
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let left = DAY - since_epoch % DAY;
    if left <= 30 {
        tokio::time::sleep(Duration::from_secs(left + 1)).await;
    }
}

/// A store's reply, awaited.
async fn answer<F, E>(reply: StoreReply<F, E>) -> Result<PolicyDecision, E>
where
    F: std::future::Future<Output = Result<PolicyDecision, E>>,
{
    reply.resolve().await
}

fn verdict(decision: &PolicyDecision) -> &'static str {
    if decision.merged().allowed() {
        "an admission"
    } else {
        "a refusal"
    }
}
