//! The racing kit's checker: whether what one key's callers saw, and what
//! the key's count shows at the end, can be explained by *some* order of
//! the calls decided by the reference algorithm.
//!
//! The race plays checks of cost 1 under day-long quotas, so that nothing
//! refills while it runs: for every algorithm the reference then behaves
//! as a counter that admits while fewer than its capacity `C` are charged
//! (`C`, and the figures a peek shows after `n` admissions, are read off
//! the reference memory store, so bursts and several limits come along).
//! The calls of one key are of four outcomes:
//!
//! - *kept*: admitted, and the caller had the answer (its charge stands);
//! - *refused*: refused, and the caller had the answer;
//! - *failed*: an error the run explains (a restart refused it, or the
//!   caller's deadline passed); it charged nothing;
//! - *given up*: the caller stopped waiting. Heard out (the layer's way,
//!   [`Watched`](tollgate_store::Watched)), an admission it brings is given
//!   back (*given back* counts those); dropped unheard, a write the
//!   backend made in time still charges, and the fault injector counts
//!   those (*unheard*).
//!
//! Some order of the calls explains them if and only if:
//!
//! 1. `kept ≤ C`: the kept charges are all there at the end, so all
//!    there at once;
//! 2. `refused > 0` implies `kept + given back + unheard ≥ C`: a refusal
//!    needs `C` charges standing when it is decided, and those are all
//!    the charges there were;
//! 3. the count at the end, once every late check has been heard out, is
//!    `kept + unheard`, to within the refunds a restart refused (a
//!    refund is best effort: a store that cannot reach its backend keeps
//!    the charge).
//!
//! When no call failed or was given up, 1 and 2 together say that the key
//! admitted exactly `min(C, calls)`.

use std::fmt;

/// What the callers of one key saw.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Tally {
    pub(super) kept: u64,
    pub(super) refused: u64,
    pub(super) failed: u64,
    pub(super) given_up: u64,
    pub(super) given_back: u64,
}

impl Tally {
    pub(super) fn add(&mut self, other: &Tally) {
        self.kept += other.kept;
        self.refused += other.refused;
        self.failed += other.failed;
        self.given_up += other.given_up;
        self.given_back += other.given_back;
    }
}

/// What the fault injector saw of one key (zero without one).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Seen {
    pub(super) unheard: u64,
    pub(super) made_past_deadline: u64,
    pub(super) refused_by_restarts: u64,
}

/// The key's count at the end, as its peek shows it.
#[derive(Clone, Debug)]
pub(super) enum Count {
    /// The peek shows what the reference shows after any of these many
    /// admissions, in order (more than one where the figures cannot tell
    /// them apart: a shaper's first request has left its queue).
    Is(Vec<u64>),
    /// No number of admissions makes the reference show these figures
    /// (each limit's `remaining`).
    Unmatched(Vec<u64>),
}

/// One key's verdict.
pub(super) struct Judged<'a> {
    pub(super) key: &'a str,
    pub(super) capacity: u64,
    pub(super) tally: Tally,
    pub(super) seen: Seen,
    pub(super) count: Count,
    /// Only "never more than the algorithm allows" (a store that may
    /// refuse more, such as the local-first store's reservations).
    pub(super) exact: bool,
}

