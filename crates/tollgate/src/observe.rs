//! Counters through the `metrics` facade (with the `metrics` feature):
//! `tollgate_requests_total{limit, outcome="allowed"|"limited"|"shadow_limited"}`
//! per named limit — "allowed" counts the requests a limit admitted and was
//! charged for, "limited" those it refused, "shadow_limited" those it would
//! have refused and let through, being in shadow; a limit that would have
//! admitted a request another limit refused was not charged and counts
//! nothing — and
//! `tollgate_store_errors_total{policy}` where `policy` is the
//! policy's [`label`](crate::Policy::label) (its limits' names),
//! `tollgate_block_cache_hits_total{policy}` for the requests a block
//! cache refused without asking its store (`store::BlockCache`, and the
//! Redis store's own; each is also counted as "limited" above when a layer
//! judges it),
//! `tollgate_quota_errors_total` for failed per-key quota lookups, and a
//! circuit breaker's `tollgate_breaker_state{store}` (0 closed, 1
//! half-open, 2 open) and `tollgate_breaker_opened_total{store}`, and a
//! compare-and-swap store's (feature `cas`) lost races,
//! `tollgate_store_cas_conflicts_total{policy}`, and the calls it gave up
//! after losing every attempt, `tollgate_store_cas_contended_total{policy}`,
//! and how checks heard out after their caller stopped waiting ended,
//! `tollgate_late_checks_total{outcome="given_back"|"not_charged"|"kept"|"abandoned"}`
//! (see `store::late`).

use std::sync::Arc;
use tollgate_core::Decision;

/// A policy's counter keys, built with the policy so that counting a
/// decision allocates nothing: per limit, its "allowed" and "limited" keys,
/// and the policy's store-error key.
#[cfg(feature = "metrics")]
#[derive(Debug)]
pub(crate) struct PolicyMetrics {
    per_limit: Vec<(metrics::Key, metrics::Key)>,
    /// Per limit, the requests it would have refused in shadow.
    shadow_limited: Vec<metrics::Key>,
    store_errors: metrics::Key,
    block_cache_hits: metrics::Key,
}

#[cfg(feature = "metrics")]
impl PolicyMetrics {
    /// The keys of a policy of limits called `limit_names`, labelled
    /// `label`.
    pub(crate) fn new<'a>(limit_names: impl Iterator<Item = &'a Arc<str>>, label: &str) -> Self {
        let key = |name: &Arc<str>, outcome: &'static str| {
            let name = metrics::SharedString::from(Arc::clone(name));
            metrics::Key::from_parts(
                "tollgate_requests_total",
                vec![
                    metrics::Label::new("limit", name),
                    metrics::Label::new("outcome", outcome),
                ],
            )
        };
        let names: Vec<&Arc<str>> = limit_names.collect();
        PolicyMetrics {
            per_limit: names
                .iter()
                .map(|name| (key(name, "allowed"), key(name, "limited")))
                .collect(),
            shadow_limited: names
                .iter()
                .map(|name| key(name, "shadow_limited"))
                .collect(),
            store_errors: metrics::Key::from_parts(
                "tollgate_store_errors_total",
                vec![metrics::Label::new("policy", label.to_owned())],
            ),
            block_cache_hits: metrics::Key::from_parts(
                "tollgate_block_cache_hits_total",
                vec![metrics::Label::new("policy", label.to_owned())],
            ),
        }
    }
}

/// Without the `metrics` feature: nothing to count with.
#[cfg(not(feature = "metrics"))]
#[derive(Debug)]
pub(crate) struct PolicyMetrics;

#[cfg(not(feature = "metrics"))]
impl PolicyMetrics {
    pub(crate) fn new<'a>(_: impl Iterator<Item = &'a Arc<str>>, _: &str) -> Self {
        PolicyMetrics
    }
}

#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

