//! One rule's five counters (their meaning: [`crate::stats`]), a leaf
//! the configuration registers at load and the service counts into.

use metrics::{Counter, counter};
use std::fmt;

/// The share of a limit past which admitted hits are "near" it, by
/// default: envoyproxy/ratelimit's default `NEAR_LIMIT_RATIO`.
pub(crate) const NEAR_LIMIT_RATIO: f64 = 0.8;

/// What one decided descriptor adds to its rule's counters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Counted {
    /// Its hits.
    pub(crate) hits: u64,
    /// Whether it was over the limit.
    pub(crate) over: bool,
    /// Whether its rule is in shadow mode.
    pub(crate) shadow: bool,
    /// The rule's requests per unit.
    pub(crate) limit: u64,
    /// What the limit had left after it.
    pub(crate) remaining: u64,
    /// The share of the limit past which admitted hits are near it.
    pub(crate) near_ratio: f64,
}

/// One rule's five counters, registered once (at load) so that a call
/// only adds to them.
#[derive(Clone)]
pub(crate) struct RuleStats {
    hits: Counter,
    within_limit: Counter,
    near_limit: Counter,
    over_limit: Counter,
    shadow_mode: Counter,
}

impl fmt::Debug for RuleStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuleStats").finish_non_exhaustive()
    }
}

impl RuleStats {
    /// The counters labelled `rule` = `name`, from the recorder installed
    /// now (none: they record nothing).
    pub(crate) fn named(name: &str) -> RuleStats {
        let label = || [("rule", name.to_owned())];
        RuleStats {
            hits: counter!("tollgate_rls_hits_total", &label()),
            within_limit: counter!("tollgate_rls_within_limit_total", &label()),
            near_limit: counter!("tollgate_rls_near_limit_total", &label()),
            over_limit: counter!("tollgate_rls_over_limit_total", &label()),
            shadow_mode: counter!("tollgate_rls_shadow_mode_total", &label()),
        }
    }

    /// Counts one decided descriptor.
    pub(crate) fn count(&self, counted: Counted) {
        let Counted {
            hits,
            over,
            shadow,
            limit,
            remaining,
            near_ratio,
        } = counted;
        self.hits.increment(hits);
        if over {
            self.over_limit.increment(hits);
            if shadow {
                self.shadow_mode.increment(hits);
            }
            return;
        }
        self.within_limit.increment(hits);
        let threshold = (limit as f64 * near_ratio).floor() as u64;
        let used = limit.saturating_sub(remaining);
        let near = used.saturating_sub(threshold).min(hits);
        if near > 0 {
            self.near_limit.increment(near);
        }
    }
}
