//! Where the counters live.
//!
//! The layer is generic over a [`Store`], so the in-memory store costs no
//! virtual call and no allocation. Stores that answer without I/O (like
//! [`MemoryStore`]) return [`StoreReply::Ready`] and the layer decides inside
//! `call`; stores that do I/O (Redis) return a future, which the layer polls
//! under a timeout.
//!
//! Stores compose as tower layers do: [`Timeout`] bounds how long another
//! store's answer is awaited, [`Fallback`] decides with a second store when
//! the first fails, [`BlockCache`] refuses on its own, until their retry
//! time, the keys the store behind refused (its [`BlockList`] is what the
//! Redis store consults before each round trip), and a store of your own
//! can stand in front of any other by implementing [`Store`] over it.

mod block_cache;
mod boxed;
mod fallback;
mod fingerprint;
mod memory;
mod timeout;

pub use block_cache::{BlockCache, BlockCacheFuture, BlockList, DEFAULT_MAX_ENTRIES};
pub use boxed::{BoxStore, BoxStoreError, BoxStoreFuture};
pub use fallback::{Fallback, FallbackFuture};
pub use fingerprint::{ByFingerprint, FingerprintHasher};
pub use memory::{MemoryStore, MemoryStoreBuilder};
pub use timeout::{Timeout, TimeoutError, TimeoutFuture};

use crate::{ConfigError, Key, Policy};
use smallvec::SmallVec;
use std::future::Future;
use std::sync::Arc;
use tollgate_core::Decision;

/// The decisions of every limit of a policy for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyDecision {
    /// All limits folded into one ([`Decision::merge`]): allowed only if every
    /// limit allowed, and then every limit was charged.
    pub merged: Decision,
    /// Each limit's own decision, in the policy's order.
    pub each: SmallVec<[Decision; 2]>,
}

/// A store's answer: at once, or later.
// `Ready` is the hot path of the memory store; boxing it would allocate.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum StoreReply<F, E> {
    /// Decided without waiting.
    Ready(Result<PolicyDecision, E>),
    /// Will be decided when the future completes.
    Pending(F),
}

/// Keeps the state of every key and decides requests against a [`Policy`].
///
/// A store must charge a request's limits all-or-nothing and must never admit
/// more than the algorithm allows, however many tasks call it at once.
pub trait Store: Clone + Send + Sync + 'static {
    /// What can go wrong (`Infallible` for memory).
    type Error: std::error::Error + Send + Sync + 'static;
    /// The future of a check that has to wait.
    type Future: Future<Output = Result<PolicyDecision, Self::Error>> + Send + 'static;

    /// Checks one request of `cost` for `key` against every limit of `policy`.
    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Self::Error>;

    /// Checks one request as [`check`](Self::check) does, for a caller that
    /// stops waiting for the answer after `within` (the layer's
    /// `store_timeout`). A store whose work can outlive the wait (a Redis
    /// script queued behind a stalled server) should then charge nothing
    /// for a decision made after the caller gave up: that request was
    /// already answered by the store-error behaviour. The default ignores
    /// `within`, right for stores that answer at once.
    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: std::time::Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        let _ = within;
        self.check(policy, key, cost)
    }

    /// Whether this store can decide `policy`, or what it cannot do: a
    /// layer asks when it is built, so that a combination a store does not
    /// support (an algorithm, a delay) fails in `try_build`, not at the
    /// first request. Stores that wrap stores ask theirs. The default
    /// supports everything.
    fn supports(&self, policy: &Policy) -> Result<(), ConfigError> {
        let _ = policy;
        Ok(())
    }
}
