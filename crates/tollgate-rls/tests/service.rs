//! `ShouldRateLimit` through a real tonic client and server on loopback,
//! over the memory store, with envoyproxy/ratelimit's fixtures: the codes,
//! each descriptor's status, shadow mode, `replaces`, unlimited rules,
//! hits, a call charged all or nothing, and bad calls.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Struct, UInt64Value, Value as PbValue};
use std::path::Path;
use tollgate_rls::config::Config;
use tollgate_rls::{OnStoreError, RateLimitServer, ResponseHeaders};
use tollgate_store::MemoryStore;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};

type Client = RateLimitServiceClient<Channel>;

/// Waits, if a minute is about to end, until it has: the rules count in
/// windows aligned to the minute, and a test's few calls must fall in one.
async fn clear_of_a_minute_boundary() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into = now.as_millis() % 60_000;
    if into > 50_000 {
        let left = 60_000 - into + 100;
        tokio::time::sleep(std::time::Duration::from_millis(left as u64)).await;
    }
}

fn config(fixture: &str) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/envoy-ratelimit")
        .join(fixture);
    Config::load(&path).unwrap()
}

/// A server of `fixture` over a fresh memory store, and a client of it.
async fn serve(fixture: &str) -> Client {
    clear_of_a_minute_boundary().await;
    let server = RateLimitServer::new(config(fixture), MemoryStore::new());
    start(server).await
}

/// `server` on a loopback port, and a client of it.
async fn start<St: tollgate_store::Store>(server: RateLimitServer<St>) -> Client {
    let service = server.into_service();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

fn descriptor(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

async fn call(
    client: &mut Client,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
) -> RateLimitResponse {
    let request = RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    };
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
}

fn code(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).unwrap()
}

/// The value of the field `name` Envoy is asked to add, if any.
fn field<'r>(response: &'r RateLimitResponse, name: &str) -> Option<&'r str> {
    response
        .response_headers_to_add
        .iter()
        .find(|header| header.key == name)
        .map(|header| header.value.as_str())
}

/// A protobuf `Struct` as JSON, to compare with `serde_json::json!`.
fn json(fields: &Struct) -> serde_json::Value {
    serde_json::Value::Object(
        fields
            .fields
            .iter()
            .map(|(key, value)| (key.clone(), json_value(value)))
            .collect(),
    )
}

fn json_value(value: &PbValue) -> serde_json::Value {
    match value.kind.as_ref().unwrap() {
        Kind::NullValue(_) => serde_json::Value::Null,
        Kind::NumberValue(n) => serde_json::json!(n),
        Kind::StringValue(s) => serde_json::json!(s),
        Kind::BoolValue(b) => serde_json::json!(b),
        Kind::StructValue(fields) => json(fields),
        Kind::ListValue(list) => list.values.iter().map(json_value).collect(),
    }
}

/// The `t` of a `RateLimit` item.
fn t_of(state: &str) -> u64 {
    state.rsplit("t=").next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_rule_admits_its_requests_per_unit_then_says_over_limit() {
    let mut client = serve("basic_config.yaml").await;
    let key2 = || vec![descriptor(&[("key2", "value2")])];
    for expected_remaining in (0..30).rev() {
        let response = call(&mut client, "test-domain", key2()).await;
        assert_eq!(code(&response), Code::Ok);
        let status = &response.statuses[0];
        assert_eq!(status.limit_remaining, expected_remaining);
        let limit = status.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (30, Unit::Minute as i32)
        );
        let reset = status.duration_until_reset.unwrap();
        assert!(
            reset.seconds <= 60 && (reset.seconds, reset.nanos) > (0, 0),
            "{reset:?}"
        );
        // The draft's fields, for Envoy to add to the client's response:
        // the rule's quota, and what remains of it.
        assert_eq!(
            field(&response, "RateLimit-Policy"),
            Some("\"test-domain.key2_value2\";q=30;w=60")
        );
        let state = field(&response, "RateLimit").unwrap();
        let prefix = format!("\"test-domain.key2_value2\";r={expected_remaining};t=");
        assert!(state.starts_with(&prefix), "{state}");
        assert!((1..=60).contains(&t_of(state)), "{state}");
        assert_eq!(field(&response, "Retry-After"), None);
    }
    let refused = call(&mut client, "test-domain", key2()).await;
    assert_eq!(code(&refused), Code::OverLimit);
    let status = &refused.statuses[0];
    assert_eq!(
        (Code::try_from(status.code).unwrap(), status.limit_remaining),
        (Code::OverLimit, 0)
    );
    // When the window ends, and never 0.
    let retry: u64 = field(&refused, "Retry-After").unwrap().parse().unwrap();
    let reset = status.duration_until_reset.unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert!(retry >= reset.seconds as u64, "{retry} before {reset:?}");
    // Another value of the same key has a count of its own, under the
    // key's default rule.
    let other = call(
        &mut client,
        "test-domain",
        vec![descriptor(&[("key2", "other")])],
    )
    .await;
    assert_eq!(other.statuses[0].limit_remaining, 19);
}

