//! The one interface behind which each mode, exact and periodic, keeps
//! its keys: the store asks its mode, chosen once when it is built, and
//! never matches on the mode itself.

use crate::reply::Reply;
use crate::shared::Shared;
use crate::table::Found;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tollgate_store::shared::SharedStore;
use tollgate_store::{ChangeReply, PolicyRefund};
use tollgate_store::{Key, Policy};

/// A future a mode answers with, boxed so that the mode can stand behind
/// a trait object.
pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a [`LocalFirst`](crate::LocalFirst) store asks of its mode, one
/// method per operation of the store; each mode's file implements it.
pub(crate) trait Mode<S: SharedStore>: Send + Sync + 'static {
    /// What the mode's slots share with the store: the shared store, the
    /// settings, the counts, the clock.
    fn shared(&self) -> &Shared<S>;

    /// The keys in memory now.
    fn keys(&self) -> u64;

    /// A request of `cost` (not 0) decided at its key's slot, made if the
    /// key has none and the shared store shares `policy`.
    fn check(&self, policy: &Arc<Policy>, key: &Key, cost: u32) -> Found<Reply<S>>;

    /// A request decided by the shared store, for a key with no slot here.
    fn decide_in_store(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> Reply<S>;

    /// A peek (a check of cost 0): the shared store's counts, as this
    /// instance would admit from them.
    fn peek(&self, policy: &Arc<Policy>, key: &Key, within: Duration) -> Reply<S>;

    /// Gives a charge back (see the store's `refund`).
    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply;

    /// Charges `cost` from what the key's slot holds or counts; answers the
    /// part left for the shared store to charge.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, cost: u32) -> u32;

    /// Takes the key's slot out for a carry, once its call in flight has
    /// ended, and returns what it holds to the shared store's count; answers
    /// what the carry must count beside the shared store's reading.
    fn take_slot<'a>(
        &'a self,
        policy: &'a Arc<Policy>,
        key: &'a Key,
    ) -> Boxed<'a, Result<i64, S::Error>>;

    /// Drops the key's slot for a reset, once its call in flight has ended.
    fn forget_slot<'a>(&'a self, policy: &'a Policy, key: &'a Key) -> Boxed<'a, ()>;

    /// Forgets a refusal the key's slot remembers.
    fn unblock(&self, policy: &Policy, key: &Key);
}
