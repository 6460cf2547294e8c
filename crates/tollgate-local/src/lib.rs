//! [`LocalFirst`]: a store in front of a shared store (Redis, or any
//! compare-and-swap backend through `tollgate-cas`) that decides every
//! request in process memory and reaches the shared store only in the
//! background or once per many requests.
//!
//! The shared store implements [`SharedStore`]: the three operations of
//! [`ShareOp`] (reserve, sync, give back), each atomic on a key.
//! `tollgate_redis::LocalFirst` is this store over `RedisStore`;
//! `tollgate_cas::CasStore` implements the trait too.
//!
//! The modes, their bounds and their faults are documented on
//! [`LocalFirst`], where users read them.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod answers;
mod budget;
mod exact;
mod future;
mod mode;
mod observe;
mod periodic;
mod share;
mod shared;
mod stats;
mod striped;
mod support;
mod table;

pub use future::LocalFuture;
pub use mode::LocalMode;
#[cfg(feature = "metrics")]
pub use observe::describe_metrics;
pub use share::{ShareOp, ShareReply, SharedStore};
pub use stats::LocalStats;
pub use support::supports;

use exact::ExactSlot;
use periodic::PeriodicSlot;
use shared::{Settings, Shared, Step, holder};
use stats::Stats;
use std::hash::BuildHasher;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use table::{Found, Table};
use tokio::sync::Notify;
use tollgate::store::{ChangeReply, Debit, PolicyRefund, Receipt};
use tollgate::{ConfigError, Key, Policy, PolicyDecision, Store, StoreReply};

