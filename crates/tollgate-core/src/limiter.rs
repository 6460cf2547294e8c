//! [`Limiter`]: an algorithm chosen at run time, and several limits checked
//! as one.

use crate::algorithm::{
    Evaluation, FixedWindow, FixedWindowState, Gcra, GcraState, LeakyBucket, LeakyBucketState,
    LogAdmission, RateAlgorithm, SlidingLog, SlidingLogState, SlidingWindow, SlidingWindowState,
    TokenBucket, TokenBucketState,
};
use crate::{Algorithm, Decision, DecisionFields, Quota};

/// One of the six algorithms with its quota, chosen at run time (from
/// configuration, say). Dispatch is a `match`, not a virtual call.
///
/// ```
/// use tollgate_core::{Algorithm, Limiter, Quota};
///
/// let limiter = Limiter::new(Algorithm::SlidingLog, "2/min".parse().unwrap());
/// let mut state = limiter.new_state();
/// assert!(limiter.check(&mut state, 0, 1).allowed());
/// assert!(limiter.check(&mut state, 0, 1).allowed());
/// assert!(!limiter.check(&mut state, 0, 1).allowed());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limiter {
    /// See [`Gcra`].
    Gcra(Gcra),
    /// See [`TokenBucket`].
    TokenBucket(TokenBucket),
    /// See [`LeakyBucket`].
    LeakyBucket(LeakyBucket),
    /// See [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// See [`SlidingLog`].
    SlidingLog(SlidingLog),
    /// See [`SlidingWindow`].
    SlidingWindow(SlidingWindow),
}

/// A key's state under any [`Limiter`]: at most 32 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// See [`GcraState`].
    Gcra(GcraState),
    /// See [`TokenBucketState`].
    TokenBucket(TokenBucketState),
    /// See [`LeakyBucketState`].
    LeakyBucket(LeakyBucketState),
    /// See [`FixedWindowState`].
    FixedWindow(FixedWindowState),
    /// Boxed, so that the counters' states stay small.
    SlidingLog(Box<SlidingLogState>),
    /// See [`SlidingWindowState`].
    SlidingWindow(SlidingWindowState),
}

/// What [`Limiter::evaluate`] found for an allowed request, to commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The new state of a key whose state is a plain value.
    Replace(ValueState),
    /// An entry to append to a sliding log.
    Log(LogAdmission),
}

/// The states that are plain values, replaced whole on admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ValueState {
    Gcra(GcraState),
    TokenBucket(TokenBucketState),
    LeakyBucket(LeakyBucketState),
    FixedWindow(FixedWindowState),
    SlidingWindow(SlidingWindowState),
}

impl Limiter {
    /// `algorithm` over `quota`.
    pub fn new(algorithm: Algorithm, quota: Quota) -> Self {
        match algorithm {
            Algorithm::Gcra => Limiter::Gcra(Gcra::new(quota)),
            Algorithm::TokenBucket => Limiter::TokenBucket(TokenBucket::new(quota)),
            Algorithm::LeakyBucket => Limiter::LeakyBucket(LeakyBucket::new(quota)),
            Algorithm::FixedWindow => Limiter::FixedWindow(FixedWindow::new(quota)),
            Algorithm::SlidingLog => Limiter::SlidingLog(SlidingLog::new(quota)),
            Algorithm::SlidingWindow => Limiter::SlidingWindow(SlidingWindow::new(quota)),
        }
    }

    /// Delay mode, where the algorithm supports it: GCRA and the
    /// continuous token bucket then admit a request that conforms within
    /// `max_delay`, charge it now, and set [`Decision::wait`] to the time to
    /// hold it; held requests leave in arrival order at the quota's rate. The
    /// leaky bucket always shapes this way (its queue is its burst); the
    /// window algorithms and the interval token bucket have no future slot
    /// to reserve and are returned unchanged.
    pub fn with_max_delay(self, max_delay: std::time::Duration) -> Self {
        match self {
            Limiter::Gcra(g) => Limiter::Gcra(g.with_max_delay(max_delay)),
            Limiter::TokenBucket(t) => Limiter::TokenBucket(t.with_max_delay(max_delay)),
            other => other,
        }
    }

