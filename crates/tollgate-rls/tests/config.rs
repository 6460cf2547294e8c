//! envoyproxy/ratelimit's own configuration files (its test fixtures,
//! `tests/fixtures/envoy-ratelimit/`), loaded and looked up as that server
//! documents it; and what it refuses to load, refused with the file and
//! the key named.

use envoy_types::pb::google::protobuf::value::Kind;
use std::path::{Path, PathBuf};
use tollgate_core::Algorithm;
use tollgate_rls::config::{Config, Entry, Limit, LoadError, Unit};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/envoy-ratelimit")
        .join(name)
}

fn load(name: &str) -> Config {
    Config::load(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The rule `pairs` get in `domain`: its requests per unit and unit, or
/// `None`.
fn limit(config: &Config, domain: &str, pairs: &[(&str, &str)]) -> Option<(u32, Unit)> {
    let entries: Vec<Entry<'_>> = pairs.iter().map(|(k, v)| Entry::new(k, v)).collect();
    let found = config.rule_for(domain, &entries)?;
    match found.rule.limit() {
        Limit::PerUnit {
            requests_per_unit,
            unit,
        } => Some((requests_per_unit, unit)),
        Limit::Unlimited => Some((u32::MAX, Unit::Second)),
    }
}

#[test]
fn every_fixture_loads() {
    for name in [
        "basic_config.yaml",
        "example.yaml",
        "integration_another.yaml",
        "integration_share_threshold.yaml",
        "shadowmode_config.yaml",
        "wildcard.yaml",
    ] {
        let config = load(name);
        assert_eq!(config.domains().count(), 1, "{name}: one domain per file");
    }
}

#[test]
fn the_most_specific_match_wins_and_only_at_the_last_entry() {
    let config = load("basic_config.yaml");
    let d = "test-domain";
    // A level with no rule of its own: nothing at its depth.
    assert_eq!(limit(&config, d, &[("key1", "value1")]), None);
    // The key's default at the second level, and the exact value's override.
    assert_eq!(
        limit(&config, d, &[("key1", "value1"), ("subkey1", "other")]),
        Some((5, Unit::Second))
    );
    assert_eq!(
        limit(&config, d, &[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some((10, Unit::Second))
    );
    // The top level's default and override; a value with no rule is
    // unlimited (the key's default does not apply to it).
    assert_eq!(
        limit(&config, d, &[("key2", "any")]),
        Some((20, Unit::Minute))
    );
    assert_eq!(
        limit(&config, d, &[("key2", "value2")]),
        Some((30, Unit::Minute))
    );
    assert_eq!(limit(&config, d, &[("key2", "value3")]), None);
    // A rule applies only where the descriptor ends: key5's rule is not
    // the request's when it goes a level deeper.
    assert_eq!(
        limit(&config, d, &[("key5", "value5")]),
        Some((15, Unit::Day))
    );
    assert_eq!(
        limit(&config, d, &[("key5", "value5"), ("subkey5", "subvalue5")]),
        Some((25, Unit::Day))
    );
    assert_eq!(
        limit(&config, d, &[("key5", "value5"), ("subkey5", "other")]),
        None
    );
    // A level without children ends the search: deeper entries find
    // nothing, not key2's rule.
    assert_eq!(
        limit(&config, d, &[("key2", "value2"), ("more", "x")]),
        None
    );
    // Unknown keys, domains.
    assert_eq!(limit(&config, d, &[("nope", "x")]), None);
    assert_eq!(limit(&config, "other-domain", &[("key2", "x")]), None);
    // Named, unlimited, detailed.
    let entries = [Entry::new("key4", "x")];
    let rule = config.rule_for(d, &entries).unwrap().rule;
    assert_eq!(
        (rule.name(), rule.full_key()),
        ("key4_rate_limit", "test-domain.key4")
    );
    let entries = [Entry::new("key6", "x")];
    assert_eq!(
        config.rule_for(d, &entries).unwrap().rule.limit(),
        Limit::Unlimited
    );
    let entries = [Entry::new("key7", "x")];
    assert!(config.rule_for(d, &entries).unwrap().rule.detailed_metric());
}

#[test]
fn wildcards_match_at_the_end_in_the_middle_and_several_times() {
    let config = load("wildcard.yaml");
    let d = "test-domain";
    assert_eq!(
        limit(&config, d, &[("wild", "foo")]),
        Some((20, Unit::Minute))
    );
    assert_eq!(
        limit(&config, d, &[("wild", "foobar")]),
        Some((20, Unit::Minute))
    );
    assert_eq!(limit(&config, d, &[("wild", "bar")]), None);
    assert_eq!(
        limit(&config, d, &[("noWild", "foo")]),
        Some((20, Unit::Minute))
    );
    assert_eq!(limit(&config, d, &[("noWild", "foobar")]), None);
    assert_eq!(
        limit(&config, d, &[("noVal", "anything")]),
        Some((20, Unit::Minute))
    );
    assert_eq!(
        limit(&config, d, &[("midWild", "barxyzb")]),
        Some((20, Unit::Minute))
    );
    assert_eq!(limit(&config, d, &[("midWild", "barxyzc")]), None);
    assert_eq!(
        limit(&config, d, &[("multiWild", "foo1bar2baz")]),
        Some((10, Unit::Minute))
    );
    assert_eq!(limit(&config, d, &[("multiWild", "foo1baz2bar")]), None);
    assert_eq!(
        limit(&config, d, &[("nestedWild", "val1"), ("wild", "goose")]),
        Some((20, Unit::Minute))
    );
    assert_eq!(
        limit(&config, d, &[("nestedWild", "val1"), ("wild", "foose")]),
        None
    );
}

#[test]
fn share_threshold_counts_every_matching_value_under_the_wildcard() {
    let config = load("integration_share_threshold.yaml");
    let d = "share-threshold-test";
    let entries = [Entry::new("files", "files/a.txt")];
    let found = config.rule_for(d, &entries).unwrap();
    assert_eq!(found.counted_value(0, &entries[0]), "files/*");
    // Without it, each value is counted under itself.
    let entries = [Entry::new("files_no_share", "files_no_share/a.txt")];
    let found = config.rule_for(d, &entries).unwrap();
    assert_eq!(found.counted_value(0, &entries[0]), "files_no_share/a.txt");
}

#[test]
fn shadow_quota_replaces_and_metadata_are_read() {
    let config = load("example.yaml");
    let rule = |pairs: &[(&str, &str)]| {
        let entries: Vec<Entry<'_>> = pairs.iter().map(|(k, v)| Entry::new(k, v)).collect();
        config
            .rule_for("rl", &entries)
            .map(|found| found.rule.clone())
    };
    let shady = rule(&[("foo", "x"), ("baz", "shady")]).unwrap();
    assert!(shady.shadow_mode());
    let not_shady = rule(&[("foo", "x"), ("baz", "not-so-shady")]).unwrap();
    assert!(!not_shady.shadow_mode());
    let account = rule(&[("category", "account")]).unwrap();
    assert_eq!(account.replaces(), ["bkthomps", "fake_name"]);
    let service = rule(&[("service", "service_1")]).unwrap();
    assert!(service.quota_mode());
    // The metadata as answers carry it: a protobuf Struct.
    let metadata = service.metadata().unwrap();
    let Some(Kind::StructValue(inner)) = &metadata.fields["service_with_quota"].kind else {
        panic!("{metadata:?}");
    };
    assert_eq!(
        inner.fields["name"].kind,
        Some(Kind::StringValue("service_1".to_owned()))
    );
    // A rule of 0 refuses every request; a default rule's key with a value
    // of its own.
    let banned = rule(&[("foo", "x"), ("bar", "banned")]).unwrap();
    assert_eq!(
        (banned.requests_per_unit(), banned.name()),
        (0, "banned_limit")
    );
    assert_eq!(
        rule(&[("foo", "x"), ("bay", "y")]).unwrap().limit(),
        Limit::Unlimited
    );
    let shadow = load("shadowmode_config.yaml");
    let entries = [Entry::new("key2", "any")];
    assert!(
        shadow
            .rule_for("test-domain", &entries)
            .unwrap()
            .rule
            .shadow_mode()
    );
}

fn refused(text: &str) -> LoadError {
    Config::from_yaml("bad.yaml", text).expect_err("refused")
}

#[test]
fn what_that_server_refuses_is_refused_naming_the_file_and_the_key() {
    let cases: [(&str, &str); 15] = [
        (
            "domain: d\ndescriptors:\n  - key: k\n    metadata: [1, 2]\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
            "'d.k': `metadata` is not a map",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    metadata: {1: one}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
            "'d.k': a `metadata` key is not a string",
        ),
        ("", "empty"),
        ("- key: k\n", "not a mapping"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n",
            "'rate_limt'",
        ),
        ("descriptors:\n  - key: k\n", "domain"),
        ("domain: d\ndescriptors:\n  - value: v\n", "empty `key`"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
            "duplicate descriptor 'd.k_v'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
            "invalid `unit` 'fortnight'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
            "invalid `unit` ''",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
            "`unlimited` rule has no `unit`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n",
            "`replaces` entry has no `name`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, unit: second, requests_per_unit: 1, replaces: [{name: a}]}\n",
            "cannot replace itself",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
            "`share_threshold` needs a wildcard",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fastest}\n",
            "unknown `algorithm` 'fastest'",
        ),
    ];
    for (text, expected) in cases {
        let error = refused(text);
        assert_eq!(error.file(), "bad.yaml");
        assert!(
            error.message().contains(expected),
            "{text:?}: {error} (expected {expected:?})"
        );
    }
}

#[test]
fn a_domain_in_two_files_is_refused() {
    let dir = std::env::temp_dir().join(format!("tollgate-rls-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture("basic_config.yaml"), dir.join("a.yaml")).unwrap();
    std::fs::copy(fixture("wildcard.yaml"), dir.join("b.yaml")).unwrap();
    let error = Config::load(&dir).unwrap_err();
    assert!(error.file().ends_with("b.yaml"), "{error}");
    assert!(error.message().contains("domain 'test-domain'"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_directory_is_read_once_through_a_kubernetes_style_data_link() {
    let dir = std::env::temp_dir().join(format!("tollgate-rls-k8s-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let version = dir.join("..2026_12_07_00_00_00.000000001");
    std::fs::create_dir_all(&version).unwrap();
    std::fs::copy(fixture("example.yaml"), version.join("example.yaml")).unwrap();
    std::fs::copy(
        fixture("integration_another.yaml"),
        version.join("another.yaml"),
    )
    .unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&version, dir.join("..data")).unwrap();
        for name in ["example.yaml", "another.yaml"] {
            std::os::unix::fs::symlink(dir.join("..data").join(name), dir.join(name)).unwrap();
        }
        let config = Config::load(&dir).unwrap();
        let mut domains: Vec<&str> = config.domains().collect();
        domains.sort();
        assert_eq!(domains, ["another", "rl"]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_algorithm_is_chosen_per_rule_or_per_domain() {
    let config = Config::from_yaml(
        "algorithms.yaml",
        "domain: d\nalgorithm: gcra\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding-window}\n",
    )
    .unwrap();
    let of = |key| {
        let entries = [Entry::new(key, "x")];
        config.rule_for("d", &entries).unwrap().rule.algorithm()
    };
    assert_eq!(of("a"), Some(Algorithm::Gcra));
    assert_eq!(of("b"), Some(Algorithm::SlidingWindow));
    // Without one: envoyproxy/ratelimit's fixed window.
    let plain = load("basic_config.yaml");
    let entries = [Entry::new("key2", "x")];
    assert_eq!(
        plain
            .rule_for("test-domain", &entries)
            .unwrap()
            .rule
            .algorithm(),
        None
    );
}

#[test]
fn value_to_metric_names_the_values_its_levels_matched_by_default_or_wildcard() {
    let config = Config::from_yaml(
        "metrics.yaml",
        r#"
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: "/api/*"
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: files
    value: "a/*"
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
"#,
    )
    .unwrap();
    let key = |pairs: &[(&str, &str)]| {
        let entries: Vec<Entry<'_>> = pairs.iter().map(|(k, v)| Entry::new(k, v)).collect();
        config.metric_key("d", &entries)
    };
    // `route` matched by default with value_to_metric: its value named;
    // `user` matched by default without: not.
    assert_eq!(
        key(&[("route", "/x"), ("user", "u1")]).as_deref(),
        Some("d.route_/x.user")
    );
    // A wildcard with value_to_metric: the value; with share_threshold
    // too: the wildcard, which every matching value shares.
    assert_eq!(
        key(&[("path", "/api/v1")]).as_deref(),
        Some("d.path_/api/v1")
    );
    assert_eq!(key(&[("files", "a/b")]).as_deref(), Some("d.files_a/*"));
    // No flag on the path: no name of its own (the rule's full key is
    // what its metrics say).
    assert_eq!(key(&[("plain", "v")]), None);
    let plain = config.rule_for("d", &[Entry::new("plain", "v")]).unwrap();
    assert_eq!(plain.rule.full_key(), "d.plain");
    // No rule: no name.
    assert_eq!(key(&[("route", "/x")]), None);
    // A domain without value_to_metric anywhere.
    let basic = load("basic_config.yaml");
    assert_eq!(
        basic.metric_key("test-domain", &[Entry::new("key2", "value2")]),
        None
    );
}
