//! An operator's handle on the memory store, for every algorithm: a peek
//! charges nothing (a key peeked at, or checked at cost 0, between its
//! requests is decided exactly as its twin that was not) and tells the
//! truth; a reset makes the key whole; an unblock clears a block cache's
//! remembered refusal. On a manual clock.

use std::sync::Arc;
use std::time::Duration;
use tollgate::store::{BlockCache, BoxStore, Fallback, Timeout};
use tollgate::{Key, MemoryStore, NamedLimit, Policy, PolicyDecision, Store, StoreReply};
use tollgate_core::{Algorithm, ManualClock, Quota};

const SECOND: u64 = 1_000_000_000;

fn store(clock: &ManualClock) -> MemoryStore<ManualClock> {
    MemoryStore::builder().clock(clock.clone()).build()
}

/// One limit of `algorithm`, or two (a second, looser one beside it: the
/// store's other path, several states under one lock).
fn policies(algorithm: Algorithm) -> [Arc<Policy>; 2] {
    let one = NamedLimit::new("api", Quota::per_minute(5)).with_algorithm(algorithm);
    let two = NamedLimit::new("hour", Quota::per_hour(40)).with_algorithm(algorithm);
    [
        Arc::new(Policy::new(vec![one.clone()])),
        Arc::new(Policy::new(vec![one, two])),
    ]
}

fn now<F, E: std::fmt::Debug>(reply: StoreReply<F, E>) -> PolicyDecision {
    match reply {
        StoreReply::Ready(answer) => answer.unwrap(),
        StoreReply::Pending(_) => panic!("the memory store answers at once"),
    }
}

/// A small deterministic generator, so that a failure replays.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[test]
fn a_peeked_key_is_decided_as_its_twin_that_was_not() {
    for algorithm in Algorithm::ALL {
        for policy in policies(algorithm) {
            let clock = ManualClock::new(1_700_000_000 * SECOND + 123);
            let store = store(&clock);
            let (plain, peeked, zero) =
                (Key::from("plain"), Key::from("peeked"), Key::from("zero"));
            let mut random = Lcg(7);
            for step in 0..400 {
                for _ in 0..random.below(3) {
                    let _ = now(store.peek(&policy, &peeked));
                    // The default peek, a check of cost 0: what the Redis
                    // scripts run, here run by the core.
                    let _ = store.check_now(&policy, &zero, 0);
                }
                let cost = 1 + random.below(2) as u32;
                let expected = store.check_now(&policy, &plain, cost);
                for key in [&peeked, &zero] {
                    let got = store.check_now(&policy, key, cost);
                    assert_eq!(
                        (got.merged(), got.each()),
                        (expected.merged(), expected.each()),
                        "{algorithm}, {} limits, step {step}, {key:?}",
                        policy.limits().len()
                    );
                }
                clock.advance(Duration::from_millis(random.below(9_000)));
            }
        }
    }
}

#[test]
fn peeks_charge_nothing_and_tell_the_remaining_and_the_reset() {
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(1_700_000_000 * SECOND + 123);
        let store = store(&clock);
        let [policy, _] = policies(algorithm);
        let key = Key::from("alice");
        let capacity = policy.limiters()[0].capacity();
        let fresh = store.peek_now(&policy, &key);
        assert_eq!(fresh.each()[0].remaining(), capacity, "{algorithm}");
        assert_eq!(fresh.each()[0].reset_after(), Duration::ZERO, "{algorithm}");
        assert!(store.is_empty(), "{algorithm}: a peek adds no key");
        for admitted in 0..capacity {
            for _ in 0..10 {
                let peek = store.peek_now(&policy, &key);
                assert_eq!(
                    peek.merged().remaining(),
                    capacity - admitted,
                    "{algorithm}"
                );
            }
            let check = store.check_now(&policy, &key, 1);
            assert!(check.merged().allowed(), "{algorithm}: request {admitted}");
            // At the same instant, the peek reads what the check left.
            let peek = store.peek_now(&policy, &key);
            assert_eq!(
                peek.each()[0].remaining(),
                check.each()[0].remaining(),
                "{algorithm}"
            );
            assert_eq!(
                peek.each()[0].reset_after(),
                check.each()[0].reset_after(),
                "{algorithm}"
            );
            assert_eq!(
                peek.each()[0].limit(),
                check.each()[0].limit(),
                "{algorithm}"
            );
        }
        let refused = store.check_now(&policy, &key, 1);
        assert!(!refused.merged().allowed(), "{algorithm}: over capacity");
        let peek = store.peek_now(&policy, &key);
        assert_eq!(peek.merged().remaining(), 0, "{algorithm}");
        assert_eq!(
            peek.each()[0].reset_after(),
            refused.each()[0].reset_after(),
            "{algorithm}"
        );
    }
}