#[tokio::test]
async fn no_rule_unlimited_and_named_rules_answer_as_that_server_does() {
    let mut client = serve("basic_config.yaml").await;
    // No rule: OK and nothing else.
    let none = call(
        &mut client,
        "test-domain",
        vec![descriptor(&[("key1", "value1")])],
    )
    .await;
    assert_eq!(code(&none), Code::Ok);
    assert_eq!(none.statuses[0].current_limit, None);
    assert_eq!(none.statuses[0].limit_remaining, 0);
    // An unknown domain: no rule.
    let unknown = call(&mut client, "nowhere", vec![descriptor(&[("key2", "x")])]).await;
    assert_eq!(code(&unknown), Code::Ok);
    // Unlimited: OK with everything remaining, however often.
    for _ in 0..3 {
        let unlimited = call(
            &mut client,
            "test-domain",
            vec![descriptor(&[("key6", "x")])],
        )
        .await;
        assert_eq!(unlimited.statuses[0].limit_remaining, u32::MAX);
    }
    // A named rule says its name.
    let named = call(
        &mut client,
        "test-domain",
        vec![descriptor(&[("key4", "x")])],
    )
    .await;
    assert_eq!(
        named.statuses[0].current_limit.as_ref().unwrap().name,
        "key4_rate_limit"
    );
}

#[tokio::test]
async fn shadow_mode_counts_but_never_refuses() {
    let mut client = serve("shadowmode_config.yaml").await;
    for i in 0..25 {
        let response = call(
            &mut client,
            "test-domain",
            vec![descriptor(&[("key2", "x")])],
        )
        .await;
        assert_eq!(code(&response), Code::Ok, "call {i}");
        assert_eq!(response.statuses[0].code, Code::Ok as i32);
        // A rule in shadow shows in no field.
        assert!(response.response_headers_to_add.is_empty(), "{response:?}");
    }
}

#[tokio::test]
async fn a_call_is_charged_all_or_nothing() {
    let mut client = serve("basic_config.yaml").await;
    // key4 is 1 a day: spent by the first call.
    let key4 = || descriptor(&[("key4", "x")]);
    let key2 = || descriptor(&[("key2", "value2")]);
    assert_eq!(
        code(&call(&mut client, "test-domain", vec![key4()]).await),
        Code::Ok
    );
    for _ in 0..3 {
        let both = call(&mut client, "test-domain", vec![key2(), key4()]).await;
        assert_eq!(code(&both), Code::OverLimit);
        // key2 admitted it alone, and was given it back: its remaining
        // says so.
        assert_eq!(both.statuses[0].code, Code::Ok as i32);
        assert_eq!(both.statuses[0].limit_remaining, 30);
        assert_eq!(both.statuses[1].code, Code::OverLimit as i32);
    }
    // Nothing of the three refused calls stayed charged in key2.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let alone = call(&mut client, "test-domain", vec![key2()]).await;
    assert_eq!(alone.statuses[0].limit_remaining, 29);
}

