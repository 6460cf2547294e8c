//! What the data planes of one bucket can have admitted in the current
//! window, whatever they did: the ledger that keeps every assignment
//! within the bucket's bound, N + K a window.
//!
//! A data plane enforces its token-bucket assignment on its own, and
//! reports what it admitted only now and then (every 5 s in Envoy), and
//! only how many, not when. So the bound cannot come from the reports; it
//! comes from the assignments. A data plane holding a bucket of `burst`
//! tokens that refills `per_window` tokens a window, continuously (Envoy's
//! token bucket, `fill_interval` = the window), admits within one window
//! at most:
//!
//! - the tokens it held when the window began (at most the burst);
//! - what refilled during the window (`per_window` over a whole window);
//! - what each new bucket brought when it replaced the one before: a
//!   bucket after a blanket rule starts full, and one that replaces a
//!   different bucket starts at the old one's fill ratio in the docs, but
//!   full (unless the old one was empty) in the source read for this
//!   (`createTokenBucketFromAction`, whose `init_fill` is a `bool`); the
//!   ledger counts the worse, a full bucket. A bucket identical to the
//!   one held (`max_tokens`, `tokens_per_fill`, `fill_interval`'s nanos)
//!   keeps its tokens, and costs nothing.
//!
//! The ledger adds up exactly those for each data plane as assignments
//! change ([`Ledger::assign`]), so the sum over the data planes bounds what
//! they can have admitted. An assignment is made only if that sum, with
//! the refill still to come at the rates in force, stays within N + K for
//! this window, and if the rates and bursts in force stay within it for
//! every window after (a window's start finds each bucket at most full).
//!
//! Amounts are kept in token·µs (tokens times the window's length in µs),
//! so that refill over any number of µs is an exact integer.

use std::collections::BTreeMap;

/// What a data plane is told to enforce: a token bucket of `burst` tokens
/// that refills `per_window` tokens a window, or, both 0, nothing
/// admitted (a blanket `DENY_ALL`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The bucket's size, `max_tokens`.
    pub(crate) burst: u64,
    /// Tokens refilled over one window, `tokens_per_fill` with the window
    /// as `fill_interval`.
    pub(crate) per_window: u64,
}

impl Grant {
    /// Nothing admitted: a blanket `DENY_ALL`.
    pub(crate) const DENY: Grant = Grant {
        burst: 0,
        per_window: 0,
    };

    /// Whether the grant admits nothing.
    pub(crate) fn denies(&self) -> bool {
        self.burst == 0
    }

    /// What the grant can admit over a whole window that starts with its
    /// bucket full: its burst and a window's refill.
    fn per_whole_window(&self) -> u128 {
        u128::from(self.burst) + u128::from(self.per_window)
    }
}

/// What a ledger may let its data planes admit beyond one token each,
/// in requests a window: `now` in the current window, `ahead` in the
/// windows after (while the grants in force can still be in force). A
/// process alone over its store may let them admit the rule's N in
/// each; processes that share a limit each hold a part of N, claimed in
/// the shared store (see [`super::claims`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Budget {
    /// The current window's budget.
    pub(crate) now: u64,
    /// The budgets of the windows after it.
    pub(crate) ahead: Ahead,
}

/// The budgets of the windows after the current one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ahead {
    /// The same in every window.
    Each(u64),
    /// Window by window, each as its start (µs) and its budget (shared:
    /// a limit keeps one until its claims change).
    Windows(std::sync::Arc<[(u64, u64)]>),
}

impl Budget {
    /// The same budget in every window.
    pub(crate) fn each(budget: u64) -> Budget {
        Budget {
            now: budget,
            ahead: Ahead::Each(budget),
        }
    }

    /// The least of the windows' budgets after the current one.
    #[cfg(test)]
    pub(crate) fn least_ahead(&self) -> u64 {
        match &self.ahead {
            Ahead::Each(budget) => *budget,
            Ahead::Windows(windows) => windows.iter().map(|(_, b)| *b).min().unwrap_or(0),
        }
    }
}

/// One data plane's account in the current window.
#[derive(Clone, Copy, Debug)]
struct Plane {
    grant: Grant,
    /// What it can have admitted since the window began, up to `at`, in
    /// token·µs.
    spent: u128,
    /// When `spent` was brought up to date, in µs.
    at: u64,
    /// When its stream closed, the moment its last assignment lapses
    /// (after which it is no longer counted, its data plane's own
    /// behaviour then applying); `None` while it reports.
    lapses: Option<u64>,
}

