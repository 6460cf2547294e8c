//! The certificates a `rediss://` store trusts and shows: what
//! [`RedisStoreBuilder`](crate::RedisStoreBuilder)'s `tls_*` settings hold
//! until `connect` reads them.

use crate::RedisStoreError;
use std::path::PathBuf;

/// PEM bytes given in code, or a file read when the store connects.
#[derive(Clone)]
// Without the `tls` feature no setter makes one; the settings stay empty.
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(crate) enum Pem {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Pem {
    /// The PEM bytes; a configuration error naming the file if it cannot
    /// be read.
    #[cfg(feature = "tls")]
    fn read(&self, what: &str) -> Result<Vec<u8>, RedisStoreError> {
        match self {
            Pem::Bytes(bytes) => Ok(bytes.clone()),
            Pem::File(path) => std::fs::read(path).map_err(|e| {
                RedisStoreError::config(format!("cannot read the {what} {}: {e}", path.display()))
            }),
        }
    }
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // A client key is a secret: never shown.
            Pem::Bytes(_) => f.write_str("<PEM bytes>"),
            Pem::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The TLS settings of a store. Empty: the system's root certificates and
/// no client certificate.
#[derive(Clone, Debug, Default)]
pub(crate) struct TlsSettings {
    /// CA certificates trusted instead of the system's roots.
    pub(crate) roots: Option<Pem>,
    /// A client certificate (chain) and its private key, for servers that
    /// ask for one (`tls-auth-clients yes`).
    pub(crate) identity: Option<(Pem, Pem)>,
}

impl TlsSettings {
    /// Whether anything differs from the defaults.
    pub(crate) fn is_set(&self) -> bool {
        self.roots.is_some() || self.identity.is_some()
    }

    /// Fails with a configuration error if settings were given for a URL
    /// that does not ask for TLS: they would be silently ignored.
    pub(crate) fn check_used(&self, tls_url: bool) -> Result<(), RedisStoreError> {
        if self.is_set() && !tls_url {
            return Err(RedisStoreError::config(
                "TLS certificates were set for a URL without TLS: use rediss://, \
                 rediss+cluster:// or rediss+sentinel://",
            ));
        }
        Ok(())
    }

    /// The certificates in the form the redis client takes, files read;
    /// `None` when the defaults apply.
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> Result<Option<redis::TlsCertificates>, RedisStoreError> {
        if !self.is_set() {
            return Ok(None);
        }
        let root_cert = match &self.roots {
            Some(pem) => Some(pem.read("CA certificate file")?),
            None => None,
        };
        let client_tls = match &self.identity {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: cert.read("client certificate file")?,
                client_key: key.read("client key file")?,
            }),
            None => None,
        };
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

/// Makes ring rustls's process-wide crypto provider unless the program
/// chose one already: rustls refuses to pick one by itself when both of
/// its providers are compiled in (another crate may bring aws-lc-rs).
#[cfg(feature = "tls")]
pub(crate) fn use_default_crypto() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one in between: then that one is used,
        // which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
