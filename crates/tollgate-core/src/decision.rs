//! [`Decision`]: the answer to one check.

use std::time::Duration;

/// The outcome of checking one request against one limit.
///
/// A denied request consumes nothing: the state is left exactly as it was.
///
/// A decision answers the question the caller always asks,
/// [`allowed`](Self::allowed), at no further cost; the figures that only
/// some callers read (what is [`remaining`](Self::remaining), when the
/// limit [`replenishes`](Self::replenish_after)) are computed when read,
/// from the few numbers the check already had. [`fields`](Self::fields)
/// computes them all at once.
///
/// ```
/// use tollgate_core::{Decision, Gcra, Quota, RateAlgorithm};
///
/// let gcra = Gcra::new(Quota::per_second(2));
/// let mut state = Default::default();
/// let first: Decision = gcra.check(&mut state, 0, 1);
/// assert!(first.allowed());
/// assert_eq!(first.remaining(), 1);
/// gcra.check(&mut state, 0, 1);
/// let third = gcra.check(&mut state, 0, 1);
/// assert!(!third.allowed());
/// assert_eq!(third.retry_after().as_millis(), 500);
/// ```
#[derive(Clone, Copy)]
pub struct Decision {
    /// [`DecisionFields::limit`].
    limit: u64,
    counts: Counts,
}

/// Where the other figures come from. The spaced forms are what GCRA's
/// check writes: two or three words beside the limit, so that a caller who
/// reads only [`Decision::allowed`] pays for little more than that.
#[derive(Clone, Copy)]
enum Counts {
    /// Computed by the check.
    Known {
        allowed: bool,
        /// Units used past the limit (see [`Decision::over_limit`]),
        /// saturating: it sits beside `allowed` in what would be padding.
        over_limit: u32,
        /// The wait of an allowed request, or the retry time of a denied
        /// one: never both.
        hold: u64,
        remaining: u64,
        reset_after: u64,
        replenish_after: u64,
    },
    /// An allowed request on a limit that gives one unit back every
    /// `interval` ns and tolerates `limit` units at once, whose state lies
    /// `ahead` ns ahead of now after the check (GCRA): the counts, and the
    /// wait (the part of `ahead` beyond the tolerance, in delay mode),
    /// follow from these when read.
    SpacedAllowed { ahead: u64, interval: u64 },
    /// A denied request on such a limit, whose state lies `ahead` ns ahead
    /// of now, which may retry after `retry` ns.
    SpacedDenied {
        ahead: u64,
        interval: u64,
        retry: u64,
    },
}

/// Every figure of a [`Decision`], computed: for building a decision
/// ([`Decision::from`]) and for reading all of one at once
/// ([`Decision::fields`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecisionFields {
    /// Whether the request may pass.
    pub allowed: bool,
    /// The most that `remaining` can ever be: the quota's limit for the
    /// window algorithms, its burst (bucket capacity) for the bucket ones.
    pub limit: u64,
    /// How many more requests of cost 1 would pass right now, after this one.
    pub remaining: u64,
    /// Nanoseconds until the limit is whole again (`remaining == limit`) if
    /// no further request arrives. See [`Decision::reset_after`].
    pub reset_after_nanos: u64,
    /// Nanoseconds until the limit next gives quota back. See
    /// [`Decision::replenish_after`].
    pub replenish_after_nanos: u64,
    /// For a denied request, nanoseconds until a retry of the same cost can
    /// pass; [`Decision::NEVER_NANOS`] when it never can. Ignored (read as
    /// 0) when `allowed`.
    pub retry_after_nanos: u64,
    /// For an allowed request that must be held (the leaky bucket, delay
    /// mode), nanoseconds to hold it before forwarding. Ignored (read as 0)
    /// when not `allowed`.
    pub wait_nanos: u64,
}

impl From<DecisionFields> for Decision {
    #[inline]
    fn from(f: DecisionFields) -> Decision {
        Decision {
            limit: f.limit,
            counts: Counts::Known {
                allowed: f.allowed,
                over_limit: 0,
                hold: if f.allowed {
                    f.wait_nanos
                } else {
                    f.retry_after_nanos
                },
                remaining: f.remaining,
                reset_after: f.reset_after_nanos,
                replenish_after: f.replenish_after_nanos,
            },
        }
    }
}

impl Default for Decision {
    /// A denied decision with every figure 0.
    fn default() -> Decision {
        DecisionFields::default().into()
    }
}

impl PartialEq for Decision {
    /// Decisions are equal when every figure is.
    fn eq(&self, other: &Decision) -> bool {
        self.fields() == other.fields() && self.over_limit() == other.over_limit()
    }
}

impl Eq for Decision {}

