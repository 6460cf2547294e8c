//! How a limit's budget is shared among the data planes that report it:
//! each gets a token bucket sized to its demand, the demands past what
//! the budget holds cut to one level for all (max-min fairness).
//!
//! A grant of `g` a window comes with a bucket of `burst(g)` = half of it
//! (at least one token), so that a data plane can take a short burst
//! without holding a window's worth at once: the budget of the bursts and
//! rates together is N + K a window (see [`super::ledger`]), so about two
//! thirds of it is refill. A data plane with demand gets at least
//! `(N + K) / (1.5 K)` a window when every data plane wants more, which
//! is more than the N / (2K) the service promises.

use super::ledger::Grant;

/// A data plane's demand is met with this much room to grow (a half
/// more, and one): it is not refused for a small rise before its next
/// report.
fn with_room(demand: u64) -> u64 {
    demand.saturating_add(demand / 2).saturating_add(1)
}

/// The bucket that comes with a grant of `per_window`.
pub(crate) fn grant_of(per_window: u64) -> Grant {
    if per_window == 0 {
        return Grant::DENY;
    }
    Grant {
        burst: per_window.div_ceil(2).max(1),
        per_window,
    }
}

/// What a grant of `per_window` costs the budget: its burst and refill.
fn cost(per_window: u64) -> u64 {
    let grant = grant_of(per_window);
    grant.burst.saturating_add(grant.per_window)
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
            .map(|&want| cost(want.min(level)))
            .fold(0u64, u64::saturating_add)
    };
    // The highest level whose grants fit the budget.
    let (mut low, mut high) = (0u64, wants.iter().copied().max().unwrap_or(0));
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if spent_at(mid) <= budget {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    wants.iter().map(|&want| grant_of(want.min(low))).collect()
}

/// Whether `held` is far enough from `wanted` to be worth replacing: a
/// new bucket costs a full one in the current window, so small changes
/// wait until they add up (a quarter of the grant), while a data plane
/// with nothing, or one that must give some back, changes at once.
pub(crate) fn worth_changing(held: Grant, wanted: Grant) -> bool {
    if held == wanted {
        return false;
    }
    if held.denies() || wanted.denies() || wanted.per_window < held.per_window {
        return true;
    }
    wanted.per_window - held.per_window > held.per_window / 4
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
        let rates: Vec<u64> = grants.iter().map(|g| g.per_window).collect();
        assert_eq!(rates, [16, 1, 61]);
        assert!(total(&grants) <= 300);
    }

    #[test]
    fn demands_over_the_budget_are_cut_to_one_level() {
        // Limit 100, three planes: a budget of 103.
        let grants = shares(&[Some(1_000), Some(5), Some(1_000)], 103);
        assert!(total(&grants) <= 103, "{grants:?}");
        assert_eq!(grants[1].per_window, 8);
        assert_eq!(grants[0], grants[2]);
        // Each busy plane gets more than N / (2K) = 16.
        assert!(grants[0].per_window > 16, "{grants:?}");
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
    fn a_budget_smaller_than_the_planes_denies_some() {
        let grants = shares(&[Some(5), Some(5), Some(5)], 4);
        assert!(total(&grants) <= 4);
    }

    #[test]
    fn small_rises_wait_and_cuts_do_not() {
        let held = grant_of(100);
        assert!(!worth_changing(held, grant_of(120)));
        assert!(worth_changing(held, grant_of(126)));
        assert!(worth_changing(held, grant_of(99)));
        assert!(worth_changing(Grant::DENY, grant_of(1)));
        assert!(!worth_changing(held, held));
    }
}
