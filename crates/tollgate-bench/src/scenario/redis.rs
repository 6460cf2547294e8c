//! Redis: GCRA decisions per second from 64 concurrent tasks sharing one
//! `RedisStore` (one multiplexed connection), vs `redis-benchmark -P 16
//! -c 50` calling the very same script (`FCALL`, the store's own command
//! from `RedisStore::script_command`) with the same kind of arguments, on
//! the same `redis-server`, in alternating rounds.
//!
//! Keys: 10,000, random, 12 digits on both sides (redis-benchmark's
//! `__rand_int__` placeholder is 12 digits). Quota 1,000/s per key, which
//! this load never exhausts. A script error is answered as fast as a
//! decision, so each redis-benchmark run checks `failed_calls` of `FCALL`
//! and `EVALSHA` in `INFO commandstats`: a run with failures would measure less work
//! than it claims, and stops the program.
//!
//! Needs `redis-server` and `redis-benchmark` (Debian: `redis-server`,
//! `redis-tools`); without them the scenario is skipped with a message.

use crate::measure::Settings;
use crate::report::{Better, Outcome, median};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate::{Key, NamedLimit, Policy, Store, StoreReply};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::RedisServer;

/// Distinct keys, on both sides.
const KEYS: u64 = 10_000;
/// Concurrent tasks on our side.
const TASKS: u64 = 64;

/// Why the scenario cannot run here, if it cannot.
pub fn missing_tools() -> Option<String> {
    let missing: Vec<&str> = ["redis-server", "redis-benchmark"]
        .into_iter()
        .filter(|tool| Command::new(tool).arg("--version").output().is_err())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "redis scenario skipped: {} not found (install the redis-server and redis-tools packages)",
            missing.join(" and ")
        )
    })
}

/// Runs the scenario; the caller has checked [`missing_tools`].
pub fn run(settings: Settings) -> Vec<Outcome> {
    let seconds = settings.pick(3.0, 1.0);
    let rounds = settings.pick(5, 3);
    let (runtime, server, store) = start();
    let policy = Arc::new(Policy::new(vec![
        NamedLimit::new("api", "1000/s".parse::<Quota>().expect("a valid quota"))
            .with_algorithm(Algorithm::Gcra),
    ]));
    // Loads the script, so that both sides find it, and gives redis-benchmark
    // its first request count.
    let mut estimate = runtime.block_on(ours(&store, &policy, 0.5));
    let (mut ours_rates, mut raw_rates) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which side goes first.
        for which in [round % 2, (round + 1) % 2] {
            if which == 0 {
                estimate = runtime.block_on(ours(&store, &policy, seconds));
                ours_rates.push(estimate);
            } else {
                // As many requests as our side made in its time: the same
                // work on both sides (redis-benchmark's run then lasts
                // `seconds / ratio`).
                let requests = ((estimate * seconds) as u64).max(50_000);
                raw_rates.push(raw(&server, &store, &policy, requests));
            }
        }
    }
    vec![
        Outcome::new(
            "redis: GCRA decisions, 64 tasks",
            median(&ours_rates),
            median(&raw_rates),
            "decisions/s",
            Better::Higher,
        )
        .target(0.7)
        .against("redis-benchmark -P 16 -c 50, same FCALL"),
    ]
}

/// A runtime, a fresh `redis-server` and a store connected to it. The
/// store's block cache is off: these scenarios measure the script and the
/// round trip, so every call, refused ones included, must reach Redis (with
/// the cache on, a refused key is answered in process until its retry
/// time, and the script-cost rows would time nothing).
pub(crate) fn start() -> (tokio::runtime::Runtime, RedisServer, RedisStore) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let server = RedisServer::start();
    let store = runtime
        .block_on(
            RedisStore::builder(server.url())
                .block_cache(false)
                .connect(),
        )
        .expect("connect to the redis-server just started");
    (runtime, server, store)
}

/// One decision through the store: the layer's call, without the layer.
pub(crate) async fn check(store: &RedisStore, policy: &Arc<Policy>, key: &Key) -> bool {
    match store.check(policy, key, 1) {
        StoreReply::Pending(future) => future.await.expect("the store answers").merged().allowed(),
        StoreReply::Ready(result) => result.expect("the store answers").merged().allowed(),
    }
}

