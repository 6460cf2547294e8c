//! What the quota service logs of bad input, in a binary of its own (a
//! log capture is the thread's, and `tracing` caches per call site whether
//! it is wanted): a stream whose reports skip bucket after bucket says so
//! once, and is served on.

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
use std::sync::Arc;
use std::time::Duration;
use tollgate_rls::config::Config;
use tollgate_rls::{QuotaServer, RateLimitServer};
use tollgate_store::{Key, MemoryStore, Policy, Store, StoreReply};
use tollgate_tests::logs::Captured;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

fn usage(pairs: &[(&str, &str)]) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }),
        ..BucketQuotaUsage::default()
    }
}

// A current-thread runtime: the server's tasks log on this thread, where
// the capture is.
#[tokio::test]
async fn a_stream_that_skips_buckets_is_warned_of_once_and_served_on() {
    let (logs, _guard) = Captured::install();
    let config = Config::from_yaml(
        "q.yaml",
        "domain: q\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 30}\n",
    )
    .unwrap();
    let store = MemoryStore::new();
    let rls = RateLimitServer::new(config, store.clone());
    let quota = QuotaServer::new(rls.rules(), store);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .add_service(quota.into_service())
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let (reports, outgoing) = tokio::sync::mpsc::channel(8);
    let mut answers = client
        .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
        .await
        .unwrap()
        .into_inner();
    // Three reports, each with buckets without entries beside a good one.
    for round in 0..3 {
        let good = format!("c{round}");
        let report = RateLimitQuotaUsageReports {
            domain: "q".to_owned(),
            bucket_quota_usages: vec![usage(&[]), usage(&[("client", &good)]), usage(&[])],
        };
        reports.send(report).await.unwrap();
        // The good bucket is answered.
        let answer = tokio::time::timeout(Duration::from_secs(5), answers.message())
            .await
            .expect("an answer in time")
            .expect("the stream goes on")
            .expect("a message");
        let ids: Vec<_> = answer
            .bucket_action
            .iter()
            .filter_map(|action| action.bucket_id.as_ref())
            .collect();
        assert_eq!(ids.len(), 1, "{answer:?}");
        assert_eq!(ids[0].bucket.get("client"), Some(&good));
    }
    let lines = logs.lines();
    let warned: Vec<_> = lines
        .iter()
        .filter(|line| line.starts_with("WARN") && line.contains("skipped"))
        .collect();
    assert_eq!(warned.len(), 1, "{lines:#?}");
}

/// A store that only counts: no refunds, no debits.
#[derive(Clone)]
struct CountsOnly(MemoryStore);

impl Store for CountsOnly {
    type Error = <MemoryStore as Store>::Error;
    type Future = <MemoryStore as Store>::Future;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.0.check(policy, key, cost)
    }
}

/// A store that cannot hold the claims by which servers share a limit is
/// named in a warning when the quota service is built (each server then
/// bounds its own data planes).
#[tokio::test]
async fn a_store_that_cannot_hold_claims_is_named_in_a_warning() {
    let (logs, _guard) = Captured::install();
    let config = Config::from_yaml(
        "q.yaml",
        "domain: q\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 30}\n",
    )
    .unwrap();
    let store = CountsOnly(MemoryStore::new());
    let rls = RateLimitServer::new(config, store.clone());
    let _quota = QuotaServer::new(rls.rules(), store);
    let lines = logs.lines();
    let warned: Vec<_> = lines
        .iter()
        .filter(|line| line.starts_with("WARN") && line.contains("CountsOnly"))
        .collect();
    assert_eq!(warned.len(), 1, "{lines:#?}");
    assert!(warned[0].contains("each server apart"), "{}", warned[0]);
}
