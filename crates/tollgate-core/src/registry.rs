//! The one list of algorithms.
//!
//! [`for_each_algorithm!`](crate::for_each_algorithm) holds the list; every
//! place that must know each algorithm is generated from it: here the
//! [`Algorithm`](crate::Algorithm) enum, the [`Limiter`](crate::Limiter)
//! and its [`State`](crate::State) and [`Charge`](crate::Charge)
//! enums with their dispatch; in `tollgate-redis` the table of Lua files.
//!
//! Adding an algorithm: write its module under `algorithm/` (a type that
//! implements [`RateAlgorithm`](crate::RateAlgorithm), with its state and
//! tests), its Lua file under `tollgate-redis/scripts/`, one line below
//! and its row in the guide's table. `docs/ARCHITECTURE.md` lists the
//! steps.

/// Calls the macro `$then` with the list of algorithms, one line each:
///
/// ```text
/// #[doc = "…"] Variant(Type, StateStorage) = "configuration-name", lua "file_stem", flags…;
/// ```
///
/// `Type` implements [`RateAlgorithm`](crate::RateAlgorithm);
/// `StateStorage` is its state, or a `Box` of it when the state is large;
/// the Lua file is `tollgate-redis/scripts/<file_stem>.lua` (several
/// algorithms may share one). The flags, in this order, each optional:
/// `one_word` — its state is one `u64` ([`PackedState`](crate::PackedState)),
/// so the memory store keeps it in an atomic cell and checks it with a
/// compare-and-swap; `local_first` — its Lua file has the `debit` (and,
/// for a windowed algorithm, the `lapse`) the local-first store needs. The first line is the default algorithm. Other crates call it to build their own
/// per-algorithm tables from the same list.
#[macro_export]
macro_rules! for_each_algorithm {
    ($then:path) => {
        $then! {
            /// Generic cell rate algorithm: a smooth rate with a burst
            /// tolerance, in 8 bytes per key. The default.
            #[default]
            Gcra($crate::Gcra, $crate::GcraState) = "gcra", lua "gcra", one_word, local_first;
            /// A bucket of `burst` tokens refilled continuously, `limit` per
            /// `period` (it admits what GCRA admits, and runs GCRA's script).
            TokenBucket($crate::TokenBucket, $crate::TokenBucketState) = "token-bucket", lua "gcra", local_first;
            /// A bucket of `burst` tokens, `limit` of them back at once at
            /// each period boundary.
            TokenBucketInterval($crate::IntervalTokenBucket, $crate::TokenBucketState) = "token-bucket-interval", lua "token_bucket", local_first;
            /// A shaper: requests leave at a constant rate, a queue of `burst` waits.
            LeakyBucket($crate::LeakyBucket, $crate::LeakyBucketState) = "leaky-bucket", lua "leaky_bucket", one_word;
            /// A counter per period-long window aligned to the clock's origin.
            FixedWindow($crate::FixedWindow, $crate::FixedWindowState) = "fixed-window", lua "fixed_window", local_first;
            /// Exact: the timestamps of every admitted request in the last period.
            SlidingLog($crate::SlidingLog, Box<$crate::SlidingLogState>) = "sliding-log", lua "sliding_log";
            /// Two fixed-window counters weighted into an estimate of the last period.
            SlidingWindow($crate::SlidingWindow, $crate::SlidingWindowState) = "sliding-window", lua "sliding_window", local_first;
            /// A counter per sub-window (60 to a period by default), the
            /// window's sum counting the oldest sub-window whole: never over
            /// the limit in any period.
            SlidingWindowBuckets($crate::SlidingWindowBuckets, $crate::SlidingWindowBucketsState) = "sliding-window-buckets", lua "sliding_window_buckets", local_first;
        }
    };
}

