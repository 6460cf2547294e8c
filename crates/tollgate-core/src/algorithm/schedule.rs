//! Virtual scheduling, the arithmetic that GCRA, the leaky bucket and the
//! continuous token bucket share.
//!
//! A key's state is one "theoretical arrival time" `tat`: the moment the key
//! would be fully rested. A request of cost `c` pushes it to
//! `max(tat, now) + c·increment` and passes iff that lands at most `tolerance`
//! ahead of `now`. All arguments are in one time unit chosen by the caller:
//! nanoseconds in `u64` for GCRA and the leaky bucket (their tolerance is at
//! most 2^62 ns, so everything that matters fits), nanoseconds × limit in
//! `u128` for the exact token bucket.

use std::ops::Sub;

/// An unsigned integer time type.
pub(crate) trait Ticks: Copy + Default + Ord + Sub<Output = Self> {
    fn saturating_add(self, other: Self) -> Self;
}

impl Ticks for u64 {
    fn saturating_add(self, other: Self) -> Self {
        u64::saturating_add(self, other)
    }
}

impl Ticks for u128 {
    fn saturating_add(self, other: Self) -> Self {
        u128::saturating_add(self, other)
    }
}

/// The outcome of scheduling one request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schedule<T> {
    /// Whether the request fits within the bound.
    pub allowed: bool,
    /// The new `tat` if admitted: `start + increment`.
    pub end: T,
    /// How far the current `tat` lies ahead of `now` (0 when rested): the
    /// wait before the request's slot starts.
    pub ahead_before: T,
    /// How far the new `tat` would lie ahead of `now`.
    pub ahead_after: T,
    /// Whether the increment alone fits the tolerance (else it never passes).
    fits: bool,
    /// The bound the request was held to.
    bound: T,
}

impl<T: Ticks> Schedule<T> {
    /// How far ahead the state is after this request: `ahead_after` if it
    /// was admitted, `ahead_before` if not.
    pub(super) fn ahead(&self) -> T {
        if self.allowed {
            self.ahead_after
        } else {
            self.ahead_before
        }
    }

    /// How long until the same request would pass: 0 when allowed, `None`
    /// when it never can (`increment > tolerance`).
    pub(super) fn retry(&self) -> Option<T> {
        if self.allowed {
            Some(T::default())
        } else if !self.fits {
            None
        } else {
            Some(self.ahead_after - self.bound)
        }
    }
}

/// Schedules a request. `increment` should saturate rather than wrap; a
/// saturated increment exceeds any tolerance and so is never admitted.
///
/// `bound` is `tolerance` plus how much further ahead the new `tat` may land
/// (delay mode: the request is held until it conforms), computed once when
/// the limiter is built; a request whose increment exceeds `tolerance` alone
/// never passes, delay or not.
#[inline]
pub(crate) fn schedule<T: Ticks>(
    tat: T,
    now: T,
    increment: T,
    tolerance: T,
    bound: T,
) -> Schedule<T> {
    let start = tat.max(now);
    // Saturation can only happen within `tolerance` of the type's maximum,
    // centuries after any real clock's origin.
    let end = start.saturating_add(increment);
    let ahead_after = end - now;
    let fits = increment <= tolerance;
    Schedule {
        allowed: fits & (ahead_after <= bound),
        end,
        ahead_before: start - now,
        ahead_after,
        fits,
        bound,
    }
}

/// How long until a limit that gives one unit back every `interval` next
/// grows, when its state lies `ahead` of now and `remaining` of its
/// `capacity` units are left: `remaining` counts the whole intervals of
/// room, so the next unit is back once `ahead` falls to
/// `(capacity − remaining − 1)·interval`. 0 when the limit is whole.
#[inline]
pub(crate) fn replenish_after<T: Ticks + std::ops::Mul<Output = T>>(
    ahead: T,
    remaining: T,
    capacity: T,
    one: T,
    interval: T,
) -> T {
    if remaining >= capacity {
        T::default()
    } else {
        let still_out = (capacity - remaining - one) * interval;
        ahead.max(still_out) - still_out
    }
}

/// A `u128` time stored back into a `u64` field, saturating.
pub(crate) fn to_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}
