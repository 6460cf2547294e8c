//! The decisions a local-first store answers with, made from what Redis
//! said at its last call for the key, aged by the time since.

use super::budget::{LimitReading, Reading};
use tollgate_core::{Decision, DecisionFields};
use tollgate_store::PolicyDecision;
use tollgate_store::Receipt;

/// `decision`'s times, `elapsed` nanoseconds later, with `allowed` and
/// `remaining` as given.
///
/// A time that was running never ages below 1 ns while the figures it
/// belongs to still stand: a refusal's `retry_after` whose time came within
/// `elapsed` is answered as due now (1 ns), and `replenish_after` is as
/// [`replenish`] says (0 only when `remaining` is the whole limit). Both
/// age alike, so a refusal keeps `replenish_after ≤ retry_after`.
fn aged(decision: &Decision, elapsed: u64, allowed: bool, remaining: u64) -> Decision {
    let f = decision.fields();
    let later = |nanos: u64| nanos.saturating_sub(elapsed);
    let running = |nanos: u64| match nanos {
        0 => 0,
        nanos => later(nanos).max(1),
    };
    let replenish_after_nanos = replenish(
        f.limit,
        f.remaining,
        f.replenish_after_nanos,
        elapsed,
        remaining,
    );
    DecisionFields {
        allowed,
        limit: f.limit,
        remaining,
        reset_after_nanos: later(f.reset_after_nanos),
        replenish_after_nanos,
        retry_after_nanos: if allowed {
            0
        } else if f.retry_after_nanos == Decision::NEVER_NANOS {
            Decision::NEVER_NANOS
        } else {
            running(f.retry_after_nanos)
        },
        wait_nanos: 0,
    }
    .into()
}

/// A limit's `replenish_after` (the headers' `t`), answered `elapsed`
/// after Redis read `read` of `limit` remaining with `nanos` to its next
/// unit, when `remaining` is left here.
///
/// - Whole here (`remaining ≥ limit`): 0, nothing to come back.
/// - Short of whole in the reading: its next unit, aged, and never below
///   1 ns while short (the unit may be back already: the answer then shows
///   less than remains, never more; a limit short of whole always has a
///   unit to come back, so not 0 either).
/// - Whole in the reading and spent here since: `nanos` is then what the
///   reading says a unit spent at once would take to come back (periodic
///   mode's sync sends a cost of 1's replenish for a limit that reads
///   whole), not aged: a unit spent since comes back no sooner than that
///   after it was spent, so `t` is never early (at most `elapsed` late,
///   for a window's units, whose end comes closer); at least 1 ns.
#[inline]
fn replenish(limit: u64, read: u64, nanos: u64, elapsed: u64, remaining: u64) -> u64 {
    if remaining >= limit {
        0
    } else if read >= limit {
        nanos.max(1)
    } else {
        nanos.saturating_sub(elapsed).max(1)
    }
}

/// An admission decided locally: Redis's last answer, `elapsed` later,
/// each limit's remaining count made by `remaining` from Redis's (exact
/// mode adds the units this instance holds, which are part of what the key
/// has left; periodic mode takes off what it admitted since). It carries
/// the receipt `receipt` stands for (see [`receipt_word`]).
pub(crate) fn admitted(
    last: &PolicyDecision,
    elapsed: u64,
    receipt: u64,
    remaining: impl Fn(u64) -> u64,
) -> PolicyDecision {
    let each = last
        .each()
        .iter()
        .map(|d| aged(d, elapsed, true, remaining(d.remaining())));
    merge(each, receipt)
}

