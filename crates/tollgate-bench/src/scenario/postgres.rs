//! postgres: the compare-and-swap store over PostgreSQL
//! (`CasStore<tollgate_postgres::PostgresBackend>`) beside the Redis store
//! (`RedisStore`, one `FCALL` a decision), in one run, on one machine:
//! a fresh `postgres` and a fresh `redis-server`, both on loopback, both
//! started by the program.
//!
//! Two loads, each on both stores in alternating rounds ([`alternate`]),
//! 64 tasks calling `Store::check` directly (no layer), a pending reply
//! awaited, the whole decision handed to `black_box`:
//!
//! Both loads run a fixed window of 1,000,000,000 an hour: never
//! exhausted, so every decision is an admission, and a key's count stays
//! live for the hour, so every Postgres decision reads a live row and
//! updates it (with a GCRA far above the load, a key's state is back at
//! rest a few microseconds after each request: a write would find the
//! row expired and replace it, and racing writers would all succeed,
//! which measures no contention).
//!
//! - **random keys**: each task draws keys among 10,000 (12 digits).
//! - **a hot key**: every task on one key. The calls of one store on one
//!   key take turns, so one store's 64 tasks never race; four stores (as
//!   four processes, 16 tasks and a pool of 4 each) do: each write that
//!   finds another version is read, decided and tried again after a
//!   jittered pause, at most 8 times, then the call fails
//!   (`CasError::Contended`). Its table gives, for both, the lost races
//!   per decision and the calls that ran out of attempts; Redis runs its
//!   script atomically, so it has neither.
//!
//! The Postgres store runs with its defaults (16 pooled connections, no
//! block cache: no key is ever refused here) over a logged table, as
//! `create_schema` makes by default; the server has the test harness's
//! settings (`fsync=off`, commits written to the log before they return),
//! so that the figures measure the statements and not this machine's
//! disk.
//!
//! Local-first in front of it (`tollgate_local::LocalFirst` over the
//! same store, exact mode), three more sides, each beside its anchor in
//! the same alternating rounds:
//!
//! - **against the memory store**: one local-first store, 64 tasks, one
//!   hot key, the local scenario's part 1 load and limit (a GCRA far
//!   above the load; `local::hot_rate`), beside a `MemoryStore`;
//! - **four processes on one hot key**: four local-first stores, each over
//!   its own store and pool, 16 tasks each, the fixed window above, beside
//!   the plain `RedisStore`'s hot-key figure;
//! - **over HTTP**: the HTTP scenario's server and load generator (one
//!   instance, 32 connections, every request one key), the layer over a
//!   local-first store over PostgreSQL beside the same layer over a
//!   `MemoryStore`.
//!
//! Needs the PostgreSQL binaries (Debian: `postgresql`), `redis-server`
//! and `redis-benchmark`; without them the scenario is skipped with a
//! message.

use crate::measure::{Settings, alternate};
use crate::report::{Better, Outcome, median};
use crate::scenario::{http, local};
use std::cell::RefCell;
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate::{Key, MemoryStore, NamedLimit, Policy, RateLimitLayer, Store, headers::HeaderStyle};
use tollgate_cas::CasStore;
use tollgate_core::{Algorithm, Quota};
use tollgate_local::{LocalFirst, LocalMode};
use tollgate_postgres::PostgresBackend;
use tollgate_redis::RedisStore;
use tollgate_tests::postgres::PostgresServer;
use tollgate_tests::redis::RedisServer;

/// Concurrent tasks.
const TASKS: u64 = 64;
/// Distinct keys of the random-key load.
const KEYS: u64 = 10_000;

/// Why the scenario cannot run here, if it cannot.
pub fn missing_tools() -> Option<String> {
    if !tollgate_tests::postgres::available() {
        return Some(
            "postgres scenario skipped: the PostgreSQL binaries were not found (install the \
             postgresql package)"
                .to_owned(),
        );
    }
    crate::scenario::redis::missing_tools()
        .map(|why| why.replace("redis scenario", "postgres scenario"))
}