/// A store that decides in process memory and shares through a
/// [`SharedStore`] (below, "Redis" stands for it: `share.lua`'s calls are
/// one conditional write each on the compare-and-swap store).
/// Clones share the same counts.
///
/// # Two modes
///
/// **Exact** ([`LocalMode::Exact`], reservations): an instance admits only
/// capacity it reserved from Redis in one atomic script call, so all
/// instances together never admit more than the limit allows. A
/// reservation asks for what the key was spent at recently, over
/// [`reserve_ahead`](LocalFirstBuilder::reserve_ahead) (at least the cost of
/// the request that waits, at most
/// [`max_reservation`](LocalFirstBuilder::max_reservation)); Redis grants
/// at most a [`fanout`](LocalFirstBuilder::fanout)th of what remains, so the
/// grants shrink as the limit nears, down to one request's cost. A request
/// that finds too few units here waits for the reservation in flight (one
/// round trip shared by every waiting request), or is refused when Redis
/// refused; it is never admitted on credit. When the held units fall to a
/// quarter of the last grant, the next reservation starts ahead of need,
/// unless that grant was no more than the request that waited for it (the
/// key is spent here more slowly than one unit per `reserve_ahead`, or
/// it is near its limit): units reserved ahead and not spent before they
/// lapse would be charged and lost to every instance, so at such a pace
/// each request reserves its own cost, one round trip, and such a pace is
/// admitted as the algorithm allows it (four instances at one request a
/// second each on 100/min, 80 requests in 20 s: every one).
///
/// *Held units and the buckets*: a bucket refills what a grant took. A
/// unit held past its own refill would be spent on top of the refilled
/// one, over the burst. So for GCRA and the continuous token bucket, Redis
/// keeps, beside each key, what every instance holds (reported at each
/// reservation, counted until [`hold`](LocalFirstBuilder::hold) after it,
/// 1 s by default; the instance spends none later), and refills the bucket
/// only up to the burst less those units. An interval-refill token
/// bucket's grant lapses at its next refill instead; a window's at the
/// window's end (the sub-window's, for sliding window buckets), as its
/// units are that window's.
///
/// *Capacity that can sit unused*: units an instance holds are charged in
/// Redis already; other instances cannot spend them. At any moment that is
/// at most, per instance and key, the last grant (≤ `max_reservation`, and
/// ≤ what remained ÷ `fanout` when it was granted) plus what is left of
/// earlier ones. A window's units unspent at its end are lost (a grant is
/// sized for what the instance spends before the window ends, at its
/// recent rate, so that little is; for sliding window buckets the window
/// is a sub-window, and its lost units count until the window has slid
/// past it: under a flood whose requests a busy machine delays, that can
/// be much of the limit). A bucket's units spent since the last
/// reservation still count as held until the next one (Redis cannot know
/// when they were spent), so their refill starts late: exact mode then
/// admits a little less than the limit, never more. Units held by an
/// instance that stops are out of reach for `hold`; units of a slot dropped
/// to make room are lost. Units an instance held past their hold, unspent
/// (it reserved ahead, then went idle), are given back in Redis as the
/// hold ends (one call, from a task that watches the slot's hold), as far
/// as Redis still counts them, for GCRA and the continuous token bucket
/// in a policy without a window limit (a window's units are its own).
/// Near the limit, where a [`fanout`](LocalFirstBuilder::fanout)th of what remains
/// is less than one unit, an instance reserves only for a request that
/// waits, never ahead of need, so that nothing it holds is out of the
/// others' reach. A plain `RedisStore` does not read the held units: do
/// not share a key prefix between it and an exact-mode store.
///
/// *Refunds* (charge by outcome, pay after): a refunded admission's units
/// are given back in Redis, never kept by the instance that charged them:
/// once the refund landed (the layer waits for it), every instance's next
/// reservation finds them, never over the limit (see
/// [`refund`](Store::refund)). The next answers here say what remains
/// after it.
///
/// **Periodic** ([`LocalMode::Periodic`], synchronised counts): every
/// `sync_interval` each instance reports what it admitted (charged in Redis
/// whatever the state), reads the key again and takes a *share* of what
/// remains; between two readings it admits while its share, less what it
/// admitted since, covers the cost. Redis gives the share in the same
/// script call, out of what is *free*: what remains, less what the other
/// instances' live shares may still spend. Shares go where the traffic is:
/// each sync says what the instance *wants* (twice what it was asked for
/// since its last sync, at that rate over an interval), and Redis records
/// it beside the share. When every want fits in what is free, the instance
/// gets what it wants, or its part of what is free with room for one more
/// instance (among the [`instances`](LocalFirstBuilder::instances) set on
/// the builder, if set) if that is more, as far as the others' wants leave
/// it; when they do not fit, its even part among the instances that hold a
/// share (or the instances set), rounded up, never more than it wants; and
/// at least the cost of the request that waits for the reading if that much
/// is free. An instance that had no request since its last sync and holds
/// some of its share *offers it back* at its next tick (it spends none of
/// it while that call is on its way): it keeps at most half of what the
/// others leave free, and none that another wants beyond its own share; the
/// rest is free for the others at once. Charges given back
/// ([`refund`](Store::refund), as `charge_when` makes them) return to the
/// share at once when they are not reported yet; reported, they return to
/// what remains in Redis, and a request this instance would refuse after
/// one landed waits for a reading that counts them. A share lapses two
/// intervals and 250 ms after its sync was sent (a share kept when idle, as
/// it was given): the instance spends none of it later, and the others stop
/// counting it then (an instance that leaves keeps its last share from the
/// others that long). A request it cannot admit waits for a fresh reading
/// (one call for all that wait) when it admitted since the last one, a
/// limit was due to give quota back since, its share lapsed or was asked
/// for a smaller cost, or only the others' shares refuse it and the reading
/// is half an interval old; otherwise it is refused from the reading, which
/// counts all it admitted. A refusal's figures are that reading's:
/// `remaining` at most the limit and at most the share left,
/// `0 < replenish_after ≤ retry_after ≤ reset_after`, and a retry after
/// `retry_after` passes if no other instance spent the key or holds a share
/// of it meanwhile; when the limits would take the request and only the
/// others' shares refuse it, `retry_after` is one interval (the next
/// reading). An admission's `replenish_after` (the headers' `t`) is 0 only
/// when the limit is whole: where the reading found it whole and this
/// instance spent it since, it is when a unit spent at once would be back,
/// as the Redis store says it (never early; up to the time since the
/// reading late for a window, whose end comes closer). Reports carry a
/// per-instance sequence number, so a report sent again after a lost reply
/// is not counted twice.
///
/// *Over-admission*: at every sync the shares together are at most what
/// remains (each instance's unreported admissions are within its share, the
/// others' shares are taken off before a new one is given, a share given is
/// never more than what is free, and one kept when idle never more than
/// half of it), but for the rounding up: at any moment, all instances
/// together have admitted at most the limit allows plus one unit per
/// instance, for every algorithm, however the load is spread and however
/// long the interval. The exceptions: a pay-after charge is counted when it
/// comes, whatever the share; a [`reset`](Store::reset) forgets the shares
/// given before it while their holders may still spend them (until they
/// lapse); with Redis away, an instance spends what is left of its share,
/// then the layer's store-error behaviour decides; and an idle instance
/// whose offer was answered but whose answer was lost keeps spending the
/// share it offered (until it lapses); and an instance that dies (a crash,
/// `kill -9`) takes its unreported admissions with it: the shared store
/// never counted them, so once its share lapses the others may spend
/// those units again, and all instances together may pass the limit by
/// that instance's last share as well (at most what it could spend
/// between two reports: about its rate over one interval). Measured on the
/// playground (two instances at 6,000 a minute, `--local periodic=100`,
/// one killed): 6,033 and 6,038 admitted in that minute; and by
/// `examples/tests/server_periodic_crash.rs` (12,000 a day, one instance
/// admitting about 3,100 a second when killed): 321 over, against the
/// 1,429 it admitted in its last half second. The cost of shares is capacity that
/// sits unused: units in another instance's share are refused here until it
/// reports, offers them back or its share lapses. A key well inside its
/// limit always leaves some free for an instance new to it (the part with
/// room for one more); near the limit an instance may be refused while
/// others hold the rest, for about an interval: the holders' next syncs (a
/// busy one's, every interval; an idle one's, at its next tick) leave it
/// its part. A reading never shows a bucket more than its burst `B`, and
/// the refill between readings is not spent until the next one, so an
/// interval longer than `B ÷ r` (at rate `r`) admits *less* than the limit
/// under sustained load. BENCHMARKS.md has the measured curve against `I`.
///
/// # Algorithms
///
/// Both modes: GCRA, token bucket (continuous or interval refill), fixed
/// window, sliding window, sliding window buckets. Neither: the sliding
/// log (a reservation spent later than it was taken would leave the log
/// early) and the leaky bucket, or any limit in delay mode (both space
/// requests out in time; a local budget cannot). A layer built with an
/// unsupported limit fails in `try_build`; a policy made at run time (per-key
/// quotas) that is not supported is decided by the Redis store directly,
/// one call per request.
///
/// # Faults
///
/// With Redis slow or away, an instance keeps deciding with what it holds
/// (exact: its grants; periodic: its last share, or what it kept of it
/// when idle, less what it admitted since, until the share lapses); once
/// that is spent, requests get the
/// layer's store-error behaviour. It catches up when Redis is back: a periodic instance reports
/// everything it admitted meanwhile, once.
///
/// Any [`SharedStore`] goes under it: `tollgate_redis::RedisStore`
/// (`tollgate_redis::LocalFirst` names this store over it) or
/// `tollgate_cas::CasStore` over any compare-and-swap backend
/// (PostgreSQL through `tollgate-postgres`).
///
/// ```
/// use tollgate::RateLimitLayer;
/// use tollgate_local::{LocalFirst, LocalMode, SharedStore};
///
/// fn app_layer<S: SharedStore>(shared: S) {
///     let store = LocalFirst::builder(shared, LocalMode::Exact).build();
///     let layer = RateLimitLayer::builder()
///         .quota("api", "1000/min".parse().unwrap())
///         .store(store)
///         .build();
///     # let _ = layer;
/// }
/// ```
pub struct LocalFirst<S: SharedStore> {
    inner: Arc<Inner<S>>,
}

