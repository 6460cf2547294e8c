//! The store contract of [tollgate](https://docs.rs/tollgate): where the
//! counters of a rate limit live, with no http or tower in it.
//!
//! This crate is to tollgate what `axum-core` is to axum: what a store
//! author, or a service that is not tower middleware (a rate-limit service
//! for proxies), needs to decide requests against a store: [`Store`] and
//! its [`StoreReply`], [`PolicyDecision`]s, refunds and debits, [`Key`]s
//! and [`Policy`]s, the [`MemoryStore`] and the wrappers that compose
//! stores. `tollgate` re-exports all of it (`tollgate::store` is this
//! crate; `tollgate::{Key, Policy, NamedLimit, Store, …}` its items):
//! users of the middleware need not name this crate.
//!
//! # Where the counters live
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
//! [`PenaltyBox`] refuses, for a while, the keys that keep being refused.
//! [`Breaker`] stops calling a store that keeps failing, for a cool-down,
//! so that an outage costs requests nothing rather than a timeout each.
//!
//! # An operator's handle
//!
//! Every store answers [`Store::peek`] (a key's state, charging nothing),
//! [`Store::reset`] (the key is whole again) and [`Store::unblock`] (any
//! refusal remembered for it is dropped). A peek is a check, so it has a
//! check's shape ([`StoreReply`], see [`StoreReply::resolve`] to `await`
//! it); reset and unblock return an [`AdminFuture`]. Stores that wrap
//! stores pass all three on.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature
// then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]

mod admin;
mod branches;
mod capability;
mod carry;
mod charge;
mod config;
mod decision;
mod failure;
pub mod fields;
mod key;
pub mod late;
mod memory;
mod observe;
mod outage;
mod policy;
mod prepared;
pub mod quotas;
mod receipt;
mod shadow;
pub mod shared;
pub mod slots;
mod wrapper;
mod wrappers;

pub use crate::prepared::Prepared;
pub use admin::{AdminError, AdminFuture};
use branches::Branch;
pub use capability::{Capability, MissingCapability, short_type_name};
pub use carry::Carried;
pub use charge::spawn_change;
pub use charge::{ChangeReply, PolicyDebit, PolicyRefund};
pub use config::{BoxError, ConfigError};
pub use decision::PolicyDecision;
pub use failure::{report_answer, report_failure, retry_after};
pub use key::{Key, KeyView};
pub use late::Watched;
#[doc(hidden)]
pub use memory::PinnedKey;
pub use memory::{MemoryStore, MemoryStoreBuilder};
#[cfg(feature = "metrics")]
pub use observe::describe_metrics;
pub use policy::{NamedLimit, Policy};
pub use receipt::Receipt;
pub use shadow::SHADOW_LOG_INTERVAL;
pub use wrapper::StoreWrapper;
pub use wrappers::block_cache::BlockCache;
pub use wrappers::block_list::{BlockList, DEFAULT_MAX_ENTRIES};
pub use wrappers::boxed::BoxStore;
pub use wrappers::breaker::{Breaker, BreakerState};
pub use wrappers::fallback::{DEFAULT_MAX_KNOWN, Fallback};
pub use wrappers::penalty::{DEFAULT_MAX_PENALTIES, Penalty, PenaltyBox};
pub use wrappers::presence::{Presence, Share};
pub use wrappers::resilient::{Resilient, step};
pub use wrappers::split::Split;
pub use wrappers::timeout::Timeout;

/// The wrappers' futures, as tower keeps a middleware's futures in its
/// `future` module: what a wrapper's `check` answers while the store
/// behind it decides.
pub mod future {
    pub use super::wrappers::block_cache::BlockCacheFuture;
    pub use super::wrappers::breaker::BreakerFuture;
    pub use super::wrappers::fallback::FallbackFuture;
    pub use super::wrappers::penalty::PenaltyFuture;
    pub use super::wrappers::timeout::TimeoutFuture;
}

/// The wrappers' errors: what each adds to the errors of the store
/// behind it.
pub mod error {
    pub use super::wrappers::boxed::BoxStoreError;
    pub use super::wrappers::breaker::{BreakerError, CircuitOpen};
    pub use super::wrappers::timeout::TimeoutError;
}

use std::future::Future;
use std::sync::Arc;

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

