//! The local-first store's three operations ([`ShareOp`]: reserve, sync,
//! give back) on a key's states and [`Books`], as `share.lua` runs them
//! in Redis: pure functions of what the backend read and its clock, whose
//! result one conditional write lands. Times are ns here (the scripts
//! count µs); the answer's extra numbers are µs, as the scripts send them.

use super::value::{Books, Held, LimitBooks, Sequence, Share, Spent, States};
use tollgate_core::{Charge, Decision, Limiter, Refund, State};
use tollgate_store::Policy;
use tollgate_store::PolicyDecision;
use tollgate_store::shared::ShareOp;

/// What the scripts send for "never" or "none".
const NEVER: i64 = -1;

/// How long the instances' last report numbers are kept after a report
/// was applied, at least (as the script keeps its hash: this, or as long
/// as the counts the report charged, renewed by every applied report): a
/// report sent again later than that is not expected.
const SEQUENCE_LIFE: u64 = 60_000_000_000;

/// The most `u32` steps a debit takes (2³⁶ units in all): more is a
/// count no stored value holds but by corruption, and a debt no key
/// outlives anyway; charging it step by step would stall the call.
const MAX_DEBIT_STEPS: u32 = 16;

/// How long a held count is kept past its expiry and a whole refill (the
/// scripts' `PEXPIRE`: a second more).
const HELD_SLACK: u64 = 1_000_000_000;

/// An operation's answer: the three numbers before the decisions (see
/// [`tollgate_store::shared::ShareReply`]) and the limits' decisions.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) head: [i64; 3],
    pub(super) decision: PolicyDecision,
}

/// Runs `op` at `now` on `states` and `books` (changed in place; the
/// caller writes them if they changed).
pub(super) fn run(
    policy: &Policy,
    states: &mut States,
    books: &mut Books,
    now: u64,
    op: &ShareOp,
) -> Answer {
    match op {
        ShareOp::Reserve { .. } => reserve(policy, states, books, now, op),
        ShareOp::Sync { .. } => sync(policy, states, books, now, op),
        ShareOp::Refund { .. } => give_back(policy, states, books, now, op),
    }
}

/// One limit of the policy, as an operation works on it.
struct Limit<'a> {
    limiter: &'a Limiter,
    /// The state the limit decides from: the stored one, with what
    /// instances hold taken into account where the limit counts them.
    state: State,
    decision: Decision,
    charge: Option<Charge>,
    /// One unit's time (ns), for a limit that counts held units.
    interval: Option<u64>,
}

