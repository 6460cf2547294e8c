//! [`RedisSlots`]: in-flight slots shared by every instance through Redis.

use crate::RedisStoreError;
use crate::connection::{Connection, Topology};
use crate::options::ConnectOptions;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::task::AbortHandle;
use tokio::time::Sleep;
use tollgate_internal::wakeups::{Waiter, Wakeups};
use tollgate_store::Key;
use tollgate_store::slots::{Acquired, InFlightLimit, SlotPermit, SlotReply, Slots};

const ACQUIRE: &str = include_str!("../scripts/in_flight_acquire.lua");
const RENEW: &str = include_str!("../scripts/in_flight_renew.lua");
const COUNT: &str = include_str!("../scripts/in_flight_count.lua");

/// In-flight slots in Redis or Redis Cluster, shared by every instance
/// that uses the same server, prefix and limit name: a
/// [`Slots`](tollgate_store::slots::Slots) store for
/// tollgate's `InFlightLayer`.
///
/// ```no_run
/// # async fn run() -> Result<(), tollgate_redis::RedisStoreError> {
/// use tollgate::in_flight::InFlightLayer;
/// use tollgate_redis::RedisSlots;
///
/// let slots = RedisSlots::connect("redis://127.0.0.1:6379").await?;
/// // At most 5 requests per client IP at once, over every instance.
/// let layer = InFlightLayer::builder().max_in_flight(5).slots(slots).build();
/// # let _ = layer;
/// # Ok(()) }
/// ```
///
/// # How it works
///
/// Each key's slots are a sorted set, `prefix:{user key}:name:inflight`
/// (the user key escaped as for [`RedisStore`](crate::RedisStore)'s keys,
/// in a Cluster hash tag), of slot ids scored by the end of their lease on
/// the Redis server's clock. Taking a slot is one script call
/// (`scripts/in_flight_acquire.lua`): drop the slots whose lease has ended,
/// count the rest, add this one if there are fewer than the limit. Giving
/// it back is one `ZREM`, sent from a spawned task when the request's
/// response body ends or fails (which holds its last frame until the
/// `ZREM` has answered, 1 s at most: a client that reads the whole answer
/// and asks again never finds its own slot still taken), or when the body
/// is dropped.
///
/// # Leases: a slot of an instance that died comes back
///
/// A slot is taken with a lease ([`RedisSlots::DEFAULT_LEASE`], 30 s, by default;
/// [`RedisSlotsBuilder::lease`]), and while its request runs the instance
/// renews it every third of the lease (a task per held slot, which sleeps
/// until then; requests shorter than that never renew). So a request may
/// run as long as it likes and keep its slot; and if the instance dies
/// (killed, its host lost) or cannot reach Redis, its slots stop being
/// renewed and come back at most one lease after their last renewal: the
/// next request of the key drops them. Until then they count against the
/// key's limit, which is the price of not over-admitting while the
/// instance might still be running them. A slot that could not be given
/// back (Redis away when its request ended, or no Tokio runtime left) also
/// comes back when its lease ends.
///
/// The sorted set has a TTL of at least the longest lease in it, so a
/// key's set disappears a lease after its last slot was taken or renewed
/// (and at once when its last slot is given back: Redis drops empty sets).
///
/// A renewal that finds its slot gone (its lease ended first: Redis was
/// away, or the instance stalled, for longer than two thirds of a lease)
/// logs a warning and stops renewing: the request goes on without a slot,
/// which may let one more request of the key run than the limit while it
/// does. Choose a lease well above your longest pauses.
///
/// # Waiting for a slot
///
/// With tollgate's `InFlightBuilder::max_delay`,
/// a queued request asks Redis again when a slot of its key is given back
/// by this instance, and every [`poll_interval`](RedisSlotsBuilder::poll_interval)
/// (50 ms by default) for slots given back by other instances: each
/// waiting request costs one script call per interval.
///
/// # Failures
///
/// A call that fails, or does not answer within the layer's
/// `store_timeout`, is a store failure: the layer's `on_store_error`
/// decides (fail open, the default, lets the request run without a slot).
/// A slot taken by a call whose answer came too late is given back at
/// once by the task that made the call. Each call is sent once (a Cluster
/// failover or resharding fails the calls caught in it).
#[derive(Clone)]
pub struct RedisSlots {
    shared: Arc<Shared>,
}

