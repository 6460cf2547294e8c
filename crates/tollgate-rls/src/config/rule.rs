//! [`Rule`]: one descriptor's rate limit, as loaded.

use super::unit::Unit;
use crate::counters::RuleStats;
use envoy_types::pb::google::protobuf::Struct;
use std::sync::Arc;
use tollgate_core::{Algorithm, Quota};
use tollgate_store::{NamedLimit, Policy};

/// A descriptor's rate limit: `requests_per_unit` per `unit`, or
/// unlimited, with the switches envoyproxy/ratelimit gives a rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub(super) full_key: String,
    pub(super) name: String,
    pub(super) limit: Limit,
    pub(super) algorithm: Option<Algorithm>,
    pub(super) shadow_mode: bool,
    pub(super) quota_mode: bool,
    pub(super) detailed_metric: bool,
    /// Whether its level or one above has `value_to_metric`.
    pub(super) names_values: bool,
    pub(super) replaces: Vec<String>,
    pub(super) metadata: Option<Struct>,
    /// What a store checks: one limit, `None` when nothing is counted
    /// (unlimited, or 0 requests: every request is over).
    pub(super) policy: Option<Arc<Policy>>,
    /// Its counters (`crate::stats`), registered at load.
    pub(super) stats: RuleStats,
}

/// What a rule allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `requests_per_unit` in each window of `unit`.
    PerUnit {
        /// Requests admitted per window (0: none).
        requests_per_unit: u32,
        /// The window.
        unit: Unit,
    },
    /// No limit: the descriptor is never over it, and nothing is counted.
    Unlimited,
}

impl Rule {
    /// Where the rule sits, as envoyproxy/ratelimit names it in its stats:
    /// the domain, then each level's `key` or `key_value`, joined by dots
    /// (`test-domain.key1_value1.subkey1`).
    pub fn full_key(&self) -> &str {
        &self.full_key
    }

    /// The rule's `name` (empty when it has none): what `replaces` names.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the rule allows.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// The requests per unit (0 when unlimited).
    pub fn requests_per_unit(&self) -> u32 {
        match self.limit {
            Limit::PerUnit {
                requests_per_unit, ..
            } => requests_per_unit,
            Limit::Unlimited => 0,
        }
    }

    /// The algorithm tollgate decides the rule with: the rule's
    /// `algorithm`, or the domain's, or `None` for envoyproxy/ratelimit's
    /// own, a fixed window aligned to the epoch.
    pub fn algorithm(&self) -> Option<Algorithm> {
        self.algorithm
    }

    /// Whether the rule is in shadow: counted, reported, never refusing.
    pub fn shadow_mode(&self) -> bool {
        self.shadow_mode
    }

    /// Whether an over-limit answer is a quota's: the call is answered OK
    /// while another quota-mode descriptor of it has room, the violation
    /// named in the response's dynamic metadata.
    pub fn quota_mode(&self) -> bool {
        self.quota_mode
    }

    /// Whether the rule's statistics name each descriptor value.
    pub fn detailed_metric(&self) -> bool {
        self.detailed_metric
    }

    /// The names of the rules this one replaces when both apply to one
    /// call.
    pub fn replaces(&self) -> &[String] {
        &self.replaces
    }

    /// The descriptor's `metadata`, as the answers' dynamic metadata
    /// carries it (under `metadata`, merged with the other passed
    /// descriptors').
    pub fn metadata(&self) -> Option<&Struct> {
        self.metadata.as_ref()
    }

    /// The policy a store checks for this rule: one limit, named by the
    /// rule's `name` when it is a short token, else by its full key made
    /// one; decided by the rule's algorithm, or a fixed window aligned to
    /// the epoch. `None` when nothing is counted: an unlimited rule, or one
    /// of 0 requests (every request over it).
    pub fn policy(&self) -> Option<&Arc<Policy>> {
        self.policy.as_ref()
    }

