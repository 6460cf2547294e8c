//! A debt survives a downgrade and an upgrade on the stores that need no
//! Redis: the memory store, the compare-and-swap store over its in-memory
//! backend and over PostgreSQL, and local-first over PostgreSQL in both
//! modes (Redis: `redis_plans.rs`). 8 used of 10, lowered to 5, raised to
//! 20 leaves 11 after the next request, for every algorithm each decides;
//! a limit left out of a plan for a request and put back keeps its usage.

use tollgate::MemoryStore;
use tollgate_cas::{CasStore, MemoryBackend};
use tollgate_tests::postgres::PostgresServer;

mod plans_common;
use plans_common::{
    AT_ONCE, Plans, a_left_out_limit_keeps_its_usage, app, app_in_mode, debt_is_kept,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debt_survives_a_downgrade_and_an_upgrade_in_memory() {
    for algorithm in AT_ONCE {
        for name in ["memory", "cas"] {
            let plans = Plans::default();
            let quotas = plans.quotas();
            let app = match name {
                "memory" => app(MemoryStore::new(), algorithm, &quotas),
                _ => app(
                    CasStore::builder(MemoryBackend::new()).build(),
                    algorithm,
                    &quotas,
                ),
            };
            let case = format!("{name} {algorithm}");
            debt_is_kept(&case, &app, &quotas, &plans, "debtor").await;
            a_left_out_limit_keeps_its_usage(&case, &app, &quotas, &plans, "left-out").await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debt_survives_a_downgrade_and_an_upgrade_on_postgres() {
    let server = PostgresServer::start();
    for name in ["postgres", "exact", "periodic"] {
        for algorithm in AT_ONCE {
            if name != "postgres" && !algorithm.local_first() {
                continue;
            }
            let backend = plans_common::postgres_backend(&server).await;
            let cas = CasStore::builder(backend).build();
            let plans = Plans::default();
            let quotas = plans.quotas();
            let app = app_in_mode(name, cas, algorithm, &quotas);
            let case = format!("{name} {algorithm}");
            let key = format!("debtor-{name}-{algorithm}");
            debt_is_kept(&case, &app, &quotas, &plans, &key).await;
            let key = format!("left-out-{name}-{algorithm}");
            a_left_out_limit_keeps_its_usage(&case, &app, &quotas, &plans, &key).await;
        }
    }
}

/// A layer keyed by `x-api-key` whose limits (`quotas` at first, under
/// `algorithm`) `limits` changes while it runs.
fn live_app(
    limits: &tollgate::quotas::LiveLimits,
    algorithm: tollgate_core::Algorithm,
    quotas: &[(&str, tollgate_core::Quota)],
) -> tollgate_tests::app::App {
    let builder = quotas
        .iter()
        .fold(tollgate::RateLimitLayer::builder(), |b, (name, quota)| {
            b.quota(*name, *quota)
        });
    tollgate_tests::app::behind(
        builder
            .algorithm(algorithm)
            .key(tollgate::HeaderKey::new("x-api-key"))
            .live_limits(limits.clone())
            .build(),
    )
}

/// The same figure through live limits (what `--limits-file` drives): the
/// named limit changed for every key, each key's debt kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debt_survives_live_limits_lowered_and_raised() {
    use http::StatusCode;
    use tollgate::quotas::LiveLimits;
    use tollgate_core::Quota;

    for algorithm in AT_ONCE {
        let limits = LiveLimits::new();
        let app = live_app(&limits, algorithm, &[("api", Quota::per_hour(10))]);
        let case = format!("live {algorithm}");
        let ok = plans_common::statuses(&app, "debtor", 8).await;
        assert_eq!(ok, [StatusCode::OK; 8], "{case}");
        limits.set_quota("api", Quota::per_hour(5)).unwrap();
        let (status, r, _) = plans_common::send(&app, "debtor").await;
        assert_eq!((status, r), (StatusCode::TOO_MANY_REQUESTS, 0), "{case}");
        limits.set_quota("api", Quota::per_hour(20)).unwrap();
        let (status, r, _) = plans_common::send(&app, "debtor").await;
        assert_eq!((status, r), (StatusCode::OK, 11), "{case}: raised");
    }
}

/// A limit left out of the live limits for a request and put back keeps
/// each key's usage (what `--limits-file` drives when a line is deleted
/// and restored): 3 used of `burst` 5 an hour, then 2 more admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_left_out_of_live_limits_keeps_its_usage() {
    use http::StatusCode;
    use tollgate::NamedLimit;
    use tollgate::quotas::LiveLimits;
    use tollgate_core::Quota;

    for algorithm in AT_ONCE {
        let limits = LiveLimits::new();
        let quotas = [
            ("api", Quota::per_hour(1000)),
            ("burst", Quota::per_hour(5)),
        ];
        let app = live_app(&limits, algorithm, &quotas);
        let case = format!("live {algorithm}");
        let both = limits.limits();
        let ok = plans_common::statuses(&app, "user", 3).await;
        assert_eq!(ok, [StatusCode::OK; 3], "{case}");
        let api = vec![NamedLimit::new("api", Quota::per_hour(1000)).with_algorithm(algorithm)];
        limits.set(api).unwrap();
        let (status, r, _) = plans_common::send(&app, "user").await;
        assert_eq!((status, r), (StatusCode::OK, 996), "{case}: left out");
        limits.set(both).unwrap();
        let expected = [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
        ];
        let back = plans_common::statuses(&app, "user", 3).await;
        assert_eq!(back, expected, "{case}: put back");
    }
}
