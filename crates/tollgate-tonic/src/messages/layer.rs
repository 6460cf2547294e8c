//! [`MessageLimitLayer`] and its builder.

use super::MessageLimit;
use super::gate::Limits;
use super::shared::{Direction, Shared};
use crate::GrpcPeerIp;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tollgate::core::{Algorithm, Quota};
use tollgate::{
    ConfigError, HeaderStyle, KeyExtractor, MemoryStore, NamedLimit, OnMissingKey, OnStoreError,
    Policy, Store,
};
use tower_layer::Layer;

/// The name of the one limit of [`MessageLimitLayer::new`].
pub const DEFAULT_LIMIT_NAME: &str = "messages";

/// How long the store may take to answer about one message, unless set
/// ([`MessageLimitBuilder::store_timeout`]): the rate-limit layer's
/// default too.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(100);

/// Counts each message of a gRPC call against a limit, not only the call:
/// a stream that runs out of budget ends with `RESOURCE_EXHAUSTED` and
/// `google.rpc.RetryInfo` (or, in delay mode, its messages are held until
/// their turn). See the [module docs](crate::messages).
///
/// ```
/// use tollgate::core::Quota;
/// use tollgate_tonic::MessageLimitLayer;
///
/// // 100 messages a second per client address, both directions.
/// let layer = MessageLimitLayer::new(Quota::per_second(100));
/// # let _ = layer;
/// ```
pub struct MessageLimitLayer<K = GrpcPeerIp, St = MemoryStore> {
    shared: Arc<Shared<K, St>>,
}

impl<K, St> Clone for MessageLimitLayer<K, St> {
    fn clone(&self) -> Self {
        MessageLimitLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<K, St> fmt::Debug for MessageLimitLayer<K, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageLimitLayer")
            .field("limits", &self.shared.limits.policy.limits())
            .field("direction", &self.shared.direction)
            .field("methods", &self.shared.methods)
            .finish_non_exhaustive()
    }
}

impl MessageLimitLayer {
    /// A limit called `"messages"` of `quota` on every message of every
    /// call, both directions, per client address ([`GrpcPeerIp`]), counted
    /// in a fresh [`MemoryStore`].
    pub fn new(quota: Quota) -> Self {
        Self::builder().quota(DEFAULT_LIMIT_NAME, quota).build()
    }

    /// Every setting, with defaults: no limit yet, [`GrpcPeerIp`] keys, a
    /// fresh [`MemoryStore`], both directions, every method, no delay,
    /// store timeout [`DEFAULT_STORE_TIMEOUT`], fail open, calls without a
    /// key counted under one shared key, the draft's rate-limit fields.
    pub fn builder() -> MessageLimitBuilder {
        MessageLimitBuilder::new()
    }
}

impl<K, St> MessageLimitLayer<K, St> {
    /// The limits every counted message is checked against.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.shared.limits.policy
    }

    /// The store the counts live in.
    pub fn store(&self) -> &St {
        &self.shared.limits.store
    }
}

impl<S, K, St> Layer<S> for MessageLimitLayer<K, St> {
    type Service = MessageLimit<S, K, St>;

    fn layer(&self, inner: S) -> Self::Service {
        MessageLimit::new(inner, self.shared.clone())
    }
}

/// Builds a [`MessageLimitLayer`]; start with
/// [`MessageLimitLayer::builder`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::core::Quota;
/// use tollgate_tonic::messages::Direction;
/// use tollgate_tonic::{MessageLimitLayer, MetadataKey};
///
/// let layer = MessageLimitLayer::builder()
///     // 50 messages a second per API key, sent by the client...
///     .quota("uploads", Quota::per_second(50))
///     .key(MetadataKey::new("x-api-key"))
///     .direction(Direction::Requests)
///     // ...on the one method that streams them...
///     .method("/upload.v1.Upload/Send")
///     // ...and a message over the rate waits up to a second for its turn.
///     .max_delay(Duration::from_secs(1))
///     .build();
/// # let _ = layer;
/// ```
#[derive(Clone, Debug)]
pub struct MessageLimitBuilder<K = GrpcPeerIp, St = MemoryStore> {
    limits: Vec<NamedLimit>,
    algorithm: Option<Algorithm>,
    max_delay: Option<Duration>,
    key: K,
    store: St,
    direction: Direction,
    methods: Vec<Box<str>>,
    store_timeout: Duration,
    on_store_error: OnStoreError,
    missing_key: OnMissingKey,
    headers: HeaderStyle,
}

