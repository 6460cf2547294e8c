//! `Store::carry` against the core's definition (`tollgate_core::carried`),
//! on a manual clock, for every algorithm: a key charged under one plan,
//! then moved to another at some moment, is decided afterwards exactly as
//! fresh states of the new plan's limits charged, at that moment, the units
//! the limit of the same name in the old plan had used (its limit less
//! what remained); a limit the new plan lacks keeps its state. Random
//! plans of one or two limits, costs, times and moves.

use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use tollgate::{Key, MemoryStore, NamedLimit, Policy, Store};
use tollgate_core::{Algorithm, Decision, Limiter, ManualClock, Quota, State, check_all};

/// A quota of `limit` per `seconds`.
fn quota(limit: u32, seconds: u64) -> Quota {
    Quota::new(u64::from(limit), Duration::from_secs(seconds)).unwrap()
}

/// A plan's limits: its quotas under `algorithm`, named `l0`, `l1`.
fn plan(algorithm: Algorithm, quotas: &[Quota]) -> (Arc<Policy>, Vec<Limiter>) {
    let limits = quotas
        .iter()
        .enumerate()
        .map(|(i, quota)| NamedLimit::new(format!("l{i}"), *quota).with_algorithm(algorithm))
        .collect();
    let limiters = quotas.iter().map(|q| Limiter::new(algorithm, *q)).collect();
    (Arc::new(Policy::new(limits)), limiters)
}

/// The reference's decision on `limiters` with `states`.
fn decide(limiters: &[Limiter], states: &mut [State], now: u64, cost: u32) -> Decision {
    let mut pairs: Vec<(&Limiter, &mut State)> = limiters.iter().zip(states.iter_mut()).collect();
    let mut each = [Decision::default(); 2];
    check_all(&mut pairs, now, cost, &mut each)
}

/// Requests: (ms since the last, cost).
type Steps = Vec<(u64, u32)>;

fn steps() -> impl Strategy<Value = Steps> {
    prop::collection::vec((0u64..5_000, 1u32..4), 0..12)
}

fn quotas() -> impl Strategy<Value = Vec<Quota>> {
    prop::collection::vec((1u32..60, 1u64..120).prop_map(|(l, s)| quota(l, s)), 1..=2)
}

const ALGORITHMS: [Algorithm; 7] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::LeakyBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
    Algorithm::SlidingWindow,
    Algorithm::SlidingWindowBuckets,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_carried_key_is_decided_as_the_reference(
        algorithm in prop::sample::select(ALGORITHMS.to_vec()),
        old_quotas in quotas(),
        new_quotas in quotas(),
        before in steps(),
        after in steps(),
    ) {
        let clock = ManualClock::new(1_000_000_000_000);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let ((from, old), (to, new)) = (plan(algorithm, &old_quotas), plan(algorithm, &new_quotas));
        let key = Key::from("tenant");
        let mut old_states: Vec<State> = old.iter().map(Limiter::new_state).collect();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let now = || tollgate_core::Clock::now(&clock);

        for (ms, cost) in &before {
            clock.advance(Duration::from_millis(*ms));
            let expected = decide(&old, &mut old_states, now(), *cost);
            let got = store.check_now(&from, &key, *cost).merged();
            prop_assert_eq!(got.allowed(), expected.allowed());
        }
        clock.advance(Duration::from_millis(250));
        let mut new_states: Vec<State> = new
            .iter()
            .enumerate()
            .map(|(i, limiter)| match (old.get(i), old_states.get(i)) {
                (Some(was), Some(state)) => tollgate_core::carried(was, state, limiter, now()),
                _ => limiter.new_state(),
            })
            .collect();
        runtime.block_on(store.carry(&from, &to, &key)).unwrap();

        for (ms, cost) in &after {
            clock.advance(Duration::from_millis(*ms));
            let expected = decide(&new, &mut new_states, now(), *cost);
            let got = store.check_now(&to, &key, *cost).merged();
            prop_assert_eq!(
                (got.allowed(), got.remaining(), got.retry_after_nanos()),
                (expected.allowed(), expected.remaining(), expected.retry_after_nanos()),
                "{} {:?} → {:?}", algorithm, old_quotas, new_quotas
            );
        }
        // The moved limits' state is gone: a second move carries nothing.
        // A limit the new plan lacks keeps its own, for when its plan
        // returns.
        let left = store.peek_now(&from, &key);
        for (i, (limit, limiter)) in left.each().iter().zip(&old).enumerate() {
            let kept = match i < new.len() {
                true => limit.limit(),
                false => limiter.check(&mut old_states[i].clone(), now(), 0).remaining(),
            };
            prop_assert_eq!(limit.remaining(), kept, "limit {} of {:?}", i, old_quotas);
        }
    }
}
