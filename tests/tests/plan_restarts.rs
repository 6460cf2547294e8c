//! A quota changed across a restart reads the stored usage as a live
//! change would carry it (issue 58): each "process" here is a fresh
//! layer over a fresh store on the same backend, configured with another
//! quota for the same limit, as a redeploy is. On the compare-and-swap
//! store over its in-memory backend and over PostgreSQL, for every
//! algorithm a layer decides at once. (Redis: `redis_plans.rs`.)

use tollgate_cas::{CasBackend, CasStore, MemoryBackend};
use tollgate_core::{Algorithm, Quota};
use tollgate_tests::app::App;
use tollgate_tests::postgres::PostgresServer;

mod plans_common;
use plans_common::{debt_survives_restarts, gcra_figures, leaky_bucket_survives_restarts, process};

/// A process over a fresh compare-and-swap store on `backend`.
fn over<B: CasBackend + Clone>(backend: &B) -> impl AsyncFn(Algorithm, u64) -> App {
    move |algorithm, per_hour| {
        let store = CasStore::builder(backend.clone()).build();
        async move { process(store, algorithm, Quota::per_hour(per_hour)) }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_another_quota_reads_the_same_usage_in_memory() {
    let backend = MemoryBackend::new();
    debt_survives_restarts("cas", over(&backend), "debtor").await;
    gcra_figures("cas", over(&backend), "tenant").await;
    // The leaky bucket's reading lets its unit in service go as soon as
    // time moves (its `remaining`): held still here, as on Redis's test
    // clock, so that the figure is exact.
    let still = MemoryBackend::with_clock(tollgate_core::ManualClock::new(1 << 60));
    let store = async |_| CasStore::builder(still.clone()).build();
    leaky_bucket_survives_restarts("cas", store, "leaky").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_another_quota_reads_the_same_usage_on_postgres() {
    let server = PostgresServer::start();
    let backend = plans_common::postgres_backend(&server).await;
    debt_survives_restarts("postgres", over(&backend), "debtor").await;
    gcra_figures("postgres", over(&backend), "tenant").await;
}
