//! The playground's shadow flags over real HTTP: `--shadow` (every
//! `--limit` in shadow) and `--shadow-limit NAME=QUOTA` (a limit that only
//! counts, beside enforced ones), on the memory store, Redis and the
//! local-first store.

mod playground;

use playground::{Response, Server, request, run_to_exit};
use tollgate_tests::redis::RedisServer;

/// The header names of `response`, sorted (values such as `date` differ
/// from one response to the next).
fn header_names(response: &Response) -> Vec<String> {
    let mut names: Vec<String> = response.headers.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    names
}

/// The store flags of each store a test runs on.
fn stores(redis: &RedisServer) -> Vec<Vec<String>> {
    let url = redis.url();
    vec![
        vec![],
        vec!["--store".into(), url.clone()],
        vec![
            "--store".into(),
            url.clone(),
            "--local".into(),
            "exact".into(),
        ],
        vec![
            "--store".into(),
            url,
            "--local".into(),
            "periodic=50".into(),
        ],
    ]
}

fn start(store: &[String], args: &[&str]) -> Server {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(store.iter().map(String::as_str));
    Server::start_with_env(&all, &[("RUST_LOG", "tollgate=info")])
}

#[test]
fn with_shadow_every_request_passes_as_if_unlimited() {
    let redis = RedisServer::start();
    for (n, store) in stores(&redis).iter().enumerate() {
        let limit = format!("api{n}=5/min");
        let server = start(store, &["--shadow", "--limit", &limit, "--key", "global"]);
        // What the route answers with no rate-limit fields at all.
        let plain = start(store, &["--headers", "none", "--limit", "wide=1000/min"]);
        let reference = request(&plain.addr, "/x", &[]);
        for i in 0..20 {
            let response = request(&server.addr, "/x", &[]);
            assert_eq!(response.status, 200, "{store:?} request {i}");
            assert_eq!(response.body, reference.body, "{store:?}");
            assert_eq!(
                header_names(&response),
                header_names(&reference),
                "{store:?}"
            );
        }
        let name = format!("api{n}");
        let shadow_lines = |logs: &[String]| {
            logs.iter()
                .filter(|line| line.contains("shadow") && line.contains(&name))
                .count()
        };
        server.logs_once(|logs| shadow_lines(logs) > 0);
        // Logged once in the interval, not once per request: a second
        // line would have come with the first.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let logged = shadow_lines(&server.logs());
        assert_eq!(logged, 1, "{store:?}: {:#?}", server.logs());
    }
}

#[test]
fn a_shadow_limit_beside_an_enforced_one_refuses_only_by_the_enforced_one() {
    let redis = RedisServer::start();
    for (n, store) in stores(&redis).iter().enumerate() {
        let (enforced, shadow) = (format!("api{n}"), format!("next{n}"));
        let server = start(
            store,
            &[
                "--limit",
                &format!("{enforced}=10/min"),
                "--shadow-limit",
                &format!("{shadow}=3/min"),
                "--key",
                "global",
            ],
        );
        let statuses: Vec<u16> = (0..12)
            .map(|_| {
                let response = request(&server.addr, "/x", &[]);
                let policy = response.header("ratelimit-policy").unwrap_or_default();
                assert!(policy.contains(&enforced), "{policy}");
                assert!(!policy.contains(&shadow), "{store:?}: {policy}");
                response.status
            })
            .collect();
        assert_eq!(
            statuses,
            [[200; 10].as_slice(), &[429; 2]].concat(),
            "{store:?}"
        );
    }
}

#[test]
fn a_shadow_limit_with_charge_when_is_a_usage_error() {
    let (status, stderr) = run_to_exit(&["--shadow-limit", "next=3/min", "--charge-when", "4xx"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("shadow") && stderr.contains("charge_when"),
        "{stderr}"
    );
}

#[test]
fn a_shadow_limit_may_not_share_a_name_with_a_limit() {
    let (status, stderr) = run_to_exit(&["--limit", "api=3/min", "--shadow-limit", "api=1/min"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("two limits are called \"api\""), "{stderr}");
}
