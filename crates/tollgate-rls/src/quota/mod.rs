//! Envoy's rate limit quota service (RLQS): quota assignments for data
//! planes that enforce them on their own and report their usage on a
//! stream.
//!
//! Each data plane (an Envoy with the `rate_limit_quota` filter) keeps a
//! token bucket per bucket of requests and asks nothing per request; the
//! service tells it what bucket to enforce, and changes that as the
//! reports come in. What a data plane does with an assignment decides
//! what the service can promise, so this module is built around it:
//! [`ledger`] counts, for each bucket, what its data planes can have
//! admitted in the current window under the assignments they were given,
//! and gives an assignment only while that stays within the bucket's
//! bound, N + K a window (N the rule's limit, K the data planes).
//!
//! Work in progress (issue 62): the ledger is here and tested against a
//! model of Envoy's token bucket; the stream service is not yet.

pub(crate) mod action;
pub(crate) mod bucket;
pub(crate) mod ledger;
pub(crate) mod limits;
pub mod metrics;
mod service;
pub(crate) mod shares;

pub use service::{MAX_BUCKETS_PER_STREAM, QuotaServer};
