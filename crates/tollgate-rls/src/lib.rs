//! A rate-limit service for proxies: Envoy's rate limit service (RLS v3),
//! reading envoyproxy/ratelimit's configuration unchanged, over any
//! tollgate store.
//!
//! Envoy, Istio and the gateways built on them ask a global rate-limit
//! service, on every request, whether a list of *descriptors* (each a list
//! of key/value entries, such as `[("remote_address", "10.0.0.1"),
//! ("path", "/login")]`) is over its limit. envoyproxy/ratelimit is the
//! reference server; its configuration is a YAML file per *domain* of
//! nested descriptors, each possibly with a rate limit.
//!
//! This crate reads those files as that server does ([`config`]): the same
//! keys, the same refusals (an unknown key, a duplicate descriptor, a bad
//! unit, …, each naming the file), the same lookup of a request's
//! descriptor ([`Config::rule_for`](config::Config::rule_for): the exact
//! value first, then wildcards in the file's order, then the key's
//! default; a rule applies only at the depth of the descriptor's last
//! entry).
//!
//! ```
//! use tollgate_rls::config::{Config, Entry};
//!
//! let config = Config::from_yaml(
//!     "inline.yaml",
//!     r#"
//! domain: edge
//! descriptors:
//!   - key: remote_address
//!     rate_limit:
//!       unit: minute
//!       requests_per_unit: 60
//! "#,
//! )
//! .unwrap();
//! let entries = [Entry::new("remote_address", "10.0.0.1")];
//! let found = config.rule_for("edge", &entries).unwrap();
//! assert_eq!(found.rule.requests_per_unit(), 60);
//! assert_eq!(found.rule.full_key(), "edge.remote_address");
//! ```
// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature
// then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]

mod answer;
pub mod config;
pub mod decide;
pub mod reload;
mod service;

pub use service::{OnStoreError, RateLimitServer};
