//! The settings the builders share, and their setters, written once:
//! [`CommonSettings`] (every layer's; [`common_setters!`](crate::common_setters))
//! and [`LimitSettings`] (every builder that takes rate limits;
//! [`limit_setters!`](crate::limit_setters)).

use crate::ConfigError;
use crate::headers::HeaderStyle;
use crate::key::OnMissingKey;
use crate::{NamedLimit, Policy};
use std::time::Duration;

use tollgate_core::Algorithm;

pub use crate::rate_limit::outcome::ChargeWhen;

/// What the layer does when the store fails or does not answer in time.
#[derive(Clone, Debug, Default)]
pub enum OnStoreError {
    /// Let the request through (the default): an outage of the store does not
    /// become an outage of the service.
    #[default]
    Open,
    /// Refuse it: `503 Service Unavailable` over HTTP, `UNAVAILABLE` over
    /// gRPC.
    Closed,
}

/// How long a store may take to answer, unless a builder's
/// `store_timeout` says otherwise.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(100);

/// The settings every tollgate layer's builder has — the rate-limit
/// layer's ([`RateLimitBuilder`](crate::RateLimitBuilder)), the in-flight
/// layer's ([`InFlightBuilder`](crate::in_flight::InFlightBuilder)) and
/// tollgate-tonic's message limit's — with the same setters, defaults and
/// meaning in each. A builder holds one; its setters are written once, by
/// [`common_setters!`](crate::common_setters).
///
/// ```
/// use tollgate::settings::{CommonSettings, DEFAULT_STORE_TIMEOUT};
/// use tollgate::{OnStoreError, headers::HeaderStyle};
///
/// let defaults = CommonSettings::default();
/// assert_eq!(defaults.headers, HeaderStyle::DRAFT);
/// assert!(matches!(defaults.on_store_error, OnStoreError::Open));
/// assert_eq!(defaults.store_timeout, DEFAULT_STORE_TIMEOUT);
/// assert!(defaults.check().is_ok());
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
#[doc(hidden)]
pub struct CommonSettings {
    /// Which rate-limit fields responses carry (default
    /// [`HeaderStyle::DRAFT`]).
    pub headers: HeaderStyle,
    /// What becomes of a request whose key cannot be extracted (default
    /// [`OnMissingKey::Shared`]).
    pub on_missing_key: OnMissingKey,
    /// What becomes of a request when the store fails or is late (default
    /// [`OnStoreError::Open`]).
    pub on_store_error: OnStoreError,
    /// How long the store may take to answer (default
    /// [`DEFAULT_STORE_TIMEOUT`]).
    pub store_timeout: Duration,
}

impl Default for CommonSettings {
    fn default() -> Self {
        CommonSettings {
            headers: HeaderStyle::DRAFT,
            on_missing_key: OnMissingKey::default(),
            on_store_error: OnStoreError::default(),
            store_timeout: DEFAULT_STORE_TIMEOUT,
        }
    }
}

impl CommonSettings {
    /// What is wrong with these settings for any layer: a zero store
    /// timeout, with which every answer that is not immediate would be
    /// late.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.store_timeout.is_zero() {
            return Err(ConfigError::new(
                "store_timeout is zero: every store answer that is not immediate would be \
                 late and get the store-error behaviour; give the store at least a few \
                 milliseconds (the default is 100 ms)",
            ));
        }
        Ok(())
    }
}

/// Writes the setters of [`CommonSettings`] into a builder's `impl`
/// block, given where the builder keeps them (`common_setters!(config.common)`
/// for a builder whose field `config` has a field `common`): one
/// definition, and one documentation, of `headers`, `on_missing_key`,
/// `on_store_error` and `store_timeout` for every layer.
#[doc(hidden)]
#[macro_export]
macro_rules! common_setters {
    ($($field:ident).+) => {
        /// Which rate-limit fields responses carry (default: the draft's,
        /// `RateLimit-Policy` and `RateLimit`, on every response; for a
        /// gRPC stream, in the trailers that end it). `Retry-After` is
        /// sent with every refusal that a retry can pass, whatever this
        /// says. What the fields say for this layer is in its module's
        /// docs.
        pub fn headers(mut self, headers: $crate::headers::HeaderStyle) -> Self {
            self.$($field).+.headers = headers;
            self
        }

        /// What becomes of a request whose key cannot be extracted
        /// (default: all such requests are counted under one shared key).
        /// `OnMissingKey::Skip` lets them through uncounted,
        /// `OnMissingKey::Reject` refuses them with its status (a layer
        /// that cannot refuse, as tollgate-tonic's message limit, says so
        /// when it is built).
        pub fn on_missing_key(mut self, on_missing_key: $crate::OnMissingKey) -> Self {
            self.$($field).+.on_missing_key = on_missing_key;
            self
        }

        /// What becomes of a request when the store fails or does not
        /// answer within the store timeout (default `OnStoreError::Open`:
        /// it goes through, uncounted, so that an outage of the store is
        /// not an outage of the service). `OnStoreError::Closed` refuses
        /// it: 503 over HTTP, `UNAVAILABLE` over gRPC.
        pub fn on_store_error(mut self, on_store_error: $crate::OnStoreError) -> Self {
            self.$($field).+.on_store_error = on_store_error;
            self
        }

        /// How long the store may take to answer about one request
        /// (default 100 ms); a later answer is a store failure (see
        /// [`on_store_error`](Self::on_store_error)). The memory store
        /// answers at once; a store that answers later (Redis, PostgreSQL)
        /// is timed with tokio's timer, so the layer needs a tokio runtime
        /// with time enabled, as axum and tonic servers have. Zero is
        /// refused when the layer is built: every answer that is not
        /// immediate would be late.
        pub fn store_timeout(mut self, store_timeout: ::std::time::Duration) -> Self {
            self.$($field).+.store_timeout = store_timeout;
            self
        }
    };
}

