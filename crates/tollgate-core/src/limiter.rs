//! [`Limiter`]: an algorithm chosen at run time (its enums are generated
//! from the registry), and several limits checked as one.

use crate::algorithm::{RateAlgorithm, ScriptCall};
use crate::{Decision, DecisionFields, Quota};
use std::time::Duration;

crate::for_each_algorithm!(crate::registry::define_algorithms);

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = text.trim().to_ascii_lowercase().replace('_', "-");
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == wanted)
            .ok_or_else(|| UnknownAlgorithm(text.to_owned()))
    }
}

/// An algorithm name that is not one of [`Algorithm::ALL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl std::fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown algorithm {:?}: use one of ", self.0)?;
        for (i, algorithm) in Algorithm::ALL.iter().enumerate() {
            let separator = if i == 0 { "" } else { ", " };
            write!(f, "{separator}{algorithm}")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownAlgorithm {}

/// Checks one request against several limits and charges it all-or-nothing:
/// it passes only if every limit allows it, and then every limit is charged;
/// if any denies, no state changes.
///
/// `limits` pairs each limiter with its key's state. Each limit's own decision
/// is written to the matching slot of `decisions` (slots beyond its length
/// are skipped; extra slots are left alone); the merged decision
/// ([`Decision::merge`]) is returned. With no limits, the request is allowed.
///
/// When the request is denied, each decision describes the limit as it stands,
/// uncharged: a limit that would have admitted the request says so, with the
/// `remaining` it still has.
///
/// ```
/// use tollgate_core::{check_all, Algorithm, Decision, Limiter, Quota};
///
/// // "10 per minute and at least 2 s apart".
/// let per_minute = Limiter::new(Algorithm::SlidingLog, Quota::per_minute(10));
/// let apart = Limiter::new(Algorithm::Gcra, "1/2s".parse().unwrap());
/// let (mut a, mut b) = (per_minute.new_state(), apart.new_state());
/// let mut out = [Decision::default(); 2];
/// assert!(check_all(&mut [(&per_minute, &mut a), (&apart, &mut b)], 0, 1, &mut out).allowed());
/// let second = check_all(&mut [(&per_minute, &mut a), (&apart, &mut b)], 1_000_000_000, 1, &mut out);
/// assert!(!second.allowed());
/// assert!(out[0].allowed() && !out[1].allowed());
/// ```
pub fn check_all(
    limits: &mut [(&Limiter, &mut State)],
    now: u64,
    cost: u32,
    decisions: &mut [Decision],
) -> Decision {
    // Charges of the first few limits are kept on the stack; beyond that
    // (rare) a limit is evaluated again at commit time, which gives the same
    // answer because nothing changed in between.
    const KEPT: usize = 8;
    let mut charges = [None; KEPT];
    let mut merged: Option<Decision> = None;
    for (i, (limiter, state)) in limits.iter().enumerate() {
        let e = limiter.evaluate(state, now, cost);
        if let Some(slot) = decisions.get_mut(i) {
            *slot = e.0;
        }
        if let Some(kept) = charges.get_mut(i) {
            *kept = e.1;
        }
        merged = Some(merged.map_or(e.0, |m| m.merge(e.0)));
    }
    let Some(merged) = merged else {
        return DecisionFields {
            allowed: true,
            ..DecisionFields::default()
        }
        .into();
    };
    if merged.allowed() {
        for (i, (limiter, state)) in limits.iter_mut().enumerate() {
            let charge = match charges.get(i) {
                Some(kept) => *kept,
                None => limiter.evaluate(state, now, cost).1,
            };
            if let Some(charge) = charge {
                limiter.commit(state, charge);
            }
        }
        merged
    } else if limits.len() > 1 {
        uncharged_view(limits, now, cost, decisions)
    } else {
        merged
    }
}

/// For a request denied by some limit: what every limit holds now, with
/// nothing charged. A limit that would have admitted the request reports
/// `allowed` with its uncharged `remaining` and `reset_after`.
fn uncharged_view(
    limits: &[(&Limiter, &mut State)],
    now: u64,
    cost: u32,
    decisions: &mut [Decision],
) -> Decision {
    let mut merged: Option<Decision> = None;
    for (i, (limiter, state)) in limits.iter().enumerate() {
        let charged = limiter.evaluate(state, now, cost).0;
        let decision = if charged.allowed() {
            limiter.evaluate(state, now, 0).0.with_allowed(true)
        } else {
            charged
        };
        if let Some(slot) = decisions.get_mut(i) {
            *slot = decision;
        }
        merged = Some(merged.map_or(decision, |m| m.merge(decision)));
    }
    merged.unwrap_or_default()
}

/// The units `state` has used under `from` at `now`, as [`used_of`] reads
/// them from a decision for a cost of 0. What a key carries to another
/// quota when its plan changes ([`carried`]).
pub fn used(from: &Limiter, state: &State, now: u64) -> u64 {
    let (decision, _) = from.evaluate(state, now, 0);
    used_of(from, &decision)
}

/// The units a key has used under `from`, read from its decision for a
/// cost of 0 (a peek), as every store reads it when it carries a key to
/// another plan: its limit less what remains, and a debt beyond the limit
/// too (a key debited past its limit, or moved to a smaller plan than it
/// had used), so that a downgrade and a later upgrade keep it, for every
/// algorithm. The algorithms that keep a schedule (GCRA, the continuous
/// token bucket, the leaky bucket) hold a debt as the units their schedule
/// is ahead of now: `reset_after` at the quota's rate, rounded up. The
/// window algorithms say it in [`Decision::over_limit`].
///
/// ```
/// use tollgate_core::{used_of, Algorithm, Limiter, Quota};
///
/// // 8 used of 10; lowered to 5: 3 past the new limit, 8 used still.
/// let ten = Limiter::new(Algorithm::FixedWindow, Quota::per_minute(10));
/// let five = Limiter::new(Algorithm::FixedWindow, Quota::per_minute(5));
/// let mut state = ten.new_state();
/// ten.debit(&mut state, 0, 8);
/// let lowered = tollgate_core::carried(&ten, &state, &five, 0);
/// let (peek, _) = five.evaluate(&lowered, 0, 0);
/// assert_eq!(used_of(&five, &peek), 8);
/// ```
///
/// ```
/// use tollgate_core::{used_of, Algorithm, Limiter, Quota};
///
/// let small = Limiter::new(Algorithm::Gcra, Quota::per_hour(100));
/// let mut state = small.new_state();
/// small.debit(&mut state, 0, 110);
/// let (peek, _) = small.evaluate(&state, 0, 0);
/// assert_eq!(peek.remaining(), 0);
/// assert_eq!(used_of(&small, &peek), 110);
/// ```
pub fn used_of(from: &Limiter, decision: &Decision) -> u64 {
    let within = decision.limit().saturating_sub(decision.remaining());
    let ahead = match from.algorithm() {
        // Only a key with nothing left can be past its limit. The units
        // of the Redis scripts' schedules are their interval rounded up to
        // the microsecond: read in those, a store's reading is never a
        // unit more than it charged (the memory store's, exact to the
        // nanosecond, a unit less at worst once a debt reaches `T` ÷ 1 µs
        // units; the leaky bucket's, whose `reset_after` ends an interval
        // before its schedule does, a unit less whenever `T` is not a
        // whole number of µs).
        Algorithm::Gcra | Algorithm::TokenBucket | Algorithm::LeakyBucket
            if decision.remaining() == 0 =>
        {
            let interval = from.quota().emission_interval_nanos().max(1);
            let unit = interval.div_ceil(1_000).saturating_mul(1_000);
            decision.reset_after_nanos().div_ceil(unit)
        }
        _ => 0,
    };
    within.max(ahead).saturating_add(decision.over_limit())
}

/// A key's state under `to` after its plan changed at `now` from `from`,
/// where its state was `state`: the units it had used under `from` are
/// still used under `to` — a fresh state of `to` charged them at `now`,
/// whatever they exceed ([`Limiter::debit`]) — and come back at `to`'s
/// pace. Every store's `carry` does this (the Redis store with its scripts'
/// peek, reset and debit), the same for every algorithm.
///
/// ```
/// use tollgate_core::{carried, Algorithm, Limiter, Quota};
///
/// let free = Limiter::new(Algorithm::Gcra, Quota::per_minute(5));
/// let pro = Limiter::new(Algorithm::Gcra, Quota::per_minute(100));
/// let mut state = free.new_state();
/// for _ in 0..5 {
///     assert!(free.check(&mut state, 0, 1).allowed());
/// }
/// // Upgraded: the 5 used are still used, 95 of 100 remain.
/// let mut upgraded = carried(&free, &state, &pro, 0);
/// assert_eq!(pro.check(&mut upgraded, 0, 1).remaining(), 94);
/// ```
pub fn carried(from: &Limiter, state: &State, to: &Limiter, now: u64) -> State {
    let units = u32::try_from(used(from, state, now)).unwrap_or(u32::MAX);
    let mut fresh = to.new_state();
    if units > 0 {
        to.debit(&mut fresh, now, units);
    }
    fresh
}

impl Limiter {
    /// `state`, written under `written_under` (a stored state's quota, as a
    /// store recorded it), read under this limiter's quota at `now` as the
    /// same usage: [`carried`] from this limiter over `written_under` (its
    /// options kept) to this one, the definition a plan change follows, so
    /// that a process started with another quota reads a stored state as
    /// a live change would have moved it, raised or lowered, debt included.
    /// The state itself when the quotas are the same.
    ///
    /// ```
    /// use tollgate_core::{Algorithm, Limiter, Quota};
    ///
    /// // 5 used of 5 a minute, read by a process started at 50 a minute.
    /// let old = Limiter::new(Algorithm::Gcra, Quota::per_minute(5));
    /// let mut state = old.new_state();
    /// for _ in 0..5 {
    ///     old.check(&mut state, 0, 1);
    /// }
    /// let new = Limiter::new(Algorithm::Gcra, Quota::per_minute(50));
    /// let mut read = new.read_as(Quota::per_minute(5), &state, 0);
    /// assert_eq!(new.check(&mut read, 0, 1).remaining(), 44);
    /// ```
    pub fn read_as(&self, written_under: Quota, state: &State, now: u64) -> State {
        if written_under == self.quota() {
            return state.clone();
        }
        carried(&self.with_quota(written_under), state, self, now)
    }
}
