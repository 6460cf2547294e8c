//! How a store connects: timeouts, TLS, what the sentinels ask for.

use crate::tls::TlsSettings;
use redis::AsyncConnectionConfig;
use std::time::Duration;

/// How to connect; see [`RedisStoreBuilder`](crate::RedisStoreBuilder).
#[derive(Clone, Debug)]
pub(crate) struct ConnectOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Option<Duration>,
    pub(crate) reconnect_max_delay: Duration,
    /// Certificates for `rediss://` URLs.
    pub(crate) tls: TlsSettings,
    /// What the sentinels of a `redis+sentinel://` URL ask for.
    pub(crate) sentinel_auth: SentinelAuth,
}

impl Default for ConnectOptions {
    /// Connect within 1 s, no response timeout of the client's own (the
    /// layer's store timeout bounds each check), reconnect attempts at
    /// most 500 ms apart.
    fn default() -> Self {
        ConnectOptions {
            connect_timeout: Duration::from_secs(1),
            response_timeout: None,
            reconnect_max_delay: Duration::from_millis(500),
            tls: TlsSettings::default(),
            sentinel_auth: SentinelAuth::default(),
        }
    }
}

impl ConnectOptions {
    /// The settings of one multiplexed connection.
    pub(crate) fn connection_config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(self.response_timeout)
    }
}

/// The password (and user) the sentinels ask for, when they ask for one.
#[derive(Clone, Debug, Default)]
pub(crate) struct SentinelAuth {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}
