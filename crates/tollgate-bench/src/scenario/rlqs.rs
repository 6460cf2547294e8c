//! The quota service (RLQS, `tollgate_rls::QuotaServer`): what one core
//! of the server holds, and what its data planes admit against the bound.
//!
//! - **Reports served**: the server on a runtime of one worker thread (one
//!   core), on the memory store; 64 data planes, each a stream with 16
//!   buckets of their own, each sending a report of all its buckets and
//!   waiting for the answer, again and again, from a runtime of its own.
//!   The figure is bucket usages answered per second: since Envoy reports
//!   every bucket every 5 s, one core holds five times as many buckets (a
//!   stream's bucket each) at that interval. The anchor, in alternating
//!   rounds, is the same one-core server answering `ShouldRateLimit`
//!   calls (64 in flight, one descriptor each): what a per-request
//!   service decides in the same time.
//! - **Admitted against N + K**: 8 data planes that enforce assignments
//!   as Envoy's filter does (`tollgate_tests::envoy_quota`), each asking
//!   every 2 ms (500 a second) on one bucket of 100 a second and reporting
//!   every second, for 5 s: the most admitted in one window, over
//!   N + K = 108 (target: at most 1); then the same with the data planes
//!   spread over two servers over one memory store (each server claims
//!   its part of every window in the store).

use crate::measure::Settings;
use crate::report::{Better, Outcome, median};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tollgate::store::MemoryStore;
use tollgate_rls::config::Config;
use tollgate_rls::{QuotaServer, RateLimitServer};
use tollgate_tests::envoy_quota::{Assignment, DataPlaneBucket, Replacement, assignment_of};
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// Streams, and buckets on each, for the reports row.
const STREAMS: usize = 64;
const BUCKETS: usize = 16;

const CONFIG: &str = "
domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 100000
  - key: flood
    rate_limit:
      unit: second
      requests_per_unit: 100
";

/// Runs the scenario.
pub fn run(settings: Settings) -> Vec<Outcome> {
    let seconds = settings.pick(3.0, 1.0);
    let rounds = settings.pick(3, 2);
    // The server: one core.
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let clients = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store = MemoryStore::new();
    let addr = server.block_on(serve(store.clone()));
    let other = server.block_on(serve(store));
    let (mut reports, mut calls) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for which in [round % 2, (round + 1) % 2] {
            match which {
                0 => reports.push(clients.block_on(reports_per_second(&addr, seconds))),
                _ => calls.push(clients.block_on(calls_per_second(&addr, seconds))),
            }
        }
    }
    let most = clients.block_on(most_admitted_in_a_window(
        std::slice::from_ref(&addr),
        "one",
    ));
    let most_of_two = clients.block_on(most_admitted_in_a_window(&[addr, other], "two"));
    vec![
        Outcome::new(
            "rlqs: bucket usages answered, one server core",
            median(&reports),
            median(&calls),
            "per second",
            Better::Higher,
        )
        .against("ShouldRateLimit decisions, the same one-core server"),
        Outcome::new(
            "rlqs: most admitted in a window, 8 data planes, N + K = 108",
            most as f64,
            108.0,
            "requests",
            Better::Lower,
        )
        .target(1.0)
        .against("the bound, N + K"),
        Outcome::new(
            "rlqs: most admitted in a window, 8 data planes on two servers, N + K = 108",
            most_of_two as f64,
            108.0,
            "requests",
            Better::Lower,
        )
        .target(1.0)
        .against("the bound, N + K"),
    ]
}

/// Both services over `store` on a loopback port, on the current
/// runtime: the address.
async fn serve(store: MemoryStore) -> String {
    let config = Config::from_yaml("bench.yaml", CONFIG).expect("the bench's rules load");
    let rls = RateLimitServer::new(config, store.clone());
    let quota = QuotaServer::new(rls.rules(), store);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(
        Server::builder()
            .add_service(rls.into_service())
            .add_service(quota.into_service())
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true))),
    );
    format!("http://{addr}")
}

fn bucket(key: &str, value: String) -> BucketId {
    BucketId {
        bucket: [(key.to_owned(), value)].into(),
    }
}

/// A report of `buckets`, each with one request admitted a second ago.
fn report(buckets: &[BucketId]) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "bench".to_owned(),
        bucket_quota_usages: buckets
            .iter()
            .map(|id| BucketQuotaUsage {
                bucket_id: Some(id.clone()),
                time_elapsed: Some(ProtoDuration {
                    seconds: 1,
                    nanos: 0,
                }),
                num_requests_allowed: 1,
                num_requests_denied: 0,
            })
            .collect(),
    }
}