/// The accounts of one bucket's data planes, for windows of `window_us` µs (windows aligned on multiples of it since
/// 1970, as the rate-limit service counts them).
#[derive(Debug)]
pub(crate) struct Ledger<Id> {
    window_us: u64,
    /// The current window's number (`now / window_us`).
    window: u64,
    planes: BTreeMap<Id, Plane>,
}

impl<Id: Ord + Copy> Ledger<Id> {
    /// An empty ledger. A window of 0 µs is taken as 1.
    pub(crate) fn new(window_us: u64) -> Self {
        Ledger {
            window_us: window_us.max(1),
            window: 0,
            planes: BTreeMap::new(),
        }
    }

    /// The bound of the current window: `budget`, and one for each data
    /// plane counted in it, in token·µs.
    #[cfg(test)]
    fn bound(&self, budget: u64) -> u128 {
        let planes = self.planes.len() as u128;
        (u128::from(budget) + planes) * u128::from(self.window_us)
    }

    /// The end of the current window, in µs.
    fn window_end(&self) -> u64 {
        self.window.saturating_add(1).saturating_mul(self.window_us)
    }

    /// Brings every account up to `now` (a time before the last one is
    /// taken as the last one): refill counted at each plane's rate, a new
    /// window begun with each bucket at most full, planes whose last
    /// assignment lapsed before the window began forgotten.
    pub(crate) fn roll(&mut self, now: u64) {
        let window = now / self.window_us;
        if window > self.window {
            let start = window.saturating_mul(self.window_us);
            self.planes
                .retain(|_, plane| plane.lapses.is_none_or(|at| at > start));
            for plane in self.planes.values_mut() {
                plane.spent = u128::from(plane.grant.burst) * u128::from(self.window_us);
                plane.at = start;
            }
            self.window = window;
        }
        for plane in self.planes.values_mut() {
            let until = plane.lapses.map_or(now, |at| at.min(now));
            if until > plane.at {
                plane.spent += u128::from(plane.grant.per_window) * u128::from(until - plane.at);
                plane.at = until;
            }
        }
    }

    /// What the data planes can admit in this window, at most, if their
    /// grants stay as they are, in token·µs: what they can have admitted
    /// so far and the refill still to come.
    fn potential(&self, now: u64) -> u128 {
        let end = self.window_end();
        self.planes
            .values()
            .map(|plane| plane.spent + refill(plane, now, end))
            .sum()
    }

    /// The grant `id` holds now (`None`: not in the ledger).
    pub(crate) fn grant(&self, id: Id) -> Option<Grant> {
        self.planes.get(&id).map(|plane| plane.grant)
    }

    /// How many data planes are counted in this window.
    #[cfg(test)]
    pub(crate) fn planes(&self) -> usize {
        self.planes.len()
    }

    /// Gives `id` (a new data plane, or one already counted) `grant` at
    /// `now`, if the bound holds with it within `budget`; returns whether
    /// it was given.
    /// [`Grant::DENY`] and the grant held are always given; a new data
    /// plane holds `DENY` until it is given another. Any other change costs
    /// a full bucket, so a data plane's grant is best changed seldom.
    pub(crate) fn assign(&mut self, id: Id, grant: Grant, now: u64, budget: &Budget) -> bool {
        self.roll(now);
        let now = now.max(self.window.saturating_mul(self.window_us));
        let old = self.planes.get(&id).copied();
        let held = old.map_or(Grant::DENY, |plane| plane.grant);
        let free = grant.denies() || grant == held;
        if !free && !self.fits(id, grant, now, budget) {
            return false;
        }
        let gain = u128::from(added_tokens(held, grant)) * u128::from(self.window_us);
        let plane = Plane {
            grant,
            spent: old.map_or(0, |plane| plane.spent) + gain,
            at: now,
            lapses: None,
        };
        self.planes.insert(id, plane);
        true
    }

