//! core: one check per algorithm on a manual clock, vs governor's direct
//! (single-key) limiter on its fake clock.
//!
//! governor's direct limiter keeps its GCRA state in an atomic shared by
//! every thread, so the like-for-like row (the one with the target)
//! is tollgate's [`check_atomic`] on an `AtomicU64`: the same state, the
//! same compare-and-swap. The `Limiter` rows (an enum over the six
//! algorithms, state behind `&mut`, no atomics) are there to show what each
//! algorithm costs; governor has only GCRA, so its GCRA stays the anchor.
//!
//! Every iteration advances the fake clock by 1 µs on both sides and checks
//! against 1,000,000/s, so each check is allowed and writes new state. The
//! whole result goes to `black_box` on both sides: our `Decision` and
//! governor's `Result`. A `Decision` computes its counts (`remaining`, the
//! reset and replenish times) when they are read, as governor's
//! `NotUntil` and `StateSnapshot` do; the row "every figure read" reads them
//! all, against governor's `StateInformationMiddleware` reading the one
//! figure it offers (the remaining burst).
//!
//! Both fake clocks are atomics, so each iteration makes two atomic
//! read-modify-writes, one of them the clock's. The row "check alone" moves a
//! plain counter instead (governor through a `Clock` of the bench's own), so
//! only the check's compare-and-swap is atomic: it shows what the check
//! itself costs, including building the result each side returns; the row
//! "only the yes/no read" is the same loop for a caller that reads only
//! whether the check passed (`allowed()` against governor's `is_ok()`), so
//! that neither side has to build what the caller ignores.
//!
//! Each batch is a function of its own that is never inlined, so that every
//! row runs one and the same copy of each side's loop: where the compiler
//! places a loop moves a 12 ns figure by a nanosecond or two.

use crate::measure::{Settings, ns_per_op, pair};
use crate::report::{Better, Outcome};
use governor::NotUntil;
use governor::clock::FakeRelativeClock;
use governor::nanos::Nanos;
use std::cell::Cell;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};
use tollgate_core::{Algorithm, Clock, Decision, Gcra, Limiter, ManualClock, Quota, check_atomic};

/// The quota of the allowed rows: one check per microsecond fits exactly.
const RATE: u32 = 1_000_000;
/// How far the fake clocks move per check.
const STEP: Duration = Duration::from_micros(1);
/// [`STEP`] in nanoseconds.
const STEP_NANOS: u64 = 1_000;
/// The quota of the denied rows: exhausted before timing starts.
const SCARCE: u32 = 10;

/// Runs the scenario.
pub fn run(settings: Settings) -> Vec<Outcome> {
    let n: u64 = settings.pick(2_000_000, 500_000);
    let rounds = settings.rounds();
    let mut out = Vec::new();

    let (ours, theirs) = pair(
        rounds,
        || gcra_atomic_allowed(ManualClock::new(0), n, |d| d),
        || governor_allowed(FakeRelativeClock::default(), n, |r| r),
    );
    out.push(
        Outcome::new(
            "core: GCRA, atomic cell, allowed",
            ours,
            theirs,
            "ns/check",
            Better::Lower,
        )
        .target(1.0)
        .against("governor direct"),
    );

    let (ours, theirs) = pair(
        rounds,
        || gcra_atomic_allowed(CounterClock::default(), n, |d| d),
        || governor_allowed(CounterClock::default(), n, |r| r),
    );
    out.push(
        Outcome::new(
            "core: GCRA, atomic cell, allowed, check alone",
            ours,
            theirs,
            "ns/check",
            Better::Lower,
        )
        .against("governor direct"),
    );

    let (ours, theirs) = pair(
        rounds,
        || gcra_atomic_allowed(CounterClock::default(), n, |d| d.allowed()),
        || governor_allowed(CounterClock::default(), n, |r| r.is_ok()),
    );
    out.push(
        Outcome::new(
            "core: GCRA, atomic cell, allowed, only the yes/no read",
            ours,
            theirs,
            "ns/check",
            Better::Lower,
        )
        .against("governor direct"),
    );

    let (ours, theirs) = pair(
        rounds,
        || gcra_atomic_allowed(CounterClock::default(), n, |d| d.fields()),
        || governor_allowed_read(CounterClock::default(), n),
    );
    out.push(
        Outcome::new(
            "core: GCRA, atomic cell, allowed, every figure read",
            ours,
            theirs,
            "ns/check",
            Better::Lower,
        )
        .against("governor direct + state information"),
    );

    let (ours, theirs) = pair(rounds, || gcra_atomic_denied(n), || governor_denied(n));
    out.push(
        Outcome::new(
            "core: GCRA, atomic cell, denied",
            ours,
            theirs,
            "ns/check",
            Better::Lower,
        )
        .against("governor direct"),
    );

    let (ours, theirs) = pair(
        rounds,
        || direct_limiter_allowed(n),
        || governor_allowed(FakeRelativeClock::default(), n, |r| r),
    );
    out.push(
        Outcome::new(
            "core: DirectLimiter::check_now (memory store, GCRA), allowed",
            ours,
            theirs,
            "ns/check",
            Better::Lower,
        )
        .against("governor direct"),
    );

    for algorithm in Algorithm::ALL {
        let (ours, theirs) = pair(
            rounds,
            || limiter_allowed(algorithm, n),
            || governor_allowed(FakeRelativeClock::default(), n, |r| r),
        );
        out.push(
            Outcome::new(
                &format!("core: {algorithm} (Limiter, &mut state)"),
                ours,
                theirs,
                "ns/check",
                Better::Lower,
            )
            .against("governor direct (GCRA)"),
        );
    }
    out
}