/// [`STREAMS`] streams of [`BUCKETS`] buckets each, reporting and waiting
/// for each answer, for `seconds`: bucket usages answered per second.
async fn reports_per_second(addr: &str, seconds: f64) -> f64 {
    let answered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for stream in 0..STREAMS {
        let (answered, stop, addr) = (answered.clone(), stop.clone(), addr.to_owned());
        tasks.push(tokio::spawn(async move {
            let buckets: Vec<BucketId> = (0..BUCKETS)
                .map(|b| bucket("client", format!("s{stream}-b{b}")))
                .collect();
            let mut client = RateLimitQuotaServiceClient::connect(addr)
                .await
                .expect("connect");
            let (sender, outgoing) = tokio::sync::mpsc::channel(2);
            let mut inbound = client
                .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
                .await
                .expect("a stream")
                .into_inner();
            while !stop.load(Ordering::Relaxed) {
                sender.send(report(&buckets)).await.expect("sent");
                let answer = inbound.message().await.expect("answered").expect("open");
                check(&answer, BUCKETS);
                answered.fetch_add(BUCKETS as u64, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let counted = answered.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a stream ends");
    }
    counted as f64 / elapsed
}

/// Every bucket of a report answered with a token bucket: the figure is
/// of assignments made, not of errors.
fn check(answer: &RateLimitQuotaResponse, buckets: usize) {
    assert_eq!(answer.bucket_action.len(), buckets, "one action a bucket");
    for action in &answer.bucket_action {
        let Some(bucket_action::BucketAction::QuotaAssignmentAction(assign)) =
            &action.bucket_action
        else {
            panic!("not an assignment: {action:?}");
        };
        let strategy = assign.rate_limit_strategy.and_then(|s| s.strategy);
        assert!(
            matches!(strategy, Some(Strategy::TokenBucket(_))),
            "{strategy:?}"
        );
    }
}

/// 64 `ShouldRateLimit` calls in flight for `seconds`: decisions per
/// second.
async fn calls_per_second(addr: &str, seconds: f64) -> f64 {
    let client = RateLimitServiceClient::connect(addr.to_owned())
        .await
        .expect("connect");
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..64u64)
        .map(|task| {
            let (mut client, done, stop) = (client.clone(), done.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = task;
                while !stop.load(Ordering::Relaxed) {
                    i += 64;
                    let request = RateLimitRequest {
                        domain: "bench".to_owned(),
                        descriptors: vec![RateLimitDescriptor {
                            entries: vec![Entry {
                                key: "client".to_owned(),
                                value: format!("c{}", i % 1_000),
                            }],
                            ..RateLimitDescriptor::default()
                        }],
                        hits_addend: 0,
                    };
                    client.should_rate_limit(request).await.expect("answered");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let counted = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a task ends");
    }
    counted as f64 / elapsed
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The assignments an answer carries, as the filter reads them.
fn assignments(answer: &RateLimitQuotaResponse) -> Vec<(Assignment, u64)> {
    answer
        .bucket_action
        .iter()
        .filter_map(assignment_of)
        .collect()
}

/// 8 data planes flooding the bucket `flood=value` of 100 a second for
/// 5 s, plane `i` on the server `addrs[i]` (modulo their number): the most
/// admitted, all together, in one window.
async fn most_admitted_in_a_window(addrs: &[String], value: &str) -> u64 {
    let windows: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    let mut tasks = Vec::new();
    for plane in 0..8 {
        let addr = addrs[plane % addrs.len()].clone();
        let (windows, value) = (windows.clone(), value.to_owned());
        tasks.push(tokio::spawn(async move {
            let id = bucket("flood", value.clone());
            let held = Arc::new(Mutex::new(DataPlaneBucket::denying_unassigned(
                Replacement::FullUnlessEmpty,
            )));
            let mut client = RateLimitQuotaServiceClient::connect(addr)
                .await
                .expect("connect");
            let (sender, outgoing) = tokio::sync::mpsc::channel(4);
            let mut inbound = client
                .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
                .await
                .expect("a stream")
                .into_inner();
            let applied = held.clone();
            tokio::spawn(async move {
                while let Ok(Some(answer)) = inbound.message().await {
                    let now = now_us();
                    for (assignment, ttl) in assignments(&answer) {
                        applied
                            .lock()
                            .expect("the bucket")
                            .assign(assignment, ttl, now);
                    }
                }
            });
            let usage = |(allowed, denied): (u64, u64), seconds: i64| RateLimitQuotaUsageReports {
                domain: "bench".to_owned(),
                bucket_quota_usages: vec![BucketQuotaUsage {
                    bucket_id: Some(id.clone()),
                    time_elapsed: Some(ProtoDuration { seconds, nanos: 0 }),
                    num_requests_allowed: allowed,
                    num_requests_denied: denied,
                }],
            };
            let started = Instant::now();
            let mut next_report = started;
            let mut first = true;
            while started.elapsed() < Duration::from_secs(5) {
                let now = now_us();
                let admitted = held.lock().expect("the bucket").request(now);
                if admitted {
                    *windows
                        .lock()
                        .expect("the counts")
                        .entry(now / 1_000_000)
                        .or_default() += 1;
                }
                if first || Instant::now() >= next_report {
                    let counts = held.lock().expect("the bucket").report();
                    let _ = sender.send(usage(counts, i64::from(!first))).await;
                    next_report += Duration::from_secs(1);
                    first = false;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("a data plane ends");
    }
    let windows = windows.lock().expect("the counts");
    windows.values().copied().max().unwrap_or(0)
}
