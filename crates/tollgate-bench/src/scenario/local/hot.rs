//! Parts 1 and 4 of the local scenario: [`TASKS`] tasks deciding on one
//! hot key as fast as they can, on a fresh store of each kind, counted
//! (decisions per second) or each decision timed (p50, p99). The
//! PostgreSQL scenario borrows the same load through [`hot_rate`].

use super::setup::{HOT_RATE, Kind, PERIODIC_MS, TASKS, YIELD_EVERY, decide};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tollgate::{MemoryStore, NamedLimit, Policy, Store};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::{LocalFirst, LocalMode, LocalStats, RedisStore};

/// Part 1's load on `store`, for another scenario's side by side (the
/// PostgreSQL one's local-first rows): decisions per second of
/// [`TASKS`] tasks on one hot key under [`hot_policy`].
pub(crate) async fn hot_rate<S: Store>(store: S, seconds: f64) -> f64 {
    load(store, &hot_policy(), seconds, false).await.rate
}

/// Part 1's limit: a GCRA far above any rate reached here.
pub(super) fn hot_policy() -> Arc<Policy> {
    Arc::new(Policy::new(vec![
        NamedLimit::new("api", Quota::per_second(HOT_RATE)).with_algorithm(Algorithm::Gcra),
    ]))
}

/// One batch of parts 1 and 4.
pub(super) struct Batch {
    /// Decisions per second.
    pub(super) rate: f64,
    /// Each decision's time, ns, when timed.
    pub(super) times: Vec<u32>,
    /// Decisions made.
    pub(super) decisions: u64,
    /// A local-first store's counts at the end.
    pub(super) stats: Option<LocalStats>,
}

/// Parts 1 and 4 on a fresh store of `kind`: [`TASKS`] tasks deciding as
/// fast as they can for `seconds`, each decision timed when `timed`.
pub(super) async fn hammer(
    kind: Kind,
    url: &str,
    prefix: &str,
    policy: &Arc<Policy>,
    seconds: f64,
    timed: bool,
) -> Batch {
    let redis = || async {
        RedisStore::builder(url)
            .prefix(prefix)
            .connect()
            .await
            .expect("connect to the redis-server")
    };
    let local = |mode: LocalMode| async move {
        let store = LocalFirst::builder(redis().await, mode).build();
        let mut batch = load(store.clone(), policy, seconds, timed).await;
        batch.stats = Some(store.stats());
        batch
    };
    match kind {
        Kind::Memory => load(MemoryStore::new(), policy, seconds, timed).await,
        Kind::Exact => local(LocalMode::Exact).await,
        Kind::Periodic => {
            local(LocalMode::Periodic {
                sync_interval: Duration::from_millis(PERIODIC_MS),
            })
            .await
        }
        Kind::Redis => load(redis().await, policy, seconds, timed).await,
    }
}

/// [`TASKS`] tasks deciding on `store` as fast as they can for `seconds`.
async fn load<S: Store>(store: S, policy: &Arc<Policy>, seconds: f64, timed: bool) -> Batch {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (store, policy, stop) = (store.clone(), policy.clone(), stop.clone());
            tokio::spawn(async move {
                let mut done = 0u64;
                let mut times = Vec::new();
                if timed {
                    times.reserve(1 << 16);
                }
                'run: loop {
                    for _ in 0..YIELD_EVERY {
                        if stop.load(Ordering::Relaxed) {
                            break 'run;
                        }
                        if timed {
                            let start = Instant::now();
                            black_box(decide(&store, &policy).await);
                            let ns = start.elapsed().as_nanos();
                            times.push(u32::try_from(ns).unwrap_or(u32::MAX));
                        } else {
                            black_box(decide(&store, &policy).await);
                        }
                        done += 1;
                    }
                    tokio::task::yield_now().await;
                }
                (done, times)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut decisions = 0;
    let mut times = Vec::new();
    for task in tasks {
        let (n, t) = task.await.expect("a task ends");
        decisions += n;
        times.extend(t);
    }
    Batch {
        rate: decisions as f64 / started.elapsed().as_secs_f64(),
        times,
        decisions,
        stats: None,
    }
}

/// The p50 and p99 of `times`, ns.
pub(super) fn percentiles(mut times: Vec<u32>) -> (f64, f64) {
    assert!(!times.is_empty(), "no decision was timed");
    let mut at = |q: f64| {
        let i = ((times.len() - 1) as f64 * q).round() as usize;
        f64::from(*times.select_nth_unstable(i).1)
    };
    (at(0.50), at(0.99))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_ranks() {
        let times: Vec<u32> = (1..=100).collect();
        assert_eq!(percentiles(times), (51.0, 99.0));
    }
}
