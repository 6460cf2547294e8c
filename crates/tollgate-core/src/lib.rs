//! Rate-limiting algorithms as pure state machines over an injected clock.
//!
//! `tollgate-core` is the foundation of the tollgate crates: no async, no I/O,
//! no allocation on a check (but for the sliding log's entries). Each
//! algorithm takes a key's state, the time `now` in integer nanoseconds and
//! the request's `cost`, and returns a [`Decision`]. A denied request changes
//! nothing. The tower middleware, the in-memory store and the Redis scripts
//! all implement exactly these semantics.
//!
//! ```
//! use tollgate_core::{Algorithm, Clock, Limiter, ManualClock, Quota};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new(0);
//! let limiter = Limiter::new(Algorithm::Gcra, "10/s".parse().unwrap());
//! let mut state = limiter.new_state();
//! let passed = (0..20).filter(|_| limiter.check(&mut state, clock.now(), 1).allowed()).count();
//! assert_eq!(passed, 10);
//! clock.advance(Duration::from_millis(100));
//! assert!(limiter.check(&mut state, clock.now(), 1).allowed());
//! ```
//!
//! Time comes from a [`Clock`]: [`MonotonicClock`] in production,
//! [`ManualClock`] in tests that move time by hand, and (feature `tokio`)
//! `TokioClock` in tests under a paused tokio runtime, where
//! `tokio::time::advance` moves it.
//!
//! # Choosing an algorithm
//!
//! | algorithm | state per key | bursts | accuracy | distributed cost (Redis) |
//! |---|---|---|---|---|
//! | [`Gcra`] (default) | 8 bytes | up to `burst` at once, then smooth | exact to 1 ns of emission interval | one key, one small value |
//! | [`TokenBucket`] | 24 bytes | up to `burst`, refill continuous or per interval | exact | one key, one string (the GCRA time, or tokens and time for interval refill) |
//! | [`LeakyBucket`] | 8 bytes | none leave faster than the rate; up to `burst` wait | exact | one key, one value |
//! | [`FixedWindow`] | 16 bytes | up to `2 × limit` across a window boundary | exact per aligned window | one key, one string (window and count) |
//! | [`SlidingLog`] | 16 bytes per admitted request (up to `limit`, at most 4,096 entries by default) | never over `limit` in any period | exact (below its entry bound) | one sorted set of up to `limit` entries (same bound) |
//! | [`SlidingWindow`] | 24 bytes | approximates the log; ≤ `limit` per aligned window | estimate, assumes even spread | one key, one string (window and two counts) |
//! | [`SlidingWindowBuckets`] | 24 bytes + 8 × (n + 1) on the heap (512 bytes at the default n = 60) | never over `limit` in any period | exact over the period rounded out to sub-window edges: refuses at most one sub-window's worth more than the log | one hash of up to `n + 1` small counters (744 B at 500/h, 60 sub-windows) |
//!
//! - **GCRA** is the default: the smallest state, smooth admission, a
//!   configurable burst. Pick it unless you have a reason not to.
//! - **Token bucket** admits the same sequences as GCRA, computed exactly in
//!   tokens; its interval refill (all tokens back at each period boundary) is
//!   what some APIs document.
//! - **Leaky bucket** is a shaper: it admits requests but spaces them out
//!   ([`Decision::wait`]), for protecting a backend that cannot take bursts.
//! - **Fixed window** is what most people mean by "100 per minute" and is the
//!   cheapest on Redis; accept the boundary burst.
//! - **Sliding log** never exceeds the limit in any period: for small, strict
//!   limits such as logins.
//! - **Sliding window** approximates the sliding log in constant memory.
//! - **Sliding window buckets** keep the sliding log's promise (never over
//!   the limit in any period) in memory fixed by the number of sub-windows,
//!   not by the limit: for large strict limits ("500 per hour" per user).
//!
//! # Semantics in one place
//!
//! With `T = period / limit` (rounded up to the nanosecond) and `b = burst`:
//!
//! - GCRA: `TAT' = max(TAT, now) + cost·T`; allowed iff `TAT' − now ≤ b·T`.
//! - Token bucket: capacity `b`, refilled `limit` per `period`; allowed iff
//!   `tokens ≥ cost`.
//! - Leaky bucket: slot `max(last_slot + T, now)`; rejected iff its wait is
//!   `b·T` or more; an admitted request waits until its slot.
//! - Fixed window: allowed iff `count + cost ≤ limit` in window `now / period`.
//! - Sliding log: allowed iff the cost admitted in `(now − period, now]` plus
//!   `cost` is at most `limit`.
//! - Sliding window: `E = cur + ⌊prev·(period − elapsed)/period⌋`; allowed iff
//!   `E + cost ≤ limit`.
//! - Sliding window buckets: sub-windows of `s = ⌈period / n⌉` (whole µs);
//!   allowed iff the cost admitted in sub-windows `⌊now/s⌋ − n ..= ⌊now/s⌋`
//!   plus `cost` is at most `limit`.
//!
//! # The times a decision carries
//!
//! Each exact to the nanosecond and checked by property tests for every
//! algorithm, assuming no further request arrives:
//!
//! - [`Decision::retry_after`] (denied requests): the earliest moment a retry
//!   of the same cost passes; 1 ns earlier it would not.
//! - [`Decision::reset_after`]: the moment the limit is whole again
//!   (`remaining == limit`); 1 ns earlier it is not. For the sliding window
//!   that is when the counts, weighted, have fallen to nothing (not the end
//!   of the next window); for the sliding window buckets, when the newest
//!   non-empty sub-window leaves the window; for the leaky bucket, when the next request would
//!   wait under one interval.
//! - [`Decision::replenish_after`]: the moment `remaining` next grows; 0 when
//!   whole. Never after the other two, except that in delay mode a retry is
//!   admitted (and held) before the next unit is back. It is what the HTTP
//!   `RateLimit` field's `t` reports.
//!
//! Arithmetic is integer, in `u128` where products can grow, for limits and
//! bursts up to 2^40, periods up to a year and costs up to `u32::MAX`. Quotas
//! outside that are refused with a [`QuotaError`]; a cost larger than a limit
//! can ever admit is denied with [`Decision::NEVER`] as its `retry_after`.
//!
//! Several limits on one request ("10 per minute and 500 per hour") are checked
//! with [`check_all`]: all must pass, and all are charged or none.
//!
//! A store that keeps states outside the process (a database) writes them
//! as bytes: [`State::to_bytes`] and [`State::from_bytes`], or a request's
//! limits in one value with [`encode_states`] and [`decode_states`]
//! (compact, versioned; garbage is an error, never a panic: see
//! [`state_bytes`]).
// tower's lint set: every public item documented and printable, and no
// `pub` where nothing outside the crate can reach it.
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]
// docs.rs builds with `--cfg docsrs` on nightly (see Cargo.toml): items behind
// a feature then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithm;
mod atomic;
mod clock;
mod decision;
mod limiter;
mod quota;
mod refund;
mod registry;
pub mod state_bytes;

// Every algorithm's types at the root: a new algorithm needs no line here.
pub use algorithm::*;
pub use atomic::{PackedState, check_atomic, debit_atomic, refund_atomic};
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{Clock, ClockSource, ManualClock, MonotonicClock, WallClock};
pub use decision::{Decision, DecisionFields};
pub use limiter::{
    Algorithm, Charge, Limiter, State, UnknownAlgorithm, carried, check_all, used, used_of,
};
pub use quota::{MAX_LIMIT, MAX_PERIOD, MAX_TOLERANCE_NANOS, Quota, QuotaError};
pub use refund::Refund;
pub use state_bytes::{STATE_BYTES_VERSION, StateBytesError, decode_states, encode_states};
