//! Shadow limits: decided and counted exactly as if enforced, never
//! refusing (see [`NamedLimit::shadow`](crate::NamedLimit::shadow) and
//! [`RateLimitBuilder::shadow`](crate::RateLimitBuilder::shadow)).
//!
//! A layer keeps a policy's shadow limits apart from its enforced ones
//! ([`Policy::without_shadow`]) and checks them, all-or-nothing among
//! themselves, for each request the enforced ones admit. Their answer
//! changes nothing for the request; it is counted in metrics and logged,
//! at most once per [`SHADOW_LOG_INTERVAL`] per limit.

// Shared with the middleware through `__private` (hidden): documented
// where it helps, as crate-private items are.
#![allow(missing_docs)]

use crate::key::Key;
use crate::observe::{Quiet, Shadow};
use crate::policy::Policy;
use crate::{PolicyDecision, Store, StoreReply, Watched};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How often, at most, a limit in shadow logs the requests it would have
/// refused: one INFO line per limit per interval, with the number refused
/// since the last line.
pub const SHADOW_LOG_INTERVAL: Duration = Quiet::EVERY;

/// The most shadow checks whose store answers later (Redis, a database)
/// awaited at once per process; past it a shadow check is skipped (and
/// logged at DEBUG): shadow limits must never cost the enforced ones their
/// memory.
const MAX_PENDING_SHADOW_CHECKS: usize = 4096;

static PENDING: AtomicUsize = AtomicUsize::new(0);

/// A policy's limits' log gates: each limit's would-be refusals are
/// logged at most once per [`SHADOW_LOG_INTERVAL`]. For the crates beside
/// this one (tonic's message limits), through `tollgate::__private`.
pub struct ShadowLog {
    gates: Box<[Quiet]>,
}

impl std::fmt::Debug for ShadowLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShadowLog").finish_non_exhaustive()
    }
}

impl ShadowLog {
    /// Gates for a policy of `limits` limits.
    pub fn new(limits: usize) -> Self {
        ShadowLog {
            gates: (0..limits).map(|_| Quiet::new()).collect(),
        }
    }

    /// Counts and logs a request that `verdict` on `policy` would have
    /// refused, and let through: each limit that refused it counts once
    /// (`decision="shadow_limited"`) and logs if its interval has passed.
    pub fn refused(&self, policy: &Policy, verdict: &PolicyDecision) {
        crate::observe::decided(policy.metrics(), false, verdict.each(), Shadow::All);
        let limits = policy.limits().iter().zip(verdict.each());
        for ((limit, decision), gate) in limits.zip(self.gates.iter()) {
            if decision.allowed() {
                continue;
            }
            if let Some(held_back) = gate.pass() {
                tracing::info!(
                    limit = limit.name(),
                    refused = held_back + 1,
                    retry_after_ms = decision.retry_after_nanos() / 1_000_000,
                    "shadow: requests this limit would have refused were let through \
                     (refused counts them since the last such line)"
                );
            }
        }
    }
}

/// A route's limits in shadow: their policy and their log gates.
#[derive(Debug)]
pub struct ShadowLimits {
    policy: Arc<Policy>,
    log: ShadowLog,
}

impl ShadowLimits {
    /// The shadow limits of `policy`.
    pub fn new(policy: Policy) -> Self {
        ShadowLimits {
            log: ShadowLog::new(policy.limits().len()),
            policy: Arc::new(policy),
        }
    }

    /// Their policy.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Checks a request of `cost` for `key` that the enforced limits
    /// admitted, in `store`, and counts the answer; the request goes on
    /// whatever it is. A store that answers later is awaited on a task of
    /// its own for at most `within` (a check given up on is heard out and
    /// its admission given back, as the layer's are).
    pub fn check<St: Store>(self: &Arc<Self>, store: &St, key: &Key, cost: u32, within: Duration) {
        match store.check_within(&self.policy, key, cost, within) {
            StoreReply::Ready(Ok(verdict)) => self.observe(&verdict),
            StoreReply::Ready(Err(error)) => {
                tracing::debug!(limits = self.policy.label(), %error, "shadow check failed");
            }
            StoreReply::Pending(check) => {
                let watched = Watched::new(check, store.clone(), &self.policy, key, cost);
                self.await_later(watched, within);
            }
        }
    }

    /// Awaits `check` on a task of its own, within the bound on pending
    /// shadow checks.
    fn await_later<St: Store>(self: &Arc<Self>, check: Watched<St>, within: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!("shadow check skipped: no tokio runtime to await it on");
            return;
        };
        if PENDING.fetch_add(1, Ordering::Relaxed) >= MAX_PENDING_SHADOW_CHECKS {
            PENDING.fetch_sub(1, Ordering::Relaxed);
            tracing::debug!("shadow check skipped: {MAX_PENDING_SHADOW_CHECKS} already pending");
            return;
        }
        let shadow = Arc::clone(self);
        runtime.spawn(async move {
            match tokio::time::timeout(within, check).await {
                Ok(Ok(verdict)) => shadow.observe(&verdict),
                Ok(Err(error)) => {
                    tracing::debug!(limits = shadow.policy.label(), %error, "shadow check failed");
                }
                Err(_) => tracing::debug!(limits = shadow.policy.label(), "shadow check timed out"),
            }
            PENDING.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// Counts what the shadow limits said.
    fn observe(&self, verdict: &PolicyDecision) {
        if verdict.merged().allowed() {
            crate::observe::decided(self.policy.metrics(), true, verdict.each(), Shadow::None);
        } else {
            self.log.refused(&self.policy, verdict);
        }
    }
}
