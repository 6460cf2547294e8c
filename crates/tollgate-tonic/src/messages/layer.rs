//! [`MessageLimitLayer`] and its builder.

use super::MessageLimit;
use super::gate::Limits;
use super::shared::{Direction, Shared};
use crate::GrpcPeerIp;
use std::fmt;
use std::sync::Arc;
use tollgate::__private::ShadowLog;
use tollgate::core::Quota;
use tollgate::settings::{CommonSettings, LimitSettings};
use tollgate::{ConfigError, KeyExtractor, MemoryStore, OnMissingKey, Policy, Store};
use tower_layer::Layer;

/// The name of the one limit of [`MessageLimitLayer::new`].
pub const DEFAULT_LIMIT_NAME: &str = "messages";

/// How long the store may take to answer about one message, unless set
/// ([`MessageLimitBuilder::store_timeout`]): every layer's default.
pub use tollgate::settings::DEFAULT_STORE_TIMEOUT;

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
    limits: LimitSettings,
    key: K,
    store: St,
    direction: Direction,
    methods: Vec<Box<str>>,
    common: CommonSettings,
    shadow: bool,
}

impl MessageLimitBuilder {
    /// The defaults of [`MessageLimitLayer::builder`].
    pub fn new() -> Self {
        MessageLimitBuilder {
            limits: LimitSettings::default(),
            key: GrpcPeerIp,
            store: MemoryStore::new(),
            direction: Direction::Both,
            methods: Vec::new(),
            common: CommonSettings::default(),
            shadow: false,
        }
    }
}

impl Default for MessageLimitBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl<K, St> MessageLimitBuilder<K, St> {
    tollgate::limit_setters!(limits, max_delay);

    /// How each call is mapped to the key its messages are counted under
    /// (default [`GrpcPeerIp`]): any [`KeyExtractor`], e.g.
    /// [`MetadataKey`](crate::MetadataKey), [`GrpcMethod`](crate::GrpcMethod)
    /// or a tuple of them.
    pub fn key<K2: KeyExtractor>(self, key: K2) -> MessageLimitBuilder<K2, St> {
        MessageLimitBuilder {
            limits: self.limits,
            key,
            store: self.store,
            direction: self.direction,
            methods: self.methods,
            common: self.common,
            shadow: self.shadow,
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
            key: self.key,
            store,
            direction: self.direction,
            methods: self.methods,
            common: self.common,
            shadow: self.shadow,
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

    tollgate::common_setters!(common);

    /// Shadow mode: every message is decided and counted as if the limits
    /// were enforced, but none is held or refused. A message they would
    /// have refused passes uncharged (as a refused one would be), logged
    /// at INFO at most once per [`SHADOW_LOG_INTERVAL`](tollgate::SHADOW_LOG_INTERVAL)
    /// per limit. (One limit in shadow beside enforced ones,
    /// `NamedLimit::shadow`, is for the call's rate-limit layer; here it is
    /// refused in `try_build`.)
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
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
        if self.limits.limits.is_empty() {
            return Err(ConfigError::new(
                "a message limit needs at least one limit: add one with \
                 `.quota(name, quota)` or `.limit(NamedLimit)`",
            ));
        }
        // The stores' and wrappers' default clock sets itself up at its
        // first reading (up to 200 ms, once per process): now, not at the
        // first message.
        tollgate::core::Clock::now(&tollgate::core::MonotonicClock);
        self.common.check()?;
        if let OnMissingKey::Reject(_) = self.common.on_missing_key {
            return Err(ConfigError::new(
                "the message limit cannot reject calls without a key: use \
                 OnMissingKey::Shared or Skip here, and reject such calls with the call's \
                 rate-limit layer (tollgate_tonic::builder().on_missing_key(...)) in front",
            ));
        }
        let policy = self.limits.policy();
        if let Some(limit) = policy.limits().iter().find(|limit| limit.is_shadow()) {
            return Err(ConfigError::new(format!(
                "the message limit {:?} is in shadow (NamedLimit::shadow), which message \
                 limits do not take one by one: put the whole layer in shadow with \
                 MessageLimitBuilder::shadow(true), or give it a layer of its own",
                limit.name()
            )));
        }
        self.store.supports(&policy)?;
        let policy_len = policy.limits().len();
        Ok(MessageLimitLayer {
            shared: Arc::new(Shared {
                key: self.key,
                limits: Arc::new(Limits {
                    store: self.store,
                    policy: Arc::new(policy),
                    store_timeout: self.common.store_timeout,
                    on_store_error: self.common.on_store_error,
                    headers: self.common.headers,
                    shadow: self.shadow.then(|| ShadowLog::new(policy_len)),
                }),
                direction: self.direction,
                methods: self.methods.into_boxed_slice(),
                missing_key: self.common.on_missing_key,
            }),
        })
    }
}