impl<'a> Limit<'a> {
    fn all(policy: &'a Policy, states: &States) -> Vec<Limit<'a>> {
        policy
            .limiters()
            .iter()
            .zip(states.iter())
            .map(|(limiter, state)| Limit {
                limiter,
                state: state.clone(),
                decision: Decision::from(tollgate_core::DecisionFields::default()),
                charge: None,
                interval: counts_held(limiter).then(|| unit_nanos(limiter)),
            })
            .collect()
    }
}

/// Whether a limit's bucket counts the units instances hold (GCRA and the
/// continuous token bucket: the scripts' `held`). Read from the script the
/// limiter runs, not its algorithm's name: a token bucket refilled at
/// intervals runs `token_bucket.lua`.
fn counts_held(limiter: &Limiter) -> bool {
    limiter.script().script == "gcra"
}

/// One unit's time of a bucket, in ns (the scripts' `p[1]`, in µs).
fn unit_nanos(limiter: &Limiter) -> u64 {
    limiter.script().params[0].saturating_mul(1_000).max(1)
}

/// How long units reserved now may be spent, for a limit whose units are
/// a window's (the scripts' `lapse`): to the end of the window (the
/// sub-window, the refill interval) that holds `now`; `None` for a bucket.
fn lapse(limiter: &Limiter, now: u64) -> Option<u64> {
    let windowed = matches!(
        limiter.script().script,
        "fixed_window" | "sliding_window" | "sliding_window_buckets" | "token_bucket"
    );
    if !windowed {
        return None;
    }
    let period = limiter.script().params[1].saturating_mul(1_000).max(1);
    Some((now / period + 1).saturating_mul(period) - now)
}

/// Every limit's decision for `cost`; whether all allow it.
fn evaluate_all(limits: &mut [Limit<'_>], now: u64, cost: u64) -> bool {
    let cost = u32::try_from(cost).unwrap_or(u32::MAX);
    let mut all = true;
    for limit in limits.iter_mut() {
        let (decision, charge) = limit.limiter.evaluate(&limit.state, now, cost);
        all &= decision.allowed();
        limit.decision = decision;
        limit.charge = charge;
    }
    all
}

/// The limits' decisions as the answer carries them.
fn decisions(limits: &[Limit<'_>]) -> PolicyDecision {
    PolicyDecision::new(limits.iter().map(|limit| limit.decision))
}

/// `state` with at least `units` units of a bucket taken at `at`: its
/// schedule no earlier than one charged that many units then (the
/// scripts' `t + O × interval` floor).
fn floor(limiter: &Limiter, state: &mut State, at: u64, units: u64) {
    if units == 0 {
        return;
    }
    let mut least = limiter.new_state();
    debit(limiter, &mut least, at, units);
    match (state, least) {
        (State::Gcra(state), State::Gcra(least)) => state.tat = state.tat.max(least.tat),
        (
            State::TokenBucket(tollgate_core::TokenBucketState::Continuous { full_at }),
            State::TokenBucket(tollgate_core::TokenBucketState::Continuous { full_at: least }),
        ) if least.get() > full_at.get() => *full_at = least,
        _ => {}
    }
}

/// Charges `units` whatever the state, in `u32` steps (at most
/// [`MAX_DEBIT_STEPS`]).
fn debit(limiter: &Limiter, state: &mut State, now: u64, mut units: u64) {
    for _ in 0..MAX_DEBIT_STEPS {
        if units == 0 {
            break;
        }
        let step = u32::try_from(units).unwrap_or(u32::MAX);
        limiter.debit(state, now, step);
        units -= u64::from(step);
    }
}

/// Whether `units` charged from `at` still reach past `now`.
fn ahead(units: u64, at: u64, interval: u64, now: u64) -> bool {
    units > 0 && at.saturating_add(units.saturating_mul(interval)) > now
}

/// The scripts' `held`: `limit`'s state with what instances hold taken
/// into account (each count applied up to its expiry, then dropped), and
/// the counts still live; counts that left become spent records. Changes
/// `books` as the reservation that reads it will write them.
fn apply_held(limit: &mut Limit<'_>, books: &mut LimitBooks, now: u64) {
    let Some(interval) = limit.interval else {
        return;
    };
    books.spent.retain(|s| ahead(s.units, s.at, interval, now));
    books.held.sort_by_key(|h| h.expiry);
    // Saturating: the counts are read from a stored value.
    let mut total = books
        .held
        .iter()
        .fold(0u64, |total, h| total.saturating_add(h.units));
    let mut live = Vec::with_capacity(books.held.len());
    for held in books.held.drain(..) {
        if held.expiry <= now {
            floor(limit.limiter, &mut limit.state, held.expiry, total);
            total = total.saturating_sub(held.units);
            if held.report > 0 && ahead(held.units, held.expiry, interval, now) {
                set_spent(
                    &mut books.spent,
                    Spent {
                        holder: held.holder,
                        report: held.report,
                        units: held.units,
                        at: held.expiry,
                    },
                );
            }
        } else {
            live.push(held);
        }
    }
    books.held = live;
    floor(limit.limiter, &mut limit.state, now, total);
}

fn set_spent(spent: &mut Vec<Spent>, record: Spent) {
    spent.retain(|s| s.holder != record.holder);
    spent.push(record);
}

/// The scripts' `record_held`: `reporter` now holds `units` until
/// `expiry` as reservation `report`, of which `kept` were in its last
/// count; what it spent of that count is recorded spent from now.
fn record_held(
    books: &mut LimitBooks,
    reporter: u64,
    (units, expiry, report, kept): (u64, u64, u64, u64),
    now: u64,
) {
    if let Some(last) = books.held.iter().find(|h| h.holder == reporter).copied()
        && last.units > kept
        && last.report > 0
    {
        set_spent(
            &mut books.spent,
            Spent {
                holder: reporter,
                report: last.report,
                units: last.units - kept,
                at: now,
            },
        );
    }
    books.held.retain(|h| h.holder != reporter);
    if units > 0 && expiry > now {
        books.held.push(Held {
            holder: reporter,
            units,
            expiry,
            report,
        });
    }
}

/// Exact mode: a grant of what passes now, a `fanout`th of it, at least
/// the request that waits, at most what is wanted; charged at once, and
/// recorded as held by the limits that count held units.
fn reserve(
    policy: &Policy,
    states: &mut States,
    books: &mut Books,
    now: u64,
    op: &ShareOp,
) -> Answer {
    let ShareOp::Reserve {
        need,
        want,
        fanout,
        holder,
        held,
        hold_micros,
        ahead_micros,
        report,
    } = *op
    else {
        unreachable!("reserve runs reservations");
    };
    let need = u64::from(need);
    let fanout = u64::from(fanout.max(1));
    let ahead_nanos = ahead_micros.saturating_mul(1_000);
    let mut limits = Limit::all(policy, states);
    // Units of a window lapse at its end: no more than the instance spends
    // at its rate before then.
    let lapse = limits
        .iter()
        .filter_map(|limit| lapse(limit.limiter, now))
        .min();
    let mut want = want;
    if let Some(lapse) = lapse
        && ahead_nanos > 0
        && lapse < ahead_nanos
    {
        let scaled = (u128::from(want) * u128::from(lapse)).div_ceil(u128::from(ahead_nanos));
        want = need.max(u64::try_from(scaled).unwrap_or(u64::MAX));
    }
    let mut any_held = false;
    let mut new_books = books.clone();
    for (index, limit) in limits.iter_mut().enumerate() {
        if limit.interval.is_some() {
            apply_held(limit, new_books.limit(index), now);
            any_held = true;
        }
    }
    let least = need.max(1);
    if !evaluate_all(&mut limits, now, least) {
        // Nothing written: what instances hold stays as it was.
        return Answer {
            head: [0, 0, 0],
            decision: decisions(&limits),
        };
    }
    // The most that would pass now, up to want × fanout: admission is
    // monotone in the cost for every algorithm.
    let (mut low, mut high) = (least, want.saturating_mul(fanout).max(least));
    high = high.min(u64::from(u32::MAX));
    while low < high {
        let middle = low + (high - low).div_ceil(2);
        if evaluate_all(&mut limits, now, middle) {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    let granted = want.min(need.max(low / fanout));
    evaluate_all(&mut limits, now, granted);
    for (limit, state) in limits.iter_mut().zip(states.iter_mut()) {
        // Ahead of need with no share to grant, only the counts of held
        // units are renewed (what was spent since the last one charged).
        if granted == 0 && limit.interval.is_none() {
            continue;
        }
        if let Some(charge) = limit.charge {
            limit.limiter.commit(&mut limit.state, charge);
        }
        *state = limit.state.clone();
    }
    let hold = hold_micros.saturating_mul(1_000);
    if any_held {
        for (index, limit) in limits.iter().enumerate() {
            if limit.interval.is_some() {
                record_held(
                    new_books.limit(index),
                    holder,
                    (
                        held.saturating_add(granted),
                        now.saturating_add(hold),
                        report,
                        held,
                    ),
                    now,
                );
            }
        }
    }
    *books = new_books;
    Answer {
        head: [
            i64::try_from(granted).unwrap_or(i64::MAX),
            lapse.map_or(NEVER, micros),
            if any_held { micros(hold) } else { NEVER },
        ],
        decision: decisions(&limits),
    }
}

/// `nanos` in whole µs, as the answer carries times.
fn micros(nanos: u64) -> i64 {
    i64::try_from(nanos / 1_000).unwrap_or(i64::MAX)
}

/// Exact mode: `cost` units a holder spent on its own, given back in each
/// limit's state, and off the count of held units its reservation
/// `report` recorded (or the record of what it spent of that count, once
/// the count left): whole from where the count held them.
fn give_back(
    policy: &Policy,
    states: &mut States,
    books: &mut Books,
    now: u64,
    op: &ShareOp,
) -> Answer {
    let ShareOp::Refund {
        cost,
        holder,
        report,
        ago_micros,
        ref resets,
    } = *op
    else {
        unreachable!("give_back runs refunds");
    };
    let at = now.saturating_sub(ago_micros.saturating_mul(1_000));
    let mut taken: Option<u64> = None;
    let limiters = policy.limiters().iter().zip(states.iter_mut());
    for (index, (limiter, state)) in limiters.enumerate() {
        let mut reset = resets.get(index).copied();
        if counts_held(limiter) && report > 0 {
            let interval = unit_nanos(limiter);
            // No books for the limit: nothing held to take off (and
            // nothing made, so that an unchanged key is not written).
            let Some(limit) = books.limits.get_mut(index) else {
                limiter.refund(
                    state,
                    Refund {
                        at,
                        cost,
                        reset_after: reset,
                    },
                    now,
                );
                continue;
            };
            // The token bucket reads a `reset_after` as rounded up to the
            // ns (its refund takes one ns off); the mark here is exact.
            let rounding = u64::from(matches!(limiter, Limiter::TokenBucket(_)));
            let mut raise = |mark: u64| {
                if mark > at {
                    reset = Some(reset.unwrap_or(0).max(mark - at + rounding));
                }
            };
            if let Some(count) = limit
                .held
                .iter_mut()
                .find(|h| h.holder == holder && h.report == report && h.units > 0)
            {
                let lower = count.units.min(u64::from(cost));
                raise(
                    count
                        .expiry
                        .min(now)
                        .saturating_add(count.units.saturating_mul(interval)),
                );
                count.units -= lower;
                taken.get_or_insert(lower);
            } else if let Some(position) = limit
                .spent
                .iter()
                .position(|s| s.holder == holder && s.report == report && s.units > 0)
            {
                let record = &mut limit.spent[position];
                let lower = record.units.min(u64::from(cost));
                raise(
                    record
                        .at
                        .saturating_add(record.units.saturating_mul(interval)),
                );
                record.units -= lower;
                if record.units == 0 {
                    limit.spent.remove(position);
                }
            }
        }
        let refund = Refund {
            at,
            cost,
            reset_after: reset,
        };
        limiter.refund(state, refund, now);
    }
    // What remains now, as a reservation would see it.
    let mut limits = Limit::all(policy, states);
    let mut reading = books.clone();
    for (index, limit) in limits.iter_mut().enumerate() {
        apply_held(limit, reading.limit(index), now);
    }
    evaluate_all(&mut limits, now, 0);
    Answer {
        head: [i64::try_from(taken.unwrap_or(0)).unwrap_or(i64::MAX), 0, 0],
        decision: decisions(&limits),
    }
}

/// Periodic mode: the report charged (once per sequence number), what
/// remains read, and the instance's share of it given.
fn sync(policy: &Policy, states: &mut States, books: &mut Books, now: u64, op: &ShareOp) -> Answer {
    let ShareOp::Sync {
        spent,
        instance,
        sequence,
        ..
    } = *op
    else {
        unreachable!("sync runs syncs");
    };
    books.sequences.retain(|s| s.until > now);
    let last = books
        .sequences
        .iter()
        .find(|s| s.instance == instance)
        .map_or(0, |s| s.sequence);
    let mut applied = 0;
    if spent > 0 && sequence > last {
        let mut longest = 0;
        let limiters = policy.limiters().iter().zip(states.iter_mut());
        for (limiter, state) in limiters {
            debit(limiter, state, now, spent);
            let (after, _) = limiter.evaluate(state, now, 0);
            longest = longest.max(after.reset_after_nanos());
        }
        // Every instance's number is kept as long as the counts this
        // report charged, and at least a minute: the script renews its
        // whole hash so at each applied report.
        let until = now.saturating_add(longest.max(SEQUENCE_LIFE));
        books.sequences.retain(|s| s.instance != instance);
        for kept in &mut books.sequences {
            kept.until = kept.until.max(until);
        }
        books.sequences.push(Sequence {
            instance,
            sequence,
            until,
        });
        applied = 1;
    }
    // Read for a cost of 0; a limit that would refuse one unit says when
    // one would pass, and one that reads whole when a unit spent now would
    // be back (see share.lua).
    let mut limits = Limit::all(policy, states);
    evaluate_all(&mut limits, now, 0);
    for limit in &mut limits {
        let (one, _) = limit.limiter.evaluate(&limit.state, now, 1);
        let mut fields = limit.decision.fields();
        if !one.allowed() {
            fields.retry_after_nanos = one.retry_after_nanos();
        } else if fields.replenish_after_nanos == 0 {
            fields.replenish_after_nanos = one.replenish_after_nanos();
        }
        limit.decision = fields.into();
    }
    let remaining = limits.iter().map(|l| l.decision.remaining()).min();
    let (share, sharing) = give_share(&mut books.shares, remaining.unwrap_or(0), now, op);
    Answer {
        head: [
            applied,
            i64::try_from(share).unwrap_or(i64::MAX),
            i64::try_from(sharing).unwrap_or(i64::MAX),
        ],
        decision: decisions(&limits),
    }
}

/// The scripts' `give_share`: the share of what remains (`remaining`)
/// that the syncing instance may admit until its next sync, and how many
/// instances hold a live share (see `share.lua` for the rules).
fn give_share(shares: &mut Vec<Share>, remaining: u64, now: u64, op: &ShareOp) -> (u64, u64) {
    let ShareOp::Sync {
        instance,
        life_micros,
        instances,
        need,
        left,
        want,
        ..
    } = *op
    else {
        unreachable!("shares are given at syncs");
    };
    let (fixed, need) = (u64::from(instances), u64::from(need));
    let life = life_micros.saturating_mul(1_000);
    let own = shares
        .iter()
        .find(|s| s.instance == instance)
        .map(|s| s.expiry);
    shares.retain(|s| s.instance == instance || s.expiry > now);
    let others_shares = shares.iter().filter(|s| s.instance != instance);
    let others = others_shares
        .clone()
        .fold(0u64, |sum, s| sum.saturating_add(s.units));
    let wanted = others_shares
        .clone()
        .fold(0u64, |sum, s| sum.saturating_add(s.short));
    let sharing = 1 + others_shares.count() as u64;
    let free = remaining.saturating_sub(others);
    if want == 0 && need == 0 && left > 0 {
        // Idle: it keeps at most half of what the others leave free, and
        // none they want beyond what they hold, until its share lapses as
        // it was given.
        let kept = left.min(free / 2).min(free.saturating_sub(wanted));
        if kept > 0
            && let Some(own) = own.filter(|&own| own > now)
        {
            set_share(shares, instance, kept, own, 0);
            return (kept, sharing);
        }
        shares.retain(|s| s.instance != instance);
        return (0, sharing - 1);
    }
    let mut share = 0;
    if want.saturating_add(wanted) <= free && (want > 0 || need > 0) {
        let part = free.div_ceil(if fixed > 0 { fixed } else { sharing + 1 });
        share = want.max(part.min(free - wanted));
    } else if want > 0 {
        share = want.min(free.div_ceil(if fixed > 0 { fixed } else { sharing }));
    }
    if need > share && need <= free {
        share = need;
    }
    let outstanding = share.max(left);
    if outstanding == 0 && want == 0 && need == 0 {
        shares.retain(|s| s.instance != instance);
        return (0, sharing - 1);
    }
    let short = want.max(need).saturating_sub(share);
    set_share(
        shares,
        instance,
        outstanding,
        now.saturating_add(life),
        short,
    );
    (share, sharing)
}

fn set_share(shares: &mut Vec<Share>, instance: u64, units: u64, expiry: u64, short: u64) {
    shares.retain(|s| s.instance != instance);
    shares.push(Share {
        instance,
        units,
        expiry,
        short,
    });
}

/// When the books hold nothing that still matters: the latest of the held
/// counts' expiries (then a whole refill, as the scripts keep them), the
/// spent records' ends, the shares' expiries and the report numbers'
/// lives.
pub(super) fn books_rest(policy: &Policy, books: &Books) -> u64 {
    let mut rest = 0u64;
    for (limiter, limit) in policy.limiters().iter().zip(&books.limits) {
        let interval = unit_nanos(limiter);
        let refill = interval.saturating_mul(limiter.capacity());
        for held in &limit.held {
            // As the scripts keep a held count: a whole refill and a
            // second past its expiry, and at least until its floor is
            // behind (a count larger than the burst).
            let floor = held
                .expiry
                .saturating_add(held.units.saturating_mul(interval));
            let kept = held
                .expiry
                .saturating_add(refill)
                .saturating_add(HELD_SLACK);
            rest = rest.max(kept).max(floor);
        }
        for spent in &limit.spent {
            rest = rest.max(
                spent
                    .at
                    .saturating_add(spent.units.saturating_mul(interval)),
            );
        }
    }
    for share in &books.shares {
        rest = rest.max(share.expiry);
    }
    for sequence in &books.sequences {
        rest = rest.max(sequence.until);
    }
    rest
}
