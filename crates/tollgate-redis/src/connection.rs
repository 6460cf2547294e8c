//! One connection type for standalone Redis and Redis Cluster.

use crate::RedisStoreError;
use crate::closed::Closed;
use crate::options::ConnectOptions;
use crate::sentinel::{Search, SentinelMaster};
use crate::url::{self, Target};
use arc_swap::ArcSwapOption;
use redis::AsyncConnectionConfig;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::sync::Arc;
use std::time::Duration;

/// A multiplexed connection that reconnects by itself: a connection manager
/// for one server, the cluster client's connection (which follows MOVED and
/// ASK and refreshes its slot map) for a cluster, with the client that made
/// it (see [`Topology`]); for a Sentinel-watched master, a plain connection
/// that [`Topology`] replaces by one to the master the sentinels name when
/// it fails. Clones share it.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection, Box<ClusterHandle>),
    Sentinel(MultiplexedConnection, Arc<SentinelMaster>),
}

/// What a Cluster connection was made with: the client, and the signal
/// its node connections give when one of them closes (RESP3 servers).
pub(crate) struct ClusterHandle {
    client: ClusterClient,
    /// Told when a node connection closed (a node restarted or died): the
    /// cluster client would send the next call to that node on the dead
    /// connection, where it fails, so the topology makes a fresh
    /// connection instead (see [`Topology::watch_closed`]).
    closed: Option<Arc<Closed>>,
}

impl Clone for ClusterHandle {
    fn clone(&self) -> Self {
        ClusterHandle {
            client: self.client.clone(),
            closed: self.closed.clone(),
        }
    }
}

/// A store's connection, replaced by a fresh one when a Cluster's
/// topology changed under it in a way the client does not follow.
///
/// The cluster client refreshes its slot map on `MOVED` and `ASK`, and waits
/// and retries on `TRYAGAIN`, `CLUSTERDOWN` and `LOADING`: the command had
/// not run, so a retry is safe. But after a manual failover (`CLUSTER
/// FAILOVER`) the demoted master keeps answering the script, which fails at
/// its first write with `READONLY`, and the client treats that as final:
/// without help, every key of that shard fails for good. A `READONLY` reply
/// means the script wrote nothing, so the store takes a fresh connection
/// (which reads the slot map anew) and sends the same call once more.
pub(crate) struct Topology {
    /// `None` until a store built with `connect_lazy` has connected.
    current: ArcSwapOption<Generation>,
    /// Held while a fresh connection is made, so that many calls failing
    /// at once make one.
    refreshing: tokio::sync::Mutex<()>,
}

/// The longest pause between two attempts of a lazily built store to
/// connect.
pub(crate) const LAZY_RETRY_MAX: Duration = Duration::from_secs(2);

/// The error of a call made before a lazily built store connected.
pub(crate) fn not_connected() -> RedisStoreError {
    RedisStoreError::unavailable(
        "not connected to Redis yet (the store connects in the background)".to_owned(),
    )
}

/// How often a store on a Sentinel-watched master asks the sentinels
/// whether the master is still the one it is connected to.
pub(crate) const SENTINEL_CHECK_EVERY: Duration = Duration::from_secs(1);

/// A connection and how many times the connection was replaced before it.
pub(crate) struct Generation {
    pub(crate) connection: Connection,
    pub(crate) number: u64,
    /// How many connections its signal had seen close before it was made.
    closed_before: u64,
}

impl Generation {
    fn new(connection: Connection, number: u64, closed_before: u64) -> Self {
        Generation {
            connection,
            number,
            closed_before,
        }
    }

    /// Whether a connection of it closed since it was made (a Cluster's
    /// node connection, a master's): a call sent on it now would fail
    /// unsent.
    fn has_closed(&self) -> bool {
        self.connection
            .closed()
            .is_some_and(|closed| closed.count() > self.closed_before)
    }
}

impl Topology {
    /// The topology of `connection`. For a Sentinel-watched master, a
    /// task also asks the sentinels every [`SENTINEL_CHECK_EVERY`] which
    /// server is the master, and moves to it when it changed (see
    /// [`Topology::follow_sentinel`]); it ends with the topology.
    pub(crate) fn new(connection: Connection) -> Arc<Self> {
        let topology = Self::unconnected();
        topology.connected(connection);
        topology
    }

