//! After a lost race: how many attempts, how long a pause, and the random
//! numbers behind the pauses and the versions.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a store retries a write that lost its race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Retry {
    /// Attempts in all, the first included (at least 1).
    pub(super) max_attempts: u32,
    /// The longest pause after the first lost race.
    pub(super) base: Duration,
    /// The longest pause ever.
    pub(super) cap: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 8,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(50),
        }
    }
}

impl Retry {
    /// The pause after the `lost`th lost race (from 1): uniform in
    /// `[0, min(cap, base · 2^(lost − 1))]` ("full jitter": writers that
    /// collided spread out rather than colliding again in step), drawn
    /// from `random`.
    pub(super) fn pause(&self, lost: u32, random: u64) -> Duration {
        let doubling = 1u32.checked_shl(lost.saturating_sub(1)).unwrap_or(u32::MAX);
        let ceiling = self.base.saturating_mul(doubling).min(self.cap);
        let ceiling = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        match ceiling.checked_add(1) {
            Some(span) => Duration::from_nanos(random % span),
            None => Duration::from_nanos(random),
        }
    }
}

/// A stream of random numbers shared by a store's futures: a counter
/// from a random start, mixed (SplitMix64). Distinct for each draw of one
/// store (the mix is a bijection of the counter), unpredictable across
/// stores.
#[derive(Debug)]
pub(super) struct Random(AtomicU64);

impl Random {
    pub(super) fn new() -> Self {
        Random(AtomicU64::new(
            std::collections::hash_map::RandomState::new().hash_one(0x7011_6a7e_u64),
        ))
    }

    pub(super) fn next(&self) -> u64 {
        const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut z = self
            .0
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_stay_within_it() {
        let retry = Retry::default();
        let most = |lost| {
            retry
                .pause(lost, u64::MAX - 1)
                .max(retry.pause(lost, 1_000_000))
        };
        assert!(retry.pause(1, u64::MAX) <= Duration::from_millis(1));
        for lost in 1..40 {
            let ceiling = Duration::from_millis(1)
                .saturating_mul(1u32.checked_shl(lost - 1).unwrap_or(u32::MAX))
                .min(Duration::from_millis(50));
            assert!(most(lost) <= ceiling, "{lost}");
        }
        assert_eq!(retry.pause(3, 0), Duration::ZERO);
        // The full span is drawn from: the ceiling itself included.
        let ceiling_nanos = 4_000_000u64;
        assert_eq!(retry.pause(3, ceiling_nanos), Duration::from_millis(4));
    }

    #[test]
    fn random_numbers_differ() {
        let random = Random::new();
        let drawn: std::collections::HashSet<u64> = (0..1_000).map(|_| random.next()).collect();
        assert_eq!(drawn.len(), 1_000);
    }
}