#[tokio::test]
async fn hits_come_from_the_descriptor_else_the_call() {
    let mut client = serve("basic_config.yaml").await;
    let request = RateLimitRequest {
        domain: "test-domain".to_owned(),
        descriptors: vec![descriptor(&[("key2", "value2")])],
        hits_addend: 10,
    };
    let response = client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.statuses[0].limit_remaining, 20);
    let mut own = descriptor(&[("key2", "value2")]);
    own.hits_addend = Some(UInt64Value { value: 15 });
    let request = RateLimitRequest {
        domain: "test-domain".to_owned(),
        descriptors: vec![own],
        hits_addend: 10,
    };
    let response = client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.statuses[0].limit_remaining, 5);
}

#[tokio::test]
async fn a_rule_another_replaces_counts_nothing() {
    let mut client = serve("example.yaml").await;
    // bkthomps (1/min, named) is replaced by the account rule in the same
    // call: its descriptor is answered as unlimited.
    let account = || descriptor(&[("category", "account")]);
    let bkthomps = || descriptor(&[("foo", "x"), ("bar", "bkthomps")]);
    for _ in 0..3 {
        let response = call(&mut client, "rl", vec![account(), bkthomps()]).await;
        assert_eq!(code(&response), Code::Ok);
        assert_eq!(response.statuses[1].limit_remaining, u32::MAX);
    }
    // Alone, it is its own 1 a minute.
    let alone = call(&mut client, "rl", vec![bkthomps()]).await;
    assert_eq!(alone.statuses[0].limit_remaining, 0);
    let again = call(&mut client, "rl", vec![bkthomps()]).await;
    assert_eq!(code(&again), Code::OverLimit);
}

#[tokio::test]
async fn a_rule_of_zero_refuses_every_call() {
    let mut client = serve("example.yaml").await;
    let banned = call(
        &mut client,
        "rl",
        vec![descriptor(&[("foo", "x"), ("bar", "banned")])],
    )
    .await;
    assert_eq!(code(&banned), Code::OverLimit);
    let reset = banned.statuses[0].duration_until_reset.unwrap();
    assert!((0..=60).contains(&reset.seconds), "{reset:?}");
}

