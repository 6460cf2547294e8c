//! contention: 2 threads checking at once, on one shared key and on
//! distinct keys, in checks per second: `MemoryStore` vs governor's keyed
//! limiter (DashMap).
//!
//! Both sides: a GCRA quota of 1,000,000,000/s (never exhausted, so every
//! check is allowed and writes), real clocks, IPv4 keys. "Distinct keys":
//! each thread cycles through 1,024 keys of its own, inserted before timing
//! starts, so threads share shards (and their locks' counters) as they would
//! in a server, but never a key. The threads start together on a barrier;
//! the figure is all checks over the wall time until the last thread ends.

use crate::measure::{Settings, pair, per_second};
use crate::report::{Better, Outcome};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::time::Instant;
use tollgate::{Key, MemoryStore, NamedLimit, Policy};
use tollgate_core::Quota;

/// Threads checking at once: the machine's two cores.
const THREADS: u32 = 2;
/// Keys per thread in the distinct-key rows.
const KEYS_PER_THREAD: u32 = 1_024;
/// Checks per second per key: never exhausted here.
const RATE: u32 = 1_000_000_000;

/// Runs the scenario.
pub fn run(settings: Settings) -> Vec<Outcome> {
    let n: u32 = settings.pick(2_000_000, 500_000);
    let rounds = settings.rounds();
    let mut out = Vec::new();
    for (name, distinct) in [
        ("contention: 2 threads, one key", false),
        ("contention: 2 threads, distinct keys", true),
    ] {
        let (ours, theirs) = pair(
            rounds,
            || {
                let store = MemoryStore::new();
                let policy = Arc::new(Policy::new(vec![NamedLimit::new(
                    "api",
                    Quota::per_second(u64::from(RATE)),
                )]));
                threads(n, distinct, move |key| {
                    black_box(&store.check_now(&policy, &Key::from(key), 1));
                })
            },
            || {
                let limiter = governor::RateLimiter::dashmap(governor::Quota::per_second(
                    NonZeroU32::new(RATE).expect("non-zero"),
                ));
                threads(n, distinct, move |key| {
                    let _ = black_box(&limiter.check_key(&key));
                })
            },
        );
        out.push(
            Outcome::new(name, ours, theirs, "checks/s", Better::Higher)
                .against("governor keyed (DashMap)"),
        );
    }
    out
}

/// The key a thread uses for its `i`-th check.
fn key(thread: u32, i: u32, distinct: bool) -> IpAddr {
    let n = if distinct {
        thread * KEYS_PER_THREAD + i % KEYS_PER_THREAD
    } else {
        0
    };
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | n))
}

/// Runs `n` checks on each of `THREADS` threads at once; checks per second.
fn threads(n: u32, distinct: bool, check: impl Fn(IpAddr) + Sync) -> f64 {
    let barrier = Barrier::new(THREADS as usize + 1);
    let start = std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (check, barrier) = (&check, &barrier);
            scope.spawn(move || {
                // Insert this thread's keys before the clock starts.
                for i in 0..KEYS_PER_THREAD {
                    check(key(thread, i, distinct));
                }
                barrier.wait();
                for i in 0..n {
                    check(key(thread, i, distinct));
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    // The scope has joined every thread: the time is the last one's.
    per_second(start, u64::from(n) * u64::from(THREADS))
}
