//! [`report_failure`] and [`report_answer`]: what a caller reports when
//! its store fails, and when it answers again; [`retry_after`]: when a
//! failed store is expected back.

use crate::policy::Policy;
use std::error::Error;
use std::time::Duration;

/// What a caller of a store reports when it failed on a request of
/// `policy`, or did not answer in time, before it applies its own rule
/// (the layers' `on_store_error`, the rate-limit service's): one WARN at
/// most every 10 s across the process (with how many failures were held
/// back since the last), and the policy's `tollgate_store_errors_total`
/// counter: an outage is logged, not its traffic.
///
/// ```
/// use tollgate_store::{NamedLimit, Policy};
///
/// let policy = Policy::new(vec![NamedLimit::new("api", "10/s".parse().unwrap())]);
/// tollgate_store::report_failure(&policy, &"connection refused");
/// ```
pub fn report_failure(policy: &Policy, error: &dyn std::fmt::Display) {
    static QUIET: crate::observe::Quiet = crate::observe::Quiet::new();
    if let Some(held_back) = QUIET.pass() {
        tracing::warn!(
            limits = policy.label(),
            %error,
            held_back,
            "rate-limit store failed; applying on_store_error (at most one such warning \
             every 10 s: held_back counts the failures since the last)"
        );
    }
    policy.outage.failed();
    crate::observe::store_failed(policy.metrics());
}

/// What a caller of a store reports when the store answered a request of
/// `policy`: if failures were reported for this policy since its last
/// answer, the outage is over, and that is logged at the level its start
/// was (WARN, with how many failures it saw and how long ago the last
/// was: a policy seldom asked may hear of the end late; at most one such
/// line every 10 s across the process), whether a
/// [`Breaker`](crate::Breaker) stood in front of the store or not. A
/// healthy store costs one relaxed load.
///
/// ```
/// use tollgate_store::{NamedLimit, Policy};
///
/// let policy = Policy::new(vec![NamedLimit::new("api", "10/s".parse().unwrap())]);
/// tollgate_store::report_failure(&policy, &"connection refused");
/// tollgate_store::report_answer(&policy); // "rate-limit store answers again ..."
/// ```
pub fn report_answer(policy: &Policy) {
    let Some(end) = policy.outage.answered() else {
        return;
    };
    static QUIET: crate::observe::Quiet = crate::observe::Quiet::new();
    if let Some(held_back) = QUIET.pass() {
        tracing::warn!(
            limits = policy.label(),
            failures = end.failures,
            last_failure_ms_ago = end.since_last_failure.as_millis() as u64,
            held_back,
            "rate-limit store answers again after {} requests it could not decide: \
             on_store_error no longer applies (at most one such line every 10 s: \
             held_back counts the recoveries since the last)",
            end.failures
        );
    }
}

/// How long a store that failed with `error` is expected to stay
/// unavailable, when something in front of it knows: an open
/// [`Breaker`](crate::Breaker)'s time until its next probe
/// ([`CircuitOpen`](crate::wrappers::breaker::CircuitOpen), found anywhere in the
/// error's chain of sources, so through any wrapper). `None` when
/// nothing knows (a timeout, a refused connection).
///
/// ```
/// use std::time::Duration;
///
/// let error = std::io::Error::other("connection refused");
/// assert_eq!(tollgate_store::retry_after(&error), None);
/// ```
pub fn retry_after(error: &(dyn Error + 'static)) -> Option<Duration> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(open) = error.downcast_ref::<crate::wrappers::breaker::CircuitOpen>() {
            return Some(open.retry_after());
        }
        next = error.source();
    }
    None
}