struct Shared {
    /// The connection (replaced after a failover; see [`Topology`]).
    topology: Arc<Topology>,
    prefix: String,
    lease: Duration,
    poll_interval: Duration,
    /// This store's part of every slot id: random, so that instances never
    /// take one another's ids.
    instance: String,
    next: AtomicU64,
    wakeups: Wakeups,
    hasher: foldhash::fast::RandomState,
    acquire: redis::Script,
    renew: redis::Script,
    count: redis::Script,
}

impl fmt::Debug for RedisSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSlots")
            .field("prefix", &self.shared.prefix)
            .field("lease", &self.shared.lease)
            .field("instance", &self.shared.instance)
            .finish_non_exhaustive()
    }
}

impl RedisSlots {
    /// The lease of a slot when none is given: how long a slot outlives
    /// the last renewal of the instance that holds it.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

    /// The shortest lease [`RedisSlotsBuilder::lease`] accepts.
    pub const MIN_LEASE: Duration = Duration::from_millis(100);

    /// The longest lease [`RedisSlotsBuilder::lease`] accepts: one day.
    /// `connect` refuses a longer one (a slot of a dead instance would
    /// count for longer than that; and `in_flight_acquire.lua` refuses
    /// one too, before writing anything).
    pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

    /// How often a queued request asks Redis again when none is given.
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(50);

    /// A builder for slots at `url` (as for
    /// [`RedisStore::builder`](crate::RedisStore::builder): `redis://…` or
    /// `redis+cluster://…`).
    pub fn builder(url: impl Into<String>) -> RedisSlotsBuilder {
        RedisSlotsBuilder {
            url: url.into(),
            prefix: "tollgate".into(),
            lease: Self::DEFAULT_LEASE,
            poll_interval: Self::DEFAULT_POLL_INTERVAL,
            options: ConnectOptions::default(),
            shared_with: None,
        }
    }

    /// Slots at `url` with the default settings.
    pub async fn connect(url: impl Into<String>) -> Result<Self, RedisStoreError> {
        Self::builder(url).connect().await
    }

    /// The lease of every slot this store takes.
    pub fn lease(&self) -> Duration {
        self.shared.lease
    }

    /// How often a held slot's lease is renewed: a third of the lease.
    pub fn renew_every(&self) -> Duration {
        self.shared.lease / 3
    }

    /// The Redis key of the sorted set that holds `key`'s slots under
    /// `limit`: for inspection (`ZRANGE … WITHSCORES`, `PTTL`) and tests.
    pub fn redis_key(&self, limit: &InFlightLimit, key: &Key) -> String {
        let mut out = String::with_capacity(self.shared.prefix.len() + limit.name().len() + 40);
        out.push_str(&self.shared.prefix);
        out.push_str(":{");
        crate::keys::push_user_key(&mut out, key);
        out.push_str("}:");
        out.push_str(limit.name());
        out.push_str(":inflight");
        out
    }

    /// How many slots of `key` under `limit` are held now, over every
    /// instance (leases not yet ended). Reads only.
    pub async fn in_flight(
        &self,
        limit: &InFlightLimit,
        key: &Key,
    ) -> Result<u32, RedisStoreError> {
        let mut connection = self.shared.connection()?;
        let held: i64 = self
            .shared
            .count
            .key(self.redis_key(limit, key))
            .invoke_async(&mut connection)
            .await?;
        Ok(u32::try_from(held).unwrap_or(u32::MAX))
    }
}

