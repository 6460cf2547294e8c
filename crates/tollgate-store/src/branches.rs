//! Which store of a composition charged an admission: the [`Branches`] a
//! decision carries through [`Fallback`](super::Fallback)s, so that its
//! refund or debit reaches the store that charged it.

/// Which of a [`Fallback`](super::Fallback)'s two stores decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Branch {
    /// The store asked first.
    Primary,
    /// The store that decided because the first failed.
    Secondary,
}

/// Which store of a composition charged an admission: the branch each
/// [`Fallback`](super::Fallback) took, innermost first. A store that is
/// not a fallback leaves it as it is; the default (no branch taken) is the
/// branches of a store that decides alone.
///
/// A refund or debit carries its admission's branches back down the same
/// composition, so that it reaches the store that charged, never the
/// other: a `Fallback` whose secondary decided during an outage gives
/// back to the secondary, not to the primary that never counted the
/// request.
///
/// An inner fallback that decided with its secondary, inside an outer
/// one that got that answer from its primary, gives `Primary` then
/// `Secondary` when popped (see the tests below).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Branches {
    /// The branches as bits, the outermost lowest (1: the secondary),
    /// above a marker bit: `1` alone is no branch. One word, as a
    /// decision is moved on the request's path.
    bits: u64,
}

impl Default for Branches {
    /// No branch taken: a store that decides alone.
    fn default() -> Self {
        Branches { bits: 1 }
    }
}

impl Branches {
    /// The most branches it keeps. A composition nests fallbacks a
    /// few deep; beyond this many, the outermost branches are not
    /// recorded, and a refund through them goes to the primary.
    pub(crate) const MAX_DEPTH: u8 = 63;

    /// These branches, then `branch` taken by the fallback around it.
    #[must_use]
    pub(crate) fn took(self, branch: Branch) -> Branches {
        if self.depth() >= Self::MAX_DEPTH {
            return self;
        }
        Branches {
            bits: self.marked() << 1 | u64::from(branch == Branch::Secondary),
        }
    }

    /// The branch the outermost fallback took, and the branches below it.
    /// No branch at all answers [`Branch::Primary`]: a decision that passed
    /// through no fallback was made by the store asked first.
    pub(crate) fn pop(self) -> (Branch, Branches) {
        let bits = self.marked();
        if bits == 1 {
            return (Branch::Primary, self);
        }
        let branch = if bits & 1 == 1 {
            Branch::Secondary
        } else {
            Branch::Primary
        };
        (branch, Branches { bits: bits >> 1 })
    }

    /// How many branches it holds.
    fn depth(self) -> u8 {
        // The marker's position: below 64.
        (63 - self.marked().leading_zeros()) as u8
    }

    /// The bits with their marker (zeroed bits, which no constructor
    /// makes, reads as empty).
    fn marked(self) -> u64 {
        self.bits.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_give_back_its_branches_outermost_first() {
        let taken = [
            Branch::Secondary,
            Branch::Primary,
            Branch::Secondary,
            Branch::Secondary,
        ];
        let branches = taken.iter().fold(Branches::default(), |r, b| r.took(*b));
        let mut rest = branches;
        for expected in taken.iter().rev() {
            let (branch, below) = rest.pop();
            assert_eq!(branch, *expected);
            rest = below;
        }
        assert_eq!(rest, Branches::default());
        assert_eq!(rest.pop(), (Branch::Primary, Branches::default()));
    }

    #[test]
    fn branches_deeper_than_their_bound_keep_the_innermost_branches() {
        let mut branches = Branches::default().took(Branch::Secondary);
        for _ in 1..Branches::MAX_DEPTH {
            branches = branches.took(Branch::Primary);
        }
        // One more than it keeps: not recorded.
        let full = branches;
        assert_eq!(full.took(Branch::Secondary), full);
        let mut rest = full;
        for _ in 1..Branches::MAX_DEPTH {
            let (branch, below) = rest.pop();
            assert_eq!(branch, Branch::Primary);
            rest = below;
        }
        assert_eq!(rest.pop().0, Branch::Secondary);
    }
}
