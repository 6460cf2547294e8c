//! [`Rule`]: one descriptor's rate limit, as loaded.

use super::unit::Unit;
use serde_yaml_ng::Value;
use tollgate_core::Algorithm;

/// A descriptor's rate limit: `requests_per_unit` per `unit`, or
/// unlimited, with the switches envoyproxy/ratelimit gives a rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub(super) full_key: String,
    pub(super) name: String,
    pub(super) limit: Limit,
    pub(super) algorithm: Option<Algorithm>,
    pub(super) shadow_mode: bool,
    pub(super) quota_mode: bool,
    pub(super) detailed_metric: bool,
    pub(super) replaces: Vec<String>,
    pub(super) metadata: Option<Value>,
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

    /// Whether an over-limit answer is a quota's: the call answered OK
    /// with the violation in the response's metadata.
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

    /// The descriptor's `metadata`, returned in answers as written.
    pub fn metadata(&self) -> Option<&Value> {
        self.metadata.as_ref()
    }
}