impl MessageLimitBuilder {
    /// The defaults of [`MessageLimitLayer::builder`].
    pub fn new() -> Self {
        MessageLimitBuilder {
            limits: Vec::new(),
            algorithm: None,
            max_delay: None,
            key: GrpcPeerIp,
            store: MemoryStore::new(),
            direction: Direction::Both,
            methods: Vec::new(),
            store_timeout: DEFAULT_STORE_TIMEOUT,
            on_store_error: OnStoreError::Open,
            missing_key: OnMissingKey::default(),
            headers: HeaderStyle::DRAFT,
        }
    }
}

impl Default for MessageLimitBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl<K, St> MessageLimitBuilder<K, St> {
    /// Adds a limit. Several limits are charged together, each message
    /// all or nothing, as the rate-limit layer's are.
    pub fn limit(mut self, limit: NamedLimit) -> Self {
        self.limits.push(limit);
        self
    }

    /// Adds a limit called `name` of `quota`.
    ///
    /// # Panics
    ///
    /// If `name` is not a limit name ([`NamedLimit::new`]).
    pub fn quota(self, name: &str, quota: Quota) -> Self {
        self.limit(NamedLimit::new(name, quota))
    }

    /// Uses `algorithm` for every limit (default: each limit's own, GCRA
    /// unless set on the [`NamedLimit`]).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = Some(algorithm);
        self
    }

    /// Delay mode: a message that will conform within `max_delay` is
    /// charged now and held until then, rather than ending the stream;
    /// later ones wait behind it. As with
    /// [`RateLimitBuilder::max_delay`](tollgate::RateLimitBuilder::max_delay),
    /// this applies to GCRA and the continuous token bucket (the leaky
    /// bucket always shapes); the window algorithms keep refusing. A
    /// message that would wait longer ends the stream as without delay.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = Some(max_delay);
        self
    }

    /// How each call is mapped to the key its messages are counted under
    /// (default [`GrpcPeerIp`]): any [`KeyExtractor`], e.g.
    /// [`MetadataKey`](crate::MetadataKey), [`GrpcMethod`](crate::GrpcMethod)
    /// or a tuple of them.
    pub fn key<K2: KeyExtractor>(self, key: K2) -> MessageLimitBuilder<K2, St> {
        MessageLimitBuilder {
            limits: self.limits,
            algorithm: self.algorithm,
            max_delay: self.max_delay,
            key,
            store: self.store,
            direction: self.direction,
            methods: self.methods,
            store_timeout: self.store_timeout,
            on_store_error: self.on_store_error,
            missing_key: self.missing_key,
            headers: self.headers,
        }
    }

    /// Where the counts live (default a fresh [`MemoryStore`]): any
    /// [`Store`], such as `tollgate_redis::RedisStore` for a budget
    /// shared by several servers. In a shared store, counts are kept per
    /// limit name and key: give message limits names of their own, apart
    /// from the names of call limits.
    pub fn store<St2: Store>(self, store: St2) -> MessageLimitBuilder<K, St2> {
        MessageLimitBuilder {
            limits: self.limits,
            algorithm: self.algorithm,
            max_delay: self.max_delay,
            key: self.key,
            store,
            direction: self.direction,
            methods: self.methods,
            store_timeout: self.store_timeout,
            on_store_error: self.on_store_error,
            missing_key: self.missing_key,
            headers: self.headers,
        }
    }

    /// Which messages count (default [`Direction::Both`], one budget for
    /// both).
    pub fn direction(mut self, direction: Direction) -> Self {
        self.direction = direction;
        self
    }

    /// Counts the messages of the method at `path`
    /// (`/package.Service/Method`, see [`method`](crate::method)) only,
    /// and of any other method added the same way; by default every
    /// call's messages count. The other calls pass untouched.
    pub fn method(mut self, path: &str) -> Self {
        self.methods.push(path.into());
        self
    }

    /// How long the store may take to answer about a message (default
    /// [`DEFAULT_STORE_TIMEOUT`]); a later answer is a store error.
    /// Applies to stores that answer later (Redis); the memory store
    /// answers at once. Zero is refused when the layer is built.
    pub fn store_timeout(mut self, store_timeout: Duration) -> Self {
        self.store_timeout = store_timeout;
        self
    }

    /// What a message gets when the store fails or does not answer in
    /// time: [`OnStoreError::Open`] (the default) lets it through;
    /// [`OnStoreError::Closed`] ends the stream with `UNAVAILABLE`.
    pub fn on_store_error(mut self, on_store_error: OnStoreError) -> Self {
        self.on_store_error = on_store_error;
        self
    }

    /// What happens to a call whose key cannot be extracted:
    /// [`OnMissingKey::Shared`] (the default, as the rate-limit layer's)
    /// counts its messages under that one shared key;
    /// [`OnMissingKey::Skip`] lets them through uncounted.
    /// [`OnMissingKey::Reject`] is refused when the layer is built: refuse
    /// calls without a key at the call's layer
    /// ([`builder`](crate::builder)), in front of this one.
    pub fn on_missing_key(mut self, missing_key: OnMissingKey) -> Self {
        self.missing_key = missing_key;
        self
    }

    /// Which rate-limit fields the trailers (or the status's metadata) of
    /// a stream ended for its budget carry (default
    /// [`HeaderStyle::DRAFT`]: `ratelimit-policy` and `ratelimit`;
    /// `retry-after` is always there when a retry can pass).
    pub fn headers(mut self, headers: HeaderStyle) -> Self {
        self.headers = headers;
        self
    }
}

