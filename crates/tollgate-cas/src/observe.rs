//! The compare-and-swap store's `metrics` counters (feature `metrics`);
//! their help texts are in `tollgate_store::describe_metrics`, with the rest of
//! tollgate's.

/// A write lost its race to another writer of the same key, under
/// `policy`: `tollgate_store_cas_conflicts_total{limits}`.
#[cfg(feature = "metrics")]
pub(crate) fn conflict(policy: &str) {
    metrics::counter!("tollgate_store_cas_conflicts_total", "limits" => policy.to_owned())
        .increment(1);
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn conflict(_: &str) {}

/// A call under `policy` was given up after losing every attempt's race:
/// `tollgate_store_cas_contended_total{limits}`.
#[cfg(feature = "metrics")]
pub(crate) fn contended(policy: &str) {
    metrics::counter!("tollgate_store_cas_contended_total", "limits" => policy.to_owned())
        .increment(1);
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn contended(_: &str) {}
