//! Shadow limits, for the whole layer and per named limit: decided and
//! counted exactly as if enforced, never refused, responses left as they
//! are, each would-be refusal counted and logged at most once per interval
//! per limit. On the memory store, Redis and the local-first store (exact
//! and periodic), whose shadow checks answer later, on a task of their own.
//! Its own test binary: the log capture is per thread, and `tracing`
//! caches whether a call site is wanted.
#![cfg(feature = "metrics")]

use http::{HeaderMap, Request, Response, StatusCode};
use std::convert::Infallible;
use std::time::Duration;
use tollgate::store::BoxStore;
use tollgate::{GlobalKey, MemoryStore, NamedLimit, RateLimitLayer, settings::ChargeWhen};
use tollgate_core::Quota;
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::logs::Captured;
use tollgate_tests::metrics::Counts;
use tollgate_tests::redis::RedisServer;
use tower::{Service, ServiceBuilder, ServiceExt};

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

/// Which store a test runs on.
#[derive(Clone, Copy, Debug)]
enum On {
    Memory,
    Redis,
    Exact,
    Periodic,
}

const EVERY_STORE: [On; 4] = [On::Memory, On::Redis, On::Exact, On::Periodic];

/// A fresh store of kind `on` (over `redis` for the Redis kinds).
async fn store(on: On, redis: &RedisServer) -> BoxStore {
    let shared = || RedisStore::connect(redis.url());
    match on {
        On::Memory => BoxStore::new(MemoryStore::new()),
        On::Redis => BoxStore::new(shared().await.unwrap()),
        On::Exact => {
            BoxStore::new(LocalFirst::builder(shared().await.unwrap(), LocalMode::Exact).build())
        }
        On::Periodic => {
            let mode = LocalMode::Periodic {
                sync_interval: Duration::from_millis(50),
            };
            BoxStore::new(LocalFirst::builder(shared().await.unwrap(), mode).build())
        }
    }
}

/// Sends `n` requests through `layer`, one after the other: each status,
/// headers and body.
async fn send_all(
    layer: RateLimitLayer<GlobalKey, BoxStore>,
    n: usize,
) -> Vec<(StatusCode, HeaderMap, String)> {
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    let mut answers = Vec::new();
    for _ in 0..n {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap();
        let (parts, body) = response.into_parts();
        answers.push((parts.status, parts.headers, body));
    }
    answers
}

/// Runs `test` on a runtime of this thread, with `counts` as its metrics
/// recorder: the shadow checks a store answers later run as tasks of the
/// same runtime, so they count there too.
fn counted<F: std::future::Future<Output = ()>>(counts: &Counts, test: F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(counts, || runtime.block_on(test));
}

