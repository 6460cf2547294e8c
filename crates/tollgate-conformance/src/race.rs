//! [`Race`]: the racing kit — clients on tokio tasks sending checks for
//! shared keys through several instances of a store at once, callers
//! that stop waiting, and (for a compare-and-swap backend) injected
//! faults; then the checker's verdict on each key, and on a failure the
//! shortest trace that still fails.

use super::checker::{Count, Judged, Seen, Tally};
use super::ledger::Ledger;
use super::trace::Rng;
use super::{Failure, REAL_TIME_BASE, clear_of_a_day_boundary};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate_core::{Algorithm, ManualClock, Quota};
use tollgate_store::Key;
use tollgate_store::late::late_checks_in_progress;
use tollgate_store::{
    AdminError, Capability, ChangeReply, MemoryStore, PolicyRefund, Store, StoreReply, Watched,
};
use tollgate_store::{NamedLimit, Policy};
#[cfg(feature = "cas")]
use {
    super::faults::Faults,
    super::ledger::FaultError,
    tollgate_cas::{CasBackend, CasError, CasStore},
};

/// The instances of one run: those the clients race through, one more
/// for the kit's own calls (the reset before, the peeks after), and what
/// the fault injector saw.
struct Setup<St> {
    stores: Vec<St>,
    probe: St,
    faults: Option<(Ledger, Namer)>,
}

/// A key's name in the backend, for the fault injector's ledger.
type Namer = Arc<dyn Fn(&Policy, &Key) -> String + Send + Sync>;

/// Makes a run's instances, from its seed and how many.
type MakeSetup<St> = Box<dyn FnMut(u64, usize) -> Setup<St> + Send>;

/// Whether an error is one the run explains (a restart, a deadline): for
/// a call whose caller waits `Some(within)`, or as long as it takes.
type Explain<E> = Arc<dyn Fn(&E, Option<Duration>) -> bool + Send + Sync>;

