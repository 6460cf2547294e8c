//! The `server` playground's `--in-flight` flags and its `x-hold-ms`
//! header, checked against the built binary as `server.rs` checks the
//! others: each test starts it on `127.0.0.1:0`, reads the address it
//! prints, and sends plain HTTP/1.1 requests over loopback, one
//! connection per request. Keys differ by an `x-key` header.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long any one step (startup, a request, an exit) may take.
const STEP: Duration = Duration::from_secs(30);

/// A running `server`, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    /// Starts `server --listen 127.0.0.1:0 ARGS...` and waits for its address.
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_server"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the server binary starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut server = Server {
            child,
            addr: String::new(),
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        server.addr = rx
            .recv_timeout(STEP)
            .expect("the server prints its address in time")
            .strip_prefix("listening on http://")
            .expect("the first line announces the address")
            .trim()
            .to_owned();
        server
    }

    /// `GET /` with `headers`.
    fn get(&self, headers: &[(&str, &str)]) -> Response {
        request(&self.addr, headers)
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
            try_request(&addr, &headers)
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

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: status, headers (names lowercased) and body.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn request(addr: &str, headers: &[(&str, &str)]) -> Response {
    try_request(addr, headers).expect("a response")
}

/// One HTTP/1.1 `GET /` on a fresh connection, read until the server
/// closes it; `None` if the connection broke first.
fn try_request(addr: &str, headers: &[(&str, &str)]) -> Option<Response> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(STEP * 3)).ok()?;
    let mut text = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes()).ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Some(Response {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// Runs `server ARGS...` expecting it to refuse to start: its status and
/// stderr.
fn run_to_exit(args: &[&str]) -> (ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_server"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server binary starts");
    let deadline = Instant::now() + STEP;
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("server {args:?} kept running; it should have refused to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut stderr);
    (status, stderr)
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
    // The three refusals cost nothing: one of the two a minute is left.
    assert_eq!(server.get(&[("x-key", "alice")]).status, 200);
    assert_eq!(server.get(&[("x-key", "alice")]).status, 429);
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
    doomed.child.kill().expect("kill the server");
    doomed.child.wait().expect("reap it");
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
    let slots = format!("tollgate:{{{key}}}:inflight:inflight");
    let started = Instant::now();
    while !redis.command(&["EXISTS", &slots]).starts_with(":1") {
        assert!(started.elapsed() < STEP, "no slot of {key} was taken");
        std::thread::sleep(Duration::from_millis(10));
    }
}
