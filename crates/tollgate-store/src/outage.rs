//! [`Outage`]: the failures a caller saw since its store last answered.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The failures a caller saw since its store last answered: what tells
/// it that an answer ends an outage ([`report_answer`] keeps one per
/// policy; the in-flight limit one per layer).
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct Outage {
    failures: AtomicU64,
}

impl Outage {
    /// No failure seen.
    pub const fn new() -> Self {
        Outage {
            failures: AtomicU64::new(0),
        }
    }

    /// The store failed, or did not answer in time.
    pub fn failed(&self) {
        self.failures.fetch_add(1, Relaxed);
    }

    /// The store answered: `Some(failures seen)` when that ends an outage
    /// (once per outage, whichever caller gets it), else `None`, after one
    /// relaxed load.
    pub fn answered(&self) -> Option<u64> {
        if self.failures.load(Relaxed) == 0 {
            return None;
        }
        Some(self.failures.swap(0, Relaxed)).filter(|failures| *failures > 0)
    }
}
