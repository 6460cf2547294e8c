//! [`ConfigError`]: a layer or store set up in a way that cannot work.

use std::fmt;

/// A setting that cannot work, found when a layer or store is built (not
/// at the first request): its message names the setting and what to use
/// instead.
///
/// ```
/// use std::time::Duration;
/// use tollgate::RateLimitLayer;
///
/// let error = RateLimitLayer::builder()
///     .store_timeout(Duration::ZERO)
///     .try_build()
///     .unwrap_err();
/// assert!(error.to_string().contains("store_timeout"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    message: String,
}

impl ConfigError {
    /// An error whose message says what cannot work and what to use
    /// instead: for stores and extensions outside this crate.
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Any error, boxed: what a call fails with when its failure may come from
/// several places (a throttled call: the inner service's error, or why the
/// limiter could not admit it; a per-key quota lookup: whatever the plans'
/// source failed with). tower's and tonic's `BoxError` are the same type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