impl<S: SharedStore> Clone for LocalFirst<S> {
    fn clone(&self) -> Self {
        LocalFirst {
            inner: self.inner.clone(),
        }
    }
}

impl<S: SharedStore> std::fmt::Debug for LocalFirst<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFirst")
            .field("mode", &self.inner.settings.mode)
            .field("store", &self.inner.store)
            .finish_non_exhaustive()
    }
}

struct Inner<S: SharedStore> {
    /// What the slots' calls to the shared store share with the store.
    shared: Arc<Shared<S>>,
    slots: Slots,
    /// When the periodic tick next runs (local ns).
    next_tick: AtomicU64,
    /// Itself, for the tick, which ends when the last clone is dropped.
    me: Weak<Inner<S>>,
}

enum Slots {
    Exact(Table<ExactSlot>),
    Periodic(Table<PeriodicSlot>),
}

/// Settings of a [`LocalFirst`] store.
#[derive(Debug)]
#[must_use = "call `build` to get the store"]
pub struct LocalFirstBuilder<S> {
    store: S,
    settings: Settings,
    max_keys: usize,
}

impl<S: SharedStore> LocalFirst<S> {
    /// A builder for a local-first store over `store` in `mode`.
    pub fn builder(store: S, mode: LocalMode) -> LocalFirstBuilder<S> {
        LocalFirstBuilder {
            store,
            settings: Settings {
                mode,
                fanout: 8,
                reserve_ahead_nanos: 250_000_000,
                max_reservation: 100_000,
                hold_nanos: 1_000_000_000,
                instances: 0,
                share_life_nanos: share_life(mode),
            },
            max_keys: 100_000,
        }
    }

    /// The store's mode.
    pub fn mode(&self) -> LocalMode {
        self.inner.settings.mode
    }

    /// The store it shares through.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// Counts of what the store has done so far (all clones together).
    pub fn stats(&self) -> LocalStats {
        self.inner.stats.read(self.inner.keys())
    }

    /// Whether this store can decide `policy` locally: every limit of an
    /// algorithm the mode supports, none in delay mode.
    pub fn supports(&self, policy: &Policy) -> Result<(), ConfigError> {
        supports(policy)
    }
}

impl<S: SharedStore> LocalFirstBuilder<S> {
    /// Exact mode: the share of what remains that one reservation may take
    /// (default 8: an eighth). Larger leaves more for other instances and
    /// makes more calls near the limit.
    pub fn fanout(mut self, fanout: u32) -> Self {
        self.settings.fanout = fanout.max(1);
        self
    }

