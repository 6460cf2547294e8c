//! The local-first store (`tollgate_local::LocalFirst`) in front of the
//! compare-and-swap store over a real PostgreSQL server (issue 51): the
//! conformance kit in both modes, never more than the memory store admits;
//! the racing kit, four instances (each its own pool and local-first
//! store) racing for shared keys in both modes; and a plan change, whose
//! carried usage lands in one write of the new policy's row.

use std::sync::Arc;
use std::time::Duration;
use tollgate::store::BoxStore;
use tollgate::{Key, NamedLimit, Policy, Store};
use tollgate_cas::CasStore;
use tollgate_conformance::{Kit, Race};
use tollgate_core::{Algorithm, Quota};
use tollgate_local::{LocalFirst, LocalMode};
use tollgate_postgres::{PostgresBackend, PostgresStore};
use tollgate_tests::postgres::PostgresServer;

async fn store(server: &PostgresServer, prefix: &str) -> PostgresStore {
    let backend = PostgresBackend::builder(server.url())
        .create_schema(true)
        .pool_size(4)
        .connect()
        .await
        .unwrap();
    CasStore::builder(backend).prefix(prefix).build()
}

/// The algorithms the local-first store decides.
fn local_first() -> usize {
    Algorithm::ALL.iter().filter(|a| a.local_first()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_first_store_over_postgres_conforms_in_both_modes() {
    let server = PostgresServer::start();
    for mode in [LocalMode::Exact, LocalMode::periodic()] {
        let shared = store(&server, &format!("kit-{mode:?}")).await;
        // Boxed, as the playground stacks it.
        let local = BoxStore::new(LocalFirst::builder(shared, mode).build());
        let report = Kit::real_time(local)
            .never_more()
            .traces(6)
            .run()
            .await
            .unwrap_or_else(|failure| panic!("{mode:?}: {failure}"));
        assert_eq!(report.algorithms.len(), local_first(), "{report:?}");
        assert!(
            report
                .skipped
                .iter()
                .all(|s| ["reset", "carry"].contains(s)),
            "{:?}",
            report.skipped
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_first_instances_over_postgres_race_in_both_modes() {
    let server = PostgresServer::start();
    for mode in [LocalMode::Exact, LocalMode::periodic()] {
        let mut instances = Vec::new();
        for _ in 0..4 {
            instances.push(store(&server, "race").await);
        }
        let mut next = 0;
        let race = Race::new(move || {
            next += 1;
            LocalFirst::builder(instances[next % instances.len()].clone(), mode).build()
        });
        let report = race
            .never_more()
            .run()
            .await
            .unwrap_or_else(|failure| panic!("{mode:?}: {failure}"));
        assert_eq!(report.algorithms.len(), local_first(), "{report:?}");
        assert!(report.kept > 0, "{report:?}");
    }
}

/// A key moved from one plan to another keeps what it used, on both
/// modes: the new plan's row is charged what the old one counted (its
/// limits together, in one write), this instance's unreported units
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_change_carries_the_usage_in_both_modes() {
    let server = PostgresServer::start();
    let plan = |quota: &str| {
        Arc::new(Policy::new(vec![
            NamedLimit::new("hour", quota.parse::<Quota>().unwrap()),
            NamedLimit::new("day", "1000/d".parse::<Quota>().unwrap())
                .with_algorithm(Algorithm::FixedWindow),
        ]))
    };
    for mode in [
        LocalMode::Exact,
        LocalMode::Periodic {
            sync_interval: Duration::from_secs(60),
        },
    ] {
        let local =
            LocalFirst::builder(store(&server, &format!("plan-{mode:?}")).await, mode).build();
        let (free, paid) = (plan("10/h"), plan("20/h"));
        let key = Key::from("tenant");
        for _ in 0..7 {
            let decision = local.check(&free, &key, 1).resolve().await.unwrap();
            assert!(decision.merged().allowed());
        }
        local.carry(&free, &paid, &key).await.unwrap();
        let peek = local.peek(&paid, &key).resolve().await.unwrap();
        let remaining: Vec<u64> = peek.each().iter().map(|d| d.remaining()).collect();
        assert_eq!(remaining, [13, 993], "{mode:?}: {peek:?}");
    }
}
