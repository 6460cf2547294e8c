//! The `server` playground's `--in-flight` flags and its `x-hold-ms`
//! header, checked against the built binary as `server.rs` checks the
//! others: each test starts it on `127.0.0.1:0`, reads the address it
//! prints, and sends plain HTTP/1.1 requests over loopback, one
//! connection per request. Keys differ by an `x-key` header.

mod playground;

use playground::{Response, STEP, Server, request, run_to_exit, try_request};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

impl Server {
    /// `GET /` with `headers`.
    fn get(&self, headers: &[(&str, &str)]) -> Response {
        request(&self.addr, "/", headers)
    }

    /// `GET /` with `headers` on a thread of its own; the response when it
    /// comes (`None` if the connection broke: the server died).
    fn get_in_background(&self, headers: &[(&str, &str)]) -> JoinHandle<Option<Response>> {
        let addr = self.addr.clone();
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        std::thread::spawn(move || {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            try_request(&addr, "/", &headers)
        })
    }

    /// Polls `GET /` with `headers` every 20 ms until it is answered
    /// `status`; how long that took. Fails after `STEP`.
    fn until_status(&self, status: u16, headers: &[(&str, &str)]) -> (Duration, Response) {
        let started = Instant::now();
        loop {
            let response = self.get(headers);
            if response.status == status {
                return (started.elapsed(), response);
            }
            assert!(
                started.elapsed() < STEP,
                "never answered {status}; last {response:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn x_hold_ms_holds_the_request_and_a_bad_value_is_a_400_at_once() {
    let server = Server::start(&["--limit", "api=1000/s"]);
    let started = Instant::now();
    let held = server.get(&[("x-hold-ms", "300")]);
    assert_eq!(held.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(server.get(&[]).status, 200);
    for bad in ["abc", "-1", "1.5", "60001", "99999999999999999999"] {
        let started = Instant::now();
        let response = server.get(&[("x-hold-ms", bad)]);
        assert_eq!(response.status, 400, "x-hold-ms: {bad}");
        assert!(
            response.body.contains("x-hold-ms must be a whole number"),
            "{}",
            response.body
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // The cap itself is accepted (checked without waiting it out: with a
    // bad x-status the answer is a 400 at once, so 60000 passed).
    let response = server.get(&[("x-hold-ms", "60000"), ("x-status", "nope")]);
    assert!(response.body.contains("x-status"), "{}", response.body);
}

#[test]
fn in_flight_refuses_the_n_plus_first_request_of_a_key_while_n_run() {
    let server = Server::start(&[
        "--in-flight",
        "2",
        "--key",
        "header:x-key",
        "--limit",
        "api=1000/s",
    ]);
    // Five at once, each held 3 s: two run, three are refused at once.
    let requests: Vec<_> = (0..5)
        .map(|_| server.get_in_background(&[("x-key", "alice"), ("x-hold-ms", "3000")]))
        .collect();
    let started = Instant::now();
    while requests.iter().filter(|r| r.is_finished()).count() < 3 {
        assert!(started.elapsed() < STEP, "the refusals never came");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Another key runs meanwhile; its response lists the rate limit and
    // the in-flight limit.
    let other = server.get(&[("x-key", "bob")]);
    assert_eq!(other.status, 200);
    assert_eq!(
        other.header("ratelimit-policy"),
        Some(r#""api";q=1000;w=1, "inflight";q=2;qu="concurrent-requests""#)
    );
    assert!(
        other
            .header("ratelimit")
            .is_some_and(|v| v.ends_with(r#", "inflight";r=1"#)),
        "{other:?}"
    );
    let responses: Vec<Response> = requests
        .into_iter()
        .map(|r| r.join().unwrap().expect("a response"))
        .collect();
    let passed = responses.iter().filter(|r| r.status == 200).count();
    assert_eq!(passed, 2, "{responses:?}");
    for refused in responses.iter().filter(|r| r.status != 200) {
        assert_eq!(refused.status, 429);
        assert_eq!(
            refused.header("ratelimit-policy"),
            Some(r#""inflight";q=2;qu="concurrent-requests""#)
        );
        assert_eq!(refused.header("ratelimit"), Some(r#""inflight";r=0"#));
        assert_eq!(refused.header("retry-after"), None);
    }
    assert_eq!(server.get(&[("x-key", "alice")]).status, 200);
}

#[test]
fn a_request_the_in_flight_limit_refuses_is_not_charged_by_the_rate_limit() {
    // In Redis, where the test can see when the holder has its slot.
    let redis = tollgate_tests::redis::RedisServer::start();
    let url = redis.url();
    let server = Server::start(&[
        "--store",
        url.as_str(),
        "--store-timeout-ms",
        "2000",
        "--in-flight",
        "1",
        "--key",
        "header:x-key",
        "--limit",
        "api=2/min",
    ]);
    let holder = server.get_in_background(&[("x-key", "alice"), ("x-hold-ms", "3000")]);
    wait_for_slot(&redis, "alice");
    // Refused by the in-flight limit while the holder runs (it took the
    // first of the two a minute when it was admitted).
    for _ in 0..3 {
        let response = server.get(&[("x-key", "alice")]);
        assert_eq!(response.status, 429);
        assert_eq!(response.header("ratelimit"), Some(r#""inflight";r=0"#));
    }
    assert_eq!(holder.join().unwrap().expect("a response").status, 200);
    // The holder's slot goes back from a task once its body has ended
    // (`RedisPermit`'s drop): on a busy machine the next request can come
    // first, and would be refused by the in-flight limit, not the rate.
    wait_for_slots(&redis, "alice", false);
    // The three refusals cost nothing: one of the two a minute is left.
    assert_eq!(server.get(&[("x-key", "alice")]).status, 200);
    let refused = server.get(&[("x-key", "alice")]);
    assert_eq!(refused.status, 429);
    // Refused by the rate limit, not by a slot still taken.
    assert!(
        refused
            .header("ratelimit")
            .is_some_and(|v| v.contains(r#""api";r=0"#)),
        "{refused:?}"
    );
}

#[test]
fn a_client_that_waits_for_each_answer_never_meets_its_own_slot_in_redis() {
    // A Redis slot goes back with a `ZREM`, a round trip: the response's
    // last frame waits for it, so the next request of a client that read
    // the whole answer finds the slot free, however busy the machine.
    let redis = tollgate_tests::redis::RedisServer::start();
    let url = redis.url();
    let server = Server::start(&[
        "--store",
        url.as_str(),
        "--in-flight",
        "1",
        "--key",
        "header:x-key",
        "--limit",
        "api=1000/min",
    ]);
    for i in 0..40 {
        let response = server.get(&[("x-key", "carol")]);
        assert_eq!(response.status, 200, "request {i}: {response:?}");
    }
}

#[test]
fn in_flight_wait_queues_requests_until_a_slot_comes_back() {
    let server = Server::start(&[
        "--in-flight",
        "1",
        "--in-flight-wait-ms",
        "20000",
        "--key",
        "header:x-key",
    ]);
    // Three at once, each held 500 ms, one at a time: all pass, and the
    // last is answered after three holds, not one.
    let started = Instant::now();
    let requests: Vec<_> = (0..3)
        .map(|_| server.get_in_background(&[("x-key", "alice"), ("x-hold-ms", "500")]))
        .collect();
    for request in requests {
        assert_eq!(request.join().unwrap().expect("a response").status, 200);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1_450),
        "{:?}: they ran side by side",
        started.elapsed()
    );
}

#[test]
fn in_flight_flags_that_cannot_work_are_usage_errors() {
    for args in [
        &["--in-flight", "0"][..],
        &["--in-flight", "x"],
        &["--in-flight-wait-ms", "10"],
        &["--in-flight", "1", "--in-flight-lease-ms", "99"],
        // Slots in memory have no lease.
        &["--in-flight", "1", "--in-flight-lease-ms", "1000"],
    ] {
        let (status, stderr) = run_to_exit(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
    }
}

#[test]
fn in_redis_a_killed_servers_slots_come_back_after_the_lease_and_not_before() {
    let redis = tollgate_tests::redis::RedisServer::start();
    let url = redis.url();
    let lease_ms = 2_000;
    let args = [
        "--store",
        url.as_str(),
        "--in-flight",
        "1",
        "--in-flight-lease-ms",
        "2000",
        "--key",
        "header:x-key",
        "--limit",
        "api=1000/s",
        // A first call on a loaded machine (tests run side by side) can
        // take over the default 100 ms; failing open would hold no slot.
        "--store-timeout-ms",
        "2000",
    ];
    let mut doomed = Server::start(&args);
    let survivor = Server::start(&args);
    // The doomed server runs alice's only request, for a minute.
    let _holder = doomed.get_in_background(&[("x-key", "alice"), ("x-hold-ms", "60000")]);
    wait_for_slot(&redis, "alice");
    let refused = survivor.get(&[("x-key", "alice")]);
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("ratelimit"), Some(r#""inflight";r=0"#));
    // Let it renew its slot at least once (every third of the lease).
    std::thread::sleep(Duration::from_millis(lease_ms / 3 + 200));
    // SIGKILL: no goodbye, nothing given back.
    doomed.kill();
    let killed = Instant::now();
    assert_eq!(
        survivor.get(&[("x-key", "alice")]).status,
        429,
        "before the lease has passed the slot still counts"
    );
    let (_, passed) = survivor.until_status(200, &[("x-key", "alice")]);
    let after = killed.elapsed();
    assert_eq!(passed.status, 200);
    // It renewed every 667 ms, so its slot ended between 1.33 s and 2 s
    // after its death (less the moment before the kill was timed).
    assert!(
        after >= Duration::from_millis(lease_ms * 2 / 3 - 200),
        "back {after:?} after the kill: before the lease could end"
    );
    assert!(
        after <= Duration::from_millis(lease_ms + 1_000),
        "back only {after:?} after the kill"
    );
    // Other keys were never held.
    assert_eq!(survivor.get(&[("x-key", "bob")]).status, 200);
}

/// Waits until a slot of `key` is held in `redis` (the default prefix and
/// limit name); fails after `STEP`.
fn wait_for_slot(redis: &tollgate_tests::redis::RedisServer, key: &str) {
    wait_for_slots(redis, key, true);
}

/// Waits until `key` has a slot taken in Redis (`taken`), or none.
fn wait_for_slots(redis: &tollgate_tests::redis::RedisServer, key: &str, taken: bool) {
    let slots = format!("tollgate:{{{key}}}:inflight:inflight");
    let started = Instant::now();
    while redis.command(&["EXISTS", &slots]).starts_with(":1") != taken {
        assert!(
            started.elapsed() < STEP,
            "{key}'s slots: still {}",
            if taken { "none" } else { "taken" }
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