    /// Exact mode: a reservation asks for what the key was spent at over
    /// this long (default 250 ms).
    pub fn reserve_ahead(mut self, ahead: Duration) -> Self {
        self.settings.reserve_ahead_nanos = u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Exact mode, GCRA and the continuous token bucket: how long after its
    /// last reservation an instance may spend what it holds of a key
    /// (default 1 s). Redis counts those units as still in the bucket, so
    /// that it does not refill them too, until this long after the
    /// reservation; the instance spends none after that. An instance that
    /// stops keeps what it held from the others for this long.
    pub fn hold(mut self, hold: Duration) -> Self {
        self.settings.hold_nanos = u64::try_from(hold.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1_000);
        self
    }

    /// Exact mode: the most units one reservation asks for (default
    /// 100,000; a reservation also asks for no more than the key was spent
    /// at over [`reserve_ahead`](Self::reserve_ahead), and gets at most a
    /// [`fanout`](Self::fanout)th of what remains).
    pub fn max_reservation(mut self, units: u64) -> Self {
        self.settings.max_reservation = units.max(1);
        self
    }

    /// Periodic mode: how many instances share the keys, for each to admit
    /// its part of what remains between two readings. By default (or 0)
    /// Redis counts them at every sync: the instances whose last share of
    /// the key has not lapsed (two sync intervals and 250 ms after it was
    /// given), this one included, and one more when every instance's want
    /// fits (room for a newcomer). Set it when the count is known (a fixed
    /// number of replicas): an instance new to a key then gets no more than
    /// its part at once, or what it wants if that fits. Exact mode ignores it (its
    /// [`fanout`](Self::fanout) plays that part).
    pub fn instances(mut self, instances: u32) -> Self {
        self.settings.instances = instances;
        self
    }

    /// The most keys kept in memory (default 100,000). A new key that finds
    /// no room (every slot waiting on Redis or holding unreported counts) is
    /// decided by Redis directly.
    pub fn max_keys(mut self, keys: usize) -> Self {
        self.max_keys = keys.max(1);
        self
    }

    /// The store. In periodic mode its syncs run on the tokio runtime of
    /// the first request, until the last clone is dropped.
    pub fn build(self) -> LocalFirst<S> {
        // The local clock sets itself up at its first reading (the
        // time-stamp counter calibrated once per process, up to 200 ms):
        // read it now, not at the first request.
        tollgate_core::Clock::now(&tollgate_core::MonotonicClock);
        let slots = match self.settings.mode {
            LocalMode::Exact => Slots::Exact(Table::new(self.max_keys)),
            LocalMode::Periodic { .. } => Slots::Periodic(Table::new(self.max_keys)),
        };
        let instance = std::hash::RandomState::new().hash_one(std::process::id());
        LocalFirst {
            inner: Arc::new_cyclic(|me| Inner {
                shared: Arc::new(Shared {
                    store: self.store,
                    settings: self.settings,
                    instance,
                    stats: Stats::default(),
                    reports: AtomicU64::new(0),
                }),
                slots,
                next_tick: AtomicU64::new(0),
                me: me.clone(),
            }),
        }
    }
}

/// The store's calls read the shared part as their own.
impl<S: SharedStore> std::ops::Deref for Inner<S> {
    type Target = Shared<S>;

    fn deref(&self) -> &Shared<S> {
        &self.shared
    }
}

impl<S: SharedStore> Inner<S> {
    /// The keys in memory now.
    fn keys(&self) -> u64 {
        match &self.slots {
            Slots::Exact(table) => table.len() as u64,
            Slots::Periodic(table) => table.len() as u64,
        }
    }

