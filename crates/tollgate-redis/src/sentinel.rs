//! The master of a Sentinel-watched service: asked of the sentinels when
//! the store connects, and asked again when the master stops answering as
//! one (it died, or a failover demoted it).

use crate::RedisStoreError;
use crate::closed::Closed;
use crate::options::ConnectOptions;
use crate::url::SentinelTarget;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, TlsMode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long after a failed search for the master the next one may start:
/// while the sentinels have no master to give (a failover under way),
/// requests fail at once instead of each asking them again.
const SEARCH_PAUSE: Duration = Duration::from_millis(50);

/// Who looks for a Sentinel-watched master (see `SentinelMaster::connect`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Search {
    /// A call (or the store connecting): a failure is remembered for a
    /// moment, and calls meanwhile fail at once.
    ForCall,
    /// The topology's own watch, in the background: it neither waits out
    /// nor starts that pause.
    Background,
}

/// Finds a service's master through its sentinels and connects to it.
pub(crate) struct SentinelMaster {
    /// The redis client's Sentinel support: it asks the sentinels in turn
    /// for a master that is neither down nor demoted, and checks the
    /// server's `ROLE` before naming it.
    client: tokio::sync::Mutex<SentinelClient>,
    /// The `sentinel monitor` name, for messages.
    service: String,
    /// How the connection to the master is made.
    config: AsyncConnectionConfig,
    /// How long a search (sentinels and then the master) may take.
    search_timeout: Duration,
    /// When the last search failed, and why.
    failed: Mutex<Option<(Instant, String)>>,
    /// The address of the master last connected to.
    connected_to: Mutex<Option<ConnectionAddr>>,
    /// Notified when a connection to the master closes (a RESP3 master
    /// says so): see `Topology::watch_closed`.
    pub(crate) closed: Arc<Closed>,
}

impl SentinelMaster {
    /// The client for `target`, checked but not yet connected.
    pub(crate) fn new(
        target: &SentinelTarget,
        options: &ConnectOptions,
    ) -> Result<Self, RedisStoreError> {
        let config_error = |e: redis::RedisError| {
            RedisStoreError::config(format!("invalid Sentinel settings: {e}"))
        };
        let sentinels = target
            .sentinels
            .iter()
            .map(|url| Ok(url.as_str().into_connection_info()?.addr().clone()))
            .collect::<Result<Vec<ConnectionAddr>, redis::RedisError>>()
            .map_err(config_error)?;
        let master = target
            .master_settings
            .as_str()
            .into_connection_info()
            .map_err(config_error)?;
        let master = master.redis_settings();
        let mut builder =
            SentinelClientBuilder::new(sentinels, &target.service, SentinelServerType::Master)
                .map_err(config_error)?
                .set_client_to_redis_db(master.db());
        if let Some(username) = master.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = master.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(username) = &options.sentinel_auth.username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = &options.sentinel_auth.password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if target.tls {
            builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
            #[cfg(feature = "tls")]
            if let Some(certificates) = options.tls.certificates()? {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates);
            }
        }
        let client = builder.build().map_err(config_error)?;
        let closed = Arc::new(Closed::default());
        let config = options.connection_config().set_push_sender(closed.sender());
        Ok(SentinelMaster {
            client: tokio::sync::Mutex::new(client),
            service: target.service.clone(),
            config,
            closed,
            search_timeout: options.connect_timeout * 2,
            failed: Mutex::new(None),
            connected_to: Mutex::new(None),
        })
    }

    /// A connection to the master the sentinels name now. For a call, fails
    /// at once, with the last search's reason, if a call's search failed
    /// less than [`SEARCH_PAUSE`] ago; a search in the background does not
    /// wait that out, nor count.
    pub(crate) async fn connect(
        &self,
        search: Search,
    ) -> Result<MultiplexedConnection, RedisStoreError> {
        if search == Search::ForCall
            && let Some(reason) = self.recent_failure()
        {
            return Err(self.no_master(&reason));
        }
        let find = async {
            let master = self.client.lock().await.async_get_client().await?;
            let connection = self.open(&master).await?;
            Ok::<_, redis::RedisError>((connection, master.get_connection_info().addr().clone()))
        };
        let reason = match tokio::time::timeout(self.search_timeout, find).await {
            Ok(Ok((connection, address))) => {
                *lock(&self.connected_to) = Some(address);
                return Ok(connection);
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {:?}", self.search_timeout),
        };
        if search == Search::ForCall {
            *lock(&self.failed) = Some((Instant::now(), reason.clone()));
        }
        Err(self.no_master(&reason))
    }

    /// A connection to `master`: in RESP3, whose connection says when it
    /// closes (a restart), where the master speaks it; else (a master older
    /// than Redis 6 refuses `HELLO`) in RESP2, which does not.
    async fn open(&self, master: &redis::Client) -> redis::RedisResult<MultiplexedConnection> {
        let info = master.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let resp3 = redis::Client::open(info.set_redis_settings(settings))?;
        match resp3
            .get_multiplexed_async_connection_with_config(&self.config)
            .await
        {
            Err(error)
                if error.kind() != redis::ErrorKind::Io
                    && !error.is_connection_refusal()
                    && !error.is_timeout() =>
            {
                let plain = self
                    .config
                    .clone()
                    .set_push_sender(|_: redis::PushInfo| Ok::<(), std::convert::Infallible>(()));
                master
                    .get_multiplexed_async_connection_with_config(&plain)
                    .await
            }
            attempt => attempt,
        }
    }

    /// Whether the sentinels now name a master other than the one last
    /// connected to. `false` when they cannot be asked: a dead master is
    /// noticed by the calls that fail on it.
    pub(crate) async fn has_moved(&self) -> bool {
        let ask = async { self.client.lock().await.async_get_client().await };
        match tokio::time::timeout(self.search_timeout, ask).await {
            Ok(Ok(master)) => {
                lock(&self.connected_to).as_ref() != Some(master.get_connection_info().addr())
            }
            _ => false,
        }
    }

    fn recent_failure(&self) -> Option<String> {
        match &*lock(&self.failed) {
            Some((at, reason)) if at.elapsed() < SEARCH_PAUSE => Some(reason.clone()),
            _ => None,
        }
    }

    fn no_master(&self, reason: &str) -> RedisStoreError {
        RedisStoreError::from(redis::RedisError::from((
            redis::ErrorKind::MasterNameNotFoundBySentinel,
            "no master to connect to",
            format!(
                "the sentinels named no reachable master for {:?} ({reason}); a failover \
                 may be under way",
                self.service
            ),
        )))
    }
}

/// The lock's data, also after a panic elsewhere (it holds plain values).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
