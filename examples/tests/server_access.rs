//! The playground's `--allow KEY` and `--deny KEY` over real HTTP: an
//! allowed key passes every limit uncounted, a denied key gets 403 with a
//! problem+json of its own type whatever its budget, others are limited;
//! on the memory store and on Redis.

mod playground;

use playground::{Server, request, run_to_exit};
use tollgate_tests::redis::RedisServer;

fn statuses(server: &Server, key: &str, n: usize) -> Vec<u16> {
    (0..n)
        .map(|_| request(&server.addr, "/", &[("x-api-key", key)]).status)
        .collect()
}

#[test]
fn allowed_keys_pass_denied_keys_get_403_others_are_limited() {
    let redis = RedisServer::start();
    let url = redis.url();
    for store in [vec![], vec!["--store", url.as_str()]] {
        let mut args = vec![
            "--limit",
            "api=3/min",
            "--key",
            "header:x-api-key",
            "--allow",
            "friend",
            "--allow",
            "monitor",
            "--deny",
            "foe",
        ];
        args.extend(&store);
        let server = Server::start(&args);
        assert_eq!(statuses(&server, "friend", 10), [200; 10], "{store:?}");
        assert_eq!(statuses(&server, "monitor", 4), [200; 4], "{store:?}");
        let denied = request(&server.addr, "/", &[("x-api-key", "foe")]);
        assert_eq!(denied.status, 403, "{store:?}");
        assert_eq!(
            denied.header("content-type"),
            Some("application/problem+json")
        );
        assert!(
            denied.body.contains("urn:tollgate:problem:key-denied"),
            "{}",
            denied.body
        );
        assert_eq!(denied.header("retry-after"), None);
        assert_eq!(
            statuses(&server, "other", 4),
            [200, 200, 200, 429],
            "{store:?}"
        );
        // A limited request keeps the default rejection: an empty body.
        let limited = request(&server.addr, "/", &[("x-api-key", "other")]);
        assert_eq!((limited.status, limited.body.as_str()), (429, ""));
    }
}

#[test]
fn with_key_ip_an_allowed_key_that_is_no_address_is_a_usage_error() {
    let (status, stderr) = run_to_exit(&["--allow", "not-an-address"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not an IP address"), "{stderr}");
}

#[test]
fn with_key_ip_the_peer_address_is_the_key() {
    let server = Server::start(&["--limit", "api=1/min", "--deny", "127.0.0.1"]);
    assert_eq!(request(&server.addr, "/", &[]).status, 403);
    let server = Server::start(&["--limit", "api=1/min", "--allow", "127.0.0.1"]);
    let statuses: Vec<u16> = (0..3)
        .map(|_| request(&server.addr, "/", &[]).status)
        .collect();
    assert_eq!(statuses, [200, 200, 200]);
}

/// `--access-file PATH`: `allow KEY` / `deny KEY` lines over the flags,
/// followed while the server runs (the next request after the file is
/// read again sees the new lists); a malformed file is reported and the
/// lists read last kept; at start, a usage error.
#[test]
fn an_access_file_is_followed_while_the_server_runs() {
    use std::time::{Duration, Instant};
    let path = std::env::temp_dir().join(format!("tollgate-access-{}.txt", std::process::id()));
    std::fs::write(&path, "# lists\nallow friend\n").unwrap();
    let server = Server::start(&[
        "--limit",
        "api=1/min",
        "--key",
        "header:x-api-key",
        "--deny",
        "foe",
        "--access-file",
        path.to_str().unwrap(),
    ]);
    assert_eq!(statuses(&server, "friend", 3), [200; 3]);
    assert_eq!(statuses(&server, "foe", 1), [403]);
    assert_eq!(statuses(&server, "late", 2), [200, 429]);
    // Deny a key while it runs: within a second or so the server reads
    // the file again (waited for boundedly, with a key of its own that
    // gets 403 once the file is in force).
    std::fs::write(&path, "allow friend\ndeny probe\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while statuses(&server, "probe", 1) != [403] {
        assert!(Instant::now() < deadline, "{:#?}", server.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The flags' list stays: "foe" is still denied.
    assert_eq!(statuses(&server, "foe", 1), [403]);
    // A malformed file: reported, the lists read last kept.
    std::fs::write(&path, "block everyone\n").unwrap();
    while !server
        .logs()
        .iter()
        .any(|line| line.contains("does not parse"))
    {
        assert!(Instant::now() < deadline, "{:#?}", server.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(statuses(&server, "probe", 1), [403]);
    assert_eq!(statuses(&server, "friend", 2), [200; 2]);
    let (status, stderr) = run_to_exit(&["--access-file", path.to_str().unwrap()]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("line 1"), "{stderr}");
    let _ = std::fs::remove_file(&path);
}