/// Defines `Algorithm`, `Limiter`, `State` and `Charge` from the list.
macro_rules! define_algorithms {
    ($(
        $(#[$doc:meta])*
        $variant:ident($kind:ty, $storage:ty) = $name:literal, lua $lua:literal $(, $flag:ident)*;
    )+) => {
        $(crate::registry::assert_one_word!($storage; $($flag),*);)+

        /// The algorithm kinds, for configuration.
        ///
        /// Parses from (and displays as) its configuration name:
        #[doc = concat!($("`", $name, "` "),+)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub enum Algorithm {
            $($(#[$doc])* $variant,)+
        }

        impl Algorithm {
            /// Every kind, in documentation order.
            pub const ALL: [Algorithm; [$(stringify!($variant)),+].len()] = [$(Algorithm::$variant),+];

            /// The configuration name, e.g. `"token-bucket"`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Algorithm::$variant => $name,)+
                }
            }

            /// The stem of the Lua file a shared store runs it with
            /// (`tollgate-redis/scripts/<stem>.lua`), e.g. `"gcra"` for
            /// the continuous token bucket too.
            pub fn lua(self) -> &'static str {
                match self {
                    $(Algorithm::$variant => $lua,)+
                }
            }

            /// Whether a key's state is one `u64`, kept in an atomic cell
            /// and checked with a compare-and-swap.
            pub fn one_word_state(self) -> bool {
                self.flags().contains(&"one_word")
            }

            /// Whether the local-first store (tollgate-redis) can decide
            /// it.
            pub fn local_first(self) -> bool {
                self.flags().contains(&"local_first")
            }

            /// The registry's flags of this algorithm, as written there.
            #[doc(hidden)]
            pub fn flags(self) -> &'static [&'static str] {
                match self {
                    $(Algorithm::$variant => &[$(stringify!($flag)),*],)+
                }
            }
        }

        /// One of the algorithms with its quota, chosen at run time (from
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
            $(#[doc = concat!("[`Algorithm::", stringify!($variant), "`] with its options.")] $variant($kind),)+
        }

        /// A key's state under any [`Limiter`]: at most 32 bytes (large
        /// states are boxed).
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum State {
            $(#[doc = concat!("The state of [`Limiter::", stringify!($variant), "`].")] $variant($storage),)+
        }

        /// What [`Limiter::evaluate`] found for an allowed request, to
        /// [`commit`](Limiter::commit).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Charge {
            $(#[doc = concat!("A charge of [`Limiter::", stringify!($variant), "`].")] $variant(<$kind as RateAlgorithm>::Charge),)+
        }

        impl Limiter {
            /// `algorithm` over `quota`, with the algorithm's default options.
            pub fn new(algorithm: Algorithm, quota: Quota) -> Self {
                match algorithm {
                    $(Algorithm::$variant => Limiter::$variant(<$kind as RateAlgorithm>::from_quota(quota)),)+
                }
            }

            /// Which algorithm this is.
            pub fn algorithm(&self) -> Algorithm {
                match self {
                    $(Limiter::$variant(_) => Algorithm::$variant,)+
                }
            }

            /// The quota this limiter enforces (for a limiter in delay mode,
            /// the quota it was built from).
            pub fn quota(&self) -> Quota {
                match self {
                    $(Limiter::$variant(a) => a.quota(),)+
                }
            }

            /// This limiter over another quota, its algorithm and options
            /// kept: what reads a state written under `quota`
            /// ([`read_as`](Self::read_as)).
            pub fn with_quota(&self, quota: Quota) -> Limiter {
                match self {
                    $(Limiter::$variant(a) => Limiter::$variant(a.with_quota(quota)),)+
                }
            }

            /// The most quota units a key can hold at once: the burst (the
            /// bucket's capacity) for GCRA and the token and leaky buckets,
            /// the limit for the window algorithms. [`Decision::remaining`]
            /// never exceeds it.
            pub fn capacity(&self) -> u64 {
                match self {
                    $(Limiter::$variant(a) => a.capacity(),)+
                }
            }

            /// The span over which [`capacity`](Self::capacity) is measured,
            /// so that `capacity / window` is the quota's rate: the period
            /// for the window algorithms; for the buckets, the time an empty
            /// bucket takes to fill again at the quota's rate
            /// (`burst × period / limit`, rounded up to the nanosecond;
            /// whole periods for the interval token bucket).
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
            pub fn window(&self) -> Duration {
                match self {
                    $(Limiter::$variant(a) => a.window(),)+
                }
            }

            /// How long after [`Decision::reset_after`] a key's state may
            /// still differ from a fresh one's: `T − 1` ns for the leaky
            /// bucket, which is whole once the next request's wait is under
            /// one interval but must remember that wait until it has passed,
            /// to keep releases evenly spaced; zero for the others. A store
            /// that drops keys at rest keeps them this much longer.
            pub fn rest_slack(&self) -> Duration {
                match self {
                    $(Limiter::$variant(a) => a.rest_slack(),)+
                }
            }

            /// Delay mode, where the algorithm supports it: GCRA and the
            /// continuous token bucket then admit a request that conforms
            /// within `max_delay`, charge it now, and set
            /// [`Decision::wait`] to the time to hold it; held requests
            /// leave in arrival order at the quota's rate. The leaky bucket
            /// always shapes this way (its queue is its burst); the window
            /// algorithms and the interval token bucket have no future slot
            /// to reserve and are returned unchanged.
            pub fn with_max_delay(self, max_delay: Duration) -> Self {
                match self {
                    $(Limiter::$variant(a) => Limiter::$variant(a.with_max_delay(max_delay)),)+
                }
            }

            /// How a shared store's script runs this limiter.
            pub fn script(&self) -> ScriptCall {
                match self {
                    $(Limiter::$variant(a) => a.script(),)+
                }
            }

            /// The state of a key never seen.
            pub fn new_state(&self) -> State {
                match self {
                    $(Limiter::$variant(_) => State::$variant(Default::default()),)+
                }
            }

            /// Decides a request without changing `state`.
            ///
            /// A `state` made for another algorithm (the configuration
            /// changed) is treated as a key never seen;
            /// [`commit`](Self::commit) then replaces it.
            #[inline]
            pub fn evaluate(&self, state: &State, now: u64, cost: u32) -> (Decision, Option<Charge>) {
                match self {
                    $(Limiter::$variant(a) => {
                        let fresh;
                        let state: &<$kind as RateAlgorithm>::State = match state {
                            State::$variant(s) => s,
                            _ => {
                                fresh = Default::default();
                                &fresh
                            }
                        };
                        let e = a.evaluate(state, now, cost);
                        (e.0, e.1.map(Charge::$variant))
                    })+
                }
            }

            /// Applies a charge from [`evaluate`](Self::evaluate). A
            /// state made for another algorithm is replaced by a fresh one
            /// first; a charge made by another limiter (which
            /// `evaluate` never returns) changes nothing.
            #[inline]
            pub fn commit(&self, state: &mut State, charge: Charge) {
                match (self, charge) {
                    $((Limiter::$variant(a), Charge::$variant(charge)) => {
                        if !matches!(state, State::$variant(_)) {
                            *state = self.new_state();
                        }
                        if let State::$variant(s) = state {
                            a.commit(s, charge);
                        }
                    })+
                    #[allow(unreachable_patterns)]
                    _ => {}
                }
            }

            /// Evaluates and, if allowed, commits, like
            /// [`check`](Self::check); for an admission also returns the
            /// [`Refund`](crate::Refund) that a later
            /// [`refund`](Self::refund) needs.
            pub fn charge(
                &self,
                state: &mut State,
                now: u64,
                cost: u32,
            ) -> (Decision, Option<crate::Refund>) {
                let (decision, charge) = self.evaluate(state, now, cost);
                let Some(charge) = charge else {
                    return (decision, None);
                };
                self.commit(state, charge);
                let refund = crate::Refund {
                    at: now,
                    cost,
                    reset_after: Some(decision.reset_after_nanos()),
                };
                (decision, Some(refund))
            }

            /// Gives back, at `now`, the charge `refund` describes, as far
            /// as it still counts (see
            /// [`RateAlgorithm::refund`](crate::RateAlgorithm::refund)). A
            /// state made for another algorithm is left alone.
            pub fn refund(&self, state: &mut State, refund: crate::Refund, now: u64) {
                match (self, state) {
                    $((Limiter::$variant(a), State::$variant(s)) => a.refund(s, refund, now),)+
                    #[allow(unreachable_patterns)]
                    _ => {}
                }
            }

            /// Charges `cost` at `now` whatever the limit says, into debt
            /// if need be (see
            /// [`RateAlgorithm::debit`](crate::RateAlgorithm::debit)). A
            /// state made for another algorithm is replaced by a fresh one
            /// first.
            pub fn debit(&self, state: &mut State, now: u64, cost: u32) {
                match self {
                    $(Limiter::$variant(a) => {
                        if !matches!(state, State::$variant(_)) {
                            *state = self.new_state();
                        }
                        if let State::$variant(s) = state {
                            a.debit(s, now, cost);
                        }
                    })+
                }
            }

            /// Evaluates and, if allowed, commits.
            #[inline]
            pub fn check(&self, state: &mut State, now: u64, cost: u32) -> Decision {
                // Each algorithm's own `check` where the state matches (some
                // have a faster path than evaluate-then-commit); otherwise
                // the general path, which also replaces a state made for
                // another algorithm.
                match (self, &mut *state) {
                    $((Limiter::$variant(a), State::$variant(s)) => return a.check(s, now, cost),)+
                    #[allow(unreachable_patterns)]
                    _ => {}
                }
                let e = self.evaluate(state, now, cost);
                if let Some(charge) = e.1 {
                    self.commit(state, charge);
                }
                e.0
            }
        }
    };
}

