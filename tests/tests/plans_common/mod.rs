//! Per-key plans that a test changes, a layer that reads them, and the
//! scenarios every store must pass (`mod plans_common;` in each file).

// Each test file uses some of these.
#![allow(dead_code)]

use http::{Request, StatusCode};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate::quotas::{KeyQuotas, QuotaAnswer, quota_fn};
use tollgate::{HeaderKey, Key, RateLimitLayer, Store};
use tollgate_core::{Algorithm, Quota};
use tollgate_tests::app::{App, behind};
use tower::ServiceExt;

/// Plans by key, changed by the test.
#[derive(Clone, Default)]
pub struct Plans(Arc<Mutex<HashMap<String, String>>>);

impl Plans {
    pub fn set(&self, key: &str, quota: &str) {
        self.0.lock().unwrap().insert(key.into(), quota.into());
    }

    pub fn quotas(&self) -> KeyQuotas {
        let plans = self.0.clone();
        KeyQuotas::new(quota_fn(move |key| {
            let key = String::from_utf8(key.to_bytes()).unwrap_or_default();
            let text = plans.lock().unwrap().get(&key).cloned();
            text.unwrap_or_default().parse::<QuotaAnswer>().unwrap()
        }))
        .ttl(Duration::from_secs(86_400))
    }
}

pub fn app(store: impl Store, algorithm: Algorithm, quotas: &KeyQuotas) -> App {
    behind(
        RateLimitLayer::builder()
            .quota("api", Quota::per_minute(1000))
            .algorithm(algorithm)
            .key(HeaderKey::new("x-api-key"))
            .store(store)
            .store_timeout(Duration::from_secs(2))
            .quota_source(quotas.clone())
            .build(),
    )
}

/// One request for `key`: status, `r` of the first limit, Retry-After.
pub async fn send(app: &App, key: &str) -> (StatusCode, u64, Option<u64>) {
    let request = Request::builder()
        .header("x-api-key", key)
        .body(())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let field = header("ratelimit").unwrap_or_default();
    let r = field
        .split(';')
        .find_map(|p| p.trim().strip_prefix("r="))
        .map_or(0, |r| r.parse().unwrap());
    let retry = header("retry-after").map(|v| v.parse().unwrap());
    (response.status(), r, retry)
}

pub async fn statuses(app: &App, key: &str, n: usize) -> Vec<StatusCode> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(send(app, key).await.0);
    }
    out
}

/// `app` over `shared` as the test case `mode` names it: the shared
/// store itself (any name but these two), or local-first over it,
/// `"exact"` or `"periodic"`.
pub fn app_in_mode<S: tollgate_local::SharedStore>(
    mode: &str,
    shared: S,
    algorithm: Algorithm,
    quotas: &KeyQuotas,
) -> App {
    use tollgate_local::{LocalFirst, LocalMode};
    match mode {
        "exact" => app(
            LocalFirst::builder(shared, LocalMode::Exact).build(),
            algorithm,
            quotas,
        ),
        "periodic" => app(
            LocalFirst::builder(shared, LocalMode::periodic()).build(),
            algorithm,
            quotas,
        ),
        _ => app(shared, algorithm, quotas),
    }
}

/// The algorithms a layer decides at once (the leaky bucket holds its
/// requests, so a burst of them waits: its carry is the core's, tested
/// there and in `crates/tollgate/tests/carry.rs`).
pub const AT_ONCE: [Algorithm; 7] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::TokenBucketInterval,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
    Algorithm::SlidingWindow,
    Algorithm::SlidingWindowBuckets,
];

/// A debt survives a downgrade and an upgrade (issue 58's figure, per
/// hour so that no window ends during it on a real clock): 8 used of
/// 10, lowered to 5 (refused: 3 past it), raised to 20: the next request
/// leaves 11. `key` must be fresh on this app's store.
pub async fn debt_is_kept(case: &str, app: &App, quotas: &KeyQuotas, plans: &Plans, key: &str) {
    plans.set(key, "10/h");
    assert_eq!(statuses(app, key, 8).await, [StatusCode::OK; 8], "{case}");
    plans.set(key, "5/h");
    quotas.invalidate(&Key::from(key));
    let (status, r, retry) = send(app, key).await;
    assert_eq!(
        (status, r),
        (StatusCode::TOO_MANY_REQUESTS, 0),
        "{case}: lowered"
    );
    assert!(retry.is_some_and(|s| s > 0), "{case}: a Retry-After");
    plans.set(key, "20/h");
    quotas.invalidate(&Key::from(key));
    let (status, r, _) = send(app, key).await;
    assert_eq!(
        (status, r),
        (StatusCode::OK, 11),
        "{case}: raised, 8 + 1 used of 20"
    );
}

/// A limit left out of a key's plan for a moment keeps its usage (issue
/// 58): 3 used of the plan's second limit (5 an hour); the plan without
/// it for one request; back: 2 more admitted, then refused. `key` must be
/// fresh on this app's store.
pub async fn a_left_out_limit_keeps_its_usage(
    case: &str,
    app: &App,
    quotas: &KeyQuotas,
    plans: &Plans,
    key: &str,
) {
    plans.set(key, "1000/h;5/h");
    assert_eq!(statuses(app, key, 3).await, [StatusCode::OK; 3], "{case}");
    plans.set(key, "1000/h");
    quotas.invalidate(&Key::from(key));
    let (status, r, _) = send(app, key).await;
    assert_eq!((status, r), (StatusCode::OK, 996), "{case}: left out");
    plans.set(key, "1000/h;5/h");
    quotas.invalidate(&Key::from(key));
    let expected = [
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
    ];
    assert_eq!(statuses(app, key, 3).await, expected, "{case}: put back");
}

