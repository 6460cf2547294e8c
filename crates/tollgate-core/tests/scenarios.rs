//! The scenarios of the design, one named test each, on a manual clock.

use std::time::Duration;
use tollgate_core::{
    Algorithm, Clock, Decision, Limiter, ManualClock, Quota, RateAlgorithm, SlidingWindow,
    SlidingWindowState, check_all,
};

const SECOND: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const MINUTE: u64 = 60 * SECOND;

#[test]
fn token_bucket_capacity_10_refilling_2_per_second() {
    let clock = ManualClock::new(1_700_000_000 * SECOND);
    let bucket = Limiter::new(
        Algorithm::TokenBucket,
        Quota::per_second(2).with_burst(10).unwrap(),
    );
    let mut state = bucket.new_state();
    for i in 0..10 {
        assert!(
            bucket.check(&mut state, clock.now(), 1).allowed(),
            "request {i}"
        );
    }
    let eleventh = bucket.check(&mut state, clock.now(), 1);
    assert!(!eleventh.allowed());
    assert_eq!(eleventh.retry_after(), Duration::from_millis(500));
    clock.advance(Duration::from_millis(500));
    assert!(bucket.check(&mut state, clock.now(), 1).allowed());
    assert!(!bucket.check(&mut state, clock.now(), 1).allowed());
}

#[test]
fn leaky_bucket_capacity_10_leaking_2_per_second_hit_by_20_at_once() {
    let now = 42 * SECOND;
    let bucket = Limiter::new(
        Algorithm::LeakyBucket,
        Quota::per_second(2).with_burst(10).unwrap(),
    );
    let mut state = bucket.new_state();
    let decisions: Vec<Decision> = (0..20).map(|_| bucket.check(&mut state, now, 1)).collect();
    let slots: Vec<Duration> = decisions
        .iter()
        .filter(|d| d.allowed())
        .map(|d| d.wait())
        .collect();
    let expected: Vec<Duration> = (0..10).map(|i| Duration::from_millis(500 * i)).collect();
    assert_eq!(slots, expected, "slots at 0, 0.5 s, 1 s, …, 4.5 s");
    assert!(decisions[..10].iter().all(|d| d.allowed()));
    assert!(decisions[10..].iter().all(|d| !d.allowed()), "10 rejected");
    // The first request leaves at once, so 1 ns later the 11th would wait
    // just under 5 s and fits; after that, one more fits every 500 ms.
    assert_eq!(decisions[19].retry_after(), Duration::from_nanos(1));
    let eleventh = bucket.check(&mut state, now + 1, 1);
    assert!(eleventh.allowed());
    assert_eq!(eleventh.wait(), Duration::from_nanos(5 * SECOND - 1));
    assert!(!bucket.check(&mut state, now + SECOND / 2, 1).allowed());
    assert!(bucket.check(&mut state, now + SECOND / 2 + 1, 1).allowed());
}

#[test]
fn fixed_window_100_per_minute_admits_200_across_a_boundary() {
    let clock = ManualClock::new(1_000 * MINUTE + 59 * SECOND);
    let window = Limiter::new(Algorithm::FixedWindow, Quota::per_minute(100));
    let mut state = window.new_state();
    assert!((0..100).all(|_| window.check(&mut state, clock.now(), 1).allowed()));
    let hundred_first = window.check(&mut state, clock.now(), 1);
    assert!(!hundred_first.allowed());
    assert_eq!(hundred_first.retry_after(), Duration::from_secs(1));
    clock.advance(Duration::from_secs(1)); // 1:00, a new window
    assert!((0..100).all(|_| window.check(&mut state, clock.now(), 1).allowed()));
    assert!(!window.check(&mut state, clock.now(), 1).allowed());
}

#[test]
fn sliding_window_counter_estimates_from_the_previous_window() {
    // limit 7, previous 5, current 3, 30% in: E = 3 + ⌊5 · 0.7⌋ = 6 → allowed.
    let seven = SlidingWindow::new(Quota::new(7, Duration::from_secs(10)).unwrap());
    let mut state = SlidingWindowState {
        window: 100,
        previous: 5,
        current: 3,
    };
    let d = seven.check(&mut state, 100 * 10 * SECOND + 3 * SECOND, 1);
    assert!(d.allowed());
    assert_eq!(d.remaining(), 0);
    // limit 10, previous 9, current 5, 25% in: E = 5 + ⌊9 · 0.75⌋ = 11 → denied.
    let ten = SlidingWindow::new(Quota::new(10, Duration::from_secs(4)).unwrap());
    let mut state = SlidingWindowState {
        window: 100,
        previous: 9,
        current: 5,
    };
    let before = state;
    let d = ten.check(&mut state, 100 * 4 * SECOND + SECOND, 1);
    assert!(!d.allowed());
    assert_eq!(state, before, "a denied request consumes nothing");
    // It fits once ⌊9·(4 s − e)/4 s⌋ ≤ 4, i.e. 9·(4 s − e) < 20 s, e > 1.777… s.
    assert_eq!(d.retry_after(), Duration::from_nanos(777_777_778));
}

