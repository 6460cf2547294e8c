//! [`LocalFirst`]: the store, a handle on its mode (exact or periodic),
//! and what it says of itself.

use crate::mode::LocalMode;
use crate::seam::Mode;
use crate::stats::LocalStats;
use std::sync::Arc;
use tollgate_store::shared::SharedStore;
use tollgate_store::shared::supports;
use tollgate_store::{ConfigError, Policy};

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
/// [`reserve_ahead`](crate::LocalFirstBuilder::reserve_ahead) (at least the cost of
/// the request that waits, at most
/// [`max_reservation`](crate::LocalFirstBuilder::max_reservation)); Redis grants
/// at most a [`fanout`](crate::LocalFirstBuilder::fanout)th of what remains, so the
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
/// reservation, counted until [`hold`](crate::LocalFirstBuilder::hold) after it,
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
/// Near the limit, where a [`fanout`](crate::LocalFirstBuilder::fanout)th of what remains
/// is less than one unit, an instance reserves only for a request that
/// waits, never ahead of need, so that nothing it holds is out of the
/// others' reach. A plain `RedisStore` does not read the held units: do
/// not share a key prefix between it and an exact-mode store.
///
/// *Refunds* (charge by outcome, pay after): a refunded admission's units
/// are given back in Redis, never kept by the instance that charged them:
/// once the refund landed (the layer waits for it), every instance's next
/// reservation finds them, never over the limit (see
/// [`refund`](tollgate_store::Store::refund)). The next answers here say what remains
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
/// instance (among the [`instances`](crate::LocalFirstBuilder::instances) set on
/// the builder, if set) if that is more, as far as the others' wants leave
/// it; when they do not fit, its even part among the instances that hold a
/// share (or the instances set), rounded up, never more than it wants; and
/// at least the cost of the request that waits for the reading if that much
/// is free. An instance that had no request since its last sync and holds
/// some of its share *offers it back* at its next tick (it spends none of
/// it while that call is on its way): it keeps at most half of what the
/// others leave free, and none that another wants beyond its own share; the
/// rest is free for the others at once. Charges given back
/// ([`refund`](tollgate_store::Store::refund), as `charge_when` makes them) return to the
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
/// comes, whatever the share; a [`reset`](tollgate_store::Store::reset) forgets the shares
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
    /// The mode, chosen once when the store is built; clones share it.
    pub(crate) inner: Arc<dyn Mode<S>>,
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
        let shared = self.inner.shared();
        f.debug_struct("LocalFirst")
            .field("mode", &shared.settings.mode)
            .field("store", &shared.store)
            .finish_non_exhaustive()
    }
}

impl<S: SharedStore> LocalFirst<S> {
    /// The store's mode.
    pub fn mode(&self) -> LocalMode {
        self.inner.shared().settings.mode
    }

    /// The store it shares through.
    pub fn store(&self) -> &S {
        &self.inner.shared().store
    }

    /// Counts of what the store has done so far (all clones together).
    pub fn stats(&self) -> LocalStats {
        self.inner.shared().stats.read(self.inner.keys())
    }

    /// Whether this store can decide `policy` locally: every limit of an
    /// algorithm the mode supports, none in delay mode.
    pub fn supports(&self, policy: &Policy) -> Result<(), ConfigError> {
        supports(policy)
    }
}
