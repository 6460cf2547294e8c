//! Property tests: random arrival times and costs on a manual clock, for every
//! algorithm. Each test states the bound the algorithm documents and checks
//! it over the admitted requests, plus the properties every algorithm
//! shares: a denied request leaves the state unchanged; `retry_after` is the
//! earliest moment the same request passes; `reset_after` is the moment the
//! limit is whole again and `replenish_after` the moment it next grows (each
//! exact to the nanosecond, `replenish_after` never later than either of the
//! others); and nothing panics at the extremes.

use proptest::prelude::*;
use std::time::Duration;
use tollgate_core::{
    Algorithm, Decision, Limiter, MAX_LIMIT, MAX_PERIOD, Quota, Refill, State, TokenBucket,
};

/// A random quota small enough that random traffic hits its limits.
fn small_quota() -> impl Strategy<Value = Quota> {
    (1u64..=12, 1_000u64..=5_000_000_000, 1u64..=15).prop_map(|(limit, period, burst)| {
        Quota::new(limit, Duration::from_nanos(period))
            .and_then(|q| q.with_burst(burst))
            .expect("valid by construction")
    })
}

/// Arrivals: a start time and (gap, cost) pairs, gaps scaled to the period.
fn arrivals() -> impl Strategy<Value = (u64, Vec<(u32, u32)>)> {
    (
        0u64..4_000_000_000_000_000_000,
        prop::collection::vec(
            (0u32..=1000, prop_oneof![8 => 0u32..=3, 1 => 0u32..=20]),
            1..150,
        ),
    )
}

/// One admitted or denied request, as the tests see it.
#[derive(Clone, Copy, Debug)]
struct Seen {
    at: u64,
    cost: u64,
    decision: Decision,
}

/// Runs the trace through `limiter`, checking the shared properties at every
/// step, and returns every request with its decision.
fn run(limiter: &Limiter, quota: Quota, start: u64, trace: &[(u32, u32)]) -> Vec<Seen> {
    let mut state = limiter.new_state();
    let mut now = start;
    let mut seen = Vec::with_capacity(trace.len());
    for &(gap_permille, cost) in trace {
        now += quota.period_nanos() * u64::from(gap_permille) / 1000;
        let before = state.clone();
        let decision = limiter.check(&mut state, now, cost);
        assert!(decision.remaining() <= decision.limit(), "{decision:?}");
        if decision.allowed() {
            assert_eq!(decision.retry_after(), Duration::ZERO);
        } else {
            assert_eq!(state, before, "a denied request changed the state");
            assert_retry_is_earliest(limiter, &before, now, cost, decision.retry_after());
        }
        assert_times_are_exact(limiter, &state, now, &decision);
        seen.push(Seen {
            at: now,
            cost: u64::from(cost),
            decision,
        });
    }
    seen
}

/// `retry_after` is exact: the same request passes then, and not 1 ns before.
fn assert_retry_is_earliest(
    limiter: &Limiter,
    state: &State,
    now: u64,
    cost: u32,
    retry: Duration,
) {
    if retry == Decision::NEVER {
        return;
    }
    let retry = u64::try_from(retry.as_nanos()).unwrap();
    let at = |t: u64| limiter.check(&mut state.clone(), t, cost).allowed();
    assert!(at(now + retry), "denied at now + retry_after ({retry} ns)");
    if retry > 0 {
        assert!(
            !at(now + retry - 1),
            "allowed 1 ns before retry_after ({retry} ns)"
        );
    }
}

