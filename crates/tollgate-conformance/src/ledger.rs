//! What the fault injector saw, per key: the [`Ledger`] the racing kit's
//! checker reads, and the errors of a call it refused.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// What the clones of one `Faults` share: the draws, the restart, the
/// ledger.
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "cas"), allow(dead_code))]
pub(super) struct Shared {
    pub(super) draws: AtomicU64,
    pub(super) down_until: Mutex<Option<Instant>>,
    ledger: Mutex<HashMap<String, KeyLedger>>,
    pub(super) in_flight: AtomicUsize,
}

#[cfg_attr(not(feature = "cas"), allow(dead_code))]
impl Shared {
    fn ledger(&self) -> MutexGuard<'_, HashMap<String, KeyLedger>> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn note(&self, key: &str, what: impl FnOnce(&mut KeyLedger)) {
        what(self.ledger().entry(key.to_owned()).or_default());
    }
}

/// What a `Faults` saw of one key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyLedger {
    /// Calls refused while the backend was restarting.
    pub refused: u64,
    /// Writes made whose reply no caller received (its future was dropped
    /// first), not counting those in `made_past_deadline`: charges a
    /// caller may have stopped waiting for, made in time.
    pub unheard: u64,
    /// Writes held until their deadline had passed on the backend's clock,
    /// and made all the same: the backend broke the contract.
    pub made_past_deadline: u64,
    /// Writes held until their deadline had passed (made or not).
    pub held: u64,
    /// Writes whose reply was held back until after their deadline.
    pub late_replies: u64,
}

/// What a `Faults` and its clones saw, per key (the key's name in the
/// backend).
#[derive(Clone, Debug)]
pub struct Ledger {
    shared: Arc<Shared>,
}

impl Ledger {
    #[cfg_attr(not(feature = "cas"), allow(dead_code))]
    pub(super) fn of(shared: Arc<Shared>) -> Self {
        Ledger { shared }
    }

    /// What was seen of the key named `name` in the backend.
    pub fn key(&self, name: &str) -> KeyLedger {
        self.shared.ledger().get(name).copied().unwrap_or_default()
    }

    /// Writes made past their deadline, over every key.
    pub fn made_past_deadline(&self) -> u64 {
        self.shared
            .ledger()
            .values()
            .map(|key| key.made_past_deadline)
            .sum()
    }

    /// Writes sent and not yet made or refused by the backend.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }
}

/// Why a call through `Faults` failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum FaultError<E> {
    /// The backend was restarting: the call was refused before it reached
    /// it (nothing was read or written).
    Restarting,
    /// The backend behind failed.
    Backend(E),
}

impl<E> FaultError<E> {
    /// Whether the call was refused by a restart.
    pub fn is_restarting(&self) -> bool {
        matches!(self, FaultError::Restarting)
    }
}

impl<E: fmt::Display> fmt::Display for FaultError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultError::Restarting => f.write_str(
                "connection refused: the backend is restarting (a fault injected by \
                 tollgate_conformance::Faults)",
            ),
            FaultError::Backend(error) => write!(f, "{error}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for FaultError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FaultError::Restarting => None,
            FaultError::Backend(error) => Some(error),
        }
    }
}
