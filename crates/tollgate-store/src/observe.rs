//! Counters through the `metrics` facade (with the `metrics` feature). A
//! dashboard's series, and the labels to filter them by (`limit` is one
//! limit's name; `limits` every limit a request is checked against, a
//! policy's [`label`](crate::Policy::label): the names joined by commas;
//! `store` is a store's type name):
//!
//! - `tollgate_decisions_total{limit, decision}` per named limit, where
//!   `decision` is `allowed` (the limit admitted the request and was
//!   charged for it), `limited` (it refused the request), or
//!   `shadow_limited` (it would have refused the request, but is in shadow
//!   mode: the request went on, uncharged). A limit that would have
//!   admitted a request another limit refused was not charged and counts
//!   nothing. An in-flight limit ([`InFlightLayer`](crate::InFlightLayer))
//!   counts here too, under its name (`inflight` by default): `allowed`
//!   for a request that got a slot, `limited` for one refused. (This was
//!   `tollgate_requests_total{limit, outcome}`, where a shadow refusal
//!   counted as `limited`.)
//! - `tollgate_near_limit_total{limit}`: admissions that left the limit
//!   with a fifth of its quota or less (`remaining ≤ 0.2 × limit`; for an
//!   in-flight limit, free slots), the early warning before refusals
//!   start;
//! - `tollgate_store_errors_total{limits}`: store failures and timeouts the
//!   layer answered by its `on_store_error`;
//! - `tollgate_fallback_decisions_total{limits}`: requests a
//!   [`Fallback`](crate::Fallback)'s secondary decided because its
//!   primary failed;
//! - `tollgate_block_cache_hits_total{limits}` for the requests a block
//!   cache refused without asking its store (`store::BlockCache`, and the
//!   Redis store's own; each is also counted as "limited" above when a
//!   layer judges it);
//! - `tollgate_quota_errors_total` for failed per-key quota lookups;
//! - a circuit breaker's `tollgate_breaker_state{store}` (0 closed, 1
//!   half-open, 2 open) and `tollgate_breaker_opened_total{store}`;
//! - a compare-and-swap store's (`tollgate-cas`, its `metrics` feature) lost races,
//!   `tollgate_store_cas_conflicts_total{limits}`, and the calls it gave up
//!   after losing every attempt, `tollgate_store_cas_contended_total{limits}`;
//! - how checks heard out after their caller stopped waiting ended,
//!   `tollgate_late_checks_total{outcome="given_back"|"not_charged"|"kept"|"abandoned"}`
//!   (see `store::late`).
//!
//! [`describe_metrics`] gives each its help text. A layer being built does
//! too, and registers its limits' and policies' series at 0, with the
//! recorder installed at that moment.

// Shared with the middleware through `__private` (hidden): documented
// where it helps, as crate-private items are.
#![allow(missing_docs)]

use std::sync::Arc;
use tollgate_core::Decision;

/// Whether a policy's limits are in shadow: a refusal is then counted as
/// `shadow_limited` rather than `limited`. The whole layer's shadow mode,
/// and a route's limits in shadow (a policy of their own, see
/// `shadow.rs`), are [`Shadow::All`].
#[derive(Clone, Copy, Debug)]
pub enum Shadow {
    /// The limits are enforced.
    None,
    /// Every limit is in shadow.
    All,
}

impl Shadow {
    /// Whether the `index`th limit of the policy is in shadow.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    #[inline]
    pub fn covers(self, _index: usize) -> bool {
        matches!(self, Shadow::All)
    }
}

/// Whether an admission leaves `decision`'s limit near its end: a fifth of
/// its quota or less remaining (`remaining ≤ 0.2 × limit`).
#[cfg(feature = "metrics")]
#[inline]
pub fn near_limit(decision: &Decision) -> bool {
    decision.remaining().saturating_mul(5) <= decision.limit()
}

/// One limit's counter keys.
#[cfg(feature = "metrics")]
#[derive(Debug)]
struct LimitKeys {
    allowed: metrics::Key,
    limited: metrics::Key,
    shadow_limited: metrics::Key,
    near_limit: metrics::Key,
}

