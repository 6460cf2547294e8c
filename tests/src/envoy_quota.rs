//! A data plane as Envoy's `rate_limit_quota` filter is one, for tests of
//! a quota service: it enforces the last assignment of each bucket on its
//! own, as the filter's source does (`source/extensions/filters/http/
//! rate_limit_quota/`, read for issue 62):
//!
//! - `ALLOW_ALL` and `DENY_ALL` as written;
//! - a token bucket that refills continuously at `tokens_per_fill` per
//!   whole second of `fill_interval` (under a second: no limit), up to
//!   `max_tokens`, one token a request, full when it follows no bucket;
//! - a bucket identical to the one held (`max_tokens`, `tokens_per_fill`,
//!   `fill_interval`'s nanos; not its seconds) keeps its tokens; a
//!   different one starts full unless the old one was empty
//!   ([`Replacement::FullUnlessEmpty`], what the source does), or at the
//!   old one's fill ratio ([`Replacement::KeepRatio`], what its docs and
//!   pull request say); a test of a bound runs both;
//! - a bucket with no assignment (a new one, or one whose assignment
//!   lapsed after its time to live in whole seconds; under a second: at
//!   once) admits everything (`no_assignment_behavior` absent), or nothing
//!   ([`DataPlaneBucket::denying_unassigned`], a blanket `DENY_ALL` there);
//!   an assignment with `requests_per_time_unit` or no strategy is
//!   ignored.

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};

/// What an RLQS `BucketAction` tells the filter to enforce, and for how
/// long in µs (the TTL's whole seconds); `None` for an abandon action or
/// none.
pub fn assignment_of(action: &BucketAction) -> Option<(Assignment, u64)> {
    let Some(bucket_action::BucketAction::QuotaAssignmentAction(assign)) = &action.bucket_action
    else {
        return None;
    };
    let ttl = assign
        .assignment_time_to_live
        .map_or(0, |d| u64::try_from(d.seconds).unwrap_or(0) * 1_000_000);
    let assignment = match assign.rate_limit_strategy.and_then(|s| s.strategy) {
        Some(Strategy::BlanketRule(rule)) if rule == BlanketRule::DenyAll as i32 => {
            Assignment::DenyAll
        }
        Some(Strategy::BlanketRule(_)) => Assignment::AllowAll,
        Some(Strategy::TokenBucket(bucket)) => Assignment::TokenBucket(TokenBucket {
            max_tokens: bucket.max_tokens,
            tokens_per_fill: bucket.tokens_per_fill.map_or(0, |v| v.value),
            fill_interval_us: bucket.fill_interval.map_or(0, |d| {
                u64::try_from(d.seconds).unwrap_or(0) * 1_000_000
                    + u64::try_from(d.nanos).unwrap_or(0) / 1_000
            }),
        }),
        _ => Assignment::Ignored,
    };
    Some((assignment, ttl))
}

/// How a token bucket replaces a different one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replacement {
    /// Full, unless the old bucket was empty (then empty).
    FullUnlessEmpty,
    /// At the old bucket's fill ratio.
    KeepRatio,
}

/// A token bucket as the filter builds one from an assignment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenBucket {
    /// `max_tokens`.
    pub max_tokens: u32,
    /// `tokens_per_fill`.
    pub tokens_per_fill: u32,
    /// `fill_interval`, in µs (whole seconds count; nanos compare).
    pub fill_interval_us: u64,
}

impl TokenBucket {
    /// Tokens a µs, or `None` for no limit (an interval under a second).
    fn rate_per_us(&self) -> Option<f64> {
        let seconds = self.fill_interval_us / 1_000_000;
        (seconds > 0).then(|| f64::from(self.tokens_per_fill) / (seconds as f64 * 1e6))
    }

    /// Whether the filter takes `other` for the same bucket (it compares
    /// the interval's sub-second part only).
    fn same_as(&self, other: &TokenBucket) -> bool {
        self.max_tokens == other.max_tokens
            && self.tokens_per_fill == other.tokens_per_fill
            && self.fill_interval_us % 1_000_000 == other.fill_interval_us % 1_000_000
    }
}

/// What the service told the data plane for a bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Assignment {
    /// `ALLOW_ALL`.
    AllowAll,
    /// `DENY_ALL`.
    DenyAll,
    /// A token bucket.
    TokenBucket(TokenBucket),
    /// `requests_per_time_unit`, or no strategy: ignored by the filter.
    Ignored,
}

