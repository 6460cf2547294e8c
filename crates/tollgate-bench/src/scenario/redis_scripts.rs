//! Redis, per algorithm: what each script costs the server, and what 64
//! tasks get through one store.
//!
//! - Script cost: server-side microseconds per script call (`FCALL`, from `INFO
//!   commandstats`, so the round trip is left out) on one key whose limit
//!   is used up, the sliding log's log then full: 2,000 refused calls after
//!   `limit` admitted ones. The anchor is GCRA's script on the same quota,
//!   same calls. Limits 100, 1,000 and 5,000 per day (so that GCRA earns
//!   nothing back during the run); the target is the
//!   sliding log at 5,000 within 2× GCRA.
//! - Decisions per second: 64 tasks on one `RedisStore`, 10,000 random
//!   keys, 1,000/s per key (never used up), for each algorithm; the anchor
//!   is GCRA's figure in the same round.
//!
//! Needs `redis-server`; without it the scenario is skipped (see
//! [`super::redis::missing_tools`]).

use super::redis::{check, script_stats};
use crate::measure::Settings;
use crate::report::{Better, Outcome, median};
use std::sync::Arc;
use tollgate::{Key, NamedLimit, Policy};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::RedisServer;

/// Refused calls timed per limit and algorithm.
const REFUSED_CALLS: u64 = 2_000;

/// Runs the scenario.
pub fn run(settings: Settings) -> Vec<Outcome> {
    let (runtime, server, store) = super::redis::start();
    let rounds = settings.pick(3, 2);
    let mut outcomes = Vec::new();
    for limit in [100u64, 1_000, 5_000] {
        let (mut log, mut gcra) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            for which in [round % 2, (round + 1) % 2] {
                let (algorithm, into) = if which == 0 {
                    (Algorithm::SlidingLog, &mut log)
                } else {
                    (Algorithm::Gcra, &mut gcra)
                };
                let key = format!("script-{limit}-{algorithm}-{round}");
                into.push(
                    runtime.block_on(micros_per_refusal(&server, &store, algorithm, limit, &key)),
                );
            }
        }
        let mut outcome = Outcome::new(
            &format!("redis script: sliding log full at {limit}/d, refused"),
            median(&log),
            median(&gcra),
            "µs/call",
            Better::Lower,
        )
        .against("GCRA's script, same quota and calls");
        if limit == 5_000 {
            outcome = outcome.target(2.0);
        }
        outcomes.push(outcome);
    }
    let seconds = settings.pick(2.0, 1.0);
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); Algorithm::ALL.len()];
    for round in 0..rounds {
        for (i, &algorithm) in Algorithm::ALL.iter().enumerate() {
            let policy = policy(algorithm, "1000/s", &format!("tasks-{round}"));
            rates[i].push(runtime.block_on(super::redis::ours(&store, &policy, seconds)));
        }
    }
    let gcra = median(&rates[0]);
    for (i, algorithm) in Algorithm::ALL.iter().enumerate().skip(1) {
        outcomes.push(
            Outcome::new(
                &format!("redis: {algorithm} decisions, 64 tasks"),
                median(&rates[i]),
                gcra,
                "decisions/s",
                Better::Higher,
            )
            .against("GCRA on the same store, same rounds"),
        );
    }
    outcomes
}

fn policy(algorithm: Algorithm, quota: &str, name: &str) -> Arc<Policy> {
    let quota: Quota = quota.parse().expect("a valid quota");
    Arc::new(Policy::new(vec![
        NamedLimit::new(name, quota).with_algorithm(algorithm),
    ]))
}

/// Server-side µs per call of `algorithm`'s script, refusing on a key whose
/// `limit`/d is used up by `limit` admitted calls.
async fn micros_per_refusal(
    server: &RedisServer,
    store: &RedisStore,
    algorithm: Algorithm,
    limit: u64,
    key: &str,
) -> f64 {
    let policy = policy(algorithm, &format!("{limit}/d"), "script");
    let key = Key::from_bytes(key.as_bytes());
    let mut admitted = 0;
    while check(store, &policy, &key).await {
        admitted += 1;
    }
    assert_eq!(admitted, limit, "{algorithm}: the limit is used up");
    let before = script_stats(server);
    for _ in 0..REFUSED_CALLS {
        assert!(
            !check(store, &policy, &key).await,
            "{algorithm} at {limit}: refused at its limit"
        );
    }
    let after = script_stats(server);
    assert_eq!(
        after.calls - before.calls,
        REFUSED_CALLS,
        "every call ran the script"
    );
    (after.usec - before.usec) as f64 / REFUSED_CALLS as f64
}