/// The lease in whole milliseconds, at least 1.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Shared {
    /// The connection to use now (an error before a lazily built store
    /// whose connection these slots share has connected).
    fn connection(&self) -> Result<Connection, RedisStoreError> {
        Ok(self.topology.current()?.connection.clone())
    }

    /// Takes a slot of `redis_key` (at most `max`), with the id `id`.
    async fn take(
        self: Arc<Self>,
        redis_key: String,
        id: String,
        max: u32,
        hash: u64,
    ) -> Result<Acquired<RedisPermit>, RedisStoreError> {
        let mut connection = self.connection()?;
        let reply: Vec<i64> = self
            .acquire
            .key(&redis_key)
            .arg(max)
            .arg(millis(self.lease))
            .arg(&id)
            .invoke_async(&mut connection)
            .await?;
        let (taken, held) = match reply.as_slice() {
            [taken, held] => (*taken == 1, u32::try_from(*held).unwrap_or(u32::MAX)),
            _ => {
                return Err(RedisStoreError::unexpected_reply(format!(
                    "the in-flight script answered {reply:?}, not [taken, held]"
                )));
            }
        };
        if !taken {
            return Ok(Acquired::Full { in_flight: held });
        }
        let renewal = tokio::spawn(renew(self.clone(), redis_key.clone(), id.clone()));
        Ok(Acquired::Taken {
            permit: RedisPermit {
                shared: self,
                redis_key,
                id,
                hash,
                renewal: renewal.abort_handle(),
            },
            in_flight: held,
        })
    }
}

/// Renews a held slot's lease every third of the lease, until aborted
/// (the permit was dropped) or the slot is found gone.
async fn renew(shared: Arc<Shared>, redis_key: String, id: String) {
    let every = shared.lease / 3;
    loop {
        tokio::time::sleep(every).await;
        // Connected: the slot was taken through it.
        let Ok(mut connection) = shared.connection() else {
            return;
        };
        let renewed: Result<i64, _> = shared
            .renew
            .key(&redis_key)
            .arg(millis(shared.lease))
            .arg(&id)
            .invoke_async(&mut connection)
            .await;
        match renewed {
            Ok(1) => {}
            Ok(_) => {
                tracing::warn!(
                    key = %redis_key,
                    "in-flight slot lost: its lease ended before it was renewed; the request \
                     runs on without a slot"
                );
                return;
            }
            // Tried again at the next third: the lease has two more.
            Err(error) => tracing::warn!(
                key = %redis_key,
                %error,
                "in-flight slot: a lease renewal failed"
            ),
        }
    }
}

/// A slot held in Redis: its lease is renewed while it lives, and it is
/// given back (one `ZREM`, from a spawned task) when it is dropped.
pub struct RedisPermit {
    shared: Arc<Shared>,
    redis_key: String,
    id: String,
    hash: u64,
    renewal: AbortHandle,
}

impl RedisPermit {
    /// The slot's id in its key's sorted set.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Debug for RedisPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPermit")
            .field("key", &self.redis_key)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl RedisPermit {
    /// Starts giving the slot back (one `ZREM`, from a spawned task, so
    /// that it goes on whoever waits for it), once: the task's handle, or
    /// `None` if it was given back already or there is no Tokio runtime.
    fn give_back(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        self.renewal.abort();
        if self.id.is_empty() {
            return None;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                key = %self.redis_key,
                "in-flight slot dropped outside a Tokio runtime: not given back; it comes \
                 back when its lease ends"
            );
            return None;
        };
        let shared = self.shared.clone();
        let redis_key = std::mem::take(&mut self.redis_key);
        let id = std::mem::take(&mut self.id);
        let hash = self.hash;
        Some(runtime.spawn(async move {
            // Connected: the slot was taken through it.
            let Ok(mut connection) = shared.connection() else {
                return;
            };
            let removed: Result<i64, _> = redis::cmd("ZREM")
                .arg(&redis_key)
                .arg(&id)
                .query_async(&mut connection)
                .await;
            if let Err(error) = removed {
                tracing::warn!(
                    key = %redis_key,
                    %error,
                    "in-flight slot not given back; it comes back when its lease ends"
                );
            }
            shared.wakeups.wake(hash);
        }))
    }
}

/// How long a response body waits for its slot's `ZREM` before it ends
/// anyway (the `ZREM` goes on): a Redis that stalls delays the end of a
/// response by this much at most.
const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// The `ZREM` is awaited (1 s at most), so a response body
/// holds its last frame until the slot is back in Redis.
impl SlotPermit for RedisPermit {
    fn release(mut self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let task = self.give_back();
        Box::pin(async move {
            if let Some(task) = task {
                let _ = tokio::time::timeout(RELEASE_WAIT, task).await;
            }
        })
    }
}

