//! The items of the draft's rate-limit fields
//! (draft-ietf-httpapi-ratelimit-headers-10 and -11), as text: what the
//! middleware writes into HTTP responses and the rate-limit service hands
//! Envoy to add, from one definition. What each figure means is the
//! middleware's `headers` module's to say.

use crate::NamedLimit;
use std::time::Duration;
use tollgate_core::{Decision, Limiter};

/// Whole seconds, rounded up: a client that waits this long is never
/// early.
pub fn ceil_seconds(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// A limit's `q` and `w`: the window in whole seconds, rounded up (at
/// least 1), and what the quota's rate gives in it, rounded down, so that
/// `r ≤ q` on every answer and `q / w` is the quota's sustained rate.
pub fn quota_item(limiter: &Limiter) -> (u64, u64) {
    let window = ceil_seconds(limiter.window()).max(1);
    let quota = limiter.quota();
    let units = u128::from(quota.limit()) * u128::from(window) * 1_000_000_000
        / u128::from(quota.period_nanos());
    (u64::try_from(units).unwrap_or(u64::MAX), window)
}

/// A limit's item of the `RateLimit-Policy` value: `"api";q=100;w=60`.
///
/// ```
/// use tollgate_store::NamedLimit;
/// use tollgate_store::fields::policy_item;
///
/// let limit = NamedLimit::new("api", "100/min".parse().unwrap())
///     .with_algorithm(tollgate_core::Algorithm::FixedWindow);
/// assert_eq!(policy_item(&limit), "\"api\";q=100;w=60");
/// ```
pub fn policy_item(limit: &NamedLimit) -> String {
    let (units, window) = quota_item(limit.limiter());
    format!("\"{}\";q={units};w={window}", limit.name())
}

/// A limit's item of the `RateLimit` value: `"api";r=5;t=17`, what
/// `remaining`, and the seconds, rounded up, until the limit next gives
/// quota back (`replenish_after`).
pub fn state_item(name: &str, remaining: u64, replenish_after: Duration) -> String {
    format!(
        "\"{name}\";r={remaining};t={}",
        ceil_seconds(replenish_after)
    )
}

/// The `Retry-After` seconds of a refusal: rounded up, never 0; `None`
/// when a request of its cost can never pass.
pub fn retry_after_seconds(decision: &Decision) -> Option<u64> {
    decision
        .can_ever_pass()
        .then(|| ceil_seconds(decision.retry_after()).max(1))
}