#[tokio::test]
async fn a_call_without_a_domain_or_descriptors_is_an_invalid_argument() {
    let mut client = serve("basic_config.yaml").await;
    let no_domain = RateLimitRequest {
        domain: String::new(),
        descriptors: vec![descriptor(&[("key2", "x")])],
        hits_addend: 0,
    };
    let error = client.should_rate_limit(no_domain).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(error.message().contains("domain"), "{}", error.message());
    let no_descriptors = RateLimitRequest {
        domain: "test-domain".to_owned(),
        descriptors: Vec::new(),
        hits_addend: 0,
    };
    let error = client.should_rate_limit(no_descriptors).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn a_store_that_fails_is_answered_open_or_closed() {
    // Redis where none listens: every check fails at once.
    let failing = || {
        tollgate_redis::RedisStore::builder("redis://127.0.0.1:1")
            .connect_lazy()
            .unwrap()
    };
    let key2 = || {
        vec![
            descriptor(&[("key2", "value2")]),
            descriptor(&[("key6", "x")]),
        ]
    };
    let mut open = start(RateLimitServer::new(config("basic_config.yaml"), failing())).await;
    let answer = call(&mut open, "test-domain", key2()).await;
    assert_eq!(code(&answer), Code::Ok);
    assert_eq!(answer.statuses.len(), 2);
    assert!(answer.statuses.iter().all(|s| s.code == Code::Ok as i32));
    let closed_server = RateLimitServer::new(config("basic_config.yaml"), failing())
        .on_store_error(OnStoreError::Closed);
    let mut closed = start(closed_server).await;
    let answer = call(&mut closed, "test-domain", key2()).await;
    assert_eq!(code(&answer), Code::OverLimit);
    // A call with no rule needs no store: answered as ever.
    let none = call(
        &mut closed,
        "test-domain",
        vec![descriptor(&[("key1", "value1")])],
    )
    .await;
    assert_eq!(code(&none), Code::Ok);
}

#[tokio::test]
async fn a_descriptors_own_limit_overrides_the_configuration() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    let mut client = serve("basic_config.yaml").await;
    // key1=value1 has no rule of its own; key2=value2 has 30 a minute.
    for pairs in [[("key1", "value1")], [("key2", "value2")]] {
        let overridden = || {
            let mut own = descriptor(&pairs);
            own.limit = Some(RateLimitOverride {
                requests_per_unit: 2,
                unit: Unit::Minute as i32,
            });
            vec![own]
        };
        let codes: Vec<Code> = {
            let mut codes = Vec::new();
            for _ in 0..3 {
                codes.push(code(&call(&mut client, "test-domain", overridden()).await));
            }
            codes
        };
        assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit], "{pairs:?}");
        let answer = call(&mut client, "test-domain", overridden()).await;
        let limit = answer.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!((limit.requests_per_unit, limit.name.as_str()), (2, ""));
    }
    // A unit Envoy's enum does not name is the caller's error.
    let mut unknown = descriptor(&[("key1", "value1")]);
    unknown.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: 0,
    });
    let request = RateLimitRequest {
        domain: "test-domain".to_owned(),
        descriptors: vec![unknown],
        hits_addend: 0,
    };
    let error = client.should_rate_limit(request).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn quota_mode_refuses_a_call_only_when_every_quota_is_over() {
    let mut client = serve("example.yaml").await;
    // service_1: 1 a minute, service_2: 2 a minute, both in quota mode.
    let both = || {
        vec![
            descriptor(&[("service", "service_1")]),
            descriptor(&[("service", "service_2")]),
        ]
    };
    let first = call(&mut client, "rl", both()).await;
    assert_eq!(code(&first), Code::Ok);
    // No violation, and dynamic metadata not asked for: none.
    assert_eq!(first.dynamic_metadata, None);
    // service_1 is over, service_2 has room: the call passes, and the
    // status of service_1 says it is over.
    let second = call(&mut client, "rl", both()).await;
    assert_eq!(code(&second), Code::Ok);
    assert_eq!(second.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(second.statuses[1].code, Code::Ok as i32);
    // The violation, for the filters after Envoy's rate limit one: the
    // index of the quota over its limit; the call's descriptors; and the
    // `metadata` of the rule that passed (service_2's), not service_1's.
    let metadata = second.dynamic_metadata.as_ref().unwrap();
    assert_eq!(
        json(metadata)["quotaModeViolations"],
        serde_json::json!([0.0])
    );
    assert_eq!(json(metadata)["domain"], "rl");
    assert_eq!(
        json(metadata)["descriptors"],
        serde_json::json!([
            {"entries": ["service=service_1"]},
            {"entries": ["service=service_2"]},
        ])
    );
    assert_eq!(
        json(metadata)["metadata"],
        serde_json::json!({"service_with_quota": {"name": "service_2"}})
    );
    // Both over: refused.
    let third = call(&mut client, "rl", both()).await;
    assert_eq!(code(&third), Code::OverLimit);
    // Refused: no violation to hand on (the call says it), so no metadata.
    assert_eq!(third.dynamic_metadata, None);
    assert!(
        third
            .statuses
            .iter()
            .all(|s| s.code == Code::OverLimit as i32)
    );
    // A quota-mode rule alone, over: refused too.
    let alone = call(
        &mut client,
        "rl",
        vec![descriptor(&[("service", "service_1")])],
    )
    .await;
    assert_eq!(code(&alone), Code::OverLimit);
}

#[tokio::test]
async fn negative_hits_give_units_back() {
    let mut client = serve("basic_config.yaml").await;
    for _ in 0..5 {
        call(
            &mut client,
            "test-domain",
            vec![descriptor(&[("key2", "value2")])],
        )
        .await;
    }
    let mut back = descriptor(&[("key2", "value2")]);
    back.hits_addend = Some(UInt64Value { value: 3 });
    back.is_negative_hits = true;
    let answer = call(&mut client, "test-domain", vec![back]).await;
    assert_eq!(code(&answer), Code::Ok);
    assert_eq!(answer.statuses[0].limit_remaining, 28);
    let next = call(
        &mut client,
        "test-domain",
        vec![descriptor(&[("key2", "value2")])],
    )
    .await;
    assert_eq!(next.statuses[0].limit_remaining, 27);
}

/// A fixture, its domain, the descriptors of its calls (the last one
/// repeated), and what remains after each of two calls.
type Case = (
    &'static str,
    &'static str,
    &'static [&'static [(&'static str, &'static str)]],
    [u32; 2],
);

