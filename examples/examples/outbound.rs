//! Throttling the calls a program makes: a client of an API that allows 5
//! calls a second (with a burst of 2) spaces its calls out itself, instead
//! of being refused.
//!
//! ```sh
//! cargo run -p tollgate-examples --example outbound
//! ```
//!
//! The API is gRPC's standard health service (tonic-health) on loopback,
//! standing in for a partner's API with a quota. Two ways to stay under
//! its quota:
//!
//! 1. a loop that awaits `DirectLimiter::until_ready` before each call;
//! 2. the tonic `Channel` wrapped in `ThrottleLayer`: every call through
//!    the client waits its turn, whatever code makes it.
//!
//! Both use the same limiter, on the memory store; with
//! `.store(RedisStore::connect(url).await?)` on the builder, every process
//! of a fleet would share the one quota.

use std::time::{Duration, Instant};
use tollgate::{DirectLimiter, ThrottleLayer};
use tollgate_core::Quota;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Endpoint, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower::ServiceBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(
        Server::builder()
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true))),
    );
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;

    // The partner's quota: 5 calls a second, 2 at once.
    let limiter = DirectLimiter::new(Quota::per_second(5).with_burst(2)?);

    println!("1. a loop that waits for the limiter before each call");
    let mut client = HealthClient::new(channel.clone());
    let start = Instant::now();
    for call in 1..=5 {
        limiter.until_ready().await?;
        client.check(HealthCheckRequest::default()).await?;
        println!("   call {call} at {:>4} ms", start.elapsed().as_millis());
    }

    println!("2. a client whose channel waits for the limiter");
    let throttled = ServiceBuilder::new()
        .layer(ThrottleLayer::new(limiter.clone()))
        .service(channel);
    let client = HealthClient::new(throttled);
    let start = Instant::now();
    let calls: Vec<_> = (1..=5)
        .map(|call| {
            let mut client = client.clone();
            tokio::spawn(async move {
                client.check(HealthCheckRequest::default()).await?;
                Ok::<_, tonic::Status>((call, start.elapsed()))
            })
        })
        .collect();
    let mut done = Vec::new();
    for call in calls {
        done.push(call.await??);
    }
    // Five tasks at once; the limiter lets them out one by one (it is the
    // one from the loop above, so its burst is already spent).
    done.sort_by_key(|&(_, at)| at);
    for (call, at) in done {
        println!("   call {call} done at {:>4} ms", at.as_millis());
    }
    println!(
        "   {} of 2 units left now (peek, nothing charged)",
        limiter.peek_now().remaining()
    );
    server.abort();
    Ok(())
}
