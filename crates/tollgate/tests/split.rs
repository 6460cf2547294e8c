//! `store::Split`: a store that decides each limit at `1/N` of its quota,
//! the fallback of a store shared by `N` instances.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tollgate::store::{Refund, Split};
use tollgate::{Key, MemoryStore, NamedLimit, Policy, Store};
use tollgate_core::{Algorithm, Quota};

fn policy(algorithm: Algorithm) -> Arc<Policy> {
    Arc::new(Policy::new(vec![
        NamedLimit::new("api", Quota::per_minute(10)).with_algorithm(algorithm),
    ]))
}

/// How many requests of cost 1 pass, one after another, out of 20.
async fn admitted<St: Store>(store: &St, policy: &Arc<Policy>, key: &Key) -> usize {
    let mut passed = 0;
    for _ in 0..20 {
        if store
            .check(policy, key, 1)
            .resolve()
            .await
            .unwrap()
            .merged()
            .allowed()
        {
            passed += 1;
        }
    }
    passed
}

#[tokio::test]
async fn each_instance_gets_its_share_of_every_limit() {
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let policy = policy(algorithm);
        // Two instances: 5 each of 10; three: 3 each (never more than the
        // limit together); more instances than units: 1 each.
        for (n, share) in [(1, 10), (2, 5), (3, 3), (20, 1)] {
            let store = Split::fixed(MemoryStore::new(), n);
            let key = Key::from("k");
            assert_eq!(
                admitted(&store, &policy, &key).await,
                share,
                "{algorithm}, {n}"
            );
            let decision = store.peek(&policy, &key).resolve().await.unwrap();
            assert_eq!(
                decision.merged().limit(),
                share as u64,
                "{algorithm}, {n}: the split quota"
            );
        }
    }
}

#[tokio::test]
async fn refunds_and_resets_reach_the_split_counts() {
    let (policy, key) = (policy(Algorithm::FixedWindow), Key::from("k"));
    let store = Split::fixed(MemoryStore::new(), 2);
    let mut last = None;
    for _ in 0..5 {
        last = Some(store.check(&policy, &key, 1).resolve().await.unwrap());
    }
    assert!(
        !store
            .check(&policy, &key, 1)
            .resolve()
            .await
            .unwrap()
            .merged()
            .allowed()
    );
    let refund = Refund::of(last.as_ref().unwrap(), 1, Duration::ZERO);
    store.refund(&policy, &key, refund).landed().await;
    assert!(
        store
            .check(&policy, &key, 1)
            .resolve()
            .await
            .unwrap()
            .merged()
            .allowed()
    );
    store.reset(&policy, &key).await.unwrap();
    assert_eq!(admitted(&store, &policy, &key).await, 5);
}

#[tokio::test]
async fn the_share_follows_the_number_of_instances() {
    let (policy, key) = (policy(Algorithm::Gcra), Key::from("k"));
    let instances = Arc::new(AtomicU32::new(1));
    let seen = instances.clone();
    let store = Split::new(MemoryStore::new(), move || seen.load(Ordering::Relaxed));
    assert_eq!(store.instances(), 1);
    let one = store.peek(&policy, &key).resolve().await.unwrap();
    assert_eq!(one.merged().limit(), 10);
    instances.store(4, Ordering::Relaxed);
    let four = store.peek(&policy, &key).resolve().await.unwrap();
    assert_eq!(four.merged().limit(), 2);
    // None is read as one.
    instances.store(0, Ordering::Relaxed);
    assert_eq!(store.instances(), 1);
}

/// A plan change through a split moves the key's usage under the split
/// the checks were decided by, limit by limit: 3 used of 5 a minute and
/// of 10 an hour (10/min and 20/h split in two), moved to 100/min and
/// 200/h (50 and 100 each), leaves 47 and 97; the old plan's state is gone.
#[tokio::test]
async fn a_plan_change_carries_the_usage_under_the_split() {
    let store = Split::fixed(MemoryStore::new(), 2);
    let key = Key::from("tenant");
    let plan = |minute, hour| {
        Arc::new(Policy::new(vec![
            NamedLimit::new("minute", Quota::per_minute(minute)),
            NamedLimit::new("hour", Quota::per_hour(hour)),
        ]))
    };
    let (from, to) = (plan(10, 20), plan(100, 200));
    for _ in 0..3 {
        assert!(
            store
                .check(&from, &key, 1)
                .resolve()
                .await
                .unwrap()
                .merged()
                .allowed()
        );
    }
    store.carry(&from, &to, &key).await.unwrap();
    let now = store.peek(&to, &key).resolve().await.unwrap();
    let left: Vec<(u64, u64)> = now
        .each()
        .iter()
        .map(|d| (d.limit(), d.remaining()))
        .collect();
    assert_eq!(left, [(50, 47), (100, 97)]);
    let before = store.peek(&from, &key).resolve().await.unwrap().merged();
    assert_eq!(before.remaining(), 5);
}