/// [`admitted`], from a budget's reading (see `budget.rs`) rather than
/// the decision it was copied from; its receipt is the reading's.
#[inline]
pub(crate) fn admitted_from(
    reading: &Reading,
    elapsed: u64,
    remaining: impl Fn(u64) -> u64,
) -> PolicyDecision {
    let later = |nanos: u64| nanos.saturating_sub(elapsed);
    let each = |l: &LimitReading| {
        Decision::from(DecisionFields {
            allowed: true,
            limit: l.limit,
            remaining: remaining(l.remaining),
            reset_after_nanos: later(l.reset_after_nanos),
            replenish_after_nanos: replenish(
                l.limit,
                l.remaining,
                l.replenish_after_nanos,
                elapsed,
                remaining(l.remaining),
            ),
            retry_after_nanos: 0,
            wait_nanos: 0,
        })
    };
    // One limit, the common case: no merge to make (this runs for every
    // request decided here).
    let verdict = match reading.limits() {
        [one] => PolicyDecision::single(each(one)),
        limits => PolicyDecision::new(limits.iter().map(each)),
    };
    match receipt_of(reading.receipt) {
        Some(receipt) => verdict.with_receipt(receipt),
        None => verdict,
    }
}

/// A refusal decided locally: Redis's refusal, `elapsed` later. Limits
/// that allowed keep saying so (another limit refused).
pub(crate) fn refused(refusal: &PolicyDecision, elapsed: u64) -> PolicyDecision {
    let each = refusal
        .each()
        .iter()
        .map(|d| aged(d, elapsed, d.allowed(), d.remaining()));
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
    let each = last.each().iter().map(|d| {
        let remaining = left(d.remaining()).min(d.limit());
        let allows = remaining >= cost;
        let mut f = aged(d, elapsed, allows, remaining).fields();
        if !allows {
            f.retry_after_nanos = if cost > d.limit() {
                Decision::NEVER_NANOS
            } else if cost <= remaining + 1 {
                // The next unit back, or later when Redis said one unit
                // would wait longer (a key in debt: see `share.lua`'s
                // sync), carried in the reading's retry.
                f.replenish_after_nanos.max(f.retry_after_nanos)
            } else {
                // Never before the next unit: a reset aged to 0 is
                // not before a replenish kept at 1 ns (see `aged`).
                f.reset_after_nanos.max(f.replenish_after_nanos)
            };
        }
        Decision::from(f)
    });
    merge(each, 0)
}

/// A refusal [`spent`] made where the limits would take the request and
/// this instance's share would not (periodic mode: the other instances'
/// shares hold the rest): a retry may pass once the next reading gives a
/// larger share, `interval` (ns) from now at the latest. Each refusing
/// limit's retry is then that, its next unit no later, its reset no
/// earlier: `0 < replenish_after ≤ retry_after ≤ reset_after` still.
pub(crate) fn held_elsewhere(refusal: PolicyDecision, interval: u64) -> PolicyDecision {
    let retry = interval.max(1);
    let each = refusal.each().iter().map(|d| {
        if d.allowed() {
            return *d;
        }
        let mut f = d.fields();
        f.retry_after_nanos = retry;
        f.replenish_after_nanos = f.replenish_after_nanos.clamp(1, retry);
        f.reset_after_nanos = f.reset_after_nanos.max(retry);
        Decision::from(f)
    });
    merge(each, 0)
}

/// A peek Redis answered (`decision`, for a cost of 0), with each limit's
/// remaining count made by `left` from Redis's (periodic mode: less what
/// this instance admitted and has not reported, plus what it was given
/// back after reporting), at most the limit; its times as Redis gave them.
pub(crate) fn counted(decision: &PolicyDecision, left: impl Fn(u64) -> u64) -> PolicyDecision {
    decision.map_each(|d| {
        let mut f = d.fields();
        f.remaining = left(f.remaining).min(f.limit);
        if f.allowed {
            // A sync's reading carries a retry for one unit; a peek's
            // answer allows (cost 0) and has none.
            f.retry_after_nanos = 0;
        }
        Decision::from(f)
    })
}

/// A budget's word for the receipt its admissions carry (the budget keeps
/// it in an atomic): exact mode's admissions name the last reservation
/// sent, number `report`, whose count of held units in Redis has the units
/// they spent unless a later reservation replaced it (see
/// `LocalFirst::refund`); the word is that number plus one, 0 for none
/// (periodic mode: decisions made here carry no receipt; those Redis made
/// carry the script's charge time, and were charged there, not in a
/// report).
pub(crate) fn receipt_word(report: u64) -> u64 {
    report.saturating_add(1)
}

