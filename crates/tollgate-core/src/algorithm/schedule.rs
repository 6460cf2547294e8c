//! Virtual scheduling, the arithmetic that GCRA, the leaky bucket and the
//! continuous token bucket share.
//!
//! A key's state is one "theoretical arrival time" `tat`: the moment the key
//! would be fully rested. A request of cost `c` pushes it to
//! `max(tat, now) + c·increment` and passes iff that lands at most `tolerance`
//! ahead of `now`. All arguments are in one time unit chosen by the caller
//! (nanoseconds, or nanoseconds × limit for the exact token bucket), as `u128`
//! so that no product of a valid quota and a `u32` cost can overflow.

/// The outcome of scheduling one request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schedule {
    /// Whether the request fits within the tolerance.
    pub allowed: bool,
    /// The start of the request's slot: `max(tat, now)`.
    pub start: u128,
    /// The new `tat` if admitted: `start + cost·increment`.
    pub end: u128,
    /// How far the current `tat` lies ahead of `now` (0 when rested).
    pub ahead_before: u128,
    /// How far the new `tat` would lie ahead of `now`.
    pub ahead_after: u128,
    /// For a denied request, how long until the same request would pass;
    /// `None` when it never can (`cost·increment > tolerance`).
    pub retry: Option<u128>,
}

pub(crate) fn schedule(tat: u128, now: u128, increment: u128, tolerance: u128) -> Schedule {
    let start = tat.max(now);
    let end = start + increment;
    let ahead_after = end - now;
    let allowed = ahead_after <= tolerance;
    let retry = if allowed {
        Some(0)
    } else if increment > tolerance {
        None
    } else {
        Some(ahead_after - tolerance)
    };
    Schedule {
        allowed,
        start,
        end,
        ahead_before: start - now,
        ahead_after,
        retry,
    }
}

/// A `u128` time stored back into a `u64` state field, saturating. Only a
/// clock within 146 years of `u64::MAX` nanoseconds can reach saturation.
pub(crate) fn to_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}
