//! The periodic mode's keys, as the tick that syncs them and a request's
//! turns read them.

use super::slot::PeriodicSlot;
use crate::shared::Shared;
use crate::table::Table;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use tollgate_store::shared::SharedStore;

/// The periodic mode's keys and their tick.
pub(crate) struct Keys<S> {
    /// What the slots' calls share with the store.
    pub(super) shared: Arc<Shared<S>>,
    /// The keys' slots.
    pub(super) table: Table<PeriodicSlot>,
    /// When the tick next runs (local ns); 0 until it is started.
    pub(super) next_tick: AtomicU64,
}

impl<S: SharedStore> Keys<S> {
    /// No key yet, room for `max_keys`; no tick until the first request.
    pub(super) fn new(shared: Arc<Shared<S>>, max_keys: usize) -> Self {
        Keys {
            shared,
            table: Table::new(max_keys),
            next_tick: AtomicU64::new(0),
        }
    }
}