impl std::hash::Hash for Decision {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.fields().hash(state);
        self.over_limit().hash(state);
    }
}

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.fields();
        f.debug_struct("Decision")
            .field("allowed", &d.allowed)
            .field("limit", &d.limit)
            .field("remaining", &d.remaining)
            .field("reset_after_nanos", &d.reset_after_nanos)
            .field("replenish_after_nanos", &d.replenish_after_nanos)
            .field("retry_after_nanos", &d.retry_after_nanos)
            .field("wait_nanos", &d.wait_nanos)
            .field("over_limit", &self.over_limit())
            .finish()
    }
}

impl Decision {
    /// What [`retry_after`](Self::retry_after) returns for a request whose
    /// cost exceeds what the limit can ever admit.
    pub const NEVER: Duration = Duration::MAX;

    /// `retry_after_nanos` of a request that can never pass.
    pub const NEVER_NANOS: u64 = u64::MAX;

    /// An allowed decision of a limit that gives one unit back every
    /// `interval` ns and tolerates `limit` units at once, whose state lies
    /// `ahead` ns ahead of now after the check: GCRA's, with its counts
    /// left to be computed when read. The wait is what of `ahead` lies
    /// beyond the tolerance `limit·interval` (delay mode).
    #[inline]
    pub(crate) fn spaced_allowed(limit: u64, interval: u64, ahead: u64) -> Self {
        Decision {
            limit,
            counts: Counts::SpacedAllowed { ahead, interval },
        }
    }

    /// A denied decision of such a limit, whose state lies `ahead` ns ahead
    /// of now, retrying after `retry` ns.
    #[inline]
    pub(crate) fn spaced_denied(limit: u64, interval: u64, ahead: u64, retry: u64) -> Self {
        Decision {
            limit,
            counts: Counts::SpacedDenied {
                ahead,
                interval,
                retry,
            },
        }
    }

    /// Whether the request may pass.
    #[inline]
    pub fn allowed(&self) -> bool {
        match self.counts {
            Counts::Known { allowed, .. } => allowed,
            Counts::SpacedAllowed { .. } => true,
            Counts::SpacedDenied { .. } => false,
        }
    }