    /// A request decided by Redis, for a key with no slot here. In exact
    /// mode through a reservation of exactly `cost` that holds nothing, so
    /// that the units other instances hold count (the plain script does
    /// not read them); in periodic mode, which holds nothing, by the plain
    /// script.
    fn decide_in_store(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> Reply<S> {
        if !matches!(self.settings.mode, LocalMode::Exact) {
            return forward::<S>(self.store.check_within(policy, key, cost, within));
        }
        let op = ShareOp::Reserve {
            need: cost,
            want: u64::from(cost),
            fanout: 1,
            holder: holder(self.instance, policy.id()),
            held: 0,
            hold_micros: 0,
            ahead_micros: 0,
            report: 0,
        };
        let (store, policy, key) = (self.store.clone(), policy.clone(), key.clone());
        StoreReply::Pending(LocalFuture::boxed(async move {
            Ok(store.share(&policy, &key, op).await?.decision)
        }))
    }

    /// A peek (a check of cost 0): Redis's counts. In exact mode what this
    /// instance spent is charged there already (at its reservation, or by
    /// a debit). In periodic mode what it admitted since its last report,
    /// and what a debit added, is not yet: it is taken off Redis's answer
    /// (and what was given back after it was reported is added), so that
    /// a peek never shows more than this instance would admit, and its
    /// own admissions and debits show at once.
    fn peek_within(&self, policy: &Arc<Policy>, key: &Key, within: Duration) -> Reply<S> {
        let slot = match &self.slots {
            Slots::Periodic(table) if !policy.limits().is_empty() => table.find(policy.id(), key),
            _ => None,
        };
        let before = slot.as_ref().map_or(0, |slot| slot.unreported());
        let reply = self.store.check_within(policy, key, 0, within);
        let Some(slot) = slot else {
            return forward::<S>(reply);
        };
        match reply {
            StoreReply::Ready(answer) => {
                StoreReply::Ready(answer.map(|d| slot.counted(&d, before)))
            }
            StoreReply::Pending(future) => StoreReply::Pending(LocalFuture::boxed(async move {
                future.await.map(|d| slot.counted(&d, before))
            })),
        }
    }

    /// Takes the key's slot out of this instance's table and waits (at
    /// most [`CALL_BOUND`]) for its call in flight, if any, to end: a
    /// reservation that lands after a reset would leave its grant charged
    /// in Redis, and a sync its report. Then returns what it holds to
    /// Redis's count: periodic mode, what it admitted and did not report
    /// yet, reported now with its share given back (`periodic::depart`;
    /// what that call could not report is returned, a positive count for
    /// the caller to add); exact mode, the
    /// units it was granted and no request spent, given back in Redis
    /// (`share.lua`'s refund, naming its last recorded reservation, as far as
    /// Redis still counts them: a held count past its hold, or a bucket
    /// that refilled since, gives back less), so that Redis's reading
    /// afterwards counts only what requests used.
    async fn take_slot(&self, policy: &Arc<Policy>, key: &Key) -> Result<i64, S::Error> {
        match &self.slots {
            Slots::Exact(table) => {
                let slot = table.remove(policy.id(), key);
                call_ended(slot.clone()).await;
                let Some(slot) = slot else {
                    return Ok(0);
                };
                let now = self.now();
                if let Some(unspent) = slot.unspent(now)
                    && !policy.limits().is_empty()
                {
                    let op = unspent.op(&self.shared, policy.id(), now);
                    self.store.share(policy, key, op).await?;
                }
                Ok(0)
            }
            Slots::Periodic(table) => {
                let slot = table.remove(policy.id(), key);
                call_ended(slot.clone()).await;
                let Some(slot) = slot else {
                    return Ok(0);
                };
                let unseen = periodic::depart(self, &slot).await;
                Ok(unseen.min(i64::MAX as u64) as i64)
            }
        }
    }

    async fn forget_slot(&self, policy: &Policy, key: &Key) {
        match &self.slots {
            Slots::Exact(table) => {
                let slot = table.remove(policy.id(), key);
                call_ended(slot.clone()).await;
                if let Some(slot) = slot {
                    slot.retire();
                }
            }
            Slots::Periodic(table) => call_ended(table.remove(policy.id(), key)).await,
        }
    }
}

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
            return self.inner.peek_within(policy, key, within);
        }
        let inner = &self.inner;
        let plain = || forward::<S>(inner.store.check_within(policy, key, cost, within));
        if policy.limits().is_empty() {
            return plain();
        }
        // Whether the policy can be decided here is asked only when its
        // key has no slot yet (slots are made for such policies only).
        let shares = || inner.store.shares(policy);
        // No runtime to run reservations or syncs on: decided by the
        // shared store. (A request in a task is on one; asking for the
        // runtime's handle clones it, an atomic every thread would contend
        // on.)
        if tokio::task::try_id().is_none() && tokio::runtime::Handle::try_current().is_err() {
            if !shares() {
                return plain();
            }
            return inner.decide_in_store(policy, key, cost, within);
        }
        let found = match &inner.slots {
            Slots::Exact(table) => table.with_slot(
                policy.id(),
                key,
                || shares().then(|| ExactSlot::new(policy.clone(), key.clone())),
                |slot| check_slot(inner, slot, cost),
            ),
            Slots::Periodic(table) => table.with_slot(
                policy.id(),
                key,
                || shares().then(|| PeriodicSlot::new(policy.clone(), key.clone())),
                |slot| check_slot(inner, slot, cost),
            ),
        };
        match found {
            Found::Decided(reply) => reply,
            Found::Refused => plain(),
            Found::Full => {
                inner.stats.overflowed();
                inner.decide_in_store(policy, key, cost, within)
            }
        }
    }

    fn supports(&self, policy: &Policy) -> Result<(), ConfigError> {
        LocalFirst::supports(self, policy)
    }

    /// Refunds and debits, both.
    fn can(&self, _: tollgate::store::Capability) -> Result<(), tollgate::store::Missing> {
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
    /// admission's [`Receipt`] names (this
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
        let store = self.inner.store.clone();
        match &self.inner.slots {
            Slots::Exact(table) => {
                if let Some(report) = refund.receipt.and_then(Receipt::as_token) {
                    let slot = table.find(policy.id(), key);
                    let op = ShareOp::Refund {
                        cost: refund.cost,
                        holder: holder(self.inner.instance, policy.id()),
                        report,
                        ago_micros: u64::try_from(refund.ago.as_micros()).unwrap_or(u64::MAX),
                        resets: refund.resets.clone(),
                    };
                    let (policy, key) = (policy.clone(), key.clone());
                    let inner = self.inner.clone();
                    return spawn_change(tollgate_internal::ChargeChange::Refund, async move {
                        if policy.limits().is_empty() || refund.cost == 0 {
                            return Ok::<(), S::Error>(());
                        }
                        let reply = store.share(&policy, &key, op).await?;
                        if let Some(slot) = slot {
                            let at = inner.now();
                            // A reservation in flight may be in the
                            // reading, not yet in the slot: it lands first.
                            if let Some(round) = slot.refunded(at) {
                                round_ended(&*slot, round).await;
                            }
                            slot.read_refund(at, (reply.decision, reply.server_micros));
                        }
                        Ok(())
                    });
                }
                let slot = table.find(policy.id(), key);
                let (policy, key) = (policy.clone(), key.clone());
                let inner = self.inner.clone();
                spawn_change(tollgate_internal::ChargeChange::Refund, async move {
                    store.refund_now(&policy, &key, &refund).await?;
                    if let Some(slot) = slot {
                        slot.refunded(inner.now());
                    }
                    Ok::<(), S::Error>(())
                })
            }
            Slots::Periodic(table) => {
                // Decisions made here carry no receipt; those Redis made
                // carry the script's charge time, and were charged there,
                // not in a report.
                let (refund, slot, wait) = match table.find(policy.id(), key) {
                    Some(slot) if refund.receipt.is_none() => match slot.give_back(refund.cost) {
                        (0, _) => return ChangeReply::Done,
                        (reported, wait) => (refund.part(reported), Some(slot), wait),
                    },
                    slot => (refund, slot, None),
                };
                let (policy, key) = (policy.clone(), key.clone());
                spawn_change(tollgate_internal::ChargeChange::Refund, async move {
                    // The report that may carry the units lands first
                    // (see `PeriodicSlot::give_back`); no other sync is
                    // waited for.
                    if let (Some(slot), Some(round)) = (&slot, wait) {
                        round_ended(&**slot, round).await;
                    }
                    store.refund_now(&policy, &key, &refund).await?;
                    if let Some(slot) = slot {
                        slot.refunded();
                    }
                    Ok::<(), S::Error>(())
                })
            }
        }
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
    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: Debit) -> ChangeReply {
        let cost = debit.cost;
        let rest = match &self.inner.slots {
            Slots::Periodic(table) => match table.find(policy.id(), key) {
                Some(slot) => {
                    slot.charge(cost);
                    return ChangeReply::Done;
                }
                None => cost,
            },
            Slots::Exact(table) => match table.find(policy.id(), key) {
                Some(slot) => cost - slot.spend_held(self.inner.now(), cost),
                None => cost,
            },
        };
        if rest == 0 {
            return ChangeReply::Done;
        }
        self.inner.store.debit(policy, key, Debit::new(rest))
    }

    // `peek`: the default, a check of cost 0, which this store sends to
    // Redis as it sends every peek (see `check_within` and
    // `Inner::peek_within`): Redis's counts, in which what instances hold
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
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> tollgate::store::AdminFuture {
        let inner = self.inner.clone();
        let (policy, key) = (policy.clone(), key.clone());
        tollgate::store::AdminFuture::new(async move {
            inner.forget_slot(&policy, &key).await;
            inner.store.reset(&policy, &key).await
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
    ) -> tollgate::store::AdminFuture {
        let inner = self.inner.clone();
        let (from, to, key) = (from.clone(), to.clone(), key.clone());
        tollgate::store::AdminFuture::new(async move {
            let local = inner
                .take_slot(&from, &key)
                .await
                .map_err(tollgate::store::AdminError::store)?;
            inner.store.carry_counting(&from, &to, &key, local).await
        })
    }

    /// Drops the refusal this instance remembers for the key (exact mode;
    /// a periodic slot's refusals come from its last reading, which is
    /// counts, not a block), and the Redis store's block-cache entry.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> tollgate::store::AdminFuture {
        if let Slots::Exact(table) = &self.inner.slots
            && let Some(slot) = table.find(policy.id(), key)
        {
            slot.forget_refusal();
        }
        self.inner.store.unblock(policy, key)
    }
}

