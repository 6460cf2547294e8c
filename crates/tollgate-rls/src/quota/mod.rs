//! Envoy's rate limit quota service (RLQS): quota assignments for data
//! planes that enforce them on their own and report their usage on a
//! stream.
//!
//! Each data plane (an Envoy with the `rate_limit_quota` filter) keeps a
//! token bucket per bucket of requests and asks nothing per request; the
//! service tells it what to enforce, and changes that as the reports come
//! in. [`QuotaServer`] serves it from the same rules and store as
//! [`RateLimitServer`](crate::RateLimitServer).
//!
//! What a data plane does with an assignment decides what the service can
//! promise, so the service is built around it. Envoy reports how many
//! requests it admitted, not when, every 5 s; the bound cannot rest on the
//! reports. It rests on the assignments: for each limit, a ledger counts
//! what its data planes can have admitted in the current window under the
//! buckets they were given (the tokens a bucket held when the window
//! began, the refill since, and each new bucket in full, as Envoy starts
//! one that replaces a different one), and a bucket is given only while
//! that stays within N + K a window (N the rule's limit, K the data
//! planes). Within that budget the buckets follow each data plane's
//! demand, max-min fair.
//!
//! Several servers over one shared store serve one limit: each holds a
//! part of N for each window, claimed in the store ahead of any grant
//! that may be in force in it (`claims`), and its ledger bounds its own
//! data planes by that part and one each, so that together they admit at
//! most N + K. A keeper task claims and gives back as demand moves
//! (`keeper`). The guide's page, `docs/guide/rlqs.md`, says what is
//! promised and tested.

mod action;
mod bucket;
mod claims;
mod keeper;
mod ledger;
mod limits;
pub mod metrics;
mod service;
mod shares;

pub use service::{MAX_BUCKETS_PER_STREAM, QuotaServer};
