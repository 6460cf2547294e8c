//! Each rule's counts, as envoyproxy/ratelimit keeps its per-rule stats,
//! through the `metrics` facade: nothing is recorded until a program
//! installs a recorder (the binary's `--metrics-listen` installs a
//! Prometheus one).
//!
//! Five counters, each of hits (a descriptor's `hits_addend`, 1 by
//! default), labelled `rule` with the rule's full key
//! (`domain.key_value.key`, as that server names its stats): a label set
//! bounded by the configuration, never one series per descriptor value.
//!
//! | counter | counts the hits of |
//! |---|---|
//! | `tollgate_rls_hits_total` | every descriptor a rule decided |
//! | `tollgate_rls_within_limit_total` | those admitted |
//! | `tollgate_rls_near_limit_total` | those admitted past 80 % of the limit |
//! | `tollgate_rls_over_limit_total` | those over the limit (shadow and quota mode too) |
//! | `tollgate_rls_shadow_mode_total` | those over a shadow rule's limit (let through) |
//!
//! A rule with `detailed_metric: true` is counted under the descriptor's
//! own key instead (`domain.key_value.key_value`, a `share_threshold`
//! wildcard's entries under their wildcard); one under a level with
//! `value_to_metric: true` under its full key with that level's value
//! named where the level matched it by default or by a wildcard
//! ([`Config::metric_key`]), as that server names them. Those series are
//! one per value, so they are capped: past [`DETAILED_SERIES`] names,
//! further values count under the rule's full key (one warning says so).
//! A descriptor's own `limit` override counts under `domain.override`.

use crate::config::{Config, Entry, Found};
use crate::counters::{Counted, NEAR_LIMIT_RATIO, RuleStats};
use crate::decide::{Descriptor, Outcome};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// How many names `detailed_metric` and `value_to_metric` may add, all
/// rules together, before further values count under their rule's full
/// key.
pub const DETAILED_SERIES: usize = 10_000;

/// Describes the five counters to the recorder installed now (their
/// help text on a Prometheus scrape).
pub fn describe() {
    use metrics::{Unit, describe_counter};
    let described = [
        (
            "tollgate_rls_hits_total",
            "Hits of the descriptors each rule decided.",
        ),
        (
            "tollgate_rls_within_limit_total",
            "Hits each rule admitted.",
        ),
        (
            "tollgate_rls_near_limit_total",
            "Hits each rule admitted past its near-limit share of its limit (0.8 unless set).",
        ),
        (
            "tollgate_rls_over_limit_total",
            "Hits over each rule's limit (shadow and quota mode included).",
        ),
        (
            "tollgate_rls_shadow_mode_total",
            "Hits over a shadow rule's limit, let through.",
        ),
    ];
    for (name, help) in described {
        describe_counter!(name, Unit::Count, help);
    }
}

/// Counts one decided descriptor under `stats`, its hits near the limit
/// past `near_ratio` of it.
fn count(stats: &RuleStats, outcome: &Outcome, near_ratio: f64) {
    if let Outcome::Decided {
        rule,
        requests_per_unit,
        cost,
        decision,
        over,
        ..
    } = outcome
    {
        stats.count(Counted {
            hits: u64::from(*cost),
            over: *over,
            shadow: rule.shadow_mode(),
            limit: u64::from(*requests_per_unit),
            remaining: decision.remaining(),
            near_ratio,
        });
    }
}

/// Counts a call's descriptors: under their rule's counters, or, for
/// `detailed_metric` rules, under their own key's, those capped at
/// [`DETAILED_SERIES`]; shared by a server's clones.
#[derive(Clone, Debug)]
pub(crate) struct CallStats {
    named: Arc<Mutex<HashMap<String, RuleStats>>>,
    /// The share of a limit past which admitted hits count as near it.
    pub(crate) near_ratio: f64,
}

impl Default for CallStats {
    fn default() -> Self {
        CallStats {
            named: Arc::default(),
            near_ratio: NEAR_LIMIT_RATIO,
        }
    }
}

impl CallStats {
    /// Counts each decided descriptor of a call under its rule's
    /// counters, or its own key's for a `detailed_metric` rule.
    pub(crate) fn count(
        &self,
        config: &Config,
        domain: &str,
        descriptors: &[Descriptor<'_>],
        outcomes: &[Outcome],
    ) {
        for (descriptor, outcome) in descriptors.iter().zip(outcomes) {
            let Outcome::Decided { rule, .. } = outcome else {
                continue;
            };
            // Looked up again only for a rule whose metrics name values.
            let name = match rule.detailed_metric() {
                true => {
                    let found = config.rule_for(domain, &descriptor.entries);
                    Some(detailed_key(domain, &descriptor.entries, found.as_ref()))
                }
                false if rule.names_values() => config
                    .metric_key(domain, &descriptor.entries)
                    .filter(|name| name != rule.full_key()),
                false => None,
            };
            match name {
                Some(name) => self.detailed(name, rule.stats(), outcome),
                None => count(rule.stats(), outcome, self.near_ratio),
            }
        }
    }

    fn detailed(&self, name: String, rule: &RuleStats, outcome: &Outcome) {
        let mut named = self.named.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(stats) = named.get(&name) {
            count(stats, outcome, self.near_ratio);
            return;
        }
        if named.len() >= DETAILED_SERIES {
            drop(named);
            warn_full();
            count(rule, outcome, self.near_ratio);
            return;
        }
        let stats = RuleStats::named(&name);
        count(&stats, outcome, self.near_ratio);
        named.insert(name, stats);
    }
}

/// A descriptor's own key, as envoyproxy/ratelimit names a detailed
/// metric: the domain, then `key_value` for each entry (`key` alone for
/// an empty value), an entry a `share_threshold` wildcard matched under
/// the wildcard (`files/*`).
fn detailed_key(domain: &str, entries: &[Entry<'_>], found: Option<&Found<'_>>) -> String {
    let mut key = domain.to_owned();
    for (index, entry) in entries.iter().enumerate() {
        let value = found.map_or(entry.value(), |f| f.counted_value(index, entry));
        key.push('.');
        key.push_str(entry.key());
        if !value.is_empty() {
            key.push('_');
            key.push_str(value);
        }
    }
    key
}

fn warn_full() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            cap = DETAILED_SERIES,
            "detailed_metric rules have named as many descriptor values as the metrics keep; \
             further values count under their rule's full key"
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detailed_names_stop_at_the_cap() {
        let calls = CallStats::default();
        let rule = RuleStats::named("d.k");
        for n in 0..DETAILED_SERIES + 5 {
            calls.detailed(format!("d.k_{n}"), &rule, &Outcome::NoRule);
        }
        let named = calls.named.lock().unwrap();
        assert_eq!(named.len(), DETAILED_SERIES);
        assert!(!named.contains_key(&format!("d.k_{DETAILED_SERIES}")));
        assert!(named.contains_key(&format!("d.k_{}", DETAILED_SERIES - 1)));
    }
}
