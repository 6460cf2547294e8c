//! [`CasStore`]: the store over a [`CasBackend`], and its builder.

use super::backend::CasBackend;
use super::error::CasError;
use super::future::{Call, CasFuture};
use super::name::{PolicyPart, key_name};
use super::retry::Retry;
use super::shared::Shared;
use super::step::{Op, nothing};
use smallvec::SmallVec;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tollgate_internal::ChargeChange;
use tollgate_store::Key;
use tollgate_store::Policy;
use tollgate_store::spawn_change;
use tollgate_store::{
    AdminError, AdminFuture, Capability, Carried, ChangeReply, MissingCapability, PolicyDebit,
    PolicyRefund, Store, StoreReply,
};

/// A [`Store`] over a key-value backend that can compare and swap: the
/// algorithms of `tollgate-core` decided here, the states kept in the
/// backend, shared by every instance that uses it. See the [module
/// docs](super) for how it decides, names keys, expires values and
/// retries.
///
/// Every algorithm, delay mode, refunds and debits (`charge_when`,
/// `pay_after`), peek, reset and a plan's carried usage: it decides
/// exactly as the [`MemoryStore`](tollgate_store::MemoryStore) does (the
/// conformance kit checks it). Every call is a round trip at least (a
/// read, and a write unless it was refused or changed nothing): put a
/// [`BlockCache`](tollgate_store::BlockCache) in front of it to answer
/// refused keys without one. Its futures pause on tokio's timer after a
/// lost race, and its refunds and debits run on a spawned task: use it
/// on a Tokio runtime with time enabled, as the layer does.
///
/// ```
/// use std::sync::Arc;
/// use tollgate_cas::{CasStore, MemoryBackend};
/// use tollgate_store::{Key, NamedLimit, Policy, Store};
/// use tollgate_core::Quota;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = CasStore::builder(MemoryBackend::new()).prefix("app").build();
/// let policy = Arc::new(Policy::new(vec![NamedLimit::new("api", Quota::per_minute(1))]));
/// let key = Key::from("alice");
/// assert!(store.check(&policy, &key, 1).resolve().await.unwrap().merged().allowed());
/// assert!(!store.check(&policy, &key, 1).resolve().await.unwrap().merged().allowed());
/// assert_eq!(store.key_name(&policy, &key), "app:api:-:alice");
/// # });
/// ```
pub struct CasStore<B> {
    shared: Arc<Shared<B>>,
}

impl<B> Clone for CasStore<B> {
    fn clone(&self) -> Self {
        CasStore {
            shared: self.shared.clone(),
        }
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for CasStore<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CasStore")
            .field("backend", &self.shared.backend)
            .field("prefix", &self.shared.prefix)
            .field("retry", &self.shared.retry)
            .finish_non_exhaustive()
    }
}

impl<B: CasBackend> CasStore<B> {
    /// A store over `backend`, with the defaults: prefix `"tollgate"`, 8
    /// attempts, pauses from up to 1 ms doubling to up to 50 ms.
    pub fn new(backend: B) -> Self {
        Self::builder(backend).build()
    }

