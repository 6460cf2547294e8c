//! Late answers never stay charged (issue 47), over real PostgreSQL: the
//! login limiter of `redis_late_answers.rs` over the compare-and-swap
//! store, its database reached through a proxy that holds each reply 0 or
//! 30–40 ms at random, with a store timeout of 12 ms; the successes
//! through that instance leave nothing charged, so three wrong passwords
//! through a second instance connected directly are all answered 401.

mod common;

use common::{login_app, successes_never_stay_charged};
use std::time::Duration;
use tollgate_cas::CasStore;
use tollgate_postgres::PostgresBackend;
use tollgate_tests::postgres::{PASSWORD, PostgresServer};
use tollgate_tests::proxy::{Jitter, JitterProxy};

async fn store(url: String) -> CasStore<PostgresBackend> {
    let backend = PostgresBackend::builder(url)
        .create_schema(true)
        .pool_size(4)
        .connect()
        .await
        .unwrap();
    CasStore::builder(backend).prefix("late").build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_from_postgres_are_given_back() {
    let server = PostgresServer::start();
    for seed in [1, 2, 3] {
        let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
        let proxy = JitterProxy::start(upstream, Jitter::HALF_HELD_30_40_MS, seed);
        let slow_url = format!("postgres://postgres:{PASSWORD}@{}/postgres", proxy.addr());
        let mut slow = login_app(store(slow_url).await, Duration::from_millis(12));
        let mut direct = login_app(store(server.url()).await, Duration::from_secs(2));
        successes_never_stay_charged(&mut slow, &mut direct, 8, &format!("postgres-{seed}")).await;
        assert!(proxy.held() > 0, "the proxy held no reply back");
    }
}
