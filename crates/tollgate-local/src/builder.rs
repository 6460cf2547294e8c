//! [`LocalFirstBuilder`]: a [`LocalFirst`] store's settings, and the one
//! place where its mode is chosen.

use crate::exact::Exact;
use crate::local_first::LocalFirst;
use crate::mode::LocalMode;
use crate::periodic::Periodic;
use crate::seam::Mode;
use crate::shared::{Settings, Shared};
use crate::stats::Stats;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tollgate_store::shared::SharedStore;

/// Settings of a [`LocalFirst`] store.
#[derive(Debug)]
#[must_use = "call `build` to get the store"]
pub struct LocalFirstBuilder<S> {
    store: S,
    settings: Settings,
    max_keys: usize,
}

impl<S: SharedStore> LocalFirst<S> {
    /// A builder for a local-first store over `store` in `mode`.
    pub fn builder(store: S, mode: LocalMode) -> LocalFirstBuilder<S> {
        LocalFirstBuilder {
            store,
            settings: Settings {
                mode,
                fanout: 8,
                reserve_ahead_nanos: 250_000_000,
                max_reservation: 100_000,
                hold_nanos: 1_000_000_000,
                instances: 0,
                share_life_nanos: mode.share_life(),
            },
            max_keys: 100_000,
        }
    }
}

impl<S: SharedStore> LocalFirstBuilder<S> {
    /// Exact mode: the share of what remains that one reservation may take
    /// (default 8: an eighth). Larger leaves more for other instances and
    /// makes more calls near the limit.
    pub fn fanout(mut self, fanout: u32) -> Self {
        self.settings.fanout = fanout.max(1);
        self
    }

    /// Exact mode: a reservation asks for what the key was spent at over
    /// this long (default 250 ms).
    pub fn reserve_ahead(mut self, ahead: Duration) -> Self {
        self.settings.reserve_ahead_nanos = u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Exact mode, GCRA and the continuous token bucket: how long after its
    /// last reservation an instance may spend what it holds of a key
    /// (default 1 s). Redis counts those units as still in the bucket, so
    /// that it does not refill them too, until this long after the
    /// reservation; the instance spends none after that. An instance that
    /// stops keeps what it held from the others for this long.
    pub fn hold(mut self, hold: Duration) -> Self {
        self.settings.hold_nanos = u64::try_from(hold.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1_000);
        self
    }

    /// Exact mode: the most units one reservation asks for (default
    /// 100,000; a reservation also asks for no more than the key was spent
    /// at over [`reserve_ahead`](Self::reserve_ahead), and gets at most a
    /// [`fanout`](Self::fanout)th of what remains).
    pub fn max_reservation(mut self, units: u64) -> Self {
        self.settings.max_reservation = units.max(1);
        self
    }

    /// Periodic mode: how many instances share the keys, for each to admit
    /// its part of what remains between two readings. By default (or 0)
    /// Redis counts them at every sync: the instances whose last share of
    /// the key has not lapsed (two sync intervals and 250 ms after it was
    /// given), this one included, and one more when every instance's want
    /// fits (room for a newcomer). Set it when the count is known (a fixed
    /// number of replicas): an instance new to a key then gets no more than
    /// its part at once, or what it wants if that fits. Exact mode ignores it (its
    /// [`fanout`](Self::fanout) plays that part).
    pub fn instances(mut self, instances: u32) -> Self {
        self.settings.instances = instances;
        self
    }

    /// The most keys kept in memory (default 100,000). A new key that finds
    /// no room (every slot waiting on Redis or holding unreported counts) is
    /// decided by Redis directly.
    pub fn max_keys(mut self, keys: usize) -> Self {
        self.max_keys = keys.max(1);
        self
    }

    /// The store. In periodic mode its syncs run on the tokio runtime of
    /// the first request, until the last clone is dropped.
    pub fn build(self) -> LocalFirst<S> {
        // The local clock sets itself up at its first reading (the
        // time-stamp counter calibrated once per process, up to 200 ms):
        // read it now, not at the first request.
        tollgate_core::Clock::now(&tollgate_core::MonotonicClock);
        let instance = std::hash::RandomState::new().hash_one(std::process::id());
        let shared = Arc::new(Shared {
            store: self.store,
            settings: self.settings,
            instance,
            stats: Stats::default(),
            reports: AtomicU64::new(0),
        });
        let inner: Arc<dyn Mode<S>> = match self.settings.mode {
            LocalMode::Exact => Arc::new(Exact::new(shared, self.max_keys)),
            LocalMode::Periodic { .. } => Arc::new(Periodic::new(shared, self.max_keys)),
        };
        LocalFirst { inner }
    }
}
