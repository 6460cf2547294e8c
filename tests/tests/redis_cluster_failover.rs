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
use tollgate_tests::redis::{RedisCluster, cli_program};

/// How soon every key must be decided again after a topology change.
const RECOVERY: Duration = Duration::from_secs(10);

/// Users whose keys spread over every master.
const USERS: usize = 60;

/// An app limiting each `x-user` to `quota` on `cluster`, failing closed.
async fn app(cluster: &RedisCluster, quota: &str) -> App {
    app_with_timeout(cluster, quota, tollgate::settings::DEFAULT_STORE_TIMEOUT).await
}

/// [`app`] whose layer waits `timeout` for the store.
async fn app_with_timeout(cluster: &RedisCluster, quota: &str, timeout: Duration) -> App {
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
        .store_timeout(timeout)
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
/// `redis-cli --cluster reshard` (MIGRATE, ASK, MOVED; or the selected
/// server's own cli, see `tollgate_tests::redis`) while requests
/// keep coming: no request fails, and no count is lost or doubled, so
/// each user is admitted exactly its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_under_load_keeps_every_count() {
    let cluster = RedisCluster::start(3);
    // GCRA at 30 an hour: a unit comes back every 2 minutes, so none comes
    // back during the test and every user is admitted exactly 30. The
    // layer waits 5 s for a reply: what is judged is that resharding's
    // redirections lose or fail no call, not how fast a loaded machine
    // answers while slots migrate (past the default 100 ms, a 503).
    let app = app_with_timeout(&cluster, "30/h", Duration::from_secs(5)).await;
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
            Command::new(cli_program())
                .args(["--cluster", "reshard", &from])
                .args(["--cluster-from", &source, "--cluster-to", &target])
                .args(["--cluster-slots", "2000", "--cluster-yes"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap_or_else(|e| panic!("run {} ({e})", cli_program()))
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

/// A one-node Cluster reached through a proxy that, once, forwards a
/// decision's call to the server and then drops the connection instead of
/// the reply: the script ran and charged, and the client cannot know. The
/// store must not send that call again (it would charge twice): the
/// request fails (and gets the store-error behaviour), and the key holds
/// exactly one charge for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_reply_was_lost_is_never_sent_again() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tollgate::{Key, NamedLimit, Policy, Store, StoreReply};

    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = proxy.local_addr().unwrap().port();
    let server = tollgate_tests::redis::RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-announce-port",
        &proxy_port.to_string(),
    ]);
    server.command(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    let started = Instant::now();
    while !server
        .command(&["CLUSTER", "INFO"])
        .contains("cluster_state:ok")
    {
        assert!(
            started.elapsed() < RECOVERY,
            "the one-node cluster never came up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The proxy: every connection forwarded both ways; once armed, the
    // first reply to a call of the script is swallowed and both sides
    // closed.
    let armed = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let real = server.port();
    {
        let (armed, dropped) = (armed.clone(), dropped.clone());
        std::thread::spawn(move || {
            for client in proxy.incoming() {
                let Ok(client) = client else { return };
                let Ok(upstream) = TcpStream::connect(("127.0.0.1", real)) else {
                    return;
                };
                let (mut c_read, mut u_write) =
                    (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                let (mut u_read, mut c_write) = (upstream, client);
                let sent = Arc::new(AtomicBool::new(false));
                let sent_up = sent.clone();
                let armed_up = armed.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = c_read.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        // Marked before it is forwarded: its reply cannot
                        // come back before the mark.
                        let call = [&b"FCALL"[..], b"EVAL"]
                            .iter()
                            .any(|word| buf[..n].windows(word.len()).any(|w| w == *word));
                        if call && armed_up.swap(false, Ordering::SeqCst) {
                            sent_up.store(true, Ordering::SeqCst);
                        }
                        if u_write.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
                let dropped = dropped.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = u_read.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        if sent.swap(false, Ordering::SeqCst) {
                            // The reply to the armed call: lost.
                            dropped.store(true, Ordering::SeqCst);
                            let _ = c_write.shutdown(std::net::Shutdown::Both);
                            let _ = u_read.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                        if c_write.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
    }
    let store = RedisStore::connect(format!("redis+cluster://127.0.0.1:{proxy_port}"))
        .await
        .expect("connect through the proxy");
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_hour(10),
    )]));
    let key = Key::from_bytes(b"victim");
    let decide = || async {
        match store.check(&policy, &key, 1) {
            StoreReply::Pending(future) => future.await,
            StoreReply::Ready(result) => result,
        }
    };
    // Warm: the script is loaded, the connection made (one charge).
    assert_eq!(decide().await.expect("decided").merged().remaining(), 9);
    armed.store(true, Ordering::SeqCst);
    let lost = decide().await;
    assert!(
        dropped.load(Ordering::SeqCst),
        "the proxy dropped the reply"
    );
    assert!(
        lost.is_err(),
        "a lost reply is a failure, not a retried call: {lost:?}"
    );
    // The lost call charged once, and only once: 10 − 1 − 1 − this one.
    let mut remaining = None;
    for _ in 0..50 {
        if let Ok(verdict) = decide().await {
            remaining = Some(verdict.merged().remaining());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(remaining, Some(7), "charged exactly once for the lost call");
}

/// A master restarted between two rounds of requests (killed, started
/// again on its port, answering before the next round): the round after
/// it is decided in full, none failing on the connection the restart
/// closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_round_after_a_quick_restart_is_decided() {
    let mut cluster = RedisCluster::start(3);
    let app = app(&cluster, "1000/s").await;
    assert_eq!(unavailable(&app).await, 0);
    for node in 0..3 {
        cluster.restart(node);
        cluster.wait_until_ok();
        assert_eq!(unavailable(&app).await, 0, "after node {node} restarted");
    }
}
