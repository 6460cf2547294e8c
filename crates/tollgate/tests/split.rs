//! `store::Split`: a store that decides each limit at `1/N` of its quota,
//! the fallback of a store shared by `N` instances.

mod common;

use common::Outage;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tollgate::store::{Fallback, PolicyRefund, Presence, Share, Split};
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
    let refund = PolicyRefund::of(last.as_ref().unwrap(), 1, Duration::ZERO);
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

/// 3 a minute over two instances ranked 0 and 1: 2 and 1, the limit
/// together; without ranks each rounds down (1 and 1); 2 over 4 ranked:
/// 1, 1 and the floor of 1 for the two without a unit (at least 1 each).
#[tokio::test]
async fn ranked_shares_add_up_to_the_limit() {
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let policy = Arc::new(Policy::new(vec![
            NamedLimit::new("api", Quota::per_minute(3)).with_algorithm(algorithm),
        ]));
        let key = Key::from("k");
        let mut together = 0;
        for rank in 0..2 {
            let store = Split::shared(MemoryStore::new(), move || Share::ranked(2, rank));
            together += admitted(&store, &policy, &key).await;
        }
        assert_eq!(together, 3, "{algorithm}: ranked");
        let unranked = Split::fixed(MemoryStore::new(), 2);
        assert_eq!(admitted(&unranked, &policy, &key).await, 1, "{algorithm}");
    }
    let parts: Vec<u64> = (0..4).map(|rank| Share::ranked(4, rank).part(2)).collect();
    assert_eq!(parts, [1, 1, 0, 0]);
    assert_eq!(
        Share::ranked(3, 0).part(10) + 2 * Share::ranked(3, 2).part(10),
        10
    );
}

/// A presence: the operator's count until the store has counted; a
/// fresh beat (the instance's first, or after the store lost the words)
/// never lowers the count and ranks nobody; the next beat is exact.
#[test]
fn a_presence_counts_from_the_operator_then_from_the_beats() {
    let presence = Presence::expecting(2);
    assert!(!presence.counted());
    assert_eq!(presence.share(), Share::of(2));
    // First beat: alone in the store so far.
    presence.beat(1, 0, true);
    assert_eq!(presence.share(), Share::of(2));
    presence.beat(3, 1, false);
    assert_eq!(presence.share(), Share::ranked(3, 1));
    // The store restarted: this instance's word alone again.
    presence.beat(1, 0, true);
    assert_eq!(presence.share(), Share::of(3));
    presence.beat(2, 0, false);
    assert_eq!(presence.share(), Share::ranked(2, 0));
    // A Split reads it at each call.
    let split = Split::presence(MemoryStore::new(), presence.clone());
    assert_eq!(split.share(), Share::ranked(2, 0));
    presence.count(4, 3);
    assert_eq!(split.instances(), 4);
}

/// A fallback starts from what the primary last said of the key, at the
/// secondary's share of it: 18 of 20 used in the primary, then the
/// primary down: a split secondary (half of 20) admits half of the 2
/// left, not 10; a plain secondary admits the 2. A key the primary never
/// saw starts whole.
#[tokio::test]
async fn a_fallback_starts_from_the_primarys_last_answer() {
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_hour(20),
    )]));
    let key = Key::from("k");
    for (split, left) in [(2, 1), (1, 2)] {
        let primary = Outage::default();
        let store = Fallback::new(primary.clone(), Split::fixed(MemoryStore::new(), split));
        for _ in 0..18 {
            let decision = store.check(&policy, &key, 1).resolve().await.unwrap();
            assert!(decision.merged().allowed());
        }
        primary.set_down(true);
        assert_eq!(admitted(&store, &policy, &key).await, left, "split {split}");
        let fresh = Key::from("never seen");
        assert_eq!(admitted(&store, &policy, &fresh).await, 20 / split as usize);
    }
    // Remembering nothing: the secondary starts from what it holds.
    let primary = Outage::default();
    let store = Fallback::new(primary.clone(), MemoryStore::new()).remembering(0);
    for _ in 0..18 {
        store.check(&policy, &key, 1).resolve().await.unwrap();
    }
    primary.set_down(true);
    assert_eq!(admitted(&store, &policy, &key).await, 20);
}

/// What refilled since the primary's last answer counts too: 20 a second
/// spent whole, then at least half a second before the outage: the
/// secondary starts with at least the 10 that came back (none, without
/// the refill), at most the whole 20.
#[tokio::test]
async fn a_fallback_counts_what_refilled_since_the_last_answer() {
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_second(20),
    )]));
    let key = Key::from("k");
    let primary = Outage::default();
    let store = Fallback::new(primary.clone(), MemoryStore::new());
    for _ in 0..20 {
        store.check(&policy, &key, 1).resolve().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    primary.set_down(true);
    let admitted = admitted(&store, &policy, &key).await;
    assert!((10..=20).contains(&admitted), "{admitted}");
}

/// The memory is bounded: remembering one key, the second key answered
/// takes its place, and the first starts from the secondary's own state.
#[tokio::test]
async fn a_fallback_remembers_at_most_its_bound() {
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_hour(20),
    )]));
    let (first, second) = (Key::from("first"), Key::from("second"));
    let primary = Outage::default();
    let store = Fallback::new(primary.clone(), MemoryStore::new()).remembering(1);
    for key in [&first, &second] {
        for _ in 0..18 {
            store.check(&policy, key, 1).resolve().await.unwrap();
        }
    }
    primary.set_down(true);
    assert_eq!(admitted(&store, &policy, &second).await, 2);
    assert_eq!(admitted(&store, &policy, &first).await, 20);
}

/// A reset forgets what the primary last said: a key spent, reset, then
/// the primary down: the secondary starts whole.
#[tokio::test]
async fn a_reset_forgets_the_primarys_last_answer() {
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_hour(20),
    )]));
    let key = Key::from("k");
    let primary = Outage::default();
    let store = Fallback::new(primary.clone(), MemoryStore::new());
    for _ in 0..20 {
        store.check(&policy, &key, 1).resolve().await.unwrap();
    }
    store.reset(&policy, &key).await.unwrap();
    primary.set_down(true);
    assert_eq!(admitted(&store, &policy, &key).await, 20);
}
