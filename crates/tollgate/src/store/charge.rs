//! Charges after the decision: a [`Refund`] gives one back, a [`Debit`]
//! adds to it, both answered with a [`RefundReply`]; the [`Route`] of an
//! admission says which store of a composition charged it, so that both
//! reach that store.

use super::PolicyDecision;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// What [`Store::refund`](super::Store::refund) and
/// [`Store::debit`](super::Store::debit) answer: a charge given back (or
/// added) already, or on its way.
#[must_use = "a pending refund can be awaited; dropping it does not cancel it"]
pub enum RefundReply {
    /// Done (or, for a store that does not refund or debit, nothing to do).
    Done,
    /// Started; the future completes when the refund (or debit) has
    /// landed, or failed, which the store logs. It does not have to be
    /// polled for the change to happen.
    Pending(Pin<Box<dyn Future<Output = ()> + Send>>),
}

impl RefundReply {
    /// Waits for the refund to land.
    pub async fn landed(self) {
        if let RefundReply::Pending(future) = self {
            future.await;
        }
    }
}

impl std::fmt::Debug for RefundReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefundReply::Done => "RefundReply::Done",
            RefundReply::Pending(_) => "RefundReply::Pending(..)",
        })
    }
}

/// Which of a [`Fallback`](super::Fallback)'s two stores decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Branch {
    /// The store asked first.
    Primary,
    /// The store that decided because the first failed.
    Secondary,
}

/// Which store of a composition charged an admission: the branch each
/// [`Fallback`](super::Fallback) took, innermost first. A store that is
/// not a fallback leaves it as it is; the default (no branch taken) is the
/// route of a store that decides alone.
///
/// A refund or debit carries its admission's route back down the same
/// composition, so that it reaches the store that charged, never the
/// other: a `Fallback` whose secondary decided during an outage gives
/// back to the secondary, not to the primary that never counted the
/// request.
///
/// ```
/// use tollgate::store::{Branch, Route};
///
/// // An inner fallback decided with its secondary; the outer one got
/// // that answer from its primary.
/// let route = Route::default().took(Branch::Secondary).took(Branch::Primary);
/// let (outer, rest) = route.pop();
/// assert_eq!(outer, Branch::Primary);
/// assert_eq!(rest.pop().0, Branch::Secondary);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    /// The branches as bits, the outermost lowest (1: the secondary),
    /// above a marker bit: `1` alone is the empty route. One word, as a
    /// decision is moved on the request's path.
    bits: u64,
}

impl Default for Route {
    /// No branch taken: a store that decides alone.
    fn default() -> Self {
        Route { bits: 1 }
    }
}

impl Route {
    /// The most branches a route keeps. A composition nests fallbacks a
    /// few deep; beyond this many, the outermost branches are not
    /// recorded, and a refund through them goes to the primary.
    pub const MAX_DEPTH: u8 = 63;

    /// This route, then `branch` taken by the fallback around it.
    #[must_use]
    pub fn took(self, branch: Branch) -> Route {
        if self.depth() >= Self::MAX_DEPTH {
            return self;
        }
        Route {
            bits: self.marked() << 1 | u64::from(branch == Branch::Secondary),
        }
    }

    /// The branch the outermost fallback took, and the route below it.
    /// An empty route answers [`Branch::Primary`]: a decision that passed
    /// through no fallback was made by the store asked first.
    pub fn pop(self) -> (Branch, Route) {
        let bits = self.marked();
        if bits == 1 {
            return (Branch::Primary, self);
        }
        let branch = if bits & 1 == 1 {
            Branch::Secondary
        } else {
            Branch::Primary
        };
        (branch, Route { bits: bits >> 1 })
    }

    /// How many branches it holds.
    fn depth(self) -> u8 {
        // The marker's position: below 64.
        (63 - self.marked().leading_zeros()) as u8
    }

    /// The bits with their marker (a zeroed route, which no constructor
    /// makes, reads as empty).
    fn marked(self) -> u64 {
        self.bits.max(1)
    }
}

