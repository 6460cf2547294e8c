//! One check per algorithm on a manual clock, with governor's direct
//! (single-key) limiter on its fake clock in the same group.
//!
//! Every iteration reads the clock and advances it by 1 µs on both sides
//! (quota 1 000 000/s, so each check is allowed and writes new state). The
//! whole result is passed to `black_box`: our full `Decision` (remaining,
//! reset, retry) and governor's `Result`, so no side's work can be optimized
//! away.
//! The `denied` rows keep the clock still so that every check is rejected.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tollgate_core::{
    Algorithm, Clock, Gcra, Limiter, ManualClock, Quota, RateAlgorithm, TokenBucket, check_atomic,
};

const RATE: u32 = 1_000_000;
const STEP: Duration = Duration::from_micros(1);

fn allowed_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("check");
    let quota = Quota::per_second(u64::from(RATE));

    {
        use governor::{RateLimiter, clock::FakeRelativeClock};
        let clock = FakeRelativeClock::default();
        let limiter = RateLimiter::direct_with_clock(
            governor::Quota::per_second(NonZeroU32::new(RATE).unwrap()),
            clock.clone(),
        );
        group.bench_function("governor/direct", |b| {
            b.iter(|| {
                clock.advance(STEP);
                black_box(limiter.check())
            })
        });
    }

    {
        let clock = ManualClock::new(0);
        let gcra = Gcra::new(quota);
        let cell = AtomicU64::new(0);
        group.bench_function("tollgate/gcra-atomic", |b| {
            b.iter(|| {
                clock.advance(STEP);
                black_box(check_atomic(&gcra, &cell, clock.now(), 1))
            })
        });
        let mut state = Default::default();
        group.bench_function("tollgate/gcra", |b| {
            b.iter(|| {
                clock.advance(STEP);
                black_box(gcra.check(&mut state, clock.now(), 1))
            })
        });
    }

    {
        let clock = ManualClock::new(0);
        let bucket = TokenBucket::new(quota);
        let mut state = Default::default();
        group.bench_function("tollgate/token-bucket", |b| {
            b.iter(|| {
                clock.advance(STEP);
                black_box(bucket.check(&mut state, clock.now(), 1))
            })
        });
    }

    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(0);
        let limiter = Limiter::new(algorithm, quota);
        let mut state = limiter.new_state();
        group.bench_function(BenchmarkId::new("tollgate/limiter", algorithm), |b| {
            b.iter(|| {
                clock.advance(STEP);
                black_box(limiter.check(&mut state, clock.now(), 1))
            })
        });
    }
    group.finish();
}

fn denied_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("check-denied");
    {
        use governor::{RateLimiter, clock::FakeRelativeClock};
        let limiter = RateLimiter::direct_with_clock(
            governor::Quota::per_second(NonZeroU32::new(10).unwrap()),
            FakeRelativeClock::default(),
        );
        while limiter.check().is_ok() {}
        group.bench_function("governor/direct", |b| b.iter(|| black_box(limiter.check())));
    }
    {
        let clock = ManualClock::new(0);
        let gcra = Gcra::new(Quota::per_second(10));
        let cell = AtomicU64::new(0);
        while check_atomic(&gcra, &cell, clock.now(), 1).allowed() {}
        group.bench_function("tollgate/gcra-atomic", |b| {
            b.iter(|| black_box(check_atomic(&gcra, &cell, clock.now(), 1)))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = allowed_path, denied_path
}
criterion_main!(benches);
