//! One run of a race, from setup to verdict: its instances made, its keys
//! prepared, its clients spawned and awaited, the late checks and writes
//! on their way settled, then each key's count peeked and judged by the
//! checker against the reference.

use super::client::{Client, Explain};
use super::plan::{Plan, Shape, describe, limits};
use super::reference::Reference;
use crate::checker::{Count, Judged, Seen, Tally};
use crate::ledger::Ledger;
use crate::real_time::clear_of_a_day_boundary;
use crate::report::RaceReport;
use crate::trace::Rng;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate_core::Algorithm;
use tollgate_store::late::late_checks_in_progress;
use tollgate_store::{AdminError, Capability, Key, Policy, Store};

/// The instances of one run: those the clients race through, one more
/// for the kit's own calls (the reset before, the peeks after), and what
/// the fault injector saw.
pub(super) struct Setup<St> {
    pub(super) stores: Vec<St>,
    pub(super) probe: St,
    pub(super) faults: Option<(Ledger, Namer)>,
}

/// A key's name in the backend, for the fault injector's ledger.
pub(super) type Namer = Arc<dyn Fn(&Policy, &Key) -> String + Send + Sync>;

/// Makes a run's instances, from its seed and how many.
pub(super) type MakeSetup<St> = Box<dyn FnMut(u64, usize) -> Setup<St> + Send>;

/// What every run of a race is played with: how its instances are made,
/// which errors it explains, how long callers that give up wait, and
/// whether counts are checked to the call or only never above the
/// algorithm's.
pub(super) struct Rig<St: Store> {
    pub(super) setup: MakeSetup<St>,
    pub(super) explain: Explain<St::Error>,
    pub(super) give_up_after: Duration,
    pub(super) exact: bool,
}

impl<St: Store> Rig<St> {
    /// One run: `Ok(None)` if the store does not support the algorithm.
    pub(super) async fn play(
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

/// What a failed run says, before the seed and the shape are added.
pub(super) struct Failed {
    pub(super) what: String,
    pub(super) quotas: String,
    pub(super) plan: String,
}

/// What one run counted.
#[derive(Default)]
pub(super) struct Run {
    tally: Tally,
    unheard: u64,
    held_writes: u64,
    refused_by_restarts: u64,
    skipped: Vec<&'static str>,
}

impl Run {
    pub(super) fn add_to(&self, report: &mut RaceReport) {
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
