//! local: the local-first store (`tollgate_redis::LocalFirst`, issue 21)
//! beside the memory store and the one-call-per-request Redis store, on one
//! real `redis-server`, in one run. Four parts:
//!
//! 1. **Decisions per second**, one instance, 64 tasks, one hot key
//!    (`Key::GLOBAL`), a GCRA limit of 1,000,000,000/s (never reached, so
//!    nearly every decision is an admission): `MemoryStore`, `LocalFirst`
//!    in exact mode, in periodic mode (100 ms) and the plain `RedisStore`,
//!    in alternating rounds ([`alternate`]). All four are driven the same
//!    way: the `Store` trait's `check` called directly (no layer), a
//!    pending reply awaited, the whole decision handed to `black_box`; each
//!    task yields to the runtime every [`YIELD_EVERY`] decisions, so that
//!    the store's own background work (reservations, syncs) gets a worker,
//!    as it does between requests in a server.
//! 2. **Redis calls per decision** under a steady, paced load at 50 % and
//!    95 % of the limit's rate (4 instances, 16 tasks each, requests evenly
//!    spaced): exact mode for GCRA and the fixed window, periodic mode
//!    (100 ms). Calls are counted twice: the instances' own count
//!    (`LocalFirst::stats().redis_calls`, summed) and the server's
//!    (`INFO commandstats`, `EVALSHA` + `EVAL`).
//! 3. **Over-admission against the sync interval**: 4 instances × 16 tasks
//!    flooding one key for `FLOOD` (periodic mode at 10, 50, 100, 500 and
//!    1,000 ms; exact mode beside it), for GCRA and the fixed window.
//!    Over-admission = admitted − what the algorithm allows over the flood
//!    (see [`allowed`]), at its end and at its worst moment. Periodic
//!    instances sync out of step (each store's tick is started a quarter of
//!    the interval after the one before), as instances started at
//!    different times do.
//! 4. **Latency of one decision** (p50, p99): `Instant` around each `check`,
//!    the await of a pending reply included, in rounds of part 1's load.
//!
//! Every round of every part builds fresh stores over fresh Redis keys (a
//! prefix of its own); only the `redis-server` is shared.

use crate::measure::{Settings, alternate};
use crate::report::{Better, Outcome, median};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tollgate::{Key, MemoryStore, NamedLimit, Policy, Store, StoreReply};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::{LocalFirst, LocalMode, LocalStats, RedisStore};
use tollgate_tests::redis::RedisServer;

/// Concurrent tasks in parts 1 and 4 (one instance) and in parts 2 and 3
/// (all instances together).
const TASKS: usize = 64;
/// App instances sharing one limit in parts 2 and 3.
const INSTANCES: usize = 4;
/// A task yields to the runtime after this many decisions in a row.
pub const YIELD_EVERY: u32 = 32;
/// Part 1's limit: far above any rate reached here.
const HOT_RATE: u64 = 1_000_000_000;
/// Periodic mode's interval in parts 1, 2 and 4.
const PERIODIC_MS: u64 = 100;
/// The limit of parts 2 and 3: 1,000 a second.
const RATE: u64 = 1_000;
/// Part 3's GCRA burst (a tenth of a second's rate; see BENCHMARKS.md).
const GCRA_BURST: u64 = 100;
/// Part 3's sync intervals.
pub const INTERVALS_MS: [u64; 5] = [10, 50, 100, 500, 1_000];
/// How long a flood lasts (part 3): inside two whole windows of the fixed
/// window, which it starts 50 ms into.
const FLOOD: Duration = Duration::from_millis(1_900);
/// The chart's file name, under the chart directory.
pub const CHART: &str = "local-over-admission.svg";

/// The four stores of parts 1 and 4, in the order of their figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Memory,
    Exact,
    Periodic,
    Redis,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Memory, Kind::Exact, Kind::Periodic, Kind::Redis];

    fn label(self) -> &'static str {
        match self {
            Kind::Memory => "MemoryStore",
            Kind::Exact => "LocalFirst exact",
            Kind::Periodic => "LocalFirst periodic 100 ms",
            Kind::Redis => "RedisStore (1 call per request)",
        }
    }
}

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