impl<F, E> StoreReply<F, E> {
    /// This reply in other types: a pending future through `future`, an
    /// error at once through `error` (what a wrapper's
    /// [`relay`](StoreWrapper::relay) does with the store behind's reply).
    pub fn map<F2, E2>(
        self,
        future: impl FnOnce(F) -> F2,
        error: impl FnOnce(E) -> E2,
    ) -> StoreReply<F2, E2> {
        match self {
            StoreReply::Ready(answer) => StoreReply::Ready(answer.map_err(error)),
            StoreReply::Pending(pending) => StoreReply::Pending(future(pending)),
        }
    }
}

impl<F, E> StoreReply<F, E>
where
    F: Future<Output = Result<PolicyDecision, E>>,
{
    /// The answer, waiting for it if it is not there yet: for callers
    /// outside the layer (an admin route awaiting a [`Store::peek`]).
    pub async fn resolve(self) -> Result<PolicyDecision, E> {
        match self {
            StoreReply::Ready(answer) => answer,
            StoreReply::Pending(future) => future.await,
        }
    }
}

/// Keeps the state of every key and decides requests against a [`Policy`].
///
/// A store must charge a request's limits all-or-nothing and must never admit
/// more than the algorithm allows, however many tasks call it at once.
///
/// # Writing a store
///
/// - A store **in front of another store** (a cache, a counter, a
///   timeout) implements [`StoreWrapper`] instead: it names the store it
///   wraps once and forwards every operation it does not change, so that
///   it never drops one of the inner store's capabilities.
/// - A store **that keeps counts** implements this trait: [`check`](Self::check)
///   is required; every other method has a default that is true for a
///   store that does not do that thing (it cannot give charges back, it
///   remembers no refusal, it cannot forget a key). Override
///   [`can`](Self::can) together with [`refund`](Self::refund) or
///   [`debit`](Self::debit) when it can; the layer asks `can` when it is
///   built, so a feature the store lacks fails there, naming the store.
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
    ///
    /// A decision made in time whose answer comes late is the caller's to
    /// settle: the layer hears it out and gives an admission back through
    /// [`refund`](Self::refund) ([`Watched`], see [`late`]), so a store that
    /// answers later should be able to give charges back.
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
    /// first request. The default supports everything.
    fn supports(&self, policy: &Policy) -> Result<(), ConfigError> {
        let _ = policy;
        Ok(())
    }

    /// Whether this store does `capability` ([`Capability::Refund`]:
    /// [`refund`](Self::refund) gives charges back; [`Capability::Debit`]:
    /// [`debit`](Self::debit) charges into debt), or which store lacks it.
    /// A layer asks when it is built: `charge_when` needs refunds,
    /// `pay_after` both. The default: [`MissingCapability`], naming this store's
    /// type.
    fn can(&self, capability: Capability) -> Result<(), MissingCapability> {
        Err(MissingCapability::of::<Self>(capability))
    }

    /// Gives back, as far as it still counts, a charge that
    /// [`check`](Self::check) made for `key` under `policy` (see
    /// [`PolicyRefund`]): every limit of the policy then stands as if the request
    /// had not been admitted, or, where its charge has partly or wholly
    /// stopped counting (a window moved on, a bucket refilled), never more
    /// lenient than that. Best effort: a store that cannot reach its
    /// counters keeps the charge (the request counts), and says so in its
    /// logs. The default does nothing, for a store that cannot
    /// ([`can`](Self::can) says so).
    ///
    /// A store that does I/O starts the refund on its own (a spawned task)
    /// and answers [`ChangeReply::Pending`], which completes when the
    /// refund has landed: the layer waits for it (at most its
    /// `store_timeout`) before it hands the response on, so that the
    /// client's next request finds the charge given back. Dropping the
    /// reply does not cancel the refund.
    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        let _ = (policy, key, refund);
        ChangeReply::Done
    }

    /// Charges `key` `debit.cost` more under every limit of `policy`,
    /// whatever the limits say: a cost learned only once a request it
    /// admitted is over (bytes sent, tokens generated). The key may go
    /// past its limit — into debt — and its later requests are refused (or
    /// delayed) until the debt is paid off at the quota's rate, with
    /// `Retry-After` saying when (see
    /// [`RateAlgorithm::debit`](tollgate_core::RateAlgorithm::debit)).
    /// Best effort, as [`refund`](Self::refund), and answered the same
    /// way: [`ChangeReply::Pending`] while a store that does I/O sends it.
    /// The default does nothing, for a store that cannot ([`can`](Self::can)
    /// says so).
    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: PolicyDebit) -> ChangeReply {
        let _ = (policy, key, debit);
        ChangeReply::Done
    }

    /// `key`'s state under every limit of `policy`, charging nothing and
    /// changing nothing a later decision could see: each limit's
    /// `limit`, `remaining`, `reset_after` and `replenish_after` as a
    /// request would find them now. `allowed` is the answer to a request
    /// of cost 0 (true unless the key is blocked or over its limit); read
    /// `remaining` to know whether a request of cost 1 would pass.
    ///
    /// The default is a check of cost 0, which charges nothing for every
    /// algorithm in the core and in the Redis scripts (tested by
    /// `tests/admin.rs` and the Redis admin tests: a key peeked at between
    /// requests is decided as one that was not). The memory store
    /// overrides it so that a peek at an unknown key does not take a
    /// place in the store; a [`PenaltyBox`] answers a blocked key's block.
    fn peek(&self, policy: &Arc<Policy>, key: &Key) -> StoreReply<Self::Future, Self::Error> {
        self.check(policy, key, 0)
    }

    /// Forgets `key`'s state under every limit of `policy`: the key is
    /// whole again, as one never seen, and any refusal or block
    /// remembered for it is dropped too (a reset key that stayed refused
    /// would not be whole). Other keys and other policies are untouched.
    ///
    /// The default fails with [`AdminError::Unsupported`]: a store of your
    /// own must say how to forget a key.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        let _ = (policy, key);
        AdminFuture::ready(Err(AdminError::Unsupported { operation: "reset" }))
    }

    /// Drops any refusal or penalty block remembered for `key` under
    /// `policy` (a [`BlockCache`]'s entry, a [`PenaltyBox`]'s block and
    /// offences), so that its next request is decided by its counts. The
    /// counts stay: a key over its limit is still refused by them.
    ///
    /// The default does nothing and succeeds, right for a store that
    /// remembers no refusal; a store that does must override it (a
    /// [`StoreWrapper`] passes it on by itself).
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        let _ = (policy, key);
        AdminFuture::ready(Ok(()))
    }

    /// Moves `key`'s usage from the plan `from` to the plan `to` (a key's
    /// quota changed: see the `quotas` module), the same on every
    /// store and algorithm, read once for all of them ([`Carried`]): the
    /// units the key has used under each limit of `from` now (its limit
    /// less what remains, read by [`peek`](Self::peek)) are still used
    /// under the limit of `to` with its name (limits left without a
    /// partner by name pair in order), charged at this moment as
    /// [`debit`](Self::debit) charges, and the moved limits' state is
    /// [`reset`](Self::reset). An upgrade from 5 used of 5 a minute to 100
    /// a minute leaves 95; a downgrade below what was used refuses until
    /// the usage has come back at the new quota's pace, with the
    /// `retry_after` the new quota gives. A debt beyond an old limit (a
    /// downgrade below what was used, a debit) is carried too, by every
    /// algorithm: the schedule algorithms' peek tells how far ahead they
    /// are, a window algorithm's how far past its limit its count is
    /// ([`Decision::over_limit`](tollgate_core::Decision::over_limit)), so a
    /// downgrade then an upgrade keeps it: 8 used of 10, lowered to 5,
    /// raised to 20, has 12 left ([`tollgate_core::used_of`]).
    ///
    /// A limit of `from` that `to` lacks keeps its state where it is, for
    /// its period, and a limit of `to` with no partner in `from` starts
    /// from its own: a limit missing from a plan for a moment (`burst`
    /// deleted from a limits file and put back) finds the usage it had
    /// when its plan returns (3 used of 5 leaves 2).
    ///
    /// Carried once, so instances that each see the change may each ask:
    /// where `from`'s and `to`'s states are apart (the memory store's are
    /// apart per policy; a [`Policy::plan`] keeps a plan's apart by name)
    /// a second move finds the moved limits reset and carries nothing;
    /// where a limit's state is the same under both (named by limit, as
    /// the layer's per-key quotas and live limits are), a change of quotas
    /// alone leaves it in place ([`Carried::in_place`]) and a second move
    /// of a changed plan reads the same usage again and charges it over
    /// a reset, never on top of it. Two moves of one key at the same
    /// instant can still lose what one reset between the other's read and
    /// charge (documented in the rollout guide).
    ///
    /// The default is written with `peek`, `reset` and `debit` (a plan of
    /// several limits reset and charged limit by limit, through
    /// [`Policy::limit_alone`]), right for every store that has them and
    /// names a key's state by limit, as the Redis stores do; a store that
    /// names it by policy (the memory store, the compare-and-swap store)
    /// overrides it, changing each limit's state in place; every store
    /// reads what it carries the same way ([`Carried`]).
    /// Stores in front of another ([`StoreWrapper`]) forward it. The
    /// conformance kit changes plans in its traces (a limit left out and
    /// put back too) and holds the result to the memory store's. A store
    /// without `reset` fails with [`AdminError::Unsupported`] (nothing is
    /// carried, `from`'s state stays where it was).
    fn carry(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> AdminFuture {
        carry_by_parts(self, from, to, key, 0)
    }
}