impl Drop for RedisPermit {
    fn drop(&mut self) {
        // The task goes on alone.
        drop(self.give_back());
    }
}

/// The future of [`RedisSlots`]' answers.
pub type RedisSlotsFuture =
    Pin<Box<dyn Future<Output = Result<Acquired<RedisPermit>, RedisStoreError>> + Send>>;

pin_project! {
    /// A queued request's wake-up with [`RedisSlots`]: a slot of its key
    /// given back by this instance, or the poll interval, whichever comes
    /// first.
    pub struct RedisFreed {
        #[pin]
        waiter: Waiter,
        #[pin]
        poll: Sleep,
    }
}

impl Future for RedisFreed {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if this.waiter.poll(cx).is_ready() {
            return Poll::Ready(());
        }
        this.poll.poll(cx)
    }
}

impl Slots for RedisSlots {
    type Permit = RedisPermit;
    type Error = RedisStoreError;
    type Future = RedisSlotsFuture;
    type Freed = RedisFreed;

    /// One script call, from a spawned task: if the layer stops waiting
    /// for it, a slot it took is given back at once.
    fn acquire(
        &self,
        limit: &InFlightLimit,
        key: &Key,
    ) -> SlotReply<RedisSlotsFuture, RedisPermit, RedisStoreError> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return SlotReply::Ready(Err(RedisStoreError::config(
                "RedisSlots needs a Tokio runtime: it was asked for a slot outside one",
            )));
        };
        let shared = self.shared.clone();
        let n = shared.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}:{n}", shared.instance);
        let hash = shared.hasher.hash_one((limit.id(), key));
        let redis_key = self.redis_key(limit, key);
        let max = limit.max();
        let (answer, answered) = tokio::sync::oneshot::channel();
        runtime.spawn(async move {
            let taken = shared.take(redis_key, id, max, hash).await;
            // If nobody waits any more, the permit comes back here and is
            // dropped: the slot is given back.
            let _ = answer.send(taken);
        });
        SlotReply::Pending(Box::pin(async move {
            answered.await.unwrap_or_else(|_| {
                Err(RedisStoreError::unexpected_reply(
                    "the task taking an in-flight slot ended without an answer (its runtime \
                     is shutting down)",
                ))
            })
        }))
    }

    fn freed(&self, limit: &InFlightLimit, key: &Key) -> RedisFreed {
        let hash = self.shared.hasher.hash_one((limit.id(), key));
        RedisFreed {
            waiter: self.shared.wakeups.waiter(hash),
            poll: tokio::time::sleep(self.shared.poll_interval),
        }
    }
}

/// Settings of a [`RedisSlots`]. Its `Debug` output shows the URL
/// [`redacted`](crate::redacted).
#[must_use = "call `connect` to get the slots"]
pub struct RedisSlotsBuilder {
    url: String,
    prefix: String,
    lease: Duration,
    poll_interval: Duration,
    options: ConnectOptions,
    /// A store's connection, used instead of a connection of their own.
    shared_with: Option<Arc<Topology>>,
}

impl fmt::Debug for RedisSlotsBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSlotsBuilder")
            .field("url", &crate::redacted(&self.url))
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

impl RedisSlotsBuilder {
    /// The first part of every key name (default `tollgate`), without `{`
    /// or `}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long a slot outlives the last renewal of the instance holding
    /// it (default [`RedisSlots::DEFAULT_LEASE`], 30 s; at least
    /// [`RedisSlots::MIN_LEASE`], 100 ms, and at most
    /// [`RedisSlots::MAX_LEASE`], one day: [`connect`](Self::connect)
    /// refuses a lease outside these with a configuration error): the
    /// longest a dead instance's slots keep counting. Held slots
    /// are renewed every third of it. Instances sharing a limit should use
    /// the same lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often a queued request asks Redis again for a slot, besides
    /// when this instance gives one of its key back (default
    /// [`RedisSlots::DEFAULT_POLL_INTERVAL`], 50 ms; at least 1 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long connecting may take (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// Uses `store`'s connection instead of opening one: its server, TLS
    /// certificates and Sentinel settings, and the failovers it follows.
    /// The URL given to [`RedisSlots::builder`] is then not used. The way
    /// to give slots a `rediss://` server with a private CA, or a
    /// Sentinel-watched master.
    pub fn share_connection(mut self, store: &crate::RedisStore) -> Self {
        self.shared_with = Some(store.topology());
        self
    }