/// Decisions per second of `TASKS` tasks over one store for `seconds`.
pub(crate) async fn ours(store: &RedisStore, policy: &Arc<Policy>, seconds: f64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (store, policy) = (store.clone(), policy.clone());
            let (done, stop) = (done.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    // A different pseudo-random key each time (an LCG).
                    i = i
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let key = Key::from_bytes(format!("{:012}", (i >> 33) % KEYS).as_bytes());
                    std::hint::black_box(check(&store, &policy, &key).await);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a task ends");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// `redis-benchmark -P 16 -c 50` calling the policy's script: requests per
/// second.
fn raw(server: &RedisServer, store: &RedisStore, policy: &Policy, requests: u64) -> f64 {
    // The store's own call, with redis-benchmark's random placeholder where
    // the user key goes.
    let call = store.script_command(policy, &Key::from_bytes(b"__rand_int__"), 1);
    let before = script_stats(server);
    let output = Command::new("redis-benchmark")
        .args(["-p", &server.port().to_string()])
        .args(["-P", "16", "-c", "50", "-q"])
        .args(["-n", &requests.to_string(), "-r", &KEYS.to_string()])
        .args(&call)
        .output()
        .expect("run redis-benchmark");
    assert!(
        output.status.success(),
        "redis-benchmark failed: {output:?}"
    );
    // A script error is answered as fast as a decision: every call must
    // have run the script, and none may have failed or been refused.
    let after = script_stats(server);
    assert!(
        after.calls - before.calls >= requests,
        "redis-benchmark ran {} script calls of {requests}",
        after.calls - before.calls
    );
    assert_eq!(
        (after.failed, after.rejected),
        (before.failed, before.rejected),
        "redis-benchmark's script calls failed: its figure would not be decisions"
    );
    let text = String::from_utf8_lossy(&output.stdout);
    parse_rate(&text).unwrap_or_else(|| panic!("cannot read redis-benchmark's output: {text}"))
}

/// The rate in redis-benchmark's quiet output, e.g. `"FCALL ...:
/// 123456.78 requests per second, p50=0.191 msec"`. With `-q` it redraws a
/// progress line with `\r` first; the figure is on the last one.
pub fn parse_rate(text: &str) -> Option<f64> {
    let last = text.rsplit('\r').next()?;
    let (head, _) = last.split_once(" requests per second")?;
    head.rsplit([' ', ':'])
        .find(|s| !s.is_empty())?
        .parse()
        .ok()
}

/// Script call counts on a server (`FCALL` and `EVALSHA` together: the
/// store calls functions where the server has them), from `INFO
/// commandstats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ScriptStats {
    pub(crate) calls: u64,
    /// Microseconds the server spent in the calls.
    pub(crate) usec: u64,
    failed: u64,
    rejected: u64,
}

/// The server's script call counts so far: zero before the first call; a
/// line without the counts (a Redis too old to report them) stops the
/// program, since failures could not be told from decisions.
pub(crate) fn script_stats(server: &RedisServer) -> ScriptStats {
    parse_script_stats(&server.command(&["INFO", "commandstats"]))
}

/// [`ScriptStats`] from the text of `INFO commandstats`.
fn parse_script_stats(stats: &str) -> ScriptStats {
    let mut sum = ScriptStats::default();
    for line in stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_fcall:") || l.starts_with("cmdstat_evalsha:"))
    {
        let field = |name: &str| -> u64 {
            line.trim()
                .split([':', ','])
                .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}: Redis 7 or later is needed"))
        };
        sum.calls += field("calls");
        sum.usec += field("usec");
        sum.failed += field("failed_calls");
        sum.rejected += field("rejected_calls");
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_counts_are_read_field_by_field_and_summed() {
        let info = "# Commandstats\r\ncmdstat_get:calls=1,usec=2,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
                    cmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=2,failed_calls=3\r\n\
                    cmdstat_fcall:calls=30,usec=100,usec_per_call=3.33,rejected_calls=1,failed_calls=0\r\n";
        let stats = parse_script_stats(info);
        assert_eq!(
            stats,
            ScriptStats {
                calls: 150,
                usec: 1000,
                failed: 3,
                rejected: 3
            }
        );
        assert_eq!(
            parse_script_stats("# Commandstats\r\n"),
            ScriptStats::default()
        );
    }

    #[test]
    fn reads_the_rate_after_progress_lines() {
        let text = "EVALSHA abc 1 k: rps=0.0 (overall: nan) avg_msec=nan\r\
                    EVALSHA abc 1 k: 154320.98 requests per second, p50=2.263 msec\n";
        assert_eq!(parse_rate(text), Some(154_320.98));
        assert_eq!(parse_rate("ERR unknown command\n"), None);
    }
}