type Reply<S> =
    StoreReply<LocalFuture<<S as Store>::Future, <S as Store>::Error>, <S as Store>::Error>;

/// The shared store's own reply, as this store's.
fn forward<S: SharedStore>(reply: StoreReply<S::Future, S::Error>) -> Reply<S> {
    match reply {
        StoreReply::Ready(answer) => StoreReply::Ready(answer),
        StoreReply::Pending(future) => StoreReply::Pending(LocalFuture::store(future)),
    }
}

/// How long a refund sent from its own task may wait for the shared
/// store: while it is away, every refunded request would otherwise leave a
/// task waiting for as long as the outage lasts.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs a refund on a task of its own, logged as this crate's (see
/// [`tollgate::__private::spawn_change`]).
fn spawn_change<E: std::fmt::Display>(
    change: tollgate_internal::ChargeChange,
    call: impl Future<Output = Result<(), E>> + Send + 'static,
) -> ChangeReply {
    tollgate::__private::spawn_change("tollgate-local", change, CHANGE_TIMEOUT, call)
}

/// A key's local state in either mode.
trait Slot: Send + Sync + Sized + 'static {
    /// Decides a request of `cost` under the slot's lock. A waiter passes
    /// the round it last saw: if a call ended since and failed, and the
    /// request still cannot be decided, its step is `Fail`.
    fn turn<S: SharedStore>(&self, inner: &Inner<S>, cost: u32, seen: Option<u64>) -> Turn;

    /// The call a turn asked for: a reservation of at least `need` units,
    /// or a sync.
    fn call<S: SharedStore>(
        inner: Arc<Inner<S>>,
        slot: Arc<Self>,
        need: u32,
    ) -> impl Future<Output = ()> + Send;

    /// Wakes the requests waiting on the slot when a call ends.
    fn done(&self) -> &Notify;

    /// Whether a call (a reservation, a sync) is in flight.
    fn calling(&self) -> bool;

    /// The calls ended so far.
    fn round(&self) -> u64;

    /// Decides a request of `cost` at `now` without the slot's lock, when
    /// it can: the answer, and a call to start (its argument).
    fn spend(&self, now: u64, cost: u32) -> Option<(PolicyDecision, Option<u32>)>;
}

