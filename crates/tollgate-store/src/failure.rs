//! [`report_failure`]: what a caller reports when its store fails.

use crate::policy::Policy;

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
    crate::observe::store_failed(policy.metrics());
}
