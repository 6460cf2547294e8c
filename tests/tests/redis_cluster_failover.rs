//! A Redis Cluster whose topology changes under load, through a layer that
//! fails closed: a manual failover (`CLUSTER FAILOVER` on a replica), a
//! master killed outright (the cluster promotes its replica), a master
//! restarted, and slots resharded between masters. Six nodes for the
//! failovers (three masters, a replica each), three for the others.
//!
//! Each test asserts the status mix (only 200 and 429 before and after the
//! fault; 503, the fail-closed answer, only while it lasts) and the
//! recovery time against the documented bounds: 10 s after a manual
//! failover's replica takes over; `cluster-node-timeout` (5 s here) plus
//! 10 s after a master dies; 10 s after a restarted master answers.
//! Resharding must not interrupt decisions at all, nor lose a count.

use http::{Request, StatusCode};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::{HeaderKey, OnStoreError, RateLimitLayer};
use tollgate_core::Quota;
use tollgate_redis::RedisStore;
use tollgate_tests::app::{App, behind, status};
use tollgate_tests::redis::RedisCluster;

/// How soon every key must be decided again after a topology change.
const RECOVERY: Duration = Duration::from_secs(10);

/// Users whose keys spread over every master.
const USERS: usize = 60;

/// An app limiting each `x-user` to `quota` on `cluster`, failing closed.
async fn app(cluster: &RedisCluster, quota: &str) -> App {
    let store = RedisStore::builder(cluster.url())
        .reconnect_max_delay(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect to the cluster");
    let layer = RateLimitLayer::builder()
        .quota("api", quota.parse::<Quota>().unwrap())
        .key(HeaderKey::new("x-user"))
        .store(store)
        .on_store_error(OnStoreError::Closed)
        .build();
    behind(layer)
}

/// One request for each user: how many got 503 (any other status but 200
/// and 429 fails the test).
async fn unavailable(app: &App) -> usize {
    let mut count = 0;
    for user in 0..USERS {
        let request = Request::builder()
            .header("x-user", format!("user-{user}"))
            .body(())
            .unwrap();
        match status(&mut app.clone(), request).await {
            StatusCode::OK | StatusCode::TOO_MANY_REQUESTS => {}
            StatusCode::SERVICE_UNAVAILABLE => count += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    count
}

/// Polls until a round without 503; how long that took.
async fn time_until_all_decided(app: &App) -> Duration {
    let started = Instant::now();
    while unavailable(app).await > 0 {
        assert!(
            started.elapsed() < RECOVERY * 3,
            "some keys still fail after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

/// Five more rounds without a 503.
async fn assert_stays_recovered(app: &App) {
    for _ in 0..5 {
        assert_eq!(unavailable(app).await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_recovers_on_its_own() {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let app = app(&cluster, "1000/s").await;
    assert_eq!(unavailable(&app).await, 0);
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
    let recovered = time_until_all_decided(&app).await;
    assert!(
        recovered < RECOVERY,
        "recovered {recovered:?} after the failover"
    );
    assert_stays_recovered(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_and_decisions_resume() {
    let mut cluster = RedisCluster::start_with_replicas(3, 1);
    let app = app(&cluster, "1000/s").await;
    assert_eq!(unavailable(&app).await, 0);
    let master = (0..cluster.nodes().len())
        .find(|i| !cluster.replicas().contains(i))
        .expect("a master");
    cluster.kill(master);
    // Its replica is promoted once the others deem it failed (the harness
    // sets cluster-node-timeout to 5 s).
    let recovered = time_until_all_decided(&app).await;
    let bound = Duration::from_secs(5) + RECOVERY;
    assert!(recovered < bound, "recovered after {recovered:?}");
    assert_stays_recovered(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_master_is_decided_on_again() {
    let mut cluster = RedisCluster::start(3);
    let app = app(&cluster, "1000/s").await;
    assert_eq!(unavailable(&app).await, 0);
    // Down: its keys get 503 (fail closed), the others are decided.
    cluster.kill(0);
    let down = unavailable(&app).await;
    assert!(down > 0 && down < USERS, "{down} of {USERS} unavailable");
    // Back on the same port, empty but with its slots (nodes.conf): its
    // keys start afresh, and are decided again.
    cluster.restart(0);
    let recovered = time_until_all_decided(&app).await;
    assert!(recovered < RECOVERY, "recovered after {recovered:?}");
    assert_stays_recovered(&app).await;
}

/// Moves 2,000 slots from the first master to the second with
/// `redis-cli --cluster reshard` (MIGRATE, ASK, MOVED) while requests
/// keep coming: no request fails, and no count is lost or doubled, so
/// each user is admitted exactly its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_under_load_keeps_every_count() {
    let cluster = RedisCluster::start(3);
    // GCRA at 30 an hour: a unit comes back every 2 minutes, so none comes
    // back during the test and every user is admitted exactly 30.
    let app = app(&cluster, "30/h").await;
    let ids: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| {
            let reply = n.command(&["CLUSTER", "MYID"]);
            reply
                .lines()
                .nth(1)
                .expect("a bulk string")
                .trim()
                .to_owned()
        })
        .collect();
    let from = format!("127.0.0.1:{}", cluster.nodes()[0].port());
    let reshard = std::thread::spawn({
        let (source, target) = (ids[0].clone(), ids[1].clone());
        move || {
            Command::new("redis-cli")
                .args(["--cluster", "reshard", &from])
                .args(["--cluster-from", &source, "--cluster-to", &target])
                .args(["--cluster-slots", "2000", "--cluster-yes"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("run redis-cli")
        }
    });
    let mut admitted = vec![0usize; USERS];
    let started = Instant::now();
    let mut rounds = 0;
    while !reshard.is_finished() || rounds < 40 {
        for (user, count) in admitted.iter_mut().enumerate() {
            let request = Request::builder()
                .header("x-user", format!("user-{user}"))
                .body(())
                .unwrap();
            match status(&mut app.clone(), request).await {
                StatusCode::OK => *count += 1,
                StatusCode::TOO_MANY_REQUESTS => {}
                other => panic!("{other} during resharding (round {rounds})"),
            }
        }
        rounds += 1;
        assert!(started.elapsed() < Duration::from_secs(100), "too slow");
    }
    assert!(reshard.join().unwrap().success(), "resharding failed");
    assert!(started.elapsed() < Duration::from_secs(110));
    assert_eq!(admitted, vec![30; USERS]);
}
