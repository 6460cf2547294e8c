//! memory store: `MemoryStore` vs governor's keyed limiter (DashMap), with
//! 1 key and with 1,000,000 keys: time per check, and resident bytes per key.
//!
//! Both sides use their real clocks (tollgate's `MonotonicClock` and
//! governor's default, both quanta), a GCRA quota of 1,000,000/s per key (so
//! every check is allowed and writes), and the same keys: IPv4 addresses,
//! `Key::from(IpAddr)` on our side and `IpAddr` on governor's.
//!
//! The 1M-key figures come from child processes of this same binary
//! (`--child memory-ours`, `--child memory-anchor`), one per side per round,
//! alternating. A fresh process is the honest way to measure resident
//! memory: memory one side freed cannot be reused by the other, and neither
//! side's map is still around. Each child builds its map, reads `VmRSS`
//! from `/proc/self/status`, fills 1,000,000 keys (one check each), reads
//! `VmRSS` again, then times passes of 1,000,000 checks on keys drawn from
//! one pseudo-random sequence, the same for both sides.
//!
//! `MemoryStore` is bounded (`max_keys`); it is built with room for 2M keys
//! so that no key is evicted while filling (the bound is split over shards,
//! which do not fill evenly). The bound allocates nothing up front.

use crate::measure::{Settings, Xorshift, ns_per_op, pair, run_child};
use crate::report::{Better, Outcome, median};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Instant;
use tollgate::{Key, MemoryStore, NamedLimit, Policy};
use tollgate_core::Quota;

/// Keys in the large map.
const KEYS: u32 = 1_000_000;
/// Checks per second per key: never exhausted here.
const RATE: u32 = 1_000_000;

/// What a child reports on its standard output, as one JSON line.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChildReport {
    /// Median time of one check on a random key of the full map.
    pub ns_per_check: f64,
    /// Growth of the resident set while filling, per key.
    pub bytes_per_key: f64,
}

/// Which side a child measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// tollgate's `MemoryStore`.
    Ours,
    /// governor's keyed limiter.
    Anchor,
}

impl Side {
    /// The `--child` argument that selects this side.
    pub fn child_name(self) -> &'static str {
        match self {
            Side::Ours => "memory-ours",
            Side::Anchor => "memory-anchor",
        }
    }
}

/// Runs the scenario (spawning children for the 1M-key rows).
pub fn run(settings: Settings) -> Vec<Outcome> {
    let n: u64 = settings.pick(2_000_000, 500_000);
    let (ours, theirs) = pair(
        settings.rounds(),
        || ours_one_key(n),
        || governor_one_key(n),
    );
    let mut out = vec![
        Outcome::new(
            "memory store: 1 key",
            ours,
            theirs,
            "ns/check",
            Better::Lower,
        )
        .against("governor keyed (DashMap)"),
    ];

    // Fewer rounds: each child fills a million keys first.
    let rounds = settings.pick(5, 3);
    let ours = || spawn(Side::Ours, settings);
    let theirs = || spawn(Side::Anchor, settings);
    // Not `alternate`: its warm-up would spawn two children for nothing, as
    // every child starts cold anyway. Still one child per side per round,
    // each round starting with the other side.
    let mut reports: [Vec<ChildReport>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for i in 0..2 {
            let which = (round + i) % 2;
            let report = if which == 0 { ours() } else { theirs() };
            reports[which].push(report);
        }
    }
    let time = |r: &[ChildReport]| median(&r.iter().map(|c| c.ns_per_check).collect::<Vec<_>>());
    let bytes = |r: &[ChildReport]| median(&r.iter().map(|c| c.bytes_per_key).collect::<Vec<_>>());
    out.push(
        Outcome::new(
            "memory store: 1M keys, random key",
            time(&reports[0]),
            time(&reports[1]),
            "ns/check",
            Better::Lower,
        )
        .target(1.0)
        .against("governor keyed (DashMap)"),
    );
    out.push(
        Outcome::new(
            "memory store: 1M keys, resident memory",
            bytes(&reports[0]),
            bytes(&reports[1]),
            "bytes/key",
            Better::Lower,
        )
        .target(1.0)
        .against("governor keyed (DashMap)"),
    );
    out
}

