//! How a limit's budget is shared among the data planes that report it:
//! each gets a token bucket sized to its demand, the demands past what
//! the budget holds cut to one level for all (max-min fairness).
//!
//! The budget is N + K a window for the bursts and the refill together
//! (see [`super::ledger`]). A data plane whose demand is met gets a
//! burst of half its refill, to absorb a short rush without holding a
//! window's worth at once; one cut to the level gets a burst of one
//! token: it takes every token as it comes, so a burst would only cost
//! refill. When every data plane wants more than the budget, each gets
//! `(N + K) / K − 1` a window, more than the N / (2K) promised, and
//! together they admit about N.

use super::ledger::Grant;

/// A data plane's demand is met with this much room to grow (a half
/// more, and one): it is not refused for a small rise before its next
/// report.
pub(crate) fn with_room(demand: u64) -> u64 {
    demand.saturating_add(demand / 2).saturating_add(1)
}

/// The bucket of a data plane whose demand of `per_window` is met: half
/// of it as a burst.
pub(crate) fn met(per_window: u64) -> Grant {
    if per_window == 0 {
        return Grant::DENY;
    }
    Grant {
        burst: per_window.div_ceil(2),
        per_window,
    }
}

/// The bucket of a data plane cut to `per_window`: a burst of one.
pub(crate) fn cut(per_window: u64) -> Grant {
    if per_window == 0 {
        return Grant::DENY;
    }
    Grant {
        burst: 1,
        per_window,
    }
}

/// The grant of a data plane that wants `want` when the level is
/// `level`.
fn at_level(want: u64, level: u64) -> Grant {
    if want <= level { met(want) } else { cut(level) }
}

/// The grants of data planes whose demands (requests a window, `None`:
/// not yet known, taken as a fair share) are `demands`, within `budget`
/// (bursts and refill together): each its demand with room to grow, cut
/// to the level at which the budget is spent.
pub(crate) fn shares(demands: &[Option<u64>], budget: u64) -> Vec<Grant> {
    let planes = demands.len() as u64;
    if planes == 0 {
        return Vec::new();
    }
    // An unknown demand: what an even split would give.
    let fair = budget / planes * 2 / 3;
    let wants: Vec<u64> = demands
        .iter()
        .map(|demand| demand.map_or(fair.max(1), with_room))
        .collect();
    let spent_at = |level: u64| -> u64 {
        wants
            .iter()
            .map(|&want| {
                let grant = at_level(want, level);
                grant.burst.saturating_add(grant.per_window)
            })
            .fold(0u64, u64::saturating_add)
    };
    // The highest level whose grants fit the budget (what a level spends
    // never falls as it rises).
    let (mut low, mut high) = (0u64, wants.iter().copied().max().unwrap_or(0));
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if spent_at(mid) <= budget {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    wants.iter().map(|&want| at_level(want, low)).collect()
}

/// A grant like `like` (a met demand's burst, or a cut one's) of
/// `per_window` instead.
pub(crate) fn like(like: Grant, per_window: u64) -> Grant {
    if like.burst <= 1 && like.per_window > 1 {
        cut(per_window)
    } else {
        met(per_window)
    }
}

/// Whether `held` is far enough from `wanted` to be worth replacing: a
/// new bucket costs a full one in the current window, so changes wait
/// until they add up (a quarter of the refill, or of the budget the
/// bucket takes, either way), unless the data plane holds nothing, is to
/// hold nothing, or others wait for what it would give up (`pressed`:
/// a data plane holds much less than it wants, see [`squeezed`]).
pub(crate) fn worth_changing(held: Grant, wanted: Grant, pressed: bool) -> bool {
    if held == wanted {
        return false;
    }
    if held.denies() || wanted.denies() {
        return true;
    }
    let (held_cost, wanted_cost) = (cost(held), cost(wanted));
    if pressed && wanted_cost < held_cost {
        return true;
    }
    held.per_window.abs_diff(wanted.per_window) > held.per_window / 4
        || held_cost.abs_diff(wanted_cost) > held_cost / 4
}

/// Whether a data plane holding `held` is far under what it should
/// have, `wanted` (nothing at all, or a quarter less): the others give
/// up what they hold past their own share.
pub(crate) fn squeezed(held: Grant, wanted: Grant) -> bool {
    !wanted.denies()
        && (held.denies()
            || held.per_window.saturating_add(held.per_window / 4) < wanted.per_window)
}

/// What a grant takes of the budget: its burst and its refill.
pub(crate) fn cost(grant: Grant) -> u64 {
    grant.burst.saturating_add(grant.per_window)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(grants: &[Grant]) -> u64 {
        grants.iter().map(|g| g.burst + g.per_window).sum()
    }

    #[test]
    fn demands_under_the_budget_are_met_with_room() {
        let grants = shares(&[Some(10), Some(0), Some(40)], 300);
        assert_eq!(grants, [met(16), met(1), met(61)]);
        assert_eq!(grants[0].burst, 8);
        assert!(total(&grants) <= 300);
    }

    #[test]
    fn demands_over_the_budget_are_cut_to_one_level() {
        // Limit 100, three planes: a budget of 103.
        let grants = shares(&[Some(1_000), Some(5), Some(1_000)], 103);
        assert!(total(&grants) <= 103, "{grants:?}");
        assert_eq!(grants[1], met(8));
        // The busy planes: cut to one level, a burst of one, and between
        // them what the budget has left (103 − 12 = 91, 44 each).
        assert_eq!(grants[0], cut(44));
        assert_eq!(grants[0], grants[2]);
    }

    #[test]
    fn unknown_demands_get_an_even_share() {
        let grants = shares(&[None, None, None, None], 104);
        assert!(total(&grants) <= 104);
        assert!(grants.iter().all(|g| *g == grants[0]));
        // N / (2K) = 12.5: met.
        assert!(grants[0].per_window >= 13, "{grants:?}");
    }

    #[test]
    fn every_plane_over_the_budget_gets_nearly_n_over_k() {
        // Limit 30, three planes that want far more: (30 + 3) / 3 − 1.
        let grants = shares(&[Some(500), Some(500), Some(500)], 33);
        assert_eq!(grants, [cut(10), cut(10), cut(10)]);
    }

    #[test]
    fn a_budget_smaller_than_the_planes_denies_some() {
        let grants = shares(&[Some(5), Some(5), Some(5)], 4);
        assert!(total(&grants) <= 4);
    }

    #[test]
    fn small_changes_wait_unless_others_wait() {
        let held = met(100);
        assert!(!worth_changing(held, met(120), false));
        assert!(worth_changing(held, met(126), false));
        assert!(!worth_changing(held, met(80), false));
        assert!(worth_changing(held, met(74), false));
        assert!(worth_changing(held, met(99), true));
        // The same refill with a smaller burst: a quarter of the budget
        // it takes comes back.
        assert!(worth_changing(met(10), cut(10), false));
        assert!(squeezed(cut(4), cut(10)));
        assert!(!squeezed(cut(9), cut(10)));
        assert!(squeezed(Grant::DENY, cut(1)));
        assert!(worth_changing(Grant::DENY, met(1), false));
        assert!(worth_changing(held, Grant::DENY, false));
        assert!(!worth_changing(held, held, true));
    }
}