/// One turn of a request at its slot.
pub(crate) struct Turn {
    pub(crate) step: Step,
    /// Start a call, with this argument.
    pub(crate) start: Option<u32>,
    /// The calls ended so far.
    pub(crate) round: u64,
}

impl Turn {
    /// `step`, or `Fail` if a call ended after `seen` with `failure` and
    /// the request still waits.
    pub(crate) fn new(
        step: Step,
        start: Option<u32>,
        round: u64,
        seen: Option<u64>,
        failure: Option<&String>,
    ) -> Turn {
        let step = match (step, seen, failure) {
            (Step::Wait, Some(seen), Some(failure)) if round > seen => Step::Fail(failure.clone()),
            (step, _, _) => step,
        };
        Turn { step, start, round }
    }
}

/// A request at its key's slot: decided at once, or waiting for the call
/// in flight, turn after turn, until the slot can decide it.
fn check_slot<S: SharedStore, T: Slot>(
    inner: &Arc<Inner<S>>,
    slot: &Arc<T>,
    cost: u32,
) -> Reply<S> {
    if let Some((decision, start)) = slot.spend(inner.now(), cost) {
        if let Some(need) = start {
            tokio::spawn(T::call(inner.clone(), slot.clone(), need));
        }
        inner.stats.decided(inner.mode_name());
        return StoreReply::Ready(Ok(decision));
    }
    let turn = slot.turn(inner, cost, None);
    if let Some(need) = turn.start {
        tokio::spawn(T::call(inner.clone(), slot.clone(), need));
    }
    let mut seen = turn.round;
    match turn.step {
        Step::Answer(decision) => {
            inner.stats.decided(inner.mode_name());
            return StoreReply::Ready(Ok(decision));
        }
        Step::Fail(message) => {
            return StoreReply::Ready(Err(S::spent_error(message)));
        }
        Step::Wait => {}
    }
    let (inner, slot) = (inner.clone(), slot.clone());
    StoreReply::Pending(LocalFuture::boxed(async move {
        loop {
            // Listening before looking: a call that ends in between still
            // wakes this request.
            let mut done = pin!(slot.done().notified());
            done.as_mut().enable();
            let turn = slot.turn(&inner, cost, Some(seen));
            if let Some(need) = turn.start {
                tokio::spawn(T::call(inner.clone(), slot.clone(), need));
            }
            seen = turn.round;
            match turn.step {
                Step::Answer(decision) => {
                    inner.stats.waited(inner.mode_name());
                    return Ok(decision);
                }
                Step::Fail(message) => return Err(S::spent_error(message)),
                Step::Wait => done.await,
            }
        }
    }))
}

impl Slot for ExactSlot {
    fn turn<S: SharedStore>(&self, inner: &Inner<S>, cost: u32, seen: Option<u64>) -> Turn {
        let now = inner.now();
        let mut holdings = self.lock();
        let (step, start) = holdings.decide(inner, now, cost);
        if let Some(returned) = holdings.returned.take() {
            exact::give_back(&inner.shared, self, returned, now);
        }
        Turn::new(step, start, holdings.round, seen, holdings.failure.as_ref())
    }

    fn call<S: SharedStore>(
        inner: Arc<Inner<S>>,
        slot: Arc<Self>,
        need: u32,
    ) -> impl Future<Output = ()> + Send {
        exact::reserve(inner.shared.clone(), slot, need)
    }

    fn done(&self) -> &Notify {
        &self.done
    }

