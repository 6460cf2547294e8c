//! Promises RedisStore's documentation makes, checked against a real
//! redis-server: one `EVALSHA` per decision whatever the number of limits,
//! keys that live exactly until their limit is whole again, intervals
//! rounded up to whole microseconds (never faster than the quota), and a
//! connect that gives up within its timeout when a server accepts but never
//! answers; and a Cluster whose masters lose their scripts.

mod common;

use common::decide;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate::{Key, NamedLimit, Policy};
use tollgate_core::{Algorithm, Gcra, ManualClock, Quota};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::{RedisCluster, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_is_one_evalsha_whatever_the_number_of_limits() {
    let server = RedisServer::start();
    let store = RedisStore::connect(server.url()).await.unwrap();
    let policy = Arc::new(Policy::new(vec![
        NamedLimit::new("burst", Quota::per_second(100)),
        NamedLimit::new("hourly", Quota::per_hour(1_000)).with_algorithm(Algorithm::SlidingWindow),
        NamedLimit::new("daily", "5000/d".parse().unwrap()).with_algorithm(Algorithm::FixedWindow),
    ]));
    // The first decision loads the script (no such function: the library
    // loaded, and the call sent again with the script whole, as an EVAL);
    // from then on each decision is one round trip.
    decide(&store, &policy, &Key::from_bytes(b"dave"), 1).await;
    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "+OK\r\n");
    for i in 0..25 {
        let key = Key::from_bytes(format!("user-{}", i % 5).as_bytes());
        assert_eq!(decide(&store, &policy, &key, 1).await.each().len(), 3);
    }
    let mut calls: Vec<(String, u64)> = server
        .command_calls()
        .into_iter()
        .filter(|(name, _)| name != "info" && name != "config|resetstat")
        .collect();
    calls.sort();
    // The server counts what the script calls too: per decision, one read
    // of its clock, and one GET and one SET for each limit. Nothing else
    // arrives from the client: no EVAL, no FUNCTION LOAD, no PING.
    let expected = [("fcall", 25), ("get", 75), ("set", 75), ("time", 25)];
    let expected: Vec<(String, u64)> = expected.map(|(n, c)| (n.to_owned(), c)).into();
    assert_eq!(calls, expected);

    // `script_command` is that very command: replayed by hand, it decides.
    let command = store.script_command(&policy, &Key::from_bytes(b"user-0"), 1);
    assert_eq!(command[0], "FCALL");
    let args: Vec<&str> = command.iter().map(String::as_str).collect();
    let reply = server.command(&args);
    // Seven integers for each of the three limits, and the server's time.
    assert!(reply.starts_with("*22\r\n:1\r\n"), "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_lives_exactly_until_its_state_is_at_rest() {
    let server = RedisServer::start();
    // 15 s into a minute, so that windows end at different times from the
    // intervals.
    let clock = ManualClock::new(1_700_000_040_000_000_000 + 15_000_000_000);
    let store = RedisStore::builder(server.url())
        .test_clock(clock.clone())
        .connect()
        .await
        .unwrap();
    let quota: Quota = "10/min".parse().unwrap();
    let limits: Vec<NamedLimit> = Algorithm::ALL
        .iter()
        .map(|&a| NamedLimit::new(format!("l-{a}"), quota).with_algorithm(a))
        .collect();
    let policy = Arc::new(Policy::new(limits));
    let key = Key::from_bytes(b"erin");
    for _ in 0..3 {
        decide(&store, &policy, &key, 1).await;
    }
    let verdict = decide(&store, &policy, &key, 1).await;
    let names = store.redis_keys(&policy, &key);
    for ((name, decision), limit) in names.iter().zip(verdict.each()).zip(policy.limits()) {
        // The scripts set `PX` to the decision's reset time (plus, for the
        // leaky bucket, the slack until its queue is empty) in whole
        // milliseconds, plus one: the key outlives its state by under 1 ms.
        let rest = decision.reset_after() + limit.limiter().rest_slack();
        let expected = u64::try_from(rest.as_millis()).unwrap() + 1;
        let ttl = server.command(&["PTTL", name]);
        let ttl: u64 = ttl.trim().trim_start_matches(':').parse().unwrap();
        assert!(
            ttl <= expected && ttl + 1_000 > expected,
            "{}: ttl {ttl} ms, reset after {expected} ms",
            limit.name()
        );
    }
    // What "whole again" is for each algorithm, 4 requests into a
    // 10-per-minute limit, 15 s into the minute: GCRA and the token bucket
    // after 4 intervals; the interval token bucket at the minute's end
    // (all tokens back at once); the leaky bucket once the next wait is under one
    // interval (1 µs, the scripts' unit, after 3 intervals); the fixed window
    // at its end; the log when its newest entry leaves; the sliding window
    // once the 4, weighted in the next window, fall to nothing (1 µs past
    // three quarters of it); the sub-window counters once the newest
    // sub-window, [15 s, 16 s), has left the minute (61 s: it counts whole).
    let reset_secs: Vec<f64> = verdict
        .each()
        .iter()
        .map(|d| d.reset_after().as_secs_f64())
        .collect();
    assert_eq!(
        reset_secs,
        [24.0, 24.0, 45.0, 18.000001, 45.0, 60.0, 90.000001, 61.0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intervals_round_up_to_whole_microseconds_never_faster() {
    let server = RedisServer::start();
    let clock = ManualClock::new(1_700_000_000_000_000_000);
    let store = RedisStore::builder(server.url())
        .test_clock(clock.clone())
        .connect()
        .await
        .unwrap();
    // 3/s: one request per 333,333,334 ns in the core, per 333,334 µs in
    // the scripts.
    let quota = Quota::per_second(3).with_burst(1).unwrap();
    let policy = Arc::new(Policy::new(vec![NamedLimit::new("api", quota)]));
    let key = Key::from_bytes(b"frank");
    assert!(decide(&store, &policy, &key, 1).await.merged().allowed());
    let denied = decide(&store, &policy, &key, 1).await.merged();
    assert!(!denied.allowed());
    assert_eq!(denied.retry_after(), Duration::from_micros(333_334));
    assert_eq!(Gcra::new(quota).interval_nanos(), 333_333_334);
    // Where the core would already admit again, Redis does not yet; one
    // microsecond later it does.
    clock.advance(Duration::from_nanos(333_333_334));
    assert!(!decide(&store, &policy, &key, 1).await.merged().allowed());
    clock.advance(Duration::from_nanos(666));
    assert!(decide(&store, &policy, &key, 1).await.merged().allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_fails_the_connect_within_its_timeout() {
    // A listener that is never accepted from: the kernel completes the
    // handshake, and nothing ever answers what the client sends.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    let started = Instant::now();
    let connect = RedisStore::builder(&url)
        .connect_timeout(Duration::from_millis(300))
        .connect();
    let result = tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .expect("connect gives up by itself");
    let error = result.expect_err("nobody answered");
    assert!(!error.is_config(), "{error}");
    // It waited for the timeout (the server was reached, and silent), and
    // gave up well before the 1 s default: the configured 300 ms applied.
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_millis(900),
        "gave up after {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_master_loads_the_script_when_it_lacks_it() {
    for functions in [true, false] {
        every_master_loads_it(functions).await;
    }
}

/// Every master, having forgotten the store's functions (`functions`) or
/// scripts, as after a failover to a replica that never ran them, loads
/// them again on the next call that reaches it.
async fn every_master_loads_it(functions: bool) {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::builder(cluster.url())
        .functions(functions)
        .connect()
        .await
        .unwrap();
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_minute(2),
    )]));
    let keys: Vec<Key> = (0..12)
        .map(|i| Key::from_bytes(format!("user-{i}").as_bytes()))
        .collect();
    let hash = store.script_hash(&policy);
    let library = format!("tollgate_{hash}");
    for round in 0..2 {
        for node in cluster.nodes() {
            let flush = if functions { "FUNCTION" } else { "SCRIPT" };
            assert_eq!(node.command(&[flush, "FLUSH"]), "+OK\r\n");
        }
        for key in &keys {
            let verdict = decide(&store, &policy, key, 1).await;
            assert!(verdict.merged().allowed(), "round {round}");
            // Charged once: the key's second request of two.
            assert_eq!(verdict.merged().remaining(), 1 - round, "round {round}");
        }
        for node in cluster.nodes() {
            if functions {
                assert!(node.has_library(&library), "every master has the library");
            } else {
                assert_eq!(
                    node.command(&["SCRIPT", "EXISTS", &hash]),
                    "*1\r\n:1\r\n",
                    "every master ran the script"
                );
            }
        }
    }
    let masters_used = cluster
        .nodes()
        .iter()
        .filter(|node| node.command(&["DBSIZE"]) != ":0\r\n")
        .count();
    assert_eq!(masters_used, 3, "the keys spread over every master");
    // Nothing was lost on the way: each key's third request is refused.
    for key in &keys {
        assert!(!decide(&store, &policy, key, 1).await.merged().allowed());
    }
}
