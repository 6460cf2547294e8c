//! The rate-limit service and a client, as Envoy calls it, with no proxy:
//! `cargo run -p tollgate-rls --example envoy_call`.
//!
//! Serves envoyproxy/ratelimit's own `basic_config.yaml` over the memory
//! store on a loopback port, then asks `ShouldRateLimit` for the
//! descriptor `key2=value2` (30 a minute) until it is over, printing each
//! answer: the code, what remains, and the fields Envoy would add to the
//! client's response.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::path::Path;
use tollgate_rls::RateLimitServer;
use tollgate_rls::config::Config;
use tollgate_store::MemoryStore;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/envoy-ratelimit/basic_config.yaml");
    let config = Config::load(&path)?;
    let service = RateLimitServer::new(config, MemoryStore::new()).into_service();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(
        Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true))),
    );
    println!("serving {} on grpc://{addr}", path.display());

    let mut client = RateLimitServiceClient::connect(format!("http://{addr}")).await?;
    for call in 1.. {
        let request = RateLimitRequest {
            domain: "test-domain".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "key2".to_owned(),
                    value: "value2".to_owned(),
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 1,
        };
        let answer = client.should_rate_limit(request).await?.into_inner();
        let code = Code::try_from(answer.overall_code)?;
        let remaining = answer.statuses.first().map_or(0, |s| s.limit_remaining);
        let fields: Vec<String> = answer
            .response_headers_to_add
            .iter()
            .map(|h| format!("{}: {}", h.key, h.value))
            .collect();
        println!(
            "call {call:>2}: {code:?}, {remaining} left; {}",
            fields.join("; ")
        );
        if code == Code::OverLimit {
            break;
        }
    }
    Ok(())
}
