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
