//! One call's descriptors decided against a store: each descriptor's
//! rule found, the rules another replaces set aside, each remaining rule
//! checked under its descriptor's key, and every charge given back when
//! an enforced rule refuses: a call is charged all or nothing, as a
//! tollgate policy is.

use crate::config::{Config, Entry, Found, Limit, Rule, Unit};
use std::sync::Arc;
use std::time::Instant;
use tollgate_core::Decision;
use tollgate_store::{Key, Policy, PolicyDecision, PolicyRefund, Store};

/// One descriptor of a call: its entries and how many hits it adds.
#[derive(Clone, Debug)]
pub struct Descriptor<'a> {
    /// The entries, in order.
    pub entries: Vec<Entry<'a>>,
    /// The hits it adds (the descriptor's `hits_addend`, else the call's;
    /// 0 reads as 1, as Envoy means it).
    pub hits: u32,
    /// The descriptor's own limit (Envoy's `RateLimitOverride`): used in
    /// place of the configuration's rule.
    pub limit: Option<(u32, Unit)>,
    /// Envoy's `is_negative_hits`: the hits are given back to the budget
    /// (a refund of that many units, as if charged now) rather than
    /// charged; never refused, and not undone when the call is refused.
    pub negative: bool,
}

/// What became of one descriptor.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// No rule applies: not limited.
    NoRule,
    /// The rule is unlimited, or was replaced by another of the call's.
    Unlimited,
    /// Decided under `rule`, of `requests_per_unit` per `unit`.
    Decided {
        /// The rule.
        rule: Arc<Rule>,
        /// The rule's requests per unit.
        requests_per_unit: u32,
        /// The rule's unit.
        unit: Unit,
        /// The hits the descriptor added.
        cost: u32,
        /// The store's decision (for a rule of 0 requests, a refusal made
        /// here: nothing is counted).
        decision: Decision,
        /// Whether the rule refused the call (shadow and quota mode
        /// included: what the rule itself says).
        over: bool,
        /// Whether its charge was given back because another rule of the
        /// call refused it.
        given_back: bool,
    },
}

impl Outcome {
    /// Whether this descriptor is over its limit and says so: over, and
    /// not in shadow mode (whose status is `OK`).
    pub fn over(&self) -> bool {
        match self {
            Outcome::Decided { rule, over, .. } => *over && !rule.shadow_mode(),
            Outcome::NoRule | Outcome::Unlimited => false,
        }
    }

    /// Whether the descriptor's rule is in quota mode.
    fn quota(&self) -> bool {
        matches!(self, Outcome::Decided { rule, .. } if rule.quota_mode())
    }
}

/// Whether a call whose descriptors ended as `outcomes` is refused, as
/// envoyproxy/ratelimit judges it: a rule over its limit refuses it,
/// unless in quota mode, where the call is refused only when every
/// quota-mode descriptor is over (several quotas: the call passes while
/// one has room).
pub fn refused(outcomes: &[Outcome]) -> bool {
    let enforced = outcomes.iter().any(|o| o.over() && !o.quota());
    let quotas = outcomes.iter().filter(|o| o.quota()).count();
    let quotas_over = outcomes.iter().filter(|o| o.quota() && o.over()).count();
    enforced || (quotas > 0 && quotas == quotas_over)
}

/// What went wrong deciding a call: the store failed on a check of
/// `policy`.
#[derive(Debug)]
pub struct StoreFailed {
    /// The policy of the check that failed.
    pub policy: Arc<Policy>,
    /// The store's error.
    pub error: String,
}

