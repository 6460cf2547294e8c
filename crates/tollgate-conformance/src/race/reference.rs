//! The reference a race's counts are judged against: what a memory store
//! shows after each number of admissions under the run's policy, read off
//! it once per run, so that bursts and several limits come along.

use crate::real_time::REAL_TIME_BASE;
use std::sync::Arc;
use std::time::Duration;
use tollgate_core::ManualClock;
use tollgate_store::{Key, MemoryStore, Policy};

/// What the reference shows a moment after `n` admissions of cost 1
/// (`after[n]`: each limit's `remaining`), for every `n` up to its
/// capacity, the first admission a moment before the others. Moments
/// apart, not all at once: a shaper (the leaky bucket) serves the first
/// request of its queue at once, so that once any time has passed it
/// holds one more, and a race's calls and peeks are spread in time.
pub(super) struct Reference {
    pub(super) after: Vec<Vec<u64>>,
}

impl Reference {
    pub(super) fn of(policy: &Arc<Policy>) -> Self {
        /// Far above any quota a run draws.
        const MOST: u64 = 200;
        /// "A moment": far below any emission interval of a day's quota.
        const MOMENT: Duration = Duration::from_millis(1);
        let clock = ManualClock::new(REAL_TIME_BASE);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let mut capacity = 0;
        let burst = Key::from("capacity");
        while capacity < MOST && store.check_now(policy, &burst, 1).merged().allowed() {
            if capacity == 0 {
                clock.advance(MOMENT);
            }
            capacity += 1;
        }
        let after = (0..=capacity)
            .map(|n| {
                clock.set(REAL_TIME_BASE);
                let key = Key::from(n);
                for i in 0..n {
                    store.check_now(policy, &key, 1);
                    if i == 0 {
                        clock.advance(MOMENT);
                    }
                }
                clock.advance(MOMENT);
                let peek = store.peek_now(policy, &key);
                peek.each().iter().map(|d| d.remaining()).collect()
            })
            .collect();
        Reference { after }
    }

    /// How many cost-1 checks in a row it admits.
    pub(super) fn capacity(&self) -> u64 {
        self.after.len() as u64 - 1
    }
}
