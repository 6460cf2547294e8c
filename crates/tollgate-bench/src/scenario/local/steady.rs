//! Part 2 of the local scenario: Redis calls per decision under a steady,
//! paced load below the limit, counted by the instances and by the
//! server.

use super::setup::{INSTANCES, RATE, TASKS, decide, instances, limit, total};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate_core::Algorithm;
use tollgate_redis::LocalMode;
use tollgate_tests::redis::RedisServer;

/// Part 2: one steady run.
#[derive(Clone, Debug)]
pub struct Steady {
    /// `exact` or `periodic 100 ms`.
    pub mode: String,
    /// The algorithm's name.
    pub algorithm: String,
    /// The load, as a share of the limit's rate.
    pub fraction: f64,
    /// Seconds measured (after a warm-up).
    pub seconds: f64,
    /// Decisions in that time, all instances.
    pub decisions: u64,
    /// Of which refused.
    pub refused: u64,
    /// `LocalFirst::stats().redis_calls`, summed over the instances.
    pub calls: u64,
    /// The server's count of script calls in that time.
    pub server_calls: u64,
    /// Exact mode: units that lapsed unspent in that time.
    pub lapsed: u64,
    /// Exact mode: units held at the end, reserved and neither spent nor
    /// lapsed (the whole run, warm-up included).
    pub unspent: u64,
}

/// Part 2: [`TASKS`] tasks over [`INSTANCES`] instances, together at
/// `fraction` of the limit's rate, evenly spaced; half a second of warm-up,
/// then `seconds` measured.
pub(super) async fn steady_load(
    server: &RedisServer,
    prefix: &str,
    mode: LocalMode,
    algorithm: Algorithm,
    fraction: f64,
    seconds: f64,
) -> Steady {
    let stores = instances(&server.url(), prefix, mode).await;
    let policy = limit(algorithm, false);
    let period = Duration::from_secs_f64(TASKS as f64 / (fraction * RATE as f64));
    let warm_up = Duration::from_millis(500);
    let start = tokio::time::Instant::now();
    let end = start + warm_up + Duration::from_secs_f64(seconds);
    let measuring = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let store = stores[t % INSTANCES].clone();
            let policy = policy.clone();
            let (measuring, decided, refused, admitted) = (
                measuring.clone(),
                decided.clone(),
                refused.clone(),
                admitted.clone(),
            );
            tokio::spawn(async move {
                let mut next = start + period.mul_f64(t as f64 / TASKS as f64);
                while next < end {
                    tokio::time::sleep_until(next).await;
                    let allowed = decide(&store, &policy).await;
                    admitted.fetch_add(u64::from(allowed), Ordering::Relaxed);
                    if measuring.load(Ordering::Relaxed) {
                        decided.fetch_add(1, Ordering::Relaxed);
                        if !allowed {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    next += period;
                }
            })
        })
        .collect();
    tokio::time::sleep_until(start + warm_up).await;
    let (before, server_before) = (total(&stores), server.script_calls());
    measuring.store(true, Ordering::Relaxed);
    let measured_from = Instant::now();
    tokio::time::sleep_until(end).await;
    measuring.store(false, Ordering::Relaxed);
    let (after, server_after) = (total(&stores), server.script_calls());
    let measured = measured_from.elapsed().as_secs_f64();
    for task in tasks {
        task.await.expect("a task ends");
    }
    let at_end = total(&stores);
    let admitted = admitted.load(Ordering::Relaxed);
    Steady {
        mode: match mode {
            LocalMode::Exact => "exact".to_string(),
            LocalMode::Periodic { sync_interval } => {
                format!("periodic {} ms", sync_interval.as_millis())
            }
        },
        algorithm: algorithm.to_string(),
        fraction,
        seconds: measured,
        decisions: decided.load(Ordering::Relaxed),
        refused: refused.load(Ordering::Relaxed),
        calls: after.redis_calls - before.redis_calls,
        server_calls: server_after - server_before,
        lapsed: after.lapsed_units - before.lapsed_units,
        unspent: at_end
            .reserved_units
            .saturating_sub(admitted + at_end.lapsed_units),
    }
}
