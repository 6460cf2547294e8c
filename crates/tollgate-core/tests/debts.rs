//! Forced charges ("pay after": a cost learned once the request is over),
//! property-tested for every algorithm on a manual clock: where the charge
//! fits, forcing it is the same as admitting it; where it does not, the key
//! goes into debt, and a refused request told to retry after `r` passes at
//! `r` (nothing else charged in between) — the promise behind a truthful
//! `Retry-After` — and a debt is paid off: the key passes again in time.

use proptest::prelude::*;
use std::time::Duration;
use tollgate_core::{Algorithm, Limiter, Quota, State};

/// A random quota small enough that random traffic hits its limits.
fn small_quota() -> impl Strategy<Value = Quota> {
    (1u64..=8, 1_000u64..=2_000_000_000, 1u64..=10).prop_map(|(limit, period, burst)| {
        Quota::new(limit, Duration::from_nanos(period))
            .and_then(|q| q.with_burst(burst))
            .expect("valid by construction")
    })
}

/// Events as (gap in thousandths of the period, cost, forced).
fn trace() -> impl Strategy<Value = Vec<(u32, u32, bool)>> {
    prop::collection::vec(
        (
            0u32..=600,
            prop_oneof![4 => 1u32..=3, 1 => 0u32..=40],
            any::<bool>(),
        ),
        1..30,
    )
}

/// Runs `trace` from `start`: checks, and forced charges where marked.
/// Returns the state, the end time and every cost charged.
fn run(
    limiter: &Limiter,
    quota: Quota,
    start: u64,
    trace: &[(u32, u32, bool)],
) -> (State, u64, u64) {
    let mut state = limiter.new_state();
    let mut now = start;
    let mut charged = 0;
    for &(gap, cost, forced) in trace {
        now += quota.period_nanos() * u64::from(gap) / 1000;
        if forced {
            limiter.debit(&mut state, now, cost);
            charged += u64::from(cost);
        } else if limiter.check(&mut state, now, cost).allowed() {
            charged += u64::from(cost);
        }
    }
    (state, now, charged)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// A forced charge that the limit would have admitted leaves the state
    /// an admission leaves.
    #[test]
    fn a_forced_charge_that_fits_is_an_admission(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        quota in small_quota(),
        start in 0u64..=4_000_000_000,
        trace in trace(),
        cost in 0u32..=4,
    ) {
        let limiter = Limiter::new(algorithm, quota);
        let (state, now, _) = run(&limiter, quota, start, &trace);
        let mut admitted = state.clone();
        if limiter.check(&mut admitted, now, cost).allowed() {
            let mut forced = state;
            limiter.debit(&mut forced, now, cost);
            prop_assert_eq!(forced, admitted);
        }
    }

    /// In or out of debt, a refused request's `retry_after` suffices: the
    /// same request passes then. And a key in debt is let through again
    /// within its window (buckets: the debt paid off at the rate).
    #[test]
    fn retry_after_suffices_in_debt(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        quota in small_quota(),
        start in 0u64..=4_000_000_000,
        trace in trace(),
        debt in 1u32..=200,
        cost in 1u32..=3,
    ) {
        let limiter = Limiter::new(algorithm, quota);
        let (mut state, now, charged) = run(&limiter, quota, start, &trace);
        limiter.debit(&mut state, now, debt);
        let refused = limiter.evaluate(&state, now, cost).0;
        prop_assume!(refused.can_ever_pass());
        let retry = refused.retry_after_nanos();
        prop_assert!(
            limiter.evaluate(&state, now + retry, cost).0.allowed(),
            "refused in debt, told to retry after {} ns, and refused then", retry
        );
        // Paid off at the quota's rate: no longer than everything ever
        // charged takes to come back, plus a window.
        let units = charged + u64::from(debt) + u64::from(cost);
        let bound = quota.emission_interval_nanos() * units
            + limiter.window().as_nanos() as u64
            + quota.period_nanos();
        prop_assert!(retry <= bound, "retry after {} ns, more than {} ns", retry, bound);
    }
}

/// The case: 500 units charged after each response against
/// 1,000 a minute; the third request is refused, and its `Retry-After`,
/// honoured, is enough — for every algorithm (its own reading of the
/// quota: windows forgive at their end, buckets pay back at the rate).
#[test]
fn five_hundred_units_after_each_response_against_a_thousand_a_minute() {
    let quota = Quota::per_minute(1_000);
    let minute = 60_000_000_000u64;
    for algorithm in Algorithm::ALL {
        let limiter = Limiter::new(algorithm, quota);
        let mut state = limiter.new_state();
        // Mid-window, so that windows do not roll over between requests.
        let mut now = 10 * minute + minute / 4;
        for request in 1..=2 {
            let admitted = limiter.check(&mut state, now, 1);
            assert!(admitted.allowed(), "{algorithm}: request {request} refused");
            now += 1_000_000;
            limiter.debit(&mut state, now, 499);
            now += 1_000_000;
        }
        let refused = limiter.check(&mut state, now, 1);
        if algorithm == Algorithm::LeakyBucket {
            // A shaper queues rather than refuses (its bucket holds one
            // more, the slot being served): the third request waits
            // until the debt has drained.
            assert!(refused.wait_nanos() >= minute - 10_000_000, "{refused:?}");
            continue;
        }
        assert!(!refused.allowed(), "{algorithm}: the third request passed");
        assert_eq!(refused.remaining(), 0, "{algorithm}");
        let retry = refused.retry_after_nanos();
        // Within the period (the sub-window buckets: one sub-window more).
        assert!(
            retry > 0 && retry <= minute + minute / 60,
            "{algorithm}: retry after {retry} ns"
        );
        assert!(
            !limiter.evaluate(&state, now + retry - 1, 1).0.allowed(),
            "{algorithm}: passes 1 ns before its Retry-After: the header overstates"
        );
        assert!(
            limiter.check(&mut state, now + retry, 1).allowed(),
            "{algorithm}: refused at its Retry-After"
        );
    }
}

/// In delay mode a request after a debt waits for it to be paid off
/// (admitted, with `wait` the time until it conforms), when that is
/// within the delay; beyond it, refused with a `retry_after` that says
/// when it would conform.
#[test]
fn in_delay_mode_a_request_after_a_debt_waits_for_it() {
    let quota = Quota::per_minute(1_000);
    let interval = quota.emission_interval_nanos(); // 60 ms
    let now = 10 * 60_000_000_000u64;
    for (max_delay, admitted) in [
        (Duration::from_secs(40), true),
        (Duration::from_secs(10), false),
    ] {
        let limiter = Limiter::new(Algorithm::Gcra, quota).with_max_delay(max_delay);
        let mut state = limiter.new_state();
        // 1,500 units at once: 500 beyond the bucket, 30 s of debt.
        limiter.debit(&mut state, now, 1_500);
        let next = limiter.check(&mut state, now, 1);
        let conforms = 500 * interval + interval;
        assert_eq!(next.allowed(), admitted, "delay {max_delay:?}: {next:?}");
        if admitted {
            assert_eq!(next.wait_nanos(), conforms);
        } else {
            assert_eq!(
                next.retry_after_nanos(),
                conforms - max_delay.as_nanos() as u64
            );
        }
    }
}
