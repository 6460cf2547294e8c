//! How a change of plan reaches the layers' caches: every cache built with
//! a `KeyQuotas` (tollgate's cache) registers with it as something that
//! can [forget](Forget) a key's answer, and [`ChangedQuotas`] is the weak
//! handle a following [`QuotaSource`](super::QuotaSource) holds on them.
//!
//! Kept apart from the cache and the source so that each can lean on it
//! without leaning on the other.

use crate::Key;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A cache that drops a key's answer (every key's with `None`).
pub trait Forget: Send + Sync {
    /// Drops `key`'s answer (every key's with `None`).
    fn forget(&self, key: Option<&Key>);
}

/// The caches of every layer built with one `KeyQuotas` (tollgate's cache)
/// and its clones.
pub type Caches = Arc<Mutex<Vec<Weak<dyn Forget>>>>;

/// Runs `forget` on every live cache of `caches`, dropping the dead.
pub fn forget_in(caches: &Mutex<Vec<Weak<dyn Forget>>>, key: Option<&Key>) {
    let mut caches = caches.lock().unwrap_or_else(PoisonError::into_inner);
    caches.retain(|cache| match cache.upgrade() {
        Some(cache) => {
            cache.forget(key);
            true
        }
        None => false,
    });
}

/// What a [`QuotaSource`](super::QuotaSource) that follows changes tells the
/// cache: a weak handle on a `KeyQuotas` (tollgate's cache)' caches (it
/// keeps no layer alive: once every layer and clone is gone,
/// [`is_gone`](Self::is_gone) says so, and a follower should stop).
#[derive(Clone, Debug)]
pub struct ChangedQuotas {
    caches: Weak<Mutex<Vec<Weak<dyn Forget>>>>,
}

impl ChangedQuotas {
    /// A handle on `caches`.
    #[doc(hidden)]
    pub fn new(caches: &Caches) -> Self {
        ChangedQuotas {
            caches: Arc::downgrade(caches),
        }
    }

    /// `key`'s quota changed: every cache built with these quotas drops it
    /// (tollgate's `KeyQuotas::invalidate`).
    pub fn invalidate(&self, key: &Key) {
        if let Some(caches) = self.caches.upgrade() {
            forget_in(&caches, Some(key));
        }
    }

    /// Every key's quota may have changed (changes were missed).
    pub fn invalidate_all(&self) {
        if let Some(caches) = self.caches.upgrade() {
            forget_in(&caches, None);
        }
    }

    /// Whether every clone of the `KeyQuotas` is gone.
    pub fn is_gone(&self) -> bool {
        self.caches.strong_count() == 0
    }
}
