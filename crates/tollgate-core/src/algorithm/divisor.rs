//! Division by a number fixed when a limiter is built, without a `div`
//! instruction on every check.
//!
//! Hardware 64-bit division costs tens of cycles, a large share of a check
//! that otherwise takes a few nanoseconds. Since the divisor (a quota's
//! emission interval) is known in advance, [`Divisor::new`] precomputes a
//! multiplier and a shift such that `n / d == (n · m) >> (62 + l)` for every
//! `n < 2^62` (Granlund and Montgomery, "Division by invariant integers using
//! multiplication", 1994, theorem 4.2: with `l = ⌈log2 d⌉` and
//! `m = ⌊2^(62+l) / d⌋ + 1`, `2^(62+l) < m·d ≤ 2^(62+l) + 2^l`). Larger
//! numerators, which only extreme quotas produce, use the hardware division.
//!
//! The quotient is taken as the high word of `(4n) · m`, shifted right by
//! `l`: the same value (`⌊⌊4nm / 2^64⌋ / 2^l⌋ = ⌊nm / 2^(62+l)⌋`), but one
//! multiplication and one 64-bit shift, where a 128-bit shift by a count
//! known only at run time takes several instructions.

/// Numerators below `2^62` take the fast path.
const FAST_BITS: u32 = 62;
const FAST_LIMIT: u64 = 1 << FAST_BITS;

/// A precomputed divisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Divisor {
    divisor: u64,
    multiplier: u64,
    shift: u32,
}

impl Divisor {
    /// A divisor for `d ≥ 1`; 0 is treated as 1.
    pub(crate) fn new(d: u64) -> Self {
        let divisor = d.max(1);
        if divisor >= FAST_LIMIT {
            // Every fast-path numerator is below `d`: the quotient is 0.
            return Divisor {
                divisor,
                multiplier: 0,
                shift: 0,
            };
        }
        // l ≤ 62 here, so both shifts below stay within their types.
        let l = u64::BITS - (divisor - 1).leading_zeros();
        // m < 2^63 because d > 2^(l−1).
        let multiplier = ((1u128 << (FAST_BITS + l)) / u128::from(divisor)) as u64 + 1;
        Divisor {
            divisor,
            multiplier,
            shift: l,
        }
    }

    /// `n / d`, exact for every `n`; fast for `n < 2^62`.
    #[inline]
    pub(crate) fn div(&self, n: u64) -> u64 {
        if n < FAST_LIMIT {
            self.div_below_limit(n)
        } else {
            n / self.divisor
        }
    }

    /// `n / d` for `n < 2^62`, which the caller guarantees (a GCRA
    /// tolerance, at most 2^61, bounds it): no range check on the hot path.
    #[inline]
    pub(crate) fn div_below_limit(&self, n: u64) -> u64 {
        debug_assert!(n < FAST_LIMIT);
        let high = (u128::from(n << 2) * u128::from(self.multiplier)) >> 64;
        (high as u64) >> self.shift
    }

    /// `n / d` for a 128-bit `n`, exact; fast for `n < 2^62`.
    #[inline]
    pub(crate) fn div_wide(&self, n: u128) -> u128 {
        match u64::try_from(n) {
            Ok(n) => u128::from(self.div(n)),
            Err(_) => n / u128::from(self.divisor),
        }
    }

    /// `⌈n / d⌉` for a 128-bit `n`.
    #[inline]
    pub(crate) fn div_ceil_wide(&self, n: u128) -> u128 {
        let q = self.div_wide(n);
        q + u128::from(q * u128::from(self.divisor) != n)
    }

    /// `(n / d, n % d)`.
    #[inline]
    pub(crate) fn div_rem(&self, n: u64) -> (u64, u64) {
        let q = self.div(n);
        (q, n - q * self.divisor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(n: u64, d: u64) {
        let divisor = Divisor::new(d);
        assert_eq!(divisor.div(n), n / d, "{n} / {d}");
        assert_eq!(divisor.div_rem(n), (n / d, n % d));
        let wide = u128::from(n) << 20 | 12345;
        assert_eq!(divisor.div_wide(wide), wide / u128::from(d));
        assert_eq!(divisor.div_ceil_wide(wide), wide.div_ceil(u128::from(d)));
        assert_eq!(
            divisor.div_ceil_wide(u128::from(n)),
            u128::from(n.div_ceil(d))
        );
    }

    #[test]
    fn exact_at_the_edges() {
        let top = (1u64 << 62) - 1;
        for d in [
            1,
            2,
            3,
            7,
            10,
            1 << 20,
            (1 << 55) - 1,
            1 << 55,
            1_000_000_000,
            u64::MAX >> 2,
            1 << 62,
            (1 << 62) + 1,
            u64::MAX - 1,
        ] {
            for n in [0, 1, d - 1, d, d + 1, top - 1, top] {
                check(n, d);
            }
        }
    }

    proptest! {
        #[test]
        fn matches_hardware_division(n in any::<u64>(), d in 1u64..(1 << 56)) {
            check(n, d);
        }

        #[test]
        fn matches_hardware_division_for_any_divisor(n in 0u64..(1 << 62), d in 1u64..) {
            check(n, d);
        }
    }
}