#[tokio::test]
async fn a_reset_makes_the_key_whole_and_leaves_the_others_alone() {
    for algorithm in Algorithm::ALL {
        for policy in policies(algorithm) {
            let clock = ManualClock::new(1_700_000_000 * SECOND + 123);
            let store = store(&clock);
            let (alice, bob) = (Key::from("alice"), Key::from("bob"));
            let capacity = policy.limiters()[0].capacity();
            for key in [&alice, &bob] {
                while store.check_now(&policy, key, 1).merged().allowed() {}
            }
            store.reset(&policy, &alice).await.unwrap();
            let peek = store.peek(&policy, &alice).resolve().await.unwrap();
            assert_eq!(peek.merged().remaining(), capacity, "{algorithm}");
            for n in 0..capacity {
                assert!(
                    store.check_now(&policy, &alice, 1).merged().allowed(),
                    "{algorithm}: request {n} after the reset"
                );
            }
            assert!(!store.check_now(&policy, &alice, 1).merged().allowed());
            assert!(
                !store.check_now(&policy, &bob, 1).merged().allowed(),
                "{algorithm}"
            );
        }
    }
}

#[tokio::test]
async fn unblock_clears_a_block_cache_s_refusal_and_reset_clears_it_too() {
    let clock = ManualClock::new(1_700_000_000 * SECOND);
    let memory = store(&clock);
    let cache = BlockCache::new(memory.clone()).clock(clock.clone());
    let [policy, _] = policies(Algorithm::FixedWindow);
    let key = Key::from("alice");
    while now(cache.check(&policy, &key, 1)).merged().allowed() {}
    assert_eq!(cache.block_list().len(), 1);
    cache.unblock(&policy, &key).await.unwrap();
    assert!(cache.block_list().is_empty(), "unblock forgets the refusal");
    // The counts stand: refused by the store, and remembered again (a
    // refusal of a request sent before the unblock would not be).
    clock.advance(Duration::from_millis(1));
    assert!(!now(cache.check(&policy, &key, 1)).merged().allowed());
    assert_eq!(cache.block_list().len(), 1);
    cache.reset(&policy, &key).await.unwrap();
    assert!(cache.block_list().is_empty(), "reset forgets the refusal");
    assert!(now(cache.check(&policy, &key, 1)).merged().allowed());
}

#[tokio::test]
async fn the_wrappers_pass_the_handle_on() {
    let clock = ManualClock::new(1_700_000_000 * SECOND);
    let [policy, _] = policies(Algorithm::Gcra);
    let key = Key::from("alice");
    let primary = store(&clock);
    let secondary = store(&clock);
    let stack = BoxStore::new(Timeout::new(
        Fallback::new(primary.clone(), secondary.clone()),
        Duration::from_secs(1),
    ));
    for inner in [&primary, &secondary] {
        while inner.check_now(&policy, &key, 1).merged().allowed() {}
    }
    let peek = stack.peek(&policy, &key).resolve().await.unwrap();
    assert_eq!(peek.merged().remaining(), 0);
    stack.unblock(&policy, &key).await.unwrap();
    stack.reset(&policy, &key).await.unwrap();
    // Both stores of the fallback are whole again.
    for inner in [&primary, &secondary] {
        assert_eq!(inner.peek_now(&policy, &key).merged().remaining(), 5);
    }
}

#[tokio::test]
async fn a_store_of_your_own_without_reset_says_so() {
    #[derive(Clone)]
    struct Mine(MemoryStore);
    impl Store for Mine {
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<PolicyDecision, Self::Error>>;
        fn check(
            &self,
            policy: &Arc<Policy>,
            key: &Key,
            cost: u32,
        ) -> StoreReply<Self::Future, Self::Error> {
            self.0.check(policy, key, cost)
        }
    }
    let [policy, _] = policies(Algorithm::Gcra);
    let error = Mine(MemoryStore::new())
        .reset(&policy, &Key::from("a"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("reset"), "{error}");
    // Nothing to unblock: fine.
    Mine(MemoryStore::new())
        .unblock(&policy, &Key::from("a"))
        .await
        .unwrap();
}
