//! `redis+sentinel://`: a real master, a replica and three sentinels on
//! loopback. The master is killed mid-run; the sentinels promote the
//! replica; the store finds the new master by itself, within the
//! documented bound (the sentinels' `down-after-milliseconds` plus 10 s),
//! and meanwhile the layer's store-error behaviour (here, fail closed:
//! 503) answers.

use http::{Request, StatusCode};
use std::time::{Duration, Instant};
use tollgate::{HeaderKey, OnStoreError, RateLimitLayer};
use tollgate_core::Quota;
use tollgate_redis::RedisStore;
use tollgate_tests::app::{App, behind, status};
use tollgate_tests::sentinel::{DOWN_AFTER, SentinelSetup};

/// How long after the sentinels deem the master down every request must
/// be decided again (the promotion itself takes a second or two).
const RECOVERY: Duration = Duration::from_secs(10);

/// Five requests a minute for each `x-user`, failing closed.
async fn app(setup: &SentinelSetup) -> App {
    let store = RedisStore::builder(setup.url())
        .connect()
        .await
        .expect("connect through the sentinels");
    let layer = RateLimitLayer::builder()
        .quota("api", "5/min".parse::<Quota>().unwrap())
        .key(HeaderKey::new("x-user"))
        .store(store)
        .on_store_error(OnStoreError::Closed)
        .store_timeout(Duration::from_secs(2))
        .build();
    behind(layer)
}

async fn request(app: &App, user: &str) -> StatusCode {
    let request = Request::builder().header("x-user", user).body(()).unwrap();
    status(&mut app.clone(), request).await
}

/// Six requests of `user`: five pass, the sixth is refused.
async fn assert_limited(app: &App, user: &str) {
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(request(app, user).await);
    }
    let mut expected = vec![StatusCode::OK; 5];
    expected.push(StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(statuses, expected, "{user}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiting_resumes_on_the_promoted_replica_after_the_master_dies() {
    let mut setup = SentinelSetup::start("tollgate-test");
    let app = app(&setup).await;
    assert_eq!(setup.master_port(), Some(setup.master().port()));
    assert_limited(&app, "before").await;
    let calls_before = setup.master().script_calls();
    assert!(calls_before >= 6);

    setup.kill_master();
    let killed = Instant::now();
    // One request a round, each for a new user (so none is refused by the
    // limit): 503 while no master answers, 200 once one does again.
    let mut unavailable = 0;
    let mut round = 0;
    loop {
        round += 1;
        match request(&app, &format!("probe-{round}")).await {
            StatusCode::OK => break,
            StatusCode::SERVICE_UNAVAILABLE => unavailable += 1,
            other => panic!("unexpected status {other} during the failover"),
        }
        assert!(
            killed.elapsed() < (DOWN_AFTER + RECOVERY) * 3,
            "no decision {:?} after the master died",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recovered = killed.elapsed();
    assert!(
        recovered < DOWN_AFTER + RECOVERY,
        "decisions resumed {recovered:?} after the master died"
    );
    assert!(unavailable > 0, "no request saw the outage");
    eprintln!(
        "decisions resumed {recovered:?} after the master died ({unavailable} requests got 503)"
    );

    // The sentinels promoted the replica, and the store decides there:
    // limits hold exactly on the new master.
    assert_eq!(setup.master_port(), Some(setup.replica().port()));
    assert!(
        setup
            .replica()
            .command(&["INFO", "replication"])
            .contains("role:master")
    );
    assert_limited(&app, "after").await;
    assert!(setup.replica().script_calls() >= 6);
    // And keep holding: no 503 in a hundred more requests.
    for i in 0..100 {
        assert_eq!(request(&app, &format!("steady-{i}")).await, StatusCode::OK);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_with_the_master_alive_is_followed() {
    let setup = SentinelSetup::start("tollgate-switch");
    let app = app(&setup).await;
    assert_limited(&app, "before").await;
    // The sentinels promote the replica while the old master still runs
    // (and, until they reconfigure it seconds later, still accepts writes
    // that its demotion will discard): the store must move on its own.
    let reply = setup.sentinel_command(&["SENTINEL", "FAILOVER", "tollgate-switch"]);
    assert!(reply.starts_with("+OK"), "{reply}");
    let started = Instant::now();
    while setup.master_port() != Some(setup.replica().port()) {
        assert!(started.elapsed() < RECOVERY, "the sentinels never switched");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let switched = Instant::now();
    let mut round = 0;
    loop {
        round += 1;
        let calls = setup.replica().script_calls();
        match request(&app, &format!("probe-{round}")).await {
            StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE => {}
            other => panic!("unexpected status {other} during the failover"),
        }
        if setup.replica().script_calls() > calls {
            break;
        }
        // The store asks the sentinels every second.
        assert!(
            switched.elapsed() < Duration::from_secs(3),
            "decisions still went to the old master {:?} after the switch",
            switched.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "decisions moved to the new master {:?} after the sentinels switched",
        switched.elapsed()
    );
    let old_calls = setup.master().script_calls();
    let calls = setup.replica().script_calls();
    assert_limited(&app, "after").await;
    assert!(setup.replica().script_calls() >= calls + 6);
    assert_eq!(setup.master().script_calls(), old_calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_credentials_go_to_the_master_and_the_sentinel_ones_to_the_sentinels() {
    // ACL users beside the default one (which the harness keeps using).
    let setup = SentinelSetup::start_with(
        "tollgate-auth",
        &["--user", "app", "on", ">app-secret", "~*", "&*", "+@all"],
        "user watcher on >watch-secret +@all",
    );
    let url = setup
        .url()
        .replace("redis+sentinel://", "redis+sentinel://app:app-secret@");
    let store = RedisStore::builder(&url)
        .sentinel_username("watcher")
        .sentinel_password("watch-secret")
        .connect()
        .await
        .expect("connect with both credentials");
    let master_clients = setup.master().command(&["CLIENT", "LIST"]);
    assert!(master_clients.contains("user=app"), "{master_clients}");
    drop(store);
    // A wrong password for the sentinels, or for the master, is refused:
    // each password reaches the servers it is for.
    let wrong_sentinel = RedisStore::builder(&url)
        .sentinel_username("watcher")
        .sentinel_password("wrong")
        .connect()
        .await;
    assert!(wrong_sentinel.is_err());
    let wrong_master = url.replace("app-secret", "wrong");
    let wrong_master = RedisStore::builder(&wrong_master)
        .sentinel_username("watcher")
        .sentinel_password("watch-secret")
        .connect()
        .await;
    assert!(wrong_master.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_the_sentinels_do_not_know_is_an_error_at_connect() {
    let setup = SentinelSetup::start("tollgate-known");
    let url = setup.url().replace("/tollgate-known", "/tollgate-unknown");
    let error = RedisStore::builder(url)
        .connect()
        .await
        .expect_err("connected to a master nobody watches");
    assert!(error.to_string().contains("tollgate-unknown"), "{error}");
}

/// The master restarted between two requests (killed and started again on
/// its port, quicker than the sentinels' down-after): the first request
/// after it is decided there, on a fresh connection, not failed on the
/// connection the restart closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_after_a_master_restart_is_decided() {
    let mut setup = SentinelSetup::start("tollgate-restart");
    let app = app(&setup).await;
    for round in 0..3 {
        let user = format!("user-{round}");
        assert_eq!(request(&app, &user).await, StatusCode::OK, "round {round}");
        setup.restart_master();
        // Restarted empty: the user's count starts again.
        assert_limited(&app, &user).await;
    }
}
