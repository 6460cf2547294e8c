//! A call's outcomes as Envoy reads them: the overall code, and each
//! descriptor's status with its limit, what remains and when it resets.

use crate::config::Unit;
use crate::decide::{Outcome, refused};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tollgate_store::fields::{policy_item, retry_after_seconds, state_item};

/// The response to a call whose descriptors ended as `outcomes`, in the
/// call's order: `OVER_LIMIT` when the call is refused ([`refused`]),
/// else `OK`.
pub(crate) fn response(outcomes: &[Outcome]) -> RateLimitResponse {
    let over = refused(outcomes);
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses: outcomes.iter().map(status).collect(),
        response_headers_to_add: fields(outcomes),
        ..RateLimitResponse::default()
    }
}

/// The draft-11 fields Envoy adds to the client's response: a
/// `RateLimit-Policy` and a `RateLimit` item for each decided descriptor
/// (shadow rules left out, as tollgate's layers leave them out), and
/// `Retry-After` when the call is refused: the longest wait of the rules
/// over their limit, rounded up, never 0 (none when a rule can never pass:
/// 0 requests per unit, or hits above the limit).
fn fields(outcomes: &[Outcome]) -> Vec<HeaderValue> {
    let call_refused = refused(outcomes);
    let mut policy = Vec::new();
    let mut state = Vec::new();
    let mut retry_after: Option<u64> = None;
    let mut never = false;
    for outcome in outcomes {
        let Outcome::Decided {
            rule,
            decision,
            given_back,
            cost,
            ..
        } = outcome
        else {
            continue;
        };
        if call_refused && outcome.over() {
            match rule.policy().and_then(|_| retry_after_seconds(decision)) {
                Some(seconds) => retry_after = retry_after.max(Some(seconds)),
                None => never = true,
            }
        }
        let (Some(rule_policy), false) = (rule.policy(), rule.shadow_mode()) else {
            continue;
        };
        for limit in rule_policy.limits() {
            policy.push(policy_item(limit));
            let remaining = match given_back {
                true => decision
                    .remaining()
                    .saturating_add(u64::from(*cost))
                    .min(decision.limit()),
                false => decision.remaining(),
            };
            state.push(state_item(
                limit.name(),
                remaining,
                decision.replenish_after(),
            ));
        }
    }
    let mut fields = Vec::new();
    if !policy.is_empty() {
        fields.push(header("RateLimit-Policy", policy.join(", ")));
        fields.push(header("RateLimit", state.join(", ")));
    }
    if let (Some(seconds), false) = (retry_after, never) {
        fields.push(header("Retry-After", seconds.to_string()));
    }
    fields
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    }
}

/// The response to a call whose store failed, as `closed` says: every
/// descriptor `OK` (open: the store's outage is not the traffic's), or
/// the call `OVER_LIMIT` (closed: nothing passes uncounted).
pub(crate) fn failed(descriptors: usize, closed: bool) -> RateLimitResponse {
    let code = if closed { Code::OverLimit } else { Code::Ok } as i32;
    RateLimitResponse {
        overall_code: code,
        statuses: (0..descriptors)
            .map(|_| DescriptorStatus {
                code,
                ..DescriptorStatus::default()
            })
            .collect(),
        ..RateLimitResponse::default()
    }
}

/// One descriptor's status. No rule: `OK` and nothing else, as
/// envoyproxy/ratelimit answers. Unlimited (or replaced): `OK` with
/// `u32::MAX` remaining. Decided: its code (`OVER_LIMIT` when over, quota
/// mode too; `OK` in shadow mode), its limit with the rule's `name`, what remains (with the charge given back when another
/// rule refused the call) and the time until the limit is whole again.
fn status(outcome: &Outcome) -> DescriptorStatus {
    match outcome {
        Outcome::NoRule => DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        },
        Outcome::Unlimited => DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..DescriptorStatus::default()
        },
        Outcome::Decided {
            rule,
            requests_per_unit,
            unit,
            decision,
            over,
            given_back,
            cost,
        } => {
            let (requests_per_unit, unit) = (*requests_per_unit, *unit);
            let code = if *over && !rule.shadow_mode() {
                Code::OverLimit
            } else {
                Code::Ok
            };
            let remaining = match given_back {
                true => decision
                    .remaining()
                    .saturating_add(u64::from(*cost))
                    .min(u64::from(requests_per_unit)),
                false => decision.remaining(),
            };
            let reset = match rule.policy() {
                Some(_) => decision.reset_after(),
                // 0 requests: nothing counted; over until the window ends.
                None => window_left(unit),
            };
            DescriptorStatus {
                code: code as i32,
                current_limit: Some(PbRateLimit {
                    name: rule.name().to_owned(),
                    requests_per_unit,
                    unit: pb_unit(unit) as i32,
                }),
                limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
                duration_until_reset: Some(pb_duration(reset)),
                quota: None,
            }
        }
    }
}

/// What is left of the current window of `unit`, on the wall clock.
fn window_left(unit: Unit) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let length = Duration::from_secs(unit.seconds());
    let into = Duration::from_nanos(u64::try_from(now.as_nanos() % length.as_nanos()).unwrap_or(0));
    length.saturating_sub(into)
}

fn pb_unit(unit: Unit) -> PbUnit {
    match unit {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}

fn pb_duration(duration: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        // Below a billion: fits.
        nanos: duration.subsec_nanos() as i32,
    }
}