/// A charge to give back: `cost` units that a check admitted `ago` before
/// the refund, with the check's decision. The caller measures `ago` from
/// *before* it called [`Store::check`](super::Store::check), so it is never
/// shorter than the time since the charge; the store takes its own clock
/// less `ago` as the charge's time, which needs no agreement between
/// clocks (a Redis server's and this process's). Each limit's
/// `reset_after` tells the algorithms that keep a schedule where the
/// charge left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refund {
    /// What the check charged.
    pub cost: u32,
    /// How long before the refund the check was called.
    pub ago: Duration,
    /// Each limit's `reset_after` in the admission, in ns, in the policy's
    /// order (empty: unknown; the refund then gives back less once time
    /// has passed).
    pub resets: smallvec::SmallVec<[u64; 2]>,
    /// When the store charged it, on its own clock, as its decision said
    /// ([`PolicyDecision::charged_at`]): then `ago` is not needed, and the
    /// refund is exact.
    pub charged_at: Option<u64>,
    /// Which store of a composition charged it
    /// ([`PolicyDecision::charged_by`]).
    pub charged_by: Route,
}

impl Refund {
    /// The refund of `decision`, an admission of `cost` whose check was
    /// called `ago` before now.
    pub fn of(decision: &PolicyDecision, cost: u32, ago: Duration) -> Self {
        Refund {
            cost,
            ago,
            resets: decision
                .each
                .iter()
                .map(|d| d.reset_after_nanos())
                .collect(),
            charged_at: (decision.charged_at != 0).then_some(decision.charged_at),
            charged_by: decision.charged_by,
        }
    }

    /// The same refund for `cost` units of the charge (a part of it).
    #[must_use]
    pub fn part(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// The core's receipt of this charge for limit `index` of the policy,
    /// on a clock reading `now`.
    pub fn receipt(&self, index: usize, now: u64) -> tollgate_core::Receipt {
        let ago = u64::try_from(self.ago.as_nanos()).unwrap_or(u64::MAX);
        tollgate_core::Receipt {
            at: self.charged_at.unwrap_or(now.saturating_sub(ago)),
            cost: self.cost,
            reset_after: self.resets.get(index).copied(),
        }
    }
}

/// A cost to charge into debt after an admission (see
/// [`Store::debit`](super::Store::debit)): `cost` more units, to the store
/// that charged the admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debit {
    /// The units to charge.
    pub cost: u32,
    /// Which store of a composition charged the admission
    /// ([`PolicyDecision::charged_by`]).
    pub charged_by: Route,
}

impl Debit {
    /// `cost` more units for the admission `decision`.
    pub fn of(decision: &PolicyDecision, cost: u32) -> Self {
        Debit {
            cost,
            charged_by: decision.charged_by,
        }
    }

    /// `cost` more units, for a store that decides alone (no fallback).
    pub fn new(cost: u32) -> Self {
        Debit {
            cost,
            charged_by: Route::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_gives_back_its_branches_outermost_first() {
        let taken = [
            Branch::Secondary,
            Branch::Primary,
            Branch::Secondary,
            Branch::Secondary,
        ];
        let route = taken.iter().fold(Route::default(), |r, b| r.took(*b));
        let mut rest = route;
        for expected in taken.iter().rev() {
            let (branch, below) = rest.pop();
            assert_eq!(branch, *expected);
            rest = below;
        }
        assert_eq!(rest, Route::default());
        assert_eq!(rest.pop(), (Branch::Primary, Route::default()));
    }

    #[test]
    fn a_route_deeper_than_its_bound_keeps_the_innermost_branches() {
        let mut route = Route::default().took(Branch::Secondary);
        for _ in 1..Route::MAX_DEPTH {
            route = route.took(Branch::Primary);
        }
        // One more than it keeps: not recorded.
        let full = route;
        assert_eq!(full.took(Branch::Secondary), full);
        let mut rest = full;
        for _ in 1..Route::MAX_DEPTH {
            let (branch, below) = rest.pop();
            assert_eq!(branch, Branch::Primary);
            rest = below;
        }
        assert_eq!(rest.pop().0, Branch::Secondary);
    }
}
