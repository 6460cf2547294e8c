//! A call's outcomes as Envoy reads them: the overall code, each
//! descriptor's status with its limit, what remains and when it resets,
//! the fields Envoy adds to the client's response, and the dynamic
//! metadata it hands the filters after it.

use crate::config::Unit;
use crate::decide::{Outcome, refused};
use crate::metadata;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tollgate_store::fields::{ceil_seconds, policy_item, retry_after_seconds, state_item};

/// Which fields the service asks Envoy to add to the client's response
/// (`response_headers_to_add`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResponseHeaders {
    /// The IETF draft-11 fields (the default): `RateLimit-Policy` and
    /// `RateLimit`, an item for every decided descriptor, and
    /// `Retry-After` on a refused call, as tollgate's layers send them.
    #[default]
    Draft11,
    /// The older `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` (seconds) of the one descriptor nearest its
    /// limit (a refused one first), as envoyproxy/ratelimit sends its trio
    /// with `LIMIT_RESPONSE_HEADERS_ENABLED`, under the names most clients
    /// of that era read; `Retry-After` too on a refused call.
    Legacy,
    /// Both sets.
    Both,
    /// None: Envoy adds nothing to the client's response.
    None,
}

/// How the service answers beyond the codes: the fields and the dynamic
/// metadata.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Answering {
    pub(crate) headers: ResponseHeaders,
    pub(crate) dynamic_metadata: bool,
}

/// The response to `request`, whose descriptors ended as `outcomes`, in
/// the call's order: `OVER_LIMIT` when the call is refused ([`refused`]),
/// else `OK`.
pub(crate) fn response(
    outcomes: &[Outcome],
    request: &RateLimitRequest,
    answering: Answering,
) -> RateLimitResponse {
    let over = refused(outcomes);
    let mut headers = Vec::new();
    if matches!(
        answering.headers,
        ResponseHeaders::Draft11 | ResponseHeaders::Both
    ) {
        draft11_fields(outcomes, &mut headers);
    }
    if matches!(
        answering.headers,
        ResponseHeaders::Legacy | ResponseHeaders::Both
    ) {
        legacy_fields(outcomes, &mut headers);
    }
    if over
        && answering.headers != ResponseHeaders::None
        && let Some(seconds) = retry_after(outcomes)
    {
        headers.push(header("Retry-After", seconds.to_string()));
    }
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses: outcomes.iter().map(status).collect(),
        response_headers_to_add: headers,
        dynamic_metadata: metadata::of_call(outcomes, request, answering.dynamic_metadata),
        ..RateLimitResponse::default()
    }
}

/// The seconds a refused call's client should wait: the longest wait of
/// the rules over their limit, rounded up, never 0; none when a rule can
/// never pass (0 requests per unit, or hits above the limit).
fn retry_after(outcomes: &[Outcome]) -> Option<u64> {
    let mut longest = None;
    for outcome in outcomes {
        let Outcome::Decided { rule, decision, .. } = outcome else {
            continue;
        };
        if !outcome.over() {
            continue;
        }
        let seconds = rule.policy().and_then(|_| retry_after_seconds(decision))?;
        longest = longest.max(Some(seconds));
    }
    longest
}

/// The draft-11 fields: a `RateLimit-Policy` and a `RateLimit` item for
/// each decided descriptor (shadow rules left out, as tollgate's layers
/// leave them out), what remains counting a charge given back when
/// another rule refused the call.
fn draft11_fields(outcomes: &[Outcome], fields: &mut Vec<HeaderValue>) {
    let mut policy = Vec::new();
    let mut state = Vec::new();
    for outcome in outcomes {
        let Outcome::Decided { rule, decision, .. } = outcome else {
            continue;
        };
        let (Some(rule_policy), false) = (rule.policy(), rule.shadow_mode()) else {
            continue;
        };
        for limit in rule_policy.limits() {
            policy.push(policy_item(limit));
            state.push(state_item(
                limit.name(),
                remaining(outcome),
                decision.replenish_after(),
            ));
        }
    }
    if !policy.is_empty() {
        fields.push(header("RateLimit-Policy", policy.join(", ")));
        fields.push(header("RateLimit", state.join(", ")));
    }
}

/// The `X-RateLimit-*` trio of the descriptor nearest its limit: the
/// first refused one, else the one with least remaining (the first of
/// equals), shadow rules left out; none when no descriptor was decided.
fn legacy_fields(outcomes: &[Outcome], fields: &mut Vec<HeaderValue>) {
    let nearest = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Decided { rule, .. } if !rule.shadow_mode()))
        .min_by_key(|o| (!o.over(), remaining(o)));
    let Some(
        outcome @ Outcome::Decided {
            requests_per_unit, ..
        },
    ) = nearest
    else {
        return;
    };
    fields.push(header("X-RateLimit-Limit", requests_per_unit.to_string()));
    fields.push(header(
        "X-RateLimit-Remaining",
        remaining(outcome).to_string(),
    ));
    fields.push(header(
        "X-RateLimit-Reset",
        ceil_seconds(reset_after(outcome)).to_string(),
    ));
}

/// What a decided descriptor has left: the store's answer, with its
/// charge added back when another rule refused the call (never above the
/// limit); 0 for anything else.
fn remaining(outcome: &Outcome) -> u64 {
    let Outcome::Decided {
        decision,
        given_back,
        cost,
        requests_per_unit,
        ..
    } = outcome
    else {
        return 0;
    };
    match given_back {
        true => decision
            .remaining()
            .saturating_add(u64::from(*cost))
            .min(u64::from(*requests_per_unit)),
        false => decision.remaining(),
    }
}

/// When a decided descriptor's limit is whole again: the store's answer,
/// or, for a rule of 0 requests (nothing counted), the end of its window.
fn reset_after(outcome: &Outcome) -> Duration {
    match outcome {
        Outcome::Decided {
            rule,
            decision,
            unit,
            ..
        } => match rule.policy() {
            Some(_) => decision.reset_after(),
            None => window_left(*unit),
        },
        Outcome::NoRule | Outcome::Unlimited => Duration::ZERO,
    }
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
            over,
            ..
        } => {
            let code = if *over && !rule.shadow_mode() {
                Code::OverLimit
            } else {
                Code::Ok
            };
            DescriptorStatus {
                code: code as i32,
                current_limit: Some(PbRateLimit {
                    name: rule.name().to_owned(),
                    requests_per_unit: *requests_per_unit,
                    unit: pb_unit(*unit) as i32,
                }),
                limit_remaining: u32::try_from(remaining(outcome)).unwrap_or(u32::MAX),
                duration_until_reset: Some(pb_duration(reset_after(outcome))),
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
