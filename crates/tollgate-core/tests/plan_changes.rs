//! A plan change keeps what a key used, debt included, for every
//! algorithm ([`carried`], the one definition every store follows): a key
//! that used 8 of 10, moved to 5 (3 past it) and then to 20, has used 8 of
//! 20, never 5 of 20.

use proptest::prelude::*;
use std::time::Duration;
use tollgate_core::{Algorithm, Limiter, Quota, carried, used};

/// `limit` per minute under `algorithm`.
fn per_minute(algorithm: Algorithm, limit: u64) -> Limiter {
    Limiter::new(algorithm, Quota::per_minute(limit))
}

/// A minute-aligned moment, so that a fixed window's count is not lost to
/// a window boundary in the middle of a test.
const START: u64 = 1_000 * 60_000_000_000;

#[test]
fn eight_used_of_ten_lowered_to_five_then_raised_to_twenty_leaves_eleven() {
    for algorithm in Algorithm::ALL {
        let ten = per_minute(algorithm, 10);
        let mut state = ten.new_state();
        for _ in 0..8 {
            assert!(ten.check(&mut state, START, 1).allowed(), "{algorithm}");
        }
        let five = per_minute(algorithm, 5);
        let mut lowered = carried(&ten, &state, &five, START);
        assert_eq!(used(&five, &lowered, START), 8, "{algorithm}: used under 5");
        assert!(
            !five.evaluate(&lowered, START, 1).0.allowed(),
            "{algorithm}: 8 used of 5 is refused"
        );
        // A refused request charges nothing, so changes nothing here.
        assert!(!five.check(&mut lowered, START, 1).allowed());

        let twenty = per_minute(algorithm, 20);
        let mut raised = carried(&five, &lowered, &twenty, START);
        let next = twenty.check(&mut raised, START, 1);
        assert!(next.allowed(), "{algorithm}");
        assert_eq!(next.remaining(), 11, "{algorithm}: 8 + 1 used of 20");
    }
}

proptest! {
    /// Any usage, moved down to any smaller plan and back up to any plan
    /// at least as large as the first, arrives whole: the units used under
    /// the first plan are the units used under the last.
    #[test]
    fn a_downgrade_and_an_upgrade_carry_every_unit(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        first in 2u64..=40,
        used_share in 1u64..=100,
        lowered_share in 1u64..=100,
        raised_extra in 0u64..=40,
    ) {
        let spent = (first * used_share).div_ceil(100).min(first);
        // Limits that divide a minute: intervals of whole µs, in which
        // the schedules' debts read exactly (see `used_of`).
        let lowered_limit = [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30]
            .into_iter()
            .filter(|l| *l <= first * lowered_share / 100)
            .max()
            .unwrap_or(1)
            .min(first);
        let a = per_minute(algorithm, first);
        let mut state = a.new_state();
        for _ in 0..spent {
            prop_assert!(a.check(&mut state, START, 1).allowed());
        }
        let b = per_minute(algorithm, lowered_limit);
        let lowered = carried(&a, &state, &b, START);
        prop_assert_eq!(used(&b, &lowered, START), spent);
        let c = per_minute(algorithm, first + raised_extra);
        let raised = carried(&b, &lowered, &c, START);
        prop_assert_eq!(used(&c, &raised, START), spent);
        // What comes back does so at the last plan's pace: one period on,
        // every window has let go of it (the buckets too, full again).
        let later = START + Duration::from_secs(120).as_nanos() as u64;
        prop_assert_eq!(used(&c, &raised, later), 0);
    }
}