    /// Which algorithm this is.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Limiter::Gcra(_) => Algorithm::Gcra,
            Limiter::TokenBucket(_) => Algorithm::TokenBucket,
            Limiter::LeakyBucket(_) => Algorithm::LeakyBucket,
            Limiter::FixedWindow(_) => Algorithm::FixedWindow,
            Limiter::SlidingLog(_) => Algorithm::SlidingLog,
            Limiter::SlidingWindow(_) => Algorithm::SlidingWindow,
        }
    }

    /// The quota this limiter enforces (for a limiter in delay mode, the
    /// quota it was built from).
    pub fn quota(&self) -> Quota {
        match self {
            Limiter::Gcra(a) => a.quota(),
            Limiter::TokenBucket(a) => a.quota(),
            Limiter::LeakyBucket(a) => a.quota(),
            Limiter::FixedWindow(a) => a.quota(),
            Limiter::SlidingLog(a) => a.quota(),
            Limiter::SlidingWindow(a) => a.quota(),
        }
    }

    /// The most quota units a key can hold at once: the burst (the bucket's
    /// capacity) for GCRA and the token and leaky buckets, the limit for the
    /// window algorithms. [`Decision::remaining`] never exceeds it.
    pub fn capacity(&self) -> u64 {
        match self {
            Limiter::Gcra(_) | Limiter::TokenBucket(_) | Limiter::LeakyBucket(_) => {
                self.quota().burst()
            }
            Limiter::FixedWindow(_) | Limiter::SlidingLog(_) | Limiter::SlidingWindow(_) => {
                self.quota().limit()
            }
        }
    }

    /// The span over which [`capacity`](Self::capacity) is measured, so that
    /// `capacity / window` is the quota's rate: the period for the window
    /// algorithms; for the buckets, the time an empty bucket takes to fill
    /// again at the quota's rate (`burst × period / limit`, rounded up to the
    /// nanosecond; whole periods for the interval token bucket).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_core::{Algorithm, Limiter, Quota};
    ///
    /// let quota = Quota::per_second(10).with_burst(20).unwrap();
    /// let gcra = Limiter::new(Algorithm::Gcra, quota);
    /// assert_eq!((gcra.capacity(), gcra.window()), (20, Duration::from_secs(2)));
    /// let log = Limiter::new(Algorithm::SlidingLog, quota);
    /// assert_eq!((log.capacity(), log.window()), (10, Duration::from_secs(1)));
    /// ```
    pub fn window(&self) -> std::time::Duration {
        let quota = self.quota();
        let (burst, limit) = (u128::from(quota.burst()), u128::from(quota.limit()));
        let period = u128::from(quota.period_nanos());
        let nanos = match self {
            Limiter::TokenBucket(t) if t.refill() == crate::Refill::Interval => {
                burst.div_ceil(limit) * period
            }
            Limiter::Gcra(_) | Limiter::TokenBucket(_) | Limiter::LeakyBucket(_) => {
                (burst * period).div_ceil(limit)
            }
            Limiter::FixedWindow(_) | Limiter::SlidingLog(_) | Limiter::SlidingWindow(_) => period,
        };
        std::time::Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// How long after [`Decision::reset_after`] a key's state may still
    /// differ from a fresh one's: `T − 1` ns for the leaky bucket, which is
    /// whole once the next request's wait is under one interval but must
    /// remember that wait until it has passed, to keep releases evenly
    /// spaced; zero for the others. A store that drops keys at rest keeps
    /// them this much longer.
    pub fn rest_slack(&self) -> std::time::Duration {
        match self {
            Limiter::LeakyBucket(_) => std::time::Duration::from_nanos(
                self.quota().emission_interval_nanos().saturating_sub(1),
            ),
            _ => std::time::Duration::ZERO,
        }
    }

    /// The state of a key never seen.
    pub fn new_state(&self) -> State {
        match self {
            Limiter::Gcra(_) => State::Gcra(Default::default()),
            Limiter::TokenBucket(_) => State::TokenBucket(Default::default()),
            Limiter::LeakyBucket(_) => State::LeakyBucket(Default::default()),
            Limiter::FixedWindow(_) => State::FixedWindow(Default::default()),
            Limiter::SlidingLog(_) => State::SlidingLog(Default::default()),
            Limiter::SlidingWindow(_) => State::SlidingWindow(Default::default()),
        }
    }

    /// Decides a request without changing `state`.
    ///
    /// A `state` made for another algorithm (the configuration changed) is
    /// treated as a key never seen; [`commit`](Self::commit) then replaces it.
    #[inline]
    pub fn evaluate(&self, state: &State, now: u64, cost: u32) -> Evaluation<Admission> {
        fn replace<A: RateAlgorithm>(
            algorithm: &A,
            state: Option<&A::State>,
            now: u64,
            cost: u32,
            wrap: fn(A::Admission) -> ValueState,
        ) -> Evaluation<Admission> {
            let fresh;
            let state = match state {
                Some(state) => state,
                None => {
                    fresh = A::State::default();
                    &fresh
                }
            };
            let e = algorithm.evaluate(state, now, cost);
            Evaluation {
                decision: e.decision,
                admission: e.admission.map(|a| Admission::Replace(wrap(a))),
            }
        }
        match (self, state) {
            (Limiter::Gcra(a), s) => {
                let s = if let State::Gcra(s) = s {
                    Some(s)
                } else {
                    None
                };
                replace(a, s, now, cost, ValueState::Gcra)
            }
            (Limiter::TokenBucket(a), s) => {
                let s = if let State::TokenBucket(s) = s {
                    Some(s)
                } else {
                    None
                };
                replace(a, s, now, cost, ValueState::TokenBucket)
            }
            (Limiter::LeakyBucket(a), s) => {
                let s = if let State::LeakyBucket(s) = s {
                    Some(s)
                } else {
                    None
                };
                replace(a, s, now, cost, ValueState::LeakyBucket)
            }
            (Limiter::FixedWindow(a), s) => {
                let s = if let State::FixedWindow(s) = s {
                    Some(s)
                } else {
                    None
                };
                replace(a, s, now, cost, ValueState::FixedWindow)
            }
            (Limiter::SlidingWindow(a), s) => {
                let s = if let State::SlidingWindow(s) = s {
                    Some(s)
                } else {
                    None
                };
                replace(a, s, now, cost, ValueState::SlidingWindow)
            }
            (Limiter::SlidingLog(a), State::SlidingLog(s)) => {
                let e = a.evaluate(s, now, cost);
                Evaluation {
                    decision: e.decision,
                    admission: e.admission.map(Admission::Log),
                }
            }
            (Limiter::SlidingLog(a), _) => {
                let e = a.evaluate(&SlidingLogState::default(), now, cost);
                Evaluation {
                    decision: e.decision,
                    admission: e.admission.map(Admission::Log),
                }
            }
        }
    }

    /// Applies an admission from [`evaluate`](Self::evaluate).
    #[inline]
    pub fn commit(&self, state: &mut State, admission: Admission) {
        match (self, admission) {
            (_, Admission::Replace(value)) => *state = value.into(),
            (Limiter::SlidingLog(log), Admission::Log(entry)) => {
                if !matches!(state, State::SlidingLog(_)) {
                    *state = self.new_state();
                }
                if let State::SlidingLog(s) = state {
                    log.commit(s, entry);
                }
            }
            // A log admission for another limiter cannot come from
            // `evaluate`; ignoring it keeps the state as it was.
            (_, Admission::Log(_)) => {}
        }
    }

    /// Evaluates and, if allowed, commits.
    #[inline]
    pub fn check(&self, state: &mut State, now: u64, cost: u32) -> Decision {
        // Each algorithm's own `check` where the state matches (some have a
        // faster path than evaluate-then-commit); otherwise the general path,
        // which also replaces a state made for another algorithm.
        match (self, &mut *state) {
            (Limiter::Gcra(a), State::Gcra(s)) => return a.check(s, now, cost),
            (Limiter::TokenBucket(a), State::TokenBucket(s)) => return a.check(s, now, cost),
            (Limiter::LeakyBucket(a), State::LeakyBucket(s)) => return a.check(s, now, cost),
            (Limiter::FixedWindow(a), State::FixedWindow(s)) => return a.check(s, now, cost),
            (Limiter::SlidingLog(a), State::SlidingLog(s)) => return a.check(s, now, cost),
            (Limiter::SlidingWindow(a), State::SlidingWindow(s)) => return a.check(s, now, cost),
            _ => {}
        }
        let e = self.evaluate(state, now, cost);
        if let Some(admission) = e.admission {
            self.commit(state, admission);
        }
        e.decision
    }
}

