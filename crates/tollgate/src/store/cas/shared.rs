//! What a compare-and-swap store's clones and futures share: the backend,
//! the retry settings, the random numbers and the counts of lost races.

use super::retry::{Random, Retry};
use std::sync::atomic::{AtomicU64, Ordering};

/// A store's backend and settings, behind one `Arc`.
#[derive(Debug)]
pub(super) struct Shared<B> {
    pub(super) backend: B,
    pub(super) prefix: Box<str>,
    pub(super) retry: Retry,
    random: Random,
    conflicts: AtomicU64,
    contended: AtomicU64,
}

impl<B> Shared<B> {
    pub(super) fn new(backend: B, prefix: Box<str>, retry: Retry) -> Self {
        Shared {
            backend,
            prefix,
            retry,
            random: Random::new(),
            conflicts: AtomicU64::new(0),
            contended: AtomicU64::new(0),
        }
    }

    /// A version for a new value: random, never `replaced`.
    pub(super) fn version(&self, replaced: Option<u64>) -> u64 {
        let version = self.random.next();
        match Some(version) == replaced {
            true => version.wrapping_add(1),
            false => version,
        }
    }

    /// The pause after the `lost`th lost race of one call.
    pub(super) fn pause(&self, lost: u32) -> std::time::Duration {
        self.retry.pause(lost, self.random.next())
    }

    /// A write under `policy` (its label) lost its race.
    pub(super) fn lost_race(&self, policy: &str) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
        crate::observe::cas_conflict(policy);
    }

    /// A call under `policy` gave up after losing every race.
    pub(super) fn gave_up(&self, policy: &str) {
        self.contended.fetch_add(1, Ordering::Relaxed);
        crate::observe::cas_contended(policy);
    }

    pub(super) fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    pub(super) fn contended(&self) -> u64 {
        self.contended.load(Ordering::Relaxed)
    }
}
