//! One connection type for standalone Redis and Redis Cluster.

use crate::RedisStoreError;
use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::time::Duration;

/// The URL scheme of a cluster: `redis+cluster://host:port,host:port`.
const CLUSTER_SCHEME: &str = "redis+cluster://";

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
        match url.strip_prefix(CLUSTER_SCHEME) {
            Some(nodes) => Self::open_cluster(nodes, options).await,
            None => Self::open_single(url, options).await,
        }
    }

    async fn open_single(url: &str, options: &ConnectOptions) -> Result<Self, RedisStoreError> {
        let client = redis::Client::open(url)
            .map_err(|e| RedisStoreError::config(format!("{url:?} is not a Redis URL: {e}")))?;
        // One plain attempt first: the manager retries without end (what
        // reconnection wants), which would make a wrong address hang here
        // instead of failing.
        let probe =
            AsyncConnectionConfig::new().set_connection_timeout(Some(options.connect_timeout));
        drop(
            client
                .get_multiplexed_async_connection_with_config(&probe)
                .await?,
        );
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

    async fn open_cluster(nodes: &str, options: &ConnectOptions) -> Result<Self, RedisStoreError> {
        let nodes: Vec<String> = nodes
            .split(',')
            .filter(|node| !node.trim().is_empty())
            .map(|node| format!("redis://{}", node.trim()))
            .collect();
        if nodes.is_empty() {
            return Err(RedisStoreError::config(
                "a cluster URL names at least one node: redis+cluster://host:port,host:port",
            ));
        }
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