/// Each of envoyproxy/ratelimit's fixtures served on `store`: one call of a
/// descriptor each documents, twice, and what remains after each.
async fn fixtures_answer_on<St: tollgate_store::Store>(store: St) {
    clear_of_a_minute_boundary().await;
    let cases: [Case; 6] = [
        (
            "basic_config.yaml",
            "test-domain",
            &[&[("key2", "value2")]],
            [29, 28],
        ),
        (
            "wildcard.yaml",
            "test-domain",
            &[&[("wild", "foobar")]],
            [19, 18],
        ),
        // Two values under one shared wildcard: one count.
        (
            "integration_share_threshold.yaml",
            "share-threshold-test",
            &[&[("files", "files/a.txt")], &[("files", "files/b.txt")]],
            [9, 8],
        ),
        (
            "integration_another.yaml",
            "another",
            &[&[("key3", "x")]],
            [9, 8],
        ),
        (
            "shadowmode_config.yaml",
            "test-domain",
            &[&[("key2", "x")]],
            [19, 18],
        ),
        (
            "example.yaml",
            "rl",
            &[&[("foo", "x"), ("bar", "y")]],
            [2, 1],
        ),
    ];
    for (fixture, domain, calls, remaining) in cases {
        // One server per fixture: several name the domain `test-domain`.
        let server = RateLimitServer::new(config(fixture), store.clone());
        let mut client = start(server).await;
        for (i, expected) in remaining.into_iter().enumerate() {
            let pairs = calls[i.min(calls.len() - 1)];
            let answer = call(&mut client, domain, vec![descriptor(pairs)]).await;
            assert_eq!(code(&answer), Code::Ok, "{fixture}");
            assert_eq!(
                answer.statuses[0].limit_remaining, expected,
                "{fixture} call {i}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_answers_on_memory_redis_and_postgres() {
    fixtures_answer_on(MemoryStore::new()).await;
    let redis = tollgate_tests::redis::RedisServer::start();
    let store = tollgate_redis::RedisStore::connect(redis.url())
        .await
        .unwrap();
    fixtures_answer_on(store).await;
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let backend = tollgate_postgres::PostgresBackend::builder(postgres.url().as_str())
        .create_schema(true)
        .connect()
        .await
        .unwrap();
    fixtures_answer_on(tollgate_cas::CasStore::builder(backend).build()).await;
}

#[tokio::test]
async fn every_answer_carries_the_calls_metadata_when_asked() {
    clear_of_a_minute_boundary().await;
    let server =
        RateLimitServer::new(config("example.yaml"), MemoryStore::new()).dynamic_metadata(true);
    let mut client = start(server).await;
    let mut with_hits = descriptor(&[("service", "service_2")]);
    with_hits.hits_addend = Some(UInt64Value { value: 2 });
    let mut with_limit = descriptor(&[("any", "x")]);
    with_limit.limit = Some(
        envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride {
            requests_per_unit: 10,
            unit: Unit::Minute as i32,
        },
    );
    let request = RateLimitRequest {
        domain: "rl".to_owned(),
        descriptors: vec![descriptor(&[("qux", "any")]), with_hits, with_limit],
        hits_addend: 3,
    };
    let response = client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&response), Code::Ok);
    assert_eq!(
        json(response.dynamic_metadata.as_ref().unwrap()),
        serde_json::json!({
            "domain": "rl",
            "hitsAddend": 3.0,
            "descriptors": [
                {"entries": ["qux=any"]},
                {"entries": ["service=service_2"], "hitsAddend": 2.0},
                {"entries": ["any=x"], "limit": "requests_per_unit:10 unit:MINUTE"},
            ],
            "metadata": {"service_with_quota": {"name": "service_2"}},
        })
    );
}

/// Two rules a minute: `near` of 5, `far` of 30.
fn two_rules() -> Config {
    Config::from_yaml(
        "two.yaml",
        r#"
domain: two
descriptors:
  - key: near
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: far
    rate_limit: { unit: minute, requests_per_unit: 30 }
"#,
    )
    .unwrap()
}

#[tokio::test]
async fn the_legacy_fields_are_the_nearest_descriptors_when_asked() {
    clear_of_a_minute_boundary().await;
    let serve_with = |headers| async move {
        let server =
            RateLimitServer::new(two_rules(), MemoryStore::new()).response_headers(headers);
        start(server).await
    };
    // After two calls, `near` has 3 left of 5, `far` 28 of 30: `near` is
    // nearest its limit, wherever it stands in the call.
    let both = || vec![descriptor(&[("far", "a")]), descriptor(&[("near", "a")])];
    let mut legacy = serve_with(ResponseHeaders::Legacy).await;
    call(&mut legacy, "two", both()).await;
    let second = call(&mut legacy, "two", both()).await;
    assert_eq!(field(&second, "X-RateLimit-Limit"), Some("5"));
    assert_eq!(field(&second, "X-RateLimit-Remaining"), Some("3"));
    // The reset in whole seconds, rounded up: the status's time until the
    // minute's window ends.
    let reset = second.statuses[1].duration_until_reset.unwrap();
    let seconds = reset.seconds as u64 + u64::from(reset.nanos > 0);
    assert_eq!(
        field(&second, "X-RateLimit-Reset"),
        Some(seconds.to_string().as_str())
    );
    assert!((1..=60).contains(&seconds), "{seconds}");
    assert_eq!(field(&second, "RateLimit"), None);
    assert_eq!(field(&second, "RateLimit-Policy"), None);

    let mut both_sets = serve_with(ResponseHeaders::Both).await;
    let answer = call(&mut both_sets, "two", both()).await;
    assert_eq!(field(&answer, "X-RateLimit-Remaining"), Some("4"));
    assert!(field(&answer, "RateLimit").unwrap().contains("r=4"));

    let mut none = serve_with(ResponseHeaders::None).await;
    for _ in 0..6 {
        let answer = call(&mut none, "two", both()).await;
        assert!(answer.response_headers_to_add.is_empty(), "{answer:?}");
    }
}

#[tokio::test]
async fn the_legacy_fields_name_the_refused_descriptor_and_retry_after() {
    clear_of_a_minute_boundary().await;
    let server = RateLimitServer::new(two_rules(), MemoryStore::new())
        .response_headers(ResponseHeaders::Legacy);
    let mut client = start(server).await;
    // `far` spent: the refused descriptor is named, though `near` has
    // less room in itself than `far` had.
    for _ in 0..30 {
        call(&mut client, "two", vec![descriptor(&[("far", "a")])]).await;
    }
    let both = vec![descriptor(&[("near", "a")]), descriptor(&[("far", "a")])];
    let refused = call(&mut client, "two", both).await;
    assert_eq!(code(&refused), Code::OverLimit);
    assert_eq!(field(&refused, "X-RateLimit-Limit"), Some("30"));
    assert_eq!(field(&refused, "X-RateLimit-Remaining"), Some("0"));
    let reset: u64 = field(&refused, "X-RateLimit-Reset")
        .unwrap()
        .parse()
        .unwrap();
    let retry: u64 = field(&refused, "Retry-After").unwrap().parse().unwrap();
    // The minute's window ends within 60 s; the refused call may retry then.
    assert!((1..=60).contains(&reset), "{reset}");
    assert_eq!(retry, reset);
}