    /// The most that [`remaining`](Self::remaining) can ever be: the quota's
    /// limit for the window algorithms, its burst (bucket capacity) for the
    /// bucket ones.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How many more requests of cost 1 would pass right now, after this one.
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.counts().0
    }

    /// `remaining` and `replenish_after_nanos`, which a spaced decision
    /// computes together: one division gives both.
    #[inline]
    fn counts(&self) -> (u64, u64) {
        match self.counts {
            Counts::Known {
                remaining,
                replenish_after,
                ..
            } => (remaining, replenish_after),
            Counts::SpacedAllowed { ahead, interval }
            | Counts::SpacedDenied {
                ahead, interval, ..
            } => {
                let interval = interval.max(1);
                // tolerance = limit·interval ≤ 2^61 (Quota's bound).
                let tolerance = self.limit * interval;
                if ahead > tolerance {
                    // Delay mode: nothing to spare; the next unit is back
                    // once `ahead` falls to (limit − 1)·interval.
                    return (0, ahead - (tolerance - interval));
                }
                let spare = tolerance - ahead;
                let remaining = spare / interval;
                // Whole, or the next unit is back when the part-spent
                // interval of room is whole: `interval − spare mod interval`.
                let replenish = if remaining >= self.limit {
                    0
                } else {
                    interval - spare % interval
                };
                (remaining, replenish)
            }
        }
    }

    /// Nanoseconds until the limit is whole again; see
    /// [`reset_after`](Self::reset_after).
    #[inline]
    pub fn reset_after_nanos(&self) -> u64 {
        match self.counts {
            Counts::Known { reset_after, .. } => reset_after,
            Counts::SpacedAllowed { ahead, .. } | Counts::SpacedDenied { ahead, .. } => ahead,
        }
    }

    /// How long until the limit is whole again (`remaining == limit`) if no
    /// further request arrives.
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_nanos())
    }

    /// Nanoseconds until the limit next gives quota back; see
    /// [`replenish_after`](Self::replenish_after).
    #[inline]
    pub fn replenish_after_nanos(&self) -> u64 {
        self.counts().1
    }

    /// How long until the limit next gives quota back, if no further request
    /// arrives: the end of the window for a fixed window (and the interval
    /// token bucket's next refill); the moment the next unit comes back for
    /// GCRA, the token and leaky buckets and the sliding window; the moment
    /// the oldest admitted request leaves the log for the sliding log, and
    /// the oldest non-empty sub-window leaves the window for the sliding
    /// window buckets. Zero when the limit is whole.
    ///
    /// Never later than [`reset_after`](Self::reset_after), and for a denied
    /// request never later than [`retry_after`](Self::retry_after): a retry
    /// needs at least the first unit back. This is what the `RateLimit`
    /// field's `t` reports.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_core::{Gcra, Quota, RateAlgorithm};
    ///
    /// // 10 per second with a burst of 20: one unit back every 100 ms.
    /// let gcra = Gcra::new(Quota::per_second(10).with_burst(20).unwrap());
    /// let mut state = Default::default();
    /// let first = gcra.check(&mut state, 0, 1);
    /// assert_eq!(first.remaining(), 19);
    /// assert_eq!(first.replenish_after(), Duration::from_millis(100));
    /// assert_eq!(first.reset_after(), Duration::from_millis(100));
    /// let second = gcra.check(&mut state, 0, 1);
    /// assert_eq!(second.replenish_after(), Duration::from_millis(100));
    /// assert_eq!(second.reset_after(), Duration::from_millis(200));
    /// ```
    pub fn replenish_after(&self) -> Duration {
        Duration::from_nanos(self.replenish_after_nanos())
    }

    /// For a denied request, nanoseconds until a retry of the same cost can
    /// pass: 0 when allowed, [`NEVER_NANOS`](Self::NEVER_NANOS) when it
    /// never can.
    #[inline]
    pub fn retry_after_nanos(&self) -> u64 {
        match self.counts {
            Counts::Known {
                allowed: false,
                hold,
                ..
            } => hold,
            Counts::SpacedDenied { retry, .. } => retry,
            _ => 0,
        }
    }

    /// For a denied request, the earliest moment a retry of the same cost can
    /// pass; zero when allowed, [`Decision::NEVER`] when it never can.
    pub fn retry_after(&self) -> Duration {
        if self.can_ever_pass() {
            Duration::from_nanos(self.retry_after_nanos())
        } else {
            Self::NEVER
        }
    }

    /// For an allowed request that must be held (the leaky bucket, delay
    /// mode), nanoseconds to hold it before forwarding; otherwise 0.
    #[inline]
    pub fn wait_nanos(&self) -> u64 {
        match self.counts {
            Counts::Known {
                allowed: true,
                hold,
                ..
            } => hold,
            // tolerance = limit·interval ≤ 2^61 (Quota's bound).
            Counts::SpacedAllowed { ahead, interval } => {
                ahead.saturating_sub(self.limit * interval)
            }
            _ => 0,
        }
    }

    /// How long to hold an allowed request before forwarding it.
    pub fn wait(&self) -> Duration {
        Duration::from_nanos(self.wait_nanos())
    }

    /// Units used past the limit, as far as this decision knows: a debt
    /// (a charge taken past the limit, [`Limiter::debit`](crate::Limiter::debit),
    /// or a plan lowered below what a key had used) that a window
    /// algorithm (fixed window, sliding log, sliding window, sliding
    /// window buckets, interval token bucket) holds, which
    /// [`remaining`](Self::remaining), never below 0, cannot show. Always 0
    /// for the algorithms that keep a schedule (GCRA, the continuous token
    /// bucket, the leaky bucket): their debt shows in
    /// [`reset_after`](Self::reset_after) ([`used_of`](crate::used_of)
    /// reads both). Saturates at `u32::MAX`, the most a charge can carry.
    ///
    /// ```
    /// use tollgate_core::{Algorithm, Limiter, Quota};
    ///
    /// let window = Limiter::new(Algorithm::FixedWindow, Quota::per_minute(5));
    /// let mut state = window.new_state();
    /// window.debit(&mut state, 0, 8);
    /// let (peek, _) = window.evaluate(&state, 0, 0);
    /// assert_eq!((peek.remaining(), peek.over_limit()), (0, 3));
    /// ```
    #[inline]
    pub fn over_limit(&self) -> u64 {
        match self.counts {
            Counts::Known { over_limit, .. } => u64::from(over_limit),
            _ => 0,
        }
    }

    /// This decision saying that `units` are used past the limit (see
    /// [`over_limit`](Self::over_limit)), saturating at `u32::MAX`: what a
    /// window algorithm, or a store reading one's answer, adds to the
    /// figures. A decision in GCRA's spaced form, which holds its debt in
    /// its schedule, is returned as it is.
    #[inline]
    pub fn with_over_limit(mut self, units: u64) -> Decision {
        if let Counts::Known { over_limit, .. } = &mut self.counts {
            *over_limit = u32::try_from(units).unwrap_or(u32::MAX);
        }
        self
    }

    /// Whether a retry of the same cost can ever pass.
    #[inline]
    pub fn can_ever_pass(&self) -> bool {
        self.retry_after_nanos() != Self::NEVER_NANOS
    }

    /// Every figure, computed.
    pub fn fields(&self) -> DecisionFields {
        let (remaining, replenish_after_nanos) = self.counts();
        DecisionFields {
            allowed: self.allowed(),
            limit: self.limit,
            remaining,
            reset_after_nanos: self.reset_after_nanos(),
            replenish_after_nanos,
            retry_after_nanos: self.retry_after_nanos(),
            wait_nanos: self.wait_nanos(),
        }
    }

    /// This decision, allowed or not as `allowed` says, every other figure
    /// kept (a denied decision's retry time and an allowed one's wait read
    /// as 0 once flipped).
    pub fn with_allowed(self, allowed: bool) -> Decision {
        Decision::from(DecisionFields {
            allowed,
            ..self.fields()
        })
        .with_over_limit(self.over_limit())
    }

    /// Folds the decisions of several limits on one request into one: allowed
    /// only if all are, with the smallest `remaining` (and its `limit` and
    /// `replenish_after`) and the longest of each wait; the larger
    /// [`over_limit`](Self::over_limit).
    #[inline]
    pub fn merge(self, other: Decision) -> Decision {
        let (a, b) = (self.fields(), other.fields());
        let smaller = if b.remaining < a.remaining { b } else { a };
        let over_limit = self.over_limit().max(other.over_limit());
        Decision::from(DecisionFields {
            allowed: a.allowed && b.allowed,
            limit: smaller.limit,
            remaining: smaller.remaining,
            reset_after_nanos: a.reset_after_nanos.max(b.reset_after_nanos),
            replenish_after_nanos: smaller.replenish_after_nanos,
            retry_after_nanos: a.retry_after_nanos.max(b.retry_after_nanos),
            wait_nanos: a.wait_nanos.max(b.wait_nanos),
        })
        .with_over_limit(over_limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn a_decision_is_its_figures_however_it_holds_them() {
        // GCRA's form: 5 units of 1 ms, the state 2.5 ms ahead.
        let spaced = Decision::spaced_allowed(5, 1_000_000, 2_500_000);
        let fields = spaced.fields();
        assert_eq!(
            (fields.remaining, fields.replenish_after_nanos),
            (2, 500_000)
        );
        let known = Decision::from(fields);
        assert_eq!(spaced, known);
        let hasher = std::hash::RandomState::new();
        assert_eq!(hasher.hash_one(spaced), hasher.hash_one(known));
        assert_eq!(format!("{spaced:?}"), format!("{known:?}"));

        // Delay mode: 1.5 intervals beyond the tolerance are the wait.
        let delayed = Decision::spaced_allowed(5, 1_000_000, 6_500_000).fields();
        assert_eq!((delayed.allowed, delayed.wait_nanos), (true, 1_500_000));
        assert_eq!(delayed.retry_after_nanos, 0);

        let denied = Decision::spaced_denied(5, 1_000_000, 4_500_000, 700_000);
        let fields = denied.fields();
        assert!(!fields.allowed);
        assert_eq!((fields.retry_after_nanos, fields.wait_nanos), (700_000, 0));
        assert_eq!(fields.remaining, 0);
        assert_eq!(denied, Decision::from(fields));
    }

    #[test]
    fn a_debt_rides_in_what_would_be_padding() {
        // The figure a window's debt needs costs no size: a decision stays
        // as small as it was, and survives the rebuilding methods.
        assert_eq!(std::mem::size_of::<Decision>(), 48);
        let known = Decision::from(DecisionFields {
            limit: 5,
            ..DecisionFields::default()
        })
        .with_over_limit(3);
        assert_eq!(known.over_limit(), 3);
        assert_eq!(known.with_allowed(true).over_limit(), 3);
        assert_eq!(known.merge(Decision::default()).over_limit(), 3);
        assert_ne!(known, known.with_over_limit(0));
        assert_eq!(
            known.with_over_limit(u64::MAX).over_limit(),
            u64::from(u32::MAX)
        );
        // GCRA's form holds its debt in its schedule.
        let spaced = Decision::spaced_denied(5, 1_000, 9_000, 4_000);
        assert_eq!(spaced.with_over_limit(3).over_limit(), 0);
    }

    #[test]
    fn the_retry_time_is_read_only_when_denied_and_the_wait_only_when_allowed() {
        let fields = DecisionFields {
            retry_after_nanos: 7,
            wait_nanos: 9,
            ..DecisionFields::default()
        };
        let denied = Decision::from(fields);
        assert_eq!((denied.retry_after_nanos(), denied.wait_nanos()), (7, 0));
        let allowed = Decision::from(DecisionFields {
            allowed: true,
            ..fields
        });
        assert_eq!((allowed.retry_after_nanos(), allowed.wait_nanos()), (0, 9));
    }
}