    /// Whether `id` may hold `grant` from `now` (the ledger brought up to
    /// `now` by [`roll`](Self::roll) or [`assign`](Self::assign)): what every data plane can
    /// admit in this window stays within the bound (`budget.now` and one
    /// for each data plane counted in it), and so do the bursts and rates
    /// in force, for the windows after (`budget.ahead` and one for each).
    /// Those count the buckets still in force when the next window
    /// begins, one for each: a data plane that left counts, bucket and
    /// one, until its last assignment lapses (then both go, and a bucket
    /// is at least two tokens a window: burst and refill); one that is
    /// denied takes its one with it.
    pub(crate) fn fits(&self, id: Id, grant: Grant, now: u64, budget: &Budget) -> bool {
        let end = self.window_end();
        let window_us = u128::from(self.window_us);
        let counted = self.planes.len() as u128 + u128::from(!self.planes.contains_key(&id));
        let held = self.planes.get(&id);
        let others = || self.planes.iter().filter(|(other, _)| **other != id);
        let this_window = others()
            .map(|(_, plane)| plane.spent + refill(plane, now, end))
            .sum::<u128>()
            + held.map_or(0, |plane| plane.spent)
            + u128::from(added_tokens(held.map_or(Grant::DENY, |p| p.grant), grant)) * window_us
            + u128::from(grant.per_window) * u128::from(end.saturating_sub(now));
        let candidate = (grant.per_whole_window(), u128::from(!grant.denies()));
        this_window <= (u128::from(budget.now) + counted) * window_us
            && self.ahead_fits(&budget.ahead, Some((id, candidate)))
    }

    /// Whether the buckets in force fit each window's budget of `ahead`
    /// (and one for each bucket in force when it begins), `with` (a data
    /// plane, and what its grant admits a whole window and its one) in
    /// place of that data plane's grant.
    fn ahead_fits(&self, ahead: &Ahead, with: Option<(Id, (u128, u128))>) -> bool {
        let in_force_at = |start: u64| {
            let others = self
                .planes
                .iter()
                .filter(|(id, _)| with.is_none_or(|(with, _)| **id != with));
            others
                .filter(|(_, plane)| in_force_after(plane, start))
                .fold(with.map_or((0, 0), |(_, c)| c), |(sum, n), (_, plane)| {
                    (sum + plane.grant.per_whole_window(), n + 1)
                })
        };
        let fits = |start: u64, budget: u64| {
            let (admit, buckets) = in_force_at(start);
            admit <= u128::from(budget) + buckets
        };
        match ahead {
            Ahead::Each(budget) => fits(self.window_end(), *budget),
            Ahead::Windows(windows) => windows.iter().all(|(start, budget)| fits(*start, *budget)),
        }
    }

    /// What the grants in force need of the current window's budget, in
    /// requests: what the data planes can admit in it, less one for each
    /// counted.
    pub(crate) fn need_now(&self, now: u64) -> u64 {
        let potential = self.potential(now).div_ceil(u128::from(self.window_us));
        let need = potential.saturating_sub(self.planes.len() as u128);
        u64::try_from(need).unwrap_or(u64::MAX)
    }

    /// What the grants in force need of the budget of the window that
    /// starts at `start` (after the current one), in requests: each
    /// bucket still in force then, full at its start and refilled over
    /// it, less one for each (what [`fits`](Self::fits) holds them to).
    pub(crate) fn need_at(&self, start: u64) -> u64 {
        let (admit, buckets) = self
            .planes
            .values()
            .filter(|plane| in_force_after(plane, start))
            .fold((0u128, 0u128), |(sum, n), plane| {
                (sum + plane.grant.per_whole_window(), n + 1)
            });
        u64::try_from(admit.saturating_sub(buckets)).unwrap_or(u64::MAX)
    }

    /// What the buckets of the data planes that left, still in force at
    /// `start`, admit in a window beyond one each: what a server keeps
    /// for them on top of what the data planes that report want.
    pub(crate) fn left_need_at(&self, start: u64) -> u64 {
        let need: u128 = self
            .planes
            .values()
            .filter(|plane| plane.lapses.is_some() && in_force_after(plane, start))
            .map(|plane| plane.grant.per_whole_window().saturating_sub(1))
            .sum();
        u64::try_from(need).unwrap_or(u64::MAX)
    }

    /// What the data planes that left can still admit in the current
    /// window at `now`, beyond one each: their part of
    /// [`need_now`](Self::need_now).
    pub(crate) fn left_need_now(&self, now: u64) -> u64 {
        let end = self.window_end();
        let (potential, planes) = self
            .planes
            .values()
            .filter(|plane| plane.lapses.is_some())
            .fold((0u128, 0u128), |(sum, n), plane| {
                (sum + plane.spent + refill(plane, now, end), n + 1)
            });
        let need = potential
            .div_ceil(u128::from(self.window_us))
            .saturating_sub(planes);
        u64::try_from(need).unwrap_or(u64::MAX)
    }

