//! Which rule a request's descriptor gets, found as envoyproxy/ratelimit
//! finds it.

use super::Config;
use super::rule::Rule;
use super::tree::Node;
use std::sync::Arc;

/// One entry of a request's descriptor: a key and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    key: &'a str,
    value: &'a str,
}

impl<'a> Entry<'a> {
    /// The entry `key` = `value`.
    pub fn new(key: &'a str, value: &'a str) -> Self {
        Entry { key, value }
    }

    /// The key.
    pub fn key(&self) -> &'a str {
        self.key
    }

    /// The value.
    pub fn value(&self) -> &'a str {
        self.value
    }
}

/// The rule a descriptor gets, and the values it is counted under.
#[derive(Clone, Debug)]
pub struct Found<'c> {
    /// The rule.
    pub rule: &'c Arc<Rule>,
    /// The entries matched through a wildcard with `share_threshold`, by
    /// their index in the descriptor, each with the wildcard value
    /// (`files/*`) that every value it matches is counted under: they
    /// share one count.
    pub shared: Vec<(usize, &'c str)>,
}

impl Found<'_> {
    /// The value entry `index` is counted under: its own, or the wildcard
    /// its `share_threshold` shares.
    pub fn counted_value<'v>(&'v self, index: usize, entry: &Entry<'v>) -> &'v str {
        self.shared
            .iter()
            .find(|(at, _)| *at == index)
            .map_or(entry.value, |(_, shared)| shared)
    }
}

/// How a level of the configuration matched an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Matched {
    /// By its `key_value`.
    Value,
    /// By a wildcard value.
    Wildcard,
    /// By the key alone (its default).
    Default,
}

impl Config {
    /// The rule `entries` get in `domain`, or `None` (no rule: the
    /// descriptor is not limited). Each level is searched for the entry's
    /// `key_value`, then for a wildcard value that matches it (in the
    /// file's order), then for the `key` alone (the key's default); a rule
    /// counts only where the descriptor ends: one found at an entry with
    /// entries after it does not apply, and a level with no children ends
    /// the search.
    pub fn rule_for<'c>(&'c self, domain: &str, entries: &[Entry<'_>]) -> Option<Found<'c>> {
        let mut shared = Vec::new();
        let rule = self.walk(domain, entries, |index, node, matched| {
            if let (Matched::Wildcard, Some(value)) = (matched, &node.shared_value) {
                shared.push((index, value.as_str()));
            }
        })?;
        Some(Found { rule, shared })
    }

    /// The name `entries`' rule counts its metrics under when a level of
    /// its path has `value_to_metric` (`None` otherwise, or with no
    /// rule): its full key with the value of each entry that such a
    /// level matched by default or by a wildcard (a `share_threshold`
    /// wildcard's entries under the wildcard), as envoyproxy/ratelimit
    /// names its stats.
    pub fn metric_key(&self, domain: &str, entries: &[Entry<'_>]) -> Option<String> {
        let mut key = domain.to_owned();
        let rule = self.walk(domain, entries, |index, node, matched| {
            let entry = &entries[index];
            let value = match (matched, &node.shared_value, node.value_to_metric) {
                (Matched::Wildcard, Some(shared), _) => shared.as_str(),
                (Matched::Value, _, _) | (Matched::Wildcard | Matched::Default, _, true) => {
                    entry.value
                }
                (Matched::Wildcard, None, false) => {
                    node.wildcard_value.as_deref().unwrap_or(entry.value)
                }
                (Matched::Default, _, false) => "",
            };
            key.push('.');
            key.push_str(entry.key);
            if !value.is_empty() {
                key.push('_');
                key.push_str(value);
            }
        })?;
        if !rule.names_values() {
            return None;
        }
        Some(key)
    }

    /// Walks `entries` down `domain`'s levels as [`rule_for`](Self::rule_for)
    /// says, telling `visit` each level matched; the rule where the
    /// descriptor ends, if any.
    fn walk<'c>(
        &'c self,
        domain: &str,
        entries: &[Entry<'_>],
        mut visit: impl FnMut(usize, &'c Node, Matched),
    ) -> Option<&'c Arc<Rule>> {
        let mut level = self.domains.get(domain)?;
        let mut found = None;
        let mut name = String::new();
        for (index, entry) in entries.iter().enumerate() {
            name.clear();
            name.push_str(entry.key);
            name.push('_');
            name.push_str(entry.value);
            let next = level
                .children
                .get(&name)
                .map(|node| (node, Matched::Value))
                .or_else(|| wildcard_child(level, &name).map(|node| (node, Matched::Wildcard)))
                .or_else(|| {
                    level
                        .children
                        .get(entry.key)
                        .map(|node| (node, Matched::Default))
                });
            let Some((node, matched)) = next else {
                break;
            };
            visit(index, node, matched);
            if index + 1 == entries.len() {
                found = node.rule.as_ref();
            }
            if node.children.is_empty() {
                break;
            }
            level = node;
        }
        found
    }
}

/// The first of `level`'s wildcard children, in the file's order, whose
/// pattern matches `name`.
fn wildcard_child<'n>(level: &'n Node, name: &str) -> Option<&'n Node> {
    level
        .wildcards
        .iter()
        .find(|(_, pattern)| pattern.matches(name))
        .and_then(|(key, _)| level.children.get(key))
}
