//! States as bytes, property-tested for every algorithm: a state decodes
//! to itself (`decode(encode(s)) = s`, alone and with others in one
//! value); any byte string either decodes — and is then the one encoding
//! of what it decodes to — or is refused with an error, never a panic;
//! and whatever decodes, its algorithm can check, refund and charge
//! without a panic.

use proptest::prelude::*;
use std::time::Duration;
use tollgate_core::{
    Algorithm, Limiter, Quota, Refund, STATE_BYTES_VERSION, State, decode_states, encode_states,
};

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}

/// Any quota the core accepts, small or large, sometimes in delay mode.
fn limiter() -> impl Strategy<Value = Limiter> {
    (
        algorithm(),
        prop_oneof![1u64..=10, 1u64..=1_000_000],
        prop_oneof![1u64..=1_000_000, 1_000u64..=31_536_000_000_000_000],
        prop_oneof![Just(None), (1u64..=20).prop_map(Some)],
        prop_oneof![3 => Just(None), 1 => (0u64..=10_000_000_000).prop_map(Some)],
    )
        .prop_filter_map(
            "a quota the core accepts",
            |(a, limit, period, burst, delay)| {
                let quota = Quota::new(limit, Duration::from_nanos(period)).ok()?;
                let quota = match burst {
                    Some(burst) => quota.with_burst(burst).ok()?,
                    None => quota,
                };
                let limiter = Limiter::new(a, quota);
                Some(match delay {
                    Some(delay) => limiter.with_max_delay(Duration::from_nanos(delay)),
                    None => limiter,
                })
            },
        )
}

/// An operation on a key: (gap in ns, what, cost).
fn operations() -> impl Strategy<Value = Vec<(u64, u8, u32)>> {
    prop::collection::vec(
        (
            prop_oneof![0u64..=1_000, 0u64..=2_000_000_000],
            0u8..4,
            prop_oneof![6 => 0u32..=3, 1 => any::<u32>()],
        ),
        0..60,
    )
}

/// Plays `operations` on a fresh state from `start`, handing each state
/// reached to `each`.
fn play(
    limiter: &Limiter,
    start: u64,
    operations: &[(u64, u8, u32)],
    mut each: impl FnMut(&State) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut state = limiter.new_state();
    let mut now = start;
    let mut refunds: Vec<Refund> = Vec::new();
    each(&state)?;
    for &(gap, what, cost) in operations {
        now = now.saturating_add(gap);
        match what {
            0 | 1 => {
                if let (_, Some(refund)) = limiter.charge(&mut state, now, cost) {
                    refunds.push(refund);
                }
            }
            2 => limiter.debit(&mut state, now, cost),
            _ => {
                if let Some(refund) = refunds.pop() {
                    limiter.refund(&mut state, refund, now);
                }
            }
        }
        each(&state)?;
    }
    Ok(())
}

/// Writes `value` as the format's varint (the test's own writer).
fn varint(out: &mut Vec<u8>, mut value: u128) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A field of any size, edges included.
fn field() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..=10,
        any::<u64>(),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        (u64::MAX - 1_000..=u64::MAX),
        1_000_000_000_000_000_000u64..=2_000_000_000_000_000_000,
    ]
}

/// Bytes laid out as a state of some algorithm, with fields of any size:
/// mostly encodings that decode, to states no trace would reach.
fn structured_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        1u8..=8,
        prop::collection::vec(field(), 0..12),
        any::<u128>(),
        0u8..3,
        prop_oneof![Just(0usize), Just(61), Just(2), 0usize..=1_024],
    )
        .prop_map(|(tag, fields, wide, choice, ring)| {
            let mut out = vec![STATE_BYTES_VERSION, tag];
            let mut fields = fields.into_iter().chain(std::iter::repeat(7));
            let mut next = || fields.next().unwrap_or(0);
            match tag {
                1 | 4 => varint(&mut out, next().into()),
                2 | 3 => match choice {
                    0 => {
                        out.push(0);
                        varint(&mut out, wide);
                    }
                    1 => {
                        out.push(0);
                        varint(&mut out, next().into());
                    }
                    _ => {
                        out.push(1);
                        varint(&mut out, next().into());
                        varint(&mut out, next().into());
                    }
                },
                5 => (0..2).for_each(|_| varint(&mut out, next().into())),
                6 => {
                    let n = next() % 12;
                    varint(&mut out, n.into());
                    for _ in 0..n {
                        varint(&mut out, next().into());
                        varint(&mut out, (next() % (1 << 32)).into());
                    }
                }
                7 => (0..3).for_each(|_| varint(&mut out, next().into())),
                _ => {
                    varint(&mut out, next().into());
                    varint(&mut out, ring as u128);
                    for _ in 0..ring {
                        varint(&mut out, next().into());
                    }
                }
            }
            out
        })
}