#[cfg(feature = "metrics")]
impl LimitKeys {
    /// The keys of the limit called `name`.
    fn new(name: &Arc<str>) -> Self {
        let limit = || metrics::Label::new("limit", metrics::SharedString::from(Arc::clone(name)));
        let decision = |decision: &'static str| {
            metrics::Key::from_parts(
                DECISIONS,
                vec![limit(), metrics::Label::new("decision", decision)],
            )
        };
        LimitKeys {
            allowed: decision("allowed"),
            limited: decision("limited"),
            shadow_limited: decision("shadow_limited"),
            near_limit: metrics::Key::from_parts(NEAR_LIMIT, vec![limit()]),
        }
    }
}

/// The counter keys of one limit outside a policy (an in-flight limit),
/// built with its layer.
#[cfg(feature = "metrics")]
#[derive(Debug)]
pub struct LimitMetrics(LimitKeys);

#[cfg(feature = "metrics")]
impl LimitMetrics {
    pub fn new(name: &Arc<str>) -> Self {
        LimitMetrics(LimitKeys::new(name))
    }
}

/// Without the `metrics` feature: nothing to count with.
#[cfg(not(feature = "metrics"))]
#[derive(Debug)]
pub struct LimitMetrics;

#[cfg(not(feature = "metrics"))]
impl LimitMetrics {
    pub fn new(_: &Arc<str>) -> Self {
        LimitMetrics
    }
}

/// An in-flight limit admitted a request (leaving `remaining` of its
/// `limit` slots free), or refused one: `tollgate_decisions_total` and
/// `tollgate_near_limit_total` under its name, as a rate limit's.
#[cfg(feature = "metrics")]
pub fn in_flight_decided(metrics: &LimitMetrics, admitted: bool, remaining: u64, limit: u64) {
    let keys = &metrics.0;
    metrics::with_recorder(|recorder| {
        if !admitted {
            recorder
                .register_counter(&keys.limited, &METADATA)
                .increment(1);
            return;
        }
        if remaining.saturating_mul(5) <= limit {
            recorder
                .register_counter(&keys.near_limit, &METADATA)
                .increment(1);
        }
        recorder
            .register_counter(&keys.allowed, &METADATA)
            .increment(1);
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub fn in_flight_decided(_: &LimitMetrics, _: bool, _: u64, _: u64) {}

/// An in-flight limit in shadow let a request of a full key through:
/// `tollgate_decisions_total{decision="shadow_limited"}` under its name.
#[cfg(feature = "metrics")]
pub fn in_flight_shadow_limited(metrics: &LimitMetrics) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_counter(&metrics.0.shadow_limited, &METADATA)
            .increment(1);
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub fn in_flight_shadow_limited(_: &LimitMetrics) {}

/// A policy's counter keys, built with the policy so that counting a
/// decision allocates nothing: per limit, its decisions' and near-limit
/// keys, and the policy's store-error, block-cache and fallback keys.
#[cfg(feature = "metrics")]
#[derive(Debug)]
pub struct PolicyMetrics {
    per_limit: Vec<LimitKeys>,
    store_errors: metrics::Key,
    block_cache_hits: metrics::Key,
    fallback_decisions: metrics::Key,
}

#[cfg(feature = "metrics")]
impl PolicyMetrics {
    /// The keys of a policy of limits called `limit_names`, labelled
    /// `label`.
    pub fn new<'a>(limit_names: impl Iterator<Item = &'a Arc<str>>, label: &str) -> Self {
        let of_policy = |metric: &'static str| {
            metrics::Key::from_parts(
                metric,
                vec![metrics::Label::new("limits", label.to_owned())],
            )
        };
        PolicyMetrics {
            per_limit: limit_names.map(LimitKeys::new).collect(),
            store_errors: of_policy(STORE_ERRORS),
            block_cache_hits: of_policy(BLOCK_CACHE_HITS),
            fallback_decisions: of_policy(FALLBACK_DECISIONS),
        }
    }
}

#[cfg(feature = "metrics")]
impl PolicyMetrics {
    /// Registers the series an enforced policy counts in, with the
    /// recorder installed now, at 0: a dashboard shows a limit before its
    /// first decision, and a rate over its first increment is not lost.
    /// Each limit's `allowed`, `limited` and near-limit series, and the
    /// policy's store errors, block cache hits and fallback decisions; not
    /// `shadow_limited`, which an enforced limit never counts (see
    /// [`register_in_shadow`](Self::register_in_shadow)).
    pub fn register(&self) {
        self.register_as(false);
    }

    /// [`register`](Self::register) for a policy whose limits are in
    /// shadow (shadow limits, or a whole layer in shadow mode): their
    /// refusals count as `shadow_limited`, never as `limited`.
    pub fn register_in_shadow(&self) {
        self.register_as(true);
    }

    fn register_as(&self, shadow: bool) {
        metrics::with_recorder(|recorder| {
            let keys = self.per_limit.iter().flat_map(|limit| {
                [
                    &limit.allowed,
                    if shadow {
                        &limit.shadow_limited
                    } else {
                        &limit.limited
                    },
                    &limit.near_limit,
                ]
            });
            let policy = [
                &self.store_errors,
                &self.block_cache_hits,
                &self.fallback_decisions,
            ];
            for key in keys.chain(policy) {
                let _ = recorder.register_counter(key, &METADATA);
            }
        });
    }
}

/// Without the `metrics` feature: nothing to count with.
#[cfg(not(feature = "metrics"))]
#[derive(Debug)]
pub struct PolicyMetrics;

#[cfg(not(feature = "metrics"))]
impl PolicyMetrics {
    pub fn new<'a>(_: impl Iterator<Item = &'a Arc<str>>, _: &str) -> Self {
        PolicyMetrics
    }
}

