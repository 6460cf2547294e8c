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

/// The rate-limit fields of one response, formatted when the verdict is
/// known (where the policy is at hand), carried by the response future and
/// written once the inner service answers. Empty when there are none. Two
/// fields (the draft's) fit inline.
#[derive(Clone, Debug, Default)]
pub(crate) struct FieldValues(SmallVec<[(&'static HeaderName, HeaderValue); 2]>);

impl FieldValues {
    /// The fields `style` asks for, reporting `verdict` on `policy`;
    /// `policy_value` is the policy's `RateLimit-Policy`, computed when the
    /// layer was built.
    pub(crate) fn of(
        style: HeaderStyle,
        policy: &Policy,
        policy_value: Option<&HeaderValue>,
        verdict: &Verdict,
    ) -> FieldValues {
        let mut values = SmallVec::new();
        if style.draft {
            if let Some(value) = policy_value {
                values.push((&RATELIMIT_POLICY, value.clone()));
            }
            if let Some(value) = state_value(policy, verdict) {
                values.push((&RATELIMIT, value));
            }
        }
        if style.legacy {
            // The limit with the least left is the one the client meets first.
            let first = verdict
                .each
                .iter()
                .min_by_key(|d| d.remaining)
                .unwrap_or(&verdict.merged);
            let reset = ceil_seconds(first.reset_after());
            values.push((&X_RATELIMIT_LIMIT, HeaderValue::from(first.limit)));
            values.push((&X_RATELIMIT_REMAINING, HeaderValue::from(first.remaining)));
            values.push((&X_RATELIMIT_RESET, HeaderValue::from(reset)));
        }
        FieldValues(values)
    }

    /// Whether there is nothing to write.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Writes the fields into `headers`, replacing any of the same names.
    pub(crate) fn write_into(self, headers: &mut HeaderMap) {
        for (name, value) in self.0 {
            headers.insert(name.clone(), value);
        }
    }
}

/// The `RateLimit` value, assembled on the stack and copied once into the
/// value (`core::fmt` would cost several times as much per request).
fn state_value(policy: &Policy, verdict: &Verdict) -> Option<HeaderValue> {
    let mut text = SmallVec::<[u8; 96]>::new();
    let mut digits = itoa::Buffer::new();
    for (limit, decision) in policy.limits().iter().zip(&verdict.each) {
        if !text.is_empty() {
            text.extend_from_slice(b", ");
        }
        text.push(b'"');
        text.extend_from_slice(limit.name().as_bytes());
        text.extend_from_slice(b"\";r=");
        text.extend_from_slice(digits.format(decision.remaining).as_bytes());
        text.extend_from_slice(b";t=");
        text.extend_from_slice(
            digits
                .format(ceil_seconds(decision.reset_after()))
                .as_bytes(),
        );
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