/// Part 3: one flood.
#[derive(Clone, Debug)]
pub struct Flood {
    /// `None`: exact mode; `Some(ms)`: periodic mode at that interval.
    pub interval_ms: Option<u64>,
    /// GCRA or the fixed window.
    pub algorithm: Algorithm,
    /// How long it lasted, s.
    pub seconds: f64,
    /// Requests admitted, all instances.
    pub admitted: u64,
    /// Decisions, all instances.
    pub decisions: u64,
    /// Fixed windows the flood reached (1 s each, from its start to the stop).
    pub windows: u64,
    /// What the algorithm allows over the flood.
    pub allowed: u64,
    /// The most admitted beyond what the algorithm allowed by then, at any
    /// admission during the flood.
    pub peak: i64,
    /// Exact mode: units granted by reservations (0 in periodic mode).
    pub reserved: u64,
    /// Exact mode: units that lapsed unspent.
    pub lapsed: u64,
}

impl Flood {
    /// admitted − allowed (negative: capacity left unused).
    pub fn over(&self) -> i64 {
        self.admitted as i64 - self.allowed as i64
    }

    /// Exact mode: units still held, reserved and neither spent nor lapsed.
    pub fn unspent(&self) -> u64 {
        self.reserved.saturating_sub(self.admitted + self.lapsed)
    }
}

/// What the scenario found.
pub struct Local {
    /// The rows of the main table (ratios to the memory and Redis stores).
    pub outcomes: Vec<Outcome>,
    /// Part 1's medians, decisions per second, in [`Kind::ALL`]'s order.
    rates: [f64; 4],
    /// Part 1's rounds, decisions per second, same order.
    rounds: Vec<Vec<f64>>,
    /// Part 1's decisions, Redis calls and waits of the local-first stores,
    /// all rounds together, same order (zeros for the others).
    counts: [(u64, u64, u64); 4],
    /// Part 4's medians of the rounds' p50 and p99, ns, same order.
    latency: [(f64, f64); 4],
    steady: Vec<Steady>,
    floods: Vec<Flood>,
}