/// Waits (boundedly) until `counted` is true: shadow checks that a store
/// answers later are counted when their task hears the answer.
async fn settled(counted: impl Fn() -> bool) {
    for _ in 0..500 {
        if counted() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn decisions(counts: &Counts, limit: &str, outcome: &str) -> u64 {
    counts.get(&format!(
        "tollgate_decisions_total{{limit={limit},decision={outcome}}}"
    ))
}

#[test]
fn a_layer_in_shadow_refuses_nothing_and_leaves_responses_as_they_are() {
    let redis = RedisServer::start();
    for on in EVERY_STORE {
        let counts = Counts::default();
        let (logs, _guard) = Captured::install();
        counted(&counts, async {
            let (unlimited, body) = ok(Request::new(())).await.unwrap().into_parts();
            let unlimited = [(unlimited.status, unlimited.headers, body)];
            let layer = RateLimitLayer::builder()
                .quota(format!("api-{on:?}").to_lowercase(), Quota::per_minute(5))
                .key(GlobalKey)
                .store(store(on, &redis).await)
                .shadow(true)
                .build();
            let answers = send_all(layer, 20).await;
            for answer in &answers {
                // The bytes of an unlimited response: status, headers, body.
                assert_eq!(answer, &unlimited[0], "{on:?}");
            }
        });
        let limit = format!("api-{on:?}").to_lowercase();
        assert_eq!(decisions(&counts, &limit, "allowed"), 5, "{on:?}");
        assert_eq!(decisions(&counts, &limit, "shadow_limited"), 15, "{on:?}");
        assert_eq!(decisions(&counts, &limit, "limited"), 0, "{on:?}");
        // One line for the 15, not one each (the interval is 10 s).
        let lines: Vec<String> = logs
            .lines()
            .into_iter()
            .filter(|line| line.contains("shadow") && line.contains(&limit))
            .collect();
        assert_eq!(lines.len(), 1, "{on:?}: {lines:#?}");
        assert!(lines[0].starts_with("INFO"), "{lines:#?}");
    }
}

#[test]
fn a_shadow_limit_beside_an_enforced_one_refuses_only_by_the_enforced_one() {
    let redis = RedisServer::start();
    for on in EVERY_STORE {
        let counts = Counts::default();
        let (logs, _guard) = Captured::install();
        let (enforced, shadow) = (format!("api-{on:?}"), format!("next-{on:?}"));
        counted(&counts, async {
            let layer = RateLimitLayer::builder()
                .limit(NamedLimit::new(enforced.clone(), Quota::per_minute(10)))
                .limit(NamedLimit::new(shadow.clone(), Quota::per_minute(3)).shadow())
                .key(GlobalKey)
                .store(store(on, &redis).await)
                .build();
            let answers = send_all(layer, 12).await;
            let statuses: Vec<u16> = answers.iter().map(|a| a.0.as_u16()).collect();
            assert_eq!(
                statuses,
                [[200; 10].as_slice(), &[429; 2]].concat(),
                "{on:?}"
            );
            for (_, headers, _) in &answers {
                let policy = headers["ratelimit-policy"].to_str().unwrap();
                assert!(policy.contains(&enforced), "{policy}");
                assert!(!policy.contains(&shadow), "{on:?}: {policy}");
            }
            settled(|| {
                decisions(&counts, &shadow, "allowed")
                    + decisions(&counts, &shadow, "shadow_limited")
                    >= 10
            })
            .await;
        });
        assert_eq!(decisions(&counts, &enforced, "allowed"), 10, "{on:?}");
        assert_eq!(decisions(&counts, &enforced, "limited"), 2, "{on:?}");
        // Checked for the 10 the enforced limit admitted only: 3 within
        // its limit, 7 it would have refused (uncharged).
        assert_eq!(decisions(&counts, &shadow, "allowed"), 3, "{on:?}");
        assert_eq!(decisions(&counts, &shadow, "shadow_limited"), 7, "{on:?}");
        let lines = logs.lines();
        let about_shadow = lines.iter().filter(|l| l.contains(&shadow)).count();
        assert_eq!(about_shadow, 1, "{on:?}: {lines:#?}");
    }
}

#[test]
fn a_route_of_shadow_limits_only_lets_everything_through() {
    let counts = Counts::default();
    counted(&counts, async {
        let layer = RateLimitLayer::builder()
            .limit(NamedLimit::new("only", Quota::per_minute(2)).shadow())
            .key(GlobalKey)
            .store(BoxStore::new(MemoryStore::new()))
            .build();
        let answers = send_all(layer, 5).await;
        assert!(answers.iter().all(|a| a.0 == StatusCode::OK));
        assert!(answers.iter().all(|a| !a.1.contains_key("ratelimit")));
    });
    assert_eq!(decisions(&counts, "only", "allowed"), 2);
    assert_eq!(decisions(&counts, "only", "shadow_limited"), 3);
}

#[test]
fn a_shadow_limit_with_charge_when_is_refused_at_build_with_the_fix() {
    let error = RateLimitLayer::builder()
        .limit(NamedLimit::new("api", Quota::per_minute(10)))
        .limit(NamedLimit::new("next", Quota::per_minute(3)).shadow())
        .charge_when(ChargeWhen::statuses("4xx").unwrap())
        .try_build()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("shadow") && error.contains("charge_when"),
        "{error}"
    );
    assert!(error.contains("RateLimitBuilder::shadow"), "{error}");
}