    /// A builder for a store over `backend`.
    pub fn builder(backend: B) -> CasStoreBuilder<B> {
        CasStoreBuilder {
            backend,
            prefix: String::from("tollgate"),
            retry: Retry::default(),
            expected: 1,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// The key `key`'s states under `policy` have in the backend:
    /// `{prefix}:{limit names}:{plan}:{user key}` (the plan's fingerprint
    /// in hexadecimal, or `-`; the user key escaped, or hashed when long).
    pub fn key_name(&self, policy: &Policy, key: &Key) -> String {
        let part = policy.prepared(PolicyPart::of);
        key_name(&self.shared.prefix, &part, key)
    }

    /// How many instances share this store's backend, and this one's rank
    /// among them, as its presence beat counts them: what a
    /// [`Split`](tollgate_store::Split) fallback divides the limits by
    /// ([`Split::presence`](tollgate_store::Split::presence)). The first call
    /// starts the beat (on the current tokio runtime; outside one, the
    /// count stays the operator's, [`CasStoreBuilder::instances`]): every
    /// second, and at once, the store writes in one value of the backend,
    /// `{prefix}:instances`, that this instance shares it for the next
    /// 5 s, as a check writes a key (read, then write if unchanged), and
    /// counts the instances whose word has not ended, on the backend's
    /// clock. A beat that finds the word gone (the value was lost) counts
    /// no fewer than before until the next. Clones share one beat.
    pub fn presence(&self) -> tollgate_store::Presence {
        self.shared
            .presence
            .get_or_init(|| {
                let presence = tollgate_store::Presence::expecting(self.shared.expected);
                if tokio::runtime::Handle::try_current().is_ok() {
                    tokio::spawn(super::presence::beat(
                        Arc::downgrade(&self.shared),
                        presence.clone(),
                        self.shared.random_id(),
                    ));
                }
                presence
            })
            .clone()
    }

    /// How many writes lost their race to another writer so far (each was
    /// read, decided and tried again, or, the last of its call, failed
    /// with [`CasError::Contended`]).
    pub fn conflicts(&self) -> u64 {
        self.shared.conflicts()
    }

    /// How many calls failed with [`CasError::Contended`] so far: every
    /// attempt lost its race.
    pub fn contended(&self) -> u64 {
        self.shared.contended()
    }

    /// `op` on `key` under `policy`.
    fn start(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        op: Op,
        within: Option<Duration>,
    ) -> CasFuture<B> {
        CasFuture::new(self.call(policy, key, op, within))
    }

    /// [`Store::carry`], with `unseen` more units counted than the store
    /// holds (a local-first store's unreported admissions): `to`'s
    /// states charged in one write, as the policy's value keeps them.
    pub(super) fn carry_with(
        &self,
        from: &Arc<Policy>,
        to: &Arc<Policy>,
        key: &Key,
        unseen: i64,
    ) -> AdminFuture {
        let store = self.clone();
        let (from, to, key) = (from.clone(), to.clone(), key.clone());
        AdminFuture::new(async move {
            let peek = store
                .peek(&from, &key)
                .resolve()
                .await
                .map_err(AdminError::store)?;
            let carried = Carried::read(&from, &peek, &to, unseen);
            if store.one_value(&from, &to, &key) {
                // The value says its quotas and reads as the same usage
                // under `to`'s: only the unseen units are charged.
                let unseen = u32::try_from(unseen.max(0)).unwrap_or(u32::MAX);
                if unseen == 0 {
                    return Ok(());
                }
                let units = to.limits().iter().map(|_| unseen).collect();
                return store
                    .start(&to, &key, Op::Force(units), None)
                    .await
                    .map(drop)
                    .map_err(AdminError::store);
            }
            if carried.moves_all() {
                store.reset(&from, &key).await?;
            } else {
                store
                    .start(&from, &key, Op::Release(carried.from.clone()), None)
                    .await
                    .map_err(AdminError::store)?;
            }
            if !carried.charges() {
                return Ok(());
            }
            store
                .start(&to, &key, Op::Force(carried.to), None)
                .await
                .map(drop)
                .map_err(AdminError::store)
        })
    }

    /// Whether `from` and `to` keep `key`'s states in one value, each limit
    /// of the same algorithm in both (a limit's quota changed, as live
    /// limits change it): the value is then read under `to` as the same
    /// usage, and moving it (read, reset, written) would say the same but
    /// could lose it between two instances' moves.
    fn one_value(&self, from: &Policy, to: &Policy, key: &Key) -> bool {
        let algorithms = |policy: &Policy| -> Vec<tollgate_core::Algorithm> {
            policy
                .limits()
                .iter()
                .map(|l| l.limiter().algorithm())
                .collect()
        };
        self.key_name(from, key) == self.key_name(to, key) && algorithms(from) == algorithms(to)
    }

    /// One call of `op` on `key`, answering the whole [`Reply`](super::step::Reply).
    pub(super) fn call(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        op: Op,
        within: Option<Duration>,
    ) -> Call<B> {
        let name: Arc<str> = Arc::from(self.key_name(policy, key));
        Call::start(self.shared.clone(), policy.clone(), name, op, within)
    }

    /// A check or a peek: at once for a policy of no limits.
    fn decide(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        op: Op,
        within: Option<Duration>,
    ) -> StoreReply<CasFuture<B>, CasError<B::Error>> {
        if policy.limits().is_empty() {
            return StoreReply::Ready(Ok(nothing()));
        }
        StoreReply::Pending(self.start(policy, key, op, within))
    }
}

/// Builds a [`CasStore`].
#[derive(Debug)]
#[must_use = "a builder does nothing until built"]
pub struct CasStoreBuilder<B> {
    backend: B,
    prefix: String,
    retry: Retry,
    expected: u32,
}

impl<B: CasBackend> CasStoreBuilder<B> {
    /// The first part of every key's name (default `"tollgate"`): stores
    /// with different prefixes share nothing in one backend.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How many writes a call tries at most, the first included (default
    /// 8; at least 1): after that many lost races it fails with
    /// [`CasError::Contended`], having charged nothing.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.retry.max_attempts = attempts.max(1);
        self
    }

    /// Tries a write that keeps losing its race for as long as `within`
    /// allows: the default 8 attempts, and one more for every longest
    /// pause (the backoff's `cap`, 50 ms by default) of `within`. For a
    /// caller that gives a call `within` anyway (a store timeout): callers
    /// sharing one hot key do not fail a call a busy backend could still
    /// decide. Set the backoff first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_cas::{CasStore, MemoryBackend};
    ///
    /// // 8 attempts, and 20 more in a second of 50 ms pauses.
    /// let store = CasStore::builder(MemoryBackend::new())
    ///     .retry_within(Duration::from_secs(1))
    ///     .build();
    /// # let _ = store;
    /// ```
    pub fn retry_within(mut self, within: Duration) -> Self {
        let cap = self.retry.cap.as_nanos().max(1);
        let more = u32::try_from(within.as_nanos() / cap).unwrap_or(u32::MAX);
        self.retry.max_attempts = 8u32.saturating_add(more);
        self
    }

    /// The pauses after a lost race: after the `n`th, a random time
    /// between zero and `base · 2^(n − 1)`, at most `cap` (defaults: 1 ms
    /// and 50 ms). Random, so that writers that collided do not collide
    /// again in step; zero for both retries at once.
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.retry.base = base;
        self.retry.cap = cap;
        self
    }

