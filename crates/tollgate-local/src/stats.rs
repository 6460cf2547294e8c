//! What a [`LocalFirst`](super::LocalFirst) store has done: counted for
//! [`LocalFirst::stats`](super::LocalFirst::stats) and through `metrics`.

use super::striped;
use crate::observe;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a [`LocalFirst`](super::LocalFirst) store has done, counted since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalStats {
    /// Requests decided in process memory, with no wait.
    pub local_decisions: u64,
    /// Requests that waited for a reservation or a first reading.
    pub waited: u64,
    /// Requests refused from a refusal Redis gave earlier, before its retry
    /// time, with no call (exact mode).
    pub blocked: u64,
    /// Calls to Redis: reservations (exact) or syncs (periodic).
    pub redis_calls: u64,
    /// Units granted by reservations.
    pub reserved_units: u64,
    /// Units that lapsed unspent (a window ended).
    pub lapsed_units: u64,
    /// Requests decided by Redis directly because the table of keys was
    /// full.
    pub overflowed: u64,
    /// The keys in memory now.
    pub keys: u64,
}

#[derive(Default)]
pub(super) struct Stats {
    /// Every request decided here adds to it: striped, so that threads do
    /// not contend on one counter.
    local: striped::Striped,
    waited: AtomicU64,
    blocked: AtomicU64,
    calls: AtomicU64,
    reserved: AtomicU64,
    lapsed: AtomicU64,
    overflowed: AtomicU64,
}

/// Counted here for [`LocalFirst::stats`](super::LocalFirst::stats), and through `metrics` (see
/// `observe.rs`).
impl Stats {
    pub(super) fn decided(&self, mode: &'static str) {
        self.local.add(1);
        observe::local_decision(mode);
    }
    pub(super) fn waited(&self, mode: &'static str) {
        self.waited.fetch_add(1, Ordering::Relaxed);
        observe::local_wait(mode);
    }
    pub(crate) fn blocked(&self, mode: &'static str) {
        self.blocked.fetch_add(1, Ordering::Relaxed);
        observe::local_blocked(mode);
    }
    pub(super) fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
    pub(super) fn reserved(&self, units: u64) {
        self.reserved.fetch_add(units, Ordering::Relaxed);
        observe::reserved(units);
    }
    pub(super) fn lapsed(&self, units: u64) {
        self.lapsed.fetch_add(units, Ordering::Relaxed);
        observe::lapsed(units);
    }
    pub(super) fn overflowed(&self) {
        self.overflowed.fetch_add(1, Ordering::Relaxed);
        observe::overflow();
    }

    /// The counts so far, with `keys` the keys in memory now.
    pub(super) fn read(&self, keys: u64) -> LocalStats {
        LocalStats {
            local_decisions: self.local.sum(),
            waited: self.waited.load(Ordering::Relaxed),
            blocked: self.blocked.load(Ordering::Relaxed),
            redis_calls: self.calls.load(Ordering::Relaxed),
            reserved_units: self.reserved.load(Ordering::Relaxed),
            lapsed_units: self.lapsed.load(Ordering::Relaxed),
            overflowed: self.overflowed.load(Ordering::Relaxed),
            keys,
        }
    }
}
