//! [`RedisStoreBuilder`]: a [`RedisStore`]'s settings, and the connection
//! (at once, or in the background) that makes the store.

use crate::RedisStoreError;
use crate::connection::{Connection, Topology};
use crate::functions::Functions;
use crate::options::ConnectOptions;
use crate::presence::announce;
use crate::server_clock::ServerClock;
use crate::store::{RedisStore, Shared};
#[cfg(feature = "tls")]
use crate::tls::Pem;
#[cfg(feature = "tls")]
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tollgate_store::{BlockList, Presence};

impl RedisStore {
    /// A builder for a store at `url`:
    ///
    /// - `redis://host:port` (or with a password and database,
    ///   `redis://:secret@host:port/2`, or a user, `redis://app:secret@…`)
    ///   for one server;
    /// - `redis+cluster://host:port,host:port` for a Cluster (a few nodes
    ///   suffice: the client learns the others); a password on each node
    ///   (`redis+cluster://:secret@h1:7000,:secret@h2:7000`), or on the
    ///   first only (`redis+cluster://:secret@h1:7000,h2:7000`: a node
    ///   without one takes the first's), the same for every node;
    /// - `redis+sentinel://host:port,host:port/service_name[/db]` for the
    ///   master of `service_name` (the name in `sentinel monitor`), found
    ///   through the sentinels listed and found again after a failover. A
    ///   user and password before the first sentinel
    ///   (`redis+sentinel://:secret@s1:26379,s2:26379/mymaster`) are the
    ///   master's; sentinels that ask for their own take
    ///   [`sentinel_password`](RedisStoreBuilder::sentinel_password).
    ///
    /// `rediss://`, `rediss+cluster://` and `rediss+sentinel://` are the
    /// same over TLS, with the `tls` feature: the system's root
    /// certificates are trusted unless
    /// [`tls_ca_file`](RedisStoreBuilder::tls_ca_file) names others.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            prefix: "tollgate".into(),
            options: ConnectOptions::default(),
            block_cache: true,
            functions: true,
            instances: 1,
            #[cfg(feature = "test-clock")]
            clock: None,
        }
    }

    /// A store at `url` with the default settings.
    pub async fn connect(url: impl Into<String>) -> Result<Self, RedisStoreError> {
        Self::builder(url).connect().await
    }
}

/// Settings of a [`RedisStore`]. Its `Debug` output shows the URL
/// [`redacted`](crate::redacted).
#[must_use = "call `connect` to get the store"]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    options: ConnectOptions,
    block_cache: bool,
    functions: bool,
    instances: u32,
    #[cfg(feature = "test-clock")]
    clock: Option<tollgate_core::ManualClock>,
}

impl std::fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &crate::redacted(&self.url))
            .field("prefix", &self.prefix)
            .field("options", &self.options)
            .field("block_cache", &self.block_cache)
            .field("functions", &self.functions)
            .finish_non_exhaustive()
    }
}