/// One bucket of one data plane: its assignment and what it admitted.
#[derive(Clone, Debug)]
pub struct DataPlaneBucket {
    replacement: Replacement,
    /// What a bucket with no assignment does: admit (Envoy's default).
    unassigned_admits: bool,
    held: Option<Held>,
    /// Requests admitted since the last report.
    pub allowed: u64,
    /// Requests refused since the last report.
    pub denied: u64,
}

#[derive(Clone, Copy, Debug)]
struct Held {
    assignment: Assignment,
    /// The bucket's tokens at `at` (a token bucket's).
    tokens: f64,
    at: u64,
    /// When the assignment lapses, in µs.
    lapses: u64,
}

impl DataPlaneBucket {
    /// A bucket with no assignment yet (it admits everything).
    pub fn new(replacement: Replacement) -> Self {
        DataPlaneBucket {
            replacement,
            unassigned_admits: true,
            held: None,
            allowed: 0,
            denied: 0,
        }
    }

    /// A bucket whose `no_assignment_behavior` is a blanket `DENY_ALL`:
    /// it admits nothing until assigned, or once its assignment lapsed.
    pub fn denying_unassigned(replacement: Replacement) -> Self {
        DataPlaneBucket {
            unassigned_admits: false,
            ..DataPlaneBucket::new(replacement)
        }
    }

    /// The assignment in force at `now`, if any.
    pub fn assignment(&self, now: u64) -> Option<Assignment> {
        self.held
            .filter(|held| now < held.lapses)
            .map(|held| held.assignment)
    }

    /// Applies an assignment received at `now` with a time to live of
    /// `ttl_us` (whole seconds count).
    pub fn assign(&mut self, assignment: Assignment, ttl_us: u64, now: u64) {
        if assignment == Assignment::Ignored {
            return;
        }
        let lapses = now + ttl_us / 1_000_000 * 1_000_000;
        let before = self.held.filter(|held| now < held.lapses);
        let tokens = match (assignment, before) {
            (Assignment::TokenBucket(new), Some(held)) => match held.assignment {
                Assignment::TokenBucket(old) => {
                    let left = refilled(old, held.tokens, held.at, now);
                    if old.same_as(&new) {
                        // The old limiter stays, tokens and all.
                        self.held = Some(Held {
                            assignment: Assignment::TokenBucket(old),
                            tokens: left,
                            at: now,
                            lapses,
                        });
                        return;
                    }
                    let ratio = left / f64::from(old.max_tokens.max(1));
                    match self.replacement {
                        Replacement::KeepRatio => ratio * f64::from(new.max_tokens),
                        // Any fraction of a token left: full.
                        Replacement::FullUnlessEmpty if left > 0.0 => f64::from(new.max_tokens),
                        Replacement::FullUnlessEmpty => 0.0,
                    }
                }
                _ => f64::from(new.max_tokens),
            },
            (Assignment::TokenBucket(new), None) => f64::from(new.max_tokens),
            _ => 0.0,
        };
        self.held = Some(Held {
            assignment,
            tokens,
            at: now,
            lapses,
        });
    }

    /// One request at `now`: whether it is admitted (and counted).
    pub fn request(&mut self, now: u64) -> bool {
        let admitted = match self.held.as_mut().filter(|held| now < held.lapses) {
            None => self.unassigned_admits,
            Some(held) => match held.assignment {
                Assignment::AllowAll | Assignment::Ignored => true,
                Assignment::DenyAll => false,
                Assignment::TokenBucket(bucket) => {
                    held.tokens = refilled(bucket, held.tokens, held.at, now);
                    held.at = now;
                    if bucket.rate_per_us().is_none() {
                        true
                    } else if held.tokens >= 1.0 {
                        held.tokens -= 1.0;
                        true
                    } else {
                        false
                    }
                }
            },
        };
        if admitted {
            self.allowed += 1;
        } else {
            self.denied += 1;
        }
        admitted
    }

    /// The counts since the last report, reset: (allowed, denied).
    pub fn report(&mut self) -> (u64, u64) {
        (
            std::mem::take(&mut self.allowed),
            std::mem::take(&mut self.denied),
        )
    }
}

