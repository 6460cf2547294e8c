//! A quota changed across a restart reads the stored usage as a live
//! change would carry it (issue 58): each "process" here is a fresh
//! layer over a fresh store on the same backend, configured with another
//! quota for the same limit, as a redeploy is. On the compare-and-swap
//! store over its in-memory backend and over PostgreSQL, for every
//! algorithm a layer decides at once. (Redis: `redis_plans.rs`.)

use http::StatusCode;
use tollgate::{HeaderKey, RateLimitLayer, Store};
use tollgate_cas::{CasBackend, CasStore, MemoryBackend};
use tollgate_core::{Algorithm, Quota};
use tollgate_postgres::PostgresBackend;
use tollgate_tests::app::{App, behind};
use tollgate_tests::postgres::PostgresServer;

mod plans_common;
use plans_common::{AT_ONCE, send, statuses};

/// A process of the app: limit "api" at `quota` under `algorithm`, keyed
/// by `x-api-key`, over `store`.
fn process(store: impl Store, algorithm: Algorithm, quota: Quota) -> App {
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
async fn debt_survives_restarts<B: CasBackend + Clone>(case: &str, backend: &B, key: &str) {
    let start = |algorithm, per_hour| {
        let store = CasStore::builder(backend.clone()).build();
        process(store, algorithm, Quota::per_hour(per_hour))
    };
    for algorithm in AT_ONCE {
        let case = format!("{case} {algorithm}");
        let key = format!("{key}-{algorithm}");
        let first = start(algorithm, 10);
        assert_eq!(
            statuses(&first, &key, 8).await,
            [StatusCode::OK; 8],
            "{case}"
        );
        let again = start(algorithm, 10);
        assert_eq!(send(&again, &key).await.1, 1, "{case}: same quota, 9 used");
        let lowered = start(algorithm, 5);
        let (status, r, retry) = send(&lowered, &key).await;
        assert_eq!((status, r), (StatusCode::TOO_MANY_REQUESTS, 0), "{case}");
        assert!(retry.is_some(), "{case}: a Retry-After");
        let raised = start(algorithm, 20);
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
async fn gcra_figures<B: CasBackend + Clone>(case: &str, backend: &B, key: &str) {
    let start = |per_hour| {
        let store = CasStore::builder(backend.clone()).build();
        process(store, Algorithm::Gcra, Quota::per_hour(per_hour))
    };
    let first = start(100);
    for name in ["up", "down"] {
        let key = format!("{key}-{name}");
        assert_eq!(statuses(&first, &key, 10).await, [StatusCode::OK; 10]);
    }
    let (status, r, _) = send(&start(1_000), &format!("{key}-up")).await;
    assert_eq!((status, r), (StatusCode::OK, 989), "{case}: raised");
    let (status, _, retry) = send(&start(5), &format!("{key}-down")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{case}: lowered");
    assert_eq!(retry, Some(4_320), "{case}: lowered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_another_quota_reads_the_same_usage_in_memory() {
    let backend = MemoryBackend::new();
    debt_survives_restarts("cas", &backend, "debtor").await;
    gcra_figures("cas", &backend, "tenant").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_another_quota_reads_the_same_usage_on_postgres() {
    let server = PostgresServer::start();
    let backend = PostgresBackend::builder(server.url())
        .create_schema(true)
        .pool_size(2)
        .connect()
        .await
        .unwrap();
    debt_survives_restarts("postgres", &backend, "debtor").await;
    gcra_figures("postgres", &backend, "tenant").await;
}
