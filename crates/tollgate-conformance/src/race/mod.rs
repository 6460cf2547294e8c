//! [`Race`]: the racing kit — clients on tokio tasks sending checks for
//! shared keys through several instances of a store at once, callers
//! that stop waiting, and (for a compare-and-swap backend) injected
//! faults; then the checker's verdict on each key, and on a failure the
//! shortest trace that still fails.
//!
//! This file holds the kit's face: its builder, its constructors, and the
//! loop over algorithms and runs. What a run draws is `plan.rs`'s, a
//! client's calls `client.rs`'s, one run from setup to verdict `run.rs`'s
//! (with the reference's figures from `reference.rs`), and the search for
//! a shorter failing trace `shrink.rs`'s.

mod client;
mod plan;
mod reference;
mod run;
mod shrink;

use self::client::Explain;
use self::plan::Shape;
use self::run::{MakeSetup, Rig, Setup};
use self::shrink::shrunk;
use crate::report::{Failure, RaceReport};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tollgate_core::Algorithm;
use tollgate_store::Store;
#[cfg(doc)]
use tollgate_store::{MemoryStore, Watched, late::late_checks_in_progress};
#[cfg(feature = "cas")]
use {
    self::run::Namer,
    crate::faults::Faults,
    crate::ledger::FaultError,
    tollgate_cas::{CasBackend, CasError, CasStore},
};

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
    rig: Rig<St>,
    algorithms: Option<Vec<Algorithm>>,
    runs: usize,
    shape: Shape,
    seed: u64,
    shrink: bool,
}

impl<St: Store> fmt::Debug for Race<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Race")
            .field("algorithms", &self.algorithms)
            .field("runs", &self.runs)
            .field("shape", &self.shape)
            .field("seed", &self.seed)
            .field("give_up_after", &self.rig.give_up_after)
            .field("exact", &self.rig.exact)
            .finish_non_exhaustive()
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
            rig: Rig {
                setup,
                explain,
                give_up_after: Duration::from_millis(8),
                exact: true,
            },
            algorithms: None,
            runs: 2,
            shape: Shape {
                instances: 3,
                clients: 6,
                calls: 6,
                keys: 2,
            },
            seed: 0x7011_6a7e,
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
        self.rig.give_up_after = wait;
        self
    }

    /// Checks only that no key admits more than the algorithm allows: for
    /// a store that may refuse more than the reference and keeps counts
    /// of its own in each instance, such as the local-first store's
    /// reservations (a peek through one instance does not show what the
    /// others hold, so the count at the end is not checked).
    pub fn never_more(mut self) -> Self {
        self.rig.exact = false;
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
                match self.rig.play(seed, algorithm, shape).await {
                    Ok(None) => break,
                    Ok(Some(run)) => {
                        played = true;
                        run.add_to(&mut report);
                    }
                    Err(failed) => {
                        return Err(shrunk(
                            &mut self.rig,
                            self.shrink,
                            seed,
                            algorithm,
                            shape,
                            failed,
                        )
                        .await);
                    }
                }
            }
            if played {
                report.algorithms.push(algorithm);
            }
        }
        Ok(report)
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
