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
//!
//! # Answers
//!
//! [`RateLimitServer`] answers `ShouldRateLimit`: the overall code, each
//! descriptor's status (its limit with the rule's `name`, what remains,
//! the time until the limit is whole again), and the fields Envoy adds to
//! the client's response ([`ResponseHeaders`]: draft-11's
//! `RateLimit-Policy` and `RateLimit` by default, the `X-RateLimit-*`
//! trio as an option, `Retry-After` on a refused call).
//!
//! # Dynamic metadata
//!
//! Envoy puts an answer's `dynamic_metadata` under its `rate_limit`
//! filter's namespace (`envoy.filters.http.ratelimit`), for the filters
//! and access logs after it. Its shape is envoyproxy/ratelimit's (with
//! `RESPONSE_DYNAMIC_METADATA`): `domain`; `descriptors`, each with its
//! `entries` as `"key=value"` strings, its `limit` override and its
//! `hitsAddend` when it has them; the call's `hitsAddend` when not 0; and
//! `metadata`, the configured `metadata` of every descriptor that passed,
//! merged (the first value of a key wins, maps under one key merge).
//! tollgate adds `quotaModeViolations`: the indexes (from 0) of the
//! quota-mode descriptors over their limit in a call that passed, which
//! is how a quota's violation reaches the filters after the rate limit
//! one while the call itself is answered `OK`. A call with such a
//! violation always carries the metadata; every call does with
//! [`RateLimitServer::dynamic_metadata`].
// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature
// then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]

mod answer;
pub mod config;
mod counters;
pub mod decide;
pub mod json;
mod metadata;
pub mod quota;
pub mod reload;
mod service;
pub mod stats;

pub use answer::ResponseHeaders;
pub use quota::QuotaServer;
pub use service::{OnStoreError, RateLimitServer};
