//! Redis figures, on a redis-server this program starts:
//!
//! 1. Memory per key for each algorithm (`MEMORY USAGE`, averaged).
//! 2. Decisions per second from 64 tasks sharing one `RedisStore` (one
//!    multiplexed connection), against `redis-benchmark -P 16 -c 50`
//!    calling the same script with the same arguments on the same server,
//!    in alternating rounds; the ratio of the medians is the figure.
//!
//! `cargo bench -p tollgate-redis --bench redis` (needs redis-server and
//! redis-benchmark). `ROUNDS` and `SECONDS` shorten or lengthen it.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate::{Key, NamedLimit, Policy, Store, StoreCheck};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::RedisServer;

const KEYS: u64 = 10_000;
const TASKS: usize = 64;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn check(store: &RedisStore, policy: &Arc<Policy>, key: &Key) -> bool {
    match store.check(policy, key, 1) {
        StoreCheck::Pending(future) => future.await.expect("the store answers").merged.allowed,
        StoreCheck::Ready(result) => result.expect("the store answers").merged.allowed,
    }
}

fn policy(algorithm: Algorithm, quota: &str) -> Arc<Policy> {
    let quota: Quota = quota.parse().unwrap();
    Arc::new(Policy::new(vec![
        NamedLimit::new("api", quota).algorithm(algorithm),
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

/// Decisions per second of `TASKS` tasks over one store for `seconds`.
async fn ours(store: &RedisStore, policy: &Arc<Policy>, seconds: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS as u64)
        .map(|t| {
            let (store, policy) = (store.clone(), policy.clone());
            let (done, stop) = (done.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    i = (i * 6364136223846793005 + 1442695040888963407) % (1 << 62);
                    let key = Key::from_bytes(format!("{:012}", i % KEYS).as_bytes());
                    check(&store, &policy, &key).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// `redis-benchmark -P 16 -c 50` calling the policy's script with the same
/// kind of arguments: a random key of `KEYS`, cost 1, server time.
fn raw(server: &RedisServer, store: &RedisStore, policy: &Policy, requests: u64) -> f64 {
    // The store's own call, with redis-benchmark's random placeholder
    // (12 digits) where the user key goes.
    let call = store.script_command(policy, &Key::from_bytes(b"__rand_int__"), 1);
    let failed_before = failed_script_calls(server);
    let output = Command::new("redis-benchmark")
        .args(["-p", &server.port().to_string()])
        .args(["-P", "16", "-c", "50", "-q"])
        .args(["-n", &requests.to_string(), "-r", &KEYS.to_string()])
        .args(&call)
        .output()
        .expect("run redis-benchmark");
    // A script error is answered as fast as a decision: make sure there
    // was none, or the figure would measure less work than it claims.
    assert_eq!(
        failed_script_calls(server),
        failed_before,
        "script calls failed"
    );
    let text = String::from_utf8_lossy(&output.stdout);
    // "EVALSHA ...: 123456.78 requests per second, p50=..."
    text.split("requests per second")
        .next()
        .and_then(|head| head.rsplit(' ').nth(1).or_else(|| head.rsplit(' ').next()))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("cannot read redis-benchmark's output: {text}"))
}

/// How many `EVALSHA` calls have failed on `server` so far (each new
/// script's first call fails with NOSCRIPT, by design).
fn failed_script_calls(server: &RedisServer) -> u64 {
    let stats = server.command(&["INFO", "commandstats"]);
    let evalsha = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or("");
    evalsha
        .trim()
        .split(',')
        .find_map(|field| field.strip_prefix("failed_calls="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let rounds = env_or("ROUNDS", 3);
    let seconds = env_or("SECONDS", 3);
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
    server.command(&["FLUSHALL"]);

    let store = RedisStore::connect(server.url()).await.unwrap();
    let policy = policy(Algorithm::Gcra, "1000/s");
    // Load the script, so that both sides find it.
    check(&store, &policy, &Key::from_bytes(b"warm-up")).await;
    let (mut ours_rates, mut raw_rates) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let ours_rate = ours(&store, &policy, seconds).await;
        let raw_rate = raw(
            &server,
            &store,
            &policy,
            (ours_rate as u64 * seconds).max(100_000),
        );
        println!(
            "round {round}: tollgate {ours_rate:>9.0}/s, redis-benchmark {raw_rate:>9.0}/s, ratio {:.2}",
            ours_rate / raw_rate
        );
        ours_rates.push(ours_rate);
        raw_rates.push(raw_rate);
    }
    let (ours_median, raw_median) = (median(ours_rates), median(raw_rates));
    println!(
        "GCRA decisions per second, median of {rounds} rounds: tollgate ({TASKS} tasks, one connection) {ours_median:.0}, \
         redis-benchmark -P 16 -c 50 {raw_median:.0}, ratio {:.2}",
        ours_median / raw_median
    );
}
