//! One connection type for standalone Redis and Redis Cluster.

use crate::RedisStoreError;
use crate::url::{self, Target};
use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::time::Duration;

/// How to connect; see [`RedisStoreBuilder`](crate::RedisStoreBuilder).
#[derive(Clone, Debug)]
pub(crate) struct ConnectOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Option<Duration>,
    pub(crate) reconnect_max_delay: Duration,
}

/// A multiplexed connection that reconnects by itself: a connection manager
/// for one server, the cluster client's connection (which follows MOVED and
/// ASK and refreshes its slot map) for a cluster. Clones share it.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Connection {
    pub(crate) async fn open(url: &str, options: &ConnectOptions) -> Result<Self, RedisStoreError> {
        match url::parse(url)? {
            Target::Cluster(nodes) => Self::open_cluster(nodes, options).await,
            Target::Single(url) => Self::open_single(&url, options).await,
        }
    }

    async fn open_single(url: &str, options: &ConnectOptions) -> Result<Self, RedisStoreError> {
        let client = redis::Client::open(url).map_err(|e| {
            RedisStoreError::config(format!("{} is not a Redis URL: {e}", url::redacted(url)))
        })?;
        // One plain attempt first: the manager retries without end (what
        // reconnection wants), which would make a wrong address hang here
        // instead of failing.
        let probe =
            AsyncConnectionConfig::new().set_connection_timeout(Some(options.connect_timeout));
        let mut probe = client
            .get_multiplexed_async_connection_with_config(&probe)
            .await?;
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
        let mut builder = ClusterClient::builder(nodes)
            .connection_timeout(options.connect_timeout)
            .max_retry_wait(
                u64::try_from(options.reconnect_max_delay.as_millis()).unwrap_or(u64::MAX),
            )
            .min_retry_wait(10);
        if let Some(timeout) = options.response_timeout {
            builder = builder.response_timeout(timeout);
        }
        let client = builder
            .build()
            .map_err(|e| RedisStoreError::config(format!("invalid cluster nodes: {e}")))?;
        Ok(Connection::Cluster(client.get_async_connection().await?))
    }
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

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
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
            Connection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}
