//! `rediss://`: a real `redis-server` listening with TLS on a free port,
//! with certificates the test makes (a private CA, as self-managed Redis
//! has). The store trusts the CA named by `tls_ca_file` (or given as PEM),
//! refuses a server another CA signed, and shows a client certificate when
//! the server asks for one.

use http::{Request, StatusCode};
use std::time::Duration;
use tollgate::{HeaderKey, RateLimitLayer};
use tollgate_core::Quota;
use tollgate_redis::{RedisStore, RedisStoreBuilder, RedisStoreError};
use tollgate_tests::app::{App, behind, status};
use tollgate_tests::tls::{Certificates, TlsServer};

/// Three requests a minute for each `x-user`, through a layer on `store`.
fn limited_app(store: RedisStore) -> App {
    let layer = RateLimitLayer::builder()
        .quota("api", "3/min".parse::<Quota>().unwrap())
        .key(HeaderKey::new("x-user"))
        .store(store)
        .build();
    behind(layer)
}

/// Four requests of `user`: what they got.
async fn four_requests_of(app: &mut App, user: &str) -> Vec<StatusCode> {
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let request = Request::builder().header("x-user", user).body(()).unwrap();
        statuses.push(status(app, request).await);
    }
    statuses
}

/// Four requests of `alice` through a fresh app on `store`.
async fn four_requests(store: RedisStore) -> Vec<StatusCode> {
    four_requests_of(&mut limited_app(store), "alice").await
}

const LIMITED: [StatusCode; 4] = [
    StatusCode::OK,
    StatusCode::OK,
    StatusCode::OK,
    StatusCode::TOO_MANY_REQUESTS,
];

fn builder(url: String) -> RedisStoreBuilder {
    RedisStore::builder(url).connect_timeout(Duration::from_secs(5))
}

#[tokio::test]
async fn a_store_over_tls_limits_as_over_plain_tcp() {
    let certificates = Certificates::make();
    let server = TlsServer::start(&certificates, false);
    for host in ["localhost", "127.0.0.1"] {
        let store = builder(server.url(host))
            .tls_ca_file(certificates.ca())
            .prefix(host)
            .connect()
            .await
            .expect("connect over TLS");
        assert_eq!(four_requests(store).await, LIMITED, "{host}");
    }
    // The decisions were the server's: its scripts ran (on the TLS port,
    // the only one the store was given).
    assert!(server.server.script_calls() >= 8);
    // That port speaks only TLS.
    let plain = format!("redis://127.0.0.1:{}", server.tls_port);
    assert!(builder(plain).connect().await.is_err());
}

#[tokio::test]
async fn the_ca_can_be_given_as_pem_text() {
    let certificates = Certificates::make();
    let server = TlsServer::start(&certificates, false);
    let pem = std::fs::read(certificates.ca()).unwrap();
    let store = builder(server.url("localhost"))
        .tls_ca_pem(pem)
        .connect()
        .await
        .expect("connect over TLS");
    assert_eq!(four_requests(store).await, LIMITED);
}

#[tokio::test]
async fn a_server_another_ca_signed_is_refused() {
    let certificates = Certificates::make();
    let server = TlsServer::start(&certificates, false);
    let error = builder(server.url("localhost"))
        .tls_ca_file(certificates.other_ca())
        .connect()
        .await
        .unwrap_err();
    assert!(!error.is_config(), "{error}");
    assert!(error.to_string().contains("certificate"), "{error}");
    // Nor is it trusted by the system's roots, the default.
    let error = builder(server.url("localhost"))
        .connect()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("certificate"), "{error}");
}

#[tokio::test]
async fn a_client_certificate_is_shown_when_the_server_asks_for_one() {
    let certificates = Certificates::make();
    let server = TlsServer::start(&certificates, true);
    // Without one, the server ends the handshake.
    let refused = builder(server.url("localhost"))
        .tls_ca_file(certificates.ca())
        .connect()
        .await;
    assert!(refused.is_err());
    let (cert, key) = certificates.client();
    let store = builder(server.url("localhost"))
        .tls_ca_file(certificates.ca())
        .tls_client_cert_files(&cert, &key)
        .connect()
        .await
        .expect("connect with a client certificate");
    assert_eq!(four_requests(store).await, LIMITED);
    // The same as PEM text.
    let store = builder(server.url("localhost"))
        .tls_ca_file(certificates.ca())
        .tls_client_cert_pem(std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap())
        .prefix("pem")
        .connect()
        .await
        .expect("connect with a client certificate given as PEM");
    assert_eq!(four_requests(store).await, LIMITED);
}