pub(crate) use define_algorithms;

/// Fails to compile when a `one_word` algorithm's state is not a
/// [`PackedState`](crate::PackedState): the flag cannot claim what the
/// state does not do.
macro_rules! assert_one_word {
    ($storage:ty; one_word $(, $flag:ident)*) => {
        const _: fn(&$storage) -> u64 = <$storage as $crate::PackedState>::pack;
    };
    ($storage:ty; $($flag:ident),*) => {};
}

pub(crate) use assert_one_word;

#[cfg(test)]
mod tests {
    use crate::{Algorithm, Limiter, Quota};

    /// Each algorithm's own `script()` names the Lua file the registry
    /// gives it, so that the stem is written once where it is chosen.
    #[test]
    fn every_algorithm_runs_the_lua_file_the_registry_names() {
        for algorithm in Algorithm::ALL {
            let limiter = Limiter::new(algorithm, Quota::per_second(10));
            assert_eq!(limiter.script().script, algorithm.lua(), "{algorithm}");
        }
    }

    #[test]
    fn the_registry_writes_only_flags_it_knows_in_their_order() {
        for algorithm in Algorithm::ALL {
            let flags = algorithm.flags();
            let known = ["one_word", "local_first"];
            assert!(flags.iter().all(|f| known.contains(f)), "{flags:?}");
            let mut order: Vec<usize> = flags
                .iter()
                .map(|f| known.iter().position(|k| k == f).unwrap_or(0))
                .collect();
            order.dedup();
            assert!(order.is_sorted() && order.len() == flags.len(), "{flags:?}");
        }
        assert!(Algorithm::Gcra.one_word_state() && Algorithm::Gcra.local_first());
        assert!(!Algorithm::SlidingLog.local_first());
    }
}