/// The racing conformance kit: several clients (tokio tasks) send checks
/// for a few shared keys through several instances of a store at once —
/// as the instances of an app share a database — some of them stopping
/// waiting after a short deadline, then the checker asks of each key
/// whether *some* order of the calls, decided by the reference algorithm,
/// explains what the callers saw and what the key's count shows at the
/// end. The one-step [`Kit`](super::Kit) cannot see a race or a late
/// answer; this can.
///
/// Build it with [`Race::new`] over a closure that makes an instance of
/// your store (a fresh one over the same shared counters, or a clone), or
/// with [`Race::cas`] over a compare-and-swap backend, which puts
/// [`Faults`] in front of it and makes several
/// [`CasStore`]s over clones of it (as processes are).
///
/// # What it plays
///
/// Each run draws, from its seed, a policy of one or two limits of one
/// algorithm with day-long quotas (nothing refills while it runs, so
/// what the reference admits depends on counts alone), a few keys, and
/// for each client a list of checks of cost 1, each for a key and of one
/// of three kinds:
///
/// - **waits**: [`Store::check`], awaited to its end;
/// - **heard out**: [`Store::check_within`] a short deadline (see
///   [`give_up_after`](Race::give_up_after)), wrapped in [`Watched`] and
///   dropped when the deadline passes, as the layer does: the check is
///   heard out and an admission it brings is given back (played if the
///   store [can](Store::can) give charges back);
/// - **dropped**: [`Store::check_within`] a short deadline, dropped
///   unheard when it passes (only over [`Faults`], whose ledger tells which
///   of those writes the backend made in time).
///
/// Before the clients start, each key is charged and reset through the
/// kit's own instance (so that the clients meet a value at rest, as an
/// admin's reset leaves it). After they are done, the kit waits until no
/// late check is being heard out
/// ([`late_checks_in_progress`]) and no write is on its way, and peeks
/// at each key through its own instance.
///
/// # What it checks
///
/// For each key, with `C` the admissions the reference allows (read off
/// a reference [`MemoryStore`], so bursts and several limits come
/// along):
///
/// - the callers kept at most `C` admissions;
/// - the key's count at the end (its peek, matched against the
///   reference's after `n` admissions) is the admissions the callers kept,
///   plus the writes the backend made in time for callers that dropped
///   them: no admission was overwritten by another, and no check a
///   caller gave up on stays charged;
/// - a refusal came only once `C` charges could stand;
/// - over [`Faults`]: no write held until its deadline had passed was
///   made (the backend keeps [`Swap::deadline`](tollgate_cas::Swap::deadline));
/// - no call failed, but for what the run explains (a restart refused it,
///   or it was answered after its caller's deadline).
///
/// With no call failed or given up, this is exactly "admitted
/// `min(C, calls)`". A failure names what went wrong, the seed, and the
/// shortest trace that still fails: the kit plays the failing run again
/// with fewer clients, calls, instances and keys while it still fails
/// (three tries each: races are not replayed step by step), and reports
/// the smallest.
///
/// # Its reach, and its limits
///
/// It sees what races and lateness do to counts: lost updates (a write
/// made over a version it did not expect), charges made after a deadline,
/// values a backend serves after their expiry, late answers not given
/// back, refusals that no count explains. It does not see timings of a
/// single decision (`retry_after`, `reset_after`: the one-step kit checks
/// those on a manual clock), quotas that refill (day-long quotas keep its
/// verdicts to counts), refunds and debits sent by the callers themselves,
/// nor a fault it does not inject: a reply lost after its write was made
/// (see [`Faults`]). Races are as the scheduler makes them: a seed
/// replays the plan of a run (the clients' calls, the faults' draws in
/// the order they are drawn), not its interleaving; a bug that needs a
/// rare interleaving may need more runs to show.
///
/// It awaits tokio's timer and spawns tasks: run it in a multi-threaded
/// Tokio runtime with time enabled (`#[tokio::test(flavor =
/// "multi_thread")]`). It waits, after each run, until
/// [`late_checks_in_progress`] is 0 in the whole process.
///
/// ```
/// use tollgate_conformance::Race;
/// use tollgate_cas::MemoryBackend;
///
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// // Your backend here: `Race::cas(MyBackend::connect().await)`.
/// let report = Race::cas(MemoryBackend::new()).runs(1).run().await.unwrap();
/// assert_eq!(report.runs, 8); // one per algorithm
/// # });
/// ```
///
/// A store of any kind, through instances sharing its counters:
///
/// ```
/// use tollgate_conformance::Race;
/// use tollgate_store::MemoryStore;
///
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let shared = MemoryStore::new();
/// let report = Race::new(move || shared.clone()).runs(1).run().await.unwrap();
/// assert!(report.calls > 0);
/// # });
/// ```
#[must_use = "a race checks nothing until it is run"]
pub struct Race<St: Store> {
    setup: MakeSetup<St>,
    explain: Explain<St::Error>,
    algorithms: Option<Vec<Algorithm>>,
    runs: usize,
    shape: Shape,
    seed: u64,
    give_up_after: Duration,
    exact: bool,
    shrink: bool,
}

impl<St: Store> fmt::Debug for Race<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Race")
            .field("algorithms", &self.algorithms)
            .field("runs", &self.runs)
            .field("shape", &self.shape)
            .field("seed", &self.seed)
            .field("give_up_after", &self.give_up_after)
            .field("exact", &self.exact)
            .finish_non_exhaustive()
    }
}

/// What a race played.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RaceReport {
    /// The algorithms played (those the store supports, of those asked).
    pub algorithms: Vec<Algorithm>,
    /// Runs played, over all algorithms.
    pub runs: usize,
    /// Calls the clients made, over all runs.
    pub calls: u64,
    /// Admissions the callers kept.
    pub kept: u64,
    /// Refusals.
    pub refused: u64,
    /// Calls that failed for a reason the run explains.
    pub failed: u64,
    /// Calls whose callers stopped waiting.
    pub given_up: u64,
    /// Admissions of heard-out calls given back.
    pub given_back: u64,
    /// Writes the backend made for callers that had dropped them (over
    /// [`Faults`]).
    pub unheard: u64,
    /// Writes held until their deadline had passed (over [`Faults`]): each
    /// a chance for a backend to break the deadline.
    pub held_writes: u64,
    /// Calls refused by restarts (over [`Faults`]).
    pub refused_by_restarts: u64,
    /// What was not played: `"heard-out give-ups"` (the store cannot give
    /// charges back), `"dropped give-ups"` (no fault injector to tell what
    /// was made), `"reset"` (the store cannot reset a key).
    pub skipped: Vec<&'static str>,
}

