//! The decisions a local-first store answers with, made from what Redis
//! said at its last call for the key, aged by the time since.

use super::budget::Reading;
use tollgate::PolicyDecision;
use tollgate_core::{Decision, DecisionFields};

/// `decision`'s times, `elapsed` nanoseconds later (never below 0), with
/// `allowed` and `remaining` as given.
fn aged(decision: &Decision, elapsed: u64, allowed: bool, remaining: u64) -> Decision {
    let f = decision.fields();
    let later = |nanos: u64| nanos.saturating_sub(elapsed);
    DecisionFields {
        allowed,
        limit: f.limit,
        remaining,
        reset_after_nanos: later(f.reset_after_nanos),
        replenish_after_nanos: later(f.replenish_after_nanos),
        retry_after_nanos: if allowed {
            0
        } else if f.retry_after_nanos == Decision::NEVER_NANOS {
            Decision::NEVER_NANOS
        } else {
            later(f.retry_after_nanos)
        },
        wait_nanos: 0,
    }
    .into()
}

/// An admission decided locally: Redis's last answer, `elapsed` later,
/// each limit's remaining count made by `remaining` from Redis's (exact
/// mode adds the units this instance holds, which are part of what the key
/// has left; periodic mode takes off what it admitted since). It carries
/// `receipt` as its `charged_at` (see `LocalFirst::refund`).
pub(crate) fn admitted(
    last: &PolicyDecision,
    elapsed: u64,
    receipt: u64,
    remaining: impl Fn(u64) -> u64,
) -> PolicyDecision {
    let each: smallvec::SmallVec<[Decision; 2]> = last
        .each
        .iter()
        .map(|d| aged(d, elapsed, true, remaining(d.remaining())))
        .collect();
    merge(each, receipt)
}

/// [`admitted`], from a budget's reading (see `budget.rs`) rather than
/// the decision it was copied from; its receipt is the reading's.
pub(crate) fn admitted_from(
    reading: &Reading,
    elapsed: u64,
    remaining: impl Fn(u64) -> u64,
) -> PolicyDecision {
    let later = |nanos: u64| nanos.saturating_sub(elapsed);
    let each: smallvec::SmallVec<[Decision; 2]> = reading
        .limits()
        .iter()
        .map(|l| {
            Decision::from(DecisionFields {
                allowed: true,
                limit: l.limit,
                remaining: remaining(l.remaining),
                reset_after_nanos: later(l.reset_after_nanos),
                replenish_after_nanos: later(l.replenish_after_nanos),
                retry_after_nanos: 0,
                wait_nanos: 0,
            })
        })
        .collect();
    merge(each, reading.receipt)
}

/// A refusal decided locally: Redis's refusal, `elapsed` later. Limits
/// that allowed keep saying so (another limit refused).
pub(crate) fn refused(refusal: &PolicyDecision, elapsed: u64) -> PolicyDecision {
    let each: smallvec::SmallVec<[Decision; 2]> = refusal
        .each
        .iter()
        .map(|d| aged(d, elapsed, d.allowed(), d.remaining()))
        .collect();
    merge(each, 0)
}

/// A refusal decided locally (periodic mode) from a reading that counts
/// everything this instance admitted, `elapsed` ago: each limit as Redis
/// read it, with what this instance may still admit of it (`left` of
/// Redis's remaining). A limit that cannot take `cost` gives its retry as
/// when its next unit is back (`replenish_after`) if one more unit is
/// enough, else when it is whole again (`reset_after`): never early for a
/// retry of the same cost, as the reading knows it. So on a refusal
/// `0 < replenish_after ≤ retry_after ≤ reset_after`.
pub(crate) fn spent(
    last: &PolicyDecision,
    elapsed: u64,
    cost: u64,
    left: impl Fn(u64) -> u64,
) -> PolicyDecision {
    let each: smallvec::SmallVec<[Decision; 2]> = last
        .each
        .iter()
        .map(|d| {
            let remaining = left(d.remaining()).min(d.limit());
            let allows = remaining >= cost;
            let mut f = aged(d, elapsed, allows, remaining).fields();
            if !allows {
                f.retry_after_nanos = if cost > d.limit() {
                    Decision::NEVER_NANOS
                } else if cost <= remaining + 1 {
                    f.replenish_after_nanos
                } else {
                    f.reset_after_nanos
                };
            }
            Decision::from(f)
        })
        .collect();
    merge(each, 0)
}

fn merge(each: smallvec::SmallVec<[Decision; 2]>, receipt: u64) -> PolicyDecision {
    let merged = match each.as_slice() {
        [one] => *one,
        _ => each
            .iter()
            .copied()
            .reduce(Decision::merge)
            .unwrap_or_default(),
    };
    PolicyDecision {
        merged,
        each,
        // Decided here, not by a script: no charge time on Redis's clock.
        // Exact mode's admissions carry a receipt instead, which
        // `LocalFirst::refund` reads; periodic mode's carry none (0), read
        // there as "undo it here".
        charged_at: receipt,
        charged_by: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(allowed: bool, remaining: u64, retry: u64) -> Decision {
        DecisionFields {
            allowed,
            limit: 10,
            remaining,
            reset_after_nanos: 5_000,
            replenish_after_nanos: 1_000,
            retry_after_nanos: retry,
            wait_nanos: 0,
        }
        .into()
    }

    #[test]
    fn local_answers_age_redis_times_and_count_what_is_held() {
        let last = merge([limit(true, 3, 0)].into_iter().collect(), 0);
        let got = admitted(&last, 400, 0, |r| r + 2);
        assert!(got.merged.allowed());
        assert_eq!(got.merged.remaining(), 5);
        assert_eq!(got.merged.reset_after_nanos(), 4_600);
        assert_eq!(got.merged.replenish_after_nanos(), 600);

        let refusal = merge([limit(false, 0, 2_000)].into_iter().collect(), 0);
        let got = refused(&refusal, 500);
        assert!(!got.merged.allowed());
        assert_eq!(got.merged.retry_after_nanos(), 1_500);
        assert_eq!(refused(&refusal, 9_000).merged.retry_after_nanos(), 0);

        // 3 remain in Redis, all admitted here: a cost of 1 waits for the
        // next unit, a cost of 2 for the whole limit.
        let got = spent(&last, 400, 1, |r| r - 3);
        assert!(!got.merged.allowed());
        assert_eq!(got.merged.remaining(), 0);
        assert_eq!(got.merged.retry_after_nanos(), 600);
        assert_eq!(
            spent(&last, 400, 2, |r| r - 3).merged.retry_after_nanos(),
            4_600
        );
        assert!(!spent(&last, 400, 11, |r| r).merged.can_ever_pass());
    }
}
