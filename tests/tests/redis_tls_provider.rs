//! A program that chose rustls's crypto provider keeps it: the store
//! installs ring's only when none is installed. In a test binary of its
//! own, since the provider is global to the process.

use std::sync::Arc;
use std::time::Duration;
use tollgate_redis::RedisStore;
use tollgate_tests::tls::{Certificates, TlsServer};

#[tokio::test]
async fn the_programs_crypto_provider_is_kept() {
    // The program's choice: ring with a single cipher suite, so that it
    // differs from the provider the store would install.
    let mut chosen = rustls::crypto::ring::default_provider();
    chosen
        .cipher_suites
        .retain(|suite| suite.suite() == rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    chosen
        .install_default()
        .expect("no provider was installed yet");
    let before = rustls::crypto::CryptoProvider::get_default()
        .expect("installed")
        .clone();

    let certificates = Certificates::make();
    let server = TlsServer::start(&certificates, false);
    let store = RedisStore::builder(server.url("localhost"))
        .connect_timeout(Duration::from_secs(5))
        .tls_ca_file(certificates.ca())
        .connect()
        .await
        .expect("connect over TLS with the program's provider");
    drop(store);

    let after = rustls::crypto::CryptoProvider::get_default().expect("installed");
    assert!(Arc::ptr_eq(&before, after));
    assert_eq!(after.cipher_suites.len(), 1);
}