    /// Whether the rule's metrics may name a descriptor's values
    /// (`value_to_metric` at its level or one above): set at load, so
    /// that other rules' calls never look for a name.
    pub(crate) fn names_values(&self) -> bool {
        self.names_values
    }

    pub(crate) fn stats(&self) -> &RuleStats {
        &self.stats
    }
}

impl Rule {
    /// The rule a descriptor's own `limit` sets (Envoy's
    /// `RateLimitOverride`), in place of the configuration's: no name, no
    /// switches, a fixed window, counted under `full_key` (the domain and
    /// the descriptor's entries, as envoyproxy/ratelimit keys it).
    pub fn overriding(full_key: String, requests_per_unit: u32, unit: Unit) -> Rule {
        // Counted under the domain's `override`, not under each
        // descriptor's key: a label set the configuration bounds.
        let domain = full_key.split('.').next().unwrap_or_default();
        let stats = RuleStats::named(&format!("{domain}.override"));
        let limit = Limit::PerUnit {
            requests_per_unit,
            unit,
        };
        // A quota of at least 1 over a unit of time is always one.
        let policy = policy_of(&full_key, "", limit, None).unwrap_or(None);
        Rule {
            full_key,
            name: String::new(),
            limit,
            algorithm: None,
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            names_values: false,
            replaces: Vec::new(),
            metadata: None,
            policy,
            stats,
        }
    }
}

/// The policy of a rule at `full_key` named `name`, or `None` when it
/// counts nothing; an error when its quota cannot be (a period no
/// algorithm holds).
pub(super) fn policy_of(
    full_key: &str,
    name: &str,
    limit: Limit,
    algorithm: Option<Algorithm>,
) -> Result<Option<Arc<Policy>>, String> {
    let Limit::PerUnit {
        requests_per_unit,
        unit,
    } = limit
    else {
        return Ok(None);
    };
    if requests_per_unit == 0 {
        return Ok(None);
    }
    let period = std::time::Duration::from_secs(unit.seconds());
    let quota = Quota::new(u64::from(requests_per_unit), period)
        .map_err(|e| format!("'{full_key}': {e}"))?;
    let named = NamedLimit::try_new(limit_name(full_key, name), quota)
        .map_err(|e| format!("'{full_key}': {e}"))?
        .with_algorithm(algorithm.unwrap_or(Algorithm::FixedWindow));
    // One identity per place in the configuration: a rule built again (a
    // reload, a descriptor's own limit on each call) counts on.
    let seed = fingerprint(full_key);
    Ok(Some(Arc::new(Policy::with_seed(seed, vec![named]))))
}

/// A limit name for the rule: its `name` when that is a short token
/// (letters, digits, `-`, `_`, `.`; at most 64), else its full key with
/// every other character made `_`, and, past 64 characters, its first 47
/// and a fingerprint of the whole, so that two long keys stay apart.
fn limit_name(full_key: &str, name: &str) -> String {
    let token = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if !name.is_empty() && name.len() <= 64 && name.chars().all(token) {
        return name.to_owned();
    }
    let made: String = full_key
        .chars()
        .map(|c| if token(c) { c } else { '_' })
        .collect();
    if made.len() <= 64 {
        return made;
    }
    format!("{}.{:016x}", &made[..47], fingerprint(full_key))
}

/// A fingerprint of `text`, the same in every process (FNV-1a).
fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_names_are_tokens_that_keep_rules_apart() {
        assert_eq!(limit_name("d.k_v", "mine"), "mine");
        assert_eq!(limit_name("d.files_files/*", ""), "d.files_files__");
        assert_eq!(limit_name("d.k", "not a token"), "d.k");
        let long_a = format!("d.{}", "a".repeat(80));
        let long_b = format!("d.{}b", "a".repeat(79));
        let (a, b) = (limit_name(&long_a, ""), limit_name(&long_b, ""));
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
