//! Per-key quotas kept in a Redis hash.

use crate::RedisStore;
use crate::connection::Topology;
use tollgate::Key;
use tollgate::quotas::{QuotaAnswer, QuotaLookup, QuotaSource, QuotaSourceError};

/// A [`QuotaSource`] that reads one field of a Redis hash per key:
/// `HGET tollgate:quotas user:241531` → `"5/s"` (several quotas as
/// `"5/s;500/h"`; also `"unlimited"`, and `"default"` or no field for the
/// layer's own limits). Put it behind tollgate's
/// [`KeyQuotas`](tollgate::quotas::KeyQuotas) cache, as the layer requires.
///
/// The field is the key as text: the bytes of a header or closure key as
/// they are (`user:241531`), an IP address as usual text (`203.0.113.7`,
/// `2001:db8::1`), and `~global` for the global key. So that a client cannot
/// send a header value that reads another key's field, a byte key that
/// starts with `~` or reads as an IP address gets a `~` in front
/// (`~203.0.113.7` is the field of the header value `203.0.113.7`, never of
/// that address). An operator changes a
/// quota with `HSET tollgate:quotas user:241531 10/s`; it applies within
/// the cache's TTL. A field that does not parse is a lookup error (counted,
/// logged with the text), not a silent default.
///
/// ```no_run
/// # async fn run() -> Result<(), tollgate_redis::RedisStoreError> {
/// use std::time::Duration;
/// use tollgate::quotas::KeyQuotas;
/// use tollgate::{HeaderKey, RateLimitLayer};
/// use tollgate_redis::{RedisQuotas, RedisStore};
///
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// let quotas = KeyQuotas::new(RedisQuotas::new(&store)).ttl(Duration::from_secs(10));
/// let layer = RateLimitLayer::builder()
///     .quota("api", "10/s".parse().unwrap())
///     .key(HeaderKey::new("x-api-key"))
///     .store(store)
///     .quota_source(quotas)
///     .build();
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisQuotas {
    topology: std::sync::Arc<Topology>,
    hash: String,
}

impl std::fmt::Debug for RedisQuotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQuotas")
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

impl RedisQuotas {
    /// Quotas in the hash `PREFIX:quotas` (`tollgate:quotas` by default), on
    /// `store`'s server and connection.
    pub fn new(store: &RedisStore) -> Self {
        Self::in_hash(store, format!("{}:quotas", store.prefix()))
    }

    /// Quotas in the hash called `hash`, on `store`'s server and connection.
    pub fn in_hash(store: &RedisStore, hash: impl Into<String>) -> Self {
        RedisQuotas {
            topology: store.topology(),
            hash: hash.into(),
        }
    }

    /// The hash this source reads.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The hash field that holds `key`'s quota (see the type's doc: no two
    /// keys share a field).
    ///
    /// ```
    /// use tollgate::Key;
    /// use tollgate_redis::RedisQuotas;
    ///
    /// assert_eq!(RedisQuotas::field(&Key::from("user:241531")), b"user:241531");
    /// assert_eq!(RedisQuotas::field(&Key::Ip("203.0.113.7".parse().unwrap())), b"203.0.113.7");
    /// assert_eq!(RedisQuotas::field(&Key::from("203.0.113.7")), b"~203.0.113.7");
    /// assert_eq!(RedisQuotas::field(&Key::Global), b"~global");
    /// assert_eq!(RedisQuotas::field(&Key::from("~global")), b"~~global");
    /// ```
    pub fn field(key: &Key) -> Vec<u8> {
        match key {
            Key::Global => b"~global".to_vec(),
            Key::Ip(ip) => ip.to_string().into_bytes(),
            other => {
                let bytes = other.as_slice().unwrap_or_default();
                let reads_as_ip = std::str::from_utf8(bytes)
                    .is_ok_and(|text| text.parse::<std::net::IpAddr>().is_ok());
                let mut field = Vec::with_capacity(bytes.len() + 1);
                if reads_as_ip || bytes.starts_with(b"~") {
                    field.push(b'~');
                }
                field.extend_from_slice(bytes);
                field
            }
        }
    }
}

impl QuotaSource for RedisQuotas {
    fn lookup(&self, key: &Key) -> QuotaLookup {
        let topology = self.topology.clone();
        let mut command = redis::cmd("HGET");
        command.arg(&self.hash).arg(Self::field(key));
        Box::pin(async move {
            let mut connection = topology.current()?.connection.clone();
            let text: Option<String> = command.query_async(&mut connection).await?;
            let text = text.unwrap_or_default();
            text.parse::<QuotaAnswer>().map_err(|error| {
                QuotaSourceError::from(format!("the quota {text:?} does not parse: {error}"))
            })
        })
    }
}
