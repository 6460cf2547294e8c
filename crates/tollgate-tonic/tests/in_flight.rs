//! An in-flight limit in a real tonic server, with a real tonic client:
//! a server-streaming call (the health service's `Watch`, whose stream
//! never ends by itself) holds its slot for the life of the stream, other
//! calls of the client are refused `RESOURCE_EXHAUSTED` meanwhile, and the
//! slot comes back when the client drops the stream.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tollgate::Key;
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

/// How long any one wait may take before the test fails.
const STEP: Duration = Duration::from_secs(10);

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

async fn check(client: &mut HealthClient<Channel>) -> Result<(), tonic::Status> {
    client
        .check(HealthCheckRequest::default())
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_holds_its_slot_until_the_client_drops_it() {
    let layer = tollgate_tonic::in_flight().max_in_flight(1).build();
    let (slots, limit) = (layer.slots().clone(), layer.limit().clone());
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let mut client = client(addr).await;
    let me = Key::from(IpAddr::from([127, 0, 0, 1]));

    // A unary call takes the slot and gives it back when it ends.
    check(&mut client).await.expect("the first call passes");
    assert_eq!(slots.in_flight(&limit, &me), 0);

    // The stream starts and sends its first message; it keeps the slot.
    let mut stream = client
        .watch(HealthCheckRequest::default())
        .await
        .expect("the stream starts")
        .into_inner();
    let first = tokio::time::timeout(STEP, stream.message())
        .await
        .expect("a first message in time")
        .expect("a message")
        .expect("not the end");
    assert_eq!(first.status, 1, "SERVING");
    assert_eq!(slots.in_flight(&limit, &me), 1);

    let refused = check(&mut client)
        .await
        .expect_err("the stream holds the slot");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(
        refused.message().contains("in-flight"),
        "{}",
        refused.message()
    );
    assert_eq!(
        refused.metadata().get("ratelimit-policy").unwrap(),
        "\"inflight\";q=1;qu=\"concurrent-requests\""
    );
    assert_eq!(
        refused.metadata().get("ratelimit").unwrap(),
        "\"inflight\";r=0"
    );
    let details = refused.get_error_details();
    assert!(details.retry_info().is_none());
    assert_eq!(
        details.quota_failure().expect("a quota failure").violations[0].quota_value,
        1
    );

    // Still held a while later: the slot lasts as long as the stream.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(slots.in_flight(&limit, &me), 1);

    // The client cancels the stream: the slot comes back.
    drop(stream);
    let deadline = Instant::now() + STEP;
    while slots.in_flight(&limit, &me) != 0 {
        assert!(Instant::now() < deadline, "the slot did not come back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check(&mut client).await.expect("the slot is back");
    server.abort();
}