/// Runs the scenario; the caller has checked
/// [`missing_tools`](super::redis::missing_tools).
pub fn run(settings: Settings) -> Local {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let server = RedisServer::start();
    let url = server.url();
    let prefixes = AtomicU64::new(0);
    let fresh = || format!("local-{}", prefixes.fetch_add(1, Ordering::Relaxed));

    // Parts 1 and 4.
    let seconds = settings.pick(0.3, 0.2);
    let hot = hot_policy();
    // Each store's decisions, Redis calls and waits over part 1's rounds.
    let counts = std::cell::RefCell::new([(0u64, 0u64, 0u64); 4]);
    let side = |kind: Kind, timed: bool| {
        let batch = runtime.block_on(hammer(kind, &url, &fresh(), &hot, seconds, timed));
        if !timed && let Some(stats) = batch.stats {
            let mut counts = counts.borrow_mut();
            let c = &mut counts[kind as usize];
            c.0 += batch.decisions;
            c.1 += stats.redis_calls;
            c.2 += stats.waited;
        }
        batch
    };
    let mut memory = || side(Kind::Memory, false).rate;
    let mut exact = || side(Kind::Exact, false).rate;
    let mut periodic = || side(Kind::Periodic, false).rate;
    let mut redis = || side(Kind::Redis, false).rate;
    let figures = alternate(
        settings.pick(5, 3),
        &mut [&mut memory, &mut exact, &mut periodic, &mut redis],
    );
    let rates: [f64; 4] = std::array::from_fn(|i| median(&figures[i]));
    eprintln!("  decisions/s, medians: {rates:?}");
    eprintln!("  decisions/s, rounds: {figures:?}");

    let latency_rounds = settings.pick(3, 1);
    let mut samples: [Vec<(f64, f64)>; 4] = Default::default();
    {
        let timed = |kind: Kind, samples: &mut Vec<(f64, f64)>| {
            samples.push(percentiles(side(kind, true).times));
        };
        // One untimed round each, then alternating rounds.
        for kind in Kind::ALL {
            timed(kind, &mut Vec::new());
        }
        for round in 0..latency_rounds {
            for i in 0..4 {
                let which = if round % 2 == 0 {
                    (round + i) % 4
                } else {
                    (round + 4 - i) % 4
                };
                timed(Kind::ALL[which], &mut samples[which]);
            }
        }
    }
    let latency: [(f64, f64); 4] = std::array::from_fn(|i| {
        let p50: Vec<f64> = samples[i].iter().map(|s| s.0).collect();
        let p99: Vec<f64> = samples[i].iter().map(|s| s.1).collect();
        (median(&p50), median(&p99))
    });
    eprintln!("  latency p50/p99 ns: {latency:?}");
    let counts = counts.into_inner();

    // Part 2.
    let measured = settings.pick(2.0, 1.0);
    let mut steady = Vec::new();
    let modes = [
        (LocalMode::Exact, Algorithm::Gcra),
        (LocalMode::Exact, Algorithm::FixedWindow),
        (
            LocalMode::Periodic {
                sync_interval: Duration::from_millis(PERIODIC_MS),
            },
            Algorithm::Gcra,
        ),
    ];
    for (mode, algorithm) in modes {
        for fraction in [0.5, 0.95] {
            let run = runtime.block_on(steady_load(
                &server,
                &fresh(),
                mode,
                algorithm,
                fraction,
                measured,
            ));
            eprintln!("  {run:?}");
            steady.push(run);
        }
    }

    // Part 3.
    let mut floods = Vec::new();
    for algorithm in [Algorithm::Gcra, Algorithm::FixedWindow] {
        let intervals = std::iter::once(None).chain(INTERVALS_MS.map(Some));
        for interval_ms in intervals {
            let run = runtime.block_on(flood(&url, &fresh(), interval_ms, algorithm));
            eprintln!(
                "  flood {algorithm} {interval_ms:?} ms: admitted {} of {} allowed ({:+}), \
                 reserved {}, lapsed {}, {} decisions",
                run.admitted,
                run.allowed,
                run.over(),
                run.reserved,
                run.lapsed,
                run.decisions
            );
            floods.push(run);
        }
    }
    drop(server);

    let [memory, exact, periodic, redis] = rates;
    let mut outcomes = Vec::new();
    // Exact mode's mark is 0.6 (issue 51); periodic mode's stays 0.5.
    for (name, ours, mark) in [("exact", exact, 0.6), ("periodic 100 ms", periodic, 0.5)] {
        outcomes.push(
            Outcome::new(
                &format!("local: {name} vs memory store, 64 tasks, 1 key"),
                ours,
                memory,
                "decisions/s",
                Better::Higher,
            )
            .target(mark)
            .against("MemoryStore, same tasks"),
        );
        outcomes.push(
            Outcome::new(
                &format!("local: {name} vs 1 call per request, 64 tasks, 1 key"),
                ours,
                redis,
                "decisions/s",
                Better::Higher,
            )
            .target(20.0)
            .against("RedisStore, 1 call per request"),
        );
    }
    Local {
        outcomes,
        rates,
        rounds: figures,
        counts,
        latency,
        steady,
        floods,
    }
}

/// Part 1's load on `store`, for another scenario's side by side (the
/// PostgreSQL one's local-first rows): decisions per second of
/// [`TASKS`] tasks on one hot key under [`hot_policy`].
pub(crate) async fn hot_rate<S: Store>(store: S, seconds: f64) -> f64 {
    load(store, &hot_policy(), seconds, false).await.rate
}

/// Part 1's limit: a GCRA far above any rate reached here.
pub(crate) fn hot_policy() -> Arc<Policy> {
    Arc::new(Policy::new(vec![
        NamedLimit::new("api", Quota::per_second(HOT_RATE)).with_algorithm(Algorithm::Gcra),
    ]))
}

