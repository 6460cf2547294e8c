//! [`StoreWrapper`]: a store in front of one other store, which names it
//! once and forwards, by construction, every operation it does not
//! change.

use super::{
    AdminFuture, Capability, ChangeReply, MissingCapability, PolicyDebit, PolicyDecision,
    PolicyRefund, Store, StoreReply,
};
use crate::ConfigError;
use crate::key::Key;
use crate::policy::Policy;
use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A store in front of another, as a tower middleware is in front of a
/// service: it says which store it wraps ([`inner`](Self::inner)), how it
/// decides a check ([`check_within`](Self::check_within)) and how the
/// store behind's answer becomes its own ([`relay`](Self::relay)); every
/// other operation goes to the same operation of the inner store (a peek
/// to its peek, a refund to its refund) unless the wrapper overrides it.
/// Every `StoreWrapper` is a [`Store`].
///
/// A wrapper that asks the store behind about another policy or key than
/// the one it was given (as [`Split`](super::Split) does) says so once, in
/// [`inner_policy`](Self::inner_policy) or [`inner_key`](Self::inner_key):
/// every forwarded operation asks about those.
///
/// So a wrapper cannot drop a capability by forgetting a method: a
/// wrapper over a store that gives charges back gives them back too,
/// and an operation added to [`Store`] later reaches the inner store of
/// every wrapper without a change to any of them. Override an operation
/// only to change it (a cache that must forget a refusal when a charge
/// is given back, a timeout on an operator's reset).
///
/// [`Timeout`](super::Timeout), [`BlockCache`](super::BlockCache) and
/// [`PenaltyBox`](super::PenaltyBox) are wrappers. [`Fallback`](super::Fallback)
/// is not (it has two stores and routes every operation), nor is
/// [`BoxStore`](super::BoxStore) (it forwards through a virtual call).
///
/// Name the trait by its path where you implement it rather than
/// importing it: with both traits in scope, a call such as
/// `wrapper.check(..)` would be ambiguous between them (rustc asks which),
/// and callers want [`Store`]'s.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use tollgate_store::StoreReply;
/// use tollgate_store::{Key, MemoryStore, Policy, Store};
///
/// /// Counts the checks that reach the store behind it; refunds, debits,
/// /// peeks and an operator's calls pass through untouched.
/// #[derive(Clone)]
/// struct Counting<St> {
///     inner: St,
///     checks: Arc<AtomicU64>,
/// }
///
/// impl<St: Store> tollgate_store::StoreWrapper for Counting<St> {
///     type Inner = St;
///     type Error = St::Error;
///     type Future = St::Future;
///
///     fn inner(&self) -> &St {
///         &self.inner
///     }
///
///     // The store behind's futures are this wrapper's: its answers pass as
///     // they are.
///     fn relay(&self, _: &Arc<Policy>, _: &Key, reply: StoreReply<St::Future, St::Error>)
///         -> StoreReply<St::Future, St::Error>
///     {
///         reply
///     }
///
///     fn check_within(
///         &self,
///         policy: &Arc<Policy>,
///         key: &Key,
///         cost: u32,
///         within: Duration,
///     ) -> StoreReply<St::Future, St::Error> {
///         self.checks.fetch_add(1, Ordering::Relaxed);
///         self.inner.check_within(policy, key, cost, within)
///     }
/// }
///
/// let store = Counting { inner: MemoryStore::new(), checks: Arc::default() };
/// // The memory store gives charges back, so the wrapper does too.
/// assert!(store.can(tollgate_store::Capability::Refund).is_ok());
/// ```
pub trait StoreWrapper: Clone + Send + Sync + 'static {
    /// The store behind.
    type Inner: Store;
    /// What can go wrong.
    type Error: std::error::Error + Send + Sync + 'static;
    /// The future of a check that has to wait.
    type Future: Future<Output = Result<PolicyDecision, Self::Error>> + Send + 'static;

    /// The store behind.
    fn inner(&self) -> &Self::Inner;

    /// The store behind's reply to an operation this wrapper forwarded
    /// (a [`peek`](Self::peek)), about `policy` and `key`, as this
    /// wrapper's own reply. A wrapper whose future and error are the store
    /// behind's returns `reply` as it is; one with a future of its own
    /// wraps it (without whatever it does on a check: a peek charges
    /// nothing, so there is nothing to learn or count).
    fn relay(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        reply: StoreReply<<Self::Inner as Store>::Future, <Self::Inner as Store>::Error>,
    ) -> StoreReply<Self::Future, Self::Error>;

    /// The policy the store behind is asked about for `policy`, by every
    /// operation this trait forwards: `policy` itself unless the wrapper
    /// changes it (as [`Split`](super::Split) does).
    fn inner_policy<'a>(&self, policy: &'a Arc<Policy>) -> Cow<'a, Arc<Policy>> {
        Cow::Borrowed(policy)
    }

    /// The key the store behind is asked about for `key`, by every
    /// operation this trait forwards: `key` itself unless the wrapper
    /// changes it.
    fn inner_key<'a>(&self, key: &'a Key) -> Cow<'a, Key> {
        Cow::Borrowed(key)
    }

    /// Checks a request (see [`Store::check_within`]; a plain
    /// [`Store::check`] comes here with `within` = [`Duration::MAX`]).
    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Self::Error>;

    /// See [`Store::peek`]. Forwarded by default (to the store behind's
    /// own peek, never to a check), its reply [relayed](Self::relay).
    fn peek(&self, policy: &Arc<Policy>, key: &Key) -> StoreReply<Self::Future, Self::Error> {
        let reply = self
            .inner()
            .peek(&self.inner_policy(policy), &self.inner_key(key));
        self.relay(policy, key, reply)
    }

    /// See [`Store::supports`]. Forwarded by default.
    fn supports(&self, policy: &Policy) -> Result<(), ConfigError> {
        self.inner().supports(policy)
    }

    /// See [`Store::can`]. Forwarded by default.
    fn can(&self, capability: Capability) -> Result<(), MissingCapability> {
        self.inner().can(capability)
    }

    /// See [`Store::refund`]. Forwarded by default.
    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        self.inner()
            .refund(&self.inner_policy(policy), &self.inner_key(key), refund)
    }

    /// See [`Store::debit`]. Forwarded by default.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: PolicyDebit) -> ChangeReply {
        self.inner()
            .debit(&self.inner_policy(policy), &self.inner_key(key), debit)
    }

    /// See [`Store::reset`]. Forwarded by default.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        self.inner()
            .reset(&self.inner_policy(policy), &self.inner_key(key))
    }

    /// See [`Store::carry`]. Forwarded by default: the store behind keeps
    /// the counts, and knows how it names them.
    fn carry(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> AdminFuture {
        let (from, to) = (self.inner_policy(from), self.inner_policy(to));
        self.inner().carry(&from, &to, &self.inner_key(key))
    }

    /// See [`Store::unblock`]. Forwarded by default.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        self.inner()
            .unblock(&self.inner_policy(policy), &self.inner_key(key))
    }
}

impl<W: StoreWrapper> Store for W {
    type Error = W::Error;
    type Future = W::Future;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Self::Error> {
        StoreWrapper::check_within(self, policy, key, cost, Duration::MAX)
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        StoreWrapper::check_within(self, policy, key, cost, within)
    }

    fn peek(&self, policy: &Arc<Policy>, key: &Key) -> StoreReply<Self::Future, Self::Error> {
        StoreWrapper::peek(self, policy, key)
    }

    fn supports(&self, policy: &Policy) -> Result<(), ConfigError> {
        StoreWrapper::supports(self, policy)
    }

    fn can(&self, capability: Capability) -> Result<(), MissingCapability> {
        StoreWrapper::can(self, capability)
    }

    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        StoreWrapper::refund(self, policy, key, refund)
    }

    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: PolicyDebit) -> ChangeReply {
        StoreWrapper::debit(self, policy, key, debit)
    }

    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        StoreWrapper::reset(self, policy, key)
    }

    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        StoreWrapper::unblock(self, policy, key)
    }

    fn carry(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> AdminFuture {
        StoreWrapper::carry(self, from, to, key)
    }
}
