//! A domain's descriptors as a tree: read from a file's YAML, checked as
//! envoyproxy/ratelimit checks them, each level's children by `key` or
//! `key_value`.

use super::metadata::to_struct;
use super::rule::{Limit, Rule, policy_of};
use super::unit::Unit;
use super::wildcard::Wildcard;
use crate::counters::RuleStats;
use serde::Deserialize;
use serde_yaml_ng::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tollgate_core::Algorithm;

/// A file, as it is written (its keys checked already, `keys.rs`).
#[derive(Deserialize)]
pub(super) struct YamlRoot {
    #[serde(default)]
    pub(super) domain: String,
    #[serde(default)]
    descriptors: Option<Vec<YamlDescriptor>>,
    #[serde(default)]
    algorithm: Option<String>,
}

#[derive(Deserialize)]
struct YamlDescriptor {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    rate_limit: Option<YamlRateLimit>,
    #[serde(default)]
    descriptors: Option<Vec<YamlDescriptor>>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    quota_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    #[serde(default)]
    metadata: Option<Value>,
}

#[derive(Deserialize)]
struct YamlRateLimit {
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default)]
    unit: String,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: String,
    #[serde(default)]
    replaces: Option<Vec<YamlReplaces>>,
    #[serde(default)]
    algorithm: Option<String>,
}

#[derive(Deserialize)]
struct YamlReplaces {
    #[serde(default)]
    name: String,
}

/// One level of a domain: its children by `key` or `key_value`, the
/// wildcard ones in the file's order, and its rule.
#[derive(Debug, Default)]
pub(super) struct Node {
    pub(super) children: HashMap<String, Node>,
    /// The children whose `key_value` has a `*`, in the file's order: the
    /// order they are tried in.
    pub(super) wildcards: Vec<(String, Wildcard)>,
    pub(super) rule: Option<Arc<Rule>>,
    /// With `share_threshold`: the wildcard value (`files/*`) that every
    /// value it matches is counted under.
    pub(super) shared_value: Option<String>,
    /// A wildcard level's value as written (`files/*`).
    pub(super) wildcard_value: Option<String>,
    /// With `value_to_metric`: a value matched by the key's default or a
    /// wildcard is named in the metrics of the rule below.
    pub(super) value_to_metric: bool,
}

impl YamlRoot {
    /// The domain's tree, or what is wrong with the file.
    pub(super) fn into_tree(self) -> Result<Node, String> {
        if self.domain.is_empty() {
            return Err("the file has no `domain` (or an empty one)".to_owned());
        }
        let algorithm = self.algorithm.as_deref().map(algorithm).transpose()?;
        let mut root = Node::default();
        let context = Context {
            algorithm,
            parent: &self.domain,
            names_values: false,
        };
        root.add(self.descriptors.unwrap_or_default(), &context)?;
        Ok(root)
    }
}

/// What a level is loaded with: the domain's algorithm, the full key of
/// the level above, and whether a level above has `value_to_metric`.
struct Context<'a> {
    algorithm: Option<Algorithm>,
    parent: &'a str,
    names_values: bool,
}

impl Node {
    fn add(
        &mut self,
        descriptors: Vec<YamlDescriptor>,
        context: &Context<'_>,
    ) -> Result<(), String> {
        for mut descriptor in descriptors {
            if descriptor.key.is_empty() {
                return Err(format!(
                    "a descriptor under '{}' has an empty `key`",
                    context.parent
                ));
            }
            let name = match descriptor.value.as_str() {
                "" => descriptor.key.clone(),
                value => format!("{}_{value}", descriptor.key),
            };
            let full_key = format!("{}.{name}", context.parent);
            if self.children.contains_key(&name) {
                return Err(format!("duplicate descriptor '{full_key}'"));
            }
            let wildcard = Wildcard::new(&name);
            if descriptor.share_threshold && wildcard.is_none() {
                return Err(format!(
                    "'{full_key}': `share_threshold` needs a wildcard value (one with `*`)"
                ));
            }
            // A rule's metrics may name values when its level or one
            // above has `value_to_metric`: known here, once.
            let names_values = context.names_values || descriptor.value_to_metric;
            let mut node = Node {
                rule: descriptor
                    .rate_limit
                    .take()
                    .map(|limit| limit.into_rule(&full_key, &descriptor, context.algorithm))
                    .transpose()?
                    .map(|mut rule| {
                        rule.names_values = names_values;
                        Arc::new(rule)
                    }),
                shared_value: descriptor.share_threshold.then(|| descriptor.value.clone()),
                value_to_metric: descriptor.value_to_metric,
                wildcard_value: wildcard.is_some().then(|| descriptor.value.clone()),
                ..Node::default()
            };
            let inner = Context {
                algorithm: context.algorithm,
                parent: &full_key,
                names_values,
            };
            node.add(descriptor.descriptors.unwrap_or_default(), &inner)?;
            if let Some(wildcard) = wildcard {
                self.wildcards.push((name.clone(), wildcard));
            }
            self.children.insert(name, node);
        }
        Ok(())
    }
}

impl YamlRateLimit {
    fn into_rule(
        self,
        full_key: &str,
        descriptor: &YamlDescriptor,
        domain_algorithm: Option<Algorithm>,
    ) -> Result<Rule, String> {
        let unit = Unit::parse(&self.unit);
        let limit = match (self.unlimited, unit) {
            (true, Some(_)) => {
                return Err(format!("'{full_key}': an `unlimited` rule has no `unit`"));
            }
            (true, None) => Limit::Unlimited,
            (false, Some(unit)) => Limit::PerUnit {
                requests_per_unit: self.requests_per_unit,
                unit,
            },
            (false, None) => {
                return Err(format!(
                    "'{full_key}': invalid `unit` '{}' (second, minute, hour, day, week, month \
                     or year)",
                    self.unit
                ));
            }
        };
        let replaces: Vec<String> = self
            .replaces
            .unwrap_or_default()
            .into_iter()
            .map(|replaced| replaced.name)
            .collect();
        if replaces.iter().any(String::is_empty) {
            return Err(format!("'{full_key}': a `replaces` entry has no `name`"));
        }
        if !self.name.is_empty() && replaces.contains(&self.name) {
            return Err(format!(
                "'{full_key}': a rule cannot replace itself ('{}')",
                self.name
            ));
        }
        let algorithm = match self.algorithm.as_deref() {
            Some(name) => Some(algorithm(name).map_err(|e| format!("'{full_key}': {e}"))?),
            None => domain_algorithm,
        };
        let policy = policy_of(full_key, &self.name, limit, algorithm)?;
        Ok(Rule {
            stats: RuleStats::named(full_key),
            full_key: full_key.to_owned(),
            name: self.name,
            limit,
            algorithm,
            policy,
            shadow_mode: descriptor.shadow_mode,
            quota_mode: descriptor.quota_mode,
            detailed_metric: descriptor.detailed_metric,
            names_values: false,
            replaces,
            metadata: descriptor
                .metadata
                .as_ref()
                .map(to_struct)
                .transpose()
                .map_err(|e| format!("'{full_key}': {e}"))?,
        })
    }
}

/// The algorithm `name` names (`gcra`, `token-bucket`, `sliding-window`,
/// …), as tollgate names them.
fn algorithm(name: &str) -> Result<Algorithm, String> {
    name.parse()
        .map_err(|_| format!("unknown `algorithm` '{name}' ({})", algorithm_names()))
}

fn algorithm_names() -> String {
    Algorithm::ALL
        .into_iter()
        .map(Algorithm::name)
        .collect::<Vec<_>>()
        .join(", ")
}