#[cfg(feature = "metrics")]
const DECISIONS: &str = "tollgate_decisions_total";
#[cfg(feature = "metrics")]
const NEAR_LIMIT: &str = "tollgate_near_limit_total";
#[cfg(feature = "metrics")]
const STORE_ERRORS: &str = "tollgate_store_errors_total";
#[cfg(feature = "metrics")]
const BLOCK_CACHE_HITS: &str = "tollgate_block_cache_hits_total";
#[cfg(feature = "metrics")]
const FALLBACK_DECISIONS: &str = "tollgate_fallback_decisions_total";

/// Every metric this crate writes, its kind and its help text.
#[cfg(feature = "metrics")]
const DESCRIPTIONS: &[(&str, bool, &str)] = &[
    (
        DECISIONS,
        true,
        "Requests each named limit decided: allowed (admitted and charged), limited \
         (refused), shadow_limited (would have been refused; in shadow, let through)",
    ),
    (
        NEAR_LIMIT,
        true,
        "Admissions that left a limit with 20% of its quota or less",
    ),
    (
        STORE_ERRORS,
        true,
        "Store failures and timeouts, answered by the layer's on_store_error",
    ),
    (
        FALLBACK_DECISIONS,
        true,
        "Requests a Fallback's secondary store decided because its primary failed",
    ),
    (
        BLOCK_CACHE_HITS,
        true,
        "Requests a block cache refused without asking its store",
    ),
    (
        "tollgate_quota_errors_total",
        true,
        "Failed per-key quota lookups",
    ),
    (
        "tollgate_breaker_state",
        false,
        "A circuit breaker's state: 0 closed, 1 half-open, 2 open",
    ),
    (
        "tollgate_breaker_opened_total",
        true,
        "Times a circuit breaker opened",
    ),
    (
        "tollgate_store_cas_conflicts_total",
        true,
        "Compare-and-swap writes that lost their race",
    ),
    (
        "tollgate_store_cas_contended_total",
        true,
        "Compare-and-swap calls given up after losing every attempt",
    ),
    (
        "tollgate_late_checks_total",
        true,
        "Checks heard out after their caller stopped waiting, by how they ended",
    ),
];