    /// Denies the data plane with the largest grant that reports, if any
    /// (a blanket deny is always given): what brings the grants in force
    /// back within a budget that fell. Returns it.
    pub(crate) fn deny_largest(&mut self, now: u64) -> Option<Id> {
        let largest = self
            .planes
            .iter()
            .filter(|(_, plane)| plane.lapses.is_none() && !plane.grant.denies())
            .max_by_key(|(_, plane)| plane.grant.per_whole_window())
            .map(|(id, _)| *id)?;
        self.assign(largest, Grant::DENY, now, &Budget::each(0));
        Some(largest)
    }

    /// Whether the buckets in force fit each window's budget of `ahead`
    /// (and one for each bucket in force when it begins).
    pub(crate) fn steady_fits(&self, ahead: &Ahead) -> bool {
        self.ahead_fits(ahead, None)
    }

    /// `id`'s stream closed at `now`: its data plane enforces its last
    /// grant until `lapses` (its assignment's time to live), and is
    /// counted until then.
    pub(crate) fn leave(&mut self, id: Id, now: u64, lapses: u64) {
        self.roll(now);
        if let Some(plane) = self.planes.get_mut(&id) {
            plane.lapses = Some(lapses.max(now));
        }
    }

    /// What can still be granted in this window, in tokens: the bound
    /// less what the data planes can admit at the rates in force.
    #[cfg(test)]
    pub(crate) fn headroom(&mut self, now: u64, budget: u64) -> u64 {
        self.roll(now);
        let left = self.bound(budget).saturating_sub(self.potential(now));
        u64::try_from(left / u128::from(self.window_us)).unwrap_or(u64::MAX)
    }
}

/// Whether `plane` holds a bucket that is still in force at `start`: it
/// reports, or it left and its last assignment lapses after `start` (its
/// data plane enforces it till then, and so it counts in that window,
/// with its one).
fn in_force_after(plane: &Plane, start: u64) -> bool {
    !plane.grant.denies() && plane.lapses.is_none_or(|at| at > start)
}

/// The refill `plane` gets from `now` to `end` at its rate (none after its
/// assignment lapses), in token·µs.
fn refill(plane: &Plane, now: u64, end: u64) -> u128 {
    let until = plane.lapses.map_or(end, |at| at.min(end));
    u128::from(plane.grant.per_window) * u128::from(until.saturating_sub(now))
}