    fn calling(&self) -> bool {
        self.lock().reserving
    }

    fn round(&self) -> u64 {
        self.lock().round
    }

    fn spend(&self, now: u64, cost: u32) -> Option<(PolicyDecision, Option<u32>)> {
        ExactSlot::spend(self, now, cost)
    }
}

impl Slot for PeriodicSlot {
    fn turn<S: SharedStore>(&self, inner: &Inner<S>, cost: u32, seen: Option<u64>) -> Turn {
        ensure_ticking(inner);
        let now = inner.now();
        let mut counts = self.lock();
        let interval = match inner.settings.mode {
            LocalMode::Periodic { sync_interval } => nanos(sync_interval),
            LocalMode::Exact => 0,
        };
        let (step, start) = counts.decide(now, cost, interval);
        let start = start.then_some(0);
        Turn::new(step, start, counts.round, seen, counts.failure.as_ref())
    }

    fn call<S: SharedStore>(
        inner: Arc<Inner<S>>,
        slot: Arc<Self>,
        _: u32,
    ) -> impl Future<Output = ()> + Send {
        periodic::sync(inner.shared.clone(), slot)
    }

    fn done(&self) -> &Notify {
        &self.done
    }

    fn calling(&self) -> bool {
        self.lock().syncing
    }

    fn round(&self) -> u64 {
        self.lock().round
    }

    fn spend(&self, now: u64, cost: u32) -> Option<(PolicyDecision, Option<u32>)> {
        PeriodicSlot::spend(self, now, cost).map(|answer| (answer, None))
    }
}

/// The longest a reset waits for a slot's call in flight: a call is
/// bounded by the Redis store's own timeouts, this only keeps an
/// operator's reset from hanging on a stalled server.
const CALL_BOUND: Duration = Duration::from_secs(5);

/// Waits until `slot` (taken out of its table) has no call in flight, at
/// most [`CALL_BOUND`].
async fn call_ended<T: Slot>(slot: Option<Arc<T>>) {
    let Some(slot) = slot else {
        return;
    };
    let ended = async {
        loop {
            let notified = slot.done().notified();
            let mut notified = pin!(notified);
            // Registered before the flag is read: a call that ends in
            // between wakes it.
            notified.as_mut().enable();
            if !slot.calling() {
                return;
            }
            notified.await;
        }
    };
    let _ = tokio::time::timeout(CALL_BOUND, ended).await;
}

/// Waits until the call after round `round` of `slot` has ended (the
/// slot's count of calls ended passed it), at most [`CALL_BOUND`]: a call
/// in flight at `round`, or the next one to start.
async fn round_ended<T: Slot>(slot: &T, round: u64) {
    let ended = async {
        loop {
            let notified = slot.done().notified();
            let mut notified = pin!(notified);
            // Registered before the count is read: a call that ends in
            // between wakes it.
            notified.as_mut().enable();
            if slot.round() > round {
                return;
            }
            notified.await;
        }
    };
    let _ = tokio::time::timeout(CALL_BOUND, ended).await;
}

/// How long a periodic share may be spent after its sync was sent: two
/// intervals and 250 ms, so that an instance busy on the key reads it
/// again (every interval) well before its share lapses; an instance that
/// leaves keeps its last share from the others for this long. At most a
/// day.
fn share_life(mode: LocalMode) -> u64 {
    const DAY: u64 = 86_400_000_000_000;
    match mode {
        LocalMode::Periodic { sync_interval } => nanos(sync_interval)
            .saturating_mul(2)
            .saturating_add(250_000_000)
            .min(DAY),
        LocalMode::Exact => 0,
    }
}

/// `duration` in ns, saturating.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Starts the periodic tick on the current runtime, once per store.
fn ensure_ticking<S: SharedStore>(inner: &Inner<S>) {
    let LocalMode::Periodic { sync_interval } = inner.settings.mode else {
        return;
    };
    if inner.next_tick.load(Ordering::Relaxed) != 0
        || inner
            .next_tick
            .compare_exchange(0, inner.now().max(1), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    tokio::spawn(tick(inner.me.clone(), sync_interval));
}

/// Every `interval`, syncs every key that admitted or was asked since its
/// last sync, or whose report is unconfirmed; ends with the store.
async fn tick<S: SharedStore>(inner: Weak<Inner<S>>, interval: Duration) {
    let interval = interval.max(Duration::from_millis(1));
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let step = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        inner
            .next_tick
            .store(inner.now().saturating_add(step), Ordering::Relaxed);
        let Slots::Periodic(table) = &inner.slots else {
            return;
        };
        let now = inner.now();
        let mut lag = 0;
        for slot in table.all() {
            let mut counts = slot.lock();
            if counts.due(now) {
                lag = lag.max(counts.age(now));
                drop(counts);
                tokio::spawn(periodic::sync(inner.shared.clone(), slot));
            }
        }
        observe::sync_lag(lag as f64 / 1e9);
    }
}
