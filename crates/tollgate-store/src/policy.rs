//! Named limits, and the policy: the limits one layer charges together.

use crate::ConfigError;
use crate::observe::PolicyMetrics;
use crate::prepared::{Prepared, PreparedForms};
use smallvec::SmallVec;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tollgate_core::{Algorithm, Decision, Gcra, LeakyBucket, Limiter, Quota, State, check_atomic};

/// One limit with a name: the name appears in the `RateLimit-Policy` and
/// `RateLimit` headers, in logs and in metrics.
///
/// ```
/// use tollgate_store::NamedLimit;
/// use tollgate_core::{Algorithm, Quota};
///
/// let burst = NamedLimit::new("burst", Quota::per_second(10)).with_algorithm(Algorithm::TokenBucket);
/// assert_eq!(burst.name(), "burst");
/// assert!(NamedLimit::try_new("my \"api\"", Quota::per_second(10)).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedLimit {
    name: Arc<str>,
    /// Holds the quota too: one source for what the memory store enforces
    /// and what headers and Redis scripts are told.
    limiter: Limiter,
    /// Whether the limit only counts (see [`NamedLimit::shadow`]).
    shadow: bool,
}

impl NamedLimit {
    /// A GCRA limit called `name`.
    ///
    /// # Panics
    ///
    /// If `name` is not a short token (1 to 64 letters, digits, `-`, `_`,
    /// `.`): it is written into response headers, where a quote or a
    /// non-ASCII character would break them. For names from configuration,
    /// use [`try_new`](Self::try_new).
    pub fn new(name: impl Into<Arc<str>>, quota: Quota) -> Self {
        match Self::try_new(name, quota) {
            Ok(limit) => limit,
            Err(error) => panic!("{error}"),
        }
    }

    /// A GCRA limit called `name`, or an error naming it if the name is
    /// not a short token (1 to 64 letters, digits, `-`, `_`, `.`).
    pub fn try_new(name: impl Into<Arc<str>>, quota: Quota) -> Result<Self, ConfigError> {
        let name = name.into();
        if !is_token(&name) {
            return Err(ConfigError::new(format!(
                "{name:?} is not a limit name: use 1 to 64 letters, digits, `-`, `_` or `.` \
                 (names are written into the RateLimit headers)"
            )));
        }
        Ok(NamedLimit {
            name,
            limiter: Limiter::new(Algorithm::default(), quota),
            shadow: false,
        })
    }

    /// The same limit in *shadow*: decided and counted exactly as if it
    /// were enforced, but never refusing. A rate-limit layer checks its
    /// shadow limits, together and apart from the enforced ones, for
    /// every request the enforced limits admit; a request they would have
    /// refused passes, uncharged in them (as a refused request is), and
    /// is counted (`decision="shadow_limited"` with the `metrics` feature)
    /// and logged at most once per [`SHADOW_LOG_INTERVAL`](crate::SHADOW_LOG_INTERVAL)
    /// per limit. Responses never show a shadow limit: no field, no
    /// `Retry-After`. Roll a new limit out this way, then drop `.shadow()`.
    ///
    /// ```
    /// use tollgate::RateLimitLayer;
    /// use tollgate_store::NamedLimit;
    /// use tollgate_core::Quota;
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .limit(NamedLimit::new("api", Quota::per_minute(100)))
    ///     // What a tighter limit would do, watched before it is enforced.
    ///     .limit(NamedLimit::new("api-next", Quota::per_minute(20)).shadow())
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn shadow(self) -> Self {
        NamedLimit {
            shadow: true,
            ..self
        }
    }

    /// Whether the limit is in shadow (see [`shadow`](Self::shadow)).
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The same limit with another algorithm.
    pub fn with_algorithm(self, algorithm: Algorithm) -> Self {
        NamedLimit {
            limiter: Limiter::new(algorithm, self.quota()),
            ..self
        }
    }

    /// The same limit with a limiter built by hand (a token bucket with
    /// interval refill, say). The limit's quota becomes the limiter's.
    pub fn with_limiter(self, limiter: Limiter) -> Self {
        NamedLimit { limiter, ..self }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, shared: a metrics label without a copy per request.
    #[doc(hidden)]
    pub fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.limiter.quota()
    }

    /// The algorithm and its precomputed constants.
    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }
}

