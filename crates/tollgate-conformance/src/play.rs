//! The playing of one trace: each step sent to the store under test and
//! to a reference memory store, the store's answers judged against the
//! reference's and against the header promises, and a failure's message
//! naming the step where they part.

use crate::real_time::REAL_TIME_BASE;
use crate::report::{Failure, Report};
use crate::trace::{self, Rng, Step, Timing};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_core::{Algorithm, Clock, ManualClock};
use tollgate_store::{
    Capability, Key, MemoryStore, NamedLimit, Policy, PolicyDebit, PolicyDecision, PolicyRefund,
    Store, StoreReply,
};

/// What a trace is played with, lent by the kit: the store under test,
/// the clock the kit moves (none on the store's own clock), and the kit's
/// switches.
pub(crate) struct Bench<'k, St> {
    pub(crate) store: &'k St,
    pub(crate) clock: Option<&'k ManualClock>,
    pub(crate) exact: bool,
    pub(crate) late_checks: bool,
    pub(crate) reset: bool,
    pub(crate) carry: bool,
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
pub(crate) struct Play<'k, St> {
    bench: Bench<'k, St>,
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
    pub(crate) fn new(
        bench: Bench<'k, St>,
        seed: u64,
        algorithm: Algorithm,
        key: Key,
        timing: Timing,
    ) -> Self {
        let mut rng = Rng::new(seed);
        let limits = trace::limits(&mut rng, algorithm, timing);
        let quotas: Vec<String> = limits.iter().map(|l| format!("{:?}", l.quota())).collect();
        let reference_clock = ManualClock::new(bench.clock.map_or(REAL_TIME_BASE, |c| c.now()));
        Play {
            bench,
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
    pub(crate) async fn run(
        &mut self,
        steps: usize,
        report: &mut Report,
    ) -> Result<usize, Failure> {
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
                Step::LateCheck if !self.bench.late_checks => Step::Check(1),
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
        if !self.bench.carry {
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
        if to.plan() == self.policy.plan() || self.bench.store.supports(&to).is_err() {
            self.left = None;
            return Ok(());
        }
        self.bench
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
        if let Some(clock) = self.bench.clock {
            clock.advance(Duration::from_nanos(by));
            self.reference_clock.advance(Duration::from_nanos(by));
        }
    }

    fn now_nanos(&self) -> u64 {
        self.reference_clock.now()
    }

    async fn check(&mut self, cost: u32) -> Result<(), Failure> {
        let at = Instant::now();
        let subject = answer(self.bench.store.check(&self.policy, &self.key, cost))
            .await
            .map_err(|e| self.fail(format_args!("the store failed a check: {e}")))?;
        self.judge(cost, subject, at)
    }

    /// Compares a decision of the store with the reference's, and keeps
    /// the admission.
    fn judge(&mut self, cost: u32, subject: PolicyDecision, at: Instant) -> Result<(), Failure> {
        self.honest(&subject, cost)?;
        let reference = if self.bench.exact || subject.merged().allowed() {
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
        if !self.bench.exact {
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
            .bench
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
        if self.bench.store.can(Capability::Refund).is_err() {
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
        self.bench
            .store
            .refund(&self.policy, &self.key, subject)
            .landed()
            .await;
        self.reference
            .refund_now(&self.policy, &self.key, reference);
        Ok(())
    }

    async fn debit(&mut self, n: u64, cost: u32) -> Result<(), Failure> {
        if self.bench.store.can(Capability::Debit).is_err() {
            return Ok(());
        }
        let Some(admission) = self.pick(n) else {
            return Ok(());
        };
        let subject = PolicyDebit::of(&admission.subject, cost);
        // A debit spends quota: a refusal before it may not pass at its
        // retry time any more.
        self.refused = None;
        self.bench
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
        if self.bench.exact && remaining(&first) != remaining(&second) {
            return Err(self.fail(format_args!(
                "a peek charged: remaining {:?}, then {:?}",
                remaining(&first),
                remaining(&second)
            )));
        }
        let reference = self.reference.peek_now(&self.policy, &self.key);
        let (got, want) = (remaining(&first), remaining(&reference));
        let fits = match self.bench.exact {
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
        let decision = answer(self.bench.store.peek(&self.policy, &self.key))
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
        let retry = answer(self.bench.store.check(&self.policy, &self.key, cost))
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
        if !self.bench.reset {
            return Ok(());
        }
        self.context.push_str(", after a reset");
        // What a limit left out kept goes too: the store holds nothing of
        // the trace's key after it.
        if let Some(left) = self.left.take() {
            let _ = self.bench.store.reset(&left, &self.key).await;
        }
        match self.bench.store.reset(&self.policy, &self.key).await {
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
