//! A data plane's bucket, as the rules see it: its `bucket_id` as a
//! descriptor (the entries sorted by key), and what the rule that
//! descriptor gets says of it.

use crate::config::{Config, Entry, Limit, Rule};
use crate::decide::key_of;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use std::sync::Arc;
use tollgate_store::{Key, Policy};

/// A bucket's entries, sorted by key (a `bucket_id` is a map: Envoy's
/// order is not its meaning).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct BucketKey(Vec<(String, String)>);

impl BucketKey {
    /// The key of `id`; `None` for an id without entries, which no rule
    /// can match and Envoy never sends (it skips such ids itself).
    pub(crate) fn of(id: &BucketId) -> Option<BucketKey> {
        if id.bucket.is_empty() {
            return None;
        }
        let mut entries: Vec<(String, String)> = id
            .bucket
            .iter()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        entries.sort();
        Some(BucketKey(entries))
    }

    /// The bucket as a descriptor's entries.
    pub(crate) fn entries(&self) -> Vec<Entry<'_>> {
        self.0
            .iter()
            .map(|(key, value)| Entry::new(key, value))
            .collect()
    }

    /// The `bucket_id` of the key, for an answer.
    pub(crate) fn id(&self) -> BucketId {
        BucketId {
            bucket: self.0.iter().cloned().collect(),
        }
    }
}

/// What the rules say of a bucket.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    /// No rule, or an unlimited one: `ALLOW_ALL`.
    Unlimited,
    /// A rule of 0 requests: `DENY_ALL`.
    Closed,
    /// A rule with a limit, counted in the store.
    Limited(Limited),
}

/// A bucket's limit: its rule, and where its usage is counted.
#[derive(Clone, Debug)]
pub(crate) struct Limited {
    /// The rule.
    pub(crate) rule: Arc<Rule>,
    /// Requests per window.
    pub(crate) limit: u64,
    /// The window, in µs: the rule's unit.
    pub(crate) window_us: u64,
    /// The policy the usage is charged under (the rule's, as
    /// `ShouldRateLimit` charges it).
    pub(crate) policy: Arc<Policy>,
    /// The key it is counted under: the same as a `ShouldRateLimit`
    /// descriptor of the same entries, so both count one usage.
    pub(crate) key: Key,
    /// Whether the rule only counts (`shadow_mode`, `quota_mode`): such a
    /// bucket is answered `ALLOW_ALL`, its usage still counted.
    pub(crate) counts_only: bool,
}

impl Limited {
    /// What the limit's ledgers are kept by: buckets counted under one
    /// key (a `share_threshold` wildcard's values) share one.
    pub(crate) fn counted_as(&self) -> (String, Key) {
        (self.rule.full_key().to_owned(), self.key.clone())
    }
}

/// What `config`'s rules say of `bucket` in `domain`.
pub(crate) fn kind(config: &Config, domain: &str, bucket: &BucketKey) -> Kind {
    let entries = bucket.entries();
    let Some(found) = config.rule_for(domain, &entries) else {
        return Kind::Unlimited;
    };
    let Limit::PerUnit {
        requests_per_unit,
        unit,
    } = found.rule.limit()
    else {
        return Kind::Unlimited;
    };
    let Some(policy) = found.rule.policy() else {
        return Kind::Closed;
    };
    Kind::Limited(Limited {
        rule: Arc::clone(found.rule),
        limit: u64::from(requests_per_unit),
        window_us: unit.seconds().saturating_mul(1_000_000),
        policy: Arc::clone(policy),
        key: key_of(domain, &entries, &found),
        counts_only: found.rule.shadow_mode() || found.rule.quota_mode(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pairs: &[(&str, &str)]) -> BucketId {
        BucketId {
            bucket: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    const CONFIG: &str = "
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 60}
    descriptors:
      - key: route
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: tried
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
";

    #[test]
    fn a_bucket_id_is_its_entries_sorted_by_key() {
        let a = BucketKey::of(&id(&[("route", "/a"), ("client", "c1")])).unwrap();
        let b = BucketKey::of(&id(&[("client", "c1"), ("route", "/a")])).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            a.entries(),
            [Entry::new("client", "c1"), Entry::new("route", "/a")]
        );
        assert_eq!(BucketKey::of(&a.id()), Some(a));
        assert_eq!(BucketKey::of(&id(&[])), None);
    }

    #[test]
    fn the_rules_say_what_each_bucket_is() {
        let config = Config::from_yaml("edge.yaml", CONFIG).unwrap();
        let kind_of =
            |pairs: &[(&str, &str)]| kind(&config, "edge", &BucketKey::of(&id(pairs)).unwrap());
        // Sorted, `client` then `route`: the nested rule, 5 a second.
        match kind_of(&[("route", "/a"), ("client", "c1")]) {
            Kind::Limited(limited) => {
                assert_eq!((limited.limit, limited.window_us), (5, 1_000_000));
                assert_eq!(limited.rule.full_key(), "edge.client.route");
                assert!(!limited.counts_only);
            }
            other => panic!("{other:?}"),
        }
        match kind_of(&[("client", "c1")]) {
            Kind::Limited(limited) => {
                assert_eq!((limited.limit, limited.window_us), (60, 60_000_000));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(kind_of(&[("free", "x")]), Kind::Unlimited));
        assert!(matches!(kind_of(&[("nothing", "x")]), Kind::Unlimited));
        assert!(matches!(kind_of(&[("closed", "x")]), Kind::Closed));
        match kind_of(&[("tried", "x")]) {
            Kind::Limited(limited) => assert!(limited.counts_only),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            kind(
                &config,
                "elsewhere",
                &BucketKey::of(&id(&[("client", "c1")])).unwrap()
            ),
            Kind::Unlimited
        ));
    }
}
