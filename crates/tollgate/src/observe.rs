//! Counters through the `metrics` facade (with the `metrics` feature):
//! `tollgate_requests_total{limit, outcome="allowed"|"limited"}` per named
//! limit — "allowed" counts the requests a limit admitted and was charged
//! for, "limited" those it refused; a limit that would have admitted a
//! request another limit refused was not charged and counts nothing — and `tollgate_store_errors_total{policy}` where `policy` is the
//! policy's [`label`](crate::Policy::label) (its limits' names), and
//! `tollgate_quota_errors_total` for failed per-key quota lookups.

use crate::Verdict;
use crate::policy::Policy;
#[cfg(feature = "metrics")]
use std::sync::Arc;

#[cfg(feature = "metrics")]
pub(crate) fn decided(policy: &Policy, verdict: &Verdict) {
    let admitted = verdict.merged.allowed;
    for (limit, decision) in policy.limits().iter().zip(&verdict.each) {
        let outcome = match (admitted, decision.allowed) {
            (true, _) => "allowed",
            (false, false) => "limited",
            // Refused by another limit: this one was not charged.
            (false, true) => continue,
        };
        let name = metrics::SharedString::from(Arc::clone(limit.shared_name()));
        metrics::counter!("tollgate_requests_total", "limit" => name, "outcome" => outcome)
            .increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn decided(_: &Policy, _: &Verdict) {}

#[cfg(feature = "metrics")]
pub(crate) fn store_failed(policy: &Policy) {
    metrics::counter!("tollgate_store_errors_total", "policy" => policy.label().to_owned())
        .increment(1);
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn store_failed(_: &Policy) {}

#[cfg(all(feature = "metrics", feature = "quotas"))]
pub(crate) fn quota_lookup_failed() {
    metrics::counter!("tollgate_quota_errors_total").increment(1);
}

#[cfg(all(not(feature = "metrics"), feature = "quotas"))]
#[inline]
pub(crate) fn quota_lookup_failed() {}