/// Decides `descriptors` of `domain` against `store`, all or nothing.
///
/// # Errors
///
/// The store's failure on a check (the charges of the checks before it
/// are given back).
pub async fn decide<St: Store>(
    config: &Config,
    store: &St,
    domain: &str,
    descriptors: &[Descriptor<'_>],
) -> Result<Vec<Outcome>, StoreFailed> {
    let asked = Instant::now();
    let overrides: Vec<Option<Arc<Rule>>> = descriptors
        .iter()
        .map(|d| {
            d.limit.map(|(requests_per_unit, unit)| {
                Arc::new(Rule::overriding(
                    full_key(domain, d),
                    requests_per_unit,
                    unit,
                ))
            })
        })
        .collect();
    let found: Vec<Option<Found<'_>>> = descriptors
        .iter()
        .zip(&overrides)
        .map(|(d, overriding)| match overriding {
            Some(rule) => Some(Found {
                rule,
                shared: Vec::new(),
            }),
            None => config.rule_for(domain, &d.entries),
        })
        .collect();
    let replaced: Vec<&str> = found
        .iter()
        .flatten()
        .flat_map(|f| f.rule.replaces().iter().map(String::as_str))
        .collect();
    let mut outcomes = Vec::with_capacity(descriptors.len());
    let mut charged: Vec<Charged> = Vec::new();
    for (index, (descriptor, found)) in descriptors.iter().zip(&found).enumerate() {
        let Some(found) = found else {
            outcomes.push(Outcome::NoRule);
            continue;
        };
        let rule = found.rule;
        let replaced = !rule.name().is_empty() && replaced.contains(&rule.name());
        let (requests_per_unit, unit) = match rule.limit() {
            Limit::PerUnit {
                requests_per_unit,
                unit,
            } if !replaced => (requests_per_unit, unit),
            Limit::PerUnit { .. } | Limit::Unlimited => {
                outcomes.push(Outcome::Unlimited);
                continue;
            }
        };
        let rule_arc = Arc::clone(rule);
        let cost = descriptor.hits.max(1);
        let Some(policy) = rule.policy() else {
            // 0 requests per unit: every request is over, nothing counted.
            outcomes.push(Outcome::Decided {
                rule: rule_arc,
                requests_per_unit,
                unit,
                cost,
                decision: Decision::default(),
                over: true,
                given_back: false,
            });
            continue;
        };
        let key = key_of(domain, &descriptor.entries, found);
        let answer = if descriptor.negative {
            let refund = PolicyRefund::new(cost, std::time::Duration::ZERO);
            store.refund(policy, &key, refund).landed().await;
            store.peek(policy, &key).resolve().await
        } else {
            store.check(policy, &key, cost).resolve().await
        };
        let verdict = match answer {
            Ok(verdict) => {
                // An answer after failures ends an outage: logged so.
                tollgate_store::report_answer(policy);
                verdict
            }
            Err(error) => {
                give_back(store, &charged, descriptors, asked);
                return Err(StoreFailed {
                    policy: policy.clone(),
                    error: error.to_string(),
                });
            }
        };
        let decision = verdict.merged();
        if decision.allowed() && !descriptor.negative {
            charged.push(Charged {
                index,
                policy: policy.clone(),
                key,
                verdict,
            });
        }
        outcomes.push(Outcome::Decided {
            rule: rule_arc,
            requests_per_unit,
            unit,
            cost,
            decision,
            over: !decision.allowed() && !descriptor.negative,
            given_back: false,
        });
    }
    if refused(&outcomes) {
        give_back(store, &charged, descriptors, asked);
        for charge in &charged {
            if let Some(Outcome::Decided { given_back, .. }) = outcomes.get_mut(charge.index) {
                *given_back = true;
            }
        }
    }
    Ok(outcomes)
}

/// A descriptor's place, as envoyproxy/ratelimit names an overriding
/// rule: the domain, then each entry's `key_value`, joined by dots.
fn full_key(domain: &str, descriptor: &Descriptor<'_>) -> String {
    let mut key = domain.to_owned();
    for entry in &descriptor.entries {
        key.push('.');
        key.push_str(entry.key());
        key.push('_');
        key.push_str(entry.value());
    }
    key
}

/// The key a descriptor is counted under: the domain, then each entry's
/// key and the value it is counted under (a `share_threshold` wildcard's,
/// or its own), as envoyproxy/ratelimit builds its cache key (the window
/// is the algorithm's).
pub(crate) fn key_of(domain: &str, entries: &[Entry<'_>], found: &Found<'_>) -> Key {
    let mut parts = Vec::with_capacity(1 + 2 * entries.len());
    parts.push(Key::from(domain));
    for (index, entry) in entries.iter().enumerate() {
        parts.push(Key::from(entry.key()));
        parts.push(Key::from(found.counted_value(index, entry)));
    }
    Key::composite(&parts)
}

/// An admission of the call, kept until the call is judged.
struct Charged {
    index: usize,
    policy: Arc<Policy>,
    key: Key,
    verdict: PolicyDecision,
}

/// Gives back every charge in `charged` (a refund the store logs if it
/// fails, and lands in its own time), each as the store decided it, so
/// that a store that said when it charged gives it back exactly.
fn give_back<St: Store>(
    store: &St,
    charged: &[Charged],
    descriptors: &[Descriptor<'_>],
    asked: Instant,
) {
    for charge in charged {
        let cost = descriptors[charge.index].hits.max(1);
        let refund = PolicyRefund::of(&charge.verdict, cost, asked.elapsed());
        drop(store.refund(&charge.policy, &charge.key, refund));
    }
}