/// The limits a layer applies to every request, charged all-or-nothing, with
/// an identity that keeps its counters apart from other policies' in a shared
/// store.
#[derive(Debug)]
pub struct Policy {
    id: u64,
    limits: Vec<NamedLimit>,
    limiters: Vec<Limiter>,
    packed: Option<PackedLimiter>,
    /// The longest [`Limiter::rest_slack`] of the limits, in nanoseconds.
    rest_slack_nanos: u64,
    label: String,
    metrics: PolicyMetrics,
    /// What stores prepared from the policy; see [`Policy::prepared`].
    prepared: PreparedForms,
    /// See [`Policy::plan`].
    plan: Option<u64>,
    /// Failures reported since the store last answered a request of this
    /// policy ([`report_failure`](crate::report_failure),
    /// [`report_answer`](crate::report_answer)).
    pub(crate) outage: crate::outage::Outage,
}

/// A fingerprint of `limits` (names, algorithms, quotas) that every
/// process and build computes alike (FNV-1a over their parameters, not
/// std's hasher, whose algorithm may change): instances sharing a store
/// name a plan's state the same way.
pub fn plan_fingerprint(limits: &[NamedLimit]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(PRIME);
        }
    };
    for limit in limits {
        let quota = limit.limiter().quota();
        feed(limit.name().as_bytes());
        feed(&[0]);
        feed(limit.limiter().algorithm().name().as_bytes());
        feed(&[0]);
        feed(&quota.limit().to_le_bytes());
        feed(&quota.period_nanos().to_le_bytes());
        feed(&quota.burst().to_le_bytes());
    }
    hash
}

/// A policy of one limit whose per-key state is a single `u64`, which a
/// store can keep in an atomic and update with a compare-and-swap.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PackedLimiter {
    Gcra(Gcra),
    LeakyBucket(LeakyBucket),
}

impl PackedLimiter {
    fn of(limiters: &[Limiter]) -> Option<Self> {
        match limiters {
            [Limiter::Gcra(gcra)] => Some(PackedLimiter::Gcra(*gcra)),
            [Limiter::LeakyBucket(bucket)] => Some(PackedLimiter::LeakyBucket(*bucket)),
            _ => None,
        }
    }

    /// Checks a request against the state in `cell`. The cell's value is
    /// also the moment the key is back at rest.
    #[inline]
    pub(crate) fn check(&self, cell: &AtomicU64, now: u64, cost: u32) -> Decision {
        match self {
            PackedLimiter::Gcra(gcra) => check_atomic(gcra, cell, now, cost),
            PackedLimiter::LeakyBucket(bucket) => check_atomic(bucket, cell, now, cost),
        }
    }

    /// Gives back a charge to the state in `cell`.
    pub(crate) fn refund(&self, cell: &AtomicU64, refund: tollgate_core::Refund, now: u64) {
        match self {
            PackedLimiter::Gcra(gcra) => tollgate_core::refund_atomic(gcra, cell, refund, now),
            PackedLimiter::LeakyBucket(bucket) => {
                tollgate_core::refund_atomic(bucket, cell, refund, now)
            }
        }
    }
}

impl PackedLimiter {
    /// Charges `cost` whatever the limit says, to the state in `cell`.
    pub(crate) fn debit(&self, cell: &AtomicU64, now: u64, cost: u32) {
        match self {
            PackedLimiter::Gcra(gcra) => tollgate_core::debit_atomic(gcra, cell, now, cost),
            PackedLimiter::LeakyBucket(bucket) => {
                tollgate_core::debit_atomic(bucket, cell, now, cost)
            }
        }
    }
}

impl Policy {
    /// Checks a request of `cost` against `states`, one per limit of this
    /// policy, all or nothing: how every store that keeps the core's states
    /// (the memory store, the compare-and-swap store) decides. Answers the
    /// merged decision and each limit's, in the policy's order
    /// ([`PolicyDecision::new`](crate::PolicyDecision::new) makes the
    /// store's answer of them); `states` are charged only if all allow.
    #[inline]
    pub fn check_states(
        &self,
        states: &mut [State],
        now: u64,
        cost: u32,
    ) -> (Decision, SmallVec<[Decision; 2]>) {
        match (self.limiters(), states) {
            // One limit: no pairing, no merging.
            ([limiter], [state]) => {
                let decision = limiter.check(state, now, cost);
                (decision, smallvec::smallvec![decision])
            }
            (limiters, states) => {
                let mut pairs: SmallVec<[(&Limiter, &mut State); 2]> =
                    limiters.iter().zip(states.iter_mut()).collect();
                let mut each: SmallVec<[Decision; 2]> =
                    smallvec::smallvec![Decision::default(); pairs.len()];
                let merged = tollgate_core::check_all(&mut pairs, now, cost, &mut each);
                (merged, each)
            }
        }
    }

