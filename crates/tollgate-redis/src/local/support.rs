//! Which policies a [`LocalFirst`](super::LocalFirst) store can decide.

use std::time::Duration;
use tollgate::{ConfigError, Policy};

/// What [`LocalFirst::supports`](super::LocalFirst::supports) says, for any store: the Redis store's
/// prepared form keeps it, so that a request reads one flag.
pub(crate) fn supports(policy: &Policy) -> Result<(), ConfigError> {
    for limit in policy.limits() {
        let limiter = limit.limiter();
        let script = limiter.script().script;
        if !SUPPORTED.contains(&script) {
            return Err(ConfigError::new(format!(
                "the local-first store cannot decide limit {:?} ({}): it supports GCRA, \
                 the token bucket, the fixed window, the sliding window and sliding \
                 window buckets; use the Redis store directly for this limit",
                limit.name(),
                limiter.algorithm(),
            )));
        }
        if limiter.with_max_delay(Duration::ZERO) != *limiter {
            return Err(ConfigError::new(format!(
                "the local-first store cannot delay requests (limit {:?} has a max \
                 delay): remove max_delay, or use the Redis store directly",
                limit.name()
            )));
        }
    }
    Ok(())
}

/// The Lua files of the algorithms both modes support (those with a
/// `force`; the window ones also have a `lapse`).
const SUPPORTED: &[&str] = &[
    "gcra",
    "token_bucket",
    "fixed_window",
    "sliding_window",
    "sliding_window_buckets",
];
