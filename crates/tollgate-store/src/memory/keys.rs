//! What a memory store's shard holds: the keys' states, in two maps that
//! share the shard's bound, and how a request is decided on a key's states.

use crate::policy::Policy;
use smallvec::SmallVec;
use std::sync::atomic::AtomicU64;
use tollgate_core::{Decision, Limiter, State};
use tollgate_internal::bounded::{Contents, Idle, soonest_idle};
use tollgate_internal::fingerprint::ByFingerprint;

/// What one shard holds: two maps sharing the shard's bound.
#[derive(Debug, Default)]
pub(super) struct Keys {
    /// One-word states (a single GCRA or leaky-bucket limit). The value is
    /// also the moment the key is at rest.
    pub(super) cells: ByFingerprint<AtomicU64>,
    /// Every other policy's states.
    pub(super) slots: ByFingerprint<Slot>,
}

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) states: SmallVec<[State; 1]>,
    /// When every limit of this key is whole again if no request comes: from
    /// then on the key holds nothing a fresh key would not, and may go.
    pub(super) rest_at: u64,
}

impl Slot {
    /// A fresh key's states under `policy`, at rest from `now`.
    pub(super) fn new(policy: &Policy, now: u64) -> Self {
        Slot {
            states: policy.limiters().iter().map(Limiter::new_state).collect(),
            rest_at: now,
        }
    }

    /// Checks a request of `cost` against the key's states, all or
    /// nothing, and moves its time at rest.
    pub(super) fn check(
        &mut self,
        policy: &Policy,
        now: u64,
        cost: u32,
    ) -> (Decision, SmallVec<[Decision; 2]>) {
        let (merged, each) = policy.check_states(&mut self.states, now, cost);
        self.rest_at = now
            .saturating_add(merged.reset_after_nanos())
            .saturating_add(policy.rest_slack_nanos());
        (merged, each)
    }
}

impl Idle for Slot {
    #[inline]
    fn idle_at(&self) -> u64 {
        self.rest_at
    }
}

/// The two maps share the shard's bound; of their two samples, the key
/// closest to rest is evicted: it loses least.
impl Contents for Keys {
    fn len(&self) -> usize {
        self.cells.len() + self.slots.len()
    }

    fn drop_idle(&mut self, now: u64) {
        self.cells.drop_idle(now);
        self.slots.drop_idle(now);
    }

    fn evict_one(&mut self) -> bool {
        match (soonest_idle(&self.cells), soonest_idle(&self.slots)) {
            (Some(cell), Some(slot)) if slot < cell => self.slots.evict_one(),
            (Some(_), _) => self.cells.evict_one(),
            (None, Some(_)) => self.slots.evict_one(),
            (None, None) => false,
        }
    }
}