impl Judged<'_> {
    /// `Ok`, or what went wrong.
    pub(super) fn verdict(&self) -> Result<(), String> {
        let (key, capacity, t, seen) = (self.key, self.capacity, self.tally, self.seen);
        if t.kept > capacity {
            return Err(format!(
                "admitted {} of a limit of {capacity} on key {key:?}: more than any order of \
                 the calls allows (a backend that writes over a newer version, or past a \
                 deadline, would do this)",
                t.kept
            ));
        }
        if !self.exact {
            // A store that reserves ahead (the local-first store) holds
            // counts of its own: what one instance's peek shows is not the
            // callers' count.
            return Ok(());
        }
        let slack = seen.refused_by_restarts.min(t.given_back);
        let most = t.kept + seen.unheard + slack;
        let count = match &self.count {
            // The count the order needs if the figures allow it; else the
            // nearest.
            Count::Is(counts) => counts
                .iter()
                .copied()
                .min_by_key(|n| match *n {
                    n if n < t.kept => t.kept - n,
                    n if n > most => n - most,
                    _ => 0,
                })
                .unwrap_or_default(),
            Count::Unmatched(remaining) => {
                return Err(format!(
                    "on key {key:?} a peek shows remaining {remaining:?}, which no number of \
                     admissions leaves (the callers kept {}; a store that lost count, or wrote \
                     something else, would do this)",
                    t.kept
                ));
            }
        };
        if count < t.kept {
            return Err(format!(
                "on key {key:?} the callers kept {} admissions but its count is {count}: {} \
                 admitted and not counted, more than any order of the calls allows (a backend \
                 that writes over a newer version, so that one admission overwrites another, \
                 would do this)",
                t.kept,
                t.kept - count
            ));
        }
        if count > most {
            let deadline = match seen.made_past_deadline {
                0 => String::new(),
                made => format!(
                    "; the backend made {made} write(s) held until after their deadline: it \
                     ignores `Swap::deadline`"
                ),
            };
            return Err(format!(
                "on key {key:?} {} charge(s) stand that no caller kept: its count is {count} \
                 where the callers kept {}, {} were written in time for callers that stopped \
                 waiting, and restarts may have kept {slack} refund(s) from landing (a check \
                 whose caller stopped waiting stays charged: a backend that writes past a \
                 deadline would do this{deadline})",
                count - most,
                t.kept,
                seen.unheard,
            ));
        }
        if seen.made_past_deadline > 0 {
            return Err(format!(
                "on key {key:?} the backend made {} write(s) that reached it only after their \
                 deadline had passed on its own clock: it ignores `Swap::deadline`, so a check \
                 whose caller stopped waiting, and that nobody hears out, stays charged",
                seen.made_past_deadline
            ));
        }
        let charged = t.kept + t.given_back + seen.unheard;
        if t.refused > 0 && charged < capacity {
            return Err(format!(
                "on key {key:?} {} call(s) were refused after {charged} admission(s) in all, of \
                 a limit of {capacity}: fewer than any order of the calls allows (a store that \
                 counts what it did not admit, or refuses too early, would do this)",
                t.refused
            ));
        }
        Ok(())
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kept {}, refused {}, failed {}, given up {} ({} given back)",
            self.kept, self.refused, self.failed, self.given_up, self.given_back
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(tally: Tally, seen: Seen, count: u64) -> Result<(), String> {
        Judged {
            key: "k",
            capacity: 5,
            tally,
            seen,
            count: Count::Is(vec![count]),
            exact: true,
        }
        .verdict()
    }

    fn kept(kept: u64, refused: u64) -> Tally {
        Tally {
            kept,
            refused,
            ..Tally::default()
        }
    }

    #[test]
    fn orders_that_exist_pass() {
        assert_eq!(judge(kept(5, 3), Seen::default(), 5), Ok(()));
        assert_eq!(judge(kept(3, 0), Seen::default(), 3), Ok(()));
        // Two late admissions given back made room for the refusal.
        let late = Tally {
            given_back: 2,
            given_up: 2,
            ..kept(3, 1)
        };
        assert_eq!(judge(late, Seen::default(), 3), Ok(()));
        // One write made in time for a caller that dropped it.
        let unheard = Seen {
            unheard: 1,
            ..Seen::default()
        };
        assert_eq!(judge(kept(4, 2), unheard, 5), Ok(()));
        // Figures that fit 0 or 1 admissions (a shaper's first request
        // has left): the one the callers kept.
        let either = Judged {
            key: "k",
            capacity: 5,
            tally: kept(1, 0),
            seen: Seen::default(),
            count: Count::Is(vec![0, 1]),
            exact: true,
        };
        assert_eq!(either.verdict(), Ok(()));
    }

    #[test]
    fn orders_that_do_not_exist_fail_naming_why() {
        let over = judge(kept(7, 0), Seen::default(), 7).unwrap_err();
        assert!(over.contains("admitted 7 of a limit of 5"), "{over}");
        let lost = judge(kept(5, 1), Seen::default(), 4).unwrap_err();
        assert!(lost.contains("1 admitted and not counted"), "{lost}");
        let stands = judge(kept(2, 0), Seen::default(), 3).unwrap_err();
        assert!(stands.contains("1 charge(s) stand"), "{stands}");
        let early = judge(kept(3, 1), Seen::default(), 3).unwrap_err();
        assert!(early.contains("refused after 3 admission(s)"), "{early}");
        let held = Seen {
            made_past_deadline: 1,
            ..Seen::default()
        };
        let deadline = judge(kept(2, 0), held, 2).unwrap_err();
        assert!(deadline.contains("ignores `Swap::deadline`"), "{deadline}");
    }
}