/// The rate limits a builder is given, and what it sets in every one of
/// them: the settings of the rate-limit layer's
/// ([`RateLimitBuilder`](crate::RateLimitBuilder)), the direct and keyed
/// limiters' ([`LimiterBuilder`](crate::direct::LimiterBuilder)) and
/// tollgate-tonic's message limit's builders, with their setters written
/// once by [`limit_setters!`](crate::limit_setters).
///
/// ```
/// use std::time::Duration;
/// use tollgate::NamedLimit;
/// use tollgate::core::{Algorithm, Quota};
/// use tollgate::settings::LimitSettings;
///
/// let mut settings = LimitSettings::default();
/// settings.limits.push(NamedLimit::new("api", Quota::per_second(5)));
/// settings.algorithm = Some(Algorithm::TokenBucket);
/// settings.max_delay = Some(Duration::from_millis(200));
/// let policy = settings.policy();
/// assert_eq!(policy.limits()[0].limiter().algorithm(), Algorithm::TokenBucket);
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
#[doc(hidden)]
pub struct LimitSettings {
    /// The limits, in the order they were added: a request must pass every
    /// one, and is charged to all or none.
    pub limits: Vec<NamedLimit>,
    /// The algorithm of every limit, where set (default: each limit's own).
    pub algorithm: Option<Algorithm>,
    /// The delay bound of every limit (delay mode), where set.
    pub max_delay: Option<Duration>,
}

impl LimitSettings {
    /// `limit` with what these settings set in every limit: the algorithm
    /// and the delay bound, where set. Also for limits given elsewhere
    /// (a route's, a key's quota).
    pub fn apply(&self, limit: NamedLimit) -> NamedLimit {
        tollgate_store::__private::with_overrides(limit, self.algorithm, self.max_delay)
    }

    /// A policy of the limits, each with [`apply`](Self::apply).
    pub fn policy(&self) -> Policy {
        Policy::new(self.applied())
    }

    /// The limits, each with [`apply`](Self::apply).
    pub(crate) fn applied(&self) -> Vec<NamedLimit> {
        self.limits
            .iter()
            .map(|limit| self.apply(limit.clone()))
            .collect()
    }
}

/// Writes the setters of [`LimitSettings`] into a builder's `impl` block,
/// given where the builder keeps them: `limit`, `quota` and `algorithm`,
/// and with `, max_delay` after the place, `max_delay` (delay mode) too.
#[doc(hidden)]
#[macro_export]
macro_rules! limit_setters {
    ($($field:ident).+) => {
        /// Adds a named limit. A request (or message) must pass every
        /// limit, and is charged to all or none.
        pub fn limit(mut self, limit: $crate::NamedLimit) -> Self {
            self.$($field).+.limits.push(limit);
            self
        }

        /// Adds a limit called `name` of `quota`: the same as
        /// `.limit(NamedLimit::new(name, quota))`, taking the same names
        /// (a `&str`, a `String`, an `Arc<str>`).
        ///
        /// # Panics
        ///
        /// If `name` is not a limit name: 1 to 64 letters, digits, `-`,
        /// `_`, `.` (`NamedLimit::try_new` says so without a panic).
        pub fn quota(
            self,
            name: impl Into<::std::sync::Arc<str>>,
            quota: $crate::core::Quota,
        ) -> Self {
            self.limit($crate::NamedLimit::new(name, quota))
        }

        /// Uses `algorithm` for every limit (default: each limit's own,
        /// GCRA unless set on the `NamedLimit`).
        pub fn algorithm(mut self, algorithm: $crate::core::Algorithm) -> Self {
            self.$($field).+.algorithm = Some(algorithm);
            self
        }
    };
    ($($field:ident).+, max_delay) => {
        $crate::limit_setters!($($field).+);

        /// Delay mode: instead of refusing a request (or message) that
        /// will conform within `max_delay`, charge it now and hold it
        /// until then; later ones wait behind it, so that they go on in
        /// arrival order at the quota's rate. Applies to GCRA and the
        /// continuous token bucket (the leaky bucket always shapes); the
        /// window algorithms have no future slot to reserve and keep
        /// refusing. One that would wait longer is refused as without
        /// delay. Needs a tokio runtime for the timer.
        pub fn max_delay(mut self, max_delay: ::std::time::Duration) -> Self {
            self.$($field).+.max_delay = Some(max_delay);
            self
        }
    };
}
