//! What a [`LocalFirst`](super::LocalFirst) store's slots share with it
//! when they call the shared store: that store, the settings, this
//! instance's name, the counts, the clock.

use super::mode::LocalMode;
use super::stats::Stats;
use crate::SharedStore;
use std::sync::atomic::AtomicU64;
use tollgate_core::{Clock, MonotonicClock};
use tollgate_store::PolicyDecision;

/// The part of a store that its slots' calls to the shared store need.
pub(crate) struct Shared<S> {
    pub(super) store: S,
    pub(super) settings: Settings,
    /// Tells this instance's sync reports from other instances'.
    pub(super) instance: u64,
    pub(super) stats: Stats,
    /// Reservations (exact mode) or reports (periodic mode) numbered so
    /// far, by every slot (see `answers::receipt_word`, and a sync's sequence
    /// number): a slot made again for a key never reuses a number.
    pub(super) reports: AtomicU64,
}

impl<S: SharedStore> Shared<S> {
    /// The mode, as metrics label it.
    pub(super) fn mode_name(&self) -> &'static str {
        match self.settings.mode {
            LocalMode::Exact => "exact",
            LocalMode::Periodic { .. } => "periodic",
        }
    }

    /// Local time in ns.
    pub(super) fn now(&self) -> u64 {
        // A shared store on a test clock: that clock, so a test moves both.
        if let Some(now) = self.store.test_nanos() {
            return now;
        }
        // The memory store's clock, read as the memory store reads it (see
        // `Clock::now_relaxed`): the time-stamp counter where the OS vouches
        // for it, a few ns a read.
        MonotonicClock.now_relaxed()
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Settings {
    pub(super) mode: LocalMode,
    pub(super) fanout: u32,
    pub(super) reserve_ahead_nanos: u64,
    pub(super) max_reservation: u64,
    pub(super) hold_nanos: u64,
    /// Periodic mode: how many instances share each key (0: as many as
    /// hold a live share, counted by Redis at each sync).
    pub(super) instances: u32,
    /// Periodic mode: how long a share may be spent after its sync was
    /// sent (ns); see `share_life`.
    pub(super) share_life_nanos: u64,
}

/// What a request's slot says.
pub(crate) enum Step {
    /// Decided here.
    Answer(PolicyDecision),
    /// Waits for the call in flight.
    Wait,
    /// Redis is away and what this instance held is spent.
    Fail(String),
}

/// Who reports or holds, as Redis tells them apart: this instance's slot
/// of the policy. Policies share a key's records (sequence numbers, held
/// units), and each slot keeps its own, so the policy is part of the name.
pub(crate) fn holder(instance: u64, policy: u64) -> u64 {
    instance ^ policy.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