/// `reset_after` and `replenish_after` are exact, for the state the
/// decision left: at `now + reset_after` the limit is whole and 1 ns before
/// it is not; at `now + replenish_after` more remains than now and 1 ns
/// before it no more than now. `replenish_after` is 0 exactly when the limit
/// is whole, and never later than `reset_after`, nor than `retry_after` when
/// denied (except in delay mode, where a retry is admitted, and held, before
/// the next unit is back).
fn assert_times_are_exact(limiter: &Limiter, state: &State, now: u64, decision: &Decision) {
    let remaining_at = |t: u64| limiter.evaluate(state, t, 0).0.remaining();
    let capacity = limiter.capacity();
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap();
    let (reset, replenish) = (
        nanos(decision.reset_after()),
        nanos(decision.replenish_after()),
    );
    let left = remaining_at(now);
    assert_eq!(left, decision.remaining(), "{decision:?}");
    assert_eq!(
        remaining_at(now + reset),
        capacity,
        "not whole at reset_after: {decision:?}"
    );
    if reset > 0 {
        assert!(
            remaining_at(now + reset - 1) < capacity,
            "whole before reset_after: {decision:?}"
        );
    }
    assert_eq!(replenish == 0, left == capacity, "{decision:?}");
    assert!(replenish <= reset, "{decision:?}");
    if !decision.allowed() && decision.can_ever_pass() && !in_delay_mode(limiter) {
        assert!(replenish <= nanos(decision.retry_after()), "{decision:?}");
    }
    if replenish > 0 {
        assert!(
            remaining_at(now + replenish) > left,
            "nothing back at replenish_after: {decision:?}"
        );
        assert_eq!(
            remaining_at(now + replenish - 1),
            left,
            "back before replenish_after: {decision:?}"
        );
    }
}

fn in_delay_mode(limiter: &Limiter) -> bool {
    match limiter {
        Limiter::Gcra(gcra) => !gcra.max_delay().is_zero(),
        Limiter::TokenBucket(bucket) => !bucket.max_delay().is_zero(),
        _ => false,
    }
}

fn admitted(seen: &[Seen]) -> impl Iterator<Item = &Seen> + Clone {
    seen.iter().filter(|s| s.decision.allowed())
}

/// For every pair of admitted requests `i ≤ j`: `Σ cost·unit ≤ (t_j − t_i)·rate + allowance`.
fn assert_rate_bound(seen: &[Seen], unit: u128, rate: u128, allowance: u128) {
    let admitted: Vec<_> = admitted(seen).collect();
    for i in 0..admitted.len() {
        let mut sum = 0u128;
        for j in i..admitted.len() {
            sum += u128::from(admitted[j].cost) * unit;
            let span = u128::from(admitted[j].at - admitted[i].at) * rate;
            assert!(sum <= span + allowance, "{} admitted too fast", j - i + 1);
        }
    }
}