impl<K: KeyExtractor, St: Store> MessageLimitBuilder<K, St> {
    /// The layer.
    ///
    /// # Panics
    ///
    /// If a setting cannot work, with the message
    /// [`try_build`](Self::try_build) would return: a mistake in the
    /// program's setup, found when it starts.
    pub fn build(self) -> MessageLimitLayer<K, St> {
        self.try_build()
            .unwrap_or_else(|error| panic!("tollgate-tonic: {error}"))
    }

    /// The layer, or what is wrong with its settings: no limit, a zero
    /// store timeout, [`OnMissingKey::Reject`], or limits the store cannot
    /// decide ([`Store::supports`]).
    pub fn try_build(self) -> Result<MessageLimitLayer<K, St>, ConfigError> {
        if self.limits.is_empty() {
            return Err(ConfigError::new(
                "a message limit needs at least one limit: add one with \
                 `.quota(name, quota)` or `.limit(NamedLimit)`",
            ));
        }
        if self.store_timeout.is_zero() {
            return Err(ConfigError::new(
                "store_timeout is zero: every store answer that is not immediate would be \
                 late; give the store at least a few milliseconds (the default is 100 ms)",
            ));
        }
        if let OnMissingKey::Reject(_) = self.missing_key {
            return Err(ConfigError::new(
                "the message limit cannot reject calls without a key: use \
                 OnMissingKey::Shared or Skip here, and reject such calls with the call's \
                 rate-limit layer (tollgate_tonic::builder().on_missing_key(...)) in front",
            ));
        }
        let (algorithm, max_delay) = (self.algorithm, self.max_delay);
        let limits: Vec<NamedLimit> = self
            .limits
            .into_iter()
            .map(|limit| {
                let limit = match algorithm {
                    Some(algorithm) => limit.with_algorithm(algorithm),
                    None => limit,
                };
                match max_delay {
                    Some(delay) => {
                        let limiter = limit.limiter().with_max_delay(delay);
                        limit.with_limiter(limiter)
                    }
                    None => limit,
                }
            })
            .collect();
        let policy = Policy::new(limits);
        self.store.supports(&policy)?;
        Ok(MessageLimitLayer {
            shared: Arc::new(Shared {
                key: self.key,
                limits: Arc::new(Limits {
                    store: self.store,
                    policy: Arc::new(policy),
                    store_timeout: self.store_timeout,
                    on_store_error: self.on_store_error,
                    headers: self.headers,
                }),
                direction: self.direction,
                methods: self.methods.into_boxed_slice(),
                missing_key: self.missing_key,
            }),
        })
    }
}