/// One decision of cost 1 on `key`: the reply, awaited if pending.
async fn decide_on<S: Store>(store: &S, policy: &Arc<Policy>, key: &Key) -> bool {
    let decision = match store.check(policy, key, 1) {
        StoreReply::Ready(result) => result,
        StoreReply::Pending(future) => future.await,
    }
    .expect("the store answers");
    let allowed = decision.merged().allowed();
    black_box(&decision);
    allowed
}

/// One decision of cost 1 on the hot key, `Key::GLOBAL`.
async fn decide<S: Store>(store: &S, policy: &Arc<Policy>) -> bool {
    decide_on(store, policy, &Key::GLOBAL).await
}

/// One batch of parts 1 and 4.
struct Batch {
    /// Decisions per second.
    rate: f64,
    /// Each decision's time, ns, when timed.
    times: Vec<u32>,
    /// Decisions made.
    decisions: u64,
    /// A local-first store's counts at the end.
    stats: Option<LocalStats>,
}

/// Parts 1 and 4 on a fresh store of `kind`: [`TASKS`] tasks deciding as
/// fast as they can for `seconds`, each decision timed when `timed`.
async fn hammer(
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
fn percentiles(mut times: Vec<u32>) -> (f64, f64) {
    assert!(!times.is_empty(), "no decision was timed");
    let mut at = |q: f64| {
        let i = ((times.len() - 1) as f64 * q).round() as usize;
        f64::from(*times.select_nth_unstable(i).1)
    };
    (at(0.50), at(0.99))
}

/// The limit of parts 2 and 3 for `algorithm`: 1,000/s; GCRA's burst is
/// [`GCRA_BURST`] in part 3 (`burst`), the limit in part 2.
fn limit(algorithm: Algorithm, burst: bool) -> Arc<Policy> {
    let mut quota = Quota::per_second(RATE);
    if burst && algorithm == Algorithm::Gcra {
        quota = quota.with_burst(GCRA_BURST).expect("a valid burst");
    }
    Arc::new(Policy::new(vec![
        NamedLimit::new("api", quota).with_algorithm(algorithm),
    ]))
}

/// [`INSTANCES`] local-first stores in `mode`, each with its own
/// connection, over the same keys.
async fn instances(url: &str, prefix: &str, mode: LocalMode) -> Vec<LocalFirst<RedisStore>> {
    let mut stores = Vec::new();
    for _ in 0..INSTANCES {
        let redis = RedisStore::builder(url)
            .prefix(prefix)
            .connect()
            .await
            .expect("connect to the redis-server");
        stores.push(LocalFirst::builder(redis, mode).build());
    }
    stores
}

/// The instances' counts, summed.
fn total(stores: &[LocalFirst<RedisStore>]) -> LocalStats {
    let mut sum = LocalStats::default();
    for s in stores.iter().map(LocalFirst::stats) {
        sum.redis_calls += s.redis_calls;
        sum.reserved_units += s.reserved_units;
        sum.lapsed_units += s.lapsed_units;
        sum.local_decisions += s.local_decisions;
        sum.waited += s.waited;
    }
    sum
}

/// Part 2: [`TASKS`] tasks over [`INSTANCES`] instances, together at
/// `fraction` of the limit's rate, evenly spaced; half a second of warm-up,
/// then `seconds` measured.
async fn steady_load(
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

/// What `algorithm` (at `RATE`, GCRA with `GCRA_BURST`) allows over
/// `seconds` from the start of a flood that has reached its `windows`th
/// fixed window: GCRA, `burst + rate × seconds` (a full bucket at the
/// start, then one request per emission interval); the fixed window,
/// `limit × windows`.
pub fn allowed(algorithm: Algorithm, seconds: f64, windows: u64) -> u64 {
    match algorithm {
        Algorithm::FixedWindow => RATE * windows,
        _ => GCRA_BURST + (RATE as f64 * seconds).floor() as u64,
    }
}

/// Part 3: [`INSTANCES`] × 16 tasks deciding as fast as they can on one key
/// for [`FLOOD`], in exact mode (`interval_ms` `None`) or periodic mode.
///
/// In periodic mode each instance's tick (one per store, started by its
/// first request) is set going first, on another key, a quarter of the
/// interval after the one before: instances started at different times
/// sync out of step, as in a deployment. The flood starts 50 ms after a
/// whole second (a fixed window's start) and ends within the next window.
async fn flood(url: &str, prefix: &str, interval_ms: Option<u64>, algorithm: Algorithm) -> Flood {
    let mode = match interval_ms {
        None => LocalMode::Exact,
        Some(ms) => LocalMode::Periodic {
            sync_interval: Duration::from_millis(ms),
        },
    };
    let stores = instances(url, prefix, mode).await;
    let policy = limit(algorithm, true);
    if let Some(ms) = interval_ms {
        let apart = Duration::from_millis(ms) / INSTANCES as u32;
        for store in &stores {
            let started = tokio::time::Instant::now();
            decide_on(store, &policy, &Key::from_bytes(b"tick")).await;
            tokio::time::sleep_until(started + apart).await;
        }
    }
    // Windows start on whole seconds since 1970, by the server's clock
    // (this machine's).
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    let into_second = Duration::from_nanos(u64::from(since_epoch.subsec_nanos()));
    let to_next = Duration::from_secs(1) - into_second + Duration::from_millis(50);
    tokio::time::sleep(to_next).await;
    let first_window = window_now();
    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicI64::new(i64::MIN));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let store = stores[t % INSTANCES].clone();
            let (policy, stop) = (policy.clone(), stop.clone());
            let (admitted, peak) = (admitted.clone(), peak.clone());
            tokio::spawn(async move {
                let mut decisions = 0u64;
                'run: loop {
                    for _ in 0..YIELD_EVERY {
                        if stop.load(Ordering::Relaxed) {
                            break 'run;
                        }
                        if decide(&store, &policy).await {
                            // Over what the algorithm allows by now.
                            let n = admitted.fetch_add(1, Ordering::Relaxed) + 1;
                            let windows = window_now() - first_window + 1;
                            let allowed =
                                allowed(algorithm, started.elapsed().as_secs_f64(), windows);
                            peak.fetch_max(n as i64 - allowed as i64, Ordering::Relaxed);
                        }
                        decisions += 1;
                    }
                    tokio::task::yield_now().await;
                }
                decisions
            })
        })
        .collect();
    tokio::time::sleep(FLOOD).await;
    stop.store(true, Ordering::Relaxed);
    let windows = window_now() - first_window + 1;
    let mut decisions = 0;
    for task in tasks {
        decisions += task.await.expect("a task ends");
    }
    // Until every task ended: a decision in flight at the stop still
    // counts, so the time it may have taken is allowed too.
    let seconds = started.elapsed().as_secs_f64();
    let stats = total(&stores);
    Flood {
        interval_ms,
        algorithm,
        seconds,
        admitted: admitted.load(Ordering::Relaxed),
        decisions,
        windows,
        allowed: allowed(algorithm, seconds, windows),
        peak: peak.load(Ordering::Relaxed),
        reserved: stats.reserved_units,
        lapsed: stats.lapsed_units,
    }
}

