//! A gRPC server with a per-client limit and a stricter limit on one method,
//! and a client that reads the RetryInfo delay of a limited call, waits it
//! out, and succeeds.
//!
//! ```sh
//! cargo run -p tollgate-examples --example tonic_per_method
//! ```
//!
//! The service is gRPC's standard health service (`grpc.health.v1.Health`,
//! from tonic-health), standing in for your generated one: `Check` is
//! unary, `Watch` server-streaming. Every method but `Check`: 20 calls per
//! second per client IP. `Check`: 3 per 2 seconds per client IP, instead
//! of the 20 (a `.path` replaces the layer's own limits for its calls; to
//! keep both, list both in it).

use std::time::Duration;
use tollgate::NamedLimit;
use tollgate::core::Quota;
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Endpoint, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limits = tollgate_tonic::builder() // key: the client's IP; rejections: gRPC statuses
        .quota("per-client", Quota::per_second(20))
        .path(
            &tollgate_tonic::method("grpc.health.v1.Health", "Check"),
            [NamedLimit::new("check", "3/2s".parse()?)],
        )
        .build();

    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(
        Server::builder()
            .layer(limits)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true))),
    );
    println!("gRPC server on {addr}");

    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = HealthClient::new(channel);
    let mut waited = false;
    for call in 1..=6 {
        match client.check(HealthCheckRequest::default()).await {
            Ok(_) => println!("call {call}: OK"),
            Err(status) if status.code() == Code::ResourceExhausted => {
                println!("call {call}: {:?}: {}", status.code(), status.message());
                if let Some(failure) = status.get_details_quota_failure() {
                    for violation in &failure.violations {
                        println!(
                            "  quota failure: limit {:?} ({} calls) for {}",
                            violation.quota_id, violation.quota_value, violation.subject
                        );
                    }
                }
                let delay = status
                    .get_details_retry_info()
                    .and_then(|info| info.retry_delay)
                    .unwrap_or(Duration::from_secs(1));
                if waited {
                    break;
                }
                println!("  RetryInfo says: retry in {delay:?}; waiting");
                tokio::time::sleep(delay).await;
                waited = true;
            }
            Err(status) => return Err(status.into()),
        }
    }
    server.abort();
    Ok(())
}
