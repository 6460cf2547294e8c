//! Late answers never stay charged (issue 47), over real Redis: a login
//! limiter (`charge_when` 401, 3 wrong passwords a minute) whose store is
//! reached through a proxy that holds each reply 0 or 30–40 ms at random,
//! with a store timeout of 12 ms, so that many checks are answered by
//! failing open while the store did charge. Each user's five correct
//! passwords through that instance leave nothing charged: three wrong ones
//! through a second instance connected directly are all answered 401.
//! For the plain store and the compositions a user would put in front of
//! it.

mod common;

use common::{login_app, successes_never_stay_charged, successes_never_stay_charged_after};
use std::time::Duration;
use tollgate::MemoryStore;
use tollgate::store::{BlockCache, Fallback, Timeout};
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::proxy::{Jitter, JitterProxy};
use tollgate_tests::redis::RedisServer;

const STORE_TIMEOUT: Duration = Duration::from_millis(12);
const USERS: usize = 8;

async fn redis(url: &str, prefix: &str) -> RedisStore {
    RedisStore::builder(url)
        .prefix(prefix)
        .connect()
        .await
        .unwrap()
}

/// The server, the proxy in front of it (seeded by `seed`), and their URLs.
fn server_and_proxy(seed: u64) -> (RedisServer, JitterProxy) {
    let server = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy = JitterProxy::start(upstream, Jitter::HALF_HELD_30_40_MS, seed);
    (server, proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_from_redis_are_given_back() {
    for seed in [1, 2, 3] {
        let (server, proxy) = server_and_proxy(seed);
        let slow_url = format!("redis://{}", proxy.addr());
        let mut slow = login_app(redis(&slow_url, "late").await, STORE_TIMEOUT);
        let mut direct = login_app(redis(&server.url(), "late").await, Duration::from_secs(2));
        successes_never_stay_charged(&mut slow, &mut direct, USERS, &format!("redis-{seed}")).await;
        assert!(proxy.held() > 0, "the proxy held no reply back");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_through_wrappers_are_given_back() {
    let (server, proxy) = server_and_proxy(7);
    let slow_url = format!("redis://{}", proxy.addr());
    // A Timeout under a Fallback: the memory store decides when Redis is
    // late, and Redis's late admission goes back to Redis.
    let fallback = Fallback::new(
        Timeout::new(redis(&slow_url, "late-fb").await, STORE_TIMEOUT),
        MemoryStore::new(),
    );
    let mut slow = login_app(fallback, Duration::from_millis(500));
    let mut direct = login_app(
        redis(&server.url(), "late-fb").await,
        Duration::from_secs(2),
    );
    successes_never_stay_charged(&mut slow, &mut direct, USERS, "fallback").await;

    let cache = BlockCache::new(redis(&slow_url, "late-bc").await);
    let mut slow = login_app(cache, STORE_TIMEOUT);
    let mut direct = login_app(
        redis(&server.url(), "late-bc").await,
        Duration::from_secs(2),
    );
    successes_never_stay_charged(&mut slow, &mut direct, USERS, "block-cache").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_from_local_first_exact_are_given_back() {
    let (server, proxy) = server_and_proxy(11);
    let slow_url = format!("redis://{}", proxy.addr());
    let exact = |store| LocalFirst::builder(store, LocalMode::Exact).build();
    let mut slow = login_app(exact(redis(&slow_url, "late-lf").await), STORE_TIMEOUT);
    let mut direct = login_app(
        exact(redis(&server.url(), "late-lf").await),
        Duration::from_secs(2),
    );
    successes_never_stay_charged(&mut slow, &mut direct, USERS, "local-first").await;
}

/// A Cluster whose nodes announce proxies in front of them
/// (`cluster-announce-port`), so that the client reaches every node
/// through one: the same late replies on every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_from_a_redis_cluster_are_given_back() {
    use tollgate_tests::redis::RedisCluster;
    let cluster = RedisCluster::start(3);
    let proxies: Vec<JitterProxy> = cluster
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let upstream = format!("127.0.0.1:{}", node.port()).parse().unwrap();
            let proxy = JitterProxy::start(upstream, Jitter::HALF_HELD_30_40_MS, 21 + i as u64);
            let port = proxy.addr().port().to_string();
            node.command(&["CONFIG", "SET", "cluster-announce-port", &port]);
            proxy
        })
        .collect();
    // Every node names every proxy once the news has gone round.
    let ports: Vec<String> = proxies
        .iter()
        .map(|p| p.addr().port().to_string())
        .collect();
    let started = std::time::Instant::now();
    while !cluster.nodes().iter().all(|node| {
        let slots = node.command(&["CLUSTER", "SLOTS"]);
        ports.iter().all(|port| slots.contains(port.as_str()))
    }) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the nodes never announced the proxies"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = format!(
        "redis+cluster://{}",
        proxies
            .iter()
            .map(|p| p.addr().to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut slow = login_app(redis(&url, "late-cl").await, STORE_TIMEOUT);
    // Through the proxies too (the nodes announce them), but waited for.
    let mut patient = login_app(redis(&url, "late-cl").await, Duration::from_secs(2));
    successes_never_stay_charged(&mut slow, &mut patient, USERS, "cluster").await;
    assert!(
        proxies.iter().any(|p| p.held() > 0),
        "no reply was held back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_through_a_penalty_box_and_local_first_periodic_are_given_back() {
    use tollgate::store::{Penalty, PenaltyBox};
    let (server, proxy) = server_and_proxy(13);
    let slow_url = format!("redis://{}", proxy.addr());
    let penalty = || Penalty::new(3, Duration::from_secs(60), Duration::from_secs(60));
    let boxed = PenaltyBox::new(redis(&slow_url, "late-pb").await, penalty());
    let mut slow = login_app(boxed, STORE_TIMEOUT);
    let direct = PenaltyBox::new(redis(&server.url(), "late-pb").await, penalty());
    let mut direct = login_app(direct, Duration::from_secs(2));
    successes_never_stay_charged(&mut slow, &mut direct, USERS, "penalty-box").await;

    let periodic = |store| LocalFirst::builder(store, LocalMode::periodic()).build();
    let mut slow = login_app(periodic(redis(&slow_url, "late-lp").await), STORE_TIMEOUT);
    let mut direct = login_app(
        periodic(redis(&server.url(), "late-lp").await),
        Duration::from_secs(2),
    );
    // Periodic mode reports what an instance admitted and gave back at its
    // next sync (every 100 ms): the other instance sees a give-back within
    // an interval, its documented lag; 2 s leaves room for the proxy and a
    // loaded machine.
    let lag = Duration::from_secs(2);
    successes_never_stay_charged_after(&mut slow, &mut direct, USERS, "local-first periodic", lag)
        .await;
}
