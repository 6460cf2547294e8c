//! [`Outage`]: the failures a caller saw since its store last answered.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tollgate_core::{Clock, MonotonicClock};

/// The failures a caller saw since its store last answered: what tells
/// it that an answer ends an outage ([`report_answer`](crate::report_answer)
/// keeps one per policy; the in-flight limit one per layer).
#[derive(Debug, Default)]
pub struct Outage {
    failures: AtomicU64,
    /// When the last failure was seen (ns on the monotonic clock).
    last_failure: AtomicU64,
}

/// What the answer that ended an outage says of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutageEnd {
    /// The failures (errors, late answers) since the store last answered.
    pub failures: u64,
    /// How long ago the last of them was: the outage may have ended well
    /// before this answer, on a policy seldom asked.
    pub since_last_failure: Duration,
}

impl Outage {
    /// No failure seen.
    pub const fn new() -> Self {
        Outage {
            failures: AtomicU64::new(0),
            last_failure: AtomicU64::new(0),
        }
    }

    /// The store failed, or did not answer in time.
    pub fn failed(&self) {
        self.last_failure
            .store(MonotonicClock.now_relaxed(), Relaxed);
        self.failures.fetch_add(1, Relaxed);
    }

    /// The store answered: what ended, when that ends an outage (once per
    /// outage, whichever caller gets it), else `None`, after one relaxed
    /// load.
    pub fn answered(&self) -> Option<OutageEnd> {
        if self.failures.load(Relaxed) == 0 {
            return None;
        }
        let failures = self.failures.swap(0, Relaxed);
        let ago = MonotonicClock
            .now_relaxed()
            .saturating_sub(self.last_failure.load(Relaxed));
        (failures > 0).then(|| OutageEnd {
            failures,
            since_last_failure: Duration::from_nanos(ago),
        })
    }
}