#[tokio::test]
async fn certificates_that_cannot_be_used_are_configuration_errors() {
    let certificates = Certificates::make();
    let server = TlsServer::start(&certificates, false);
    let config_error = |result: Result<RedisStore, RedisStoreError>| {
        let error = result.expect_err("connected");
        assert!(error.is_config(), "{error}");
        error.to_string()
    };
    // A CA file that is not there: named in the error.
    let missing = certificates.ca().with_file_name("missing.pem");
    let error = config_error(
        builder(server.url("localhost"))
            .tls_ca_file(&missing)
            .connect()
            .await,
    );
    assert!(error.contains("missing.pem"), "{error}");
    // Certificates for a URL without TLS would be ignored: refused.
    let error = config_error(
        builder(server.server.url())
            .tls_ca_file(certificates.ca())
            .connect()
            .await,
    );
    assert!(error.contains("rediss://"), "{error}");
}

#[tokio::test]
async fn in_flight_slots_share_a_tls_store_connection() {
    use tollgate::Key;
    use tollgate::in_flight::{Acquired, InFlightLimit, SlotReply, Slots};
    use tollgate_redis::RedisSlots;

    let certificates = Certificates::make();
    let server = TlsServer::start(&certificates, false);
    let store = builder(server.url("localhost"))
        .tls_ca_file(certificates.ca())
        .connect()
        .await
        .expect("connect over TLS");
    // The URL is not used: the store's connection (and its CA) is.
    let slots = RedisSlots::builder("redis://unused.invalid:1")
        .share_connection(&store)
        .connect()
        .await
        .expect("slots on the store's connection");
    let limit = InFlightLimit::new("inflight", 1).unwrap();
    let key = Key::from("alice");
    let acquire = |slots: &RedisSlots| match slots.acquire(&limit, &key) {
        SlotReply::Pending(future) => future,
        SlotReply::Ready(_) => panic!("RedisSlots always asks Redis"),
    };
    let Acquired::Taken { permit, .. } = acquire(&slots).await.expect("Redis answers") else {
        panic!("the first slot was not free");
    };
    assert!(matches!(
        acquire(&slots).await.expect("Redis answers"),
        Acquired::Full { in_flight: 1 }
    ));
    // Held in the TLS server's Redis, where the harness sees it.
    let name = slots.redis_key(&limit, &key);
    assert!(server.server.command(&["ZCARD", &name]).starts_with(":1"));
    drop(permit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_limits_every_key_on_its_node() {
    use tollgate_tests::redis::RedisCluster;

    let certificates = Certificates::make();
    // Each node also listens with TLS, and the nodes talk to each other
    // with TLS (`tls-cluster yes`): a node then names the TLS ports of the
    // others to a client that came over TLS.
    let mut tls_ports = Vec::new();
    let cluster = RedisCluster::start_with_node_args(3, 0, |_| {
        let port = tollgate_tests::redis::free_port();
        tls_ports.push(port);
        let mut args = certificates.server_args(port, false);
        args.extend(["--tls-cluster".to_owned(), "yes".to_owned()]);
        args
    });
    let nodes: Vec<String> = tls_ports
        .iter()
        .map(|port| format!("localhost:{port}"))
        .collect();
    let url = format!("rediss+cluster://{}", nodes.join(","));
    let store = builder(url)
        .tls_ca_file(certificates.ca())
        .connect()
        .await
        .expect("connect to the cluster over TLS");
    let mut app = limited_app(store);
    // Users whose keys spread over the three masters.
    for user in 0..30 {
        let user = format!("user-{user}");
        assert_eq!(four_requests_of(&mut app, &user).await, LIMITED, "{user}");
    }
    for node in cluster.nodes() {
        assert!(node.script_calls() > 0, "a master decided nothing");
    }
}
