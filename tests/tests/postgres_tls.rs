//! `sslmode` against a real PostgreSQL server with TLS on, its
//! certificate signed by a test CA for `127.0.0.1` and `localhost`: the
//! store connects over TLS (the server's own view says so) when the CA is
//! trusted, from the builder or the URL's `sslrootcert`; refuses a server
//! its roots did not sign; and `sslmode=disable` stays plain.

use std::sync::Arc;
use tollgate::{Key, NamedLimit, Policy, Store};
use tollgate_cas::CasStore;
use tollgate_core::Quota;
use tollgate_postgres::PostgresBackend;
use tollgate_tests::checks::admits;
use tollgate_tests::postgres::PostgresServer;
use tollgate_tests::tls::Certificates;

fn tls_server(certificates: &Certificates) -> PostgresServer {
    let mut server = PostgresServer::not_started();
    let (cert, key) = certificates.server();
    let cert = server.own_file(&cert, "server.pem");
    let key = server.own_file(&key, "server.key");
    let settings = [
        "-c".to_owned(),
        "ssl=on".to_owned(),
        "-c".to_owned(),
        format!("ssl_cert_file={}", cert.display()),
        "-c".to_owned(),
        format!("ssl_key_file={}", key.display()),
    ];
    server.set_extra(&settings);
    server.start_now();
    server
}

/// How many of the server's sessions use TLS.
fn tls_sessions(server: &PostgresServer) -> u64 {
    server
        .sql("SELECT count(*) FROM pg_stat_ssl WHERE ssl")
        .parse()
        .unwrap()
}

async fn decides(backend: PostgresBackend) {
    let store = CasStore::new(backend);
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_minute(1),
    )]));
    let key = Key::from("tls");
    assert!(admits(&store, &policy, &key, 1).await);
    assert!(!admits(&store, &policy, &key, 1).await);
    store.reset(&policy, &key).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_connects_over_tls_to_a_server_its_ca_signed() {
    let certificates = Certificates::make();
    let server = tls_server(&certificates);
    let url = format!("{}?sslmode=require", server.url());

    let backend = PostgresBackend::builder(url.as_str())
        .tls_ca_file(certificates.ca())
        .create_schema(true)
        .connect()
        .await
        .unwrap();
    assert!(tls_sessions(&server) >= 1);
    decides(backend.clone()).await;

    // The CA from the URL, and the host by name.
    let by_name = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        server.url().replace("127.0.0.1", "localhost"),
        certificates.ca().display()
    );
    decides(PostgresBackend::connect(&by_name).await.unwrap()).await;

    // A CA that did not sign the server: refused.
    let error = PostgresBackend::builder(url.as_str())
        .tls_ca_file(certificates.other_ca())
        .connect()
        .await
        .unwrap_err();
    println!("{error}");
    assert!(!error.is_config());
    // The system's roots know nothing of the test CA either.
    assert!(PostgresBackend::connect(&url).await.is_err());

    // Plain TCP when the URL does not ask for TLS; a CA given for such a
    // URL is a configuration error.
    drop(backend);
    let plain = PostgresBackend::connect(&server.url()).await.unwrap();
    decides(plain).await;
    let error = PostgresBackend::builder(server.url())
        .tls_ca_file(certificates.ca())
        .connect()
        .await
        .unwrap_err();
    assert!(error.is_config(), "{error}");
}
