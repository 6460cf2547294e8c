//! Refunds, property-tested for every algorithm on a manual clock: a
//! refund never leaves a key more lenient than if the refunded request had
//! never been admitted (every other admission kept), a refund after the
//! request's charge stopped counting changes nothing, and a refund given at
//! once, with nothing charged in between, leaves the key as if the request
//! had never come.

use proptest::prelude::*;
use std::time::Duration;
use tollgate_core::{Algorithm, Limiter, Quota, Refund, State};

/// A random quota small enough that random traffic hits its limits.
fn small_quota() -> impl Strategy<Value = Quota> {
    (1u64..=8, 1_000u64..=2_000_000_000, 1u64..=10).prop_map(|(limit, period, burst)| {
        Quota::new(limit, Duration::from_nanos(period))
            .and_then(|q| q.with_burst(burst))
            .expect("valid by construction")
    })
}

/// Arrivals as (gap in thousandths of the period, cost).
fn trace() -> impl Strategy<Value = Vec<(u32, u32)>> {
    prop::collection::vec(
        (0u32..=600, prop_oneof![6 => 1u32..=2, 1 => 0u32..=4]),
        1..40,
    )
}

/// Whether a request of `cost` at `now` would pass, without charging it.
fn passes(limiter: &Limiter, state: &State, now: u64, cost: u32) -> bool {
    limiter.evaluate(state, now, cost).0.allowed()
}

/// Every probe (a cost at a moment from `from` on) that `lenient` refuses,
/// `strict` refuses too: `strict` is never more lenient.
fn never_more_lenient(
    limiter: &Limiter,
    quota: Quota,
    strict: &State,
    lenient: &State,
    from: u64,
) -> Result<(), TestCaseError> {
    let period = quota.period_nanos();
    for step in 0..40u64 {
        let at = from + period * step / 8;
        for cost in [1u32, 2, 5] {
            if passes(limiter, strict, at, cost) {
                prop_assert!(
                    passes(limiter, lenient, at, cost),
                    "a refunded key passes cost {cost} at +{} ns where one that never had the \
                     request does not",
                    at - from
                );
            }
        }
    }
    Ok(())
}

/// The trace through `limiter` from `start`: the state, each admission's
/// moment and refund, and the end time.
fn admit_all(
    limiter: &Limiter,
    quota: Quota,
    start: u64,
    trace: &[(u32, u32)],
) -> (State, Vec<(u64, u32, Refund)>, u64) {
    let mut state = limiter.new_state();
    let mut now = start;
    let mut admitted = Vec::new();
    for &(gap, cost) in trace {
        now += quota.period_nanos() * u64::from(gap) / 1000;
        if let (decision, Some(refund)) = limiter.charge(&mut state, now, cost) {
            assert!(decision.allowed());
            admitted.push((now, cost, refund));
        }
    }
    (state, admitted, now)
}

/// The same admissions replayed without the one at `skip`: the key as if
/// that request had never been admitted. Every replayed admission passes
/// (the key only has less against it).
fn without(
    limiter: &Limiter,
    admitted: &[(u64, u32, Refund)],
    skip: usize,
) -> Result<State, TestCaseError> {
    let mut state = limiter.new_state();
    for (i, &(at, cost, _)) in admitted.iter().enumerate() {
        if i != skip {
            prop_assert!(
                limiter.check(&mut state, at, cost).allowed(),
                "an admission refused once another was taken away"
            );
        }
    }
    Ok(state)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, max_global_rejects: 100_000, ..ProptestConfig::default() })]

    /// Refunded at any later moment, a request leaves the key no more
    /// lenient than if it had never been admitted.
    #[test]
    fn a_refund_never_lets_more_through_than_never_admitting(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        quota in small_quota(),
        start in 0u64..1_000_000_000_000_000,
        trace in trace(),
        pick in any::<prop::sample::Index>(),
        later in prop_oneof![3 => 0u32..=100, 1 => 0u32..=3000],
    ) {
        let limiter = Limiter::new(algorithm, quota);
        let (mut state, admitted, end) = admit_all(&limiter, quota, start, &trace);
        prop_assume!(!admitted.is_empty());
        let skip = pick.index(admitted.len());
        let now = end + quota.period_nanos() * u64::from(later) / 1000;
        limiter.refund(&mut state, admitted[skip].2, now);
        let never = without(&limiter, &admitted, skip)?;
        never_more_lenient(&limiter, quota, &state, &never, now)?;
    }

    /// The same with refunds that know only when and how much (what a
    /// store keeps): still never more lenient.
    #[test]
    fn a_refund_knowing_only_when_and_how_much_is_never_more_lenient(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        quota in small_quota(),
        start in 0u64..1_000_000_000_000_000,
        trace in trace(),
        pick in any::<prop::sample::Index>(),
        later in 0u32..=3000,
    ) {
        let limiter = Limiter::new(algorithm, quota);
        let (mut state, admitted, end) = admit_all(&limiter, quota, start, &trace);
        prop_assume!(!admitted.is_empty());
        let skip = pick.index(admitted.len());
        let now = end + quota.period_nanos() * u64::from(later) / 1000;
        let (at, cost, _) = admitted[skip];
        limiter.refund(&mut state, Refund::new(at, cost), now);
        let never = without(&limiter, &admitted, skip)?;
        never_more_lenient(&limiter, quota, &state, &never, now)?;
    }

    /// Given back at once, with nothing charged in between, a request
    /// leaves the key exactly as if it had never come.
    #[test]
    fn a_refund_at_once_undoes_the_charge(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        quota in small_quota(),
        start in 0u64..1_000_000_000_000_000,
        trace in trace(),
        cost in 1u32..=3,
    ) {
        let limiter = Limiter::new(algorithm, quota);
        let (mut state, _, end) = admit_all(&limiter, quota, start, &trace);
        let before = state.clone();
        let charged = state.clone();
        let (_, refund) = limiter.charge(&mut state, end, cost);
        prop_assume!(refund.is_some());
        limiter.refund(&mut state, refund.unwrap(), end);
        never_more_lenient(&limiter, quota, &state, &before, end)?;
        never_more_lenient(&limiter, quota, &before, &state, end)?;
        // Knowing only when and how much, the same.
        let mut state = charged;
        limiter.charge(&mut state, end, cost);
        limiter.refund(&mut state, Refund::new(end, cost), end);
        never_more_lenient(&limiter, quota, &before, &state, end)?;
    }

    /// A refund after the request's charge stopped counting (its window
    /// ended, its bucket refilled: here, long after) changes nothing.
    #[test]
    fn a_refund_after_the_charge_stopped_counting_changes_nothing(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        quota in small_quota(),
        start in 0u64..1_000_000_000_000_000,
        trace in trace(),
        pick in any::<prop::sample::Index>(),
        gap in 0u32..=600,
    ) {
        let limiter = Limiter::new(algorithm, quota);
        let (mut state, admitted, end) = admit_all(&limiter, quota, start, &trace);
        prop_assume!(!admitted.is_empty());
        let refund = admitted[pick.index(admitted.len())].2;
        // Whole windows and buckets later, one more admission, then the
        // refund of an old one.
        let window = u64::try_from(limiter.window().as_nanos()).unwrap_or(u64::MAX);
        let much_later = end + 3 * window.max(quota.period_nanos())
            + quota.period_nanos() * u64::from(gap) / 1000;
        limiter.charge(&mut state, much_later, 1);
        let before = state.clone();
        limiter.refund(&mut state, refund, much_later);
        prop_assert_eq!(state, before);
    }
}