#[cfg(feature = "metrics")]
pub(crate) fn decided(metrics: &PolicyMetrics, admitted: bool, each: &[Decision]) {
    let keys = &metrics.per_limit;
    metrics::with_recorder(|recorder| {
        for ((allowed, limited), decision) in keys.iter().zip(each) {
            let key = match (admitted, decision.allowed()) {
                (true, _) => allowed,
                (false, false) => limited,
                // Refused by another limit: this one was not charged.
                (false, true) => continue,
            };
            recorder.register_counter(key, &METADATA).increment(1);
        }
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn decided(_: &PolicyMetrics, _: bool, _: &[Decision]) {}

/// A request that the limits of `each` that refused it would have
/// refused, let through because they are in shadow.
#[cfg(feature = "metrics")]
pub(crate) fn shadow_limited(metrics: &PolicyMetrics, each: &[Decision]) {
    metrics::with_recorder(|recorder| {
        for (key, decision) in metrics.shadow_limited.iter().zip(each) {
            if !decision.allowed() {
                recorder.register_counter(key, &METADATA).increment(1);
            }
        }
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn shadow_limited(_: &PolicyMetrics, _: &[Decision]) {}

#[cfg(feature = "metrics")]
pub(crate) fn store_failed(metrics: &PolicyMetrics) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_counter(&metrics.store_errors, &METADATA)
            .increment(1);
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn store_failed(_: &PolicyMetrics) {}

#[cfg(feature = "metrics")]
pub(crate) fn block_cache_hit(metrics: &PolicyMetrics) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_counter(&metrics.block_cache_hits, &METADATA)
            .increment(1);
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn block_cache_hit(_: &PolicyMetrics) {}

#[cfg(all(feature = "metrics", feature = "quotas"))]
pub(crate) fn quota_lookup_failed() {
    metrics::counter!("tollgate_quota_errors_total").increment(1);
}

#[cfg(all(not(feature = "metrics"), feature = "quotas"))]
#[inline]
pub(crate) fn quota_lookup_failed() {}

/// A circuit breaker in front of `store` moved to `phase` (0 closed, 1
/// half-open, 2 open): `tollgate_breaker_state{store}`.
#[cfg(feature = "metrics")]
pub(crate) fn breaker_state(store: &str, phase: u8) {
    metrics::gauge!("tollgate_breaker_state", "store" => store.to_owned()).set(f64::from(phase));
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn breaker_state(_: &str, _: u8) {}

/// A circuit breaker in front of `store` opened:
/// `tollgate_breaker_opened_total{store}`.
#[cfg(feature = "metrics")]
pub(crate) fn breaker_opened(store: &str) {
    metrics::counter!("tollgate_breaker_opened_total", "store" => store.to_owned()).increment(1);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn breaker_opened(_: &str) {}

/// A check heard out after its caller stopped waiting ended in `outcome`:
/// `tollgate_late_checks_total{outcome}` (see `store::late`).
#[cfg(feature = "metrics")]
pub(crate) fn late_check(outcome: &'static str) {
    metrics::counter!("tollgate_late_checks_total", "outcome" => outcome).increment(1);
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn late_check(_: &'static str) {}

/// A compare-and-swap store's write lost its race to another writer of
/// the same key, under `policy`: `tollgate_store_cas_conflicts_total{policy}`.
#[cfg(all(feature = "metrics", feature = "cas"))]
pub(crate) fn cas_conflict(policy: &str) {
    metrics::counter!("tollgate_store_cas_conflicts_total", "policy" => policy.to_owned())
        .increment(1);
}

#[cfg(all(not(feature = "metrics"), feature = "cas"))]
#[inline]
pub(crate) fn cas_conflict(_: &str) {}

/// A compare-and-swap store gave up on a call under `policy` after losing
/// every attempt's race: `tollgate_store_cas_contended_total{policy}`.
#[cfg(all(feature = "metrics", feature = "cas"))]
pub(crate) fn cas_contended(policy: &str) {
    metrics::counter!("tollgate_store_cas_contended_total", "policy" => policy.to_owned())
        .increment(1);
}

#[cfg(all(not(feature = "metrics"), feature = "cas"))]
#[inline]
pub(crate) fn cas_contended(_: &str) {}

/// A warning that repeats once per request while a store is away, let
/// through once per [`Quiet::EVERY`] (per call site: a `static`), with the
/// number held back since the last one: an outage is logged, not its
/// traffic. Metrics still count every failure.
pub(crate) struct Quiet {
    /// When the next warning may go out (ns on the monotonic clock).
    next_at: std::sync::atomic::AtomicU64,
    held_back: std::sync::atomic::AtomicU64,
}

impl Quiet {
    /// How often a repeated warning goes out at most.
    pub(crate) const EVERY: std::time::Duration = std::time::Duration::from_secs(10);

    pub(crate) const fn new() -> Self {
        Quiet {
            next_at: std::sync::atomic::AtomicU64::new(0),
            held_back: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `Some(held back since the last)` when this one should be logged;
    /// `None` (counted) when it should not.
    pub(crate) fn pass(&self) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        use tollgate_core::Clock;
        let now = tollgate_core::MonotonicClock.now_relaxed();
        let next = self.next_at.load(Relaxed);
        let every = Self::EVERY.as_nanos() as u64;
        if now >= next
            && self
                .next_at
                .compare_exchange(next, now.saturating_add(every), Relaxed, Relaxed)
                .is_ok()
        {
            return Some(self.held_back.swap(0, Relaxed));
        }
        self.held_back.fetch_add(1, Relaxed);
        None
    }
}
