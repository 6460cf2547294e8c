//! The tower layer works unchanged in a tonic server:
//! `Server::builder().layer(...)` with a real gRPC service on loopback and a
//! real client. (How a rejection looks to a gRPC client is tollgate-tonic's
//! business; here the fourth call must simply fail.)

use std::time::Duration;
use tollgate::{GlobalKey, RateLimitLayer};
use tollgate_core::Quota;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Endpoint, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_limits_a_tonic_server() {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let layer = RateLimitLayer::builder()
        .quota("grpc", Quota::per_minute(3))
        .key(GlobalKey)
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        let reply = client.check(HealthCheckRequest::default()).await;
        outcomes.push(reply.is_ok());
    }
    server.abort();
    assert_eq!(outcomes, [true, true, true, false]);
}
