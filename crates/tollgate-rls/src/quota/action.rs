//! What the service tells a data plane to enforce for a bucket, and the
//! protobuf that says it.

use super::bucket::BucketKey;
use super::ledger::Grant;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    self, QuotaAssignmentAction,
};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt32Value};
use std::time::Duration;

/// An assignment: a blanket rule, or a token bucket that refills over the
/// rule's window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Assignment {
    /// `ALLOW_ALL`.
    AllowAll,
    /// `DENY_ALL`.
    DenyAll,
    /// A token bucket of the grant, `fill_interval` the window.
    TokenBucket {
        /// Its size and refill.
        grant: Grant,
        /// The window, in whole seconds (1 at least: Envoy does not limit
        /// under a second).
        window_seconds: u64,
    },
}

impl Assignment {
    /// The assignment of `grant` over a window of `window_us` µs: a token
    /// bucket, or `DENY_ALL` for a grant of nothing.
    pub(crate) fn of(grant: Grant, window_us: u64) -> Assignment {
        if grant.denies() {
            return Assignment::DenyAll;
        }
        Assignment::TokenBucket {
            grant,
            window_seconds: (window_us / 1_000_000).max(1),
        }
    }

    /// The strategy Envoy reads.
    fn strategy(self) -> Strategy {
        match self {
            Assignment::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
            Assignment::DenyAll => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
            Assignment::TokenBucket {
                grant,
                window_seconds,
            } => Strategy::TokenBucket(TokenBucket {
                max_tokens: saturate(grant.burst),
                tokens_per_fill: Some(UInt32Value {
                    value: saturate(grant.per_window),
                }),
                fill_interval: Some(ProtoDuration {
                    seconds: i64::try_from(window_seconds).unwrap_or(i64::MAX),
                    nanos: 0,
                }),
            }),
        }
    }

    /// The bucket action that assigns it to `bucket` for `ttl` (whole
    /// seconds: Envoy drops the rest, and lapses one under a second at
    /// once, so it is rounded up).
    pub(crate) fn action(self, bucket: &BucketKey, ttl: Duration) -> BucketAction {
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        BucketAction {
            bucket_id: Some(bucket.id()),
            bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
                QuotaAssignmentAction {
                    assignment_time_to_live: Some(ProtoDuration {
                        seconds: i64::try_from(seconds.max(1)).unwrap_or(i64::MAX),
                        nanos: 0,
                    }),
                    rate_limit_strategy: Some(RateLimitStrategy {
                        strategy: Some(self.strategy()),
                    }),
                },
            )),
        }
    }
}

/// A count as a `uint32` field: at most `u32::MAX`.
fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