/// The summed admitted cost per aligned window never exceeds `cap`.
fn assert_window_cap(seen: &[Seen], period: u64, cap: u64) {
    let mut per_window = std::collections::HashMap::<u64, u64>::new();
    for s in admitted(seen) {
        let count = per_window.entry(s.at / period).or_default();
        *count += s.cost;
        assert!(
            *count <= cap,
            "window {} holds {count} > {cap}",
            s.at / period
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn gcra_admits_at_most_burst_plus_elapsed_over_interval(quota in small_quota(), (start, trace) in arrivals()) {
        let seen = run(&Limiter::new(Algorithm::Gcra, quota), quota, start, &trace);
        let t = u128::from(quota.emission_interval_nanos());
        assert_rate_bound(&seen, t, 1, u128::from(quota.burst()) * t);
    }

    #[test]
    fn token_bucket_admits_at_most_capacity_plus_refill(quota in small_quota(), (start, trace) in arrivals()) {
        let seen = run(&Limiter::new(Algorithm::TokenBucket, quota), quota, start, &trace);
        // Σ cost ≤ burst + elapsed·limit/period, multiplied through by period.
        let period = u128::from(quota.period_nanos());
        assert_rate_bound(&seen, period, u128::from(quota.limit()), u128::from(quota.burst()) * period);
    }

    #[test]
    fn interval_token_bucket_adds_at_most_limit_per_boundary(quota in small_quota(), (start, trace) in arrivals()) {
        let limiter = Limiter::TokenBucket(TokenBucket::new(quota).with_refill(Refill::Interval));
        let seen = run(&limiter, quota, start, &trace);
        let admitted: Vec<_> = admitted(&seen).collect();
        let period = quota.period_nanos();
        for i in 0..admitted.len() {
            let mut sum = 0;
            for j in i..admitted.len() {
                sum += admitted[j].cost;
                let boundaries = admitted[j].at / period - admitted[i].at / period;
                prop_assert!(sum <= quota.burst() + boundaries * quota.limit());
            }
        }
    }

    #[test]
    fn leaky_bucket_releases_evenly_in_order_with_a_bounded_queue(quota in small_quota(), (start, trace) in arrivals()) {
        let seen = run(&Limiter::new(Algorithm::LeakyBucket, quota), quota, start, &trace);
        let t = quota.emission_interval_nanos();
        let mut next_free = 0u64;
        for s in admitted(&seen) {
            let slot = s.at + u64::try_from(s.decision.wait().as_nanos()).unwrap();
            prop_assert_eq!(slot, next_free.max(s.at), "FIFO slot at the constant rate");
            if s.cost > 0 {
                let last_wait = slot - s.at + (s.cost - 1) * t;
                prop_assert!(last_wait < quota.burst() * t, "queue longer than burst");
            }
            next_free = slot + s.cost * t;
        }
    }

    #[test]
    fn fixed_window_never_exceeds_the_limit_in_a_window(quota in small_quota(), (start, trace) in arrivals()) {
        let seen = run(&Limiter::new(Algorithm::FixedWindow, quota), quota, start, &trace);
        // Exact: a request is denied only when it would not fit.
        let mut per_window = std::collections::HashMap::<u64, u64>::new();
        for s in &seen {
            let count = per_window.entry(s.at / quota.period_nanos()).or_default();
            prop_assert_eq!(s.decision.allowed(), *count + s.cost <= quota.limit());
            if s.decision.allowed() { *count += s.cost; }
        }
        assert_window_cap(&seen, quota.period_nanos(), quota.limit());
    }

    #[test]
    fn sliding_log_never_exceeds_the_limit_in_any_period(quota in small_quota(), (start, trace) in arrivals()) {
        let seen = run(&Limiter::new(Algorithm::SlidingLog, quota), quota, start, &trace);
        // Exact against a brute-force log: allowed iff it fits in (now − period, now].
        for (j, s) in seen.iter().enumerate() {
            let in_period: u64 = admitted(&seen[..j])
                .filter(|p| s.at - p.at < quota.period_nanos())
                .map(|p| p.cost)
                .sum();
            prop_assert_eq!(s.decision.allowed(), in_period + s.cost <= quota.limit());
        }
    }

    #[test]
    fn a_bounded_sliding_log_stays_within_its_bound_and_never_over_the_limit(
        quota in small_quota(),
        (start, trace) in arrivals(),
        max_entries in 2usize..6,
    ) {
        use tollgate_core::SlidingLog;
        let log = SlidingLog::new(quota).with_max_entries(max_entries);
        let limiter = Limiter::SlidingLog(log);
        let seen = run(&limiter, quota, start, &trace);
        // Never more than the limit in any period (what the exact log
        // promises), though it may refuse more.
        for (j, s) in admitted(&seen).enumerate() {
            let in_period: u64 = admitted(&seen)
                .take(j + 1)
                .filter(|p| s.at - p.at < quota.period_nanos())
                .map(|p| p.cost)
                .sum();
            prop_assert!(in_period <= quota.limit());
        }
        // The state itself stays within the bound.
        let mut state = limiter.new_state();
        let mut now = start;
        for &(gap_permille, cost) in &trace {
            now += quota.period_nanos() * u64::from(gap_permille) / 1000;
            limiter.check(&mut state, now, cost);
            if let State::SlidingLog(log) = &state {
                prop_assert!(log.len() <= max_entries);
            }
        }
    }

    #[test]
    fn sliding_window_matches_its_estimate_and_caps_each_window(quota in small_quota(), (start, trace) in arrivals()) {
        let seen = run(&Limiter::new(Algorithm::SlidingWindow, quota), quota, start, &trace);
        let period = quota.period_nanos();
        for (j, s) in seen.iter().enumerate() {
            let window = s.at / period;
            let count = |w: u64| -> u64 {
                admitted(&seen[..j]).filter(|p| p.at / period == w).map(|p| p.cost).sum()
            };
            let elapsed = s.at % period;
            let previous = if window == 0 { 0 } else { count(window - 1) };
            let estimate = count(window)
                + (u128::from(previous) * u128::from(period - elapsed) / u128::from(period)) as u64;
            prop_assert_eq!(s.decision.allowed(), estimate + s.cost <= quota.limit());
        }
        assert_window_cap(&seen, period, quota.limit());
    }

    #[test]
    fn sliding_window_buckets_match_their_model_and_never_exceed_the_limit(
        quota in small_quota(),
        (start, trace) in arrivals(),
        n in prop_oneof![Just(60u32), 1u32..8, 8u32..200],
    ) {
        use tollgate_core::SlidingWindowBuckets;
        let buckets = SlidingWindowBuckets::new(quota).with_sub_windows(n);
        let seen = run(&Limiter::SlidingWindowBuckets(buckets), quota, start, &trace);
        let s = u64::try_from(buckets.sub_window().as_nanos()).unwrap();
        let n = u64::from(buckets.sub_windows());
        let (period, limit) = (quota.period_nanos(), quota.limit());
        prop_assert!(n * s >= period && (n - 1) * s < period.max(1_000));
        let in_span = |j: usize, span: u64| -> u64 {
            admitted(&seen[..j]).filter(|p| seen[j].at - p.at < span).map(|p| p.cost).sum()
        };
        for (j, r) in seen.iter().enumerate() {
            // The model: the cost admitted since the start of sub-window
            // `⌊now / s⌋ − n` (the trace's clock never goes back).
            let from = (r.at / s).saturating_sub(n) * s;
            let counted: u64 = admitted(&seen[..j]).filter(|p| p.at >= from).map(|p| p.cost).sum();
            prop_assert_eq!(r.decision.allowed(), counted + r.cost <= limit);
            // The documented bound, both ways: what a log over the period
            // would refuse is refused; what a log over (n + 1)·s would
            // admit is admitted.
            if r.decision.allowed() {
                prop_assert!(in_span(j, period) + r.cost <= limit, "over the limit in a period");
            } else if r.cost <= limit {
                prop_assert!(in_span(j, (n + 1) * s) + r.cost > limit, "refused more than one sub-window's worth");
            }
        }
        // Never more than the limit in any span of n·s (≥ the period).
        for (j, r) in seen.iter().enumerate() {
            if r.decision.allowed() {
                prop_assert!(in_span(j, n * s) + r.cost <= limit);
            }
        }
    }

    #[test]
    fn delay_mode_releases_in_arrival_order_at_the_rate(
        quota in small_quota(),
        (start, trace) in arrivals(),
        delay_permille in 0u64..3000,
        token_bucket in any::<bool>(),
    ) {
        let max_delay = quota.period_nanos() * delay_permille / 1000;
        let delay = Duration::from_nanos(max_delay);
        let limiter = if token_bucket {
            Limiter::TokenBucket(TokenBucket::new(quota)).with_max_delay(delay)
        } else {
            Limiter::new(Algorithm::Gcra, quota).with_max_delay(delay)
        };
        let seen = run(&limiter, quota, start, &trace);
        let released: Vec<Seen> = admitted(&seen)
            .map(|s| {
                let wait = u64::try_from(s.decision.wait().as_nanos()).unwrap();
                assert!(wait <= max_delay, "held {wait} ns > {max_delay}");
                Seen { at: s.at + wait, ..*s }
            })
            .collect();
        prop_assert!(released.windows(2).all(|w| w[0].at <= w[1].at), "out of order");
        // Released (not arrived) requests respect the rate, as without delay.
        // The token bucket rounds each wait up to the nanosecond, which can
        // bring the next release up to 1 ns closer: one nanosecond of slack.
        let (unit, rate, allowance) = if token_bucket {
            let p = u128::from(quota.period_nanos());
            let l = u128::from(quota.limit());
            (p, l, u128::from(quota.burst()) * p + l)
        } else {
            let t = u128::from(quota.emission_interval_nanos());
            (t, 1, u128::from(quota.burst()) * t)
        };
        assert_rate_bound(&released, unit, rate, allowance);
    }

    #[test]
    fn token_bucket_check_equals_evaluate_then_commit(
        quota in small_quota(),
        (start, trace) in arrivals(),
        interval in any::<bool>(),
    ) {
        use tollgate_core::{RateAlgorithm, TokenBucketState};
        let refill = if interval { Refill::Interval } else { Refill::Continuous };
        let bucket = TokenBucket::new(quota).with_refill(refill);
        let (mut fast, mut general) = (TokenBucketState::default(), TokenBucketState::default());
        let mut now = start;
        for &(gap_permille, cost) in &trace {
            now += quota.period_nanos() * u64::from(gap_permille) / 1000;
            let decision = bucket.check(&mut fast, now, cost);
            let e = bucket.evaluate(&general, now, cost);
            if let Some(charge) = e.1 {
                bucket.commit(&mut general, charge);
            }
            prop_assert_eq!(decision, e.0);
            prop_assert_eq!(fast, general);
        }
    }

    #[test]
    fn extreme_values_never_panic(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        limit in prop_oneof![Just(1u64), Just(MAX_LIMIT), 1u64..=MAX_LIMIT],
        period in prop_oneof![Just(1u64), Just(MAX_PERIOD.as_nanos() as u64), 1u64..=MAX_PERIOD.as_nanos() as u64],
        burst_scale in prop_oneof![Just(1u64), Just(MAX_LIMIT), 1u64..=MAX_LIMIT],
        steps in prop::collection::vec(
            (prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()], prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()]),
            1..20,
        ),
    ) {
        let quota = Quota::new(limit, Duration::from_nanos(period)).unwrap();
        let quota = quota.with_burst(burst_scale).unwrap_or(quota);
        for limiter in [Limiter::new(algorithm, quota), Limiter::TokenBucket(TokenBucket::new(quota).with_refill(Refill::Interval))] {
            let mut state = limiter.new_state();
            for &(now, cost) in &steps {
                let d = limiter.check(&mut state, now, cost);
                prop_assert!(d.remaining() <= d.limit());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Checks whose times come a little out of order, as concurrent checks'
    /// do (a thread can be paused between reading the clock and updating
    /// the state, and the stores read the clock unfenced): a request judged
    /// at a time earlier than the latest one read before it, on whatever
    /// state it finds, is never admitted where the latest time would have
    /// refused it (the `RateAlgorithm` docs' "conservatively"), and nothing
    /// panics.
    #[test]
    fn a_time_a_little_out_of_order_is_judged_conservatively(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        quota in small_quota(),
        start in 0u64..4_000_000_000_000_000_000,
        // Ten or more arrivals a period, so that limits fill up.
        trace in prop::collection::vec((0u32..=100, 0u32..=3), 1..150),
        // How early each time is: a few ns (an unfenced clock read), or up
        // to 5 % of the period (a thread paused between reading the clock
        // and updating the state), so that windows' edges are crossed.
        backs in prop::collection::vec((0u64..=200, prop_oneof![Just(0u64), 0u64..=50]), 150),
    ) {
        let limiter = Limiter::new(algorithm, quota);
        let mut state = limiter.new_state();
        let mut latest = start;
        for (&(gap_permille, cost), &(nanos, permille)) in trace.iter().zip(&backs) {
            latest += quota.period_nanos() * u64::from(gap_permille) / 1000;
            let back = nanos + quota.period_nanos() * permille / 1000;
            let mut at_latest = state.clone();
            let on_time = limiter.check(&mut at_latest, latest, cost);
            let early = limiter.check(&mut state, latest.saturating_sub(back), cost);
            prop_assert!(early.remaining() <= early.limit());
            prop_assert!(
                !early.allowed() || on_time.allowed(),
                "admitted {back} ns early, refused on time: {early:?} vs {on_time:?}"
            );
        }
    }
}