    /// A policy of `limits`, with a fresh identity.
    pub fn new(limits: Vec<NamedLimit>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Self::with_id(NEXT_ID.fetch_add(1, Ordering::Relaxed), limits)
    }

    /// A policy whose identity is derived from `seed`: the same seed gives
    /// the same identity, so the counters of a policy rebuilt unchanged (a
    /// rules reload, a rule built again for each call) carry on, in a
    /// memory store as in a shared one. Seeded identities never equal
    /// fresh ones. The seed is the caller's: a fingerprint of what makes
    /// the policy the same one (a rule's place in its configuration).
    pub fn with_seed(seed: u64, limits: Vec<NamedLimit>) -> Self {
        Self::with_id(seed | 1 << 63, limits)
    }

    /// A plan's policy (see [`Policy::plan`]): identity derived from
    /// `seed`, and the plan's stable fingerprint of its limits, so that a
    /// store naming state by limit keeps its state apart from other
    /// plans'. A store's tests (the conformance kit) build one to move a
    /// key between plans whose states are apart. (The layer's per-key
    /// quotas and live limits name no plan: their states are one per
    /// limit name and say their quota.)
    pub fn for_plan(seed: u64, limits: Vec<NamedLimit>) -> Self {
        let plan = plan_fingerprint(&limits);
        Policy {
            plan: Some(plan),
            ..Self::with_seed(seed, limits)
        }
    }

    /// The plan this policy stands for, when it was built as one
    /// ([`for_plan`](Self::for_plan)): the same for every policy built from
    /// the same limits, different for others. A store that names a key's
    /// state by the limits' names (as the Redis store does) keeps each
    /// plan's state apart by it; a key moved to another plan has its usage
    /// carried over ([`Store::carry`](crate::Store::carry)). `None` for
    /// every other policy, the layer's per-key quotas and live limits
    /// among them.
    pub fn plan(&self) -> Option<u64> {
        self.plan
    }