    /// How many instances share the backend, as an operator knows it:
    /// the count of [`CasStore::presence`] until its beat has counted
    /// (default 1; at least 1).
    pub fn instances(mut self, instances: u32) -> Self {
        self.expected = instances.max(1);
        self
    }

    /// The store.
    pub fn build(self) -> CasStore<B> {
        CasStore {
            shared: Arc::new(Shared::new(
                self.backend,
                self.prefix.into_boxed_str(),
                self.retry,
                self.expected,
            )),
        }
    }
}

impl<B: CasBackend> Store for CasStore<B> {
    type Error = CasError<B::Error>;
    type Future = CasFuture<B>;

    /// Reads, decides and writes (see the [module docs](super)).
    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.decide(policy, key, Op::Check(cost), None)
    }

    /// As `check`, writing with a deadline on the backend's clock: a
    /// decision that cannot be written before the caller stops waiting is
    /// not written, and fails with [`CasError::Late`].
    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.decide(policy, key, Op::Check(cost), Some(within))
    }

    /// Refunds and debits, both.
    fn can(&self, _: Capability) -> Result<(), MissingCapability> {
        Ok(())
    }

    /// Gives the charge back as the memory store does (a key the backend
    /// no longer holds has nothing to give back), on a spawned task when
    /// the backend does not answer at once.
    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        if policy.limits().is_empty() || refund.cost == 0 {
            return ChangeReply::Done;
        }
        settle(
            ChargeChange::Refund,
            self.start(policy, key, Op::Refund(refund), None),
        )
    }

    /// Charges every limit `debit.cost` as the memory store does, on a
    /// spawned task when the backend does not answer at once.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: PolicyDebit) -> ChangeReply {
        if policy.limits().is_empty() || debit.cost == 0 {
            return ChangeReply::Done;
        }
        let units = SmallVec::from_elem(debit.cost, policy.limits().len());
        settle(
            ChargeChange::Debit,
            self.start(policy, key, Op::Force(units), None),
        )
    }

    /// A read, decided on a copy: nothing is written.
    fn peek(&self, policy: &Arc<Policy>, key: &Key) -> StoreReply<Self::Future, Self::Error> {
        self.decide(policy, key, Op::Peek, None)
    }

    /// Replaces the key's value with nothing (an empty value, at rest at
    /// once), whatever it held: also a value that cannot be read.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> AdminFuture {
        if policy.limits().is_empty() {
            return AdminFuture::ready(Ok(()));
        }
        let call = self.start(policy, key, Op::Reset, None);
        AdminFuture::new(async move { call.await.map(drop).map_err(AdminError::store) })
    }

    /// As the memory store carries ([`Carried`]): `from`'s value reset
    /// (or, when some of its limits stay, those that moved made fresh in
    /// one write), then each limit of `to` charged what its partner used,
    /// in one write.
    fn carry(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> AdminFuture {
        self.carry_with(from, to, key, 0)
    }

    // `unblock`: the default. The store remembers no refusal; a key
    // refused here is refused by its counts, which `reset` forgets.
}

