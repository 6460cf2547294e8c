//! Allow and deny lists of keys: [`AccessLists`].

use crate::key::Key;
use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

/// Keys that pass every limit uncounted, and keys refused with
/// `403 Forbidden` whatever their budget, for a
/// [`RateLimitLayer`](crate::RateLimitLayer) (see
/// [`access`](crate::RateLimitBuilder::access)). The key is the one the
/// layer's extractor gives (an IP address for [`PeerIp`](crate::PeerIp),
/// a header's value for [`HeaderKey`](crate::HeaderKey)).
///
/// A handle: clones share the lists, so the application keeps one and
/// changes them while the layer runs (an operator's endpoint, a file it
/// follows); every request after a change sees it. A key on both lists
/// is denied. A denied request is answered by the layer's rejector
/// ([`Rejection::Denied`](crate::Rejection::Denied): tollgate-axum's
/// problem+json gives it a type of its own), and charges nothing.
///
/// ```
/// use tollgate::{HeaderKey, Key, RateLimitLayer, access::AccessLists};
/// use tollgate_core::Quota;
///
/// let lists = AccessLists::new()
///     .with_allowed(["internal-monitor"])
///     .with_denied(["leaked-key-0042"]);
/// let layer = RateLimitLayer::builder()
///     .quota("api", Quota::per_minute(100))
///     .key(HeaderKey::new("x-api-key"))
///     .access(lists.clone())
///     .build();
/// // Later, while it serves:
/// lists.deny("abusive-key-7");
/// assert!(lists.denied().contains(&Key::from("abusive-key-7")));
/// # let _ = layer;
/// ```
#[derive(Clone, Debug, Default)]
pub struct AccessLists {
    lists: Arc<RwLock<Lists>>,
}

#[derive(Debug, Default)]
struct Lists {
    allowed: HashSet<Key>,
    denied: HashSet<Key>,
}

/// What the lists say of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// On neither list: the limits decide.
    Limited,
    /// On the allow list: passes uncounted.
    Allowed,
    /// On the deny list: refused.
    Denied,
}

impl AccessLists {
    /// Empty lists: every key is limited.
    pub fn new() -> Self {
        Self::default()
    }

    /// These lists with `keys` allowed as well.
    pub fn with_allowed<I: IntoIterator<Item = impl Into<Key>>>(self, keys: I) -> Self {
        keys.into_iter().for_each(|key| self.allow(key));
        self
    }

    /// These lists with `keys` denied as well.
    pub fn with_denied<I: IntoIterator<Item = impl Into<Key>>>(self, keys: I) -> Self {
        keys.into_iter().for_each(|key| self.deny(key));
        self
    }

    /// Lets `key` pass uncounted from now on (off the deny list).
    pub fn allow(&self, key: impl Into<Key>) {
        let key = key.into();
        let mut lists = self.write();
        lists.denied.remove(&key);
        lists.allowed.insert(key);
    }

    /// Refuses `key` from now on (off the allow list).
    pub fn deny(&self, key: impl Into<Key>) {
        let key = key.into();
        let mut lists = self.write();
        lists.allowed.remove(&key);
        lists.denied.insert(key);
    }

    /// Takes `key` off both lists: the limits decide it again.
    pub fn remove(&self, key: &Key) {
        let mut lists = self.write();
        lists.allowed.remove(key);
        lists.denied.remove(key);
    }

    /// Replaces both lists at once (a reload): requests see the old lists
    /// or the new ones, never a mix.
    pub fn replace<A, D>(&self, allowed: A, denied: D)
    where
        A: IntoIterator<Item = Key>,
        D: IntoIterator<Item = Key>,
    {
        let denied: HashSet<Key> = denied.into_iter().collect();
        let allowed = allowed
            .into_iter()
            .filter(|key| !denied.contains(key))
            .collect();
        *self.write() = Lists { allowed, denied };
    }

    /// The keys allowed now.
    pub fn allowed(&self) -> Vec<Key> {
        self.read().allowed.iter().cloned().collect()
    }

    /// The keys denied now.
    pub fn denied(&self) -> Vec<Key> {
        self.read().denied.iter().cloned().collect()
    }

    /// What the lists say of `key`.
    pub(crate) fn access(&self, key: &Key) -> Access {
        let lists = self.read();
        if lists.denied.contains(key) {
            Access::Denied
        } else if lists.allowed.contains(key) {
            Access::Allowed
        } else {
            Access::Limited
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Lists> {
        // The lists are whole at every moment (each change is one
        // assignment under the lock): a panic elsewhere leaves them usable.
        self.lists.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Lists> {
        self.lists.write().unwrap_or_else(PoisonError::into_inner)
    }
}