/// How big a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    instances: usize,
    clients: usize,
    calls: usize,
    keys: usize,
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} instance(s), {} client(s) of {} call(s), {} key(s)",
            self.instances, self.clients, self.calls, self.keys
        )
    }
}

impl<St: Store> Race<St> {
    /// A race over instances `make_store` makes: several per run for the
    /// clients, one for the kit's own calls, all sharing the store's
    /// counters (a clone, or a fresh client of the same server). Every
    /// error a caller that waits gets fails the run.
    pub fn new(mut make_store: impl FnMut() -> St + Send + 'static) -> Self {
        let setup = move |_seed: u64, instances: usize| Setup {
            stores: (0..instances).map(|_| make_store()).collect(),
            probe: make_store(),
            faults: None,
        };
        // An error for a caller with a deadline: answered late.
        Race::with(Box::new(setup), Arc::new(|_, within| within.is_some()))
    }

    fn with(setup: MakeSetup<St>, explain: Explain<St::Error>) -> Self {
        Race {
            setup,
            explain,
            algorithms: None,
            runs: 2,
            shape: Shape {
                instances: 3,
                clients: 6,
                calls: 6,
                keys: 2,
            },
            seed: 0x7011_6a7e,
            give_up_after: Duration::from_millis(8),
            exact: true,
            shrink: true,
        }
    }

    /// Only these algorithms (default: every one the store supports).
    pub fn algorithms(mut self, algorithms: impl IntoIterator<Item = Algorithm>) -> Self {
        self.algorithms = Some(algorithms.into_iter().collect());
        self
    }

    /// Runs per algorithm (default 2), each from its own seed.
    pub fn runs(mut self, runs: usize) -> Self {
        self.runs = runs;
        self
    }

    /// Store instances the clients share out (default 3; at least 1).
    pub fn instances(mut self, instances: usize) -> Self {
        self.shape.instances = instances.max(1);
        self
    }

    /// Clients, each a tokio task on an instance in turn (default 6; at
    /// least 1).
    pub fn clients(mut self, clients: usize) -> Self {
        self.shape.clients = clients.max(1);
        self
    }

    /// Calls per client (default 6).
    pub fn calls(mut self, calls: usize) -> Self {
        self.shape.calls = calls;
        self
    }

    /// Shared keys (default 2; at least 1).
    pub fn keys(mut self, keys: usize) -> Self {
        self.shape.keys = keys.max(1);
        self
    }

    /// The seed of the runs (a failure names the one to replay).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// How long a caller that gives up waits at most (default 8 ms; each
    /// such call waits a random time between a quarter of it and all of
    /// it).
    pub fn give_up_after(mut self, wait: Duration) -> Self {
        self.give_up_after = wait;
        self
    }

    /// Checks only that no key admits more than the algorithm allows: for
    /// a store that may refuse more than the reference and keeps counts
    /// of its own in each instance, such as the local-first store's
    /// reservations (a peek through one instance does not show what the
    /// others hold, so the count at the end is not checked).
    pub fn never_more(mut self) -> Self {
        self.exact = false;
        self
    }

    /// Reports a failure as found, without looking for a shorter trace.
    pub fn no_shrink(mut self) -> Self {
        self.shrink = false;
        self
    }