/// A process of the app: limit "api" at `quota` under `algorithm`, keyed
/// by `x-api-key`, over `store`.
pub fn process(store: impl Store, algorithm: Algorithm, quota: Quota) -> App {
    behind(
        RateLimitLayer::builder()
            .quota("api", quota)
            .algorithm(algorithm)
            .key(HeaderKey::new("x-api-key"))
            .store(store)
            .build(),
    )
}

/// 8 used of 10 an hour; restarted at 5 an hour: refused (3 past it);
/// restarted at 20 an hour: 11 left after the next request. And a
/// restart at the same quota changes nothing.
/// `start(algorithm, per_hour)` starts a process over the store under
/// test, the same storage each time. Every algorithm `supports` takes.
pub async fn debt_survives_restarts(
    case: &str,
    start: impl AsyncFn(Algorithm, u64) -> App,
    key: &str,
) {
    for algorithm in AT_ONCE {
        let case = format!("{case} {algorithm}");
        let key = format!("{key}-{algorithm}");
        let first = start(algorithm, 10).await;
        assert_eq!(
            statuses(&first, &key, 8).await,
            [StatusCode::OK; 8],
            "{case}"
        );
        let again = start(algorithm, 10).await;
        assert_eq!(send(&again, &key).await.1, 1, "{case}: same quota, 9 used");
        let lowered = start(algorithm, 5).await;
        let (status, r, retry) = send(&lowered, &key).await;
        assert_eq!((status, r), (StatusCode::TOO_MANY_REQUESTS, 0), "{case}");
        assert!(retry.is_some(), "{case}: a Retry-After");
        let raised = start(algorithm, 20).await;
        let (status, r, _) = send(&raised, &key).await;
        assert_eq!(
            (status, r),
            (StatusCode::OK, 10),
            "{case}: 9 + 1 used of 20"
        );
    }
}

/// The figures for GCRA: 10 used of 100 an hour, restarted at
/// 1,000 an hour: 989 left after the next request; restarted at 5 an
/// hour instead: refused for 4,320 s (10 used of 5: a unit back every
/// 720 s, six of them before one fits), never an hour's block from a
/// raised quota.
pub async fn gcra_figures(case: &str, start: impl AsyncFn(Algorithm, u64) -> App, key: &str) {
    let start = async |per_hour| start(Algorithm::Gcra, per_hour).await;
    let first = start(100).await;
    for name in ["up", "down"] {
        let key = format!("{key}-{name}");
        assert_eq!(statuses(&first, &key, 10).await, [StatusCode::OK; 10]);
    }
    let (status, r, _) = send(&start(1_000).await, &format!("{key}-up")).await;
    assert_eq!((status, r), (StatusCode::OK, 989), "{case}: raised");
    let (status, _, retry) = send(&start(5).await, &format!("{key}-down")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{case}: lowered");
    assert_eq!(retry, Some(4_320), "{case}: lowered");
}

/// The leaky bucket across restarts, on the store itself (a layer holds
/// its requests until their slots): 8 admitted of 10 an hour, read by a
/// store configured at 20 an hour, has 12 left (11 after the next
/// request); at 5 an hour, nothing. `store(per_hour)` is a fresh store
/// over the storage under test, and `policy(per_hour)` the limit as it
/// configures it.
pub async fn leaky_bucket_survives_restarts<S: Store>(
    case: &str,
    store: impl AsyncFn(u64) -> S,
    key: &str,
) {
    let policy = |per_hour| {
        Arc::new(tollgate::Policy::new(vec![
            tollgate::NamedLimit::new("api", Quota::per_hour(per_hour))
                .with_algorithm(Algorithm::LeakyBucket),
        ]))
    };
    let key = Key::from(key);
    let first = store(10).await;
    for _ in 0..8 {
        let decision = first.check(&policy(10), &key, 1).resolve().await.unwrap();
        assert!(decision.merged().allowed(), "{case}");
    }
    let lowered = store(5).await;
    let decision = lowered.check(&policy(5), &key, 1).resolve().await.unwrap();
    assert!(!decision.merged().allowed(), "{case}: 8 used of 5");
    let raised = store(20).await;
    let decision = raised.check(&policy(20), &key, 1).resolve().await.unwrap();
    let decision = decision.merged();
    assert!(decision.allowed(), "{case}");
    assert_eq!(decision.remaining(), 11, "{case}: 8 + 1 used of 20");
}

/// A PostgreSQL backend on `server`, its schema made, a small pool.
pub async fn postgres_backend(
    server: &tollgate_tests::postgres::PostgresServer,
) -> tollgate_postgres::PostgresBackend {
    tollgate_postgres::PostgresBackend::builder(server.url())
        .create_schema(true)
        .pool_size(2)
        .connect()
        .await
        .unwrap()
}
