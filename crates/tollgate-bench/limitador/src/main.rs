//! tollgate-rls's decision core beside limitador's, in one process, in
//! alternating rounds; prints one JSON object per row (`scenario`,
//! `ours`, `anchor`, `unit`) for `tollgate-bench`'s `rls-core` scenario.
//!
//! Both sides decide the same limit: every value of a descriptor entry
//! `client` at 1,000,000 a minute (never reached: every decision admits
//! and charges, checked), over 1,000 values, from a request's
//! descriptor to a decision, doing the per-request work each server does:
//! tollgate-rls builds the call's `Descriptor` and runs
//! `tollgate_rls::decide::decide` (the rule's lookup, the check, the
//! all-or-nothing bookkeeping); limitador builds the CEL `Context` its
//! server builds from a descriptor (`descriptors` bound to a list of one
//! map) and runs `check_rate_limited_and_update` of a limit whose
//! variable is `descriptors[0].client`.
//!
//! - memory: one thread, one decision after another (the stores' own
//!   cost): tollgate's `MemoryStore` against limitador's `RateLimiter`
//!   (its in-memory storage).
//! - Redis: 64 tasks on a 2-worker runtime over one Redis: tollgate's
//!   `RedisStore` (one script call per decision, check and charge in one
//!   step) against limitador's `AsyncRateLimiter` over `AsyncRedisStorage`
//!   (a script that reads the counters, then, if none is over, a pipeline
//!   of its update script: two round trips, and a window between them in
//!   which another caller can pass the same limit). Beside the rates, the
//!   Redis server's CPU time and commands per decision on each side, and
//!   how busy it was (`INFO` around each round, through `redis-cli`).

use limitador::limit::{Context, Limit};
use limitador::storage::redis::AsyncRedisStorage;
use limitador::{AsyncRateLimiter, RateLimiter};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate_redis::RedisStore;
use tollgate_rls::config::{Config, Entry};
use tollgate_rls::decide::{Descriptor, decide};
use tollgate_store::{MemoryStore, Store};

const VALUES: usize = 1_000;
const TASKS: usize = 64;
const NAMESPACE: &str = "bench";

const CONFIG: &str = "
domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 1000000
";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let redis_url = arg("--redis").expect("--redis redis://HOST:PORT");
    let seconds: f64 = arg("--seconds").map_or(2.0, |s| s.parse().expect("--seconds N"));
    let rounds: usize = arg("--rounds").map_or(5, |s| s.parse().expect("--rounds N"));
    let values: Arc<Vec<String>> = Arc::new((0..VALUES).map(|v| format!("{v:04}")).collect());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");

    // Memory, one thread.
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for side in [round % 2, (round + 1) % 2] {
            match side {
                0 => ours.push(runtime.block_on(tollgate_memory(&values, seconds))),
                _ => theirs.push(limitador_memory(&values, seconds)),
            }
        }
    }
    row("rls core, memory: decisions/s, one thread", &ours, &theirs);

    // Redis, 64 tasks.
    let (tollgate_redis, limitador_redis) = runtime.block_on(async {
        let store = RedisStore::builder(redis_url.as_str())
            .block_cache(false)
            .connect()
            .await
            .expect("tollgate connects to Redis");
        let storage = AsyncRedisStorage::new(&redis_url)
            .await
            .expect("limitador connects to Redis");
        let limiter = AsyncRateLimiter::new_with_storage(Box::new(storage));
        limiter.add_limit(limit());
        (store, Arc::new(limiter))
    });
    let config = Arc::new(config());
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    // The Redis server's own work per decision, on each side: its CPU
    // time and the commands it ran, read from INFO around each round.
    let (mut ours_server, mut theirs_server) = (Server::default(), Server::default());
    for round in 0..rounds {
        for side in [round % 2, (round + 1) % 2] {
            let before = Server::read(&redis_url);
            let (rate, decisions) = match side {
                0 => runtime.block_on(tasks(seconds, {
                    let (config, store, values) =
                        (config.clone(), tollgate_redis.clone(), values.clone());
                    move |i| {
                        let (config, store, values) =
                            (config.clone(), store.clone(), values.clone());
                        async move { tollgate_decides(&config, &store, &values[i]).await }
                    }
                })),
                _ => runtime.block_on(tasks(seconds, {
                    let (limiter, values) = (limitador_redis.clone(), values.clone());
                    move |i| {
                        let (limiter, values) = (limiter.clone(), values.clone());
                        async move {
                            let ctx = context(&values[i]);
                            let result = limiter
                                .check_rate_limited_and_update(&NAMESPACE.into(), &ctx, 1)
                                .await
                                .expect("limitador's Redis answers");
                            assert!(!result.limited, "the limit is never reached");
                        }
                    }
                })),
            };
            let used = Server::read(&redis_url).since(&before, decisions);
            match side {
                0 => (ours.push(rate), ours_server.add(used)),
                _ => (theirs.push(rate), theirs_server.add(used)),
            };
        }
    }
    row("rls core, Redis: decisions/s, 64 tasks", &ours, &theirs);
    println!(
        "{{\"scenario\": \"rls core, Redis: the server's CPU per decision\", \"ours\": {}, \"anchor\": {}, \"unit\": \"µs/decision\"}}",
        ours_server.cpu_micros_per_decision(),
        theirs_server.cpu_micros_per_decision()
    );
    println!(
        "{{\"scenario\": \"rls core, Redis: the server's commands per decision\", \"ours\": {}, \"anchor\": {}, \"unit\": \"commands/decision\"}}",
        ours_server.commands_per_decision(),
        theirs_server.commands_per_decision()
    );
    println!(
        "{{\"scenario\": \"rls core, Redis: the server busy\", \"ours\": {}, \"anchor\": {}, \"unit\": \"% of one core\"}}",
        ours_server.busy_percent(),
        theirs_server.busy_percent()
    );
}