impl From<ValueState> for State {
    fn from(value: ValueState) -> State {
        match value {
            ValueState::Gcra(s) => State::Gcra(s),
            ValueState::TokenBucket(s) => State::TokenBucket(s),
            ValueState::LeakyBucket(s) => State::LeakyBucket(s),
            ValueState::FixedWindow(s) => State::FixedWindow(s),
            ValueState::SlidingWindow(s) => State::SlidingWindow(s),
        }
    }
}

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
    // Admissions of the first few limits are kept on the stack; beyond that
    // (rare) a limit is evaluated again at commit time, which gives the same
    // answer because nothing changed in between.
    const KEPT: usize = 8;
    let mut admissions = [None; KEPT];
    let mut merged: Option<Decision> = None;
    for (i, (limiter, state)) in limits.iter().enumerate() {
        let e = limiter.evaluate(state, now, cost);
        if let Some(slot) = decisions.get_mut(i) {
            *slot = e.decision;
        }
        if let Some(kept) = admissions.get_mut(i) {
            *kept = e.admission;
        }
        merged = Some(merged.map_or(e.decision, |m| m.merge(e.decision)));
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
            let admission = match admissions.get(i) {
                Some(kept) => *kept,
                None => limiter.evaluate(state, now, cost).admission,
            };
            if let Some(admission) = admission {
                limiter.commit(state, admission);
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
        let charged = limiter.evaluate(state, now, cost).decision;
        let decision = if charged.allowed() {
            limiter.evaluate(state, now, 0).decision.with_allowed(true)
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