    /// Connects (failing if no server answers within the connect timeout)
    /// and returns the slots.
    pub async fn connect(self) -> Result<RedisSlots, RedisStoreError> {
        self.check()?;
        let topology = match self.shared_with.clone() {
            Some(topology) => topology,
            None => Topology::new(Connection::open(&self.url, &self.options).await?),
        };
        Ok(self.slots(topology))
    }

    /// The slots at once, connecting in the background as
    /// [`RedisStoreBuilder::connect_lazy`](crate::RedisStoreBuilder::connect_lazy)
    /// does (with [`share_connection`](Self::share_connection), the store's
    /// connection, made when the store's is): until a server answers, a
    /// request's slot fails at once, and gets the layer's store-error
    /// behaviour. Fails only for what needs no server, or outside a tokio
    /// runtime.
    pub fn connect_lazy(self) -> Result<RedisSlots, RedisStoreError> {
        self.check()?;
        let topology = match self.shared_with.clone() {
            Some(topology) => topology,
            None => {
                Connection::check(&self.url, &self.options)?;
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(RedisStoreError::config(
                        "connect_lazy connects on a tokio runtime: call it inside one",
                    ));
                }
                Topology::connecting(self.url.clone(), self.options.clone())
            }
        };
        Ok(self.slots(topology))
    }

    /// The settings that need no server.
    fn check(&self) -> Result<(), RedisStoreError> {
        if self.prefix.contains(['{', '}']) {
            return Err(RedisStoreError::config(format!(
                "the key prefix {:?} contains a brace; choose one without `{{` or `}}`",
                self.prefix
            )));
        }
        if self.lease < RedisSlots::MIN_LEASE {
            return Err(RedisStoreError::config(format!(
                "an in-flight lease of {:?} is shorter than {:?}: slots would end before \
                 their requests could renew them",
                self.lease,
                RedisSlots::MIN_LEASE
            )));
        }
        if self.lease > RedisSlots::MAX_LEASE {
            return Err(RedisStoreError::config(format!(
                "an in-flight lease of {:?} is longer than {:?}: a slot of an instance that \
                 died would keep counting for that long",
                self.lease,
                RedisSlots::MAX_LEASE
            )));
        }
        if self.poll_interval < Duration::from_millis(1) {
            return Err(RedisStoreError::config(
                "the in-flight poll interval must be at least 1 ms",
            ));
        }
        Ok(())
    }

    fn slots(self, topology: Arc<Topology>) -> RedisSlots {
        let instance = {
            let seed = foldhash::fast::RandomState::default();
            let time = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            format!(
                "{:016x}",
                seed.hash_one((std::process::id(), time.as_nanos()))
            )
        };
        RedisSlots {
            shared: Arc::new(Shared {
                topology,
                prefix: self.prefix,
                lease: self.lease,
                poll_interval: self.poll_interval,
                instance,
                next: AtomicU64::new(0),
                wakeups: Wakeups::new(),
                hasher: foldhash::fast::RandomState::default(),
                acquire: redis::Script::new(ACQUIRE),
                renew: redis::Script::new(RENEW),
                count: redis::Script::new(COUNT),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_tests::redis::RedisServer;

    #[tokio::test]
    async fn a_script_that_refuses_its_arguments_is_a_config_error() {
        let server = RedisServer::start();
        let client = redis::Client::open(server.url()).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let refused: Result<Vec<i64>, _> = redis::Script::new(ACQUIRE)
            .key("t:{k}:l:inflight")
            .arg(1)
            .arg("100000000000000000")
            .arg("a:1")
            .invoke_async(&mut connection)
            .await;
        let error = RedisStoreError::from(refused.unwrap_err());
        assert!(error.is_config(), "{error}");
        let shown = error.to_string();
        assert!(
            shown.contains("the lease in ms") && shown.contains("wrote nothing"),
            "{shown}"
        );
        assert_eq!(server.command(&["EXISTS", "t:{k}:l:inflight"]), ":0\r\n");
    }
}