/// How long a refund or a debit on its own task may take (a backend that
/// hangs would otherwise keep one task per refunded request).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs a refund or a debit: done at once when the backend answers at
/// once (polled here once), else on a task of the current Tokio runtime,
/// given up after [`CHANGE_TIMEOUT`]; a failure is logged.
fn settle<B: CasBackend>(change: ChargeChange, call: CasFuture<B>) -> ChangeReply {
    let mut call = Box::pin(call);
    if let Poll::Ready(done) = call.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        return match done {
            Ok(_) => ChangeReply::Done,
            Err(error) => {
                change.failed(STORE, &error);
                ChangeReply::failed()
            }
        };
    }
    spawn_change(STORE, change, CHANGE_TIMEOUT, async move {
        call.await.map(|_| ())
    })
}

/// How this store's failed refunds and debits are logged.
const STORE: &str = "tollgate (compare-and-swap store)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    #[test]
    fn retrying_within_a_time_adds_an_attempt_per_longest_pause() {
        let attempts = |builder: CasStoreBuilder<MemoryBackend>| builder.retry.max_attempts;
        let builder = || CasStore::builder(MemoryBackend::new());
        assert_eq!(attempts(builder()), 8);
        assert_eq!(
            attempts(builder().retry_within(Duration::from_millis(100))),
            10
        );
        assert_eq!(
            attempts(builder().retry_within(Duration::from_secs(5))),
            108
        );
        assert_eq!(attempts(builder().retry_within(Duration::ZERO)), 8);
        // Pauses of at most 10 ms: one more per 10 ms.
        let short = builder()
            .backoff(Duration::from_millis(1), Duration::from_millis(10))
            .retry_within(Duration::from_millis(100));
        assert_eq!(attempts(short), 18);
        assert_eq!(attempts(builder().retry_within(Duration::MAX)), u32::MAX);
    }
}
