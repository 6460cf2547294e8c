//! Per-key quotas kept in a Redis hash.

use crate::connection::Topology;
use crate::{RedisStore, RedisStoreError};
use std::time::Duration;
use tollgate_store::quotas::{ChangedQuotas, QuotaAnswer, QuotaLookup, QuotaSource};
use tollgate_store::{Key, KeyView};

/// How often each instance reads the feed of changed quotas.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// How many changes the feed keeps; an instance that missed more drops
/// every cached quota.
const FEED_LENGTH: i64 = 10_000;

/// A [`QuotaSource`] that reads one field of a Redis hash per key:
/// `HGET tollgate:quotas user:241531` → `"5/s"` (several quotas as
/// `"5/s;500/h"`; also `"unlimited"`, and `"default"` or no field for the
/// layer's own limits). Put it behind
/// tollgate's `KeyQuotas` cache, as the layer requires.
///
/// The field is the key as text: the bytes of a header or closure key as
/// they are (`user:241531`), an IP address as usual text (`203.0.113.7`,
/// `2001:db8::1`), and `~global` for the global key. So that a client cannot
/// send a header value that reads another key's field, a byte key that
/// starts with `~` or reads as an IP address gets a `~` in front
/// (`~203.0.113.7` is the field of the header value `203.0.113.7`, never of
/// that address). A field that does not parse is a lookup error (counted,
/// logged with the text), not a silent default.
///
/// **Changing a quota.** [`set`](Self::set) (or `remove`) writes the field
/// and records the change in a feed beside the hash (`HASH:version`, a
/// counter, and `HASH:changes`, the keys changed, by version, the last
/// 10,000); every instance's cache follows the feed, once a second, and
/// drops the changed keys, whose next request then waits for the new quota
/// and carries the key's usage over ([`Store::carry`](tollgate_store::Store::carry)):
/// a change reaches every instance within about a second. A plain `HSET
/// tollgate:quotas user:241531 10/s` (no feed) applies within the cache's
/// TTL instead.
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

    /// Sets `key`'s quota (`"5/s"`, `"5/s;500/h"`, `"unlimited"`,
    /// `"default"`), and records the change in the feed every instance
    /// follows (see the type's docs): within about a second every
    /// instance's next request of `key` has it.
    pub async fn set(&self, key: &Key, answer: &QuotaAnswer) -> Result<(), RedisStoreError> {
        let mut connection = self.topology.current()?.connection.clone();
        let field = Self::field(key);
        redis::cmd("HSET")
            .arg(&self.hash)
            .arg(&field)
            .arg(answer.to_string())
            .query_async::<()>(&mut connection)
            .await?;
        self.record(&field).await
    }

    /// Drops `key`'s quota (the layer's default limits apply again), and
    /// records the change as [`set`](Self::set) does.
    pub async fn remove(&self, key: &Key) -> Result<(), RedisStoreError> {
        let mut connection = self.topology.current()?.connection.clone();
        let field = Self::field(key);
        redis::cmd("HDEL")
            .arg(&self.hash)
            .arg(&field)
            .query_async::<()>(&mut connection)
            .await?;
        self.record(&field).await
    }

    /// Records that `field` changed: the next version, then the field at
    /// it (single-key commands, so that a Cluster takes them; the field is
    /// written before, so a follower that sees the change reads the new
    /// quota).
    async fn record(&self, field: &[u8]) -> Result<(), RedisStoreError> {
        let mut connection = self.topology.current()?.connection.clone();
        let version: i64 = redis::cmd("INCR")
            .arg(self.version_key())
            .query_async(&mut connection)
            .await?;
        redis::cmd("ZADD")
            .arg(self.changes_key())
            .arg(version)
            .arg(field)
            .query_async::<()>(&mut connection)
            .await?;
        redis::cmd("ZREMRANGEBYRANK")
            .arg(self.changes_key())
            .arg(0)
            .arg(-FEED_LENGTH - 1)
            .query_async::<()>(&mut connection)
            .await?;
        Ok(())
    }

    fn version_key(&self) -> String {
        format!("{}:version", self.hash)
    }

    fn changes_key(&self) -> String {
        format!("{}:changes", self.hash)
    }

    /// The key whose quota a hash field holds: the inverse of
    /// [`field`](Self::field).
    ///
    /// ```
    /// use tollgate_store::Key;
    /// use tollgate_redis::RedisQuotas;
    ///
    /// for key in [Key::from("user:241531"), Key::GLOBAL, Key::from("203.0.113.7"),
    ///             Key::from("203.0.113.7".parse::<std::net::IpAddr>().unwrap()), Key::from("~global")] {
    ///     assert_eq!(RedisQuotas::key_of(&RedisQuotas::field(&key)), key);
    /// }
    /// ```
    pub fn key_of(field: &[u8]) -> Key {
        if field == b"~global" {
            return Key::GLOBAL;
        }
        if let Some(rest) = field.strip_prefix(b"~") {
            return Key::from_bytes(rest);
        }
        match std::str::from_utf8(field)
            .ok()
            .and_then(|t| t.parse::<std::net::IpAddr>().ok())
        {
            Some(ip) => Key::from(ip),
            None => Key::from_bytes(field),
        }
    }

    /// Reads the feed from version `seen` on (`None`: the whole feed it
    /// keeps): the keys changed since, and the version now; `None` keys
    /// when more changed than the feed keeps.
    async fn changes_since(
        &self,
        seen: Option<i64>,
    ) -> Result<(Option<Vec<Key>>, i64), RedisStoreError> {
        let mut connection = self.topology.current()?.connection.clone();
        let now: Option<i64> = redis::cmd("GET")
            .arg(self.version_key())
            .query_async(&mut connection)
            .await?;
        let now = now.unwrap_or(0);
        let seen = match seen {
            Some(seen) if now - seen > FEED_LENGTH => return Ok((None, now)),
            Some(seen) => seen,
            None => now.saturating_sub(FEED_LENGTH).max(0),
        };
        if now <= seen {
            return Ok((Some(Vec::new()), now));
        }
        let fields: Vec<Vec<u8>> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.changes_key())
            .arg(format!("({seen}"))
            .arg(now)
            .query_async(&mut connection)
            .await?;
        Ok((Some(fields.iter().map(|f| Self::key_of(f)).collect()), now))
    }

    /// The hash field that holds `key`'s quota (see the type's doc: no two
    /// keys share a field).
    ///
    /// ```
    /// use tollgate_store::Key;
    /// use tollgate_redis::RedisQuotas;
    ///
    /// assert_eq!(RedisQuotas::field(&Key::from("user:241531")), b"user:241531");
    /// assert_eq!(RedisQuotas::field(&Key::from("203.0.113.7".parse::<std::net::IpAddr>().unwrap())), b"203.0.113.7");
    /// assert_eq!(RedisQuotas::field(&Key::from("203.0.113.7")), b"~203.0.113.7");
    /// assert_eq!(RedisQuotas::field(&Key::GLOBAL), b"~global");
    /// assert_eq!(RedisQuotas::field(&Key::from("~global")), b"~~global");
    /// ```
    pub fn field(key: &Key) -> Vec<u8> {
        match key.view() {
            KeyView::Global => b"~global".to_vec(),
            KeyView::Ip(ip) => ip.to_string().into_bytes(),
            KeyView::Bytes(bytes) => {
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
    /// Reads the feed of changes every second and invalidates the
    /// keys changed; all of them if it missed more than the feed keeps.
    /// The first read takes the whole feed: a key looked up before the
    /// follower first read it may hold an answer a change has replaced
    /// since (dropping a key not cached costs nothing). Ends when the
    /// cache is gone. A failed read is tried again a second later.
    fn follow(&self, changed: ChangedQuotas) {
        let source = self.clone();
        tokio::spawn(async move {
            let mut seen = None;
            let mut ticks = tokio::time::interval(FOLLOW_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !changed.is_gone() {
                ticks.tick().await;
                let Ok((keys, now)) = source.changes_since(seen).await else {
                    continue;
                };
                match keys {
                    Some(keys) => keys.iter().for_each(|key| changed.invalidate(key)),
                    None => changed.invalidate_all(),
                }
                seen = Some(now);
            }
        });
    }

    fn lookup(&self, key: &Key) -> QuotaLookup {
        let topology = self.topology.clone();
        let mut command = redis::cmd("HGET");
        command.arg(&self.hash).arg(Self::field(key));
        Box::pin(async move {
            let mut connection = topology.current()?.connection.clone();
            let text: Option<String> = command.query_async(&mut connection).await?;
            let text = text.unwrap_or_default();
            text.parse::<QuotaAnswer>().map_err(|error| {
                tollgate_store::BoxError::from(format!(
                    "the quota {text:?} does not parse: {error}"
                ))
            })
        })
    }
}
