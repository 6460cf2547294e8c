//! [`CasError`]: why a compare-and-swap store did not decide.

use std::fmt;
use std::sync::Arc;
use tollgate_core::StateBytesError;

/// Why a [`CasStore`](super::CasStore) did not decide (the layer then
/// applies its store-error behaviour: let through by default).
#[derive(Debug)]
#[non_exhaustive]
pub enum CasError<E> {
    /// The backend failed a read or a write.
    Backend(E),
    /// The value under `key` is not a policy's states (written by
    /// something else, or damaged): nothing was charged. A reset of the
    /// key ([`Store::reset`](tollgate_store::Store::reset)) replaces it.
    Unreadable {
        /// The value's key in the backend.
        key: Arc<str>,
        /// What is wrong with it.
        error: StateBytesError,
    },
    /// The value under `key` holds `states` states where the policy has
    /// `limits` limits: written under another configuration. Nothing was
    /// charged; a reset replaces it.
    Mismatched {
        /// The value's key in the backend.
        key: Arc<str>,
        /// How many states it holds.
        states: usize,
        /// How many limits the policy has.
        limits: usize,
    },
    /// Every attempt lost its race to another writer of `key`: nothing
    /// was charged.
    Contended {
        /// The value's key in the backend.
        key: Arc<str>,
        /// How many attempts were made.
        attempts: u32,
    },
    /// The backend did not make a write over `version` of `key`, the
    /// version its read had just returned, and its next read returned that
    /// version again: no other writer had changed it (versions are random
    /// and never come back), so its read and its write disagree about
    /// what the key holds — most often a read that returns a value past
    /// its [`expires_at`](super::Swap::expires_at) which the write treats
    /// as absent. Nothing was charged; see [`CasBackend`](super::CasBackend)
    /// for the contract.
    Disagreeing {
        /// The value's key in the backend.
        key: Arc<str>,
        /// The version read, and not written over.
        version: u64,
    },
    /// The caller stopped waiting ([`Store::check_within`](tollgate_store::Store::check_within))
    /// before the decision could be written: nothing was charged.
    Late {
        /// The value's key in the backend.
        key: Arc<str>,
    },
    /// A local-first store in front of this store could not decide: what
    /// it held is spent and its last call here failed.
    LocalSpent {
        /// Why its last call failed.
        message: String,
    },
}

impl<E> CasError<E> {
    /// Whether the check failed only because its caller had stopped
    /// waiting (nothing was charged).
    pub fn is_late(&self) -> bool {
        matches!(self, CasError::Late { .. })
    }
}

impl<E: fmt::Display> fmt::Display for CasError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CasError::Backend(error) => write!(f, "the compare-and-swap backend failed: {error}"),
            CasError::Unreadable { key, error } => write!(
                f,
                "the value of {key:?} is not a policy's states ({error}); nothing was charged; \
                 help: reset the key to replace it"
            ),
            CasError::Mismatched {
                key,
                states,
                limits,
            } => write!(
                f,
                "the value of {key:?} holds {states} states for a policy of {limits} limits; \
                 nothing was charged; help: reset the key to replace it"
            ),
            CasError::Contended { key, attempts } => write!(
                f,
                "{attempts} attempts to write {key:?} each lost the race to another writer; \
                 nothing was charged; help: raise `max_attempts` or the backoff \
                 (`CasStoreBuilder`), or spread the load over more keys"
            ),
            CasError::Disagreeing { key, version } => write!(
                f,
                "the backend did not write {key:?} over version {version}, the version its read \
                 had just returned, and read that version again: no other writer changed it, \
                 so the backend's read and write disagree about what the key holds (a read that \
                 returns a value past its expiry, which the write treats as absent, does this); \
                 nothing was charged; help: `CasBackend::read` and `write` must agree on what \
                 a key holds"
            ),
            CasError::Late { key } => write!(
                f,
                "the check of {key:?} was not written before its caller stopped waiting; \
                 nothing was charged"
            ),
            CasError::LocalSpent { message } => write!(
                f,
                "the local-first store has spent what it held and its last call to the \
                 compare-and-swap store failed ({message}); nothing was charged"
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for CasError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CasError::Backend(error) => Some(error),
            CasError::Unreadable { error, .. } => Some(error),
            _ => None,
        }
    }
}