/// Gives every metric this crate writes its help text (Prometheus's
/// `# HELP` lines), on the recorder installed now: call it once after
/// installing a recorder. Building a layer does it too, for the recorder
/// installed at that moment. The metrics and their labels: the guide's
/// page on metrics (`docs/guide/metrics.md`).
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    metrics::with_recorder(|recorder| {
        for (name, counter, help) in DESCRIPTIONS {
            let name = metrics::KeyName::from_const_str(name);
            let help = metrics::SharedString::const_str(help);
            if *counter {
                recorder.describe_counter(name, None, help);
            } else {
                recorder.describe_gauge(name, None, help);
            }
        }
    });
}

#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// Counts a verdict on a policy's limits, `each` in the policy's order:
/// `admitted` says whether the request was let through and charged (every
/// limit not in `shadow` allowed it); a limit that refused counts as
/// `shadow_limited` if `shadow` covers it, else as `limited`; one that
/// allowed a request that was admitted counts as `allowed` (and as near
/// its limit if so), and one that allowed a request not admitted counts
/// nothing (it was not charged).
#[cfg(feature = "metrics")]
pub fn decided(metrics: &PolicyMetrics, admitted: bool, each: &[Decision], shadow: Shadow) {
    let keys = &metrics.per_limit;
    metrics::with_recorder(|recorder| {
        for (index, (keys, decision)) in keys.iter().zip(each).enumerate() {
            let key = if decision.allowed() {
                if !admitted {
                    // Refused by another limit: this one was not charged.
                    continue;
                }
                if near_limit(decision) {
                    recorder
                        .register_counter(&keys.near_limit, &METADATA)
                        .increment(1);
                }
                &keys.allowed
            } else if shadow.covers(index) {
                &keys.shadow_limited
            } else {
                &keys.limited
            };
            recorder.register_counter(key, &METADATA).increment(1);
        }
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub fn decided(_: &PolicyMetrics, _: bool, _: &[Decision], _: Shadow) {}

/// A [`Fallback`](crate::Fallback)'s secondary decided a request of
/// `metrics`' policy: `tollgate_fallback_decisions_total{limits}`.
#[cfg(feature = "metrics")]
pub fn fallback_decided(metrics: &PolicyMetrics) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_counter(&metrics.fallback_decisions, &METADATA)
            .increment(1);
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub fn fallback_decided(_: &PolicyMetrics) {}

#[cfg(feature = "metrics")]
pub fn store_failed(metrics: &PolicyMetrics) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_counter(&metrics.store_errors, &METADATA)
            .increment(1);
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub fn store_failed(_: &PolicyMetrics) {}

#[cfg(feature = "metrics")]
pub fn block_cache_hit(metrics: &PolicyMetrics) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_counter(&metrics.block_cache_hits, &METADATA)
            .increment(1);
    });
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub fn block_cache_hit(_: &PolicyMetrics) {}

#[cfg(feature = "metrics")]
pub fn quota_lookup_failed() {
    metrics::counter!("tollgate_quota_errors_total").increment(1);
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub fn quota_lookup_failed() {}

/// A circuit breaker in front of `store` moved to `phase` (0 closed, 1
/// half-open, 2 open): `tollgate_breaker_state{store}`.
#[cfg(feature = "metrics")]
pub fn breaker_state(store: &str, phase: u8) {
    metrics::gauge!("tollgate_breaker_state", "store" => store.to_owned()).set(f64::from(phase));
}

#[cfg(not(feature = "metrics"))]
pub fn breaker_state(_: &str, _: u8) {}

/// A circuit breaker in front of `store` was built: its state, closed,
/// and how often it opened, 0, registered, so that a dashboard shows the
/// breaker before it ever opens and a rate over its first opening is not
/// lost.
#[cfg(feature = "metrics")]
pub fn breaker_built(store: &str) {
    breaker_state(store, 0);
    metrics::counter!("tollgate_breaker_opened_total", "store" => store.to_owned()).increment(0);
}

#[cfg(not(feature = "metrics"))]
pub fn breaker_built(_: &str) {}

/// A circuit breaker in front of `store` opened:
/// `tollgate_breaker_opened_total{store}`.
#[cfg(feature = "metrics")]
pub fn breaker_opened(store: &str) {
    metrics::counter!("tollgate_breaker_opened_total", "store" => store.to_owned()).increment(1);
}

#[cfg(not(feature = "metrics"))]
pub fn breaker_opened(_: &str) {}

/// Registers `tollgate_late_checks_total{outcome}` at 0.
#[cfg(feature = "metrics")]
pub fn register_late_check(outcome: &'static str) {
    metrics::counter!("tollgate_late_checks_total", "outcome" => outcome).increment(0);
}

/// A check heard out after its caller stopped waiting ended in `outcome`:
/// `tollgate_late_checks_total{outcome}` (see `store::late`).
#[cfg(feature = "metrics")]
pub fn late_check(outcome: &'static str) {
    metrics::counter!("tollgate_late_checks_total", "outcome" => outcome).increment(1);
}

#[cfg(not(feature = "metrics"))]
#[inline]
pub fn late_check(_: &'static str) {}

/// A warning that repeats once per request while a store is away, let
/// through once per [`Quiet::EVERY`] (per call site: a `static`), with the
/// number held back since the last one: an outage is logged, not its
/// traffic. Metrics still count every failure.
#[derive(Debug, Default)]
pub struct Quiet {
    /// When the next warning may go out (ns on the monotonic clock).
    next_at: std::sync::atomic::AtomicU64,
    held_back: std::sync::atomic::AtomicU64,
}

impl Quiet {
    /// How often a repeated warning goes out at most.
    pub const EVERY: std::time::Duration = std::time::Duration::from_secs(10);

    pub const fn new() -> Self {
        Quiet {
            next_at: std::sync::atomic::AtomicU64::new(0),
            held_back: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `Some(held back since the last)` when this one should be logged;
    /// `None` (counted) when it should not.
    pub fn pass(&self) -> Option<u64> {
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

#[cfg(test)]
#[cfg(feature = "metrics")]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use crate::policy::{NamedLimit, Policy};
    use metrics::{Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder};
    use metrics::{SharedString, Unit};
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Every counter's sum, by `name{label=value,...}`.
    #[derive(Default)]
    struct Counts(Mutex<BTreeMap<String, Arc<AtomicU64>>>);

    struct Cell(Arc<AtomicU64>);

    impl CounterFn for Cell {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::Relaxed);
        }
        fn absolute(&self, value: u64) {
            self.0.store(value, Ordering::Relaxed);
        }
    }

    impl Recorder for Counts {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            let cell = self.0.lock().unwrap().entry(name).or_default().clone();
            Counter::from_arc(Arc::new(Cell(cell)))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    impl Counts {
        fn get(&self, limit: &str, decision: &str) -> u64 {
            let name = format!("tollgate_decisions_total{{limit={limit},decision={decision}}}");
            let map = self.0.lock().unwrap();
            map.get(&name).map_or(0, |c| c.load(Ordering::Relaxed))
        }
    }

    /// Limits in shadow (the layer's shadow mode, or a route's shadow
    /// limits, a policy of their own) count a refusal as `shadow_limited`;
    /// enforced ones as `limited`, and a limit another refused counts
    /// nothing.
    #[test]
    fn limits_in_shadow_count_their_refusals_as_shadow_limited() {
        let policy = Policy::new(vec![
            NamedLimit::new("burst", "1/min".parse().unwrap()),
            NamedLimit::new("daily", "100/day".parse().unwrap()),
        ]);
        let store = MemoryStore::new();
        store.check_now(&policy, &crate::key::Key::GLOBAL, 1);
        // "burst" refuses, "daily" admits.
        let verdict = store.check_now(&policy, &crate::key::Key::GLOBAL, 1);
        let each = verdict.each();
        assert!(!each[0].allowed() && each[1].allowed());
        let counts = Counts::default();
        metrics::with_local_recorder(&counts, || {
            decided(policy.metrics(), false, each, Shadow::None);
            decided(policy.metrics(), false, each, Shadow::All);
        });
        assert_eq!(counts.get("burst", "shadow_limited"), 1);
        assert_eq!(counts.get("burst", "limited"), 1);
        assert_eq!(counts.get("daily", "allowed"), 0);
        assert_eq!(counts.get("daily", "limited"), 0);
    }
}
