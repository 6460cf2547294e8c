//! MemoryStore at 1,000,000 keys beside governor's keyed limiter (DashMap):
//! time per check on random keys, and resident memory per key.
//!
//! Each side runs in its own child process, so that memory freed by one side
//! cannot be reused by the other and skew its figure. A child fills 1,000,000
//! IPv4 keys (one check each), reads its resident set size before and after,
//! then times rounds of 1,000,000 checks on keys drawn from the same
//! pseudo-random sequence for both sides, and prints the median round.
//!
//! Run: `cargo bench -p tollgate --bench memory`.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::process::Command;
use std::time::Instant;
use tollgate::{Key, MemoryStore, NamedLimit, Policy};
use tollgate_core::Quota;

const KEYS: u32 = 1_000_000;
const ROUNDS: usize = 5;
const SIDE: &str = "TOLLGATE_MEMORY_BENCH_SIDE";

fn main() {
    match std::env::var(SIDE).as_deref() {
        Ok("tollgate") => run("tollgate", tollgate_side()),
        Ok("governor") => run("governor", governor_side()),
        _ => {
            for side in ["governor", "tollgate", "governor", "tollgate"] {
                let exe = std::env::current_exe().expect("own path");
                let status = Command::new(exe).env(SIDE, side).status().expect("child");
                assert!(status.success());
            }
        }
    }
}

/// A side: fill all keys, then check one key.
struct Side {
    fill: Box<dyn FnMut(u32)>,
    check: Box<dyn FnMut(u32) -> bool>,
}

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(n.wrapping_mul(2_654_435_761)))
}

fn tollgate_side() -> Side {
    let store = MemoryStore::builder().max_keys(KEYS as usize * 2).build();
    let policy = std::sync::Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_second(1_000_000),
    )]));
    let (s1, p1) = (store.clone(), policy.clone());
    Side {
        fill: Box::new(move |n| {
            black_box(s1.check_now(&p1, &Key::Ip(ip(n)), 1));
        }),
        check: Box::new(move |n| store.check_now(&policy, &Key::Ip(ip(n)), 1).merged.allowed),
    }
}

fn governor_side() -> Side {
    let limiter = std::sync::Arc::new(governor::RateLimiter::keyed(governor::Quota::per_second(
        NonZeroU32::new(1_000_000).unwrap(),
    )));
    let l1 = limiter.clone();
    Side {
        fill: Box::new(move |n| {
            let _ = black_box(l1.check_key(&ip(n)));
        }),
        check: Box::new(move |n| limiter.check_key(&ip(n)).is_ok()),
    }
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn run(name: &str, mut side: Side) {
    let before = resident_bytes();
    for n in 0..KEYS {
        (side.fill)(n);
    }
    let per_key = (resident_bytes() - before) as f64 / f64::from(KEYS);
    let mut rounds = Vec::new();
    let mut x: u32 = 0x9e37_79b9;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let mut allowed = 0u32;
        for _ in 0..KEYS {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            allowed += u32::from((side.check)(x % KEYS));
        }
        black_box(allowed);
        rounds.push(start.elapsed().as_nanos() as f64 / f64::from(KEYS));
    }
    rounds.sort_by(f64::total_cmp);
    println!(
        "{name:<9} 1M keys: {:>6.1} ns/check (median of {ROUNDS} rounds), {per_key:>6.1} bytes/key resident",
        rounds[ROUNDS / 2]
    );
}
