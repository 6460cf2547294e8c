//! A store that remembers every decision it made, and when.
//!
//! Client-side timings on a busy machine say when a response arrived, not
//! when the limiter decided. To measure "admitted per period" exactly, the
//! demo records on the server side the very `now` each decision used, on
//! the clock the limiter used.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate::{Key, MemoryStore, Policy, PolicyDecision, StoreReply};
use tollgate_core::{Clock, ManualClock, MonotonicClock};

/// One decision, as the store made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The policy's label: here, the one limit's name (the algorithm's).
    pub limit: String,
    /// The `now` (ns, [`MonotonicClock`]) the decision was made at.
    pub now: u64,
    /// Whether the request was admitted.
    pub allowed: bool,
    /// How long an admitted request was held before it went on (the leaky
    /// bucket's shaping), in ns; 0 otherwise.
    pub wait: u64,
}

impl Record {
    /// When an admitted request went on to the service: its decision time
    /// plus the time it was held.
    pub fn released_at(&self) -> u64 {
        self.now.saturating_add(self.wait)
    }
}

/// A [`MemoryStore`] whose every decision is logged with its time.
///
/// Checks are serialized by a mutex: the recorder reads the clock, pins the
/// reading for the memory store's clock, decides, and logs, with no other
/// check in between. So the logged `now` is exactly the one the algorithm
/// saw, and the log is in decision order. (A real service would not want
/// the mutex; at the demo's few hundred requests per second it costs
/// nothing.)
#[derive(Clone, Debug)]
pub struct RecordingStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The memory store's clock: it reads whatever the recorder pinned for
    /// the check in progress.
    store: MemoryStore<ManualClock>,
    pinned: ManualClock,
    log: Mutex<Vec<Record>>,
}

impl RecordingStore {
    /// An empty store on [`MonotonicClock`].
    pub fn new() -> Self {
        let pinned = ManualClock::new(0);
        RecordingStore {
            inner: Arc::new(Inner {
                store: MemoryStore::builder().clock(pinned.clone()).build(),
                pinned,
                log: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The time on the clock the decisions are made with.
    pub fn now(&self) -> u64 {
        MonotonicClock.now()
    }

    /// A copy of every decision so far, in the order they were made.
    pub fn records(&self) -> Vec<Record> {
        self.inner
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Default for RecordingStore {
    fn default() -> Self {
        Self::new()
    }
}

/// A wrapper of the memory store: checks are logged, every other
/// operation goes to the memory store.
impl tollgate::store::StoreWrapper for RecordingStore {
    type Inner = MemoryStore<ManualClock>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<PolicyDecision, Infallible>>;

    fn inner(&self) -> &MemoryStore<ManualClock> {
        &self.inner.store
    }

    fn relay(
        &self,
        _: &std::sync::Arc<tollgate::Policy>,
        _: &tollgate::Key,
        reply: tollgate::store::StoreReply<
            <Self::Inner as tollgate::Store>::Future,
            <Self::Inner as tollgate::Store>::Error,
        >,
    ) -> tollgate::store::StoreReply<Self::Future, Self::Error> {
        reply
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        _: std::time::Duration,
    ) -> StoreReply<Self::Future, Infallible> {
        // Held across the whole check: the pinned time belongs to this check.
        let mut log = self
            .inner
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = MonotonicClock.now();
        self.inner.pinned.set(now);
        let verdict = self.inner.store.check_now(policy, key, cost);
        log.push(Record {
            limit: policy.label().to_owned(),
            now,
            allowed: verdict.merged().allowed(),
            wait: verdict.merged().wait_nanos(),
        });
        StoreReply::Ready(Ok(verdict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{NamedLimit, Store};
    use tollgate_core::{Algorithm, Quota};

    #[test]
    fn every_decision_is_logged_with_the_time_it_used() {
        let store = RecordingStore::new();
        let policy = Arc::new(Policy::new(vec![
            NamedLimit::new("leaky-bucket", Quota::per_second(2))
                .with_algorithm(Algorithm::LeakyBucket),
        ]));
        let before = store.now();
        for _ in 0..4 {
            let _ = store.check(&policy, &Key::GLOBAL, 1);
        }
        let after = store.now();
        let records = store.records();
        assert_eq!(records.len(), 4);
        assert!(records.iter().all(|r| r.limit == "leaky-bucket"));
        assert!(records.iter().all(|r| (before..=after).contains(&r.now)));
        assert!(records.windows(2).all(|w| w[0].now <= w[1].now));
        // The first goes at once; the next two wait one and two intervals
        // (a hair less: time passed), under the burst of two intervals; the
        // fourth would wait longer and is refused.
        let allowed: Vec<bool> = records.iter().map(|r| r.allowed).collect();
        assert_eq!(allowed, [true, true, true, false]);
        for pair in records[..3].windows(2) {
            assert_eq!(pair[1].released_at() - pair[0].released_at(), 500_000_000);
        }
    }
}
