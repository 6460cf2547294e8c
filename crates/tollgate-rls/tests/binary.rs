//! The `tollgate-rls` binary as an operator runs it: the `listening on
//! grpc://ADDR` line, calls from a real tonic client, and four processes
//! sharing one Redis that admit exactly a rule's limit between them, with
//! and without local-first, by the fixed window and by GCRA.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tollgate_tests::exposition::{has_labels, passes_a_real_parser, samples};
use tollgate_tests::proxy::{Jitter, JitterProxy};
use tollgate_tests::redis::RedisServer;

mod common;

use common::Rls;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/envoy-ratelimit")
        .join(name)
}

fn request(pairs: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "test-domain".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: pairs
                .iter()
                .map(|(key, value)| Entry {
                    key: (*key).to_owned(),
                    value: (*value).to_owned(),
                })
                .collect(),
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// Waits, if a minute is about to end, until it has: the fixed windows
/// are aligned to the minute.
fn clear_of_a_minute_boundary() {
    let into = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        % 60_000;
    if into > 45_000 {
        std::thread::sleep(Duration::from_millis((60_000 - into + 100) as u64));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_a_fixture_on_memory() {
    clear_of_a_minute_boundary();
    let config = fixture("basic_config.yaml");
    let rls = Rls::start(&["--config", config.to_str().unwrap()]);
    let mut client = rls.client().await;
    let mut codes = Vec::new();
    for _ in 0..31 {
        let response = client
            .should_rate_limit(request(&[("key2", "value2")]))
            .await
            .unwrap()
            .into_inner();
        codes.push(response.overall_code);
    }
    let ok = codes.iter().filter(|c| **c == Code::Ok as i32).count();
    assert_eq!(ok, 30, "{codes:?}");
    assert_eq!(codes[30], Code::OverLimit as i32);
    // The gRPC health check a load balancer or Kubernetes asks.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", rls.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let request = tonic_health::pb::HealthCheckRequest {
            service: service.to_owned(),
        };
        let answer = health.check(request).await.unwrap().into_inner();
        assert_eq!(
            answer.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
}

#[test]
fn a_config_that_server_would_refuse_exits_2_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("tollgate-rls-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate-rls"))
        .args(["--grpc", "127.0.0.1:0", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bad.yaml") && stderr.contains("'rate_limt'"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// 400 calls, 100 from each of four processes at once, on one key of
/// `config`'s rule of 30 a minute: how many were admitted, and how long
/// the calls took.
async fn four_processes(redis: &RedisServer, config: &Path, extra: &[&str]) -> (usize, Duration) {
    four_processes_at(&redis.url(), config, extra).await
}

/// [`four_processes`] over the store at `url`.
async fn four_processes_at(url: &str, config: &Path, extra: &[&str]) -> (usize, Duration) {
    clear_of_a_minute_boundary();
    let mut args = vec!["--config", config.to_str().unwrap(), "--store", url];
    args.extend_from_slice(extra);
    // A second's store timeout: a loaded machine's Redis answers in it.
    args.extend_from_slice(&["--store-timeout-ms", "1000", "--on-store-error", "closed"]);
    let processes: Vec<Rls> = (0..4).map(|_| Rls::start(&args)).collect();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for rls in &processes {
        let mut client = rls.client().await;
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..100 {
                let response = client
                    .should_rate_limit(request(&[("key2", "value2")]))
                    .await
                    .unwrap()
                    .into_inner();
                admitted += usize::from(response.overall_code == Code::Ok as i32);
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    (admitted, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_over_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let fixed = fixture("basic_config.yaml");
    let (admitted, _) = four_processes(&redis, &fixed, &[]).await;
    assert_eq!(admitted, 30, "fixed window, one call per decision");
    redis.command(&["FLUSHALL"]);
    let (admitted, _) = four_processes(&redis, &fixed, &["--local", "exact"]).await;
    assert_eq!(admitted, 30, "fixed window, local-first exact");
    // Periodic: each process counts on its own between reports, and
    // together they pass the limit by at most one unit each (rounding),
    // as the local-first guide promises.
    redis.command(&["FLUSHALL"]);
    let (admitted, _) = four_processes(&redis, &fixed, &["--local", "periodic=100"]).await;
    assert!(
        (1..=30 + 4).contains(&admitted),
        "local-first periodic: {admitted} admitted"
    );
    println!("local-first periodic=100: {admitted} of 30 admitted by four processes");
    // GCRA: 30 a minute refills one every 2 s; what refilled while the
    // calls ran may pass too, never more.
    let dir = std::env::temp_dir().join(format!("tollgate-rls-gcra-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gcra = dir.join("gcra.yaml");
    let text = std::fs::read_to_string(&fixed).unwrap();
    std::fs::write(&gcra, format!("algorithm: gcra\n{text}")).unwrap();
    redis.command(&["FLUSHALL"]);
    let (admitted, took) = four_processes(&redis, &gcra, &[]).await;
    let refilled = (took.as_secs() / 2) as usize + 1;
    assert!(
        (30..=30 + refilled).contains(&admitted),
        "GCRA: {admitted} admitted in {took:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The rule `key2` (its default) as the binary answers it now: its
/// requests per unit, or `None` when it has no rule.
async fn key2_limit(rls: &Rls) -> Option<u32> {
    let mut client = rls.client().await;
    let response = client
        .should_rate_limit(request(&[("key2", "x")]))
        .await
        .unwrap()
        .into_inner();
    response.statuses[0]
        .current_limit
        .as_ref()
        .map(|limit| limit.requests_per_unit)
}

/// Waits up to 1.5 s for `key2_limit` to read `expected`: a change is in
/// force within a second.
async fn reads_within_a_second(rls: &Rls, expected: Option<u32>) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1_500) {
        if key2_limit(rls).await == expected {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn rule(requests_per_unit: u32) -> String {
    format!(
        "domain: test-domain\ndescriptors:\n  - key: key2\n    rate_limit:\n      unit: minute\n      requests_per_unit: {requests_per_unit}\n"
    )
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_directory_is_in_force_within_a_second_and_a_bad_change_is_not() {
    let dir = std::env::temp_dir().join(format!("tollgate-rls-reload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A Kubernetes ConfigMap's layout: a versioned folder, `..data`
    // linking to it, and the file linking through `..data`.
    let version = |n: u32| dir.join(format!("..2026_12_07_{n}"));
    std::fs::create_dir_all(version(1)).unwrap();
    std::fs::write(version(1).join("rules.yaml"), rule(20)).unwrap();
    std::os::unix::fs::symlink(version(1), dir.join("..data")).unwrap();
    std::os::unix::fs::symlink(dir.join("..data/rules.yaml"), dir.join("rules.yaml")).unwrap();
    let rls = Rls::start(&["--config", dir.to_str().unwrap()]);
    assert_eq!(key2_limit(&rls).await, Some(20));

    // The ConfigMap updated: a new folder, and `..data` swapped to it at
    // once (a new link renamed over the old one).
    std::fs::create_dir_all(version(2)).unwrap();
    std::fs::write(version(2).join("rules.yaml"), rule(5)).unwrap();
    std::os::unix::fs::symlink(version(2), dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    assert!(
        reads_within_a_second(&rls, Some(5)).await,
        "the swap is in force"
    );

    // A change that does not load: the last good configuration stays.
    std::fs::write(
        version(2).join("rules.yaml"),
        "domain: test-domain\ndescriptors:\n  - key: key2\n    rate_limt: {}\n",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(key2_limit(&rls).await, Some(5), "a bad change is refused");

    // Fixed again: in force.
    std::fs::write(version(2).join("rules.yaml"), rule(7)).unwrap();
    assert!(
        reads_within_a_second(&rls, Some(7)).await,
        "the fix is in force"
    );
    drop(rls);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One call of `key2=value2` to each process: each one's code.
async fn one_call_each(processes: &[Rls]) -> Vec<Code> {
    let answers = answers_of_one_call_each(processes).await;
    answers.into_iter().map(|(code, _)| code).collect()
}

/// One call of `key2=value2` to each process: each one's code, and
/// whether its store decided it (its status names the rule's limit; an
/// answer of `--on-store-error` names none).
async fn answers_of_one_call_each(processes: &[Rls]) -> Vec<(Code, bool)> {
    let mut answers = Vec::new();
    for rls in processes {
        let mut client = rls.client().await;
        let response = client
            .should_rate_limit(request(&[("key2", "value2")]))
            .await
            .unwrap()
            .into_inner();
        let decided = response.statuses[0].current_limit.is_some();
        answers.push((Code::try_from(response.overall_code).unwrap(), decided));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_run_is_answered_by_on_store_error_and_shared_again_once_back() {
    clear_of_a_minute_boundary();
    let mut redis = RedisServer::start();
    let config = fixture("basic_config.yaml");
    let url = redis.url();
    let start = |mode: &str| {
        let args = [
            "--config",
            config.to_str().unwrap(),
            "--store",
            url.as_str(),
            "--on-store-error",
            mode,
            // A loaded machine's Redis answers within a second; a killed
            // one is refused at once, so the outage is seen at once.
            "--store-timeout-ms",
            "1000",
        ];
        Rls::start(&args)
    };
    let processes = [start("open"), start("closed")];
    assert_eq!(one_call_each(&processes).await, [Code::Ok, Code::Ok]);
    redis.kill();
    // Each follows its own --on-store-error: open admits, closed refuses.
    assert_eq!(one_call_each(&processes).await, [Code::Ok, Code::OverLimit]);
    redis.restart();
    // Back: decided through Redis again once the breaker's cool-down (1 s
    // after its first opening) has passed: the count starts again, shared.
    // Each process's breaker cools down on its own clock: until both
    // decide through Redis, the open one may still admit uncounted.
    // Every admission Redis counted is counted here too.
    let back = Instant::now();
    let both_decided = [(Code::Ok, true), (Code::Ok, true)];
    let counted = |answers: &[(Code, bool)]| {
        answers
            .iter()
            .filter(|answer| **answer == (Code::Ok, true))
            .count()
    };
    let mut answers = answers_of_one_call_each(&processes).await;
    let mut admitted = counted(&answers);
    while answers != both_decided && back.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        answers = answers_of_one_call_each(&processes).await;
        admitted += counted(&answers);
    }
    assert_eq!(answers, both_decided, "shared again within 5 s");
    println!(
        "decided through Redis again {:?} after it came back",
        back.elapsed()
    );
    // Shared: 30 a minute between the two, counted in the restarted Redis.
    for _ in 0..20 {
        admitted += one_call_each(&processes)
            .await
            .iter()
            .filter(|code| **code == Code::Ok)
            .count();
    }
    assert_eq!(admitted, 30, "the two share one count again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_over_postgres_admit_exactly_the_limit() {
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let fixed = fixture("basic_config.yaml");
    let (admitted, _) = four_processes_at(&postgres.url(), &fixed, &[]).await;
    assert_eq!(admitted, 30, "fixed window, one call per decision");
    drop(postgres);
    // Local-first exact in front of a fresh database.
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let (admitted, _) = four_processes_at(&postgres.url(), &fixed, &["--local", "exact"]).await;
    assert_eq!(admitted, 30, "fixed window, local-first exact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_fallback_each_process_decides_its_share_in_memory() {
    clear_of_a_minute_boundary();
    let mut redis = RedisServer::start();
    let config = fixture("basic_config.yaml");
    let url = redis.url();
    let start = |local: &str| {
        let args = [
            "--config",
            config.to_str().unwrap(),
            "--store",
            url.as_str(),
            "--local",
            local,
            "--on-store-error",
            "fallback",
            "--instances",
            "2",
            "--store-timeout-ms",
            "200",
        ];
        Rls::start(&args)
    };
    // One process plain (behind the timeout, breaker and block cache), one
    // local-first exact: both fall back the same way.
    let processes = [start("off"), start("exact")];
    // Each says through Redis, every second, that it shares it.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    redis.kill();
    // key2_value2: 30 a minute, split between the two processes while
    // Redis is away: 15 each, decided in memory.
    let mut admitted = [0, 0];
    for _ in 0..25 {
        for (count, code) in admitted.iter_mut().zip(one_call_each(&processes).await) {
            *count += usize::from(code == Code::Ok);
        }
    }
    assert_eq!(admitted, [15, 15], "each at its share of 30");
}

/// One HTTP/1.1 exchange with `addr`: the status and the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// A `/json` body of one descriptor of one entry.
/// The address in the binary's `metrics on http://ADDR/metrics` line.
fn metrics_addr(line: &str) -> &str {
    line.strip_prefix("metrics on http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("not a metrics line: {line:?}"))
}

fn json_call(domain: &str, key: &str, value: &str) -> String {
    format!(
        r#"{{"domain": "{domain}", "descriptors": [{{"entries": [{{"key": "{key}", "value": "{value}"}}]}}]}}"#
    )
}

#[test]
fn the_json_check_healthcheck_and_metrics_answer_over_http() {
    clear_of_a_minute_boundary();
    // Two domains: test-domain (basic_config.yaml) and rl (example.yaml).
    let dir = std::env::temp_dir().join(format!("tollgate-rls-http-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["basic_config.yaml", "example.yaml"] {
        std::fs::copy(fixture(name), dir.join(name)).unwrap();
    }
    // And a domain whose `route` level names its values in the metrics.
    std::fs::write(
        dir.join("named.yaml"),
        "domain: named\ndescriptors:\n  - key: route\n    value_to_metric: true\n    \
         descriptors:\n      - key: user\n        rate_limit: {unit: minute, requests_per_unit: 5}\n",
    )
    .unwrap();
    let args = [
        "--config",
        dir.to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let (_rls, lines) = Rls::start_reading(&args, 2);
    let checks = lines[0].strip_prefix("listening on http://").unwrap();
    let metrics = metrics_addr(&lines[1]);

    assert_eq!(
        http(checks, "GET", "/healthcheck", ""),
        (200, "OK".to_owned())
    );
    // key2_value2: 30 a minute. The JSON of envoyproxy/ratelimit's /json:
    // 200 while OK, 429 once over.
    let body = json_call("test-domain", "key2", "value2");
    for remaining in (0..30).rev() {
        let (status, answer) = http(checks, "POST", "/json", &body);
        assert_eq!(status, 200, "{answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["overallCode"], "OK");
        let status = &answer["statuses"][0];
        assert_eq!(status["currentLimit"]["requestsPerUnit"], 30);
        assert_eq!(status["currentLimit"]["unit"], "MINUTE");
        // Left out at 0, as protobuf's JSON mapping leaves defaults out.
        match remaining {
            0 => assert_eq!(status.get("limitRemaining"), None),
            n => assert_eq!(status["limitRemaining"], n),
        }
        assert!(
            status["durationUntilReset"]
                .as_str()
                .unwrap()
                .ends_with('s')
        );
    }
    let (status, answer) = http(checks, "POST", "/json", &body);
    assert_eq!(status, 429, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["overallCode"], "OVER_LIMIT");
    assert!(
        answer["responseHeadersToAdd"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["key"] == "Retry-After")
    );
    // Not a request, or one the service refuses: 400, saying why.
    let (status, answer) = http(checks, "POST", "/json", r#"{"domian": "x"}"#);
    assert_eq!(status, 400);
    assert!(answer.contains("domian"), "{answer}");
    let (status, answer) = http(checks, "POST", "/json", r#"{"descriptors": []}"#);
    assert_eq!(status, 400);
    assert!(answer.contains("domain"), "{answer}");

    // detailed_metric (example.yaml's `unspec`, 2 a minute): a series per
    // value; every other rule one series.
    for value in ["a", "a", "a", "b"] {
        http(checks, "POST", "/json", &json_call("rl", "unspec", value));
    }
    // A descriptor's own limit: counted under the domain's `override`.
    let overridden = r#"{"domain": "test-domain", "descriptors": [{"entries": [{"key": "k", "value": "v"}], "limit": {"requestsPerUnit": 5, "unit": "MINUTE"}}]}"#;
    assert_eq!(http(checks, "POST", "/json", overridden).0, 200);
    let routed = r#"{"domain": "named", "descriptors": [{"entries": [{"key": "route", "value": "/x"}, {"key": "user", "value": "u1"}]}]}"#;
    for _ in 0..2 {
        http(checks, "POST", "/json", routed);
    }

    let (status, text) = http(metrics, "GET", "/metrics", "");
    assert_eq!(status, 200);
    passes_a_real_parser(&text);
    let value = |text: &str, name: &str, rule: &str| {
        samples(text)
            .iter()
            .find(|s| s.name == name && has_labels(s, &[("rule", rule)]))
            .map_or(0.0, |s| s.value)
    };
    let key2 = "test-domain.key2_value2";
    assert_eq!(value(&text, "tollgate_rls_hits_total", key2), 31.0);
    assert_eq!(value(&text, "tollgate_rls_within_limit_total", key2), 30.0);
    assert_eq!(value(&text, "tollgate_rls_over_limit_total", key2), 1.0);
    // Past 80 % of 30 (24): the 25th to the 30th.
    assert_eq!(value(&text, "tollgate_rls_near_limit_total", key2), 6.0);
    assert_eq!(value(&text, "tollgate_rls_shadow_mode_total", key2), 0.0);
    assert_eq!(value(&text, "tollgate_rls_hits_total", "rl.unspec_a"), 3.0);
    assert_eq!(
        value(&text, "tollgate_rls_over_limit_total", "rl.unspec_a"),
        1.0
    );
    assert_eq!(value(&text, "tollgate_rls_hits_total", "rl.unspec_b"), 1.0);
    assert_eq!(value(&text, "tollgate_rls_hits_total", "rl.unspec"), 0.0);
    assert_eq!(
        value(&text, "tollgate_rls_hits_total", "test-domain.override"),
        1.0
    );
    // value_to_metric: the route's value named, the user's not.
    assert_eq!(
        value(&text, "tollgate_rls_hits_total", "named.route_/x.user"),
        2.0
    );
    assert_eq!(
        value(&text, "tollgate_rls_hits_total", "named.route.user"),
        0.0
    );

    // Bounded: 50 new values of a rule that is not detailed
    // (test-domain's `key2` default) add no series; they count under it.
    let rules = |text: &str| -> std::collections::BTreeSet<String> {
        samples(text)
            .into_iter()
            .filter(|s| s.name.starts_with("tollgate_rls_"))
            .filter_map(|s| s.labels.get("rule").cloned())
            .collect()
    };
    let before = rules(&text);
    assert!(before.contains("test-domain.key2"), "{before:?}");
    for n in 0..50 {
        http(
            checks,
            "POST",
            "/json",
            &json_call("test-domain", "key2", &format!("v{n}")),
        );
    }
    let (_, text) = http(metrics, "GET", "/metrics", "");
    assert_eq!(rules(&text), before);
    assert_eq!(
        value(&text, "tollgate_rls_hits_total", "test-domain.key2"),
        50.0
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A call of `domain` with one descriptor per `(key, value)` pair.
fn call_of(domain: &str, pairs: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: pairs
            .iter()
            .map(|(key, value)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: (*key).to_owned(),
                    value: (*value).to_owned(),
                }],
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_held_back_at_random_lose_no_count_of_a_call_charged_all_or_nothing() {
    clear_of_a_minute_boundary();
    let redis = RedisServer::start();
    // Half of Redis's replies held 30 to 40 ms, in order, on every
    // connection of every process.
    let upstream: std::net::SocketAddr = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let proxy = JitterProxy::start(upstream, Jitter::HALF_HELD_30_40_MS, 61);
    let url = format!("redis://{}", proxy.addr());
    let dir = std::env::temp_dir().join(format!("tollgate-rls-jitter-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // `narrow` refuses after 20 a minute; `wide` (1,000) never does, so
    // every refused call's charge of `wide` must be given back.
    std::fs::write(
        dir.join("j.yaml"),
        "domain: j\ndescriptors:\n  - key: narrow\n    rate_limit: {unit: minute, requests_per_unit: 20}\n  \
         - key: wide\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n",
    )
    .unwrap();
    let args = [
        "--config",
        dir.to_str().unwrap(),
        "--store",
        url.as_str(),
        // Late replies are waited for, not given up on: what is checked
        // is that none is lost or counted twice.
        "--store-timeout-ms",
        "5000",
    ];
    let processes: Vec<Rls> = (0..4).map(|_| Rls::start(&args)).collect();
    let mut tasks = Vec::new();
    for rls in &processes {
        let mut client = rls.client().await;
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..25 {
                let call = call_of("j", &[("narrow", "x"), ("wide", "x")]);
                let response = client.should_rate_limit(call).await.unwrap().into_inner();
                admitted += usize::from(response.overall_code == Code::Ok as i32);
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert_eq!(admitted, 20, "exactly `narrow`'s limit over 100 calls");
    assert!(proxy.held() > 0, "the proxy held replies back");
    // Every refused call gave `wide` its charge back (each give-back lands
    // in its own time: waited for). 20 kept, and this call's own: 979.
    let mut client = processes[0].client().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let remaining = loop {
        let response = client
            .should_rate_limit(call_of("j", &[("wide", "x")]))
            .await
            .unwrap()
            .into_inner();
        let remaining = response.statuses[0].limit_remaining;
        // Give back this probe's own charge before asking again.
        let mut give_back = call_of("j", &[("wide", "x")]);
        give_back.descriptors[0].is_negative_hits = true;
        client.should_rate_limit(give_back).await.unwrap();
        if remaining == 979 || Instant::now() > deadline {
            break remaining;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        remaining, 979,
        "wide: 1,000 less the 20 admitted and the probe"
    );
    drop(processes);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--near-limit-ratio`, envoyproxy/ratelimit's NEAR_LIMIT_RATIO: hits
/// admitted past that share of a limit count as near it; a ratio outside
/// 0 to 1 is a usage error.
#[test]
fn the_near_limit_ratio_moves_the_near_limit_count() {
    clear_of_a_minute_boundary();
    let config = fixture("basic_config.yaml");
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--near-limit-ratio",
        "0.5",
    ];
    let (_rls, lines) = Rls::start_reading(&args, 2);
    let checks = lines[0].strip_prefix("listening on http://").unwrap();
    let metrics = metrics_addr(&lines[1]);
    // key2_value2: 30 a minute; past half of it (15): the 16th to the 20th.
    let body = json_call("test-domain", "key2", "value2");
    for _ in 0..20 {
        assert_eq!(http(checks, "POST", "/json", &body).0, 200);
    }
    let (_, text) = http(metrics, "GET", "/metrics", "");
    let near = samples(&text)
        .into_iter()
        .find(|s| {
            s.name == "tollgate_rls_near_limit_total"
                && has_labels(s, &[("rule", "test-domain.key2_value2")])
        })
        .map(|s| s.value);
    assert_eq!(near, Some(5.0));

    for bad in ["1.5", "-0.1", "x"] {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate-rls"))
            .args(["--grpc", "127.0.0.1:0", "--config"])
            .arg(&config)
            .arg(format!("--near-limit-ratio={bad}"))
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("from 0 to 1"), "{bad}: {stderr}");
    }
}

/// The binary answers RLQS on its gRPC listener, from the same rules, and
/// its `/metrics` carries the quota series: what was reported, what was
/// granted, and how many data planes report, back to 0 when the stream
/// closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_quota_streams_and_their_metrics() {
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
        BucketId, RateLimitQuotaUsageReports,
    };
    use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;

    let config = fixture("basic_config.yaml");
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let (rls, lines) = Rls::start_reading(&args, 1);
    let metrics = metrics_addr(&lines[0]).to_owned();
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{}", rls.addr))
        .await
        .unwrap();
    let (reports, outgoing) = tokio::sync::mpsc::channel(4);
    let mut answers = client
        .stream_rate_limit_quotas(tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(
            outgoing,
        ))
        .await
        .unwrap()
        .into_inner();
    // key2_value2: 30 a minute in basic_config.yaml.
    reports
        .send(RateLimitQuotaUsageReports {
            domain: "test-domain".to_owned(),
            bucket_quota_usages: vec![BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: [("key2".to_owned(), "value2".to_owned())].into(),
                }),
                time_elapsed: None,
                num_requests_allowed: 4,
                num_requests_denied: 2,
            }],
        })
        .await
        .unwrap();
    let answer = answers.message().await.unwrap().unwrap();
    let Some(BucketAction::QuotaAssignmentAction(assigned)) =
        &answer.bucket_action[0].bucket_action
    else {
        panic!("{answer:?}");
    };
    // Three reporting intervals (Envoy's 5 s until the stream shows
    // another): longer than the interval, renewed by each report.
    assert_eq!(assigned.assignment_time_to_live.unwrap().seconds, 15);
    let Some(Strategy::TokenBucket(bucket)) = assigned.rate_limit_strategy.unwrap().strategy else {
        panic!("{answer:?}");
    };
    let value = |text: &str, name: &str| {
        samples(text)
            .into_iter()
            .find(|s| s.name == name && has_labels(s, &[("rule", "test-domain.key2_value2")]))
            .map(|s| s.value)
    };
    let (_, text) = http(&metrics, "GET", "/metrics", "");
    passes_a_real_parser(&text);
    assert_eq!(
        value(&text, "tollgate_rlqs_reported_allowed_total"),
        Some(4.0)
    );
    assert_eq!(
        value(&text, "tollgate_rlqs_reported_denied_total"),
        Some(2.0)
    );
    assert_eq!(value(&text, "tollgate_rlqs_data_planes"), Some(1.0));
    assert_eq!(
        value(&text, "tollgate_rlqs_granted_per_window"),
        Some(f64::from(bucket.tokens_per_fill.unwrap().value))
    );
    // The stream closed: no data plane, nothing granted.
    drop(reports);
    drop(answers);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let (_, text) = http(&metrics, "GET", "/metrics", "");
        if value(&text, "tollgate_rlqs_data_planes") == Some(0.0) {
            assert_eq!(value(&text, "tollgate_rlqs_granted_per_window"), Some(0.0));
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