/// The tokens a data plane can be given at once when `new` replaces
/// `old`: none for the same bucket (it keeps its tokens) or a blanket
/// rule, else a full bucket (see the module's docs).
fn added_tokens(old: Grant, new: Grant) -> u64 {
    if new == old || new.denies() {
        0
    } else {
        new.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_tests::envoy_quota::{Assignment, DataPlaneBucket, Replacement, TokenBucket};
    use tollgate_tests::random::Lcg;

    const SECOND: u64 = 1_000_000;

    fn grant(burst: u64, per_window: u64) -> Grant {
        Grant { burst, per_window }
    }

    #[test]
    fn rates_and_bursts_in_force_stay_within_the_limit_and_one_a_plane() {
        // 10 a second, windows of a second.
        let mut ledger = Ledger::new(SECOND);
        let b = Budget::each(10);
        let start = 1_000 * SECOND;
        // One plane: 5 + 5 = 10 ≤ 10 + 1.
        assert!(ledger.assign(1, grant(5, 5), start, &b));
        // A second plane: the bound is 12; 10 + 2 fits, 10 + 3 does not.
        assert!(!ledger.assign(2, grant(2, 1), start + SECOND, &b));
        assert!(ledger.assign(2, grant(1, 1), start + SECOND, &b));
        assert_eq!(ledger.planes(), 2);
        // A blanket deny, and the grant held, are always given.
        assert!(ledger.assign(1, Grant::DENY, start + SECOND, &b));
        assert!(ledger.assign(2, grant(1, 1), start + SECOND, &b));
    }

    #[test]
    fn a_new_bucket_costs_a_full_bucket_in_this_window() {
        // 100 a minute.
        let window = 60 * SECOND;
        let mut ledger = Ledger::new(window);
        let b = Budget::each(100);
        let start = 1_000 * window;
        // At the window's start: 20 held, 20 to refill over the window.
        assert!(ledger.assign(1, grant(20, 20), start, &b));
        assert_eq!(ledger.headroom(start, b.now), 101 - 40);
        // Half way: 10 refilled so far, 10 to come. A bucket of 40 comes
        // full (40 at once), and doubles the rate for the half window left
        // (10 more).
        assert!(ledger.assign(1, grant(40, 40), start + window / 2, &b));
        assert_eq!(
            ledger.headroom(start + window / 2, b.now),
            101 - 30 - 40 - 20
        );
        // Even a smaller bucket comes full: 10 more, though the rate falls.
        assert!(ledger.assign(1, grant(10, 10), start + window / 2, &b));
        assert_eq!(
            ledger.headroom(start + window / 2, b.now),
            101 - 30 - 40 - 10 - 5
        );
        // The next window: a full bucket of 10 and 10 to refill.
        assert_eq!(ledger.headroom(start + window, b.now), 101 - 20);
    }

    #[test]
    fn a_bucket_after_a_blanket_rule_starts_full() {
        let window = 60 * SECOND;
        let mut ledger = Ledger::new(window);
        let b = Budget::each(100);
        let start = 1_000 * window;
        assert!(ledger.assign(1, grant(30, 30), start, &b));
        assert!(ledger.assign(1, Grant::DENY, start + window / 2, &b));
        // 30 at the start and 15 refilled before the deny.
        assert_eq!(ledger.headroom(start + window / 2, b.now), 101 - 45);
        // Back to a bucket of 30: full at once, and 15 of refill to come.
        assert!(ledger.assign(1, grant(30, 30), start + window / 2, &b));
        assert_eq!(
            ledger.headroom(start + window / 2, b.now),
            101 - 45 - 30 - 15
        );
        // 11 left: even a bucket of 10 (10 at once, and 5 of refill where
        // 15 were counted) fits; one of 20 does not.
        assert!(!ledger.assign(1, grant(20, 20), start + window / 2, &b));
        assert_eq!(ledger.grant(1), Some(grant(30, 30)));
        assert!(ledger.assign(1, grant(10, 10), start + window / 2, &b));
    }

    #[test]
    fn a_plane_that_left_counts_until_its_assignment_lapses() {
        let window = 10 * SECOND;
        let mut ledger = Ledger::new(window);
        let b = Budget::each(100);
        let start = 1_000 * window;
        assert!(ledger.assign(1, grant(10, 10), start, &b));
        assert!(ledger.assign(2, grant(10, 10), start, &b));
        // Plane 2 leaves at once; its assignment lapses 15 s later.
        ledger.leave(2, start, start + 15 * SECOND);
        // This window: both count whole (102 − 40).
        assert_eq!(ledger.headroom(start, b.now), 102 - 40);
        // The next: plane 2 starts full, refills until it lapses half way.
        assert_eq!(ledger.headroom(start + window, b.now), 102 - 20 - 10 - 5);
        // The one after: plane 2 is gone, and so is its one of the bound.
        assert_eq!(ledger.headroom(start + 2 * window, b.now), 101 - 20);
        assert_eq!(ledger.planes(), 1);
    }

    /// A data plane that left still enforces its bucket until it lapses:
    /// a grant given late in a window, cheap in it, must leave room for
    /// that bucket in the next.
    #[test]
    fn a_plane_that_left_counts_in_the_windows_before_it_lapses() {
        let mut ledger = Ledger::new(SECOND);
        let b = Budget::each(100);
        let start = 10 * SECOND;
        assert!(ledger.assign(1, grant(1, 49), start, &b));
        assert!(ledger.assign(2, grant(3, 5), start, &b));
        ledger.leave(1, start + SECOND / 2, start + 15 * SECOND + SECOND / 2);
        // Late in window 11: a bucket of 93 would fit this window, but
        // not the next, where plane 1's 50 and plane 2's 8 are in force.
        let late = start + SECOND + 9 * SECOND / 10;
        assert!(!ledger.fits(3, grant(1, 93), late, &b));
        // 50 + 8 + 1 + 44 = 103: the budget and one for each of three.
        assert!(ledger.fits(3, grant(1, 44), late, &b));
        assert!(!ledger.fits(3, grant(1, 45), late, &b));
    }

    /// The data planes' assignment, as the filter builds its bucket.
    fn assignment(grant: Grant, window_us: u64) -> Assignment {
        if grant.denies() {
            return Assignment::DenyAll;
        }
        Assignment::TokenBucket(TokenBucket {
            max_tokens: u32::try_from(grant.burst).unwrap(),
            tokens_per_fill: u32::try_from(grant.per_window).unwrap(),
            fill_interval_us: window_us,
        })
    }

    /// Data planes that take every token their buckets give at random
    /// moments, saving them at others, and at each window's edges, under grants proposed at random
    /// and given only where the ledger allows, some of them leaving (their
    /// last grant enforced until it lapses): in every window they admit
    /// at most N + K together (K the data planes whose grant had not
    /// lapsed when the window began), under either reading of how Envoy
    /// replaces a bucket.
    #[test]
    fn greedy_data_planes_never_admit_more_than_the_bound_in_a_window() {
        let mut admitted_at_all = 0;
        for seed in 0..1000u64 {
            let mut rng = Lcg(seed);
            let limit = 1 + rng.below(200);
            let window_us = (1 + rng.below(60)) * SECOND;
            let planes = 1 + rng.below(5) as usize;
            let replacement = match seed % 2 {
                0 => Replacement::FullUnlessEmpty,
                _ => Replacement::KeepRatio,
            };
            let mut ledger = Ledger::new(window_us);
            let b = Budget::each(limit);
            let mut model: Vec<DataPlaneBucket> = (0..planes)
                .map(|_| DataPlaneBucket::new(replacement))
                .collect();
            let forever = 1_000_000 * window_us;
            let mut now = 1_000 * window_us + rng.below(window_us);
            for (id, plane) in model.iter_mut().enumerate() {
                assert!(ledger.assign(id, Grant::DENY, now, &b));
                plane.assign(Assignment::DenyAll, forever, now);
            }
            let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
            // When each plane's last grant lapses, once it has left.
            let mut lapses: Vec<Option<u64>> = vec![None; planes];
            // The planes of `takers` (a bit each) take every token they
            // can at `at`; the others save theirs.
            let take_all = |model: &mut Vec<DataPlaneBucket>,
                            counts: &mut BTreeMap<u64, u64>,
                            lapses: &[Option<u64>],
                            takers: u64,
                            at: u64| {
                for (index, (plane, lapse)) in model.iter_mut().zip(lapses).enumerate() {
                    // A data plane gone for good takes nothing after its
                    // grant lapses (one still running would fall back to
                    // its own behaviour, which no service bounds).
                    if takers & (1 << index) == 0 || lapse.is_some_and(|lapse| at >= lapse) {
                        continue;
                    }
                    for _ in 0..10 * limit + 10 {
                        if !plane.request(at) {
                            break;
                        }
                        *counts.entry(at / window_us).or_default() += 1;
                    }
                }
            };
            for _ in 0..300 {
                let next = now + rng.below(window_us / 3 + 1);
                // Each window's last µs and first: a plane that saved its
                // tokens spends them on one side of the edge or the other.
                let edge = (now / window_us + 1) * window_us;
                if edge <= next {
                    let before = rng.below(1 << planes);
                    take_all(&mut model, &mut counts, &lapses, before, edge - 1);
                    take_all(&mut model, &mut counts, &lapses, u64::MAX, edge);
                }
                now = next;
                let id = rng.below(planes as u64) as usize;
                if lapses[id].is_some() {
                    continue;
                }
                if rng.below(8) == 0 {
                    let lapse = now + rng.below(20 * window_us);
                    ledger.leave(id, now, lapse);
                    lapses[id] = Some(lapse);
                    continue;
                }
                let most = 2 * limit / planes as u64 + 2;
                let proposed = match rng.below(5) {
                    0 | 1 => Grant {
                        burst: 1 + rng.below(most),
                        per_window: 1 + rng.below(most),
                    },
                    2 => Grant::DENY,
                    3 => ledger.grant(id).unwrap(),
                    // The largest even grant that fits: the bound reached.
                    _ => (1..=most)
                        .rev()
                        .map(|n| Grant {
                            burst: n,
                            per_window: n,
                        })
                        .find(|&grant| {
                            ledger.fits(id, grant, now.max(ledger.window * window_us), &b)
                        })
                        .unwrap_or(Grant::DENY),
                };
                if ledger.assign(id, proposed, now, &b) {
                    model[id].assign(assignment(proposed, window_us), forever, now);
                }
                let takers = rng.below(1 << planes);
                take_all(&mut model, &mut counts, &lapses, takers, now);
            }
            for (window, count) in &counts {
                let start = window * window_us;
                let counted = lapses
                    .iter()
                    .filter(|l| l.is_none_or(|l| l > start))
                    .count();
                assert!(
                    *count <= limit + counted as u64,
                    "seed {seed}: {count} admitted in window {window}, over {limit} + {counted} \
                     ({replacement:?})"
                );
                admitted_at_all += count;
            }
        }
        // Not a vacuous bound: the planes did admit.
        assert!(admitted_at_all > 10_000, "{admitted_at_all}");
    }
}