    /// A topology with no connection yet (see [`connecting`](Self::connecting)).
    fn unconnected() -> Arc<Self> {
        Arc::new(Topology {
            current: ArcSwapOption::empty(),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// `connection` is the first: calls use it from now on.
    fn connected(self: &Arc<Self>, connection: Connection) {
        let sentinel = connection.is_sentinel();
        let closed = connection.closed().cloned();
        self.current
            .store(Some(Arc::new(Generation::new(connection, 0, 0))));
        if sentinel {
            tokio::spawn(Self::follow_sentinel(Arc::downgrade(self)));
        }
        if let Some(closed) = closed {
            tokio::spawn(Self::watch_closed(Arc::downgrade(self), closed));
        }
    }

    /// Makes a fresh connection whenever the current one (a Cluster's: one
    /// of its node connections; a Sentinel-watched master's) closes, as a
    /// restarted or dead server's does, so that no call is sent on a
    /// connection the server closed, where it would fail (and, as the call
    /// may have run, could not be sent again). A Cluster node still down is
    /// connected to when it is back, by the fresh connection's first call
    /// for its slots; a master, by the next call's search. At most one
    /// every 100 ms. (One server's connection manager does this itself.)
    async fn watch_closed(topology: std::sync::Weak<Topology>, closed: Arc<Closed>) {
        loop {
            closed.next().await;
            // Until a fresh connection is made: the server may still be
            // down (a restart), and the dead connection must not stay.
            let mut pause = Duration::from_millis(100);
            loop {
                let Some(strong) = topology.upgrade() else {
                    return;
                };
                let made = match strong.current() {
                    Ok(current) => matches!(
                        strong
                            .refresh(current.number, "the connection closed", Search::Background)
                            .await,
                        Some(Ok(_)) | None
                    ),
                    Err(_) => true,
                };
                drop(strong);
                tokio::time::sleep(pause).await;
                if made {
                    break;
                }
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }

    /// A topology that connects to `url` in the background (on the current
    /// tokio runtime), trying again after a pause that doubles from 100 ms
    /// to [`LAZY_RETRY_MAX`] while no server answers: until it connects,
    /// every call fails at once ([`not_connected`]). The first failure is
    /// logged as a warning, the connection as info. The attempts end with
    /// the topology.
    pub(crate) fn connecting(url: String, options: ConnectOptions) -> Arc<Self> {
        let topology = Self::unconnected();
        let weak = Arc::downgrade(&topology);
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(100);
            let mut warned = false;
            loop {
                let attempt = Connection::open(&url, &options).await;
                let Some(topology) = weak.upgrade() else {
                    return;
                };
                match attempt {
                    Ok(connection) => {
                        tracing::info!(
                            url = %url::redacted(&url),
                            "connected to Redis; the store shares its limits from now on"
                        );
                        topology.connected(connection);
                        return;
                    }
                    Err(error) if !warned => {
                        warned = true;
                        tracing::warn!(
                            %error,
                            "Redis is not reachable yet; requests get the store-error \
                             behaviour until it is (trying again every few seconds, \
                             logged once)"
                        );
                    }
                    Err(_) => {}
                }
                drop(topology);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LAZY_RETRY_MAX);
            }
        });
        topology
    }

    /// Moves to the master the sentinels name whenever it is not the one
    /// connected to. A dead master shows itself by failing calls (which
    /// refresh at once, see `call_until_answered`), but a master demoted
    /// by a failover while alive keeps accepting writes until the
    /// sentinels reconfigure it, seconds later: without this check those
    /// writes, lost with the demotion, would go on.
    async fn follow_sentinel(topology: std::sync::Weak<Topology>) {
        loop {
            tokio::time::sleep(SENTINEL_CHECK_EVERY).await;
            let Some(topology) = topology.upgrade() else {
                return;
            };
            let Ok(current) = topology.current() else {
                return;
            };
            let Connection::Sentinel(_, master) = &current.connection else {
                return;
            };
            if master.has_moved().await {
                // A failure is logged by the next call that meets it.
                let _ = topology
                    .refresh(
                        current.number,
                        "the sentinels name another master",
                        Search::Background,
                    )
                    .await;
            }
        }
    }

    /// The connection to use now, or [`not_connected`] before a lazily
    /// built store has connected.
    pub(crate) fn current(&self) -> Result<Arc<Generation>, RedisStoreError> {
        self.current.load_full().ok_or_else(not_connected)
    }

    /// [`current`](Self::current), made afresh first if one of its
    /// connections closed (see [`watch_closed`](Self::watch_closed), which
    /// may not have done it yet): the error then is the fresh one's, and
    /// nothing was sent.
    pub(crate) async fn live(&self) -> Result<Arc<Generation>, RedisStoreError> {
        let current = self.current()?;
        if !current.has_closed() {
            return Ok(current);
        }
        match self
            .refreshed_after(current.number, "the connection closed")
            .await
        {
            Some(fresh) => fresh,
            None => Ok(current),
        }
    }

    /// A connection newer than generation `seen`: made now if nobody has
    /// made one since, from the cluster's nodes, or to the master the
    /// sentinels name, for `why` (logged). `None` for one server, whose
    /// connection manager reconnects by itself.
    pub(crate) async fn refreshed_after(
        &self,
        seen: u64,
        why: &str,
    ) -> Option<Result<Arc<Generation>, RedisStoreError>> {
        self.refresh(seen, why, Search::ForCall).await
    }

    /// [`refreshed_after`](Self::refreshed_after), by a call or in the
    /// background (`search`: a Sentinel search for the master in the
    /// background neither waits out nor starts the pause after a failed
    /// one, which keeps a flood of calls off the sentinels).
    async fn refresh(
        &self,
        seen: u64,
        why: &str,
        search: Search,
    ) -> Option<Result<Arc<Generation>, RedisStoreError>> {
        let _one_at_a_time = self.refreshing.lock().await;
        let current = match self.current() {
            Ok(current) => current,
            Err(error) => return Some(Err(error)),
        };
        if current.number != seen {
            return Some(Ok(current));
        }
        // Read before the new connection is made: a close counted meanwhile
        // marks it closed too (one fresh connection more, never a dead one
        // kept).
        let closed_before = current
            .connection
            .closed()
            .map_or(0, |closed| closed.count());
        let connection = match &current.connection {
            Connection::Single(_) => return None,
            Connection::Cluster(_, handle) => match handle.client.get_async_connection().await {
                Ok(fresh) => {
                    tracing::warn!(
                        why,
                        "Redis Cluster: reconnected to every node and read the slot map again"
                    );
                    Connection::Cluster(fresh, handle.clone())
                }
                Err(error) => return Some(Err(error.into())),
            },
            Connection::Sentinel(_, master) => match master.connect(search).await {
                Ok(fresh) => {
                    tracing::warn!(
                        why,
                        "Redis Sentinel: reconnected to the master the sentinels name now"
                    );
                    Connection::Sentinel(fresh, master.clone())
                }
                Err(error) => return Some(Err(error)),
            },
        };
        let next = Arc::new(Generation::new(connection, seen + 1, closed_before));
        self.current.store(Some(next.clone()));
        Some(Ok(next))
    }
}

impl Connection {
    /// What can be told of `url` and `options` without a server: the URL
    /// parses, and TLS settings go with a TLS URL.
    pub(crate) fn check(url: &str, options: &ConnectOptions) -> Result<(), RedisStoreError> {
        let target = url::parse(url)?;
        options.tls.check_used(target.uses_tls())
    }

    pub(crate) async fn open(url: &str, options: &ConnectOptions) -> Result<Self, RedisStoreError> {
        let target = url::parse(url)?;
        options.tls.check_used(target.uses_tls())?;
        #[cfg(feature = "tls")]
        if target.uses_tls() {
            crate::tls::use_default_crypto();
        }
        match target {
            Target::Cluster(nodes) => Self::open_cluster(nodes, options).await,
            Target::Single(url) => Self::open_single(&url, options).await,
            Target::Sentinel(target) => {
                let master = SentinelMaster::new(&target, options)?;
                let connection = master.connect(Search::ForCall).await?;
                Ok(Connection::Sentinel(connection, Arc::new(master)))
            }
        }
    }

    async fn open_single(url: &str, options: &ConnectOptions) -> Result<Self, RedisStoreError> {
        // One plain attempt first: the manager retries without end (what
        // reconnection wants), which would make a wrong address hang here
        // instead of failing.
        let probe =
            AsyncConnectionConfig::new().set_connection_timeout(Some(options.connect_timeout));
        // RESP3 where the server speaks it (and the URL names no protocol):
        // with it the manager hears at once that a connection closed (a
        // restart) and makes a fresh one, so the next call is not sent on
        // the dead one, to fail there. A server older than Redis 6 refuses
        // `HELLO`: RESP2 then, and a call after a restart may fail once.
        let mut client = single_client(url, options, !url.contains("protocol="))?;
        let mut attempt = client
            .get_multiplexed_async_connection_with_config(&probe)
            .await;
        if matches!(&attempt, Err(error) if error.kind() != redis::ErrorKind::Io
            && !error.is_connection_refusal() && !error.is_timeout())
        {
            client = single_client(url, options, false)?;
            attempt = client
                .get_multiplexed_async_connection_with_config(&probe)
                .await;
        }
        let mut probe = attempt?;
        refuse_cluster_node(&mut probe, url).await?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(options.response_timeout)
            // Retry quickly and keep retrying: limiting must resume soon
            // after Redis comes back.
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(options.reconnect_max_delay)
            .set_number_of_retries(usize::MAX);
        let manager = ConnectionManager::new_with_config(client, config).await?;
        Ok(Connection::Single(manager))
    }

    async fn open_cluster(
        nodes: Vec<String>,
        options: &ConnectOptions,
    ) -> Result<Self, RedisStoreError> {
        // RESP3 where the nodes speak it: a node connection that closes
        // then says so (see `Topology::watch_cluster`). Nodes older than
        // Redis 6 refuse `HELLO`: RESP2 then, without the signal.
        let closed = Arc::new(Closed::default());
        let client = Self::cluster_client(nodes.clone(), options, Some(closed.clone()))?;
        match client.get_async_connection().await {
            Ok(connection) => Ok(Self::cluster(connection, client, Some(closed))),
            Err(error)
                if error.kind() == redis::ErrorKind::Io
                    || error.is_connection_refusal()
                    || error.is_timeout() =>
            {
                Err(error.into())
            }
            Err(_) => {
                let client = Self::cluster_client(nodes, options, None)?;
                let connection = client.get_async_connection().await?;
                Ok(Self::cluster(connection, client, None))
            }
        }
    }

    fn cluster(
        connection: ClusterConnection,
        client: ClusterClient,
        closed: Option<Arc<Closed>>,
    ) -> Self {
        Connection::Cluster(connection, Box::new(ClusterHandle { client, closed }))
    }

    /// The client of a Cluster; speaking RESP3 and notifying `closed` when
    /// a node connection closes, if given.
    fn cluster_client(
        nodes: Vec<String>,
        options: &ConnectOptions,
        closed: Option<Arc<Closed>>,
    ) -> Result<ClusterClient, RedisStoreError> {
        // No retries by the client: it would send a call again after a
        // connection dropped, when the script may have run (and charged).
        // The store retries itself, and only where the script cannot have
        // run (see `Failure`); the client still repairs its slot map and
        // connections in the background.
        let mut builder = ClusterClient::builder(nodes)
            .retries(0)
            .connection_timeout(options.connect_timeout)
            .max_retry_wait(
                u64::try_from(options.reconnect_max_delay.as_millis()).unwrap_or(u64::MAX),
            )
            .min_retry_wait(10);
        if let Some(timeout) = options.response_timeout {
            builder = builder.response_timeout(timeout);
        }
        if let Some(closed) = closed {
            builder = builder
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(closed.sender());
        }
        #[cfg(feature = "tls")]
        if let Some(certificates) = options.tls.certificates()? {
            builder = builder.certs(certificates);
        }
        builder
            .build()
            .map_err(|e| RedisStoreError::config(format!("invalid cluster nodes: {e}")))
    }
}

/// The client of one server, with the certificates of the store's TLS
/// settings when it has some; speaking RESP3 if `resp3`.
fn single_client(
    url: &str,
    options: &ConnectOptions,
    resp3: bool,
) -> Result<redis::Client, RedisStoreError> {
    use redis::IntoConnectionInfo;
    let not_a_url =
        |e| RedisStoreError::config(format!("{} is not a Redis URL: {e}", url::redacted(url)));
    let mut info = url.into_connection_info().map_err(not_a_url)?;
    if resp3 {
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        info = info.set_redis_settings(settings);
    }
    #[cfg(feature = "tls")]
    if let Some(certificates) = options.tls.certificates()? {
        return redis::Client::build_with_tls(info, certificates).map_err(not_a_url);
    }
    let _ = options;
    redis::Client::open(info).map_err(not_a_url)
}

/// Fails with a configuration error if the server behind a one-server URL is
/// a Cluster node: it would answer MOVED for most keys, and every decision
/// would fail.
async fn refuse_cluster_node(
    connection: &mut redis::aio::MultiplexedConnection,
    url: &str,
) -> Result<(), RedisStoreError> {
    // A server that refuses INFO (an ACL without it) is given the benefit
    // of the doubt: only a positive answer refuses the URL.
    let info: Option<String> = redis::cmd("INFO")
        .arg("cluster")
        .query_async(connection)
        .await
        .ok();
    if info.is_some_and(|info| info.lines().any(|line| line.trim() == "cluster_enabled:1")) {
        let address = url::redacted(url);
        let address = address
            .split_once("://")
            .map_or(address.as_str(), |(_, a)| a);
        return Err(RedisStoreError::config(format!(
            "{} is a Redis Cluster node: use redis+cluster://{address} (and other nodes,              comma-separated) so that each key goes to the node that holds it",
            url::redacted(url),
        )));
    }
    Ok(())
}

/// What a failed call says about whether its script ran, and so whether
/// it may be sent again.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// It did not run (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`,
    /// `MASTERDOWN`, a refused connection, no connection to the slot's
    /// node): send it again, after a pause.
    Again,
    /// It did not run: the keys are moving to this node (`ASK`); send it
    /// there, after `ASKING`.
    Ask { host: String, port: u16 },
    /// It did not run, and the connection's picture of the cluster is wrong
    /// in a way the client does not mend (`READONLY`): a fresh connection,
    /// then again.
    Refresh,
    /// It may have run (the connection dropped or timed out after sending),
    /// or it failed for good: give up.
    Final,
}

impl Failure {
    pub(crate) fn of(error: &redis::RedisError) -> Failure {
        use redis::{ErrorKind, ServerErrorKind};
        match error.kind() {
            ErrorKind::Server(ServerErrorKind::Ask) => match error.redirect_node() {
                Some((address, _slot)) => match address.rsplit_once(':') {
                    Some((host, port)) => match port.parse() {
                        Ok(port) => Failure::Ask {
                            host: host.to_owned(),
                            port,
                        },
                        Err(_) => Failure::Final,
                    },
                    None => Failure::Final,
                },
                None => Failure::Final,
            },
            ErrorKind::Server(
                ServerErrorKind::Moved
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::MasterDown,
            )
            | ErrorKind::ClusterConnectionNotFound => Failure::Again,
            ErrorKind::Server(ServerErrorKind::ReadOnly) => Failure::Refresh,
            _ if error.is_connection_refusal() => Failure::Again,
            _ => Failure::Final,
        }
    }
}

impl Connection {
    /// The signal its connections give when one closes, if any.
    fn closed(&self) -> Option<&Arc<Closed>> {
        match self {
            Connection::Cluster(_, handle) => handle.closed.as_ref(),
            Connection::Sentinel(_, master) => Some(&master.closed),
            Connection::Single(_) => None,
        }
    }

