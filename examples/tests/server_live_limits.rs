//! The playground's `--limits-file PATH` over real HTTP: limits read again
//! within a second of the file changing, each key keeping its usage (10/min
//! to 5/min after 8 requests refuses the next; then 20/min shows r=11 and
//! the new policy), a malformed file reported and the last good one kept,
//! and at start a usage error; a limit left out for a moment keeps each
//! key's usage; a file changed across a restart reads it as a live change
//! carries it. On the memory store, Redis, PostgreSQL and local-first.

mod playground;

use playground::{Response, Server, request, run_to_exit};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tollgate_tests::redis::RedisServer;

/// A file of its own under the system's temporary directory.
fn limits_file(text: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "tollgate-limits-{}-{}.txt",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, text).unwrap();
    path
}

fn as_key(server: &Server, key: &str) -> Response {
    request(&server.addr, "/", &[("x-api-key", key)])
}

/// Waits until a key never seen before is told `policy`: the server read
/// the file again (a fresh key each time, so the waiting charges nobody
/// who matters). Bounded: a server that never reads it fails the test.
fn wait_for_policy(server: &Server, policy: &str) {
    static PROBE: AtomicUsize = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let probe = format!("probe-{}", PROBE.fetch_add(1, Ordering::Relaxed));
        if as_key(server, &probe).header("ratelimit-policy") == Some(policy) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never saw {policy}: {:#?}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rewrite(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_changed_limits_file_applies_with_each_keys_usage_kept() {
    let redis = RedisServer::start();
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let (url, postgres_url) = (redis.url(), postgres.url());
    let stores = [
        vec![],
        vec!["--store", &url],
        vec!["--store", &url, "--local", "exact"],
        vec!["--store", &postgres_url],
        vec!["--store", &postgres_url, "--local", "exact"],
    ];
    for (n, store) in stores.iter().enumerate() {
        let path = limits_file("# the limits\napi=10/min\n");
        let path_text = path.to_str().unwrap();
        let mut args = vec!["--limits-file", path_text, "--key", "header:x-api-key"];
        args.extend(store);
        let server = Server::start(&args);
        let key = format!("user-{n}");
        for _ in 0..8 {
            let response = as_key(&server, &key);
            assert_eq!(response.status, 200, "{store:?}");
            assert_eq!(
                response.header("ratelimit-policy"),
                Some("\"api\";q=10;w=60")
            );
        }
        rewrite(&path, "api=5/min\n");
        wait_for_policy(&server, "\"api\";q=5;w=60");
        let refused = as_key(&server, &key);
        assert_eq!(refused.status, 429, "{store:?}: 8 used of 5");
        rewrite(&path, "api=20/min\n");
        wait_for_policy(&server, "\"api\";q=20;w=60");
        let admitted = as_key(&server, &key);
        assert_eq!(admitted.status, 200, "{store:?}");
        assert_eq!(
            admitted.header("ratelimit-policy"),
            Some("\"api\";q=20;w=60")
        );
        let fields = admitted.header("ratelimit").unwrap_or_default();
        assert!(fields.starts_with("\"api\";r=11;"), "{store:?}: {fields}");
        // A malformed file is reported and the limits read last kept.
        rewrite(&path, "api=lots\n");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server
            .logs()
            .iter()
            .any(|line| line.contains("does not parse"))
        {
            assert!(Instant::now() < deadline, "{:#?}", server.logs());
            std::thread::sleep(Duration::from_millis(50));
        }
        wait_for_policy(&server, "\"api\";q=20;w=60");
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn a_malformed_limits_file_at_start_is_a_usage_error() {
    let path = limits_file("api=10/min\nhourly=often\n");
    let (status, stderr) = run_to_exit(&["--limits-file", path.to_str().unwrap()]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("line 2"), "{stderr}");
    let (status, stderr) = run_to_exit(&["--limits-file", "/nonexistent/limits.txt"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot read"), "{stderr}");
    // In place of --limit, not beside it.
    let (status, stderr) =
        run_to_exit(&["--limits-file", path.to_str().unwrap(), "--limit", "a=1/s"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    let _ = std::fs::remove_file(&path);
}

/// A limit dropped from the file and put back a moment later (a line
/// deleted by mistake, a deploy in two steps) keeps its keys' usage for
/// its period: 3 used of `burst=5/min`, the line gone for a request, then
/// back: 2 more are admitted, not 5. On every store the playground names.
#[test]
fn a_limit_missing_for_a_moment_keeps_its_keys_usage() {
    let redis = RedisServer::start();
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let (redis_url, postgres_url) = (redis.url(), postgres.url());
    let stores = [
        vec![],
        vec!["--store", &redis_url],
        vec!["--store", &redis_url, "--local", "exact"],
        vec!["--store", &redis_url, "--local", "periodic=100"],
        vec!["--store", &postgres_url],
        vec!["--store", &postgres_url, "--local", "exact"],
    ];
    let both = "\"api\";q=1000;w=60, \"burst\";q=5;w=60";
    for (n, store) in stores.iter().enumerate() {
        let path = limits_file("api=1000/min\nburst=5/min\n");
        let mut args = vec!["--limits-file", path.to_str().unwrap()];
        args.extend_from_slice(&["--key", "header:x-api-key"]);
        args.extend(store);
        let server = Server::start(&args);
        let key = format!("missing-{n}");
        for _ in 0..3 {
            assert_eq!(as_key(&server, &key).status, 200, "{store:?}");
        }
        rewrite(&path, "api=1000/min\n");
        wait_for_policy(&server, "\"api\";q=1000;w=60");
        assert_eq!(as_key(&server, &key).status, 200, "{store:?}");
        rewrite(&path, "api=1000/min\nburst=5/min\n");
        wait_for_policy(&server, both);
        let statuses: Vec<u16> = (0..4).map(|_| as_key(&server, &key).status).collect();
        assert_eq!(statuses, [200, 200, 429, 429], "{store:?}");
        let _ = std::fs::remove_file(&path);
    }
}

/// A limits file changed while no server ran: the next server reads each
/// key's usage under the new limits as a live change carries it (8 used
/// of 10 an hour; restarted at 20: 11 left after the next request; at 5:
/// refused). On the shared stores, where usage outlives a process.
#[test]
fn a_limits_file_changed_across_a_restart_keeps_each_keys_usage() {
    let redis = RedisServer::start();
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let (redis_url, postgres_url) = (redis.url(), postgres.url());
    let stores = [
        vec!["--store", &redis_url],
        vec!["--store", &redis_url, "--local", "exact"],
        vec!["--store", &postgres_url],
    ];
    for (n, store) in stores.iter().enumerate() {
        let path = limits_file("api=10/h\n");
        let start = || {
            let mut args = vec!["--limits-file", path.to_str().unwrap()];
            args.extend_from_slice(&["--key", "header:x-api-key"]);
            args.extend(store);
            Server::start(&args)
        };
        let key = format!("restarted-{n}");
        let server = start();
        for _ in 0..8 {
            assert_eq!(as_key(&server, &key).status, 200, "{store:?}");
        }
        drop(server);
        rewrite(&path, "api=20/h\n");
        let server = start();
        let admitted = as_key(&server, &key);
        assert_eq!(admitted.status, 200, "{store:?}");
        let fields = admitted.header("ratelimit").unwrap_or_default();
        assert!(fields.starts_with("\"api\";r=11;"), "{store:?}: {fields}");
        drop(server);
        rewrite(&path, "api=5/h\n");
        let server = start();
        assert_eq!(as_key(&server, &key).status, 429, "{store:?}: 9 used of 5");
        let _ = std::fs::remove_file(&path);
    }
}
