//! Which limits a request gets: the layer's own, or those of the first
//! matching route.
//!
//! A layer holds one policy by default. With
//! [`RateLimitBuilder::route`](crate::RateLimitBuilder::route) (and
//! [`path`](crate::RateLimitBuilder::path)) it holds a table: requests that a
//! route's predicate matches are charged that route's limits instead, under
//! the same key. Routes are tried in the order they were added; the first
//! match wins; a request no route matches gets the layer's own limits.

use crate::Policy;
use crate::headers::PolicyFields;
use crate::key::RequestView;
use crate::shadow::{ShadowLimits, ShadowLog};
use std::sync::Arc;

/// A predicate over requests, deciding whether a route applies.
pub(crate) type RouteMatch = Arc<dyn Fn(&RequestView<'_>) -> bool + Send + Sync>;

/// A policy and what is computed for it once, when the layer is built (or,
/// for a per-key quota, when the quota is fetched).
#[derive(Debug)]
pub(crate) struct Entry {
    /// The limits enforced.
    pub policy: Arc<Policy>,
    /// The constant parts of the policy's rate-limit fields.
    pub fields: PolicyFields,
    /// The limits in shadow, if any: checked apart, after the enforced ones
    /// admit.
    pub shadow: Option<Arc<ShadowLimits>>,
    /// The enforced limits' log gates, for a layer in shadow.
    pub shadow_log: ShadowLog,
}

impl Entry {
    pub(crate) fn new(policy: Policy) -> Self {
        let (policy, shadow) = policy.without_shadow();
        Entry {
            fields: PolicyFields::new(&policy),
            shadow_log: ShadowLog::new(policy.limits().len()),
            policy: Arc::new(policy),
            shadow: shadow.map(|shadow| Arc::new(ShadowLimits::new(shadow))),
        }
    }

    /// Whether the entry limits nothing (a route declared unlimited).
    pub(crate) fn is_unlimited(&self) -> bool {
        self.policy.limits().is_empty() && self.shadow.is_none()
    }
}

/// The layer's policies: `entries[0]` is the default, `entries[i + 1]`
/// belongs to `matchers[i]`.
pub(crate) struct Routes {
    entries: Vec<Entry>,
    matchers: Vec<RouteMatch>,
}

/// Which policy a request got: one of the layer's own (an index, so the
/// common case carries a word rather than a reference count), or a per-key
/// quota's.
#[derive(Clone, Debug)]
pub(crate) enum EntryRef {
    Table(usize),
    #[cfg_attr(not(feature = "quotas"), allow(dead_code))]
    Key(Arc<Entry>),
}

impl Routes {
    /// A table with `default` for every request that no route matches.
    pub(crate) fn new(default: Policy, routes: Vec<(RouteMatch, Policy)>) -> Self {
        let mut entries = Vec::with_capacity(routes.len() + 1);
        let mut matchers = Vec::with_capacity(routes.len());
        entries.push(Entry::new(default));
        for (matcher, policy) in routes {
            matchers.push(matcher);
            entries.push(Entry::new(policy));
        }
        Routes { entries, matchers }
    }

    /// The entry for a request: `Table(0)` is the layer's own limits.
    #[inline]
    pub(crate) fn select(&self, request: &RequestView<'_>) -> EntryRef {
        // The common case, a layer without routes, costs one branch.
        if self.matchers.is_empty() {
            return EntryRef::Table(0);
        }
        let index = self
            .matchers
            .iter()
            .position(|matches| matches(request))
            .map_or(0, |index| index + 1);
        EntryRef::Table(index)
    }

    /// The entry `entry` names. Table indexes come from
    /// [`select`](Self::select) on the same table, so they are in range.
    #[inline]
    pub(crate) fn get<'a>(&'a self, entry: &'a EntryRef) -> &'a Entry {
        match entry {
            EntryRef::Table(index) => &self.entries[*index],
            EntryRef::Key(entry) => entry,
        }
    }

    /// Whether the default entry is the only one: no route has its own.
    pub(crate) fn is_single(&self) -> bool {
        self.matchers.is_empty()
    }

    /// The default entry.
    pub(crate) fn default_entry(&self) -> &Entry {
        &self.entries[0]
    }

    /// Every entry, the default first.
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

/// A route predicate: the request's URI path is exactly `path`. For a gRPC
/// method, the path is `/package.Service/Method`.
pub(crate) fn path_is(path: &str) -> RouteMatch {
    let path: Box<str> = path.into();
    Arc::new(move |request: &RequestView<'_>| request.uri.path() == &*path)
}