/// Runs one child of this binary for `side` and reads its report.
fn spawn(side: Side, settings: Settings) -> ChildReport {
    let text = run_child(side.child_name(), settings);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("child report {text:?}: {e}"))
}

/// The `n`-th key, scattered over the address space as real clients are.
fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(n.wrapping_mul(2_654_435_761)))
}

/// The policy of our side: one GCRA limit, so keys live in atomic cells.
fn policy() -> Arc<Policy> {
    Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_second(u64::from(RATE)),
    )]))
}

/// governor's keyed limiter over DashMap with the same quota.
fn governor_keyed() -> governor::DefaultKeyedRateLimiter<IpAddr> {
    governor::RateLimiter::dashmap(governor::Quota::per_second(
        NonZeroU32::new(RATE).expect("non-zero"),
    ))
}

/// `n` checks of one key in a fresh `MemoryStore`.
fn ours_one_key(n: u64) -> f64 {
    let store = MemoryStore::new();
    let policy = policy();
    let key = Key::from(ip(1));
    let start = Instant::now();
    for _ in 0..n {
        black_box(&store.check_now(&policy, black_box(&key), 1));
    }
    ns_per_op(start, n)
}

/// `n` checks of one key in a fresh governor keyed limiter.
fn governor_one_key(n: u64) -> f64 {
    let limiter = governor_keyed();
    let key = ip(1);
    let start = Instant::now();
    for _ in 0..n {
        let _ = black_box(&limiter.check_key(black_box(&key)));
    }
    ns_per_op(start, n)
}

/// The body of a `--child memory-…` process: prints one [`ChildReport`].
pub fn child(side: Side, settings: Settings) {
    let passes = settings.pick(3, 1);
    let report = match side {
        Side::Ours => {
            let store = MemoryStore::builder().max_keys(2 * KEYS as usize).build();
            let policy = policy();
            let report = measure_child(passes, |n| {
                black_box(&store.check_now(&policy, &Key::from(ip(n)), 1));
            });
            // Had the bound evicted keys, this side would hold fewer and
            // look smaller and faster than it is.
            assert_eq!(store.len(), KEYS as usize, "tollgate evicted keys");
            report
        }
        Side::Anchor => {
            let limiter = governor_keyed();
            let report = measure_child(passes, |n| {
                let _ = black_box(&limiter.check_key(&ip(n)));
            });
            assert_eq!(limiter.len(), KEYS as usize, "governor lost keys");
            report
        }
    };
    println!(
        "{}",
        serde_json::to_string(&report).expect("a report serializes")
    );
}

/// Fills `KEYS` keys with `check`, measuring resident memory around it, then
/// times `passes` passes of `KEYS` checks on random keys.
fn measure_child(passes: usize, mut check: impl FnMut(u32)) -> ChildReport {
    let before = resident_bytes();
    for n in 0..KEYS {
        check(n);
    }
    let after = resident_bytes();
    let bytes_per_key = after.saturating_sub(before) as f64 / f64::from(KEYS);
    let mut random = Xorshift::new();
    let times: Vec<f64> = (0..passes)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..KEYS {
                check(random.next_u32() % KEYS);
            }
            ns_per_op(start, u64::from(KEYS))
        })
        .collect();
    ChildReport {
        ns_per_check: median(&times),
        bytes_per_key,
    }
}

/// This process's resident set (`VmRSS`), in bytes; 0 where `/proc` is not.
pub fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")] // resident memory is read from /proc
    fn resident_memory_grows_with_a_touched_allocation() {
        let before = resident_bytes();
        assert!(before > 0, "this test runs on Linux");
        let block = vec![1u8; 64 << 20];
        let after = resident_bytes();
        black_box(&block);
        assert!(after >= before + (32 << 20), "{before} -> {after}");
    }
}
