//! The rate-limit fields of HTTP responses.
//!
//! Follows draft-ietf-httpapi-ratelimit-headers-10: `RateLimit-Policy` names
//! each limit's quota (`"api";q=100;w=60`) and `RateLimit` its current state
//! (`"api";r=0;t=17`), several limits as one comma-separated list. The legacy
//! `X-RateLimit-Limit/Remaining/Reset` trio reports the most constrained limit.

use crate::Verdict;
use crate::policy::Policy;
use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use smallvec::SmallVec;
use std::fmt::Write as _;
use std::time::Duration;
use tollgate_core::Decision;

/// `RateLimit-Policy`.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Which rate-limit fields responses carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderStyle {
    /// The IETF draft's `RateLimit-Policy` and `RateLimit` (default on).
    pub draft: bool,
    /// `X-RateLimit-Limit/Remaining/Reset` (default off).
    pub legacy: bool,
    /// Whether allowed responses carry them too, not only rejections
    /// (default on). `Retry-After` is only ever on rejections.
    pub on_allowed: bool,
}

impl Default for HeaderStyle {
    fn default() -> Self {
        HeaderStyle::DRAFT
    }
}

impl HeaderStyle {
    /// No rate-limit fields at all (but `Retry-After` on rejections).
    pub const NONE: HeaderStyle = HeaderStyle {
        draft: false,
        legacy: false,
        on_allowed: false,
    };

    /// The IETF draft's fields on every response: the default.
    pub const DRAFT: HeaderStyle = HeaderStyle {
        draft: true,
        legacy: false,
        on_allowed: true,
    };

    /// Only the legacy `X-RateLimit-Limit/Remaining/Reset`, on every
    /// response, for clients written against them.
    pub const LEGACY: HeaderStyle = HeaderStyle {
        draft: false,
        legacy: true,
        on_allowed: true,
    };

    /// Both the draft's fields and the legacy trio, on every response: for
    /// moving clients from one to the other.
    pub const BOTH: HeaderStyle = HeaderStyle {
        draft: true,
        legacy: true,
        on_allowed: true,
    };

    /// The same fields, but only on rejections.
    ///
    /// ```
    /// use tollgate::HeaderStyle;
    /// assert!(!HeaderStyle::DRAFT.only_on_rejections().on_allowed);
    /// ```
    pub const fn only_on_rejections(self) -> HeaderStyle {
        HeaderStyle {
            on_allowed: false,
            ..self
        }
    }
}

/// Whole seconds, rounded up: a client that waits this long is never early.
pub fn ceil_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The `RateLimit-Policy` value for a policy: computed once per layer.
pub(crate) fn policy_value(policy: &Policy) -> Option<HeaderValue> {
    let mut text = String::new();
    for limit in policy.limits() {
        if !text.is_empty() {
            text.push_str(", ");
        }
        let window = ceil_seconds(limit.quota().period()).max(1);
        let _ = write!(
            text,
            "\"{}\";q={};w={}",
            limit.name(),
            limit.quota().limit(),
            window
        );
    }
    HeaderValue::from_str(&text).ok()
}

/// What the fields report, taken from a verdict: small, copied into the
/// response future, formatted only when the response is written.
#[derive(Clone, Debug)]
pub(crate) struct Fields {
    /// Per limit: remaining, and seconds until reset (rounded up).
    each: SmallVec<[(u64, u64); 2]>,
    /// For the legacy trio, the limit the client meets first: limit,
    /// remaining, reset seconds.
    first_met: (u64, u64, u64),
}

impl Fields {
    pub(crate) fn of(verdict: &Verdict) -> Fields {
        // The limit with the least left is the one the client meets first.
        let first = verdict
            .each
            .iter()
            .min_by_key(|d| d.remaining)
            .unwrap_or(&verdict.merged);
        Fields {
            each: verdict
                .each
                .iter()
                .map(|d| (d.remaining, ceil_seconds(d.reset_after())))
                .collect(),
            first_met: (
                first.limit,
                first.remaining,
                ceil_seconds(first.reset_after()),
            ),
        }
    }
}

/// The `RateLimit` value, assembled on the stack and copied once into the
/// value (`core::fmt` would cost several times as much per request).
fn state_value(policy: &Policy, fields: &Fields) -> Option<HeaderValue> {
    let mut text = SmallVec::<[u8; 96]>::new();
    let mut digits = itoa::Buffer::new();
    for (limit, (remaining, reset)) in policy.limits().iter().zip(&fields.each) {
        if !text.is_empty() {
            text.extend_from_slice(b", ");
        }
        text.push(b'"');
        text.extend_from_slice(limit.name().as_bytes());
        text.extend_from_slice(b"\";r=");
        text.extend_from_slice(digits.format(*remaining).as_bytes());
        text.extend_from_slice(b";t=");
        text.extend_from_slice(digits.format(*reset).as_bytes());
    }
    HeaderValue::from_bytes(&text).ok()
}

/// The `Retry-After` value: delta-seconds, rounded up, never 0; `None` when
/// the request can never pass at its cost.
pub fn retry_after_value(decision: &Decision) -> Option<HeaderValue> {
    decision
        .can_ever_pass()
        .then(|| HeaderValue::from(ceil_seconds(decision.retry_after()).max(1)))
}

/// Writes the fields `style` asks for into `headers`.
pub(crate) fn write_fields(
    headers: &mut HeaderMap,
    style: HeaderStyle,
    policy: &Policy,
    policy_value: Option<&HeaderValue>,
    fields: &Fields,
) {
    if style.draft {
        if let Some(value) = policy_value {
            headers.insert(RATELIMIT_POLICY.clone(), value.clone());
        }
        if let Some(value) = state_value(policy, fields) {
            headers.insert(RATELIMIT.clone(), value);
        }
    }
    if style.legacy {
        let (limit, remaining, reset) = fields.first_met;
        headers.insert(X_RATELIMIT_LIMIT.clone(), HeaderValue::from(limit));
        headers.insert(X_RATELIMIT_REMAINING.clone(), HeaderValue::from(remaining));
        headers.insert(X_RATELIMIT_RESET.clone(), HeaderValue::from(reset));
    }
}

/// Writes `Retry-After` for a rejection.
pub(crate) fn write_retry_after(headers: &mut HeaderMap, decision: &Decision) {
    if let Some(value) = retry_after_value(decision) {
        headers.insert(RETRY_AFTER, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        let with = |d: Duration| {
            let decision = Decision {
                retry_after_nanos: u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
                ..Decision::default()
            };
            retry_after_value(&decision).map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(with(Duration::from_millis(200)).as_deref(), Some("1"));
        assert_eq!(with(Duration::ZERO).as_deref(), Some("1"));
        assert_eq!(with(Duration::from_secs(2)).as_deref(), Some("2"));
        assert_eq!(with(Duration::from_millis(2001)).as_deref(), Some("3"));
        assert_eq!(with(Decision::NEVER), None);
    }
}