/// [`Store::carry`] from a store's `peek`, `reset` and `debit`: `from`'s
/// usage read ([`Carried`], with `unseen` added; a limit whose state is
/// the same under both plans stays in place, [`Carried::in_place`]), the
/// limits of `from` that moved reset (the others charged the unseen
/// units), then each limit of `to` debited what it carries, limit by limit
/// ([`Policy::limit_alone`]) for a plan of several limits: the default
/// [`Store::carry`], and what a store that keeps each limit's state apart
/// (as Redis does) answers; local-first adds the units it has not reported
/// yet as `unseen`.
pub fn carry_by_parts<St: Store>(
    store: &St,
    from: &Arc<Policy>,
    to: &Arc<Policy>,
    key: &Key,
    unseen: i64,
) -> AdminFuture {
    let (store, from, to, key) = (store.clone(), from.clone(), to.clone(), key.clone());
    AdminFuture::new(async move {
        let peek = store
            .peek(&from, &key)
            .resolve()
            .await
            .map_err(AdminError::store)?;
        let carried = Carried::read(&from, &peek, &to, unseen).in_place(&from, &to, unseen);
        if carried.moves_all() {
            store.reset(&from, &key).await?;
        }
        for (index, kept) in carried.from.iter().enumerate() {
            let Some(part) = (!carried.moves_all())
                .then(|| from.limit_alone(index))
                .flatten()
            else {
                continue;
            };
            let part = Arc::new(part);
            match kept {
                None => store.reset(&part, &key).await?,
                Some(0) => {}
                Some(units) => {
                    store
                        .debit(&part, &key, PolicyDebit::new(*units))
                        .landed()
                        .await;
                }
            }
        }
        for (index, units) in carried.to.iter().enumerate() {
            if *units == 0 {
                continue;
            }
            let debit = PolicyDebit::new(*units);
            match to.limits().len() {
                1 => {
                    store.debit(&to, &key, debit).landed().await;
                }
                _ => {
                    let Some(part) = to.limit_alone(index) else {
                        continue;
                    };
                    store.debit(&Arc::new(part), &key, debit).landed().await;
                }
            }
        }
        Ok(())
    })
}

/// Reads the clock the stores and wrappers read by default once: it sets
/// itself up at its first reading (the time-stamp counter is calibrated
/// once per process, for at most 200 ms), which should happen when a layer,
/// a limiter or a wrapper on that clock is built, not at its first request.
pub fn set_up_default_clock() {
    tollgate_core::Clock::now(&tollgate_core::MonotonicClock);
}

/// What the middleware crates beside this one (tollgate, and through it
/// tollgate-tonic) share with it and users do not need: not part of the
/// API, and may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::outage::{Outage, OutageEnd};
    /// Metrics and log pacing, shared with the middleware.
    pub mod observe {
        #[cfg(feature = "metrics")]
        pub use crate::late::register_late_checks;
        pub use crate::observe::*;
    }
    pub use crate::policy::{is_token, plan_fingerprint, with_overrides};
    /// Shadow limits, shared with the middleware.
    pub mod shadow {
        pub use crate::shadow::*;
    }
    pub use crate::set_up_default_clock;
}
