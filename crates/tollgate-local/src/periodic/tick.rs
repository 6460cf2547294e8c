//! The periodic tick: one task per store that syncs every key due, on the
//! runtime of the first request, until the store is dropped.

use super::keys::Keys;
use super::sync::sync;
use crate::LocalMode;
use crate::observe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tollgate_store::shared::SharedStore;

/// Starts the periodic tick on the current runtime, once per store.
pub(super) fn ensure_ticking<S: SharedStore>(keys: &Arc<Keys<S>>) {
    let LocalMode::Periodic { sync_interval } = keys.shared.settings.mode else {
        return;
    };
    if keys.next_tick.load(Ordering::Relaxed) != 0
        || keys
            .next_tick
            .compare_exchange(
                0,
                keys.shared.now().max(1),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
    {
        return;
    }
    tokio::spawn(tick(Arc::downgrade(keys), sync_interval));
}

/// Every `interval`, syncs every key that admitted or was asked since its
/// last sync, or whose report is unconfirmed; ends with the store (the
/// last handle on its keys).
async fn tick<S: SharedStore>(keys: Weak<Keys<S>>, interval: Duration) {
    let interval = interval.max(Duration::from_millis(1));
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(keys) = keys.upgrade() else {
            return;
        };
        let step = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        keys.next_tick
            .store(keys.shared.now().saturating_add(step), Ordering::Relaxed);
        sync_due(&keys);
    }
}

/// Syncs the keys due now, and reports how late the latest of them is.
fn sync_due<S: SharedStore>(keys: &Keys<S>) {
    let now = keys.shared.now();
    let mut lag = 0;
    for slot in keys.table.all() {
        let mut counts = slot.lock();
        if counts.due(now) {
            lag = lag.max(counts.age(now));
            drop(counts);
            tokio::spawn(sync(keys.shared.clone(), slot));
        }
    }
    observe::sync_lag(lag as f64 / 1e9);
}