    /// Plays every run; the first failure ends the race, once shrunk.
    pub async fn run(mut self) -> Result<RaceReport, Failure> {
        let mut report = RaceReport::default();
        let asked = self.algorithms.clone().unwrap_or(Algorithm::ALL.to_vec());
        for algorithm in asked {
            let mut played = false;
            for n in 0..self.runs {
                let seed = self
                    .seed
                    .wrapping_add(n as u64)
                    .wrapping_mul(0x2545_f491)
                    .wrapping_add(algorithm as u64);
                let shape = self.shape;
                match self.play(seed, algorithm, shape).await {
                    Ok(None) => break,
                    Ok(Some(run)) => {
                        played = true;
                        run.add_to(&mut report);
                    }
                    Err(failed) => return Err(self.shrunk(seed, algorithm, shape, failed).await),
                }
            }
            if played {
                report.algorithms.push(algorithm);
            }
        }
        Ok(report)
    }

    /// Plays smaller runs of the same seed while one still fails: the
    /// failure of the smallest.
    async fn shrunk(
        &mut self,
        seed: u64,
        algorithm: Algorithm,
        shape: Shape,
        failed: Failed,
    ) -> Failure {
        /// Runs tried in all while shrinking, and tries of each.
        const BUDGET: usize = 60;
        const TRIES: usize = 3;
        let (mut best, mut failed) = (shape, failed);
        let mut spent = 0;
        while self.shrink && spent < BUDGET {
            let mut smaller = None;
            'candidates: for candidate in smaller_shapes(best) {
                for _ in 0..TRIES {
                    if spent >= BUDGET {
                        break 'candidates;
                    }
                    spent += 1;
                    if let Err(again) = self.play(seed, algorithm, candidate).await {
                        smaller = Some((candidate, again));
                        break 'candidates;
                    }
                }
            }
            match smaller {
                Some((shape, again)) => (best, failed) = (shape, again),
                None => break,
            }
        }
        let shortest = match self.shrink {
            true => format!("shortest failing trace found: {best}"),
            false => format!("trace: {best}"),
        };
        Failure {
            message: format!(
                "{} (seed {seed}, {algorithm}, quotas {}; {shortest}, first failing {shape}; the \
                 calls: {})",
                failed.what, failed.quotas, failed.plan
            ),
        }
    }

    /// One run: `Ok(None)` if the store does not support the algorithm.
    async fn play(
        &mut self,
        seed: u64,
        algorithm: Algorithm,
        shape: Shape,
    ) -> Result<Option<Run>, Failed> {
        clear_of_a_day_boundary().await;
        let mut rng = Rng::new(seed);
        let policy = Arc::new(Policy::new(limits(&mut rng, algorithm)));
        let quotas: Vec<String> = policy
            .limits()
            .iter()
            .map(|l| format!("{:?}", l.quota()))
            .collect();
        let setup = (self.setup)(seed, shape.instances);
        if setup.probe.supports(&policy).is_err() {
            return Ok(None);
        }
        let reference = Reference::of(&policy);
        let mut run = Run::default();
        let heard_out = setup.probe.can(Capability::Refund).is_ok();
        if !heard_out {
            run.skipped.push("heard-out give-ups");
        }
        if setup.faults.is_none() {
            run.skipped.push("dropped give-ups");
        }
        let plans: Vec<Plan> = (0..shape.clients)
            .map(|client| {
                Plan::draw(
                    seed,
                    client,
                    shape,
                    self.give_up_after,
                    heard_out,
                    setup.faults.is_some(),
                )
            })
            .collect();
        let described = describe(&plans, shape.instances);
        let failed = |what: String| Failed {
            what,
            quotas: quotas.join(" and "),
            plan: described.clone(),
        };
        // Fresh keys for each run, so that a store that keeps its state
        // (a database) can be raced again.
        let id = std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), seed);
        let names: Vec<String> = (0..shape.keys)
            .map(|k| format!("race-{id:x}-{algorithm}-{k}"))
            .collect();
        let keys: Vec<Key> = names.iter().map(Key::from).collect();
        for key in &keys {
            if !prepare(&setup.probe, &policy, key)
                .await
                .map_err(|e| failed(format!("the store failed a call before the race: {e}")))?
                && !run.skipped.contains(&"reset")
            {
                run.skipped.push("reset");
            }
        }
        let given_back: Arc<Vec<AtomicU64>> = Arc::new(keys.iter().map(|_| 0.into()).collect());
        let mut clients = Vec::new();
        for (n, plan) in plans.iter().enumerate() {
            let store = setup.stores[n % setup.stores.len()].clone();
            let client = Client {
                store,
                policy: policy.clone(),
                keys: keys.clone(),
                given_back: given_back.clone(),
                explain: self.explain.clone(),
            };
            let plan = plan.clone();
            clients.push(tokio::spawn(async move { client.play(&plan).await }));
        }
        let mut tallies = vec![Tally::default(); keys.len()];
        let mut first_error = None;
        for client in clients {
            match client.await {
                Ok(Ok(tally)) => {
                    for (sum, each) in tallies.iter_mut().zip(&tally) {
                        sum.add(each);
                    }
                }
                Ok(Err(error)) => {
                    first_error.get_or_insert(error);
                }
                Err(panic) => {
                    first_error.get_or_insert(format!("a client panicked: {panic}"));
                }
            }
        }
        // The heard-out checks and the writes on their way: settled before
        // the counts are read.
        settle(setup.faults.as_ref().map(|(ledger, _)| ledger))
            .await
            .map_err(failed)?;
        if let Some(error) = first_error {
            return Err(failed(error));
        }
        for (k, key) in keys.iter().enumerate() {
            let mut tally = tallies[k];
            tally.given_back = given_back[k].load(Ordering::Acquire);
            let seen = match &setup.faults {
                Some((ledger, name)) => {
                    let seen = ledger.key(&name(&policy, key));
                    run.unheard += seen.unheard;
                    run.held_writes += seen.held;
                    run.refused_by_restarts += seen.refused;
                    Seen {
                        unheard: seen.unheard,
                        made_past_deadline: seen.made_past_deadline,
                        refused_by_restarts: seen.refused,
                    }
                }
                None => Seen::default(),
            };
            let peek = setup
                .probe
                .peek(&policy, key)
                .resolve()
                .await
                .map_err(|e| failed(format!("the store failed a peek after the race: {e}")))?;
            let remaining: Vec<u64> = peek.each().iter().map(|d| d.remaining()).collect();
            let counts: Vec<u64> = (0..reference.after.len() as u64)
                .filter(|n| reference.after[*n as usize] == remaining)
                .collect();
            let count = match counts.is_empty() {
                true => Count::Unmatched(remaining),
                false => Count::Is(counts),
            };
            let judged = Judged {
                key: &names[k],
                capacity: reference.capacity(),
                tally,
                seen,
                count,
                exact: self.exact,
            };
            judged.verdict().map_err(failed)?;
            run.tally.add(&tally);
        }
        Ok(Some(run))
    }
}

