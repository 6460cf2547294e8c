//! The certificates a TLS connection trusts: the system's roots, or a CA
//! of the program's own (a file, PEM bytes, or the URL's `sslrootcert`),
//! read when the backend connects; and the rustls connector made of them.

#[cfg(feature = "tls")]
use crate::error::PostgresError;
use std::path::PathBuf;

/// PEM bytes given in code, or a file read when the backend connects.
#[derive(Clone)]
// Without the `tls` feature nothing reads them.
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(crate) enum Pem {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pem::Bytes(_) => f.write_str("<PEM bytes>"),
            Pem::File(path) => write!(f, "{}", path.display()),
        }
    }
}

#[cfg(feature = "tls")]
impl Pem {
    /// The PEM bytes; a configuration error naming the file if it cannot
    /// be read.
    fn read(&self) -> Result<Vec<u8>, PostgresError> {
        match self {
            Pem::Bytes(bytes) => Ok(bytes.clone()),
            Pem::File(path) => std::fs::read(path).map_err(|e| {
                PostgresError::config(format!(
                    "cannot read the CA certificate file {}: {e}",
                    path.display()
                ))
            }),
        }
    }
}

/// A rustls connector that checks the server's certificate, and that it
/// names the host connected to, against `roots` (the system's root
/// certificates when `None`), with rustls's ring provider (chosen here,
/// not installed as the process's default).
#[cfg(feature = "tls")]
pub(crate) fn connector(
    roots: Option<&Pem>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, PostgresError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut store = rustls::RootCertStore::empty();
    match roots {
        Some(pem) => {
            let bytes = pem.read()?;
            for cert in CertificateDer::pem_slice_iter(&bytes) {
                let cert = cert.map_err(|e| {
                    PostgresError::config(format!("the CA certificates {pem:?} are not PEM: {e}"))
                })?;
                store.add(cert).map_err(|e| {
                    PostgresError::config(format!("a CA certificate of {pem:?} is refused: {e}"))
                })?;
            }
            if store.is_empty() {
                return Err(PostgresError::config(format!(
                    "{pem:?} holds no CA certificate"
                )));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            // Unreadable ones are skipped, as by every client that reads
            // the system's store.
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(PostgresError::config(
                    "no root certificate in the system's store: give the server's CA with \
                     `tls_ca_file`, `tls_ca_pem` or the URL's sslrootcert",
                ));
            }
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PostgresError::config(format!("rustls refused its own defaults: {e}")))?
        .with_root_certificates(store)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