#[test]
fn ten_per_minute_and_two_seconds_apart_on_one_key() {
    let per_minute = Limiter::new(Algorithm::SlidingLog, Quota::per_minute(10));
    let apart = Limiter::new(Algorithm::Gcra, "1/2s".parse().unwrap());
    let (mut minute_state, mut apart_state) = (per_minute.new_state(), apart.new_state());
    let mut check = |now: u64| {
        let mut out = [Decision::default(); 2];
        let merged = check_all(
            &mut [(&per_minute, &mut minute_state), (&apart, &mut apart_state)],
            now,
            1,
            &mut out,
        );
        (merged, out)
    };
    let start = 7 * MINUTE;
    assert!(check(start).0.allowed());
    // 1 s later: the minute has room but the spacing does not.
    let (merged, each) = check(start + SECOND);
    assert!(!merged.allowed() && each[0].allowed() && !each[1].allowed());
    // The per-minute limit reports what it holds, uncharged: 9 left, not 8.
    assert_eq!(each[0].remaining(), 9);
    assert_eq!(merged.retry_after(), Duration::from_secs(1));
    // Every 2 s: nine more pass, then the minute is full even though spaced.
    for i in 1..10 {
        assert!(check(start + 2 * i * SECOND).0.allowed(), "request {i}");
    }
    let (merged, each) = check(start + 20 * SECOND);
    assert!(!merged.allowed() && !each[0].allowed() && each[1].allowed());
    // All-or-nothing: the denial above charged nothing to the spacing limit,
    // so at the minute's end a request passes without waiting 2 s more.
    assert_eq!(merged.retry_after(), Duration::from_secs(40));
    assert!(check(start + MINUTE).0.allowed());
}

#[test]
fn five_hundred_per_hour_with_a_sliding_log() {
    let hour = 3600 * SECOND;
    let log = Limiter::new(Algorithm::SlidingLog, "500/h".parse().unwrap());
    let mut state = log.new_state();
    let start = 1_000 * hour + 17 * SECOND;
    // 250 early in the hour, 250 in its last minute: all 500 pass.
    for i in 0..250 {
        assert!(log.check(&mut state, start + i * SECOND, 1).allowed());
    }
    let late = start + hour - MINUTE;
    for i in 0..250 {
        assert!(log.check(&mut state, late + i * 100_000_000, 1).allowed());
    }
    let full = log.check(&mut state, late + 30 * SECOND, 1);
    assert!(!full.allowed(), "the 501st within the hour");
    // The oldest request (at `start`) leaves the hour at start + 1 h exactly.
    assert_eq!(
        full.retry_after(),
        Duration::from_nanos(start + hour - (late + 30 * SECOND))
    );
    assert!(!log.check(&mut state, start + hour - 1, 1).allowed());
    assert!(log.check(&mut state, start + hour, 1).allowed());
    assert!(!log.check(&mut state, start + hour, 1).allowed());
}

#[test]
fn every_algorithm_state_fits_32_bytes_but_the_log() {
    use std::mem::size_of;
    assert!(size_of::<tollgate_core::State>() <= 32);
    assert_eq!(size_of::<tollgate_core::algorithm::GcraState>(), 8);
    assert_eq!(size_of::<tollgate_core::algorithm::FixedWindowState>(), 16);
    assert_eq!(
        size_of::<tollgate_core::algorithm::SlidingWindowState>(),
        24
    );
    assert_eq!(size_of::<tollgate_core::algorithm::TokenBucketState>(), 24);
    // 24 bytes inline, and a ring of n + 1 counters on the heap: 61 × 8 =
    // 488 bytes at the default 60 sub-windows.
    assert_eq!(
        size_of::<tollgate_core::algorithm::SlidingWindowBucketsState>(),
        24
    );
}

/// What the algorithm docs promise of a clock that steps back by `δ`: GCRA
/// admits `⌈δ / T⌉` fewer of its burst until the clock catches up, never
/// more than without the step.
#[test]
fn a_clock_that_steps_back_costs_gcra_at_most_delta_over_t_of_its_burst() {
    use tollgate_core::{Gcra, GcraState, Quota, RateAlgorithm};
    let gcra = Gcra::new(Quota::per_second(10).with_burst(10).unwrap());
    let t = 100 * MS;
    let start = 1_000 * SECOND;
    for delta in [0, 1, 50 * MS, 100 * MS, 150 * MS, 400 * MS] {
        let mut state = GcraState::default();
        let first = (0..5)
            .filter(|_| gcra.check(&mut state, start, 1).allowed())
            .count();
        let after_step = (0..10)
            .filter(|_| gcra.check(&mut state, start - delta, 1).allowed())
            .count();
        assert_eq!(first, 5);
        let fewer = delta.div_ceil(t) as usize;
        assert_eq!(after_step, 5 - fewer, "δ = {delta} ns");
        // Once the clock is back where it was, the rest of the burst is
        // there: the whole burst of 10, and no more, in all.
        let caught_up = (0..10)
            .filter(|_| gcra.check(&mut state, start, 1).allowed())
            .count();
        assert_eq!(first + after_step + caught_up, 10, "δ = {delta} ns");
    }
}