#[cfg(feature = "cas")]
#[cfg_attr(docsrs, doc(cfg(feature = "cas")))]
impl<B: CasBackend + Clone> Race<CasStore<Faults<B>>> {
    /// A race over `backend` behind the default [`Faults`]: for each run,
    /// several [`CasStore`]s over clones of it (each as a process of its
    /// own: its own turns, its own retries) and the faults reseeded from
    /// the run's seed. A failed call is explained only by a restart the
    /// faults injected, or by its caller's deadline.
    pub fn cas(backend: B) -> Self {
        Self::cas_with(Faults::new(backend))
    }

    /// As [`cas`](Self::cas), with faults of your choosing (reseeded for
    /// each run from the run's seed).
    pub fn cas_with(faults: Faults<B>) -> Self {
        let setup = move |seed: u64, instances: usize| {
            let run = faults.reseeded(seed);
            let stores = (0..instances)
                .map(|_| {
                    // Enough attempts that a race among a few instances
                    // never runs out of them.
                    CasStore::builder(run.clone()).max_attempts(64).build()
                })
                .collect();
            let probe = CasStore::new(run.calm());
            let namer = probe.clone();
            let name: Namer = Arc::new(move |policy, key| namer.key_name(policy, key));
            Setup {
                stores,
                probe,
                faults: Some((run.ledger(), name)),
            }
        };
        let explain = |error: &CasError<FaultError<B::Error>>, _: Option<Duration>| {
            matches!(
                error,
                CasError::Late { .. } | CasError::Backend(FaultError::Restarting)
            )
        };
        Race::with(Box::new(setup), Arc::new(explain))
    }
}

