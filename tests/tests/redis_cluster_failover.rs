//! A Redis Cluster whose topology changes under load: a manual failover
//! (`CLUSTER FAILOVER` on a replica), and a master killed outright (the
//! cluster promotes its replica). Six nodes: three masters, a replica each.
//! Every key must be decided by Redis again within the documented bounds
//! (a manual failover: 10 s after the replica takes over; a killed master:
//! the cluster's own detection, `cluster-node-timeout` (5 s here), plus
//! 10 s), and keep being decided.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate::{Key, NamedLimit, Policy, Store, StoreCheck};
use tollgate_core::Quota;
use tollgate_redis::RedisStore;
use tollgate_tests::redis::RedisCluster;

/// How soon every key must be decided again after a topology change.
const RECOVERY: Duration = Duration::from_secs(10);

/// Keys spread over every master.
fn keys() -> Vec<Key> {
    (0..60)
        .map(|i| Key::from_bytes(format!("user-{i}").as_bytes()))
        .collect()
}

/// Decides one request for each key; how many failed (errors or no answer
/// within 500 ms, which the layer would answer with its store-error
/// behaviour).
async fn failures(store: &RedisStore, policy: &Arc<Policy>, keys: &[Key]) -> usize {
    let mut failed = 0;
    for key in keys {
        let ok = match store.check(policy, key, 1) {
            StoreCheck::Pending(future) => {
                matches!(
                    tokio::time::timeout(Duration::from_millis(500), future).await,
                    Ok(Ok(_))
                )
            }
            StoreCheck::Ready(result) => result.is_ok(),
        };
        failed += usize::from(!ok);
    }
    failed
}

/// Polls until a round with no failure; how long that took.
async fn time_until_all_decided(
    store: &RedisStore,
    policy: &Arc<Policy>,
    keys: &[Key],
) -> Duration {
    let started = Instant::now();
    loop {
        if failures(store, policy, keys).await == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < RECOVERY * 3,
            "some keys still fail after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn setup() -> (RedisCluster, RedisStore, Arc<Policy>) {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let store = RedisStore::builder(cluster.url())
        .reconnect_max_delay(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect to the cluster");
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_second(1_000),
    )]));
    (cluster, store, policy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_recovers_on_its_own() {
    let (cluster, store, policy) = setup().await;
    let keys = keys();
    assert_eq!(failures(&store, &policy, &keys).await, 0);
    let replica = cluster.replicas()[0];
    // The replica takes over; the old master becomes its replica and
    // answers the script READONLY until the store reads the slots again. A
    // cluster just made may not take the first request (the nodes are still
    // agreeing on their epochs): ask again every 2 s.
    let started = Instant::now();
    let mut asked: Option<Instant> = None;
    while !cluster.nodes()[replica]
        .command(&["INFO", "replication"])
        .contains("role:master")
    {
        if asked.is_none_or(|at| at.elapsed() > Duration::from_secs(2)) {
            let reply = cluster.nodes()[replica].command(&["CLUSTER", "FAILOVER"]);
            assert!(reply.starts_with("+OK"), "{reply}");
            asked = Some(Instant::now());
        }
        assert!(
            started.elapsed() < RECOVERY * 2,
            "the failover never happened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recovered = time_until_all_decided(&store, &policy, &keys).await;
    assert!(
        recovered < RECOVERY,
        "recovered {recovered:?} after the failover"
    );
    // And stays recovered.
    for _ in 0..5 {
        assert_eq!(failures(&store, &policy, &keys).await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_and_decisions_resume() {
    let (mut cluster, store, policy) = setup().await;
    let keys = keys();
    assert_eq!(failures(&store, &policy, &keys).await, 0);
    let master = (0..cluster.nodes().len())
        .find(|i| !cluster.replicas().contains(i))
        .expect("a master");
    cluster.kill(master);
    // Its replica is promoted once the others deem it failed (the harness
    // sets cluster-node-timeout to 5 s).
    let recovered = time_until_all_decided(&store, &policy, &keys).await;
    let bound = Duration::from_secs(5) + RECOVERY;
    assert!(recovered < bound, "recovered after {recovered:?}");
    for _ in 0..5 {
        assert_eq!(failures(&store, &policy, &keys).await, 0);
    }
}