/// The fixed window (of one second) the clock is in now.
fn window_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs()
}

impl Local {
    /// The scenario's own tables (parts 1 to 4), as they go into
    /// `BENCHMARKS.md`.
    pub fn to_markdown(&self) -> String {
        let mut out = format!(
            "Decisions per second (medians of alternating rounds) and the time of one decision \
             (medians of the rounds' percentiles), one instance, {TASKS} tasks, one key, GCRA \
             {HOT_RATE}/s (never reached), `Store::check` called directly, a yield every \
             {YIELD_EVERY} decisions.\n\n\
             | store | decisions/s | rounds (lowest–highest) | × MemoryStore | × RedisStore | p50 | p99 | Redis calls per decision | decisions that waited |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for (i, kind) in Kind::ALL.iter().enumerate() {
            let (decisions, calls, waited) = self.counts[i];
            let (calls, waited) = match kind {
                Kind::Exact | Kind::Periodic => (
                    format!("1 per {:.0}", decisions as f64 / calls.max(1) as f64),
                    format!("{:.3} %", 100.0 * waited as f64 / decisions.max(1) as f64),
                ),
                Kind::Memory => ("none".to_string(), "–".to_string()),
                Kind::Redis => ("1".to_string(), "all".to_string()),
            };
            let lowest = self.rounds[i].iter().copied().fold(f64::INFINITY, f64::min);
            let highest = self.rounds[i].iter().copied().fold(0.0, f64::max);
            let _ = writeln!(
                out,
                "| {} | {:.0} | {:.0}–{:.0} | {:.3} | {:.1} | {} | {} | {calls} | {waited} |",
                kind.label(),
                self.rates[i],
                lowest,
                highest,
                self.rates[i] / self.rates[0],
                self.rates[i] / self.rates[3],
                time(self.latency[i].0),
                time(self.latency[i].1),
            );
        }
        out.push_str(
            "\nRedis calls per decision, 4 instances × 16 tasks, steady load (requests evenly \
             spaced), limit 1,000/s (GCRA: burst 1,000), 0.5 s warm-up then the time measured.\n\n\
             | mode | algorithm | load | seconds | decisions | refused | calls (stats) | calls (server) | \
             calls per decision | decisions per call | lapsed | held at the end |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for s in &self.steady {
            let exact = s.mode == "exact";
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} % | {:.2} | {} | {} | {} | {} | {:.4} | {:.0} | {} | {} |",
                s.mode,
                s.algorithm,
                s.fraction * 100.0,
                s.seconds,
                s.decisions,
                s.refused,
                s.calls,
                s.server_calls,
                s.calls as f64 / s.decisions.max(1) as f64,
                s.decisions as f64 / s.calls.max(1) as f64,
                if exact {
                    s.lapsed.to_string()
                } else {
                    "–".into()
                },
                if exact {
                    s.unspent.to_string()
                } else {
                    "–".into()
                },
            );
        }
        let _ = write!(
            out,
            "\nOver-admission, 4 instances × 16 tasks flooding one key for {:.1} s; GCRA \
             {RATE}/s with a burst of {GCRA_BURST} (allowed: burst + rate × duration), fixed \
             window {RATE} per 1 s (allowed: {RATE} × windows reached).\n\n\
             | algorithm | mode | admitted | allowed | over-admission at the end | most over at any moment | lapsed | held at the end |\n\
             |---|---|---:|---:|---:|---:|---:|---:|\n",
            FLOOD.as_secs_f64()
        );
        for f in &self.floods {
            let mode = match f.interval_ms {
                None => "exact".to_string(),
                Some(ms) => format!("periodic {ms} ms"),
            };
            let exact = f.interval_ms.is_none();
            let allowed = match f.algorithm {
                Algorithm::FixedWindow => format!("{} ({} windows)", f.allowed, f.windows),
                _ => format!("{} ({:.2} s)", f.allowed, f.seconds),
            };
            let _ = writeln!(
                out,
                "| {} | {mode} | {} | {allowed} | {:+} | {:+} | {} | {} |",
                f.algorithm,
                f.admitted,
                f.over(),
                f.peak,
                if exact {
                    f.lapsed.to_string()
                } else {
                    "–".into()
                },
                if exact {
                    f.unspent().to_string()
                } else {
                    "–".into()
                },
            );
        }
        out
    }

    /// The chart: over-admission against the sync interval, periodic mode,
    /// one line per algorithm; exact mode's figure as a dashed line.
    pub fn draw(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let overs: Vec<f64> = self
            .floods
            .iter()
            .flat_map(|f| [f.over() as f64, f.peak as f64])
            .collect();
        let top = overs.iter().copied().fold(100.0f64, f64::max) * 1.15;
        let bottom = overs.iter().copied().fold(0.0f64, f64::min) * 1.15 - top * 0.05;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Local-first, periodic mode: over-admission against the sync interval \
                     (4 instances × 16 tasks, {:.1} s flood)",
                    FLOOD.as_secs_f64()
                ),
                ("sans-serif", 17),
            )
            .margin(14)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((8.0f64..1_250.0).log_scale(), bottom..top)?;
        chart
            .configure_mesh()
            .x_desc("sync interval, ms (log scale)")
            .y_desc("admitted − allowed (requests)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:+.0}"))
            .label_style(("sans-serif", 13))
            .draw()?;
        let colors = [RGBColor(214, 39, 40), RGBColor(31, 119, 180)];
        for (algorithm, color) in [Algorithm::Gcra, Algorithm::FixedWindow]
            .into_iter()
            .zip(colors)
        {
            let runs: Vec<&Flood> = self
                .floods
                .iter()
                .filter(|f| f.algorithm == algorithm)
                .collect();
            let points: Vec<(f64, f64)> = runs
                .iter()
                .filter_map(|f| Some((f.interval_ms? as f64, f.over() as f64)))
                .collect();
            let peaks: Vec<(f64, f64)> = runs
                .iter()
                .filter_map(|f| Some((f.interval_ms? as f64, f.peak as f64)))
                .collect();
            let name = match algorithm {
                Algorithm::Gcra => format!("GCRA {RATE}/s, burst {GCRA_BURST}"),
                _ => format!("fixed window {RATE}/s"),
            };
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(format!("{name}, periodic: at the end of the flood"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(
                points
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
            )?;
            chart.draw_series(
                points.iter().map(|&(x, y)| {
                    Text::new(format!("{y:+.0}"), (x * 1.06, y), ("sans-serif", 12))
                }),
            )?;
            chart
                .draw_series(DashedLineSeries::new(
                    peaks.clone(),
                    8,
                    4,
                    color.stroke_width(2),
                ))?
                .label(format!("{name}, periodic: most over at any moment"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 8, y)], color.stroke_width(2))
                });
            chart.draw_series(
                peaks
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, color.stroke_width(2))),
            )?;
            if let Some(exact) = runs.iter().find(|f| f.interval_ms.is_none()) {
                let y = exact.over() as f64;
                chart
                    .draw_series(DashedLineSeries::new(
                        vec![(8.0, y), (1_250.0, y)],
                        6,
                        4,
                        color.mix(0.7).stroke_width(1),
                    ))?
                    .label(format!("{name}, exact mode: {:+.0}", y))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.mix(0.7).stroke_width(1))
                    });
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::MiddleLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
        root.present()?;
        Ok(())
    }
}

/// A time in ns for a table: ns, µs or ms.
fn time(ns: f64) -> String {
    if ns >= 1_000_000.0 {
        format!("{:.2} ms", ns / 1_000_000.0)
    } else if ns >= 1_000.0 {
        format!("{:.1} µs", ns / 1_000.0)
    } else {
        format!("{ns:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_follows_each_algorithm() {
        assert_eq!(allowed(Algorithm::Gcra, 1.9, 2), GCRA_BURST + 1_900);
        assert_eq!(allowed(Algorithm::FixedWindow, 1.9, 2), 2 * RATE);
    }

    #[test]
    fn over_admission_and_unspent_units() {
        let f = Flood {
            interval_ms: None,
            algorithm: Algorithm::Gcra,
            seconds: 1.9,
            admitted: 1_990,
            decisions: 10_000,
            windows: 2,
            allowed: 2_000,
            peak: -1,
            reserved: 2_000,
            lapsed: 4,
        };
        assert_eq!(f.over(), -10);
        assert_eq!(f.unspent(), 6);
    }

    #[test]
    fn percentiles_pick_ranks() {
        let times: Vec<u32> = (1..=100).collect();
        assert_eq!(percentiles(times), (51.0, 99.0));
    }
}