/// What a failed run says, before the seed and the shape are added.
struct Failed {
    what: String,
    quotas: String,
    plan: String,
}

/// What one run counted.
#[derive(Default)]
struct Run {
    tally: Tally,
    unheard: u64,
    held_writes: u64,
    refused_by_restarts: u64,
    skipped: Vec<&'static str>,
}

impl Run {
    fn add_to(&self, report: &mut RaceReport) {
        let t = &self.tally;
        report.runs += 1;
        report.calls += t.kept + t.refused + t.failed + t.given_up;
        report.kept += t.kept;
        report.refused += t.refused;
        report.failed += t.failed;
        report.given_up += t.given_up;
        report.given_back += t.given_back;
        report.unheard += self.unheard;
        report.held_writes += self.held_writes;
        report.refused_by_restarts += self.refused_by_restarts;
        for skipped in &self.skipped {
            if !report.skipped.contains(skipped) {
                report.skipped.push(skipped);
            }
        }
    }
}

/// The shapes one step smaller than `shape`, the biggest cuts first.
fn smaller_shapes(shape: Shape) -> Vec<Shape> {
    let mut out = Vec::new();
    let mut cut = |f: &dyn Fn(&mut Shape)| {
        let mut smaller = shape;
        f(&mut smaller);
        if smaller != shape && !out.contains(&smaller) {
            out.push(smaller);
        }
    };
    cut(&|s| s.keys = 1);
    cut(&|s| s.clients = (s.clients / 2).max(1));
    cut(&|s| s.calls /= 2);
    cut(&|s| s.instances = s.instances.saturating_sub(1).max(1));
    cut(&|s| s.clients = s.clients.saturating_sub(1).max(1));
    cut(&|s| s.calls = s.calls.saturating_sub(1));
    cut(&|s| s.keys = s.keys.saturating_sub(1).max(1));
    out
}

/// How a call's caller waits.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// As long as it takes.
    Waits,
    /// This long, then drops it to be heard out ([`Watched`]).
    HeardOut(Duration),
    /// This long, then drops it unheard.
    Dropped(Duration),
}

/// One call: its key (an index) and how its caller waits.
#[derive(Clone, Copy, Debug)]
struct Call {
    key: usize,
    kind: Kind,
}

/// One client's calls.
#[derive(Clone, Debug)]
struct Plan {
    calls: Vec<Call>,
}