    /// Whether this is a Cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(..))
    }

    /// Whether this is a connection to a master found through Sentinel.
    pub(crate) fn is_sentinel(&self) -> bool {
        matches!(self, Connection::Sentinel(..))
    }

    /// Sends `ASKING` and then `command` to the node at `host:port` (where
    /// an `ASK` redirected the call): the reply to `command`.
    pub(crate) async fn ask(
        &self,
        command: &Cmd,
        host: &str,
        port: u16,
    ) -> Result<Value, redis::RedisError> {
        let Connection::Cluster(connection, _) = self else {
            return Err((redis::ErrorKind::Client, "ASK without a cluster").into());
        };
        let mut pipeline = redis::pipe();
        pipeline.cmd("ASKING").add_command(command.clone());
        let route = redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
            host: host.to_owned(),
            port,
        };
        let mut connection = connection.clone();
        // Both replies asked for, `ASKING`'s too: with a push sender set
        // (RESP3, see `Closed`), redis-rs's subscription tracker reads one
        // reply per command of the pipeline and panics, killing the
        // connection, when it was given fewer (seen under resharding).
        let mut replies = connection.route_pipeline(pipeline, 0, 2, route).await?;
        match replies.pop() {
            Some(Value::ServerError(error)) => Err(error.into()),
            Some(reply) => Ok(reply),
            None => Err((redis::ErrorKind::Client, "no reply after ASKING").into()),
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c, _) => c.req_packed_command(cmd),
            Connection::Sentinel(c, _) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(c, _) => c.req_packed_commands(cmd, offset, count),
            Connection::Sentinel(c, _) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c, _) => c.get_db(),
            Connection::Sentinel(c, _) => c.get_db(),
        }
    }
}
