//! `Store::carry` against the core's definition (`tollgate_core::carried`),
//! on a manual clock, for every algorithm: a key charged under one quota,
//! then moved to another at some moment, is decided afterwards exactly as
//! a fresh state of the new quota charged, at that moment, the units the
//! old one had used (its limit less what remained). Random quotas, costs,
//! times and moves.

use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use tollgate::{Key, MemoryStore, NamedLimit, Policy, Store};
use tollgate_core::{Algorithm, Limiter, ManualClock, Quota};

/// A quota of `limit` per `seconds`.
fn quota(limit: u32, seconds: u64) -> Quota {
    Quota::new(u64::from(limit), Duration::from_secs(seconds)).unwrap()
}

fn policy(algorithm: Algorithm, quota: Quota) -> Arc<Policy> {
    Arc::new(Policy::new(vec![
        NamedLimit::new("api", quota).with_algorithm(algorithm),
    ]))
}

/// Requests before the move, and after: (ms since the last, cost).
type Steps = Vec<(u64, u32)>;

fn steps() -> impl Strategy<Value = Steps> {
    prop::collection::vec((0u64..5_000, 1u32..4), 0..12)
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
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_carried_key_is_decided_as_the_reference(
        algorithm in prop::sample::select(ALGORITHMS.to_vec()),
        (old_limit, old_seconds) in (1u32..20, 1u64..120),
        (new_limit, new_seconds) in (1u32..200, 1u64..120),
        before in steps(),
        after in steps(),
    ) {
        let (old_quota, new_quota) = (quota(old_limit, old_seconds), quota(new_limit, new_seconds));
        let clock = ManualClock::new(1_000_000_000_000);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let (from, to) = (policy(algorithm, old_quota), policy(algorithm, new_quota));
        let key = Key::from("tenant");
        // The reference: the core's limiters on states of their own.
        let (old, new) = (Limiter::new(algorithm, old_quota), Limiter::new(algorithm, new_quota));
        let mut old_state = old.new_state();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();

        for (ms, cost) in &before {
            clock.advance(Duration::from_millis(*ms));
            let now = tollgate_core::Clock::now(&clock);
            let expected = old.check(&mut old_state, now, *cost);
            let got = store.check_now(&from, &key, *cost).merged;
            prop_assert_eq!(got.allowed(), expected.allowed());
        }
        clock.advance(Duration::from_millis(250));
        let now = tollgate_core::Clock::now(&clock);
        let (seen, _) = old.evaluate(&old_state, now, 0);
        let used = tollgate_core::used(&old, &old_state, now);
        let mut new_state = tollgate_core::carried(&old, &old_state, &new, now);
        runtime.block_on(store.carry(&from, &to, &key)).unwrap();

        for (ms, cost) in &after {
            clock.advance(Duration::from_millis(*ms));
            let now = tollgate_core::Clock::now(&clock);
            let expected = new.check(&mut new_state, now, *cost);
            let got = store.check_now(&to, &key, *cost).merged;
            prop_assert_eq!(
                (got.allowed(), got.remaining(), got.retry_after_nanos()),
                (expected.allowed(), expected.remaining(), expected.retry_after_nanos()),
                "{} {:?} → {:?}, used {}", algorithm, old_quota, new_quota, used
            );
        }
        // The old plan's state is gone: a second move carries nothing.
        prop_assert_eq!(store.peek_now(&from, &key).merged.remaining(), seen.limit());
    }
}