    /// The policy of limit `index` alone, whose state is this policy's
    /// limit `index` in a store that names state by limit (and plan, see
    /// [`plan`](Self::plan)), as the Redis stores do: how
    /// [`Store::carry`](crate::Store::carry) charges each limit of a plan
    /// its own usage there. `None` past the last limit.
    pub fn limit_alone(&self, index: usize) -> Option<Policy> {
        let limit = self.limits.get(index)?.clone();
        let id = self
            .id
            .rotate_left(17)
            .wrapping_add((index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        Some(Policy {
            plan: self.plan,
            ..Self::with_id(id | 1 << 63, vec![limit])
        })
    }

    /// The policy's enforced limits, and apart its shadow limits (`None`
    /// when it has none): a layer charges the two all-or-nothing each,
    /// the shadow ones only for requests the enforced ones admit. The
    /// enforced part keeps the policy's identity and plan; the shadow part
    /// gets an identity of its own, derived from it when it is seeded (so
    /// a rules reload that changes nothing keeps its counters).
    #[doc(hidden)]
    pub fn without_shadow(self) -> (Policy, Option<Policy>) {
        if !self.limits.iter().any(NamedLimit::is_shadow) {
            return (self, None);
        }
        let (shadow, enforced): (Vec<NamedLimit>, Vec<NamedLimit>) =
            self.limits.iter().cloned().partition(NamedLimit::is_shadow);
        let shadow = if self.id & 1 << 63 != 0 {
            Self::with_seed(self.id.wrapping_mul(0x9E37_79B9_7F4A_7C15), shadow)
        } else {
            Self::new(shadow)
        };
        let enforced = Policy {
            plan: self.plan,
            ..Self::with_id(self.id, enforced)
        };
        (enforced, Some(shadow))
    }

    fn with_id(id: u64, limits: Vec<NamedLimit>) -> Self {
        let limiters: Vec<Limiter> = limits.iter().map(|l| l.limiter).collect();
        let names: Vec<&str> = limits.iter().map(NamedLimit::name).collect();
        let label = names.join(",");
        Policy {
            id,
            metrics: PolicyMetrics::new(limits.iter().map(NamedLimit::shared_name), &label),
            label,
            packed: PackedLimiter::of(&limiters),
            rest_slack_nanos: limiters
                .iter()
                .map(|l| u64::try_from(l.rest_slack().as_nanos()).unwrap_or(u64::MAX))
                .max()
                .unwrap_or(0),
            limiters,
            limits,
            prepared: PreparedForms::default(),
            plan: None,
            outage: crate::outage::Outage::new(),
        }
    }

    /// How long after a decision's `reset_after` a key of this policy may
    /// still hold state that a fresh key would not ([`Limiter::rest_slack`]):
    /// a store that drops a key's states once they are at rest keeps them
    /// this much longer.
    pub fn rest_slack_nanos(&self) -> u64 {
        self.rest_slack_nanos
    }

    /// The policy's counter keys.
    #[doc(hidden)]
    pub fn metrics(&self) -> &PolicyMetrics {
        &self.metrics
    }

    /// The identity: distinct for every policy built with [`Policy::new`]
    /// in this process. Policies a rules file or per-key quotas build derive
    /// theirs from what they contain, so that rebuilding one unchanged keeps
    /// its counters.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The limits' names joined with commas, e.g. `"burst,hourly"`: how logs
    /// and metrics name the policy.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The limits, in order.
    pub fn limits(&self) -> &[NamedLimit] {
        &self.limits
    }

    /// The limiters, in the same order as [`limits`](Self::limits).
    pub fn limiters(&self) -> &[Limiter] {
        &self.limiters
    }

    /// The form a store checks this policy against, made by `prepare` on
    /// the first call for its type `T` and kept with the policy: a store
    /// prepares each policy once (its script, its arguments, its layout)
    /// and finds it again on every request, with no cache of its own.
    ///
    /// ```
    /// use tollgate_store::{NamedLimit, Policy};
    /// use tollgate_core::Quota;
    ///
    /// struct Labels(Vec<String>);
    /// let policy = Policy::new(vec![NamedLimit::new("minute", Quota::per_minute(10))]);
    /// let prepare = |p: &Policy| Labels(p.limits().iter().map(|l| l.name().to_owned()).collect());
    /// let first = policy.prepared(prepare).into_arc();
    /// let again = policy.prepared(|_| Labels(Vec::new())).into_arc();
    /// assert!(std::sync::Arc::ptr_eq(&first, &again));
    /// assert_eq!(again.0, ["minute"]);
    /// ```
    pub fn prepared<T: std::any::Any + Send + Sync>(
        &self,
        prepare: impl FnOnce(&Policy) -> T,
    ) -> Prepared<'_, T> {
        self.prepared.get_or_prepare(|| prepare(self))
    }

    /// Set when the policy is one limit with a one-word state: the memory
    /// store's prepared form, made when the policy is built because its
    /// hot path reads it on every request.
    pub(crate) fn packed(&self) -> Option<&PackedLimiter> {
        self.packed.as_ref()
    }
}

/// Whether `text` is a short token (1 to 64 letters, digits, `-`, `_`,
/// `.`): what limit and rule names must be, as they are written into
/// response headers and Redis keys.
pub fn is_token(text: &str) -> bool {
    (1..=64).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `limit` with the builder-wide algorithm and delay bound, where set.
pub fn with_overrides(
    limit: NamedLimit,
    algorithm: Option<Algorithm>,
    max_delay: Option<std::time::Duration>,
) -> NamedLimit {
    let limit = match algorithm {
        Some(algorithm) => limit.with_algorithm(algorithm),
        None => limit,
    };
    match max_delay {
        Some(delay) => {
            let limiter = limit.limiter().with_max_delay(delay);
            limit.with_limiter(limiter)
        }
        None => limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memory store keeps in an atomic cell exactly the algorithms the
    /// registry marks `one_word`.
    #[test]
    fn the_packed_algorithms_are_the_registrys_one_word_ones() {
        for algorithm in Algorithm::ALL {
            let limiter = Limiter::new(algorithm, Quota::per_second(10));
            assert_eq!(
                PackedLimiter::of(&[limiter]).is_some(),
                algorithm.one_word_state(),
                "{algorithm}"
            );
        }
    }

    #[test]
    fn a_limiter_set_by_hand_brings_its_quota() {
        let built_on: Quota = "5/min".parse().unwrap();
        let limit = NamedLimit::new("api", Quota::per_second(100))
            .with_limiter(Limiter::new(Algorithm::SlidingWindow, built_on));
        assert_eq!(limit.quota(), built_on);
        // Switching the algorithm afterwards keeps that quota.
        let limit = limit.with_algorithm(Algorithm::FixedWindow);
        assert_eq!(limit.quota(), built_on);
        assert_eq!(limit.limiter().algorithm(), Algorithm::FixedWindow);
    }
}
