//! Memory per key in Redis for each algorithm (`MEMORY USAGE`, averaged
//! over 1,000 keys), on a redis-server this program starts.
//!
//! Decisions per second against `redis-benchmark` are measured by the
//! benchmark program (`cargo run --release -p tollgate-bench -- --only
//! redis`), beside the other scenarios; this bench keeps what that program
//! does not report.
//!
//! `cargo bench -p tollgate-redis --bench redis` (needs redis-server).

use std::sync::Arc;
use tollgate::{Key, NamedLimit, Policy, Store, StoreReply};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::RedisServer;

async fn check(store: &RedisStore, policy: &Arc<Policy>, key: &Key) -> bool {
    match store.check(policy, key, 1) {
        StoreReply::Pending(future) => future.await.expect("the store answers").merged().allowed(),
        StoreReply::Ready(result) => result.expect("the store answers").merged().allowed(),
    }
}

fn policy(algorithm: Algorithm, quota: &str) -> Arc<Policy> {
    let quota: Quota = quota.parse().unwrap();
    Arc::new(Policy::new(vec![
        NamedLimit::new("api", quota).with_algorithm(algorithm),
    ]))
}

fn usage(server: &RedisServer, key: &str) -> u64 {
    let reply = server.command(&["MEMORY", "USAGE", key, "SAMPLES", "0"]);
    reply.trim().trim_start_matches(':').parse().unwrap_or(0)
}

/// Average `MEMORY USAGE` of `n` keys after `requests` requests each.
async fn memory_per_key(server: &RedisServer, algorithm: Algorithm, requests: u32) -> u64 {
    let store = RedisStore::builder(server.url())
        .prefix(format!("mem-{requests}"))
        .connect()
        .await
        .unwrap();
    let policy = policy(algorithm, "100/min");
    let n = 1_000u64;
    let mut total = 0;
    for i in 0..n {
        let key = Key::from_bytes(format!("user-{i:06}").as_bytes());
        for _ in 0..requests {
            check(&store, &policy, &key).await;
        }
        let name = &store.redis_keys(&policy, &key)[0];
        total += usage(server, name);
    }
    total / n
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let server = RedisServer::start();
    println!("Redis memory per key (MEMORY USAGE, average of 1000 keys, limit 100/min):");
    for algorithm in Algorithm::ALL {
        let one = memory_per_key(&server, algorithm, 1).await;
        let full = memory_per_key(&server, algorithm, 100).await;
        println!(
            "  {:<15} {one:>5} B after 1 request, {full:>5} B after 100",
            algorithm.name()
        );
    }
}