impl Plan {
    /// Client `client`'s calls, drawn from the run's seed: the same for
    /// every shape, so a smaller run plays a part of a bigger one.
    fn draw(
        seed: u64,
        client: usize,
        shape: Shape,
        give_up_after: Duration,
        heard_out: bool,
        dropped: bool,
    ) -> Plan {
        let mut rng = Rng::new(seed ^ (client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let most = u64::try_from(give_up_after.as_nanos()).unwrap_or(u64::MAX);
        let calls = (0..shape.calls)
            .map(|_| {
                let key = rng.below(shape.keys as u64) as usize;
                let roll = rng.below(100);
                let wait = Duration::from_nanos(most / 4 + rng.below(most - most / 4 + 1));
                let kind = match roll {
                    0..=24 if heard_out => Kind::HeardOut(wait),
                    25..=49 if dropped => Kind::Dropped(wait),
                    _ => Kind::Waits,
                };
                Call { key, kind }
            })
            .collect();
        Plan { calls }
    }
}

/// The clients' calls, for a failure's message.
fn describe(plans: &[Plan], instances: usize) -> String {
    let clients: Vec<String> = plans
        .iter()
        .enumerate()
        .map(|(n, plan)| {
            let calls: Vec<String> = plan
                .calls
                .iter()
                .map(|call| match call.kind {
                    Kind::Waits => format!("k{}", call.key),
                    Kind::HeardOut(wait) => format!("k{} heard out after {wait:?}", call.key),
                    Kind::Dropped(wait) => format!("k{} dropped after {wait:?}", call.key),
                })
                .collect();
            format!(
                "client {n} on instance {}: [{}]",
                n % instances.max(1),
                calls.join(", ")
            )
        })
        .collect();
    clients.join("; ")
}

/// The limits of a run: one or two of `algorithm`, a day's quotas of 4 to
/// 12, sometimes with a burst of twice that.
fn limits(rng: &mut Rng, algorithm: Algorithm) -> Vec<NamedLimit> {
    let count = if rng.chance(30) { 2 } else { 1 };
    (0..count)
        .map(|i| {
            let limit = 4 + rng.below(9);
            let day = Duration::from_secs(86_400);
            let quota = Quota::new(limit, day).unwrap_or_else(|_| Quota::per_second(limit));
            let quota = match rng.chance(25) {
                true => quota.with_burst(limit * 2).unwrap_or(quota),
                false => quota,
            };
            NamedLimit::new(["race-a", "race-b"][i], quota).with_algorithm(algorithm)
        })
        .collect()
}

/// What the reference shows a moment after `n` admissions of cost 1
/// (`after[n]`: each limit's `remaining`), for every `n` up to its
/// capacity, the first admission a moment before the others. Moments
/// apart, not all at once: a shaper (the leaky bucket) serves the first
/// request of its queue at once, so that once any time has passed it
/// holds one more, and a race's calls and peeks are spread in time.
struct Reference {
    after: Vec<Vec<u64>>,
}

impl Reference {
    fn of(policy: &Arc<Policy>) -> Self {
        /// Far above any quota a run draws.
        const MOST: u64 = 200;
        /// "A moment": far below any emission interval of a day's quota.
        const MOMENT: Duration = Duration::from_millis(1);
        let clock = ManualClock::new(REAL_TIME_BASE);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let mut capacity = 0;
        let burst = Key::from("capacity");
        while capacity < MOST && store.check_now(policy, &burst, 1).merged().allowed() {
            if capacity == 0 {
                clock.advance(MOMENT);
            }
            capacity += 1;
        }
        let after = (0..=capacity)
            .map(|n| {
                clock.set(REAL_TIME_BASE);
                let key = Key::from(n);
                for i in 0..n {
                    store.check_now(policy, &key, 1);
                    if i == 0 {
                        clock.advance(MOMENT);
                    }
                }
                clock.advance(MOMENT);
                let peek = store.peek_now(policy, &key);
                peek.each().iter().map(|d| d.remaining()).collect()
            })
            .collect();
        Reference { after }
    }

    /// How many cost-1 checks in a row it admits.
    fn capacity(&self) -> u64 {
        self.after.len() as u64 - 1
    }
}

/// Charges `key` once and resets it, so that the clients meet a value at
/// rest: whether the store could reset it (one that cannot is left as it
/// is: fresh).
async fn prepare<St: Store>(store: &St, policy: &Arc<Policy>, key: &Key) -> Result<bool, String> {
    match store.reset(policy, key).await {
        Ok(()) => {}
        Err(AdminError::Unsupported { .. }) => return Ok(false),
        Err(error) => return Err(error.to_string()),
    }
    if let Err(error) = store.check(policy, key, 1).resolve().await {
        return Err(error.to_string());
    }
    store
        .reset(policy, key)
        .await
        .map(|()| true)
        .map_err(|error| error.to_string())
}

/// Waits until no late check is being heard out in this process and no
/// write is on its way to the backend (at most a minute).
async fn settle(ledger: Option<&Ledger>) -> Result<(), String> {
    const BOUND: Duration = Duration::from_secs(60);
    let started = Instant::now();
    loop {
        let writes = ledger.map_or(0, Ledger::in_flight);
        let late = late_checks_in_progress();
        if writes == 0 && late == 0 {
            return Ok(());
        }
        if started.elapsed() >= BOUND {
            return Err(format!(
                "{late} late check(s) still heard out and {writes} write(s) on their way after \
                 {BOUND:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// One client: its instance, and what it needs to play its calls.
struct Client<St: Store> {
    store: St,
    policy: Arc<Policy>,
    keys: Vec<Key>,
    given_back: Arc<Vec<AtomicU64>>,
    explain: Explain<St::Error>,
}

/// How long a call whose caller waits may take before the run fails: far
/// beyond any fault a run injects.
const PATIENCE: Duration = Duration::from_secs(30);

impl<St: Store> Client<St> {
    /// Plays `plan`: what each key's callers saw.
    async fn play(&self, plan: &Plan) -> Result<Vec<Tally>, String> {
        let mut tallies = vec![Tally::default(); self.keys.len()];
        for call in &plan.calls {
            let tally = &mut tallies[call.key];
            let key = &self.keys[call.key];
            let within = match call.kind {
                Kind::Waits => None,
                Kind::HeardOut(wait) | Kind::Dropped(wait) => Some(wait),
            };
            let reply = match within {
                None => self.store.check(&self.policy, key, 1),
                Some(wait) => self.store.check_within(&self.policy, key, 1, wait),
            };
            let answer = match (reply, call.kind) {
                (StoreReply::Ready(answer), _) => Some(answer),
                (StoreReply::Pending(future), Kind::Waits) => {
                    match tokio::time::timeout(PATIENCE, future).await {
                        Ok(answer) => Some(answer),
                        Err(_) => {
                            return Err(format!(
                                "a check of key {key:?} did not answer within {PATIENCE:?}"
                            ));
                        }
                    }
                }
                (StoreReply::Pending(future), Kind::HeardOut(wait)) => {
                    let counting = Counting {
                        inner: self.store.clone(),
                        given_back: self.given_back.clone(),
                        index: call.key,
                    };
                    let watched = Watched::new(future, counting, &self.policy, key, 1);
                    tokio::time::timeout(wait, watched).await.ok()
                }
                (StoreReply::Pending(future), Kind::Dropped(wait)) => {
                    tokio::time::timeout(wait, future).await.ok()
                }
            };
            match answer {
                None => tally.given_up += 1,
                Some(Ok(decision)) if decision.merged().allowed() => tally.kept += 1,
                Some(Ok(_)) => tally.refused += 1,
                Some(Err(error)) if (self.explain)(&error, within) => tally.failed += 1,
                Some(Err(error)) => {
                    return Err(format!("the store failed a check of key {key:?}: {error}"));
                }
            }
        }
        Ok(tallies)
    }
}

/// A store in front of a client's instance that counts the admissions of
/// heard-out checks given back through it.
struct Counting<St> {
    inner: St,
    given_back: Arc<Vec<AtomicU64>>,
    index: usize,
}

impl<St: Clone> Clone for Counting<St> {
    fn clone(&self) -> Self {
        Counting {
            inner: self.inner.clone(),
            given_back: self.given_back.clone(),
            index: self.index,
        }
    }
}

// A wrapper by construction: every operation but the refund it counts
// (the check with its deadline included) reaches the store behind as it is.
impl<St: Store> tollgate_store::StoreWrapper for Counting<St> {
    type Inner = St;
    type Error = St::Error;
    type Future = St::Future;

    fn inner(&self) -> &St {
        &self.inner
    }

    fn relay(
        &self,
        _: &std::sync::Arc<tollgate_store::Policy>,
        _: &tollgate_store::Key,
        reply: tollgate_store::StoreReply<
            <Self::Inner as tollgate_store::Store>::Future,
            <Self::Inner as tollgate_store::Store>::Error,
        >,
    ) -> tollgate_store::StoreReply<Self::Future, Self::Error> {
        reply
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<St::Future, St::Error> {
        self.inner.check_within(policy, key, cost, within)
    }

    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        if let Some(count) = self.given_back.get(self.index) {
            count.fetch_add(1, Ordering::AcqRel);
        }
        self.inner.refund(policy, key, refund)
    }
}
