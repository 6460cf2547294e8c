//! Which store of a composition charged an admission: the [`Route`] a
//! decision carries through [`Fallback`](super::Fallback)s, so that its
//! refund or debit reaches the store that charged it.

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
