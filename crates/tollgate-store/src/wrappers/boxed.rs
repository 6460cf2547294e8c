//! [`BoxStore`]: any store behind one type, chosen at run time.

use crate::key::Key;
use crate::policy::Policy;
use crate::{ChangeReply, PolicyDecision, Store, StoreReply};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// The error of a [`BoxStore`]: the underlying store's, boxed.
#[derive(Debug)]
pub struct BoxStoreError(pub Box<dyn std::error::Error + Send + Sync>);

impl fmt::Display for BoxStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BoxStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The future of a [`BoxStore`] check (named `<BoxStore as Store>::Future`
/// outside this module).
type BoxStoreFuture = Pin<Box<dyn Future<Output = Result<PolicyDecision, BoxStoreError>> + Send>>;

/// Any [`Store`] behind one type, so that the store can be chosen from
/// configuration at run time (memory or Redis) without changing the layer's
/// type. Costs a virtual call per check, and a box for stores that wait.
///
/// ```
/// use tollgate_store::BoxStore;
/// use tollgate_store::MemoryStore;
///
/// let store = BoxStore::new(MemoryStore::new());
/// # let _ = store;
/// ```
#[derive(Clone)]
pub struct BoxStore(Arc<dyn ErasedStore>);

impl fmt::Debug for BoxStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BoxStore")
    }
}

impl BoxStore {
    /// Boxes `store`.
    pub fn new<St: Store>(store: St) -> Self {
        BoxStore(Arc::new(store))
    }
}

trait ErasedStore: Send + Sync {
    fn check_erased(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Option<Duration>,
    ) -> StoreReply<BoxStoreFuture, BoxStoreError>;

    fn supports_erased(&self, policy: &Policy) -> Result<(), crate::ConfigError>;

    fn can_erased(&self, capability: crate::Capability) -> Result<(), crate::MissingCapability>;

    fn refund_erased(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        refund: crate::PolicyRefund,
    ) -> ChangeReply;

    fn debit_erased(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        debit: crate::PolicyDebit,
    ) -> ChangeReply;

    fn peek_erased(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
    ) -> StoreReply<BoxStoreFuture, BoxStoreError>;

    fn reset_erased(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture;

    fn unblock_erased(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture;

    fn carry_erased(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> crate::AdminFuture;
}

impl<St: Store> ErasedStore for St {
    fn check_erased(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Option<Duration>,
    ) -> StoreReply<BoxStoreFuture, BoxStoreError> {
        let check = match within {
            Some(within) => self.check_within(policy, key, cost, within),
            None => self.check(policy, key, cost),
        };
        erase(check)
    }

    fn peek_erased(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
    ) -> StoreReply<BoxStoreFuture, BoxStoreError> {
        erase(self.peek(policy, key))
    }

    fn reset_erased(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        self.reset(policy, key)
    }

    fn unblock_erased(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        self.unblock(policy, key)
    }

    fn carry_erased(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        self.carry(from, to, key)
    }

    fn supports_erased(&self, policy: &Policy) -> Result<(), crate::ConfigError> {
        self.supports(policy)
    }

    fn can_erased(&self, capability: crate::Capability) -> Result<(), crate::MissingCapability> {
        self.can(capability)
    }

    fn refund_erased(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        refund: crate::PolicyRefund,
    ) -> ChangeReply {
        self.refund(policy, key, refund)
    }

    fn debit_erased(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        debit: crate::PolicyDebit,
    ) -> ChangeReply {
        self.debit(policy, key, debit)
    }
}

/// A store's reply with its future and error boxed.
fn erase<F, E>(reply: StoreReply<F, E>) -> StoreReply<BoxStoreFuture, BoxStoreError>
where
    F: Future<Output = Result<PolicyDecision, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    match reply {
        StoreReply::Ready(result) => {
            StoreReply::Ready(result.map_err(|e| BoxStoreError(Box::new(e))))
        }
        StoreReply::Pending(future) => StoreReply::Pending(Box::pin(async move {
            future.await.map_err(|e| BoxStoreError(Box::new(e)))
        })),
    }
}

impl Store for BoxStore {
    type Error = BoxStoreError;
    type Future = BoxStoreFuture;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<BoxStoreFuture, BoxStoreError> {
        self.0.check_erased(policy, key, cost, None)
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<BoxStoreFuture, BoxStoreError> {
        self.0.check_erased(policy, key, cost, Some(within))
    }

    fn supports(&self, policy: &Policy) -> Result<(), crate::ConfigError> {
        self.0.supports_erased(policy)
    }

    fn can(&self, capability: crate::Capability) -> Result<(), crate::MissingCapability> {
        self.0.can_erased(capability)
    }

    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: crate::PolicyRefund) -> ChangeReply {
        self.0.refund_erased(policy, key, refund)
    }

    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: crate::PolicyDebit) -> ChangeReply {
        self.0.debit_erased(policy, key, debit)
    }

    fn peek(&self, policy: &Arc<Policy>, key: &Key) -> StoreReply<BoxStoreFuture, BoxStoreError> {
        self.0.peek_erased(policy, key)
    }

    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        self.0.reset_erased(policy, key)
    }

    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        self.0.unblock_erased(policy, key)
    }

    fn carry(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        self.0.carry_erased(from, to, key)
    }
}