/// `tokens` at `at`, refilled to `now` in `bucket`.
fn refilled(bucket: TokenBucket, tokens: f64, at: u64, now: u64) -> f64 {
    match bucket.rate_per_us() {
        Some(rate) => {
            (tokens + rate * now.saturating_sub(at) as f64).min(f64::from(bucket.max_tokens))
        }
        None => f64::from(bucket.max_tokens),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000;

    fn bucket(max_tokens: u32, tokens_per_fill: u32, seconds: u64) -> Assignment {
        Assignment::TokenBucket(TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_us: seconds * SECOND,
        })
    }

    fn admitted(plane: &mut DataPlaneBucket, n: usize, now: u64) -> usize {
        (0..n).filter(|_| plane.request(now)).count()
    }

    #[test]
    fn a_token_bucket_starts_full_and_refills_continuously() {
        let mut plane = DataPlaneBucket::new(Replacement::FullUnlessEmpty);
        plane.assign(bucket(5, 10, 10), 60 * SECOND, 0);
        assert_eq!(admitted(&mut plane, 10, 0), 5);
        // One token a second.
        assert_eq!(admitted(&mut plane, 10, 3 * SECOND), 3);
        assert_eq!(admitted(&mut plane, 10, 3 * SECOND + SECOND / 2), 0);
        assert_eq!(plane.report(), (8, 22));
    }

    #[test]
    fn the_same_bucket_keeps_its_tokens_and_another_starts_over() {
        for replacement in [Replacement::FullUnlessEmpty, Replacement::KeepRatio] {
            let mut plane = DataPlaneBucket::new(replacement);
            plane.assign(bucket(10, 1, 3600), 60 * SECOND, 0);
            assert_eq!(admitted(&mut plane, 5, 0), 5);
            // Identical (the interval's seconds are not compared): kept.
            plane.assign(bucket(10, 1, 7200), 60 * SECOND, 0);
            assert_eq!(admitted(&mut plane, 10, 0), 5);
            // Empty (nothing refilled in the same µs), then a different
            // bucket: empty in both readings.
            plane.assign(bucket(20, 1, 3600), 60 * SECOND, 0);
            assert_eq!(admitted(&mut plane, 1, 0), 0);
        }
        let mut full = DataPlaneBucket::new(Replacement::FullUnlessEmpty);
        let mut ratio = DataPlaneBucket::new(Replacement::KeepRatio);
        for plane in [&mut full, &mut ratio] {
            plane.assign(bucket(10, 1, 3600), 60 * SECOND, 0);
            assert_eq!(admitted(plane, 5, 0), 5);
            plane.assign(bucket(20, 1, 3600), 60 * SECOND, 1);
        }
        assert_eq!(admitted(&mut full, 30, 1), 20);
        assert_eq!(admitted(&mut ratio, 30, 1), 10);
    }

    #[test]
    fn blanket_rules_ttls_and_ignored_strategies() {
        let mut plane = DataPlaneBucket::new(Replacement::FullUnlessEmpty);
        // No assignment: everything passes, or nothing.
        assert_eq!(admitted(&mut plane, 3, 0), 3);
        let mut strict = DataPlaneBucket::denying_unassigned(Replacement::KeepRatio);
        assert_eq!(admitted(&mut strict, 3, 0), 0);
        assert_eq!(strict.report(), (0, 3));
        plane.assign(Assignment::DenyAll, 2 * SECOND + SECOND / 2, 0);
        assert_eq!(admitted(&mut plane, 3, SECOND), 0);
        // Ignored: the deny stays.
        plane.assign(Assignment::Ignored, 60 * SECOND, SECOND);
        assert_eq!(admitted(&mut plane, 3, SECOND), 0);
        // The TTL's whole seconds (2 s): lapsed, everything passes.
        assert_eq!(admitted(&mut plane, 3, 2 * SECOND), 3);
        // Under a second: lapsed at once.
        plane.assign(Assignment::DenyAll, SECOND / 2, 3 * SECOND);
        assert_eq!(admitted(&mut plane, 3, 3 * SECOND), 3);
        // A fill interval under a second: no limit.
        plane.assign(
            Assignment::TokenBucket(TokenBucket {
                max_tokens: 1,
                tokens_per_fill: 1,
                fill_interval_us: SECOND / 2,
            }),
            60 * SECOND,
            4 * SECOND,
        );
        assert_eq!(admitted(&mut plane, 5, 4 * SECOND), 5);
    }
}