/// Checks, peeks, charges, refunds and forces `state` under `limiter`
/// at a few moments: none may panic.
fn exercise(limiter: &Limiter, state: &State, times: &[u64]) {
    for &now in times {
        for cost in [0u32, 1, 3, u32::MAX] {
            let mut copy = state.clone();
            let _ = limiter.evaluate(&copy, now, cost);
            let (_, refund) = limiter.charge(&mut copy, now, cost);
            if let Some(refund) = refund {
                limiter.refund(&mut copy, refund, now.saturating_add(1));
            }
            limiter.refund(&mut copy, Refund::new(now, cost), now);
            let mut forced = state.clone();
            limiter.debit(&mut forced, now, cost);
            let _ = limiter.check(&mut forced, now, 1);
            let _ = tollgate_core::used(limiter, state, now);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn every_state_a_trace_reaches_decodes_to_itself(
        limiter in limiter(),
        start in prop_oneof![0u64..=1_000, 1_600_000_000_000_000_000u64..=1_800_000_000_000_000_000],
        operations in operations(),
    ) {
        let mut reached = Vec::new();
        play(&limiter, start, &operations, |state| {
            let bytes = state.to_bytes();
            prop_assert_eq!(State::from_bytes(&bytes), Ok(state.clone()));
            reached.push(state.clone());
            Ok(())
        })?;
        // All of them in one value, as a store keeps a request's limits.
        let mut value = Vec::new();
        encode_states(&reached, &mut value);
        prop_assert_eq!(decode_states::<Vec<State>>(&value), Ok(reached));
    }

    #[test]
    fn any_bytes_decode_to_their_one_encoding_or_are_refused(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..64),
            prop::collection::vec(any::<u8>(), 0..8).prop_map(|tail| {
                let mut bytes = vec![STATE_BYTES_VERSION];
                bytes.extend(tail);
                bytes
            }),
            structured_bytes(),
        ],
    ) {
        if let Ok(state) = State::from_bytes(&bytes) {
            prop_assert_eq!(state.to_bytes(), bytes.clone());
        }
        // As a one-state value of several: the count first.
        let mut value = vec![STATE_BYTES_VERSION, 1];
        value.extend_from_slice(bytes.get(1..).unwrap_or_default());
        if let Ok(states) = decode_states::<Vec<State>>(&value) {
            let mut again = Vec::new();
            encode_states(&states, &mut again);
            prop_assert_eq!(again, value);
        }
    }

    #[test]
    fn whatever_decodes_its_algorithm_runs_without_a_panic(
        bytes in structured_bytes(),
        limiter in limiter(),
        times in prop::collection::vec(field(), 1..4),
    ) {
        if let Ok(state) = State::from_bytes(&bytes) {
            // Under the limiter of the state's own algorithm, and under
            // another (a configuration that changed).
            let own = state_algorithm(&state);
            let same = Limiter::new(own, limiter.quota());
            exercise(&same, &state, &times);
            exercise(&limiter, &state, &times);
        }
    }
}

/// The algorithm a state belongs to.
fn state_algorithm(state: &State) -> Algorithm {
    Algorithm::ALL
        .into_iter()
        .find(|a| {
            let probe = Limiter::new(*a, Quota::per_second(1));
            std::mem::discriminant(&probe.new_state()) == std::mem::discriminant(state)
        })
        .unwrap_or_default()
}

#[test]
fn garbage_is_an_error_with_a_message() {
    let error = State::from_bytes(b"hello").unwrap_err();
    assert!(error.to_string().starts_with("not a rate-limit state"));
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(error);
    assert!(!boxed.to_string().is_empty());
}
