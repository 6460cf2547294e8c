//! [`InFlightLayer`] and its builder.

use super::MemorySlots;
use super::fields::Fields;
use super::gate::{Gate, Settings};
use super::service::InFlight;
use super::{InFlightLimit, Slots};
use crate::ConfigError;
use crate::key::{KeyExtractor, PeerIp};
use crate::rejection::DefaultRejector;
use crate::settings::CommonSettings;
use http::StatusCode;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// Limits how many requests of one key run at once. See the
/// [module docs](crate::in_flight).
///
/// ```
/// use std::time::Duration;
/// use tollgate::GlobalKey;
/// use tollgate::in_flight::InFlightLayer;
///
/// // At most 5 requests per client IP at once, refused beyond (429).
/// let layer = InFlightLayer::new(5);
///
/// // At most 2 at once for the whole service; a third waits up to 1 s
/// // for a slot before it is refused.
/// let layer = InFlightLayer::builder()
///     .max_in_flight(2)
///     .key(GlobalKey)
///     .max_delay(Duration::from_secs(1))
///     .build();
/// # let _ = layer;
/// ```
pub struct InFlightLayer<K = PeerIp, Sl = MemorySlots, R = DefaultRejector> {
    gate: Arc<Gate<K, Sl, R>>,
}

impl<K, Sl, R> Clone for InFlightLayer<K, Sl, R> {
    fn clone(&self) -> Self {
        InFlightLayer {
            gate: self.gate.clone(),
        }
    }
}

impl<K, Sl, R> fmt::Debug for InFlightLayer<K, Sl, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightLayer")
            .field("limit", &self.gate.limit)
            .finish_non_exhaustive()
    }
}

impl InFlightLayer {
    /// At most `limit` requests per client IP (the connection's peer
    /// address) at once, counted in a fresh [`MemorySlots`], refused beyond
    /// with 429 and the draft's fields.
    ///
    /// # Panics
    ///
    /// If `limit` is 0 (every request would be refused).
    pub fn new(limit: u32) -> Self {
        Self::builder().max_in_flight(limit).build()
    }

    /// A builder with the defaults of [`InFlightLayer::new`] and a limit of
    /// 1 until [`max_in_flight`](InFlightBuilder::max_in_flight) sets it.
    pub fn builder() -> InFlightBuilder {
        InFlightBuilder {
            key: PeerIp,
            slots: MemorySlots::new(),
            rejector: DefaultRejector,
            config: Config::default(),
        }
    }
}

impl<K, Sl, R> InFlightLayer<K, Sl, R> {
    /// The limit this layer applies.
    pub fn limit(&self) -> &InFlightLimit {
        &self.gate.limit
    }

    /// The store the slots are taken in.
    pub fn slots(&self) -> &Sl {
        &self.gate.slots
    }
}

impl<S, K, Sl, R> Layer<S> for InFlightLayer<K, Sl, R> {
    type Service = InFlight<S, K, Sl, R>;

    fn layer(&self, inner: S) -> Self::Service {
        InFlight::new(inner, self.gate.clone())
    }
}

/// Builds an [`InFlightLayer`]. Every setting has a default; see each
/// method.
#[must_use]
pub struct InFlightBuilder<K = PeerIp, Sl = MemorySlots, R = DefaultRejector> {
    key: K,
    slots: Sl,
    rejector: R,
    config: Config,
}

impl<K, Sl, R> std::fmt::Debug for InFlightBuilder<K, Sl, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightBuilder").finish_non_exhaustive()
    }
}

/// The builder's settings that do not change its type.
struct Config {
    name: String,
    limit: u32,
    settings: Settings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: super::DEFAULT_NAME.to_owned(),
            limit: 1,
            settings: Settings {
                common: CommonSettings::default(),
                status: StatusCode::TOO_MANY_REQUESTS,
                wait: None,
                shadow: false,
            },
        }
    }
}

impl<K: KeyExtractor, Sl: Slots, R> InFlightBuilder<K, Sl, R> {
    /// How many requests of one key may run at once (at least 1; default
    /// 1).
    pub fn max_in_flight(mut self, limit: u32) -> Self {
        self.config.limit = limit;
        self
    }