/// The receipt a budget's word stands for (see [`receipt_word`]).
fn receipt_of(word: u64) -> Option<Receipt> {
    word.checked_sub(1).map(Receipt::token)
}

/// The answer of limits that decided `each` here, not in a script (no
/// charge time on Redis's clock), with the receipt `receipt` stands for.
fn merge(each: impl IntoIterator<Item = Decision>, receipt: u64) -> PolicyDecision {
    let verdict = PolicyDecision::new(each);
    match receipt_of(receipt) {
        Some(receipt) => verdict.with_receipt(receipt),
        None => verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_word_stands_for_its_reservation_and_0_for_none() {
        assert_eq!(receipt_of(0), None);
        for report in [0, 1, 41, u64::MAX - 1] {
            assert_eq!(
                receipt_of(receipt_word(report)),
                Some(Receipt::token(report))
            );
        }
        // An admission answered from such a word carries the token, never
        // a time.
        let each = [Decision::from(DecisionFields {
            allowed: true,
            limit: 5,
            remaining: 4,
            ..DecisionFields::default()
        })];
        let verdict = merge(each, receipt_word(0));
        assert_eq!(verdict.receipt(), Some(Receipt::token(0)));
        assert_eq!(verdict.charged_at(), None);
        assert_eq!(merge(each, 0).receipt(), None);
    }

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
        let last = merge([limit(true, 3, 0)], 0);
        let got = admitted(&last, 400, 0, |r| r + 2);
        assert!(got.merged().allowed());
        assert_eq!(got.merged().remaining(), 5);
        assert_eq!(got.merged().reset_after_nanos(), 4_600);
        assert_eq!(got.merged().replenish_after_nanos(), 600);

        let refusal = merge([limit(false, 0, 2_000)], 0);
        let got = refused(&refusal, 500);
        assert!(!got.merged().allowed());
        assert_eq!(got.merged().retry_after_nanos(), 1_500);
        // Aged past its times, a refusal still says a unit is due (1 ns),
        // not that the limit is whole (0), and no retry before it.
        let stale = refused(&refusal, 9_000);
        assert_eq!(stale.merged().retry_after_nanos(), 1);
        assert_eq!(stale.each()[0].replenish_after_nanos(), 1);
        assert_eq!(stale.each()[0].reset_after_nanos(), 0);
        // Redis read the next unit due in 8 µs; answered 70 µs later.
        let due = merge(
            [DecisionFields {
                replenish_after_nanos: 8_000,
                retry_after_nanos: 43_200_000_008_000,
                ..limit(false, 0, 0).fields()
            }
            .into()],
            0,
        );
        let got = refused(&due, 70_000);
        assert_eq!(got.each()[0].replenish_after_nanos(), 1);
        assert_eq!(got.merged().retry_after_nanos(), 43_199_999_938_000);
        // A whole limit stays whole: 0.
        let whole = merge([limit(true, 10, 0)], 0);
        let whole = DecisionFields {
            replenish_after_nanos: 0,
            ..whole.each()[0].fields()
        };
        let whole = merge([whole.into()], 0);
        assert_eq!(
            admitted(&whole, 400, 0, |r| r)
                .merged()
                .replenish_after_nanos(),
            0
        );

        // 3 remain in Redis, all admitted here: a cost of 1 waits for the
        // next unit, a cost of 2 for the whole limit.
        let got = spent(&last, 400, 1, |r| r - 3);
        assert!(!got.merged().allowed());
        assert_eq!(got.merged().remaining(), 0);
        assert_eq!(got.merged().retry_after_nanos(), 600);
        assert_eq!(
            spent(&last, 400, 2, |r| r - 3).merged().retry_after_nanos(),
            4_600
        );
        assert!(!spent(&last, 400, 11, |r| r).merged().can_ever_pass());
    }
}