/// What the Redis server did: CPU seconds, commands, wall seconds, and
/// the decisions made meanwhile.
#[derive(Clone, Copy, Debug, Default)]
struct Server {
    cpu_seconds: f64,
    commands: f64,
    wall: f64,
    decisions: f64,
    at: Option<Instant>,
}

impl Server {
    /// The server's counts now (`redis-cli INFO`).
    fn read(url: &str) -> Server {
        let output = std::process::Command::new("redis-cli")
            .args(["-u", url, "INFO"])
            .output()
            .expect("redis-cli runs");
        let text = String::from_utf8_lossy(&output.stdout);
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(&format!("{name}:")))
                .and_then(|value| value.trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("INFO has no {name}"))
        };
        Server {
            cpu_seconds: field("used_cpu_sys") + field("used_cpu_user"),
            commands: field("total_commands_processed"),
            wall: 0.0,
            decisions: 0.0,
            at: Some(Instant::now()),
        }
    }

    /// What it did since `before`, over `decisions` decisions.
    fn since(&self, before: &Server, decisions: u64) -> Server {
        Server {
            cpu_seconds: self.cpu_seconds - before.cpu_seconds,
            // Less the INFO call that read `self`.
            commands: self.commands - before.commands - 1.0,
            wall: match (self.at, before.at) {
                (Some(now), Some(then)) => now.duration_since(then).as_secs_f64(),
                _ => 0.0,
            },
            decisions: decisions as f64,
            at: None,
        }
    }

    fn add(&mut self, other: Server) {
        self.cpu_seconds += other.cpu_seconds;
        self.commands += other.commands;
        self.wall += other.wall;
        self.decisions += other.decisions;
    }

    fn cpu_micros_per_decision(&self) -> f64 {
        self.cpu_seconds * 1e6 / self.decisions
    }

    fn commands_per_decision(&self) -> f64 {
        self.commands / self.decisions
    }

    fn busy_percent(&self) -> f64 {
        self.cpu_seconds * 100.0 / self.wall
    }
}

fn config() -> Config {
    Config::from_yaml("bench.yaml", CONFIG).expect("the bench's rule loads")
}

/// limitador's form of the rule: 1,000,000 a minute per `client` value.
fn limit() -> Limit {
    Limit::new(
        NAMESPACE,
        1_000_000,
        60,
        Vec::new(),
        vec!["descriptors[0].client".try_into().expect("a variable")],
    )
}

/// The context limitador's server builds from a descriptor.
fn context(value: &str) -> Context<'static> {
    let mut ctx = Context::default();
    let entries = HashMap::from([("client".to_owned(), value.to_owned())]);
    ctx.list_binding("descriptors".to_owned(), vec![entries]);
    ctx
}

/// One call of one descriptor, `client` = `value`, decided by
/// tollgate-rls; it must admit.
async fn tollgate_decides<St: Store>(config: &Config, store: &St, value: &str) {
    let descriptors = [Descriptor {
        entries: vec![Entry::new("client", value)],
        hits: 1,
        limit: None,
        negative: false,
    }];
    let outcomes = decide(config, store, NAMESPACE, &descriptors)
        .await
        .expect("the store answers");
    assert!(
        !outcomes[0].over(),
        "the limit is never reached: {outcomes:?}"
    );
}

/// tollgate's decisions per second in memory, one after another.
async fn tollgate_memory(values: &[String], seconds: f64) -> f64 {
    let (config, store) = (config(), MemoryStore::new());
    let started = Instant::now();
    let mut done = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        for value in values {
            tollgate_decides(&config, &store, value).await;
        }
        done += values.len() as u64;
    }
    done as f64 / started.elapsed().as_secs_f64()
}

/// limitador's decisions per second in memory, one after another.
fn limitador_memory(values: &[String], seconds: f64) -> f64 {
    let limiter = RateLimiter::new(10_000);
    limiter.add_limit(limit());
    let namespace = NAMESPACE.into();
    let started = Instant::now();
    let mut done = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        for value in values {
            let ctx = context(value);
            let result = limiter
                .check_rate_limited_and_update(&namespace, &ctx, 1)
                .expect("limitador's memory answers");
            assert!(!result.limited, "the limit is never reached");
        }
        done += values.len() as u64;
    }
    done as f64 / started.elapsed().as_secs_f64()
}

/// [`TASKS`] tasks each running `decide(value index)` over the values in
/// a pseudo-random order for `seconds`: decisions per second, and how
/// many.
async fn tasks<F, Fut>(seconds: f64, decide: F) -> (f64, u64)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..TASKS as u64)
        .map(|t| {
            let (done, stop, decide) = (done.clone(), stop.clone(), decide.clone());
            tokio::spawn(async move {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    i = i
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    decide(((i >> 33) % VALUES as u64) as usize).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await.expect("a task ends");
    }
    let done = done.load(Ordering::Relaxed);
    (done as f64 / started.elapsed().as_secs_f64(), done)
}

/// Prints a row: the medians of each side's rounds.
fn row(scenario: &str, ours: &[f64], theirs: &[f64]) {
    println!(
        "{{\"scenario\": \"{scenario}\", \"ours\": {}, \"anchor\": {}, \"unit\": \"decisions/s\"}}",
        median(ours),
        median(theirs)
    );
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}
