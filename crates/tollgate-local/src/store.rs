//! The [`Store`] contract of a [`LocalFirst`] store: each operation asks
//! the store's mode (see `seam`), once; what the operations do in each
//! mode is documented here, where users read it.

use crate::future::LocalFuture;
use crate::local_first::LocalFirst;
use crate::reply::forward;
use crate::table::Found;
use std::sync::Arc;
use std::time::Duration;
use tollgate_store::shared::SharedStore;
use tollgate_store::{ChangeReply, PolicyDebit, PolicyRefund};
use tollgate_store::{ConfigError, Key, Policy, Store, StoreReply};

impl<S: SharedStore> Store for LocalFirst<S> {
    type Error = S::Error;
    type Future = LocalFuture<S::Future, S::Error>;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.check_within(policy, key, cost, Duration::MAX)
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        // A peek, a policy it cannot decide: one call, as the Redis store
        // makes.
        if cost == 0 {
            return self.inner.peek(policy, key, within);
        }
        let inner = &self.inner;
        let plain = || forward::<S>(inner.shared().store.check_within(policy, key, cost, within));
        if policy.limits().is_empty() {
            return plain();
        }
        // No runtime to run reservations or syncs on: decided by the
        // shared store. (A request in a task is on one; asking for the
        // runtime's handle clones it, an atomic every thread would contend
        // on.)
        if tokio::task::try_id().is_none() && tokio::runtime::Handle::try_current().is_err() {
            if !inner.shared().store.shares(policy) {
                return plain();
            }
            return inner.decide_in_store(policy, key, cost, within);
        }
        // Whether the policy can be decided here is asked only when its
        // key has no slot yet (slots are made for such policies only).
        match inner.check(policy, key, cost) {
            Found::Decided(reply) => reply,
            Found::Refused => plain(),
            Found::Full => {
                inner.shared().stats.overflowed();
                inner.decide_in_store(policy, key, cost, within)
            }
        }
    }

    fn supports(&self, policy: &Policy) -> Result<(), ConfigError> {
        LocalFirst::supports(self, policy)
    }

    /// Refunds and debits, both.
    fn can(&self, _: tollgate_store::Capability) -> Result<(), tollgate_store::MissingCapability> {
        Ok(())
    }

    /// Gives the charge back, where every instance sharing the key finds
    /// it from its next call to Redis on (exact mode) or this instance at
    /// once (periodic mode); never over the limit.
    ///
    /// *Periodic mode*: an admission decided here and not yet reported is
    /// taken off the report not yet sent: exact, as if the request had not
    /// come; this instance has the units back at once, the others from
    /// their next sync. Units reported already (or on their way) are given
    /// back in Redis (`refund.lua`, as `RedisStore`'s `refund`, from a
    /// spawned task; while a report is unconfirmed, once the sync carrying
    /// it has ended, so that they are there to take off; no other sync is
    /// waited for), never put back here: only Redis knows whether they
    /// still count (a key a debit put in debt, a window that ended); this
    /// instance's next refusal then waits for a fresh reading, which shows
    /// them.
    ///
    /// *Exact mode*: an admission decided here spent units reserved in
    /// Redis; they are given back there (one call of `share.lua`, from a
    /// spawned task, whose reply completes when it has landed), not put
    /// back among this instance's held units, where they would lapse after
    /// the hold (or the window's end) while Redis still counted them. Once
    /// it landed, the next reservation of any instance finds them: a
    /// refunded unit is usable by every instance within one reservation
    /// round trip. For GCRA and the continuous token bucket, Redis also
    /// counts the units an instance holds (see "Held units" on
    /// [`LocalFirst`]), and a unit spent since the instance's last
    /// reservation is still in that count: the same call takes it off the
    /// count, when the count is the one recorded by the reservation the
    /// admission's [`Receipt`](tollgate_store::Receipt) names (this
    /// store's local admissions carry a token, the number of the last
    /// reservation sent before them there, not a time), and gives the unit
    /// back whole. If the
    /// count left meanwhile (the instance's next reservation replaced it,
    /// reporting the unit spent, or it expired), the unit was charged from
    /// then on and recorded spent beside the counts: the refund takes it
    /// off that record and gives it back whole from there, not from the
    /// check (earlier by as long as the count held the unit after it: that
    /// much of a unit stayed charged, and a key at its limit refused one
    /// request too many until it passed). The refund's charge time is the check's, as far as Redis
    /// can tell (its clock less how long ago the request was checked): for
    /// the window limits, a request checked just before a window ended may
    /// be given back in the next window's count or none. The reply carries
    /// what remains after the refund, so this instance's next answers say
    /// it once the refund landed: the refund lands when its reply came and
    /// the reservation this instance had in flight then, if any, has
    /// landed too (that reservation may have run in Redis before the
    /// refund: the reply counts its grant spent, and the answers here are
    /// exact only once the grant is held). A refusal this instance
    /// remembers for the key is forgotten.
    ///
    /// An admission Redis decided (a key with no room in the table, a peek,
    /// a policy this store does not decide) is given back there, as
    /// `RedisStore`'s `refund` gives it.
    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        self.inner.refund(policy, key, refund)
    }

    /// Charges a cost learned once the request was over. Periodic mode:
    /// counted here at once and sent with the next report (which Redis
    /// charges whatever the state), so this instance refuses from its next
    /// request on and the others from their next sync. Exact mode: paid
    /// first from the units this instance holds (Redis counts them charged
    /// already), the rest charged in Redis at once (`debit.lua`, from a
    /// spawned task), where every instance's next reservation finds the
    /// debt; units another instance holds may still be spent (they were
    /// Redis's to give before the debt). A key with no slot here: charged
    /// in Redis.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: PolicyDebit) -> ChangeReply {
        let rest = self.inner.debit(policy, key, debit.cost);
        if rest == 0 {
            return ChangeReply::Done;
        }
        self.inner
            .shared()
            .store
            .debit(policy, key, PolicyDebit::new(rest))
    }

    // `peek`: the default, a check of cost 0, which this store sends to
    // Redis as it sends every peek (see `check_within` and
    // the mode's `peek`): Redis's counts, in which what instances hold
    // is spent already; in periodic mode less what this instance has not
    // reported yet. (For GCRA and the token bucket in exact mode, the
    // plain script does not read the held units, so a peek may show up to
    // what other instances hold as remaining.)

    /// Drops this instance's slot for the key (exact: the units it holds,
    /// so that it does not spend them after the reset; periodic: the
    /// counts not yet reported), waits for the reservation or sync it had
    /// in flight, if any, to land (so that it lands before the reset, not
    /// after), then resets the key in Redis. Other instances keep what
    /// they hold until it lapses or is spent (exact) or until their next
    /// sync (periodic); their calls in flight during the reset may leave
    /// a grant charged in Redis, unused, until it lapses.
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> tollgate_store::AdminFuture {
        let inner = self.inner.clone();
        let (policy, key) = (policy.clone(), key.clone());
        tollgate_store::AdminFuture::new(async move {
            inner.forget_slot(&policy, &key).await;
            inner.shared().store.reset(&policy, &key).await
        })
    }

    /// Moves the key's usage from `from` to `to` as [`Store::carry`]
    /// defines it, counting this instance's own part exactly: its slot for
    /// `from` is taken out and its call in flight waited for (a report on
    /// its way would otherwise be counted twice), its unreported units
    /// (periodic) added to what Redis counts, and the units it was granted
    /// and did not spend (exact) given back in Redis before the reading (a
    /// reservation is not usage: carried as spent it would be charged
    /// again under `to`, and a downgrade would refuse for longer than its
    /// usage allows); then `from` is reset in Redis and each limit of `to`
    /// charged there, a debt included (see [`tollgate_core::used_of`]). Other instances' unreported units of `from` are
    /// not carried (they land in `from`'s reset state at their next sync).
    fn carry(
        &self,
        from: &Arc<Policy>,
        to: &Arc<Policy>,
        key: &Key,
    ) -> tollgate_store::AdminFuture {
        let inner = self.inner.clone();
        let (from, to, key) = (from.clone(), to.clone(), key.clone());
        tollgate_store::AdminFuture::new(async move {
            let local = inner
                .take_slot(&from, &key)
                .await
                .map_err(tollgate_store::AdminError::store)?;
            inner
                .shared()
                .store
                .carry_counting(&from, &to, &key, local)
                .await
        })
    }

    /// Drops the refusal this instance remembers for the key (exact mode;
    /// a periodic slot's refusals come from its last reading, which is
    /// counts, not a block), and the Redis store's block-cache entry.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> tollgate_store::AdminFuture {
        self.inner.unblock(policy, key);
        self.inner.shared().store.unblock(policy, key)
    }
}