    /// The limit's name (default `inflight`): what the fields call it, and
    /// in a shared store what its counts are kept under, so instances
    /// that share a limit must give it the same name, and layers that
    /// must not share one different names. A short token: 1 to 64
    /// letters, digits, `-`, `_`, `.`.
    pub fn name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.config.name);
        self
    }

    /// How requests map to keys (default [`PeerIp`]): any of tollgate's
    /// [`KeyExtractor`]s, as for the rate-limit layer.
    pub fn key<K2: KeyExtractor>(self, key: K2) -> InFlightBuilder<K2, Sl, R> {
        InFlightBuilder {
            key,
            slots: self.slots,
            rejector: self.rejector,
            config: self.config,
        }
    }

    /// Where the slots are counted (default a fresh [`MemorySlots`]; for
    /// instances that share a limit, tollgate-redis's `RedisSlots`).
    pub fn slots<Sl2: Slots>(self, slots: Sl2) -> InFlightBuilder<K, Sl2, R> {
        InFlightBuilder {
            key: self.key,
            slots,
            rejector: self.rejector,
            config: self.config,
        }
    }

    /// Answers refused requests with the responses `rejector` builds (from
    /// [`Rejection::InFlight`](crate::Rejection::InFlight), and for a
    /// missing key or a failing store `Rejection::MissingKey` and
    /// `Rejection::StoreFailed`): tollgate-tonic's `GrpcRejector` for gRPC.
    pub fn rejector<R2>(self, rejector: R2) -> InFlightBuilder<K, Sl, R2> {
        InFlightBuilder {
            key: self.key,
            slots: self.slots,
            rejector,
            config: self.config,
        }
    }

    /// The status refused requests get (default `429 Too Many Requests`).
    pub fn rejection_status(mut self, status: StatusCode) -> Self {
        self.config.settings.status = status;
        self
    }

    crate::common_setters!(config.settings.common);

    /// Queues a request whose key has every slot taken, for up to
    /// `max_wait`, instead of refusing it at once: it takes a slot that
    /// comes free meanwhile, and is refused if none does. Waiting requests
    /// hold their connection and a clone of the inner service, and are
    /// woken when a slot of their key is given back in this process (a
    /// shared store also polls; see its docs). There is no order among
    /// waiters. Needs a tokio runtime for the timer.
    pub fn max_delay(mut self, max_wait: Duration) -> Self {
        self.config.settings.wait = Some(max_wait);
        self
    }

    /// Shadow mode: the limit is decided and counted as if enforced, but
    /// no request is refused or queued. A request whose key has every slot
    /// taken runs without one (not counted, as a refused request is not),
    /// and is logged at INFO at most once per
    /// [`SHADOW_LOG_INTERVAL`](crate::SHADOW_LOG_INTERVAL); responses carry
    /// no in-flight fields.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.config.settings.shadow = shadow;
        self
    }

    /// The layer.
    ///
    /// # Panics
    ///
    /// If a setting cannot work, with the message
    /// [`try_build`](Self::try_build) would return.
    pub fn build(self) -> InFlightLayer<K, Sl, R> {
        self.try_build()
            .unwrap_or_else(|error| panic!("tollgate: {error}"))
    }

    /// The layer, or what is wrong with its settings: a limit of 0, a
    /// name that is not a token, a zero store timeout.
    pub fn try_build(self) -> Result<InFlightLayer<K, Sl, R>, ConfigError> {
        let limit = InFlightLimit::new(&self.config.name, self.config.limit)?;
        self.config.settings.common.check()?;
        Ok(InFlightLayer {
            gate: Arc::new(Gate {
                // In shadow, responses are left as they are.
                fields: Fields::new(
                    match self.config.settings.shadow {
                        true => crate::headers::HeaderStyle::NONE,
                        false => self.config.settings.common.headers,
                    },
                    &limit,
                ),
                shadow_log: crate::observe::Quiet::new(),
                outage: tollgate_store::__private::Outage::new(),
                metrics: crate::observe::LimitMetrics::new(limit.shared_name()),
                limit,
                key: self.key,
                missing_key: Default::default(),
                slots: self.slots,
                rejector: self.rejector,
                settings: self.config.settings,
            }),
        })
    }
}