impl RedisStoreBuilder {
    /// The first part of every key name (default `tollgate`): give each
    /// service its own when several share a Redis. It may not contain `{`
    /// or `}`, which would move the Cluster hash tag.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long connecting may take (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// How long the client waits for any reply before failing the call
    /// (default: no limit of its own; the layer's store timeout bounds
    /// every check).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.options.response_timeout = Some(timeout);
        self
    }

    /// The longest pause between reconnection attempts (default 500 ms):
    /// how soon limiting resumes after Redis comes back.
    pub fn reconnect_max_delay(mut self, delay: Duration) -> Self {
        self.options.reconnect_max_delay = delay;
        self
    }

    /// Whether a key Redis refused is refused here until its retry time,
    /// without a call (default on): a flood of requests on a refused key
    /// then costs Redis one call per retry period from each instance, not
    /// one per request. What a cached refusal says, and why it is right,
    /// is in [`tollgate_store::BlockCache`]'s module; this is the same
    /// [`BlockList`], of its default bound, consulted before each
    /// script call (see [`RedisStore::block_list`]). Turn it off to have
    /// every request reach Redis (to measure the server, or where keys are
    /// reset in Redis by hand and must be admitted at once), or to put a
    /// [`BlockCache`](tollgate_store::BlockCache) of your own bound in
    /// front of the store.
    ///
    /// This one is inside the store, so inside any wrapper around it: a
    /// [`Breaker`](tollgate_store::Breaker) that is open answers without
    /// asking it, and a refused key then gets the store-error behaviour
    /// (fail-open lets it through) for the whole outage. Behind a breaker,
    /// turn this one off and put a `BlockCache` in front of the breaker
    /// (`BlockCache<Breaker<Timeout<RedisStore>>>`), which also bounds
    /// what fail-open lets through for a key it knew at its limit (see
    /// "While the store fails" in its docs).
    pub fn block_cache(mut self, on: bool) -> Self {
        self.block_cache = on;
        self
    }

    /// Whether the store calls its scripts as Redis functions (default
    /// on): loaded once per server as a library (`FUNCTION LOAD`) and
    /// called with `FCALL`, which costs the server about a third less
    /// per decision than an `EVALSHA`, which defines every helper of the
    /// script anew on each call. A server without functions (Redis
    /// before 7) or whose ACL refuses them is called with `EVALSHA`, as
    /// with this off; the store finds that out on its first call, and
    /// says so once at INFO. Turn it off where libraries may not be
    /// loaded on the server, or to keep `FUNCTION LIST` empty.
    pub fn functions(mut self, on: bool) -> Self {
        self.functions = on;
        self
    }

    /// How many instances share the store, as an operator knows it: the
    /// count of [`RedisStore::instances`] (and of its
    /// [`presence`](RedisStore::presence)) until Redis has answered a
    /// presence beat (default 1; at least 1). It matters to a
    /// [`Split`](tollgate_store::Split) fallback when Redis is away from
    /// the start (a lazy connection): each instance then decides at
    /// `1/instances` of each limit.
    pub fn instances(mut self, instances: u32) -> Self {
        self.instances = instances.max(1);
        self
    }

    /// Trusts the CA certificates of this PEM file for `rediss…` URLs,
    /// instead of the system's root certificates: for a server whose
    /// certificate a private CA signed (self-managed Redis, most test
    /// setups). Read when the store connects; a file that cannot be read
    /// or parsed is a configuration error then.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), tollgate_redis::RedisStoreError> {
    /// let store = tollgate_redis::RedisStore::builder("rediss://redis.internal:6380")
    ///     .tls_ca_file("/etc/redis/ca.pem")
    ///     .connect()
    ///     .await?;
    /// # let _ = store; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.tls.roots = Some(Pem::File(path.into()));
        self
    }

    /// [`tls_ca_file`](Self::tls_ca_file) with the PEM text given here.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.options.tls.roots = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Shows this client certificate (a PEM file, the chain from the
    /// client's certificate up) and proves it with this private key (a PEM
    /// file, PKCS#8, PKCS#1 or SEC1), for servers that ask clients for one
    /// (`tls-auth-clients yes`). Read when the store connects.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_cert_files(
        mut self,
        certificate: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.options.tls.identity = Some((Pem::File(certificate.into()), Pem::File(key.into())));
        self
    }

    /// [`tls_client_cert_files`](Self::tls_client_cert_files) with the PEM
    /// text given here.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_cert_pem(
        mut self,
        certificate: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.options.tls.identity = Some((Pem::Bytes(certificate.into()), Pem::Bytes(key.into())));
        self
    }

    /// The password the sentinels of a `redis+sentinel://` URL ask for
    /// (`requirepass` in their configuration), when they ask for one. The
    /// password in the URL is the master's.
    pub fn sentinel_password(mut self, password: impl Into<String>) -> Self {
        self.options.sentinel_auth.password = Some(password.into());
        self
    }

    /// The user the sentinels of a `redis+sentinel://` URL are to know this
    /// client as (their ACL), with
    /// [`sentinel_password`](Self::sentinel_password).
    pub fn sentinel_username(mut self, username: impl Into<String>) -> Self {
        self.options.sentinel_auth.username = Some(username.into());
        self
    }

    /// Scripts take `now` from `clock` instead of the server's `TIME`.
    /// Only for tests that compare decisions with tollgate-core at chosen
    /// times; behind the `test-clock` feature. The block cache measures
    /// retry times on it too.
    #[cfg(feature = "test-clock")]
    pub fn test_clock(mut self, clock: tollgate_core::ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Connects (failing if no server answers within the connect timeout)
    /// and returns the store.
    pub async fn connect(self) -> Result<RedisStore, RedisStoreError> {
        self.check_prefix()?;
        let mut connection = Connection::open(&self.url, &self.options).await?;
        // A first reading of the server's clock, so that the first calls
        // carry deadlines too.
        let server_clock = ServerClock::new();
        let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut connection).await?;
        server_clock.observe(seconds.saturating_mul(1_000_000).saturating_add(micros));
        Ok(self.store(Topology::new(connection), server_clock))
    }

    /// The store at once, connecting in the background: an application
    /// starts whether Redis is up or not. Until a server answers, every
    /// call fails at once with an unavailable error, so requests get the
    /// layer's store-error behaviour (`OnStoreError`, or a
    /// [`Fallback`](tollgate_store::Fallback) around the store); the store
    /// tries again after a pause that doubles from 100 ms to 2 s, logs the
    /// first failure as a warning and the connection as info, and shares
    /// its limits from the first call after it connected.
    ///
    /// Fails only for what needs no server: a malformed URL, TLS settings
    /// without a TLS URL, a key prefix with a brace, or no tokio runtime
    /// to connect on (call it inside one). A URL that reaches the wrong
    /// kind of server (a Cluster node for a one-server URL) is found when
    /// it connects, and logged.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> Result<(), tollgate_redis::RedisStoreError> {
    /// // Starts even if Redis is not up yet.
    /// let store = tollgate_redis::RedisStore::builder("redis://127.0.0.1:6379").connect_lazy()?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub fn connect_lazy(self) -> Result<RedisStore, RedisStoreError> {
        self.check_prefix()?;
        Connection::check(&self.url, &self.options)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RedisStoreError::config(
                "connect_lazy connects on a tokio runtime: call it inside one",
            ));
        }
        let topology = Topology::connecting(self.url.clone(), self.options.clone());
        Ok(self.store(topology, ServerClock::new()))
    }

    fn check_prefix(&self) -> Result<(), RedisStoreError> {
        if self.prefix.contains(['{', '}']) {
            return Err(RedisStoreError::config(format!(
                "the key prefix {:?} contains a brace; choose one without `{{` or `}}`",
                self.prefix
            )));
        }
        Ok(())
    }

    fn store(self, topology: Arc<Topology>, server_clock: ServerClock) -> RedisStore {
        let shared = Arc::new(Shared {
            topology,
            prefix: self.prefix,
            server_clock,
            blocked: self.block_cache.then(BlockList::new),
            calls: AtomicU64::new(0),
            functions: Functions::new(self.functions),
            presence: Presence::expecting(self.instances),
            #[cfg(feature = "test-clock")]
            clock: self.clock,
        });
        let id = format!(
            "{:016x}",
            std::hash::BuildHasher::hash_one(
                &std::hash::RandomState::new(),
                (std::process::id(), Arc::as_ptr(&shared) as usize)
            )
        );
        tokio::spawn(announce(Arc::downgrade(&shared), id));
        RedisStore { shared }
    }
}