/// Which keys a load draws.
#[derive(Clone, Copy, Debug)]
enum Keys {
    /// Among [`KEYS`], pseudo-random per task.
    Random,
    /// One key for every task.
    Hot,
}

/// What one round of one load on one store did.
#[derive(Clone, Copy, Debug, Default)]
struct Round {
    /// Decisions per second.
    rate: f64,
    decisions: u64,
    /// Calls that failed (for the compare-and-swap store: out of attempts).
    failed: u64,
}

/// The scenario's rows, and its table of contention.
pub struct PostgresRun {
    /// The rows: Postgres against Redis, decisions per second, per load.
    pub outcomes: Vec<Outcome>,
    /// The hot key's contention, as Markdown.
    pub table: String,
}

/// Runs the scenario; the caller has checked [`missing_tools`].
pub fn run(settings: Settings) -> PostgresRun {
    let seconds = settings.pick(2.0, 0.7);
    let rounds = settings.pick(5, 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (postgres_server, redis_server) = (PostgresServer::start(), RedisServer::start());
    let (postgres, redis) = runtime.block_on(async {
        let backend = PostgresBackend::builder(postgres_server.url())
            .create_schema(true)
            .connect()
            .await
            .expect("connect to the postgres just started");
        let redis = RedisStore::builder(redis_server.url())
            .block_cache(false)
            .connect()
            .await
            .expect("connect to the redis-server just started");
        (CasStore::new(backend), redis)
    });
    // Four stores, as four processes: a pool of 4 each, 16 tasks each.
    let four: Vec<_> = runtime.block_on(async {
        let mut stores = Vec::new();
        for _ in 0..4 {
            let backend = PostgresBackend::builder(postgres_server.url())
                .pool_size(4)
                .connect()
                .await
                .expect("connect to the postgres just started");
            stores.push(CasStore::new(backend));
        }
        stores
    });
    // Local-first over PostgreSQL: one store (its own pool, a prefix of
    // its own), and four, as four processes.
    let local_one = LocalFirst::builder(
        CasStore::builder(postgres.backend().clone())
            .prefix("local")
            .build(),
        LocalMode::Exact,
    )
    .build();
    let local_four: Vec<_> = four
        .iter()
        .map(|store| {
            let store = CasStore::builder(store.backend().clone())
                .prefix("local-four")
                .build();
            LocalFirst::builder(store, LocalMode::Exact).build()
        })
        .collect();
    let http_seconds = Duration::from_secs_f64(settings.pick(2.0, 0.4));
    let url = postgres_server.url();
    let random = policy();
    let hot = policy();
    // The hot key's lost races and failures, counted per round: one store,
    // four stores.
    let hot_counts: RefCell<Vec<(Round, u64)>> = RefCell::new(Vec::new());
    let four_counts: RefCell<Vec<(Round, u64)>> = RefCell::new(Vec::new());
    let lost = |stores: &[CasStore<PostgresBackend>]| -> u64 {
        stores.iter().map(CasStore::conflicts).sum()
    };
    let figures = {
        let mut pg_random = || {
            runtime
                .block_on(drive(
                    std::slice::from_ref(&postgres),
                    &random,
                    Keys::Random,
                    seconds,
                ))
                .rate
        };
        let mut redis_random = || {
            runtime
                .block_on(drive(
                    std::slice::from_ref(&redis),
                    &random,
                    Keys::Random,
                    seconds,
                ))
                .rate
        };
        let mut pg_hot = || {
            let lost_before = postgres.conflicts();
            let round = runtime.block_on(drive(
                std::slice::from_ref(&postgres),
                &hot,
                Keys::Hot,
                seconds,
            ));
            hot_counts
                .borrow_mut()
                .push((round, postgres.conflicts() - lost_before));
            round.rate
        };
        let mut redis_hot = || {
            runtime
                .block_on(drive(
                    std::slice::from_ref(&redis),
                    &hot,
                    Keys::Hot,
                    seconds,
                ))
                .rate
        };
        let mut pg_hot_four = || {
            let lost_before = lost(&four);
            let round = runtime.block_on(drive(&four, &hot, Keys::Hot, seconds));
            four_counts
                .borrow_mut()
                .push((round, lost(&four) - lost_before));
            round.rate
        };
        let mut memory_hot = || runtime.block_on(local::hot_rate(MemoryStore::new(), seconds));
        let mut local_hot = || runtime.block_on(local::hot_rate(local_one.clone(), seconds));
        let mut local_hot_four = || {
            runtime
                .block_on(drive(&local_four, &hot, Keys::Hot, seconds))
                .rate
        };
        let mut memory_http =
            || http::serve_app(|| async { app(MemoryStore::new()) }, 200, http_seconds);
        let mut local_http = || {
            let url = url.clone();
            http::serve_app(
                move || async move {
                    // Connected on the server's runtime: its pool's tasks
                    // and the store's reservations run there.
                    let backend = PostgresBackend::builder(url)
                        .connect()
                        .await
                        .expect("connect to the postgres just started");
                    let store = CasStore::builder(backend).prefix("local-http").build();
                    app(LocalFirst::builder(store, LocalMode::Exact).build())
                },
                200,
                http_seconds,
            )
        };
        alternate(
            rounds,
            &mut [
                &mut pg_random,
                &mut redis_random,
                &mut pg_hot,
                &mut redis_hot,
                &mut pg_hot_four,
                &mut memory_hot,
                &mut local_hot,
                &mut local_hot_four,
                &mut memory_http,
                &mut local_http,
            ],
        )
    };
    let outcomes = vec![
        Outcome::new(
            "postgres: fixed-window decisions, 64 tasks, 10,000 keys",
            median(&figures[0]),
            median(&figures[1]),
            "decisions/s",
            Better::Higher,
        )
        .against("RedisStore, same tasks and keys, same run"),
        Outcome::new(
            "postgres: fixed-window decisions, 64 tasks, 1 hot key",
            median(&figures[2]),
            median(&figures[3]),
            "decisions/s",
            Better::Higher,
        )
        .against("RedisStore, same tasks and key, same run"),
        Outcome::new(
            "postgres local: exact vs memory store, 64 tasks, 1 key",
            median(&figures[6]),
            median(&figures[5]),
            "decisions/s",
            Better::Higher,
        )
        .target(0.5)
        .against("MemoryStore, same tasks"),
        Outcome::new(
            "postgres local: exact, 4 processes, 1 hot key, vs RedisStore",
            median(&figures[7]),
            median(&figures[3]),
            "decisions/s",
            Better::Higher,
        )
        .target(1.0)
        .against("RedisStore (1 call per request), 64 tasks, same run"),
        Outcome::new(
            "postgres local: exact over HTTP vs memory store, 1 key",
            median(&figures[9]),
            median(&figures[8]),
            "requests/s",
            Better::Higher,
        )
        .target(0.8)
        .against("MemoryStore, same server and load"),
    ];
    // The untimed first round of each side is in the counts too: left out.
    let measured = |counts: RefCell<Vec<(Round, u64)>>| {
        let counts = counts.into_inner();
        counts[counts.len().saturating_sub(rounds)..].to_vec()
    };
    let table = contention_table(&measured(hot_counts), &measured(four_counts), &figures);
    drop((postgres, redis, four, local_one, local_four));
    drop(runtime);
    PostgresRun { outcomes, table }
}

/// The HTTP scenario's hello-world app behind the layer over `store`: a
/// limit never reached, one key per client address, the IETF fields.
fn app<St>(store: St) -> axum::Router
where
    St: Store,
{
    let quota = Quota::per_second(1_000_000_000);
    crate::scenario::layer::app().layer(
        RateLimitLayer::builder()
            .quota("api", quota)
            .key(tollgate::PeerIp)
            .headers(HeaderStyle::default())
            .store(store)
            .build(),
    )
}

/// A fixed window of 1,000,000,000 an hour: never exhausted, each key's
/// count live for the hour.
fn policy() -> Arc<Policy> {
    let quota = "1000000000/h".parse::<Quota>().expect("a valid quota");
    Arc::new(Policy::new(vec![
        NamedLimit::new("api", quota).with_algorithm(Algorithm::FixedWindow),
    ]))
}

/// `TASKS` tasks calling `check` for `seconds`, spread over `stores`.
async fn drive<St: Store>(stores: &[St], policy: &Arc<Policy>, keys: Keys, seconds: f64) -> Round {
    let decisions = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .zip(stores.iter().cycle())
        .map(|(t, store)| {
            let (store, policy) = (store.clone(), policy.clone());
            let (decisions, failed, stop) = (decisions.clone(), failed.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = t;
                let hot = Key::from("hot");
                while !stop.load(Ordering::Relaxed) {
                    let key = match keys {
                        Keys::Hot => hot.clone(),
                        Keys::Random => {
                            // A different pseudo-random key each time (an LCG).
                            i = i
                                .wrapping_mul(6_364_136_223_846_793_005)
                                .wrapping_add(1_442_695_040_888_963_407);
                            Key::from_bytes(format!("{:012}", (i >> 33) % KEYS).as_bytes())
                        }
                    };
                    match store.check(&policy, &key, 1).resolve().await {
                        Ok(decision) => {
                            black_box(&decision);
                            decisions.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a task ends");
    }
    let decisions = decisions.load(Ordering::Relaxed);
    Round {
        rate: decisions as f64 / started.elapsed().as_secs_f64(),
        decisions,
        failed: failed.load(Ordering::Relaxed),
    }
}

/// The hot key's rounds on the Postgres store, one store and four, as a
/// table.
fn contention_table(one: &[(Round, u64)], four: &[(Round, u64)], figures: &[Vec<f64>]) -> String {
    let mut out = format!(
        "PostgreSQL store, one hot key, {TASKS} tasks (a fixed window of 1,000,000,000 an hour: \
         every decision an admission and a write of a live row), medians of {} rounds \
         (lowest–highest):\n\n\
         | store | decisions/s | lost races per decision | calls out of attempts (8) |\n\
         |---|---:|---:|---:|\n",
        one.len()
    );
    for (name, rounds, rates) in [
        ("`CasStore<PostgresBackend>`, one store", one, &figures[2]),
        (
            "`CasStore<PostgresBackend>`, four stores (as four processes)",
            four,
            &figures[4],
        ),
    ] {
        let (lost, failed) = contention(rounds);
        let _ = writeln!(
            out,
            "| {name} | {:.0} | {} | {} % |",
            median(rates),
            spread(&lost, 2),
            spread(&failed, 2)
        );
    }
    let _ = writeln!(
        out,
        "| `RedisStore` (one script, atomic) | {:.0} | none | none |",
        median(&figures[3])
    );
    out
}

/// Each round's lost races per decision, and its calls out of attempts
/// in per cent of all calls.
fn contention(rounds: &[(Round, u64)]) -> (Vec<f64>, Vec<f64>) {
    rounds
        .iter()
        .map(|(round, lost)| {
            let calls = (round.decisions + round.failed).max(1) as f64;
            (
                *lost as f64 / round.decisions.max(1) as f64,
                100.0 * round.failed as f64 / calls,
            )
        })
        .unzip()
}

/// The median of `values` and their lowest and highest, to `digits`.
fn spread(values: &[f64], digits: usize) -> String {
    let lowest = values.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = values.iter().copied().fold(0.0, f64::max);
    format!(
        "{:.digits$} ({:.digits$}–{:.digits$})",
        median(values),
        lowest,
        highest
    )
}