/// tollgate's GCRA on an atomic cell, every check allowed; `read` is what
/// the caller takes of each decision (each closure gets a copy of the loop
/// of its own).
#[inline(never)]
fn gcra_atomic_allowed<T>(clock: impl StepClock, n: u64, read: impl Fn(Decision) -> T) -> f64 {
    let gcra = Gcra::new(Quota::per_second(u64::from(RATE)));
    let cell = AtomicU64::new(0);
    let start = Instant::now();
    for _ in 0..n {
        clock.step();
        black_box(&read(check_atomic(&gcra, &cell, clock.nanos(), 1)));
    }
    ns_per_op(start, n)
}

/// governor's direct limiter, every check allowed; `read` is what the
/// caller takes of each answer.
#[inline(never)]
fn governor_allowed<C, T>(clock: C, n: u64, read: impl Fn(Result<(), NotUntil<Nanos>>) -> T) -> f64
where
    C: StepClock + governor::clock::Clock<Instant = Nanos>,
{
    let limiter = governor::RateLimiter::direct_with_clock(
        governor::Quota::per_second(NonZeroU32::new(RATE).expect("non-zero")),
        clock.clone(),
    );
    let start = Instant::now();
    for _ in 0..n {
        clock.step();
        black_box(&read(limiter.check()));
    }
    ns_per_op(start, n)
}

/// governor's direct limiter answering with its state snapshot, every check
/// allowed, and the remaining burst read.
#[inline(never)]
fn governor_allowed_read<C>(clock: C, n: u64) -> f64
where
    C: StepClock + governor::clock::Clock<Instant = Nanos>,
{
    let limiter = governor::RateLimiter::direct_with_clock(
        governor::Quota::per_second(NonZeroU32::new(RATE).expect("non-zero")),
        clock.clone(),
    )
    .with_middleware::<governor::middleware::StateInformationMiddleware>();
    let start = Instant::now();
    for _ in 0..n {
        clock.step();
        let _ = black_box(limiter.check().map(|s| s.remaining_burst_capacity()));
    }
    ns_per_op(start, n)
}

/// A fake clock the loops move by [`STEP`] per check. Clones share the time.
trait StepClock: Clone {
    fn step(&self);
    fn nanos(&self) -> u64;
}

impl StepClock for ManualClock {
    fn step(&self) {
        self.advance(STEP);
    }

    fn nanos(&self) -> u64 {
        self.now()
    }
}

impl StepClock for FakeRelativeClock {
    fn step(&self) {
        self.advance(STEP);
    }

    fn nanos(&self) -> u64 {
        governor::clock::Clock::now(self).as_u64()
    }
}

/// A fake clock for one thread, no atomics: a plain counter.
#[derive(Clone, Default)]
struct CounterClock(Rc<Cell<u64>>);

impl StepClock for CounterClock {
    fn step(&self) {
        self.0.set(self.0.get() + STEP_NANOS);
    }

    fn nanos(&self) -> u64 {
        self.0.get()
    }
}

impl governor::clock::Clock for CounterClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        self.nanos().into()
    }
}

/// tollgate's GCRA on an atomic cell, every check denied. The clock stands
/// still on both sides: a denied check reads it and computes when to retry.
#[inline(never)]
fn gcra_atomic_denied(n: u64) -> f64 {
    let clock = ManualClock::new(0);
    let gcra = Gcra::new(Quota::per_second(u64::from(SCARCE)));
    let cell = AtomicU64::new(0);
    while check_atomic(&gcra, &cell, clock.now(), 1).allowed() {}
    let start = Instant::now();
    for _ in 0..n {
        black_box(&check_atomic(&gcra, &cell, clock.now(), 1));
    }
    ns_per_op(start, n)
}

/// governor's direct limiter, every check denied.
#[inline(never)]
fn governor_denied(n: u64) -> f64 {
    let clock = FakeRelativeClock::default();
    let limiter = governor::RateLimiter::direct_with_clock(
        governor::Quota::per_second(NonZeroU32::new(SCARCE).expect("non-zero")),
        clock,
    );
    while limiter.check().is_ok() {}
    let start = Instant::now();
    for _ in 0..n {
        let _ = black_box(&limiter.check());
    }
    ns_per_op(start, n)
}

/// tollgate's direct limiter on the memory store (the handle a program
/// uses to throttle its own calls): the key's state found in the store's
/// map, then the same compare-and-swap.
#[inline(never)]
fn direct_limiter_allowed(n: u64) -> f64 {
    let clock = ManualClock::new(0);
    let limiter = tollgate::DirectLimiter::builder()
        .quota("api", Quota::per_second(u64::from(RATE)))
        .store(
            tollgate::MemoryStore::builder()
                .clock(clock.clone())
                .build(),
        )
        .direct()
        .expect("one limit");
    let start = Instant::now();
    for _ in 0..n {
        clock.advance(STEP);
        black_box(&limiter.check_now());
    }
    ns_per_op(start, n)
}

/// Any algorithm through `Limiter` (enum dispatch, `&mut` state).
#[inline(never)]
fn limiter_allowed(algorithm: Algorithm, n: u64) -> f64 {
    let clock = ManualClock::new(0);
    let limiter = Limiter::new(algorithm, Quota::per_second(u64::from(RATE)));
    let mut state = limiter.new_state();
    let start = Instant::now();
    for _ in 0..n {
        clock.advance(STEP);
        black_box(&limiter.check(&mut state, clock.now(), 1));
    }
    ns_per_op(start, n)
}
