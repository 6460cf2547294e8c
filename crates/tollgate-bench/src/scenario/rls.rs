//! The rate-limit service (`tollgate-rls`): `ShouldRateLimit` calls per
//! second and their p99 over loopback gRPC, 64 calls in flight over 1,000
//! descriptor values, with the counts in memory, in Redis, and in Redis
//! with local-first exact in front, in alternating rounds.
//!
//! The server and its client run in this process, on one multi-threaded
//! runtime (a real tonic server on a loopback port, a real tonic client
//! over one HTTP/2 connection, as Envoy's `rate_limit` filter keeps one):
//! each figure is the whole gRPC path, encoding and decoding included, on
//! both sides of a ratio. The rule, 1,000 a second per value, is never
//! exhausted by this load, so every call is decided and charged; each
//! answer is checked to be `OK`, so that no row times refusals.
//!
//! There is no anchor process here (envoyproxy/ratelimit is a Go server,
//! not on this machine): the rows compare the stores, the memory store
//! being the anchor of the others. The target: local-first exact
//! over Redis at 0.8 of memory or better. The decision core beside
//! limitador's is the `rls-core` scenario.

use crate::measure::Settings;
use crate::report::{Better, Outcome, median};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tollgate::store::{BoxStore, MemoryStore};
use tollgate_local::{LocalFirst, LocalMode};
use tollgate_redis::RedisStore;
use tollgate_rls::RateLimitServer;
use tollgate_rls::config::Config;
use tollgate_tests::redis::RedisServer;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;

/// Calls in flight.
const IN_FLIGHT: u64 = 64;
/// Distinct descriptor values.
const VALUES: u64 = 1_000;

/// The rule: every value of `client` at 1,000 a second, which this load
/// never reaches.
const CONFIG: &str = "
domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 1000
";

/// One round's figures: calls per second, and the 99th percentile of a
/// call's time in milliseconds.
#[derive(Clone, Copy, Debug)]
struct Figures {
    calls_per_second: f64,
    p99_ms: f64,
}

/// Runs the scenario; the caller has checked that `redis-server` is here.
pub fn run(settings: Settings) -> Vec<Outcome> {
    let seconds = settings.pick(3.0, 1.0);
    let rounds = settings.pick(5, 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let redis = RedisServer::start();
    let url = redis.url();
    let clients = runtime.block_on(async {
        let redis = RedisStore::builder(&url)
            .connect()
            .await
            .expect("connect to the redis-server just started");
        let local = LocalFirst::builder(
            RedisStore::builder(&url)
                .connect()
                .await
                .expect("connect to the redis-server just started"),
            LocalMode::Exact,
        )
        .build();
        [
            serve(BoxStore::new(MemoryStore::new())).await,
            serve(BoxStore::new(redis)).await,
            serve(BoxStore::new(local)).await,
        ]
    });
    // Warm each: connections made, scripts loaded, shares reserved.
    for client in &clients {
        runtime.block_on(load(client.clone(), 0.3));
    }
    let mut figures: [Vec<Figures>; 3] = Default::default();
    for round in 0..rounds {
        // A different order each round, so that no store always goes
        // first (or after the same one).
        for which in 0..3 {
            let side = (which + round) % 3;
            let measured = runtime.block_on(load(clients[side].clone(), seconds));
            figures[side].push(measured);
        }
    }
    let rate = |side: usize| {
        median(
            &figures[side]
                .iter()
                .map(|f| f.calls_per_second)
                .collect::<Vec<_>>(),
        )
    };
    let p99 = |side: usize| median(&figures[side].iter().map(|f| f.p99_ms).collect::<Vec<_>>());
    let (memory, redis, local) = (0, 1, 2);
    vec![
        Outcome::new(
            "rls gRPC: local-first exact over Redis, calls/s",
            rate(local),
            rate(memory),
            "calls/s",
            Better::Higher,
        )
        .target(0.8)
        .against("the memory store, same service"),
        Outcome::new(
            "rls gRPC: Redis, calls/s",
            rate(redis),
            rate(memory),
            "calls/s",
            Better::Higher,
        )
        .against("the memory store, same service"),
        Outcome::new(
            "rls gRPC: local-first exact over Redis, p99",
            p99(local),
            p99(memory),
            "ms",
            Better::Lower,
        )
        .against("the memory store, same service"),
        Outcome::new(
            "rls gRPC: Redis, p99",
            p99(redis),
            p99(memory),
            "ms",
            Better::Lower,
        )
        .against("the memory store, same service"),
    ]
}

/// A `tollgate-rls` service over `store` on a loopback port, and a client
/// of it.
async fn serve(store: BoxStore) -> RateLimitServiceClient<Channel> {
    let config = Config::from_yaml("bench.yaml", CONFIG).expect("the bench's rule loads");
    let service = RateLimitServer::new(config, store).into_service();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true))),
    );
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the service just started")
}

/// [`IN_FLIGHT`] tasks calling `client` for `seconds`, each over the
/// values in its own pseudo-random order: the calls per second and the
/// p99 of their times.
async fn load(client: RateLimitServiceClient<Channel>, seconds: f64) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|t| {
            let (mut client, stop) = (client.clone(), stop.clone());
            tokio::spawn(async move {
                let mut times = Vec::with_capacity(100_000);
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    // An LCG: a different value each call.
                    i = i
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let request = call((i >> 33) % VALUES);
                    let asked = Instant::now();
                    let answer = client
                        .should_rate_limit(request)
                        .await
                        .expect("the service answers")
                        .into_inner();
                    times.push(asked.elapsed());
                    assert_eq!(
                        answer.overall_code,
                        Code::Ok as i32,
                        "a refusal: the rule must never be reached by this load"
                    );
                }
                times
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut times = Vec::new();
    for task in tasks {
        times.extend(task.await.expect("a task ends"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    times.sort_unstable();
    let p99 = times
        .get(times.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or_default();
    Figures {
        calls_per_second: times.len() as f64 / elapsed,
        p99_ms: p99.as_secs_f64() * 1_000.0,
    }
}

/// A call with one descriptor, `client` = `value`.
fn call(value: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".to_owned(),
                value: format!("{value:04}"),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}
